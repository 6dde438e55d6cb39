// ClosedQps (transport/closed_qps.h): what a destroyed RC QP still answers. The oracle is the
// live QP: a duplicate gets from the closed QP the ACK the QP would have sent before it went.
#include "transport/closed_qps.h"

#include <gtest/gtest.h>

#include <vector>

#include "harness.h"
#include "steps.h"
#include "wire/aeth.h"
#include "wire/psn.h"

namespace uroce::test {
namespace {

using wire::Opcode;
using Bytes = std::vector<std::byte>;

constexpr std::uint32_t kEpsn = 0x5000;  // Solo's rq_psn

// A frame from `src` to the Solo's QP, parsed as the engine gets it.
struct Crafted {
  Bytes frame;
  wire::Frame f;
};
Crafted craft_to(const Solo& s, const wire::IpAddress& src, Opcode op, std::uint32_t psn,
                 ConstBytes payload = {}) {
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(op);
  h.bth.psn = psn & wire::kPsnMask;
  h.bth.ack_req = true;
  h.bth.dest_qpn = s.e.qp->qpn();
  h.reth.dma_length = static_cast<std::uint32_t>(payload.size());
  h.reth.va = s.va(0);
  h.reth.rkey = s.e.key;
  Crafted c;
  c.frame = craft(src, s.e.ip, h, payload);
  auto f = wire::parse_frame(wire::LinkType::kEthernet, c.frame);
  EXPECT_TRUE(f.ok());
  if (f.ok()) c.f = f.value();
  return c;
}

// A Solo that executed two SENDs and a WRITE (ePSN kEpsn + 3, MSN 3), and its closed state.
struct Executed {
  Solo s{QpType::kRc};
  transport::ClosedQps closed;
  Executed() {
    post_recv(s, 1, 0, 64);
    post_recv(s, 2, 64, 64);
    s.feed(Opcode::kRcSendOnly, kEpsn, pattern(8, 1));
    s.feed(Opcode::kRcSendOnly, kEpsn + 1, pattern(8, 2));
    wire::TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcRdmaWriteOnly);
    h.bth.psn = kEpsn + 2;
    h.bth.ack_req = true;
    h.reth = {s.va(256), s.e.key, 16};
    s.feed(h, pattern(16, 3));
    (void)s.drain();
    auto c = transport::closed_state(*s.e.qp, s.now);
    EXPECT_TRUE(c.has_value());
    if (c) closed.add(*c);
  }
};

wire::TransportHeaders decode(const transport::TxPacket& tx) {
  Bytes roce(tx.header_span().begin(), tx.header_span().end());
  roce.resize(roce.size() + 4);  // an ICRC's room: parse_roce takes the UDP payload
  auto p = wire::parse_roce(roce);
  EXPECT_TRUE(p.ok());
  return p.ok() ? wire::decode_headers(p.value()) : wire::TransportHeaders{};
}

TEST(ClosedQps, ADuplicateGetsTheAckTheLiveQpWouldHaveSent) {
  Executed x;
  for (std::uint32_t psn : {kEpsn, kEpsn + 1, kEpsn + 2}) {
    const Opcode op = psn == kEpsn + 2 ? Opcode::kRcRdmaWriteOnly : Opcode::kRcSendOnly;
    Crafted c = craft_to(x.s, x.s.peer, op, psn, pattern(psn == kEpsn + 2 ? 16 : 8, 9));
    transport::TxPacket ack;
    ASSERT_TRUE(x.closed.answer(x.s.now, c.f.roce, x.s.peer, ack)) << std::hex << psn;
    // The live QP, given the same duplicate:
    x.s.feed_from(x.s.peer, wire::decode_headers(c.f.roce), c.f.roce.payload);
    auto live = x.s.drain();
    ASSERT_EQ(live.size(), 1u);
    EXPECT_EQ(decode(ack), live[0].h);
    EXPECT_EQ(ack.av, live[0].av);
    EXPECT_EQ(decode(ack).bth.dest_qpn, Solo::kPeerQpn);
    EXPECT_EQ(decode(ack).bth.psn, kEpsn + 2);
    EXPECT_EQ(decode(ack).aeth.msn, 3u);
  }
}

TEST(ClosedQps, ANewRequestAReadAnotherHostOrAnotherQpGetNothing) {
  Executed x;
  transport::TxPacket ack;
  // Not executed: the expected PSN and beyond.
  for (std::uint32_t psn : {kEpsn + 3, kEpsn + 4, kEpsn + 0x7fffff}) {
    Crafted c = craft_to(x.s, x.s.peer, Opcode::kRcSendOnly, psn, pattern(8, 1));
    EXPECT_FALSE(x.closed.answer(x.s.now, c.f.roce, x.s.peer, ack)) << std::hex << psn;
  }
  // A duplicate READ (its memory may be gone) or atomic: no.
  Crafted read = craft_to(x.s, x.s.peer, Opcode::kRcRdmaReadRequest, kEpsn);
  EXPECT_FALSE(x.closed.answer(x.s.now, read.f.roce, x.s.peer, ack));
  // From a third host: no.
  const auto other = wire::IpAddress::v4(0x0a000009);
  Crafted spoof = craft_to(x.s, other, Opcode::kRcSendOnly, kEpsn, pattern(8, 1));
  EXPECT_FALSE(x.closed.answer(x.s.now, spoof.f.roce, other, ack));
  // For another QP: no.
  Crafted c = craft_to(x.s, x.s.peer, Opcode::kRcSendOnly, kEpsn, pattern(8, 1));
  wire::RocePacket p = c.f.roce;
  Bytes bytes(p.bytes.begin(), p.bytes.end());
  bytes[5] = std::byte{0x7e};  // DestQP's top byte
  auto q = wire::parse_roce(bytes);
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(x.closed.answer(x.s.now, q.value(), x.s.peer, ack));
  // An ACK (a response) for it: no.
  Crafted resp = craft_to(x.s, x.s.peer, Opcode::kRcAcknowledge, kEpsn);
  EXPECT_FALSE(x.closed.answer(x.s.now, resp.f.roce, x.s.peer, ack));
}

TEST(ClosedQps, ItIsAnsweredForThePeersRetryBudgetOnly) {
  Executed x;  // timeout 14, retry_cnt 7: 8 x 67.1 ms = 537 ms, raised to kMinClosedLife
  transport::TxPacket ack;
  Crafted c = craft_to(x.s, x.s.peer, Opcode::kRcSendOnly, kEpsn, pattern(8, 1));
  const Instant end = x.s.now + transport::kMinClosedLife;
  EXPECT_EQ(x.closed.last_until(), end);
  EXPECT_TRUE(x.closed.answer(end + Duration::ns(-1), c.f.roce, x.s.peer, ack));
  EXPECT_EQ(x.closed.live(end + Duration::ns(-1)), 1u);
  EXPECT_FALSE(x.closed.answer(end, c.f.roce, x.s.peer, ack));
  EXPECT_EQ(x.closed.live(end), 0u);
  EXPECT_TRUE(x.closed.last_until().is_never());

  // timeout 18 (1.07 s), retry_cnt 6: 7.5 s.
  x.s.set(18, 6, 7);
  auto c18 = transport::closed_state(*x.s.e.qp, x.s.now);
  ASSERT_TRUE(c18.has_value());
  EXPECT_EQ(c18->until - x.s.now, Duration::ns(4096) * (1 << 18) * 7);
  // No timeout (0, infinite) and a long one are kept kMaxClosedLife.
  x.s.set(0, 7, 7);
  EXPECT_EQ(transport::closed_state(*x.s.e.qp, x.s.now)->until - x.s.now,
            transport::kMaxClosedLife);
  x.s.set(30, 7, 7);
  EXPECT_EQ(transport::closed_state(*x.s.e.qp, x.s.now)->until - x.s.now,
            transport::kMaxClosedLife);
}

TEST(ClosedQps, OnlyAnRcQpThatCouldReceiveLeavesAnything) {
  Solo uc(QpType::kUc);
  EXPECT_FALSE(transport::closed_state(*uc.e.qp, uc.now).has_value());
  Executed x;
  QpAttr a;
  a.qp_state = QpState::kErr;
  x.s.e.qp->modify(a, kQpState, x.s.e.qp->path());
  EXPECT_FALSE(transport::closed_state(*x.s.e.qp, x.s.now).has_value());
}

TEST(ClosedQps, TheTableKeepsTheNewestEntries) {
  transport::ClosedQps t;
  transport::ClosedQp q;
  q.until = Instant::from_ns(1'000'000'000);
  for (std::uint32_t i = 0; i < transport::ClosedQps::kMaxEntries + 10; ++i) {
    q.qpn = 0x100 + i;
    t.add(q);
  }
  EXPECT_EQ(t.live(Instant::from_ns(0)), transport::ClosedQps::kMaxEntries);
  // The same QP again replaces its entry.
  q.qpn = 0x100 + transport::ClosedQps::kMaxEntries;
  t.add(q);
  EXPECT_EQ(t.live(Instant::from_ns(0)), transport::ClosedQps::kMaxEntries);
}

}  // namespace
}  // namespace uroce::test

// The source-address check of connected QPs (rxe_recv.c check_addr()): an RC or UC QP takes
// packets only from the address of its path. A third host that knows the QPN and the PSN can
// neither write memory, complete or fail WQEs, nor make the QP NAK, retry or slow down. UD takes
// datagrams from anyone.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "harness.h"
#include "steps.h"
#include "wire/aeth.h"
#include "wire/psn.h"

namespace uroce::test {
namespace {

using wire::Opcode;
using Bytes = std::vector<std::byte>;

constexpr std::uint32_t kSqPsn = 0x1000;  // Solo's first send PSN
constexpr std::uint32_t kEpsn = 0x5000;   // Solo's rq_psn
// Solo's QP is 10.0.0.1 and its peer 10.0.0.2.
const wire::IpAddress kThird = wire::IpAddress::v4(0x0a000003);

wire::TransportHeaders aeth(std::uint32_t psn, std::uint8_t syndrome) {
  wire::TransportHeaders h = request_headers(Opcode::kRcAcknowledge, psn);
  h.bth.ack_req = false;
  h.aeth.syndrome = syndrome;
  h.aeth.msn = 2;
  return h;
}

bool all_zero(const Solo& s, std::size_t off, std::size_t n) {
  const auto b = s.e.buf.begin() + static_cast<std::ptrdiff_t>(off);
  return std::all_of(b, b + static_cast<std::ptrdiff_t>(n),
                     [](std::byte x) { return x == std::byte{0}; });
}

TEST(SourceAddress, RcRequestsFromAThirdHostTouchNothing) {
  Solo s(QpType::kRc);
  post_recv(s, 1, 8192, 64);
  const Bytes data = pattern(256, 5);
  // An RDMA WRITE at the expected PSN with a valid rkey and address, a SEND that would take the
  // receive WQE, a future PSN that would earn a sequence NAK, a CNP and an ECN CE mark.
  s.feed_from(kThird, reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(0), s.e.key, 256), data);
  s.feed_from(kThird, request_headers(Opcode::kRcSendOnly, kEpsn), pattern(16, 6));
  s.feed_from(kThird, reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn + 3, s.va(0), s.e.key, 256),
              data);
  s.feed_from(kThird, request_headers(Opcode::kCnp, 0));
  s.feed_from(kThird, reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(0), s.e.key, 256), data,
              3);
  EXPECT_TRUE(s.drain().empty());  // no ACK, no NAK
  EXPECT_TRUE(s.e.rcq.wcs.empty());
  EXPECT_EQ(s.e.rq->size(), 1u);
  EXPECT_TRUE(all_zero(s, 0, 256));
  const transport::QpCounters& c = s.e.qp->counters();
  EXPECT_EQ(c.src_addr_mismatch, 5u);
  EXPECT_EQ(c.packets_received, 0u);
  EXPECT_EQ(c.out_of_sequence, 0u);
  EXPECT_EQ(c.seq_naks_sent, 0u);
  EXPECT_EQ(c.dropped, 0u);
  EXPECT_EQ(s.e.cc.cnps, 0);
  EXPECT_EQ(s.e.cc.ecn_ce_marks, 0);
  EXPECT_EQ(s.e.qp->state(), QpState::kRts);

  // The ePSN did not move: the peer's own WRITE at that PSN is new, executed and ACKed, and its
  // CNP reaches congestion control.
  s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(0), s.e.key, 256), data);
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kRcAcknowledge);
  EXPECT_EQ(out[0].h.bth.psn, kEpsn);
  EXPECT_EQ(out[0].h.aeth.syndrome, wire::make_ack_syndrome());
  EXPECT_EQ(slice(s.e, 0, 256), data);
  EXPECT_EQ(c.duplicate_requests, 0u);
  EXPECT_EQ(c.packets_received, 1u);
  s.feed(request_headers(Opcode::kCnp, 0));
  EXPECT_EQ(s.e.cc.cnps, 1);
  EXPECT_EQ(c.src_addr_mismatch, 5u);
}

TEST(SourceAddress, RcResponsesFromAThirdHostTouchNothing) {
  Solo s(QpType::kRc);
  for (std::uint64_t id = 1; id <= 2; ++id) {
    const Sge sge{s.va(0), 100, s.e.key};
    transport::SendRequest r = request(id, WrOpcode::kRdmaWrite, std::span(&sge, 1));
    r.remote_addr = 0x7f00'0000'1000;
    r.rkey = 0xabcd;
    ASSERT_EQ(s.e.qp->post_send(r), Errc::kOk);
  }
  ASSERT_EQ(s.drain().size(), 2u);  // PSNs 0x1000 and 0x1001
  const Instant deadline = s.e.qp->poll_timeout();
  ASSERT_FALSE(deadline.is_never());
  // An ACK of both, a sequence NAK (go back), an RNR NAK (wait), a remote access NAK (fail).
  s.feed_from(kThird, aeth(kSqPsn + 1, wire::make_ack_syndrome()));
  s.feed_from(kThird, aeth(kSqPsn, wire::make_nak_syndrome(wire::NakCode::kPsnSequenceError)));
  s.feed_from(kThird, aeth(kSqPsn, wire::make_rnr_nak_syndrome(1)));
  s.feed_from(kThird, aeth(kSqPsn, wire::make_nak_syndrome(wire::NakCode::kRemoteAccessError)));
  EXPECT_TRUE(s.drain().empty());  // no retransmission
  EXPECT_TRUE(s.e.scq.wcs.empty());
  EXPECT_EQ(s.e.qp->outstanding_send_wqes(), 2u);
  EXPECT_EQ(s.e.qp->poll_timeout(), deadline);  // no RNR wait, the ACK timer untouched
  EXPECT_EQ(s.e.qp->state(), QpState::kRts);
  const transport::QpCounters& c = s.e.qp->counters();
  EXPECT_EQ(c.src_addr_mismatch, 4u);
  EXPECT_EQ(c.seq_naks_received, 0u);
  EXPECT_EQ(c.rnr_naks_received, 0u);
  EXPECT_EQ(c.other_naks_received, 0u);
  EXPECT_EQ(c.dropped, 0u);

  // The peer's ACK completes both.
  s.feed(aeth(kSqPsn + 1, wire::make_ack_syndrome()));
  ASSERT_EQ(s.e.scq.wcs.size(), 2u);
  for (const Wc& wc : s.e.scq.wcs) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(s.e.qp->outstanding_send_wqes(), 0u);
}

TEST(SourceAddress, UcRequestsFromAThirdHostTouchNothing) {
  Solo s(QpType::kUc);
  post_recv(s, 1, 8192, 64);
  const Bytes data = pattern(1024, 7);
  s.feed_from(kThird, request_headers(Opcode::kUcSendOnly, kEpsn), pattern(16, 6));
  s.feed_from(kThird, reth_headers(Opcode::kUcRdmaWriteFirst, kEpsn, s.va(0), s.e.key, 2048), data);
  s.feed_from(kThird, request_headers(Opcode::kUcRdmaWriteLast, kEpsn + 1), data);
  EXPECT_TRUE(s.drain().empty());
  EXPECT_TRUE(s.e.rcq.wcs.empty());
  EXPECT_EQ(s.e.rq->size(), 1u);
  EXPECT_TRUE(all_zero(s, 0, 2048));
  const transport::QpCounters& c = s.e.qp->counters();
  EXPECT_EQ(c.src_addr_mismatch, 3u);
  EXPECT_EQ(c.packets_received, 0u);

  // The peer's WRITE at the expected PSN is in sequence (no resynchronization) and placed.
  s.feed(reth_headers(Opcode::kUcRdmaWriteOnly, kEpsn, s.va(0), s.e.key, 1024), data);
  EXPECT_EQ(slice(s.e, 0, 1024), data);
  EXPECT_EQ(c.out_of_sequence, 0u);
  EXPECT_EQ(c.packets_received, 1u);
}

TEST(SourceAddress, UdTakesDatagramsFromAnyHost) {
  Solo s(QpType::kUd);
  post_recv(s, 1, 0, 200);
  wire::TransportHeaders h = request_headers(Opcode::kUdSendOnly, 0);
  h.deth = wire::Deth{0x11111111, 0x99};
  s.feed_from(kThird, h, pattern(24, 3));
  ASSERT_EQ(s.e.rcq.wcs.size(), 1u);
  EXPECT_EQ(s.e.rcq.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(s.e.rcq.wcs[0].src_qp, 0x99u);
  EXPECT_EQ(s.e.qp->counters().src_addr_mismatch, 0u);
}

TEST(SourceAddress, TheCheckFollowsAPathChange) {
  Solo s(QpType::kRc);
  // RTS -> RTS with a new address vector: the third host becomes the peer.
  transport::AddressVector av = s.e.qp->path();
  av.dst = kThird;
  s.e.qp->modify(QpAttr{}, kQpAv, av);
  const Bytes data = pattern(64, 9);
  s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(0), s.e.key, 64),
         data);  // the old peer
  EXPECT_TRUE(s.drain().empty());
  EXPECT_TRUE(all_zero(s, 0, 64));
  EXPECT_EQ(s.e.qp->counters().src_addr_mismatch, 1u);
  s.feed_from(kThird, reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(0), s.e.key, 64), data);
  EXPECT_EQ(s.drain().size(), 1u);
  EXPECT_EQ(slice(s.e, 0, 64), data);
}

TEST(SourceAddress, AQpWithoutAPathDropsEverything) {
  Solo s(QpType::kRc);
  QpAttr attr;
  attr.qp_state = QpState::kReset;
  s.e.qp->modify(attr, kQpState, s.e.qp->path());
  attr.qp_state = QpState::kInit;
  s.e.qp->modify(attr, kQpState, s.e.qp->path());
  // RESET kept the old path's address; INIT has none to check against: drop, from anyone, and
  // no feedback to congestion control either.
  const Bytes data = pattern(64, 9);
  s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(0), s.e.key, 64), data);
  s.feed_from(kThird, reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(0), s.e.key, 64), data);
  s.feed(request_headers(Opcode::kCnp, 0));
  s.feed_from(kThird, request_headers(Opcode::kCnp, 0));
  EXPECT_TRUE(s.drain().empty());
  EXPECT_TRUE(all_zero(s, 0, 64));
  EXPECT_EQ(s.e.qp->counters().dropped, 4u);
  EXPECT_EQ(s.e.qp->counters().src_addr_mismatch, 0u);
  EXPECT_EQ(s.e.cc.cnps, 0);
}

}  // namespace
}  // namespace uroce::test

// XRC (IBTA 9.8.1.1, 11.2.5): an initiator (XRC_SEND) names the remote XRC SRQ in each
// request's XRCETH; a target (XRC_RECV) places each request into the SRQ it names, which must be
// of the target's XRC domain, and answers with XRC opcodes. Crafted packets to a target, and a
// pair of an initiator and a target through the harness's wire.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "harness.h"
#include "steps.h"
#include "transport/recv_queue.h"
#include "wire/aeth.h"

namespace uroce::test {
namespace {

using transport::XrcRole;
using wire::Opcode;
using Bytes = std::vector<std::byte>;

constexpr std::uint32_t kEpsn = 0x5000;  // Solo's rq_psn
constexpr std::uint32_t kXrcd = 7;
constexpr std::uint32_t kOtherXrcd = 8;

// XRC SRQs by (domain, number), each with its own receive queue and CQ.
class TestSrqs : public transport::XrcSrqTable {
 public:
  struct Srq {
    Srq() : rq(16, 2) {}
    transport::RecvQueue rq;
    CqCollector cq;
    std::uint32_t pd = 1;
    std::uint64_t serial = 0;
  };
  Srq& add(std::uint32_t xrcd, std::uint32_t srqn) {
    auto [it, fresh] = srqs_.try_emplace({xrcd, srqn});
    if (fresh) it->second.serial = ++serials_;
    return it->second;
  }
  // Destroys the SRQ (its queue and CQ with it), as ibv_destroy_srq does.
  void remove(std::uint32_t xrcd, std::uint32_t srqn) { srqs_.erase({xrcd, srqn}); }
  std::optional<transport::XrcSrqTarget> xrc_srq(std::uint32_t xrcd, std::uint32_t srqn) override {
    auto it = srqs_.find({xrcd, srqn});
    if (it == srqs_.end()) return std::nullopt;
    return transport::XrcSrqTarget{&it->second.rq, &it->second.cq, it->second.pd,
                                   it->second.serial};
  }

 private:
  std::map<std::pair<std::uint32_t, std::uint32_t>, Srq> srqs_;
  std::uint64_t serials_ = 0;
};

wire::TransportHeaders xrc_request(Opcode op, std::uint32_t psn, std::uint32_t srqn) {
  wire::TransportHeaders h = request_headers(op, psn);
  h.xrc_srqn = srqn;
  return h;
}

void post_srq(TestSrqs::Srq& q, const Endpoint& e, std::uint64_t id, std::size_t off,
              std::uint32_t len) {
  const Sge s = sge(e, off, len);
  ASSERT_EQ(q.rq.post(id, std::span(&s, 1)), Errc::kOk);
}

struct Target {
  TestSrqs srqs;
  Solo s{QpType::kRc,
         1024,
         0x1000,
         kEpsn,
         Endpoint::default_cap(),
         XrcSetup{XrcRole::kRecv, &srqs, kXrcd}};
};

TEST(Xrc, TargetPlacesASendIntoTheSrqTheXrcEthNames) {
  Target t;
  TestSrqs::Srq& a = t.srqs.add(kXrcd, 0x31);
  TestSrqs::Srq& b = t.srqs.add(kXrcd, 0x32);
  post_srq(a, t.s.e, 1, 0, 256);
  post_srq(b, t.s.e, 2, 4096, 256);
  const Bytes data = pattern(100, 3);
  t.s.feed(xrc_request(Opcode::kXrcSendOnly, kEpsn, 0x32), data);
  const auto out = t.s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kXrcAcknowledge);  // XRC answers with XRC opcodes
  EXPECT_EQ(out[0].h.aeth.syndrome, wire::make_ack_syndrome());
  EXPECT_EQ(out[0].h.bth.psn, kEpsn);
  EXPECT_EQ(a.rq.size(), 1u);  // the other SRQ is untouched
  EXPECT_TRUE(a.cq.wcs.empty());
  EXPECT_TRUE(b.rq.empty());
  ASSERT_EQ(b.cq.wcs.size(), 1u);
  EXPECT_EQ(b.cq.wcs[0].wr_id, 2u);
  EXPECT_EQ(b.cq.wcs[0].byte_len, 100u);
  EXPECT_EQ(b.cq.wcs[0].qp_num, t.s.e.qp->qpn());  // the target QP (as mlx5 reports it)
  EXPECT_EQ(b.cq.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(t.s.e.buf.data() + 4096, data.data(), data.size()), 0);
  EXPECT_TRUE(t.s.e.rcq.wcs.empty());  // the QP's own CQ sees nothing
  EXPECT_EQ(t.s.e.qp->counters().xrc_bad_srqn, 0u);
}

TEST(Xrc, TargetKeepsAMultiPacketSendInOneSrq) {
  Target t;
  TestSrqs::Srq& q = t.srqs.add(kXrcd, 0x31);
  post_srq(q, t.s.e, 9, 0, 4096);
  const Bytes data = pattern(2500, 5);
  const ConstBytes d(data);
  t.s.feed(xrc_request(Opcode::kXrcSendFirst, kEpsn, 0x31), d.first(1024));
  t.s.feed(xrc_request(Opcode::kXrcSendMiddle, kEpsn + 1, 0x31), d.subspan(1024, 1024));
  t.s.feed(xrc_request(Opcode::kXrcSendLastImm, kEpsn + 2, 0x31), d.subspan(2048));
  ASSERT_EQ(q.cq.wcs.size(), 1u);
  EXPECT_EQ(q.cq.wcs[0].byte_len, 2500u);
  EXPECT_NE(q.cq.wcs[0].wc_flags & kWcWithImm, 0u);
  EXPECT_EQ(std::memcmp(t.s.e.buf.data(), data.data(), data.size()), 0);
}

TEST(Xrc, TargetWritesWithTheRethAfterTheXrcEth) {
  Target t;
  t.srqs.add(kXrcd, 0x31);
  const Bytes data = pattern(64, 9);
  wire::TransportHeaders h = xrc_request(Opcode::kXrcRdmaWriteOnly, kEpsn, 0x31);
  h.reth = wire::Reth{t.s.va(8192), t.s.e.key, 64};
  t.s.feed(h, data);
  const auto out = t.s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kXrcAcknowledge);
  EXPECT_EQ(out[0].h.aeth.syndrome, wire::make_ack_syndrome());
  EXPECT_EQ(std::memcmp(t.s.e.buf.data() + 8192, data.data(), data.size()), 0);
}

// The keys of a request are checked against the PD of the SRQ it names (the target has none).
TEST(Xrc, TargetChecksKeysAgainstTheSrqsPd) {
  Target t;
  t.srqs.add(kXrcd, 0x31).pd = 2;  // the buffer's region is in PD 1
  wire::TransportHeaders h = xrc_request(Opcode::kXrcRdmaWriteOnly, kEpsn, 0x31);
  h.reth = wire::Reth{t.s.va(0), t.s.e.key, 8};
  t.s.feed(h, pattern(8, 1));
  const auto out = t.s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.aeth.syndrome, wire::make_nak_syndrome(wire::NakCode::kRemoteAccessError));
}

void expect_invalid_request_nak(Target& t, std::uint32_t srqn) {
  TestSrqs::Srq& mine = t.srqs.add(kXrcd, 0x31);
  TestSrqs::Srq& other = t.srqs.add(kOtherXrcd, 0x77);
  post_srq(mine, t.s.e, 1, 0, 256);
  post_srq(other, t.s.e, 2, 0, 256);
  t.s.feed(xrc_request(Opcode::kXrcSendOnly, kEpsn, srqn), pattern(16, 1));
  const auto out = t.s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kXrcAcknowledge);
  EXPECT_EQ(out[0].h.aeth.syndrome, wire::make_nak_syndrome(wire::NakCode::kInvalidRequest));
  EXPECT_EQ(out[0].h.bth.psn, kEpsn);
  EXPECT_EQ(t.s.e.qp->counters().xrc_bad_srqn, 1u);
  EXPECT_EQ(t.s.e.qp->state(), QpState::kErr);  // a class C error (IBTA 9.9.3.1.3)
  // Nothing was taken from or completed into any SRQ.
  EXPECT_EQ(mine.rq.size(), 1u);
  EXPECT_EQ(other.rq.size(), 1u);
  EXPECT_TRUE(mine.cq.wcs.empty());
  EXPECT_TRUE(other.cq.wcs.empty());
}

TEST(Xrc, AnSrqOfAnotherDomainIsAnInvalidRequest) {
  Target t;
  expect_invalid_request_nak(t, 0x77);
}

TEST(Xrc, AnUnknownSrqNumberIsAnInvalidRequest) {
  Target t;
  expect_invalid_request_nak(t, 0x55);
}

TEST(Xrc, TargetDropsNonXrcRequests) {
  Target t;
  TestSrqs::Srq& q = t.srqs.add(kXrcd, 0x31);
  post_srq(q, t.s.e, 1, 0, 256);
  t.s.feed(Opcode::kRcSendOnly, kEpsn, pattern(16, 1));
  EXPECT_TRUE(t.s.drain().empty());
  EXPECT_EQ(t.s.e.qp->counters().dropped, 1u);
  EXPECT_EQ(q.rq.size(), 1u);
  // The XRC one at the same PSN goes through: the RC packet moved nothing.
  t.s.feed(xrc_request(Opcode::kXrcSendOnly, kEpsn, 0x31), pattern(16, 1));
  ASSERT_EQ(t.s.drain().size(), 1u);
  EXPECT_EQ(q.cq.wcs.size(), 1u);
}

TEST(Xrc, TargetPostsNothing) {
  Target t;
  const Sge s = sge(t.s.e, 0, 8);
  EXPECT_EQ(t.s.e.qp->post_send(request(1, WrOpcode::kSend, std::span(&s, 1))),
            Errc::kInvalidArgument);
}

// An XRC SRQ destroyed while a target QP is in the middle of a message into it (the kernel lets
// ibv_destroy_srq do that: no XRC_RECV QP holds a count on an XRC SRQ). The QP must touch nothing
// of the SRQ's again: the held WQE went with it, and the rest of the message is refused. Under
// ASan, a QP that completes its WQE into the freed SRQ's CQ fails here.
struct MidMessage {
  MidMessage() {
    TestSrqs::Srq& q = t.srqs.add(kXrcd, 0x31);
    post_srq(q, t.s.e, 9, 0, 4096);
    t.s.feed(xrc_request(Opcode::kXrcSendFirst, kEpsn, 0x31), ConstBytes(data).first(1024));
    t.s.drain();
    EXPECT_TRUE(q.rq.empty());  // the WQE is the QP's now
    t.srqs.remove(kXrcd, 0x31);
  }
  Target t;
  Bytes data = pattern(2500, 5);
};

TEST(Xrc, AnSrqDestroyedMidMessageRefusesTheRestOfIt) {
  MidMessage m;
  m.t.s.feed(xrc_request(Opcode::kXrcSendMiddle, kEpsn + 1, 0x31),
             ConstBytes(m.data).subspan(1024, 1024));
  const auto out = m.t.s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.aeth.syndrome, wire::make_nak_syndrome(wire::NakCode::kInvalidRequest));
  EXPECT_EQ(out[0].h.bth.psn, kEpsn + 1);
  EXPECT_EQ(m.t.s.e.qp->counters().xrc_bad_srqn, 1u);
  EXPECT_EQ(m.t.s.e.qp->state(), QpState::kErr);
  EXPECT_TRUE(m.t.s.e.rcq.wcs.empty());  // the WQE completes nowhere
}

TEST(Xrc, AnSrqDestroyedMidMessageLeavesNothingToFlush) {
  MidMessage m;
  QpAttr a;
  a.qp_state = QpState::kErr;
  m.t.s.e.qp->modify(a, kQpState, m.t.s.e.qp->path());
  EXPECT_EQ(m.t.s.e.qp->state(), QpState::kErr);
  EXPECT_TRUE(m.t.s.e.rcq.wcs.empty());
}

// Its number given to a new SRQ (which may even sit where the old one was): the rest of the old
// message is no first packet for the new one.
TEST(Xrc, AnSrqNumberTakenAgainMidMessageGetsNoneOfTheOldMessage) {
  MidMessage m;
  TestSrqs::Srq& fresh = m.t.srqs.add(kXrcd, 0x31);
  post_srq(fresh, m.t.s.e, 10, 8192, 4096);
  m.t.s.feed(xrc_request(Opcode::kXrcSendLast, kEpsn + 1, 0x31),
             ConstBytes(m.data).subspan(1024, 1024));
  const auto out = m.t.s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.aeth.syndrome, wire::make_nak_syndrome(wire::NakCode::kInvalidRequest));
  EXPECT_EQ(fresh.rq.size(), 1u);
  EXPECT_TRUE(fresh.cq.wcs.empty());
  EXPECT_EQ(m.t.s.e.qp->counters().xrc_bad_srqn, 0u);  // the SRQ exists; the sequence is wrong
}

// A READ's responses are read with the PD of the SRQ its request named, even when a later
// request bound another SRQ (of another PD) before they left.
TEST(Xrc, AReadIsAnsweredWithThePdOfItsOwnSrq) {
  Target t;
  t.srqs.add(kXrcd, 0x31);                     // PD 1, the buffer's
  TestSrqs::Srq& b = t.srqs.add(kXrcd, 0x32);  // PD 2
  b.pd = 2;
  post_srq(b, t.s.e, 1, 0, 0);
  fill(t.s.e, 256, 64, 7);
  wire::TransportHeaders rd = xrc_request(Opcode::kXrcRdmaReadRequest, kEpsn, 0x31);
  rd.reth = wire::Reth{t.s.va(256), t.s.e.key, 64};
  t.s.feed(rd);
  t.s.feed(xrc_request(Opcode::kXrcSendOnly, kEpsn + 1, 0x32));  // empty: binds PD 2
  const auto out = t.s.drain();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kXrcRdmaReadResponseOnly);
  EXPECT_EQ(out[0].payload, pattern(64, 7));
  EXPECT_EQ(out[1].h.aeth.syndrome, wire::make_ack_syndrome());
  ASSERT_EQ(b.cq.wcs.size(), 1u);
  EXPECT_EQ(b.cq.wcs[0].status, WcStatus::kSuccess);
}

// An initiator and a target back to back: SENDs to two SRQs, a WRITE, a READ and an atomic,
// every request with its XRCETH, every response an XRC one.
TEST(Xrc, InitiatorAndTargetCarrySendsWritesReadsAndAtomics) {
  TestSrqs srqs;
  Pair p(QpType::kRc, 1024, 0x100, 0x200, XrcSetup{XrcRole::kSend, nullptr, 0},
         XrcSetup{XrcRole::kRecv, &srqs, kXrcd});
  p.capture = true;
  p.connect();
  TestSrqs::Srq& q1 = srqs.add(kXrcd, 0x41);
  TestSrqs::Srq& q2 = srqs.add(kXrcd, 0x42);
  post_srq(q1, p.b, 11, 0, 4096);
  post_srq(q2, p.b, 12, 4096, 4096);
  fill(p.a, 0, 3000, 1);
  fill(p.b, 65536, 512, 2);
  const Sge send1 = sge(p.a, 0, 3000);
  transport::SendRequest r1 = request(1, WrOpcode::kSend, std::span(&send1, 1));
  r1.xrc_srqn = 0x42;
  const Sge send2 = sge(p.a, 0, 10);
  transport::SendRequest r2 = request(2, WrOpcode::kSend, std::span(&send2, 1));
  r2.xrc_srqn = 0x41;
  const Sge wr = sge(p.a, 0, 100);
  transport::SendRequest r3 = request(3, WrOpcode::kRdmaWrite, std::span(&wr, 1));
  r3.remote_addr = p.b.addr() + 32768;
  r3.rkey = p.b.key;
  r3.xrc_srqn = 0x41;
  const Sge rd = sge(p.a, 16384, 512);
  transport::SendRequest r4 = request(4, WrOpcode::kRdmaRead, std::span(&rd, 1));
  r4.remote_addr = p.b.addr() + 65536;
  r4.rkey = p.b.key;
  r4.xrc_srqn = 0x41;
  std::uint64_t counter = 40;
  std::memcpy(p.b.buf.data() + 49152, &counter, 8);
  const Sge fa = sge(p.a, 20480, 8);
  transport::SendRequest r5 = request(5, WrOpcode::kAtomicFetchAndAdd, std::span(&fa, 1));
  r5.remote_addr = p.b.addr() + 49152;
  r5.rkey = p.b.key;
  r5.compare_add = 2;
  r5.xrc_srqn = 0x42;
  for (const auto* r : {&r1, &r2, &r3, &r4, &r5}) ASSERT_EQ(p.a.qp->post_send(*r), Errc::kOk);
  p.run();
  ASSERT_EQ(p.a.scq.wcs.size(), 5u);
  for (const Wc& wc : p.a.scq.wcs) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  ASSERT_EQ(q2.cq.wcs.size(), 1u);
  EXPECT_EQ(q2.cq.wcs[0].byte_len, 3000u);
  ASSERT_EQ(q1.cq.wcs.size(), 1u);
  EXPECT_EQ(q1.cq.wcs[0].byte_len, 10u);
  EXPECT_EQ(slice(p.b, 4096, 3000), pattern(3000, 1));
  EXPECT_EQ(slice(p.b, 32768, 100), slice(p.a, 0, 100));
  EXPECT_EQ(slice(p.a, 16384, 512), pattern(512, 2));
  std::memcpy(&counter, p.b.buf.data() + 49152, 8);
  EXPECT_EQ(counter, 42u);
  std::memcpy(&counter, p.a.buf.data() + 20480, 8);
  EXPECT_EQ(counter, 40u);  // the original value
  // On the wire: only XRC opcodes, requests with the XRCETH of their WQE.
  int requests = 0;
  for (const auto& f : p.captured) {
    auto parsed = wire::parse_frame(wire::LinkType::kEthernet, f);
    ASSERT_TRUE(parsed.ok());
    const wire::RocePacket& pkt = parsed->roce;
    EXPECT_EQ(pkt.op->transport, wire::Transport::kXrc) << pkt.op->name;
    if (pkt.op->is(wire::kFlagRequest)) {
      ++requests;
      EXPECT_TRUE(pkt.xrceth().srqn() == 0x41 || pkt.xrceth().srqn() == 0x42);
    }
  }
  EXPECT_EQ(requests, 3 + 1 + 1 + 1 + 1);  // a 3000-byte SEND at MTU 1024 takes three packets
  EXPECT_EQ(p.b.qp->counters().xrc_bad_srqn, 0u);
}

}  // namespace
}  // namespace uroce::test

// Selective repeat (issue 39, selective_repeat.cc): the responder keeps verified out-of-order
// requests whose place validated state fixes and replays them in order; a sequence NAK with
// transport::kBthSrKeptBit asks the requester for one packet. Crafted packets to one QP (Solo)
// and two QPs with chosen frames lost (Pair).
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <map>
#include <set>
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
constexpr std::uint32_t kMtu = 256;
const std::uint8_t kSeqNak = wire::make_nak_syndrome(wire::NakCode::kPsnSequenceError);

void expect_ack(const Solo::Sent& s, std::uint32_t psn) {
  EXPECT_EQ(s.op->opcode(), Opcode::kRcAcknowledge);
  EXPECT_EQ(s.h.bth.psn, psn);
  EXPECT_EQ(s.h.aeth.syndrome, wire::make_ack_syndrome());
  EXPECT_FALSE(s.sr_kept);
}

void expect_nak(const Solo::Sent& s, std::uint32_t psn, bool kept) {
  EXPECT_EQ(s.op->opcode(), Opcode::kRcAcknowledge);
  EXPECT_EQ(s.h.bth.psn, psn);
  EXPECT_EQ(s.h.aeth.syndrome, kSeqNak);
  EXPECT_EQ(s.sr_kept, kept);
}

// A Solo responder with selective repeat on, MTU 256.
struct SrSolo : Solo {
  explicit SrSolo(bool on = true) : Solo(QpType::kRc, kMtu) { e.qp->set_selective_repeat(on); }
  // Packet `i` (0-based) of a message of `data` starting at PSN kEpsn + at: its payload and
  // its opcode among Only, First, Last and Middle.
  struct Piece {
    ConstBytes part;
    Opcode op;
    bool last;
  };
  static Piece piece(const Bytes& data, std::uint32_t i, const std::array<Opcode, 4>& ops) {
    const auto n = static_cast<std::uint32_t>((data.size() + kMtu - 1) / kMtu);
    const ConstBytes part = ConstBytes(data).subspan(
        i * kMtu, std::min<std::size_t>(kMtu, data.size() - std::size_t{i} * kMtu));
    const std::size_t k = n == 1 ? 0 : i == 0 ? 1 : i + 1 == n ? 2 : 3;
    return {part, ops[k], i + 1 == n};
  }
  // An RDMA WRITE to offset `off`.
  void write_packet(const Bytes& data, std::size_t off, std::uint32_t at, std::uint32_t i) {
    const Piece p = piece(data, i,
                          {Opcode::kRcRdmaWriteOnly, Opcode::kRcRdmaWriteFirst,
                           Opcode::kRcRdmaWriteLast, Opcode::kRcRdmaWriteMiddle});
    if (i == 0) {
      feed(reth_headers(p.op, kEpsn + at, va(off), e.key, static_cast<std::uint32_t>(data.size())),
           p.part);
    } else {
      feed(p.op, kEpsn + at + i, p.part, p.last);
    }
  }
  void send_packet(const Bytes& data, std::uint32_t at, std::uint32_t i) {
    const Piece p = piece(
        data, i,
        {Opcode::kRcSendOnly, Opcode::kRcSendFirst, Opcode::kRcSendLast, Opcode::kRcSendMiddle});
    feed(p.op, kEpsn + at + i, p.part, p.last);
  }
  bool holds(std::size_t off, const Bytes& want, std::size_t from, std::size_t len) const {
    return std::memcmp(e.buf.data() + off + from, want.data() + from, len) == 0;
  }
};

TEST(SelectiveRepeatResponder, ALostMiddleOfAWriteKeepsWhatFollowsAndCompletesOnce) {
  SrSolo s;
  const Bytes data = pattern(4 * kMtu, 1);
  s.write_packet(data, 0, 0, 0);
  s.drain();
  s.write_packet(data, 0, 0, 2);  // packet 1 is lost
  auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_nak(out[0], kEpsn + 1, true);
  EXPECT_TRUE(s.holds(0, data, 2 * kMtu, kMtu));  // placed already
  s.write_packet(data, 0, 0, 3);
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);  // every out-of-order packet says the hole is still there
  expect_nak(out[0], kEpsn + 1, true);
  EXPECT_EQ(s.e.qp->counters().out_of_order_kept, 2u);
  EXPECT_EQ(s.e.qp->responder_psn(), kEpsn + 1);
  s.write_packet(data, 0, 0, 1);  // the resend
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn + 3);
  EXPECT_EQ(out[0].h.aeth.msn, 1u);
  EXPECT_TRUE(s.holds(0, data, 0, data.size()));
  EXPECT_EQ(s.e.qp->responder_psn(), kEpsn + 4);
  EXPECT_EQ(s.e.qp->responder_msn(), 1u);
}

TEST(SelectiveRepeatResponder, ALostMiddleOfASendCompletesTheReceiveOnceWithAllItsBytes) {
  SrSolo s;
  post_recv(s, 9, 0, 4096);
  post_recv(s, 10, 8192, 4096);
  const Bytes data = pattern(3 * kMtu + 17, 2);
  s.send_packet(data, 0, 0);
  s.send_packet(data, 0, 2);
  s.send_packet(data, 0, 3);
  EXPECT_TRUE(s.e.rcq.wcs.empty());  // nothing completes before all packets are in
  s.drain();
  s.send_packet(data, 0, 1);
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn + 3);
  ASSERT_EQ(s.e.rcq.wcs.size(), 1u);
  EXPECT_EQ(s.e.rcq.wcs[0].wr_id, 9u);
  EXPECT_EQ(s.e.rcq.wcs[0].byte_len, data.size());
  EXPECT_TRUE(s.holds(0, data, 0, data.size()));
  // The next SEND takes the next receive WQE.
  const Bytes next = pattern(100, 3);
  s.send_packet(next, 4, 0);
  ASSERT_EQ(s.e.rcq.wcs.size(), 2u);
  EXPECT_EQ(s.e.rcq.wcs[1].wr_id, 10u);
  EXPECT_TRUE(s.holds(8192, next, 0, next.size()));
}

TEST(SelectiveRepeatResponder, ASendFirstAfterTheHoleTakesTheNextReceiveWqeInOrder) {
  SrSolo s;
  post_recv(s, 1, 0, 4096);
  post_recv(s, 2, 8192, 4096);
  const Bytes a = pattern(2 * kMtu, 4), b = pattern(2 * kMtu, 5);
  s.send_packet(a, 0, 0);
  // a's Last (PSN 1) is lost; b's First and Last (PSNs 2, 3) arrive. a is in progress, so the
  // packet at PSN 1 takes no WQE, and b's First is certain to take the next one.
  s.send_packet(b, 2, 0);
  s.send_packet(b, 2, 1);
  EXPECT_EQ(s.e.qp->counters().out_of_order_kept, 2u);
  EXPECT_TRUE(s.holds(8192, b, 0, b.size()));  // placed into WQE 2 already
  EXPECT_TRUE(s.e.rcq.wcs.empty());
  s.drain();
  s.send_packet(a, 0, 1);
  ASSERT_EQ(s.e.rcq.wcs.size(), 2u);
  EXPECT_EQ(s.e.rcq.wcs[0].wr_id, 1u);
  EXPECT_EQ(s.e.rcq.wcs[1].wr_id, 2u);
  EXPECT_TRUE(s.holds(0, a, 0, a.size()));
  expect_ack(s.drain().back(), kEpsn + 3);
}

TEST(SelectiveRepeatResponder, TwoHolesAreNakedOneAfterTheOther) {
  SrSolo s;
  const Bytes data = pattern(6 * kMtu, 6);
  for (std::uint32_t i : {0u, 2u, 4u, 5u}) s.write_packet(data, 0, 0, i);  // 1 and 3 lost
  auto out = s.drain();
  ASSERT_FALSE(out.empty());
  expect_nak(out.back(), kEpsn + 1, true);
  s.write_packet(data, 0, 0, 1);
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_nak(out[0], kEpsn + 3, true);  // acknowledges 0..2, asks for 3
  s.write_packet(data, 0, 0, 3);
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn + 5);
  EXPECT_TRUE(s.holds(0, data, 0, data.size()));
}

TEST(SelectiveRepeatResponder, WithoutTheFirstNothingOfItsWriteIsKept) {
  SrSolo s;
  const Bytes data = pattern(3 * kMtu, 7);
  s.write_packet(data, 0, 0, 1);  // the First is lost: the Middle's place is unknown
  s.write_packet(data, 0, 0, 2);
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_nak(out[0], kEpsn, false);  // a plain NAK: go back N
  EXPECT_EQ(s.e.qp->counters().out_of_order_kept, 0u);
  for (std::size_t i = 0; i < data.size(); ++i) ASSERT_EQ(s.e.buf[i], std::byte{0});
}

// The responder keeps kSrWindow PSNs beyond its ePSN while the requester's window may grow to
// kMaxBdpWindow: a request that far on is not kept and cuts the run, and once the hole is filled
// a plain sequence NAK sends the requester back N from the first packet not kept. A sender never
// counts on more being kept than the responder can keep.
static_assert(transport::kSrWindow < transport::kMaxBdpWindow);
TEST(SelectiveRepeatResponder, ARequestKSrWindowBeyondTheEpsnIsNotKeptAndCutsTheRun) {
  SrSolo s;
  constexpr std::uint32_t kFar = 1 + transport::kSrWindow;  // kSrWindow beyond the ePSN below
  const Bytes data = pattern((kFar + 8) * kMtu, 11);  // one WRITE: every packet's place is known
  s.write_packet(data, 0, 0, 0);
  s.drain();
  s.write_packet(data, 0, 0, 2);     // packet 1 is lost; one beyond the ePSN: kept
  s.write_packet(data, 0, 0, kFar);  // kSrWindow beyond: not kept
  auto out = s.drain();
  EXPECT_EQ(s.e.qp->counters().out_of_order_kept, 1u);
  ASSERT_FALSE(out.empty());
  expect_nak(out.back(), kEpsn + 1, true);
  s.write_packet(data, 0, 0, 1);  // the resend fills the hole; packet 2 is replayed
  out = s.drain();
  ASSERT_FALSE(out.empty());
  expect_nak(out.back(), kEpsn + 3, false);  // back N from the first packet not kept
  EXPECT_EQ(s.e.qp->responder_psn(), kEpsn + 3);
  EXPECT_TRUE(s.holds(0, data, 0, 3 * kMtu));
  for (std::size_t i = 0; i < kMtu; ++i) ASSERT_EQ(s.e.buf[kFar * kMtu + i], std::byte{0});
}

TEST(SelectiveRepeatResponder, ADuplicateOfAKeptPacketIsNotPlacedAgain) {
  SrSolo s;
  const Bytes data = pattern(3 * kMtu, 8);
  s.write_packet(data, 0, 0, 0);
  s.write_packet(data, 0, 0, 2);
  std::memset(s.e.buf.data() + 2 * kMtu, 0, kMtu);  // to see whether it is written again
  s.write_packet(data, 0, 0, 2);
  EXPECT_EQ(s.e.qp->counters().duplicate_requests, 1u);
  EXPECT_EQ(s.e.qp->counters().out_of_order_kept, 1u);
  for (std::size_t i = 0; i < kMtu; ++i) ASSERT_EQ(s.e.buf[2 * kMtu + i], std::byte{0});
}

TEST(SelectiveRepeatResponder, ALaterWriteToTheSameBytesWinsOverTheEarlierOnesResend) {
  SrSolo s;
  const Bytes one = pattern(2 * kMtu, 9), two = pattern(2 * kMtu, 10);
  s.write_packet(one, 0, 0, 0);
  s.write_packet(two, 0, 2, 0);  // one's Last (PSN 1) is lost; two overwrites the same bytes
  s.write_packet(two, 0, 2, 1);
  EXPECT_EQ(s.e.qp->counters().out_of_order_kept, 2u);
  s.write_packet(one, 0, 0, 1);  // one's resend must not overwrite two's bytes
  EXPECT_TRUE(s.holds(0, two, 0, two.size()));
  expect_ack(s.drain().back(), kEpsn + 3);
}

TEST(SelectiveRepeatResponder, AWriteIsNotPlacedBeforeAnEarlierReadOfTheSameBytes) {
  SrSolo s;
  const Bytes old = pattern(2 * kMtu, 11), fresh = pattern(kMtu, 12);
  std::memcpy(s.e.buf.data(), old.data(), old.size());
  s.write_packet(pattern(2 * kMtu, 13), 4096, 0, 0);  // a WRITE elsewhere, Last lost
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn + 2, s.va(0), s.e.key, 2 * kMtu));
  s.write_packet(fresh, 0, 4, 0);  // overlaps the READ: not placed before the READ executes
  EXPECT_EQ(s.e.qp->counters().out_of_order_kept, 1u);  // the READ only
  EXPECT_TRUE(s.holds(0, old, 0, old.size()));
}

TEST(SelectiveRepeatResponder, OnePassPlacesNothingOutOfOrderNorWhilePacketsAreKept) {
  SrSolo s;
  const Bytes data = pattern(4 * kMtu, 14);
  s.write_packet(data, 0, 0, 0);
  // A continuation at the ePSN may be placed before its check (issue 14) ...
  auto probe = [&](std::uint32_t psn) {
    wire::TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcRdmaWriteMiddle);
    h.bth.psn = psn;
    h.bth.dest_qpn = s.e.qp->qpn();
    const auto frame = craft(s.peer, s.e.ip, h, ConstBytes(data).subspan(kMtu, kMtu));
    auto f = wire::parse_frame(wire::LinkType::kEthernet, frame);
    UROCE_CHECK(f.ok());
    transport::PacketInfo info;
    info.src = s.peer;
    info.src_port = s.src_port;
    std::array<MutBytes, transport::kMaxSge> out{};
    return s.e.qp->one_pass_target(f->roce, info, out);
  };
  EXPECT_EQ(probe(kEpsn + 1), 1u);
  // ... never one past it, which is verified before it is kept,
  EXPECT_EQ(probe(kEpsn + 2), 0u);
  // ... and not the ePSN's while packets are kept (it is placed around their bytes).
  s.write_packet(data, 0, 0, 2);
  EXPECT_EQ(probe(kEpsn + 1), 0u);
}

TEST(SelectiveRepeatResponder, OffItIsGoBackNAsBefore) {
  SrSolo s(/*on=*/false);
  const Bytes data = pattern(4 * kMtu, 15);
  s.write_packet(data, 0, 0, 0);
  s.write_packet(data, 0, 0, 2);
  s.write_packet(data, 0, 0, 3);
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);  // one NAK per gap, as rxe
  expect_nak(out[0], kEpsn + 1, false);
  EXPECT_EQ(s.e.qp->counters().out_of_order_kept, 0u);
  for (std::size_t i = 2 * kMtu; i < data.size(); ++i) ASSERT_EQ(s.e.buf[i], std::byte{0});
}

// ---- the requester ----

TEST(SelectiveRepeatRequester, ANakWithTheKeptBitResendsThatPacketAlone) {
  Solo s(QpType::kRc, kMtu);
  s.e.qp->set_selective_repeat(true);
  const Sge sg = sge(s.e, 0, 6 * kMtu);
  transport::SendRequest r = request(1, WrOpcode::kRdmaWrite, std::span(&sg, 1));
  r.remote_addr = 0x10000;
  r.rkey = 7;
  ASSERT_EQ(s.e.qp->post_send(r), Errc::kOk);
  EXPECT_EQ(s.drain().size(), 6u);
  wire::TransportHeaders nak;
  nak.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcAcknowledge);
  nak.bth.psn = 0x1000 + 2;
  nak.aeth = wire::Aeth{kSeqNak, 0};
  s.next_sr_kept = true;
  s.feed(nak);
  auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.psn, 0x1000u + 2);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kRcRdmaWriteMiddle);
  EXPECT_TRUE(out[0].h.bth.ack_req);
  EXPECT_EQ(s.e.qp->counters().selective_retransmits, 1u);
  // The next hole, with packets kept past it: that one alone.
  nak.bth.psn = 0x1000 + 4;
  s.next_sr_kept = true;
  s.feed(nak);
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.psn, 0x1000u + 4);
  // A plain sequence NAK: go back N from there.
  nak.bth.psn = 0x1000 + 5;
  s.feed(nak);
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.psn, 0x1000u + 5);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kRcRdmaWriteLast);
  EXPECT_EQ(s.e.qp->counters().selective_retransmits, 2u);
  EXPECT_TRUE(s.e.scq.wcs.empty());
}

TEST(SelectiveRepeatRequester, OffTheKeptBitIsAPlainSequenceNak) {
  Solo s(QpType::kRc, kMtu);
  const Sge sg = sge(s.e, 0, 6 * kMtu);
  transport::SendRequest r = request(1, WrOpcode::kRdmaWrite, std::span(&sg, 1));
  r.remote_addr = 0x10000;
  r.rkey = 7;
  ASSERT_EQ(s.e.qp->post_send(r), Errc::kOk);
  s.drain();
  wire::TransportHeaders nak;
  nak.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcAcknowledge);
  nak.bth.psn = 0x1000 + 2;
  nak.aeth = wire::Aeth{kSeqNak, 0};
  s.next_sr_kept = true;
  s.feed(nak);
  EXPECT_EQ(s.drain().size(), 4u);  // 2..5 again
  EXPECT_EQ(s.e.qp->counters().selective_retransmits, 0u);
}

// ---- both ends ----

struct Loss {
  std::set<std::pair<int, std::uint32_t>> request_psns;   // (copy, PSN offset) a -> b lost
  std::set<std::pair<int, std::uint32_t>> response_psns;  // (copy, PSN offset) b -> a lost
};

// A Pair with selective repeat on both sides, losing the listed copies of frames.
struct SrPair : Pair {
  explicit SrPair(const Loss& loss) : Pair(QpType::kRc, kMtu) {
    connect();
    a.qp->set_selective_repeat(true);
    b.qp->set_selective_repeat(true);
    drop = [this, loss](int from, const std::vector<std::byte>& frame) {
      auto f = wire::parse_frame(wire::LinkType::kEthernet, frame);
      UROCE_CHECK(f.ok());
      const std::uint32_t psn = f->roce.bth().psn();
      // Requests and the responses to them carry a's PSNs (Pair's psn_a).
      const auto off = static_cast<std::uint32_t>(wire::psn_diff(psn, 0x100));
      const int copy = ++copies[{from, psn}];
      const auto& lose = from == 0 ? loss.request_psns : loss.response_psns;
      return lose.count({copy, off}) > 0;
    };
  }
  std::map<std::pair<int, std::uint32_t>, int> copies;
};

void post_recv_on(Endpoint& e, std::uint64_t id, std::size_t off, std::uint32_t len) {
  const Sge sg = sge(e, off, len);
  ASSERT_EQ(e.qp->post_recv(id, std::span(&sg, 1)), Errc::kOk);
}

void run_write(SrPair& p, std::uint32_t len, const char* what) {
  SCOPED_TRACE(what);
  fill(p.a, 0, len, 21);
  const Sge sg = sge(p.a, 0, len);
  transport::SendRequest r = request(1, WrOpcode::kRdmaWrite, std::span(&sg, 1));
  r.remote_addr = p.b.addr() + 4096;
  r.rkey = p.b.key;
  ASSERT_EQ(p.a.qp->post_send(r), Errc::kOk);
  p.run(Duration::s(10));
  ASSERT_EQ(p.a.scq.wcs.size(), 1u);
  EXPECT_EQ(p.a.scq.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(slice(p.b, 4096, len), slice(p.a, 0, len));
}

// The requester's retransmissions, selective ones and ACK timeouts.
void expect_resent(const SrPair& p, std::uint64_t resent, std::uint64_t selective,
                   std::uint64_t timeouts) {
  const transport::QpCounters& c = p.a.qp->counters();
  EXPECT_EQ(c.retransmitted_packets, resent);
  EXPECT_EQ(c.selective_retransmits, selective);
  EXPECT_EQ(c.timeouts, timeouts);
}

TEST(SelectiveRepeatPair, ALostMiddlePacketIsTheOnlyOneSentAgain) {
  SrPair p(Loss{{{1, 3}}, {}});
  run_write(p, 8 * kMtu, "WRITE");
  expect_resent(p, 1, 1, 0);
  EXPECT_EQ(p.b.qp->counters().out_of_order_kept, 4u);
}

TEST(SelectiveRepeatPair, ALostSendMiddleIsTheOnlyOneSentAgain) {
  SrPair p(Loss{{{1, 2}}, {}});
  post_recv_on(p.b, 5, 0, 8 * kMtu);
  fill(p.a, 0, 6 * kMtu, 22);
  const Sge sg = sge(p.a, 0, 6 * kMtu);
  ASSERT_EQ(p.a.qp->post_send(request(1, WrOpcode::kSend, std::span(&sg, 1))), Errc::kOk);
  p.run(Duration::s(10));
  ASSERT_EQ(p.a.scq.wcs.size(), 1u);
  ASSERT_EQ(p.b.rcq.wcs.size(), 1u);
  EXPECT_EQ(p.b.rcq.wcs[0].byte_len, 6 * kMtu);
  EXPECT_EQ(slice(p.b, 0, 6 * kMtu), slice(p.a, 0, 6 * kMtu));
  expect_resent(p, 1, 1, 0);
}

// The NAK of the second hole, sent when the first was filled, is lost: the resend of the first
// goes again when its timer runs out, and its duplicate is answered with that NAK.
TEST(SelectiveRepeatPair, TwoHolesAndALostNakCostOnlyTheMissingPackets) {
  SrPair p(Loss{{{1, 2}, {1, 5}}, {{1, 5}}});
  run_write(p, 10 * kMtu, "WRITE");
  expect_resent(p, 3, 3, 0);  // 2, 2 again, 5
  EXPECT_EQ(p.b.qp->counters().duplicate_requests, 1u);
}

// The only NAK of a batch is lost: nothing tells the requester of the hole but its ACK timeout,
// as with go-back-N (a tail-loss probe would come sooner); it goes back N.
TEST(SelectiveRepeatPair, ALostOnlyNakWaitsForTheAckTimeout) {
  SrPair p(Loss{{{1, 2}}, {{1, 2}}});
  run_write(p, 10 * kMtu, "WRITE");
  EXPECT_EQ(p.a.qp->counters().timeouts, 1u);
  EXPECT_EQ(p.b.rcq.wcs.size(), 0u);
}

TEST(SelectiveRepeatPair, ALostResendIsSentAgainBeforeTheAckTimeout) {
  SrPair p(Loss{{{1, 2}, {2, 2}}, {}});
  run_write(p, 40 * kMtu, "WRITE");
  expect_resent(p, 2, 2, 0);
}

TEST(SelectiveRepeatPair, RandomLossDuplicationAndReorderingDeliverEveryByteOnce) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    SrPair p(Loss{});
    p.rng = Prng{seed};
    p.faults = {50, 20, 20};
    for (int i = 0; i < 4; ++i) post_recv_on(p.b, static_cast<std::uint64_t>(i), 65536 * i, 65536);
    std::vector<Sge> sg;
    for (int i = 0; i < 8; ++i) sg.push_back(sge(p.a, 16384 * i, 16384));
    fill(p.a, 0, 8 * 16384, static_cast<std::uint8_t>(seed));
    for (int i = 0; i < 8; ++i) {
      const bool send = i % 2 == 1;
      transport::SendRequest r =
          request(static_cast<std::uint64_t>(i), send ? WrOpcode::kSend : WrOpcode::kRdmaWrite,
                  std::span(&sg[static_cast<std::size_t>(i)], 1));
      r.remote_addr = p.b.addr() + 262144 + 16384 * i;
      r.rkey = p.b.key;
      ASSERT_EQ(p.a.qp->post_send(r), Errc::kOk);
    }
    p.run(Duration::s(60));
    ASSERT_EQ(p.a.scq.wcs.size(), 8u);
    for (std::size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(p.a.scq.wcs[i].wr_id, i);
      EXPECT_EQ(p.a.scq.wcs[i].status, WcStatus::kSuccess);
    }
    ASSERT_EQ(p.b.rcq.wcs.size(), 4u);
    for (std::size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(p.b.rcq.wcs[i].wr_id, i);
      EXPECT_EQ(slice(p.b, 65536 * i, 16384), slice(p.a, 16384 * (2 * i + 1), 16384));
      EXPECT_EQ(slice(p.b, 262144 + 16384 * (2 * i), 16384), slice(p.a, 16384 * (2 * i), 16384));
    }
  }
}

}  // namespace
}  // namespace uroce::test

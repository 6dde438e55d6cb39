// Issue 11's transport audit (IBTA vol. 1 ch. 9; rxe_resp.c, rxe_comp.c): one test per defect
// found, each crafted to fail on the code before its fix. The defect is named in each test's
// comment; the audit item number is in its name.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "steps.h"
#include "wire/aeth.h"
#include "wire/psn.h"

namespace uroce::test {
namespace {

using transport::SendRequest;
using wire::NakCode;
using wire::Opcode;
using Bytes = std::vector<std::byte>;

constexpr std::uint32_t kEpsn = 0x5000;  // Solo's rq_psn
constexpr std::uint32_t kPsn = 0x1000;   // Solo's sq_psn

const std::uint8_t kAck = wire::make_ack_syndrome();
const std::uint8_t kSeqNak = wire::make_nak_syndrome(NakCode::kPsnSequenceError);
const std::uint8_t kRemAcc = wire::make_nak_syndrome(NakCode::kRemoteAccessError);

wire::TransportHeaders fetch_add(std::uint32_t psn, std::uint64_t va, std::uint32_t rkey,
                                 std::uint64_t add) {
  wire::TransportHeaders h = request_headers(Opcode::kRcFetchAdd, psn);
  h.atomic_eth = wire::AtomicEth{va, rkey, add, 0};
  return h;
}

// An ACK-type response from the fictitious peer, to the Solo QP's requester.
void ack_packet(Solo& s, std::uint32_t psn, std::uint8_t syndrome) {
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcAcknowledge);
  h.bth.psn = psn & wire::kPsnMask;
  h.aeth.syndrome = syndrome;
  h.aeth.msn = 1;
  s.feed(h);
}

// Makes the Solo QP one side of a ping-pong, as the engine's ACK hold sees it: it sent a
// request (a SEND of 8 bytes at PSN kPsn), which the peer acknowledged.
void play_one_side_of_a_ping_pong(Solo& s) {
  const Sge w = sge(s.e, 0, 8);
  ASSERT_EQ(s.e.qp->post_send(request(1, WrOpcode::kSend, std::span(&w, 1))), Errc::kOk);
  ASSERT_EQ(s.drain().size(), 1u);
  ack_packet(s, kPsn, kAck);
}

// "RC Acknowledge 5003 a0": opcode name, PSN, AETH syndrome (00 without an AETH).
std::string resp(Opcode op, std::uint32_t psn, std::uint8_t syndrome) {
  const wire::OpcodeInfo& info = wire::opcode_info(op);
  char b[32];
  std::snprintf(b, sizeof b, " %x %02x", psn & wire::kPsnMask,
                info.has(wire::ExtHeader::kAeth) ? syndrome : 0);
  return std::string(info.name) + b;
}

std::string describe(const Solo::Sent& p) {
  return resp(p.op->opcode(), p.h.bth.psn, p.h.aeth.syndrome);
}

std::vector<std::string> describe(const std::vector<Solo::Sent>& ps) {
  std::vector<std::string> out;
  for (const auto& p : ps) out.push_back(describe(p));
  return out;
}

// ---- 1. an error NAK must not discard the responses owed to earlier requests ----------------

// The responder used to clear its whole response queue when it queued a fatal NAK: a READ
// accepted just before a WRITE with a bad rkey (one receive batch) never got its response.
TEST(Audit, Item1ErrorNakComesAfterTheResponsesBeforeIt) {
  Solo s(QpType::kRc, 1024);
  std::memset(s.e.buf.data() + 8192, 0x5a, 2000);
  std::uint64_t v = 7;
  std::memcpy(s.e.buf.data() + 512, &v, 8);
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn, s.va(8192), s.e.key, 2000));  // 2 PSNs
  s.feed(fetch_add(kEpsn + 2, s.va(512), s.e.key, 1));
  s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn + 3, s.va(0), s.e.key + 99, 8),
         pattern(8, 1));
  const auto out = s.drain();
  EXPECT_EQ(describe(out), (std::vector<std::string>{
                               resp(Opcode::kRcRdmaReadResponseFirst, kEpsn, kAck),
                               resp(Opcode::kRcRdmaReadResponseLast, kEpsn + 1, kAck),
                               resp(Opcode::kRcAtomicAcknowledge, kEpsn + 2, kAck),
                               resp(Opcode::kRcAcknowledge, kEpsn + 3, kRemAcc),
                           }));
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[2].h.atomic_ack_orig, 7u);
  EXPECT_EQ(s.e.qp->state(), QpState::kErr);
  EXPECT_TRUE(s.drain().empty());
}

// End to end: the READ succeeds and the WRITE fails with REM_ACCESS_ERR, whatever retry_cnt is
// (with 3 the READ used to fail with RETRY_EXC_ERR; with 7 neither WQE completed).
TEST(Audit, Item1ReadBeforeABadWriteCompletesEndToEnd) {
  for (std::uint8_t retry_cnt : {3, 7}) {
    SCOPED_TRACE("retry_cnt " + std::to_string(retry_cnt));
    Pair p(QpType::kRc, 1024);
    p.connect(14, retry_cnt);
    fill(p.b, 8192, 3000, 4);
    const Sge r = sge(p.a, 0, 3000);
    SendRequest rd = request(1, WrOpcode::kRdmaRead, std::span(&r, 1));
    rd.remote_addr = p.b.addr() + 8192;
    rd.rkey = p.b.key;
    ASSERT_EQ(p.a.qp->post_send(rd), Errc::kOk);
    const Sge w = sge(p.a, 4096, 16);
    SendRequest wr = request(2, WrOpcode::kRdmaWrite, std::span(&w, 1));
    wr.remote_addr = p.b.addr();
    wr.rkey = p.b.key + 1000;  // no such key
    ASSERT_EQ(p.a.qp->post_send(wr), Errc::kOk);
    p.run(Duration::s(60));
    ASSERT_EQ(p.a.scq.wcs.size(), 2u);
    EXPECT_EQ(p.a.scq.wcs[0].wr_id, 1u);
    EXPECT_EQ(p.a.scq.wcs[0].status, WcStatus::kSuccess);
    EXPECT_EQ(p.a.scq.wcs[1].wr_id, 2u);
    EXPECT_EQ(p.a.scq.wcs[1].status, WcStatus::kRemAccessErr);
    EXPECT_EQ(slice(p.a, 0, 3000), slice(p.b, 8192, 3000));
    EXPECT_EQ(p.b.qp->state(), QpState::kErr);
    EXPECT_EQ(p.a.qp->counters().retransmitted_packets, 0u);
  }
}

// ---- 2. an atomic ACK carries its own atomic's original value --------------------------------

// The original value used to be read from the responder resource at transmit time; with
// max_dest_rd_atomic 1 the second Fetch&Add reused the resource before the first ACK left.
TEST(Audit, Item2AtomicAckCarriesItsOwnOriginalValue) {
  Solo s(QpType::kRc);
  s.set(14, 7, 7, 12, /*max_rd_atomic=*/1);
  std::uint64_t v = 10;
  std::memcpy(s.e.buf.data() + 512, &v, 8);
  s.feed(fetch_add(kEpsn, s.va(512), s.e.key, 5));
  s.feed(fetch_add(kEpsn + 1, s.va(512), s.e.key, 5));
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].h.bth.psn, kEpsn);
  EXPECT_EQ(out[0].h.atomic_ack_orig, 10u);
  EXPECT_EQ(out[1].h.bth.psn, kEpsn + 1);
  EXPECT_EQ(out[1].h.atomic_ack_orig, 15u);
  std::memcpy(&v, s.e.buf.data() + 512, 8);
  EXPECT_EQ(v, 20u);
  // The duplicate of the second (its resource is the live one) returns its saved value.
  s.feed(fetch_add(kEpsn + 1, s.va(512), s.e.key, 5));
  const auto again = s.drain();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].h.atomic_ack_orig, 15u);
}

// ---- 3. a sequence NAK does not overwrite a queued RNR NAK ----------------------------------

// No receive WQE and two SENDs in one batch: the RNR NAK at P used to be replaced by a sequence
// NAK at P, so the requester spent retry_cnt instead of waiting out the RNR timer.
TEST(Audit, Item3RnrNakIsNotReplacedByASequenceNak) {
  Solo s(QpType::kRc);
  s.feed(Opcode::kRcSendOnly, kEpsn, pattern(8, 0));
  s.feed(Opcode::kRcSendOnly, kEpsn + 1, pattern(8, 0));
  s.feed(Opcode::kRcSendOnly, kEpsn + 2, pattern(8, 0));
  const auto out = s.drain();
  EXPECT_EQ(describe(out), (std::vector<std::string>{resp(Opcode::kRcAcknowledge, kEpsn,
                                                          wire::make_rnr_nak_syndrome(12))}));
  EXPECT_EQ(s.e.qp->counters().seq_naks_sent, 0u);
  EXPECT_EQ(s.e.qp->counters().rnr_naks_sent, 1u);
  // The retried SEND is executed once a receive WQE is there.
  post_recv(s, 1, 0, 64);
  s.feed(Opcode::kRcSendOnly, kEpsn, pattern(8, 0));
  EXPECT_EQ(describe(s.drain()),
            (std::vector<std::string>{resp(Opcode::kRcAcknowledge, kEpsn, kAck)}));
}

// End to end with retry_cnt 0: the two SENDs wait for the receiver (rnr_retry 7) and succeed.
TEST(Audit, Item3SendsWaitOutTheRnrTimerWithoutSpendingRetryCnt) {
  Pair p(QpType::kRc, 1024);
  p.connect(14, /*retry_cnt=*/0, /*rnr_retry=*/7, /*min_rnr_timer=*/1);
  fill(p.a, 0, 64, 3);
  const Sge s1 = sge(p.a, 0, 32);
  const Sge s2 = sge(p.a, 32, 32);
  ASSERT_EQ(p.a.qp->post_send(request(1, WrOpcode::kSend, std::span(&s1, 1))), Errc::kOk);
  ASSERT_EQ(p.a.qp->post_send(request(2, WrOpcode::kSend, std::span(&s2, 1))), Errc::kOk);
  p.run(Duration::us(30));  // both SENDs arrive and meet no receive WQE
  EXPECT_TRUE(p.a.scq.wcs.empty());
  const Sge r1 = sge(p.b, 1000, 64);
  const Sge r2 = sge(p.b, 2000, 64);
  ASSERT_EQ(p.b.qp->post_recv(11, std::span(&r1, 1)), Errc::kOk);
  ASSERT_EQ(p.b.qp->post_recv(12, std::span(&r2, 1)), Errc::kOk);
  p.run();
  ASSERT_EQ(p.a.scq.wcs.size(), 2u);
  EXPECT_EQ(p.a.scq.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(p.a.scq.wcs[1].status, WcStatus::kSuccess);
  EXPECT_EQ(slice(p.b, 1000, 32), slice(p.a, 0, 32));
  EXPECT_EQ(slice(p.b, 2000, 32), slice(p.a, 32, 32));
  EXPECT_GE(p.a.qp->counters().rnr_naks_received, 1u);
  EXPECT_EQ(p.a.qp->counters().seq_naks_received, 0u);
}

// ---- 4. a duplicate READ must match its saved request -----------------------------------------

// A duplicate READ used to be replayed with whatever va, length and rkey it carried; a bogus
// rkey there moved the QP to ERR. As rxe: the same rkey, within the saved range, else dropped.
TEST(Audit, Item4DuplicateReadOutsideTheSavedRequestIsDropped) {
  Solo s(QpType::kRc, 1024);
  const std::uint64_t va = s.va(16384);
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn, va, s.e.key, 3000));  // 3 PSNs
  ASSERT_EQ(s.drain().size(), 3u);
  struct Bad {
    const char* what;
    std::uint32_t psn;
    std::uint64_t va;
    std::uint32_t rkey;
    std::uint32_t len;
  };
  const Bad bad[] = {
      {"another rkey", kEpsn, va, s.e.key + 7, 3000},
      {"another rkey mid-message", kEpsn + 1, va + 1024, 0xdead, 1976},
      {"before the saved range", kEpsn + 1, va - 1024, s.e.key, 1976},
      {"after the saved range", kEpsn + 1, va + 2048, s.e.key, 1976},
      {"longer than the saved request", kEpsn, va, s.e.key, 3001},
      {"longer than 2^31", kEpsn, va, s.e.key, 0x80000001u},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    s.feed(reth_headers(Opcode::kRcRdmaReadRequest, b.psn, b.va, b.rkey, b.len));
    EXPECT_TRUE(s.drain().empty());
    EXPECT_EQ(s.e.qp->state(), QpState::kRts);
  }
  // A proper duplicate of the rest is still replayed.
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn + 2, va + 2048, s.e.key, 952));
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.psn, kEpsn + 2);
  EXPECT_EQ(out[0].payload, slice(s.e, 16384 + 2048, 952));
}

// ---- 6. the go-back-N retry mark is cleared by progress ---------------------------------------

// retry_started was never cleared: after more than 2^23 PSNs of progress following one retry,
// the mark compared as "not yet past" again and suppressed sequence-NAK recovery (with ACK
// timeout 0, for ever). As rxe's reset_retry_counters, progress clears it.
TEST(Audit, Item6SequenceNakRecoveryWorksAfterMoreThan2To23PsnsOfProgress) {
  QpCap cap = Endpoint::default_cap();
  cap.max_send_wr = 128;
  Solo s(QpType::kRc, 4096, kPsn, kEpsn, cap);
  s.set(/*timeout=*/0, 7, 7);  // no ACK timer: only NAKs can recover a loss
  transport::TxPacket tx;
  // One go-back-N at kPsn.
  ASSERT_EQ(s.e.qp->post_send(request(1, WrOpcode::kRdmaWrite, {}, 0)), Errc::kOk);
  ASSERT_EQ(s.drain().size(), 1u);
  ack_packet(s, kPsn, kSeqNak);
  ASSERT_EQ(s.drain().size(), 1u);  // resent
  ack_packet(s, kPsn, kAck);
  // More than 2^23 PSNs of progress: zero-length WRITEs, 120 per ACK.
  std::uint32_t psn = kPsn + 1;
  constexpr std::uint32_t kBatch = 120;  // below the 128-PSN window
  for (std::uint32_t done = 0; done < (1u << 23) + 200; done += kBatch) {
    for (std::uint32_t i = 0; i < kBatch; ++i) {
      ASSERT_EQ(s.e.qp->post_send(request(2, WrOpcode::kRdmaWrite, {}, 0)), Errc::kOk);
    }
    for (std::uint32_t i = 0; i < kBatch; ++i) ASSERT_TRUE(s.e.qp->poll_transmit(s.now, tx));
    psn = wire::psn_add(psn, kBatch);
    ack_packet(s, wire::psn_add(psn, -1), kAck);
    ASSERT_EQ(s.e.qp->outstanding_send_wqes(), 0u);
  }
  // A lost packet now: the sequence NAK must start a go-back-N.
  ASSERT_EQ(s.e.qp->post_send(request(3, WrOpcode::kRdmaWrite, {})), Errc::kOk);
  ASSERT_EQ(s.e.qp->post_send(request(4, WrOpcode::kRdmaWrite, {})), Errc::kOk);
  ASSERT_EQ(s.drain().size(), 2u);
  ack_packet(s, psn, kSeqNak);  // the first of the two was lost
  const auto resent = s.drain();
  ASSERT_EQ(resent.size(), 2u);
  EXPECT_EQ(resent[0].h.bth.psn, psn);
  ack_packet(s, wire::psn_add(psn, 1), kAck);
  ASSERT_EQ(s.e.scq.wcs.size(), 2u);
  EXPECT_EQ(s.e.scq.wcs[0].wr_id, 3u);
  EXPECT_EQ(s.e.scq.wcs[1].status, WcStatus::kSuccess);
}

// A sequence NAK past the oldest unacknowledged PSN acknowledges new packets: progress, which
// restores retry_cnt. Without that, with retry_cnt finite (item 7), a long message through a
// lossy link failed after retry_cnt + 1 losses between two ACKs, however much got through (a
// 1 MiB SEND at 5% loss against rxe did).
TEST(Audit, Item7SequenceNaksThatMakeProgressDoNotUseUpRetryCnt) {
  Solo s(QpType::kRc, 256);
  s.set(14, /*retry_cnt=*/1, 7);
  const Sge big = sge(s.e, 0, 256 * 40);  // 40 packets
  ASSERT_EQ(s.e.qp->post_send(request(1, WrOpcode::kSend, std::span(&big, 1))), Errc::kOk);
  std::uint32_t psn = kPsn;
  ASSERT_EQ(s.drain().size(), 40u);
  for (int loss = 0; loss < 5; ++loss) {  // one packet lost in every round: 5 NAKs in a row
    psn += 3;
    ack_packet(s, psn, kSeqNak);
    ASSERT_TRUE(s.e.scq.wcs.empty()) << loss;
    const auto resent = s.drain();
    ASSERT_FALSE(resent.empty());
    EXPECT_EQ(resent[0].h.bth.psn, psn);
  }
  ack_packet(s, kPsn + 39, kAck);
  ASSERT_EQ(s.e.scq.wcs.size(), 1u);
  EXPECT_EQ(s.e.scq.wcs[0].status, WcStatus::kSuccess);
}

// ---- 9. the response queue never drops what the protocol owes --------------------------------

// With max_dest_rd_atomic 1 the response ring has 6 slots. Gaps that fill again (a NAK, a
// duplicate, the missing packet, the next gap) used to pile up NAK after NAK until the ring
// was full, and then the ACK owed for the last SEND was dropped.
TEST(Audit, Item9TheResponseRingKeepsTheAckOwedAfterManyGaps) {
  Solo s(QpType::kRc);
  s.set(14, 7, 7, 12, /*max_rd_atomic=*/1);
  for (int i = 0; i < 20; ++i) post_recv(s, static_cast<std::uint64_t>(i), 0, 64);
  s.feed(Opcode::kRcSendOnly, kEpsn, pattern(8, 0));
  std::uint32_t next = kEpsn + 1;
  for (int round = 0; round < 10; ++round) {
    s.feed(Opcode::kRcSendOnly, next + 1, pattern(8, 0));  // a gap: NAK at `next`
    s.feed(Opcode::kRcSendOnly, next - 1, pattern(8, 0));  // a duplicate: ACK again
    s.feed(Opcode::kRcSendOnly, next, pattern(8, 0));      // the gap filled
    ++next;
  }
  const auto out = s.drain();
  ASSERT_FALSE(out.empty());
  // Whatever was coalesced on the way, the last word is the ACK of the last SEND executed.
  EXPECT_EQ(describe(out.back()), resp(Opcode::kRcAcknowledge, next - 1, kAck));
  EXPECT_EQ(out.back().h.aeth.msn, 11u);
  EXPECT_LE(out.size(), 6u);
}

// A zero-payload SEND Last (or RDMA WRITE Last) used to be dropped by the parser, which cost the
// peer its retry budget; rxe's check_length NAKs it Invalid Request (class C).
TEST(Audit, Item9EmptyLastPacketIsNakedInvalidRequest) {
  const std::uint8_t inv = wire::make_nak_syndrome(NakCode::kInvalidRequest);
  {
    Solo s(QpType::kRc, 1024);
    post_recv(s, 1, 0, 4096);
    s.feed(Opcode::kRcSendFirst, kEpsn, pattern(1024, 0), false);
    s.feed(Opcode::kRcSendLast, kEpsn + 1, {});
    EXPECT_EQ(describe(s.drain()),
              (std::vector<std::string>{resp(Opcode::kRcAcknowledge, kEpsn + 1, inv)}));
    EXPECT_EQ(s.e.qp->state(), QpState::kErr);
  }
  {
    Solo s(QpType::kRc, 1024);
    s.feed(reth_headers(Opcode::kRcRdmaWriteFirst, kEpsn, s.va(0), s.e.key, 2048),
           pattern(1024, 0));
    s.feed(Opcode::kRcRdmaWriteLast, kEpsn + 1, {});
    EXPECT_EQ(describe(s.drain()),
              (std::vector<std::string>{resp(Opcode::kRcAcknowledge, kEpsn + 1, inv)}));
    EXPECT_EQ(s.e.qp->state(), QpState::kErr);
  }
}

// ---- a message that spans 2^23 PSNs -----------------------------------------------------------

// A 2 GiB READ at MTU 256 takes 2^23 PSNs at once. Sent behind other outstanding PSNs, it used to
// put the oldest unacknowledged PSN more than 2^23 behind the next one, where 24-bit comparisons
// turn round: the ACK of the SEND before it was dropped as "never sent", and the window looked
// open again. It now waits until everything before it is acknowledged, and closes the window.
TEST(Audit, ReadSpanning2To23PsnsKeepsTheWindowArithmeticSound) {
  Solo s(QpType::kRc, 256);
  const Sge small = sge(s.e, 0, 16);
  ASSERT_EQ(s.e.qp->post_send(request(1, WrOpcode::kSend, std::span(&small, 1))), Errc::kOk);
  const Sge huge{s.va(0), 0x80000000u, s.e.key};  // never written: no response is fed
  SendRequest rd = request(2, WrOpcode::kRdmaRead, std::span(&huge, 1));
  rd.remote_addr = 0x10000;
  rd.rkey = 0x77;
  ASSERT_EQ(s.e.qp->post_send(rd), Errc::kOk);
  ASSERT_EQ(s.e.qp->post_send(request(3, WrOpcode::kSend, std::span(&small, 1))), Errc::kOk);
  auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);  // the READ waits for the SEND's ACK
  EXPECT_EQ(out[0].op->opcode(), Opcode::kRcSendOnly);
  ack_packet(s, kPsn, kAck);
  ASSERT_EQ(s.e.scq.wcs.size(), 1u);
  EXPECT_EQ(s.e.scq.wcs[0].status, WcStatus::kSuccess);
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);  // the READ; the SEND after it waits for the window
  EXPECT_EQ(out[0].op->opcode(), Opcode::kRcRdmaReadRequest);
  EXPECT_EQ(out[0].h.reth.dma_length, 0x80000000u);
  EXPECT_TRUE(s.drain().empty());
  // A response inside the READ's range is taken (not dropped as a PSN never sent).
  const std::uint64_t dropped = s.e.qp->counters().dropped;
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcRdmaReadResponseFirst);
  h.bth.psn = kPsn + 1;
  h.aeth.syndrome = kAck;
  s.feed(h, pattern(256, 9));
  EXPECT_EQ(s.e.qp->counters().dropped, dropped);
  EXPECT_EQ(s.e.qp->state(), QpState::kRts);
  EXPECT_EQ(slice(s.e, 0, 256), pattern(256, 9));
}

// ---- a held ACK and a short peer timeout ------------------------------------------------------

// The engine may hold a ping-pong QP's ACK (up to 2.3 ms in UdpDevice) for its next request; a
// peer whose ACK timeout is shorter (exponent 9: 2.1 ms) would retransmit meanwhile. A QP with
// a short timeout of its own (standing in for its peer's) never offers its ACK for holding.
TEST(Audit, ShortAckTimeoutsNeverHoldAnAck) {
  for (std::uint8_t timeout : {1, 5, 8, 9, 11, 12, 14, 0}) {
    SCOPED_TRACE("timeout " + std::to_string(timeout));
    Solo s(QpType::kRc);
    s.set(timeout, 7, 7);
    play_one_side_of_a_ping_pong(s);
    if (HasFatalFailure()) return;
    post_recv(s, 1, 4096, 64);
    s.feed(Opcode::kRcSendOnly, kEpsn, pattern(8, 0));
    const bool long_enough = timeout == 0 || timeout >= transport::Qp::kMinTimeoutToHoldAck;
    EXPECT_EQ(s.e.qp->only_ack_to_send(), long_enough);
    EXPECT_EQ(describe(s.drain()),
              (std::vector<std::string>{resp(Opcode::kRcAcknowledge, kEpsn, kAck)}));
  }
}

// A mid-message ACK (the requester asks for one every kMaxPacketsPerAck packets) opens the
// peer's window for the rest of the message: it leaves at once, even on a QP that looks like one
// side of a ping-pong. Held, it stalled a 1 MiB WRITE (256 PSNs, a 128-PSN window) for the
// engine's hold at every AckReq: UCX's put rendezvous under Open MPI ran at 0.63x TCP. The ACK of
// the message's last packet may still wait for the application's answer.
TEST(Audit, AMidMessageAckIsNeverHeld) {
  for (const bool write : {true, false}) {
    SCOPED_TRACE(write ? "WRITE" : "SEND");
    Solo s(QpType::kRc, 1024);
    play_one_side_of_a_ping_pong(s);
    if (HasFatalFailure()) return;
    if (write) {
      s.feed(reth_headers(Opcode::kRcRdmaWriteFirst, kEpsn, s.va(0), s.e.key, 3072),
             pattern(1024, 0));
      s.feed(Opcode::kRcRdmaWriteMiddle, kEpsn + 1, pattern(1024, 1));
    } else {
      post_recv(s, 1, 0, 4096);
      s.feed(Opcode::kRcSendFirst, kEpsn, pattern(1024, 0));
      s.feed(Opcode::kRcSendMiddle, kEpsn + 1, pattern(1024, 1));
    }
    EXPECT_FALSE(s.e.qp->only_ack_to_send());
    EXPECT_EQ(describe(s.drain()),
              (std::vector<std::string>{resp(Opcode::kRcAcknowledge, kEpsn + 1, kAck)}));
    s.feed(write ? Opcode::kRcRdmaWriteLast : Opcode::kRcSendLast, kEpsn + 2, pattern(1024, 2));
    EXPECT_TRUE(s.e.qp->only_ack_to_send());
    EXPECT_EQ(describe(s.drain()),
              (std::vector<std::string>{resp(Opcode::kRcAcknowledge, kEpsn + 2, kAck)}));
  }
}

// A held ACK that leaves without a request behind it (the engine's hold ran out: Qp::
// poll_transmit after note_ack_held with nothing posted) teaches the QP that its application
// does not answer that kind of message: the next ACKs of that kind leave at once (a WRITE's
// initiator that waits for the completion before it says so with a SEND paid the whole hold on
// every message), other kinds are still held, and the kind is held again once the application
// answers one (posts a request before the peer's next request arrives).
TEST(Audit, AHeldAckThatNobodyAnsweredIsNotHeldAgainForItsKind) {
  Solo s(QpType::kRc, 1024);
  // One side of a ping-pong: it sent a request, which completed.
  const Sge w = sge(s.e, 0, 8);
  std::uint32_t psn = kPsn;
  std::uint32_t epsn = kEpsn;
  // This side's application posts a request (with a held ACK behind it), and the peer ACKs it.
  auto answer = [&](bool held_ack) {
    ASSERT_EQ(s.e.qp->post_send(request(psn, WrOpcode::kSend, std::span(&w, 1))), Errc::kOk);
    std::vector<std::string> want{resp(Opcode::kRcSendOnly, psn, 0)};
    if (held_ack) want.push_back(resp(Opcode::kRcAcknowledge, epsn - 1, kAck));
    EXPECT_EQ(describe(s.drain()), want);
    ack_packet(s, psn++, kAck);
  };
  answer(false);
  auto peer_write = [&] {
    s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, epsn++, s.va(1024), s.e.key, 8), pattern(8, 1));
  };
  auto peer_send = [&] {
    post_recv(s, epsn, 2048, 64);
    s.feed(Opcode::kRcSendOnly, epsn++, pattern(8, 2));
  };
  auto acked = [&] {
    return describe(s.drain()) ==
           std::vector<std::string>{resp(Opcode::kRcAcknowledge, epsn - 1, kAck)};
  };

  peer_write();
  ASSERT_TRUE(s.e.qp->only_ack_to_send());
  s.e.qp->note_ack_held();  // the engine holds it, and its hold runs out: the ACK leaves alone
  EXPECT_TRUE(acked());
  EXPECT_EQ(s.e.qp->counters().acks_held_unanswered, 1u);
  answer(false);  // too late: it does not count

  peer_write();
  EXPECT_FALSE(s.e.qp->only_ack_to_send());  // WRITEs: not answered
  EXPECT_TRUE(acked());
  // A WRITE with immediate completes a receive, as a SEND does: still held.
  post_recv(s, epsn, 2048, 64);
  wire::TransportHeaders imm =
      reth_headers(Opcode::kRcRdmaWriteOnlyImm, epsn++, s.va(1024), s.e.key, 8);
  imm.imm_data = 7;
  s.feed(imm, pattern(8, 3));
  EXPECT_TRUE(s.e.qp->only_ack_to_send());
  EXPECT_TRUE(acked());
  peer_send();
  EXPECT_TRUE(s.e.qp->only_ack_to_send());  // SENDs still are
  s.e.qp->note_ack_held();
  answer(true);  // the SEND's ACK rides behind the answer
  EXPECT_EQ(s.e.qp->counters().acks_held_unanswered, 1u);

  // The peer speaks again before this side answers the WRITE: still not answered.
  peer_write();
  EXPECT_FALSE(s.e.qp->only_ack_to_send());
  EXPECT_TRUE(acked());
  peer_write();
  EXPECT_FALSE(s.e.qp->only_ack_to_send());
  EXPECT_TRUE(acked());
  // This side answers a WRITE: WRITEs' ACKs are held again.
  answer(false);
  peer_write();
  EXPECT_TRUE(s.e.qp->only_ack_to_send());
  EXPECT_TRUE(acked());
  EXPECT_EQ(s.e.qp->counters().acks_held_unanswered, 1u);
}

// What a QP learned about its application's answers belongs to the connection: a QP moved to
// RESET and connected again (a new peer, perhaps a new application protocol) offers its ACKs for
// holding as a new QP does.
TEST(Audit, AQpConnectedAgainForgetsWhatItLearnedAboutAnswers) {
  Solo s(QpType::kRc, 1024);
  play_one_side_of_a_ping_pong(s);
  if (HasFatalFailure()) return;
  std::uint32_t epsn = kEpsn;
  auto peer_write = [&] {
    s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, epsn++, s.va(1024), s.e.key, 8), pattern(8, 1));
  };
  peer_write();
  ASSERT_TRUE(s.e.qp->only_ack_to_send());
  s.e.qp->note_ack_held();  // its hold runs out: the ACK leaves alone
  EXPECT_EQ(s.drain().size(), 1u);
  peer_write();
  ASSERT_FALSE(s.e.qp->only_ack_to_send());  // learned: WRITEs are not answered
  EXPECT_EQ(s.drain().size(), 1u);

  s.reconnect();
  play_one_side_of_a_ping_pong(s);
  if (HasFatalFailure()) return;
  epsn = kEpsn;
  peer_write();
  EXPECT_TRUE(s.e.qp->only_ack_to_send());
  EXPECT_EQ(describe(s.drain()),
            (std::vector<std::string>{resp(Opcode::kRcAcknowledge, kEpsn, kAck)}));
}

// An ACK that covers kMaxPsnsBehindAHeldAck (64) PSNs or more since the last one this QP sent
// leaves at once, even at the end of a message on a ping-pong side: the peer may have sent them
// in one turn (several messages) and wait for this ACK to open its 128-PSN window.
TEST(Audit, AnAckCoveringManyPsnsIsNeverHeld) {
  Solo s(QpType::kRc, 1024);
  play_one_side_of_a_ping_pong(s);
  if (HasFatalFailure()) return;
  std::uint32_t epsn = kEpsn;
  for (const std::uint32_t n :
       {transport::kMaxPsnsBehindAHeldAck - 1, transport::kMaxPsnsBehindAHeldAck}) {
    SCOPED_TRACE(std::to_string(n) + " WRITEs in a turn");
    for (std::uint32_t i = 0; i < n; ++i) {
      s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, epsn++, s.va(1024), s.e.key, 8), pattern(8, i));
    }
    EXPECT_EQ(s.e.qp->only_ack_to_send(), n < transport::kMaxPsnsBehindAHeldAck);
    EXPECT_EQ(describe(s.drain()),
              (std::vector<std::string>{resp(Opcode::kRcAcknowledge, epsn - 1, kAck)}));
  }
}

}  // namespace
}  // namespace uroce::test

// The RC responder, one step at a time: crafted requests with explicit PSNs fed to one QP, its
// ACKs, NAKs and READ/atomic responses decoded (IBTA 9.7.4-9.7.5; rxe_resp.c).
#include <gtest/gtest.h>

#include <cstring>
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

void expect_ack(const Solo::Sent& s, std::uint32_t psn, std::uint8_t syndrome = 0x1f) {
  EXPECT_EQ(s.op->opcode(), Opcode::kRcAcknowledge);
  EXPECT_EQ(s.h.bth.psn, psn);
  EXPECT_EQ(s.h.aeth.syndrome, syndrome);
  EXPECT_EQ(s.h.bth.dest_qpn, Solo::kPeerQpn);
}

TEST(Responder, ExpectedSendIsPlacedCompletedAndAcked) {
  Solo s(QpType::kRc);
  post_recv(s, 7, 0, 4096);
  const Bytes data = pattern(100, 1);
  s.feed(Opcode::kRcSendOnly, kEpsn, data);
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn);
  EXPECT_EQ(out[0].h.aeth.msn, 1u);
  ASSERT_EQ(s.e.rcq.wcs.size(), 1u);
  EXPECT_EQ(s.e.rcq.wcs[0].wr_id, 7u);
  EXPECT_EQ(s.e.rcq.wcs[0].byte_len, 100u);
  EXPECT_EQ(s.e.rcq.wcs[0].opcode, WcOpcode::kRecv);
  EXPECT_EQ(s.e.rcq.wcs[0].src_qp, Solo::kPeerQpn);
  EXPECT_EQ(std::memcmp(s.e.buf.data(), data.data(), 100), 0);
}

TEST(Responder, NoAckWithoutAckReqButCoalescedLater) {
  Solo s(QpType::kRc);
  for (int i = 0; i < 3; ++i) post_recv(s, static_cast<std::uint64_t>(i), 0, 64);
  s.feed(Opcode::kRcSendOnly, kEpsn, pattern(8, 0), /*ack_req=*/false);
  EXPECT_TRUE(s.drain().empty());
  s.feed(Opcode::kRcSendOnly, kEpsn + 1, pattern(8, 0), true);
  s.feed(Opcode::kRcSendOnly, kEpsn + 2, pattern(8, 0), true);
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);  // two queued ACKs coalesce into the later one
  expect_ack(out[0], kEpsn + 2);
  EXPECT_EQ(out[0].h.aeth.msn, 3u);
}

TEST(Responder, FuturePsnGetsOneNakPerGap) {
  Solo s(QpType::kRc);
  for (int i = 0; i < 4; ++i) post_recv(s, static_cast<std::uint64_t>(i), 0, 64);
  s.feed(Opcode::kRcSendOnly, kEpsn + 2, pattern(8, 0));
  s.feed(Opcode::kRcSendOnly, kEpsn + 3, pattern(8, 0));
  auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn, wire::make_nak_syndrome(wire::NakCode::kPsnSequenceError));
  s.feed(Opcode::kRcSendOnly, kEpsn + 4, pattern(8, 0));
  EXPECT_TRUE(s.drain().empty());  // silence until the expected PSN
  EXPECT_TRUE(s.e.rcq.wcs.empty());
  s.feed(Opcode::kRcSendOnly, kEpsn, pattern(8, 0));
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn);
  s.feed(Opcode::kRcSendOnly, kEpsn + 5, pattern(8, 0));  // a new gap: a new NAK
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn + 1, wire::make_nak_syndrome(wire::NakCode::kPsnSequenceError));
  EXPECT_EQ(s.e.qp->counters().seq_naks_sent, 2u);
  EXPECT_EQ(s.e.qp->state(), QpState::kRts);
}

TEST(Responder, DuplicateSendIsAckedAgainNeverExecuted) {
  Solo s(QpType::kRc);
  post_recv(s, 1, 0, 64);
  post_recv(s, 2, 1024, 64);
  s.feed(Opcode::kRcSendOnly, kEpsn, pattern(16, 1));
  s.feed(Opcode::kRcSendOnly, kEpsn + 1, pattern(16, 2));
  s.drain();
  s.feed(Opcode::kRcSendOnly, kEpsn, pattern(16, 9));  // the duplicate of the first
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn + 1);  // the latest PSN executed
  EXPECT_EQ(s.e.rcq.wcs.size(), 2u);
  EXPECT_EQ(s.e.qp->counters().duplicate_requests, 1u);
  EXPECT_EQ(std::memcmp(s.e.buf.data(), pattern(16, 1).data(), 16), 0);
}

TEST(Responder, DuplicateWriteDoesNotWriteAgain) {
  Solo s(QpType::kRc);
  const Bytes data = pattern(200, 3);
  s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(4096), s.e.key, 200), data);
  s.drain();
  EXPECT_EQ(std::memcmp(s.e.buf.data() + 4096, data.data(), 200), 0);
  std::memset(s.e.buf.data() + 4096, 0, 200);  // the application reuses the buffer
  s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(4096), s.e.key, 200), data);
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn);
  for (int i = 0; i < 200; ++i)
    ASSERT_EQ(s.e.buf[4096 + static_cast<std::size_t>(i)], std::byte{0});
}

// A message's first packet checks the whole message and places its own bytes from that one
// look-up; each later packet looks its region up again (ResponderErrors,
// MrDeregisteredBetweenPacketsOfAWrite).
TEST(Responder, AWriteLooksItsRegionUpOncePerPacket) {
  Solo s(QpType::kRc, 256);
  const Bytes data = pattern(600, 6);
  s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(4096), s.e.key, 200),
         ConstBytes(data).first(200));
  EXPECT_EQ(s.e.memory.resolves, 1u);
  auto h = reth_headers(Opcode::kRcRdmaWriteFirst, kEpsn + 1, s.va(8192), s.e.key, 600);
  h.bth.ack_req = false;
  s.feed(h, ConstBytes(data).first(256));
  EXPECT_EQ(s.e.memory.resolves, 2u);
  s.feed(Opcode::kRcRdmaWriteMiddle, kEpsn + 2, ConstBytes(data).subspan(256, 256), false);
  s.feed(Opcode::kRcRdmaWriteLast, kEpsn + 3, ConstBytes(data).subspan(512), true);
  EXPECT_EQ(s.e.memory.resolves, 4u);
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn + 3);
  EXPECT_EQ(std::memcmp(s.e.buf.data() + 4096, data.data(), 200), 0);
  EXPECT_EQ(std::memcmp(s.e.buf.data() + 8192, data.data(), 600), 0);
}

TEST(Responder, MultiPacketWriteAndSendWithImmediate) {
  Solo s(QpType::kRc, 256);
  post_recv(s, 5, 0, 1024);
  const Bytes data = pattern(600, 4);
  auto h = reth_headers(Opcode::kRcRdmaWriteFirst, kEpsn, s.va(8192), s.e.key, 600);
  h.bth.ack_req = false;
  s.feed(h, ConstBytes(data).first(256));
  s.feed(Opcode::kRcRdmaWriteMiddle, kEpsn + 1, ConstBytes(data).subspan(256, 256), false);
  wire::TransportHeaders last;
  last.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcRdmaWriteLastImm);
  last.bth.psn = kEpsn + 2;
  last.bth.ack_req = true;
  last.imm_data = 0xabcd1234;
  s.feed(last, ConstBytes(data).subspan(512));
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn + 2);
  EXPECT_EQ(std::memcmp(s.e.buf.data() + 8192, data.data(), 600), 0);
  ASSERT_EQ(s.e.rcq.wcs.size(), 1u);
  EXPECT_EQ(s.e.rcq.wcs[0].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(s.e.rcq.wcs[0].byte_len, 600u);
  EXPECT_EQ(s.e.rcq.wcs[0].imm_data, 0xabcd1234u);
  EXPECT_EQ(s.e.rcq.wcs[0].wc_flags, kWcWithImm);
}

// The transport's side of SEND with Invalidate when the resolver allows it (a region made for
// invalidation: verbs has none yet, see ResponderErrors for an ordinary one).
TEST(Responder, SendWithInvalidateInvalidatesARegionMadeForIt) {
  Solo s(QpType::kRc);
  post_recv(s, 1, 0, 64);
  const std::uint32_t victim =
      s.e.memory.add(1, s.e.buf.data() + 65536, 4096, kAccessRemoteWrite | kAccessLocalWrite, true);
  wire::TransportHeaders h = request_headers(Opcode::kRcSendOnlyInv, kEpsn);
  h.ieth_rkey = victim;
  s.feed(h, pattern(4, 0));
  s.drain();
  ASSERT_EQ(s.e.rcq.wcs.size(), 1u);
  EXPECT_EQ(s.e.rcq.wcs[0].wc_flags, kWcWithInv);
  EXPECT_EQ(s.e.rcq.wcs[0].imm_data, victim);
  EXPECT_FALSE(s.e.memory.resolve(1, 0, victim, true, s.va(65536), 4, kAccessRemoteWrite).ok());
}

TEST(Responder, NoReceiveWqeGivesRnrNakWithMinRnrTimer) {
  Solo s(QpType::kRc);
  s.set(14, 7, 7, /*min_rnr_timer=*/18);
  s.feed(Opcode::kRcSendOnly, kEpsn, pattern(32, 0));
  auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn, wire::make_rnr_nak_syndrome(18));
  EXPECT_EQ(s.e.qp->counters().rnr_naks_sent, 1u);
  // The PSN did not advance: the retry is the expected packet, not a duplicate.
  post_recv(s, 1, 0, 64);
  s.feed(Opcode::kRcSendOnly, kEpsn, pattern(32, 0));
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn);
  EXPECT_EQ(s.e.rcq.wcs.size(), 1u);
  EXPECT_EQ(s.e.qp->counters().duplicate_requests, 0u);
}

TEST(Responder, ReadIsAnsweredInMtuPacketsAndReplayedFromMidMessage) {
  Solo s(QpType::kRc, 256);
  const Bytes data = pattern(700, 5);
  std::memcpy(s.e.buf.data() + 16384, data.data(), 700);
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn, s.va(16384), s.e.key, 700));
  auto out = s.drain();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kRcRdmaReadResponseFirst);
  EXPECT_EQ(out[1].op->opcode(), Opcode::kRcRdmaReadResponseMiddle);
  EXPECT_EQ(out[2].op->opcode(), Opcode::kRcRdmaReadResponseLast);
  for (std::uint32_t i = 0; i < 3; ++i) EXPECT_EQ(out[i].h.bth.psn, kEpsn + i);
  EXPECT_EQ(out[0].h.aeth.msn, 1u);
  Bytes got;
  for (const auto& p : out) got.insert(got.end(), p.payload.begin(), p.payload.end());
  EXPECT_EQ(got, data);
  // The requester lost the last two: it asks again from PSN +1 for the rest.
  std::memset(s.e.buf.data() + 16384, 0xee, 700);  // replay reads memory as it is now
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn + 1, s.va(16384 + 256), s.e.key, 444));
  out = s.drain();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].h.bth.psn, kEpsn + 1);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kRcRdmaReadResponseFirst);
  EXPECT_EQ(out[1].h.bth.psn, kEpsn + 2);
  EXPECT_EQ(out[1].op->opcode(), Opcode::kRcRdmaReadResponseLast);
  EXPECT_EQ(out[1].payload.size(), 188u);
  EXPECT_EQ(s.e.qp->counters().duplicate_requests, 1u);
  // The next request's PSN follows the READ's last response PSN.
  post_recv(s, 1, 0, 64);
  s.feed(Opcode::kRcSendOnly, kEpsn + 3, pattern(4, 0));
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn + 3);
  EXPECT_EQ(out[0].h.aeth.msn, 2u);
}

// A READ asked for again at PSN p means the requester went back to p: whatever the responder
// still had queued from p on (the rest of that READ's first stream, the next READ's responses) is
// obsolete, each packet beyond the requester's gap, and the replay takes its place (rxe abandons
// the READ in progress likewise). The next READ's responses come again when it is asked again.
TEST(Responder, ARepeatedReadReplacesTheResponsesQueuedFromItsPsnOn) {
  Solo s(QpType::kRc, 256);
  const Bytes data = pattern(1536, 9);
  std::memcpy(s.e.buf.data() + 8192, data.data(), data.size());
  // A: 1024 bytes at PSNs +0..+3; B: 512 bytes at +4..+5.
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn, s.va(8192), s.e.key, 1024));
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn + 4, s.va(9216), s.e.key, 512));
  auto out = s.drain(3);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].h.bth.psn, kEpsn + 2);
  // The requester lost +1 and, seeing +2, asks again from +1 (then B again, go-back-N).
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn + 1, s.va(8192 + 256), s.e.key, 768));
  out = s.drain();
  ASSERT_EQ(out.size(), 3u);  // not A's +3 and B's +4, +5 of the first streams as well
  Bytes got;
  for (std::uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].h.bth.psn, kEpsn + 1 + i);
    got.insert(got.end(), out[i].payload.begin(), out[i].payload.end());
  }
  EXPECT_EQ(out[0].op->opcode(), Opcode::kRcRdmaReadResponseFirst);
  EXPECT_EQ(out[2].op->opcode(), Opcode::kRcRdmaReadResponseLast);
  EXPECT_EQ(got, Bytes(data.begin() + 256, data.begin() + 1024));
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn + 4, s.va(9216), s.e.key, 512));
  out = s.drain();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].h.bth.psn, kEpsn + 4);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kRcRdmaReadResponseFirst);
  EXPECT_EQ(out[1].h.bth.psn, kEpsn + 5);
  EXPECT_EQ(s.e.qp->counters().duplicate_requests, 2u);
}

// Responses queued before the repeated request's PSN stay: the requester has not seen them.
TEST(Responder, ARepeatedReadKeepsTheResponsesQueuedBeforeIt) {
  Solo s(QpType::kRc, 256);
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn, s.va(8192), s.e.key, 512));
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn + 2, s.va(9216), s.e.key, 512));
  // B (+2, +3) repeated before anything left: A's +0, +1 still go, then B once.
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn + 2, s.va(9216), s.e.key, 512));
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 4u);
  for (std::uint32_t i = 0; i < 4; ++i) EXPECT_EQ(out[i].h.bth.psn, kEpsn + i);
}

TEST(Responder, ZeroLengthReadChecksNoKey) {
  Solo s(QpType::kRc);
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn, 0, 0xdead, 0));
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kRcRdmaReadResponseOnly);
  EXPECT_TRUE(out[0].payload.empty());
}

TEST(Responder, AtomicsExecuteOnceAndDuplicatesReturnTheSavedValue) {
  Solo s(QpType::kRc);
  std::uint64_t v = 10;
  std::memcpy(s.e.buf.data() + 512, &v, 8);
  wire::TransportHeaders fa;
  fa.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcFetchAdd);
  fa.bth.psn = kEpsn;
  fa.bth.ack_req = true;
  fa.atomic_eth = wire::AtomicEth{s.va(512), s.e.key, 5, 0};
  s.feed(fa);
  wire::TransportHeaders cs = fa;
  cs.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcCompareSwap);
  cs.bth.psn = kEpsn + 1;
  cs.atomic_eth = wire::AtomicEth{s.va(512), s.e.key, 99, 15};
  s.feed(cs);
  auto out = s.drain();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kRcAtomicAcknowledge);
  EXPECT_EQ(out[0].h.atomic_ack_orig, 10u);
  EXPECT_EQ(out[1].h.atomic_ack_orig, 15u);
  std::memcpy(&v, s.e.buf.data() + 512, 8);
  EXPECT_EQ(v, 99u);
  // Both duplicated: the saved originals come back, memory is untouched.
  s.feed(fa);
  s.feed(cs);
  out = s.drain();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].h.bth.psn, kEpsn);
  EXPECT_EQ(out[0].h.atomic_ack_orig, 10u);
  EXPECT_EQ(out[1].h.atomic_ack_orig, 15u);
  std::memcpy(&v, s.e.buf.data() + 512, 8);
  EXPECT_EQ(v, 99u);
}

TEST(Responder, PsnWrapsAt2To24) {
  Solo s(QpType::kRc, 1024, 0x1000, 0xffffff);
  for (int i = 0; i < 3; ++i) post_recv(s, static_cast<std::uint64_t>(i), 0, 64);
  s.feed(Opcode::kRcSendOnly, 0xffffff, pattern(4, 0));
  s.feed(Opcode::kRcSendOnly, 0x000000, pattern(4, 0));
  auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], 0);
  s.feed(Opcode::kRcSendOnly, 0xffffff, pattern(4, 0));  // duplicate across the wrap
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], 0);
  s.feed(Opcode::kRcSendOnly, 0x000002, pattern(4, 0));  // future across the wrap
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], 1, wire::make_nak_syndrome(wire::NakCode::kPsnSequenceError));
  EXPECT_EQ(s.e.rcq.wcs.size(), 2u);
}

// ---- errors: each sends its NAK, completes a held receive WQE in error, moves to ERR ----

struct ErrorCase {
  const char* name;
  std::uint8_t nak;
  AsyncEventType event;
};

void expect_error_nak(Solo& s, std::uint32_t psn, std::uint8_t nak, AsyncEventType event) {
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], psn, nak);
  EXPECT_EQ(s.e.qp->state(), QpState::kErr);
  ASSERT_FALSE(s.e.events.events.empty());
  EXPECT_EQ(s.e.events.events.back().second, event);
  EXPECT_TRUE(s.drain().empty());  // nothing more in the error state
}

const std::uint8_t kInvReq = wire::make_nak_syndrome(wire::NakCode::kInvalidRequest);
const std::uint8_t kRemAcc = wire::make_nak_syndrome(wire::NakCode::kRemoteAccessError);
const std::uint8_t kRemOp = wire::make_nak_syndrome(wire::NakCode::kRemoteOperationalError);

TEST(ResponderErrors, MiddleWithoutFirstIsAnInvalidRequest) {
  Solo s(QpType::kRc);
  s.feed(Opcode::kRcSendMiddle, kEpsn, pattern(1024, 0));
  expect_error_nak(s, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
}

TEST(ResponderErrors, FirstAfterFirstIsAnInvalidRequest) {
  Solo s(QpType::kRc);
  post_recv(s, 1, 0, 8192);
  s.feed(Opcode::kRcSendFirst, kEpsn, pattern(1024, 0), false);
  s.feed(Opcode::kRcSendFirst, kEpsn + 1, pattern(1024, 0));
  expect_error_nak(s, kEpsn + 1, kInvReq, AsyncEventType::kQpReqErr);
  ASSERT_EQ(s.e.rcq.wcs.size(), 1u);  // the held receive WQE completes in error
  EXPECT_EQ(s.e.rcq.wcs[0].status, WcStatus::kRemInvReqErr);
}

// IBTA o10-37, rxe: a region that cannot be invalidated (an ordinary MR) makes SEND with
// Invalidate an invalid request; the held receive WQE completes in error, the region stays.
TEST(ResponderErrors, SendWithInvalidateOfAnOrdinaryRegionIsAnInvalidRequest) {
  Solo s(QpType::kRc);
  post_recv(s, 1, 0, 64);
  const std::uint32_t ordinary =
      s.e.memory.add(1, s.e.buf.data() + 65536, 4096, kAccessRemoteWrite | kAccessLocalWrite);
  wire::TransportHeaders h = request_headers(Opcode::kRcSendOnlyInv, kEpsn);
  h.ieth_rkey = ordinary;
  s.feed(h, pattern(4, 0));
  expect_error_nak(s, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
  ASSERT_EQ(s.e.rcq.wcs.size(), 1u);
  EXPECT_EQ(s.e.rcq.wcs[0].status, WcStatus::kRemInvReqErr);
  EXPECT_TRUE(s.e.memory.resolve(1, 0, ordinary, true, s.va(65536), 4, kAccessRemoteWrite).ok());
}

TEST(ResponderErrors, FirstPacketShorterThanTheMtu) {
  Solo s(QpType::kRc, 1024);
  post_recv(s, 1, 0, 8192);
  s.feed(Opcode::kRcSendFirst, kEpsn, pattern(512, 0));
  expect_error_nak(s, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
}

TEST(ResponderErrors, SendLongerThanTheReceiveBuffer) {
  Solo s(QpType::kRc);
  post_recv(s, 1, 0, 32);
  s.feed(Opcode::kRcSendOnly, kEpsn, pattern(64, 0));
  expect_error_nak(s, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
  ASSERT_EQ(s.e.rcq.wcs.size(), 1u);
  EXPECT_EQ(s.e.rcq.wcs[0].status, WcStatus::kLocLenErr);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(s.e.buf[static_cast<std::size_t>(i)], std::byte{0});
}

TEST(ResponderErrors, BadReceiveLkeyIsARemoteOperationalError) {
  Solo s(QpType::kRc);
  const Sge bad{s.va(0), 64, 0xbad};
  ASSERT_EQ(s.e.qp->post_recv(1, std::span(&bad, 1)), Errc::kOk);
  s.feed(Opcode::kRcSendOnly, kEpsn, pattern(16, 0));
  expect_error_nak(s, kEpsn, kRemOp, AsyncEventType::kQpFatal);
  ASSERT_EQ(s.e.rcq.wcs.size(), 1u);
  EXPECT_EQ(s.e.rcq.wcs[0].status, WcStatus::kLocProtErr);
}

TEST(ResponderErrors, QpWithoutRemoteAccessRefusesTheOperation) {
  for (int op = 0; op < 3; ++op) {
    Solo s(QpType::kRc);
    QpAttr attr;
    attr.qp_access_flags = kAccessLocalWrite;
    s.e.qp->modify(attr, kQpAccessFlags, s.e.qp->path());
    wire::TransportHeaders h = reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(0), s.e.key, 8);
    if (op == 1) h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcRdmaReadRequest);
    if (op == 2) {
      h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcFetchAdd);
      h.atomic_eth = wire::AtomicEth{s.va(0), s.e.key, 1, 0};
    }
    s.feed(h, op == 0 ? ConstBytes(pattern(8, 0)) : ConstBytes{});
    expect_error_nak(s, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(s.e.buf[static_cast<std::size_t>(i)], std::byte{0});
  }
}

// Memory protection: not one byte of any region changes.
class ResponderAccess : public ::testing::TestWithParam<int> {};

TEST_P(ResponderAccess, ViolationsAreNakedAndTouchNothing) {
  const int which = GetParam();
  Solo s(QpType::kRc);
  std::uint32_t key = s.e.key;
  std::uint64_t va = s.va(4096);
  std::uint32_t len = 64;
  switch (which) {
    case 0:
      key = 0x7777;  // no such key
      break;
    case 1:
      key = s.e.memory.add(2, s.e.buf.data(), s.e.buf.size(),
                           kAccessRemoteWrite | kAccessLocalWrite | kAccessRemoteRead |
                               kAccessRemoteAtomic);  // other PD
      break;
    case 2:
      key = s.e.memory.add(1, s.e.buf.data(), s.e.buf.size(), kAccessLocalWrite);  // no remote
      break;
    case 3:
      va = s.va(s.e.buf.size() - 32);  // runs past the end
      break;
    case 4:
      va = s.va(0) - 8;  // starts before the region
      break;
    case 5:
      s.e.memory.remove(s.e.key);  // deregistered
      break;
  }
  const Bytes before = s.e.buf;
  s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, va, key, len), pattern(len, 1));
  expect_error_nak(s, kEpsn, kRemAcc, AsyncEventType::kQpAccessErr);
  EXPECT_EQ(s.e.buf, before);
}

TEST_P(ResponderAccess, ReadAndAtomicViolationsToo) {
  const int which = GetParam();
  for (int op = 0; op < 2; ++op) {
    Solo s(QpType::kRc);
    std::uint32_t key = s.e.key;
    std::uint64_t va = s.va(4096);
    const std::uint32_t access =
        op == 0 ? kAccessRemoteWrite | kAccessLocalWrite : kAccessRemoteRead | kAccessLocalWrite;
    switch (which) {
      case 0:
        key = 0x7777;
        break;
      case 1:
        key = s.e.memory.add(2, s.e.buf.data(), s.e.buf.size(), 0xf);
        break;
      case 2:
        key = s.e.memory.add(1, s.e.buf.data(), s.e.buf.size(), access);  // lacks the right
        break;
      case 3:
        va = s.va(op == 0 ? s.e.buf.size() - 4 : s.e.buf.size());  // runs past the end
        break;
      case 4:
        va = s.va(0) - 8;
        break;
      case 5:
        s.e.memory.remove(s.e.key);
        break;
    }
    const Bytes before = s.e.buf;
    if (op == 0) {
      s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn, va, key, 64));
    } else {
      wire::TransportHeaders h;
      h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcCompareSwap);
      h.bth.psn = kEpsn;
      h.bth.ack_req = true;
      h.atomic_eth = wire::AtomicEth{va & ~std::uint64_t{7}, key, 1, 0};
      s.feed(h);
    }
    expect_error_nak(s, kEpsn, kRemAcc, AsyncEventType::kQpAccessErr);
    EXPECT_EQ(s.e.buf, before);
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, ResponderAccess, ::testing::Range(0, 6));

TEST(ResponderErrors, MisalignedAtomicIsAnInvalidRequest) {
  Solo s(QpType::kRc);
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcFetchAdd);
  h.bth.psn = kEpsn;
  h.atomic_eth = wire::AtomicEth{s.va(4), s.e.key, 1, 0};
  s.feed(h);
  expect_error_nak(s, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
}

TEST(ResponderErrors, ReadWithoutResponderResources) {
  Solo s(QpType::kRc);
  s.set(14, 7, 7, 12, /*max_rd_atomic=*/0);
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn, s.va(0), s.e.key, 8));
  expect_error_nak(s, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
}

TEST(ResponderErrors, WriteLengthsMustAddUpToTheReth) {
  Solo s(QpType::kRc);
  s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(0), s.e.key, 100), pattern(64, 0));
  expect_error_nak(s, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(s.e.buf[static_cast<std::size_t>(i)], std::byte{0});
}

TEST(ResponderErrors, MrDeregisteredBetweenPacketsOfAWrite) {
  Solo s(QpType::kRc, 256);
  const std::uint32_t key =
      s.e.memory.add(1, s.e.buf.data() + 8192, 4096, kAccessRemoteWrite | kAccessLocalWrite);
  auto h = reth_headers(Opcode::kRcRdmaWriteFirst, kEpsn, s.va(8192), key, 768);
  h.bth.ack_req = false;
  s.feed(h, pattern(256, 1));
  s.e.memory.remove(key);
  const Bytes before = s.e.buf;
  s.feed(Opcode::kRcRdmaWriteMiddle, kEpsn + 1, pattern(256, 2), false);
  expect_error_nak(s, kEpsn + 1, kRemAcc, AsyncEventType::kQpAccessErr);
  EXPECT_EQ(s.e.buf, before);
}

TEST(ResponderErrors, MrDeregisteredWhileAReadIsAnswered) {
  Solo s(QpType::kRc, 256);
  const std::uint32_t key = s.e.memory.add(1, s.e.buf.data() + 8192, 4096, kAccessRemoteRead);
  s.feed(reth_headers(Opcode::kRcRdmaReadRequest, kEpsn, s.va(8192), key, 768));
  s.e.memory.remove(key);  // before the responses are polled out
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn, kRemAcc);
  EXPECT_EQ(s.e.qp->state(), QpState::kErr);
}

// ---- IBTA 1.5 (annex A19; rxe_resp.c since 6.2): ATOMIC WRITE and FLUSH ----

// The QP's remote access flags plus `extra` (the FLUSH placement types it allows).
void set_qp_access(Solo& s, std::uint32_t access) {
  QpAttr attr;
  attr.qp_access_flags = access;
  s.e.qp->modify(attr, kQpAccessFlags, s.e.qp->path());
}
constexpr std::uint32_t kRemoteAll =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

wire::TransportHeaders flush_headers(std::uint32_t psn, std::uint64_t va, std::uint32_t rkey,
                                     std::uint32_t len, std::uint8_t placement,
                                     std::uint8_t selectivity) {
  wire::TransportHeaders h = reth_headers(Opcode::kRcFlush, psn, va, rkey, len);
  h.feth = wire::Feth{placement, selectivity};
  return h;
}

Bytes word(std::uint64_t v) {
  Bytes b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

// rxe's send_read_response_ack(): a READ Response Only without data, AETH ACK, at the PSN.
void expect_empty_read_response(const Solo::Sent& s, std::uint32_t psn, std::uint32_t msn) {
  EXPECT_EQ(s.op->opcode(), Opcode::kRcRdmaReadResponseOnly);
  EXPECT_EQ(s.h.bth.psn, psn);
  EXPECT_EQ(s.h.aeth.syndrome, 0x1f);
  EXPECT_EQ(s.h.aeth.msn, msn);
  EXPECT_TRUE(s.payload.empty());
}

TEST(ResponderAtomicWrite, PlacesItsEightBytesOnceAndAnswersWithAnEmptyReadResponse) {
  Solo s(QpType::kRc);
  const wire::TransportHeaders h =
      reth_headers(Opcode::kRcAtomicWrite, kEpsn, s.va(512), s.e.key, 8);
  s.feed(h, word(0x1122334455667788));
  auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_empty_read_response(out[0], kEpsn, 1);
  std::uint64_t v = 0;
  std::memcpy(&v, s.e.buf.data() + 512, 8);
  EXPECT_EQ(v, 0x1122334455667788u);
  // A duplicate (oA19-14): answered again, memory not written again.
  std::memset(s.e.buf.data() + 512, 0, 8);
  s.feed(h, word(0x1122334455667788));
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_empty_read_response(out[0], kEpsn, 1);
  EXPECT_EQ(s.e.buf[512], std::byte{0});
  // The expected PSN moved past it.
  post_recv(s, 1, 0, 64);
  s.feed(Opcode::kRcSendOnly, kEpsn + 1, pattern(4, 0));
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kEpsn + 1);
}

TEST(ResponderAtomicWrite, MisalignedAddressIsAnInvalidRequest) {
  Solo s(QpType::kRc);
  s.feed(reth_headers(Opcode::kRcAtomicWrite, kEpsn, s.va(4), s.e.key, 8), word(~0ull));
  expect_error_nak(s, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(s.e.buf[i], std::byte{0});
}

TEST(ResponderAtomicWrite, AnythingButEightBytesIsAnInvalidRequest) {
  Solo s(QpType::kRc);
  s.feed(reth_headers(Opcode::kRcAtomicWrite, kEpsn, s.va(0), s.e.key, 4), pattern(4, 1));
  expect_error_nak(s, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
  Solo t(QpType::kRc);  // the RETH says 8, the payload is 4
  t.feed(reth_headers(Opcode::kRcAtomicWrite, kEpsn, t.va(0), t.e.key, 8), pattern(4, 1));
  expect_error_nak(t, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
}

TEST(ResponderAtomicWrite, RegionWithoutRemoteWriteIsARemoteAccessError) {
  Solo s(QpType::kRc);
  const std::uint32_t key =
      s.e.memory.add(1, s.e.buf.data(), s.e.buf.size(),
                     kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteAtomic);
  s.feed(reth_headers(Opcode::kRcAtomicWrite, kEpsn, s.va(0), key, 8), word(~0ull));
  expect_error_nak(s, kEpsn, kRemAcc, AsyncEventType::kQpAccessErr);
  EXPECT_EQ(s.e.buf[0], std::byte{0});
}

TEST(ResponderAtomicWrite, QpWithoutRemoteWriteRefusesIt) {
  Solo s(QpType::kRc);
  set_qp_access(s, kAccessLocalWrite | kAccessRemoteAtomic);  // rxe: remote write, not atomic
  s.feed(reth_headers(Opcode::kRcAtomicWrite, kEpsn, s.va(0), s.e.key, 8), word(~0ull));
  expect_error_nak(s, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
  EXPECT_EQ(s.e.buf[0], std::byte{0});
}

TEST(ResponderFlush, RangeAndRegionFlushesAreAnsweredWithAnEmptyReadResponse) {
  Solo s(QpType::kRc);
  set_qp_access(s, kRemoteAll | kAccessFlushGlobal);
  const std::uint32_t key =
      s.e.memory.add(1, s.e.buf.data(), s.e.buf.size(), kAccessLocalWrite | kAccessFlushGlobal);
  s.feed(flush_headers(kEpsn, s.va(64), key, 128, wire::kFlushGlobal, wire::kFlushRange));
  // A region's flush names only its R_Key: the address and length are not checked (but a
  // length beyond 2^31 is an invalid request in any RETH, C9-94, as rxe checks it).
  s.feed(flush_headers(kEpsn + 1, 0, key, 1u << 31, wire::kFlushGlobal, wire::kFlushMr));
  auto out = s.drain();
  ASSERT_EQ(out.size(), 2u);
  expect_empty_read_response(out[0], kEpsn, 1);
  expect_empty_read_response(out[1], kEpsn + 1, 2);
  // A duplicate (oA19-15) is answered again.
  s.feed(flush_headers(kEpsn, s.va(64), key, 128, wire::kFlushGlobal, wire::kFlushRange));
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  expect_empty_read_response(out[0], kEpsn, 1);
}

TEST(ResponderFlush, UnregisteredRangeIsARemoteAccessError) {
  Solo s(QpType::kRc);
  set_qp_access(s, kRemoteAll | kAccessFlushGlobal);
  const std::uint32_t key =
      s.e.memory.add(1, s.e.buf.data(), s.e.buf.size(), kAccessLocalWrite | kAccessFlushGlobal);
  s.feed(flush_headers(kEpsn, s.va(s.e.buf.size() - 8), key, 64, wire::kFlushGlobal,
                       wire::kFlushRange));
  expect_error_nak(s, kEpsn, kRemAcc, AsyncEventType::kQpAccessErr);
}

TEST(ResponderFlush, RegionWithoutTheFlushAccessIsARemoteAccessError) {
  for (const std::uint8_t selectivity : {wire::kFlushRange, wire::kFlushMr}) {
    Solo s(QpType::kRc);
    set_qp_access(s, kRemoteAll | kAccessFlushGlobal);
    // Solo's region grants every remote access but FLUSH.
    s.feed(flush_headers(kEpsn, s.va(0), s.e.key, 64, wire::kFlushGlobal, selectivity));
    expect_error_nak(s, kEpsn, kRemAcc, AsyncEventType::kQpAccessErr);
  }
}

TEST(ResponderFlush, QpWithoutThePlacementTypeRefusesIt) {
  Solo s(QpType::kRc);  // no flush access at all
  const std::uint32_t key =
      s.e.memory.add(1, s.e.buf.data(), s.e.buf.size(), kAccessLocalWrite | kAccessFlushGlobal);
  s.feed(flush_headers(kEpsn, s.va(0), key, 64, wire::kFlushGlobal, wire::kFlushRange));
  expect_error_nak(s, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
  Solo t(QpType::kRc);  // global allowed, persistence asked for too
  set_qp_access(t, kRemoteAll | kAccessFlushGlobal);
  t.feed(flush_headers(kEpsn, t.va(0), key, 64, wire::kFlushGlobal | wire::kFlushPersistent,
                       wire::kFlushRange));
  expect_error_nak(t, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
}

TEST(ResponderFlush, ReservedSelectivityIsAnInvalidRequest) {
  Solo s(QpType::kRc);
  set_qp_access(s, kRemoteAll | kAccessFlushGlobal);
  const std::uint32_t key =
      s.e.memory.add(1, s.e.buf.data(), s.e.buf.size(), kAccessLocalWrite | kAccessFlushGlobal);
  s.feed(flush_headers(kEpsn, s.va(0), key, 64, wire::kFlushGlobal, 2));
  expect_error_nak(s, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
}

TEST(ResponderAtomicWrite, WithoutResponderResourcesItIsAnInvalidRequest) {
  Solo s(QpType::kRc);
  s.set(14, 7, 7, 12, /*max_rd_atomic=*/0);
  s.feed(reth_headers(Opcode::kRcAtomicWrite, kEpsn, s.va(0), s.e.key, 8), word(1));
  expect_error_nak(s, kEpsn, kInvReq, AsyncEventType::kQpReqErr);
}

TEST(Responder, PacketsInResetInitOrErrAreDropped) {
  Solo s(QpType::kRc);
  QpAttr attr;
  attr.qp_state = QpState::kErr;
  s.e.qp->modify(attr, kQpState, s.e.qp->path());
  s.feed(Opcode::kRcSendOnly, kEpsn, pattern(8, 0));
  EXPECT_TRUE(s.drain().empty());
  EXPECT_EQ(s.e.qp->counters().dropped, 1u);
}

TEST(Responder, WrongTransportOrPkeyIsDropped) {
  Solo s(QpType::kRc);
  post_recv(s, 1, 0, 64);
  s.feed(Opcode::kUcSendOnly, kEpsn, pattern(8, 0));
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcSendOnly);
  h.bth.psn = kEpsn;
  h.bth.pkey = 0x1234;
  s.feed(h, pattern(8, 0));
  EXPECT_TRUE(s.drain().empty());
  EXPECT_TRUE(s.e.rcq.wcs.empty());
  EXPECT_EQ(s.e.qp->counters().dropped, 2u);
}

}  // namespace
}  // namespace uroce::test

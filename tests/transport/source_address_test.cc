// The source-address check of connected QPs (rxe_recv.c check_addr()): an RC or UC QP takes
// packets only from the address of its path. A third host that knows the QPN and the PSN can
// neither write memory, complete or fail WQEs, nor make the QP NAK, retry or slow down. UD takes
// datagrams from anyone. The source port too (source pinning, issue 44): a connected QP takes
// packets only from its peer's UDP port, known or learned.
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

// Requests from `src` (at the Solo's src_port) that would each change the QP if it took them: an
// RDMA WRITE at the expected PSN with a valid rkey and address, a SEND that would take the receive
// WQE, a future PSN that would earn a sequence NAK, a CNP and an ECN CE mark. Five packets.
void feed_forged_requests(Solo& s, const wire::IpAddress& src, const Bytes& data) {
  s.feed_from(src, reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(0), s.e.key, 256), data);
  s.feed_from(src, request_headers(Opcode::kRcSendOnly, kEpsn), pattern(16, 6));
  s.feed_from(src, reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn + 3, s.va(0), s.e.key, 256), data);
  s.feed_from(src, request_headers(Opcode::kCnp, 0));
  s.feed_from(src, reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(0), s.e.key, 256), data, 3);
}

// After feed_forged_requests() to a QP with one receive WQE posted: nothing moved.
void expect_requests_untouched(Solo& s) {
  EXPECT_TRUE(s.drain().empty());  // no ACK, no NAK
  EXPECT_TRUE(s.e.rcq.wcs.empty());
  EXPECT_EQ(s.e.rq->size(), 1u);
  EXPECT_TRUE(all_zero(s, 0, 256));
  const transport::QpCounters& c = s.e.qp->counters();
  EXPECT_EQ(c.packets_received, 0u);
  EXPECT_EQ(c.out_of_sequence, 0u);
  EXPECT_EQ(c.duplicate_requests, 0u);
  EXPECT_EQ(c.seq_naks_sent, 0u);
  EXPECT_EQ(c.dropped, 0u);
  EXPECT_EQ(s.e.cc.cnps, 0);
  EXPECT_EQ(s.e.cc.ecn_ce_marks, 0);
  EXPECT_EQ(s.e.qp->state(), QpState::kRts);
}

// Two RDMA WRITEs sent (PSNs kSqPsn and kSqPsn + 1); returns the ACK timer's deadline.
Instant send_two_writes(Solo& s) {
  for (std::uint64_t id = 1; id <= 2; ++id) {
    const Sge sge{s.va(0), 100, s.e.key};
    transport::SendRequest r = request(id, WrOpcode::kRdmaWrite, std::span(&sge, 1));
    r.remote_addr = 0x7f00'0000'1000;
    r.rkey = 0xabcd;
    EXPECT_EQ(s.e.qp->post_send(r), Errc::kOk);
  }
  EXPECT_EQ(s.drain().size(), 2u);
  return s.e.qp->poll_timeout();
}

// Responses from `src` to send_two_writes(): an ACK of both, a sequence NAK (go back), an RNR NAK
// (wait), a remote access NAK (fail); then nothing may have moved. Four packets.
void expect_forged_responses_ignored(Solo& s, const wire::IpAddress& src, Instant deadline) {
  s.feed_from(src, aeth(kSqPsn + 1, wire::make_ack_syndrome()));
  s.feed_from(src, aeth(kSqPsn, wire::make_nak_syndrome(wire::NakCode::kPsnSequenceError)));
  s.feed_from(src, aeth(kSqPsn, wire::make_rnr_nak_syndrome(1)));
  s.feed_from(src, aeth(kSqPsn, wire::make_nak_syndrome(wire::NakCode::kRemoteAccessError)));
  EXPECT_TRUE(s.drain().empty());  // no retransmission
  EXPECT_TRUE(s.e.scq.wcs.empty());
  EXPECT_EQ(s.e.qp->outstanding_send_wqes(), 2u);
  EXPECT_EQ(s.e.qp->poll_timeout(), deadline);  // no RNR wait, the ACK timer untouched
  EXPECT_EQ(s.e.qp->state(), QpState::kRts);
  const transport::QpCounters& c = s.e.qp->counters();
  EXPECT_EQ(c.seq_naks_received, 0u);
  EXPECT_EQ(c.rnr_naks_received, 0u);
  EXPECT_EQ(c.other_naks_received, 0u);
  EXPECT_EQ(c.dropped, 0u);
}

TEST(SourceAddress, RcRequestsFromAThirdHostTouchNothing) {
  Solo s(QpType::kRc);
  post_recv(s, 1, 8192, 64);
  const Bytes data = pattern(256, 5);
  feed_forged_requests(s, kThird, data);
  expect_requests_untouched(s);
  const transport::QpCounters& c = s.e.qp->counters();
  EXPECT_EQ(c.src_addr_mismatch, 5u);

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
  const Instant deadline = send_two_writes(s);
  ASSERT_FALSE(deadline.is_never());
  expect_forged_responses_ignored(s, kThird, deadline);
  EXPECT_EQ(s.e.qp->counters().src_addr_mismatch, 4u);

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

// Source pinning (issue 44): the peer's address is not enough, since any user of the peer's
// host can send from it; a connected QP also holds the peer to its UDP source port.
constexpr std::uint16_t kOtherPort = 40123;  // an unprivileged user's ephemeral port

TEST(SourcePort, RequestsFromAnotherPortOfAKnownPeerTouchNothing) {
  Solo s(QpType::kRc);
  s.e.qp->set_peer_udp_port(wire::kRoceV2Port);  // a uroce peer
  post_recv(s, 1, 8192, 64);
  const Bytes data = pattern(256, 5);
  s.src_port = kOtherPort;
  feed_forged_requests(s, s.peer, data);
  // And a duplicate, which would earn a re-ACK.
  s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn - 1, s.va(0), s.e.key, 256), data);
  expect_requests_untouched(s);
  const transport::QpCounters& c = s.e.qp->counters();
  EXPECT_EQ(c.src_port_mismatch, 6u);
  EXPECT_EQ(c.src_addr_mismatch, 0u);
  EXPECT_EQ(s.e.qp->peer_udp_port(), wire::kRoceV2Port);

  // The peer's own WRITE at that PSN, from 4791, is new: executed and ACKed.
  s.src_port = wire::kRoceV2Port;
  s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(0), s.e.key, 256), data);
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.aeth.syndrome, wire::make_ack_syndrome());
  EXPECT_EQ(out[0].h.bth.psn, kEpsn);
  EXPECT_EQ(slice(s.e, 0, 256), data);
  EXPECT_EQ(c.packets_received, 1u);
  EXPECT_EQ(c.src_port_mismatch, 6u);
}

TEST(SourcePort, ResponsesFromAnotherPortOfAKnownPeerTouchNothing) {
  Solo s(QpType::kRc);
  s.e.qp->set_peer_udp_port(wire::kRoceV2Port);
  const Instant deadline = send_two_writes(s);
  s.src_port = kOtherPort;
  expect_forged_responses_ignored(s, s.peer, deadline);
  EXPECT_EQ(s.e.qp->counters().src_port_mismatch, 4u);

  s.src_port = wire::kRoceV2Port;
  s.feed(aeth(kSqPsn + 1, wire::make_ack_syndrome()));
  ASSERT_EQ(s.e.scq.wcs.size(), 2u);
  for (const Wc& wc : s.e.scq.wcs) EXPECT_EQ(wc.status, WcStatus::kSuccess);
}

// A peer that is not known to be uroce (rxe, hardware): its port is the one of its first packet
// in sequence; what comes before from other ports is handled as before, and teaches nothing.
TEST(SourcePort, AnRxePeerIsPinnedOnItsFirstPacketInSequence) {
  Solo s(QpType::kRc);
  EXPECT_EQ(s.e.qp->peer_udp_port(), std::nullopt);  // learning is the default
  post_recv(s, 1, 8192, 64);
  post_recv(s, 2, 8192, 64);
  const Bytes data = pattern(64, 3);
  constexpr std::uint16_t kRxePort = 0xc123;  // rdma_get_udp_sport()'s form
  // A future PSN (one sequence NAK), a duplicate (a re-ACK) and a CNP: none pins.
  s.src_port = kOtherPort;
  s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn + 5, s.va(0), s.e.key, 64), data);
  s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn - 1, s.va(0), s.e.key, 64), data);
  s.feed(request_headers(Opcode::kCnp, 0));
  EXPECT_FALSE(s.drain().empty());  // the NAK (and the re-ACK, coalesced or not)
  EXPECT_EQ(s.e.qp->counters().seq_naks_sent, 1u);
  EXPECT_EQ(s.e.qp->peer_udp_port(), std::nullopt);
  // The WRITE at the ePSN pins its port.
  s.src_port = kRxePort;
  s.feed(reth_headers(Opcode::kRcRdmaWriteOnly, kEpsn, s.va(0), s.e.key, 64), data);
  EXPECT_EQ(s.e.qp->peer_udp_port(), kRxePort);
  EXPECT_EQ(s.drain().size(), 1u);
  EXPECT_EQ(slice(s.e, 0, 64), data);
  const transport::QpCounters& c = s.e.qp->counters();
  const std::uint64_t received = c.packets_received;
  const std::uint64_t naks = c.seq_naks_sent;
  // From then on another port touches nothing, whatever its PSN.
  s.src_port = kOtherPort;
  s.feed(request_headers(Opcode::kRcSendOnly, kEpsn + 1), pattern(16, 6));
  s.feed(request_headers(Opcode::kRcSendOnly, kEpsn + 9), pattern(16, 6));
  s.feed(request_headers(Opcode::kRcSendOnly, kEpsn), pattern(16, 6));
  EXPECT_TRUE(s.drain().empty());
  EXPECT_TRUE(s.e.rcq.wcs.empty());
  EXPECT_EQ(c.src_port_mismatch, 3u);
  EXPECT_EQ(c.packets_received, received);
  EXPECT_EQ(c.seq_naks_sent, naks);
  // A CNP from another port (ConnectX sends them from port 0) still reaches congestion control.
  s.src_port = 0;
  s.feed(request_headers(Opcode::kCnp, 0));
  EXPECT_EQ(s.e.cc.cnps, 2);
  // The peer's SEND at the next PSN completes the first receive.
  s.src_port = kRxePort;
  s.feed(request_headers(Opcode::kRcSendOnly, kEpsn + 1), pattern(16, 6));
  ASSERT_EQ(s.e.rcq.wcs.size(), 1u);
  EXPECT_EQ(s.e.rcq.wcs[0].wr_id, 1u);
  EXPECT_EQ(s.e.rcq.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c.src_port_mismatch, 3u);
}

TEST(SourcePort, ARequesterLearnsThePortFromAnAckOfAnOutstandingPsn) {
  Solo s(QpType::kRc);
  const Sge sge{s.va(0), 100, s.e.key};
  transport::SendRequest r = request(1, WrOpcode::kRdmaWrite, std::span(&sge, 1));
  r.remote_addr = 0x7f00'0000'1000;
  r.rkey = 0xabcd;
  ASSERT_EQ(s.e.qp->post_send(r), Errc::kOk);
  ASSERT_EQ(s.drain().size(), 1u);
  // An ACK of a PSN never sent and a stale one teach nothing.
  s.src_port = kOtherPort;
  s.feed(aeth(kSqPsn + 7, wire::make_ack_syndrome()));
  s.feed(aeth(kSqPsn - 1, wire::make_ack_syndrome()));
  EXPECT_EQ(s.e.qp->peer_udp_port(), std::nullopt);
  s.src_port = 0xc001;
  s.feed(aeth(kSqPsn, wire::make_ack_syndrome()));
  EXPECT_EQ(s.e.qp->peer_udp_port(), 0xc001);
  ASSERT_EQ(s.e.scq.wcs.size(), 1u);
}

TEST(SourcePort, ALearnedPortIsForgottenWithThePathAKnownOneAtReset) {
  Solo s(QpType::kUc);
  s.src_port = 0xc001;
  s.feed(request_headers(Opcode::kUcRdmaWriteOnly, kEpsn), {});
  EXPECT_EQ(s.e.qp->peer_udp_port(), 0xc001);
  s.e.qp->modify(QpAttr{}, kQpAv, s.e.qp->path());  // RTS -> RTS with a path
  EXPECT_EQ(s.e.qp->peer_udp_port(), std::nullopt);
  s.e.qp->set_peer_udp_port(wire::kRoceV2Port);
  s.e.qp->modify(QpAttr{}, kQpAv, s.e.qp->path());
  EXPECT_EQ(s.e.qp->peer_udp_port(), wire::kRoceV2Port);
  // A known port holds CNPs to it too.
  s.src_port = 0;
  s.feed(request_headers(Opcode::kCnp, 0));
  EXPECT_EQ(s.e.cc.cnps, 0);
  EXPECT_EQ(s.e.qp->counters().src_port_mismatch, 1u);
  s.reconnect();
  EXPECT_EQ(s.e.qp->peer_udp_port(), std::nullopt);
}

}  // namespace
}  // namespace uroce::test

// Congestion control in the transport (DCQCN, cc/dcqcn.h): the notification point answers a
// CE-marked packet with a CNP to the peer's QP, byte-exact and at most one per window; with
// DCQCN every packet leaves ECN-capable; a CNP from the peer cuts the QP's rate and its requests
// are paced (the QP's timer says when the next may go). Without congestion control (rxe's way)
// none of this happens and the packets are as before.
#include <gtest/gtest.h>

#include <vector>

#include "cc/dcqcn.h"
#include "harness.h"
#include "steps.h"
#include "wire/aeth.h"
#include "wire/opcode.h"

namespace uroce::test {
namespace {

using wire::Opcode;

cc::DcqcnParams ten_gig() {
  cc::DcqcnParams p;
  p.line_rate_mbps = 10'000;
  return p;
}

wire::TransportHeaders send_only(std::uint32_t psn) {
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcSendOnly);
  h.bth.psn = psn;
  h.bth.ack_req = true;
  return h;
}

TEST(Congestion, ACeMarkedRequestIsAnsweredWithACnpFirst) {
  Solo s(QpType::kRc);
  cc::Dcqcn dcqcn(ten_gig());
  s.e.cc.inner = &dcqcn;
  post_recv(s, 1, 0, 4096);
  const std::byte data[16] = {};
  s.feed_from(s.peer, send_only(0x5000), data, 3);
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 2u);
  // The CNP: opcode 0x81, P_Key 0xffff, BECN, the peer's QPN, PSN 0, AckReq 0, in DSCP 48 with
  // ECT(0) (the ConnectX capture's TOS 0xc2).
  EXPECT_EQ(out[0].op->opcode(), Opcode::kCnp);
  EXPECT_EQ(out[0].h.bth.pkey, 0xffff);
  EXPECT_TRUE(out[0].h.bth.becn);
  EXPECT_FALSE(out[0].h.bth.fecn);
  EXPECT_EQ(out[0].h.bth.dest_qpn, Solo::kPeerQpn);
  EXPECT_EQ(out[0].h.bth.psn, 0u);
  EXPECT_FALSE(out[0].h.bth.ack_req);
  EXPECT_TRUE(out[0].payload.empty());
  EXPECT_EQ(out[0].av.traffic_class, 0xc2);
  // Then the ACK, ECN-capable.
  EXPECT_EQ(out[1].op->opcode(), Opcode::kRcAcknowledge);
  EXPECT_EQ(out[1].av.traffic_class & 3u, 2u);
  EXPECT_EQ(s.e.qp->counters().np_ecn_marked_roce_packets, 1u);
  EXPECT_EQ(s.e.qp->counters().np_cnp_sent, 1u);
}

TEST(Congestion, TheCnpIsByteExact) {
  Solo s(QpType::kRc);
  cc::Dcqcn dcqcn(ten_gig());
  s.e.cc.inner = &dcqcn;
  post_recv(s, 1, 0, 4096);
  s.feed_from(s.peer, send_only(0x5000), {}, 3);
  transport::TxPacket tx;
  ASSERT_TRUE(s.e.qp->poll_transmit(s.now, tx));
  // BTH (12 bytes) and 16 reserved bytes, as Annex A17 and the ConnectX capture in roce-facts.md
  // lay them out; the datapath adds the ICRC.
  const std::vector<std::byte> want = {std::byte{0x81}, std::byte{0x00},           std::byte{0xff},
                                       std::byte{0xff}, std::byte{0x40},           std::byte{0x00},
                                       std::byte{0x00}, std::byte{Solo::kPeerQpn}, std::byte{0x00},
                                       std::byte{0x00}, std::byte{0x00},           std::byte{0x00}};
  ASSERT_EQ(tx.header_bytes, 28u);
  EXPECT_EQ(std::vector<std::byte>(tx.header.begin(), tx.header.begin() + 12), want);
  for (std::size_t i = 12; i < 28; ++i) EXPECT_EQ(tx.header[i], std::byte{0}) << i;
}

TEST(Congestion, OneCnpPerWindowHoweverManyMarks) {
  Solo s(QpType::kRc);
  cc::Dcqcn dcqcn(ten_gig());
  s.e.cc.inner = &dcqcn;
  for (std::uint64_t i = 0; i < 4; ++i) post_recv(s, i, 0, 4096);
  s.feed_from(s.peer, send_only(0x5000), {}, 3);
  s.feed_from(s.peer, send_only(0x5001), {}, 3);
  auto cnps = [](const std::vector<Solo::Sent>& out) {
    int n = 0;
    for (const auto& p : out) n += p.op->opcode() == Opcode::kCnp ? 1 : 0;
    return n;
  };
  EXPECT_EQ(cnps(s.drain()), 1);
  s.now = s.now + Duration::us(50);  // np_min_time_between_cnps
  s.feed_from(s.peer, send_only(0x5002), {}, 3);
  EXPECT_EQ(cnps(s.drain()), 1);
  EXPECT_EQ(s.e.qp->counters().np_ecn_marked_roce_packets, 3u);
  EXPECT_EQ(s.e.qp->counters().np_cnp_sent, 2u);
}

TEST(Congestion, WithoutCongestionControlNothingChanges) {
  Solo s(QpType::kRc);
  post_recv(s, 1, 0, 4096);
  s.feed_from(s.peer, send_only(0x5000), {}, 3);
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kRcAcknowledge);
  EXPECT_EQ(out[0].av.traffic_class, 0u);  // Not-ECT, as the traffic class says
  EXPECT_EQ(s.e.cc.ecn_ce_marks, 1);
  EXPECT_EQ(s.e.qp->counters().np_cnp_sent, 0u);
}

TEST(Congestion, ACnpFromThePeerCutsTheRateAndPacesRequests) {
  Solo s(QpType::kRc, 1024);
  cc::DcqcnParams p = ten_gig();
  p.burst_bytes = 4096;
  cc::Dcqcn dcqcn(p);
  s.e.cc.inner = &dcqcn;
  wire::TransportHeaders cnp;
  cnp.bth.opcode = static_cast<std::uint8_t>(Opcode::kCnp);
  cnp.bth.becn = true;
  s.feed(cnp);
  EXPECT_EQ(s.e.qp->counters().rp_cnp_handled, 1u);
  ASSERT_EQ(dcqcn.reaction_point().current_mbps(), 5004u);
  // A 64 KiB SEND: 64 packets of 1024 bytes. The burst (4 KiB) leaves at once, then the QP waits.
  transport::SendRequest r;
  r.wr_id = 1;
  r.opcode = WrOpcode::kSend;
  r.send_flags = kSendSignaled;
  const Sge sge{s.va(0), 65536, s.e.key};
  r.sges = std::span<const Sge>(&sge, 1);
  ASSERT_EQ(s.e.qp->post_send(r), Errc::kOk);
  const auto first = s.drain();
  EXPECT_EQ(first.size(), 5u);  // 4 KiB of allowance, and the packet that reaches past it
  for (const auto& pkt : first) EXPECT_EQ(pkt.av.traffic_class & 3u, 2u);  // ECT(0)
  const Instant next = s.e.qp->poll_timeout();
  ASSERT_FALSE(next.is_never());
  EXPECT_GT(next, s.now);
  // 1024 bytes at 5004 Mb/s take 1.637 us: the next packet may go about then.
  EXPECT_LE(next - s.now, Duration::us(2));
  s.now = next;
  EXPECT_EQ(s.drain().size(), 1u);
}

// A 64 KiB SEND from the Solo's buffer (64 packets at MTU 1024).
void post_64k_send(Solo& s, std::uint64_t wr_id) {
  transport::SendRequest r;
  r.wr_id = wr_id;
  r.opcode = WrOpcode::kSend;
  r.send_flags = kSendSignaled;
  const Sge sge{s.va(0), 65536, s.e.key};
  r.sges = std::span<const Sge>(&sge, 1);
  ASSERT_EQ(s.e.qp->post_send(r), Errc::kOk);
}

TEST(Congestion, AWindowFromCongestionControlCapsThePsnsOutstanding) {
  Solo s(QpType::kRc, 1024);
  s.e.cc.window = 10;
  post_64k_send(s, 1);
  EXPECT_EQ(s.drain().size(), 10u);
  // An ACK of the first four opens the window by four, and congestion control hears of them.
  peer_response(s, 0x1000 + 3);
  EXPECT_EQ(s.e.cc.acked_packets, 4u);
  EXPECT_EQ(s.drain().size(), 4u);
  // Without a window of its own the QP's (kMaxUnackedPsns) still holds.
  s.e.cc.window = cc::kUnlimitedWindow;
  post_64k_send(s, 2);
  post_64k_send(s, 3);
  EXPECT_EQ(s.drain().size(), transport::kMaxUnackedPsns - 10);
}

TEST(Congestion, LossesAreReportedOncePerRecovery) {
  Solo s(QpType::kRc, 1024);
  s.set(/*timeout=*/14, /*retry_cnt=*/7, /*rnr_retry=*/7);
  post_64k_send(s, 1);
  ASSERT_EQ(s.drain().size(), 64u);
  // A sequence NAK at the fifth PSN: one loss, and a go-back-N from there.
  peer_response(s, 0x1000 + 4, wire::make_nak_syndrome(wire::NakCode::kPsnSequenceError));
  EXPECT_EQ(s.e.cc.losses[static_cast<int>(cc::LossSignal::kNak)], 1);
  EXPECT_EQ(s.e.cc.acked_packets, 4u);
  EXPECT_EQ(s.drain().size(), 60u);
  // The same NAK again while going back is no new loss.
  peer_response(s, 0x1000 + 4, wire::make_nak_syndrome(wire::NakCode::kPsnSequenceError));
  EXPECT_EQ(s.e.cc.losses[static_cast<int>(cc::LossSignal::kNak)], 1);
  // Silence until the ACK timeout: a timeout loss.
  s.advance(s.e.qp->ack_timeout());
  EXPECT_EQ(s.e.cc.losses[static_cast<int>(cc::LossSignal::kTimeout)], 1);
}

}  // namespace
}  // namespace uroce::test

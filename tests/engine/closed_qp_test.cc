// A destroyed RC QP still acknowledges its peer's retransmission of a message it had executed
// (transport/closed_qps.h): first its own engine, then, once its context has closed, the
// device's coordinator. Without it the peer's WQE fails with RETRY_EXC_ERR although the message
// was delivered: ibv_rc_pingpong's last iteration under loss (compat.faults.loss5.rc_pingpong).
//
// b's fault stage drops every ACK it sends, so a's SEND is delivered but never acknowledged
// while b's QP lives; a retransmits every 67 ms (timeout 14) and has 7 retries.
#include <gtest/gtest.h>

#include "device/two_devices.h"

namespace uroce::engine::test {
namespace {

// a SENDs to b; b receives it with its ACKs dropped, then destroys its QP.
void deliver_unacknowledged(Side& a, Side& b) {
  pair_up(a, b, 14);
  ASSERT_TRUE(b.dev->set_faults("dir=tx,class=ack,loss=100%").ok());
  const Sge recv{b.va(0), 64, b.mr.lkey};
  const RecvWr rwr{1, std::span(&recv, 1)};
  ASSERT_EQ(b.dev->device().post_recv(b.qp, std::span(&rwr, 1), nullptr), Errc::kOk);
  const Sge send{a.va(0), 10, a.mr.lkey};
  SendWr wr;
  wr.wr_id = 2;
  wr.sg_list = std::span(&send, 1);
  wr.send_flags = kSendSignaled;
  ASSERT_EQ(a.dev->device().post_send(a.qp, std::span(&wr, 1), nullptr), Errc::kOk);
  const std::vector<Wc> got = run_until(b, a, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, WcStatus::kSuccess);
  EXPECT_EQ(got[0].opcode, WcOpcode::kRecv);
  // a has no completion: its SEND waits for an ACK.
  Wc wcs[4];
  auto k = a.dev->device().poll_cq(a.cq, wcs);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k.value(), 0u);
  ASSERT_EQ(b.dev->device().destroy_qp(b.qp), Errc::kOk);
}

void make_pair(Side& a, Side& b, const char* ip_a, const char* ip_b) {
  SideOptions o;
  o.sharing = UdpDevice::Sharing::kShared;
  make_side(a, ip_a, o);
  make_side(b, ip_b, o);
}

TEST(ClosedQp, TheEngineAcknowledgesADuplicateForADestroyedQp) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  make_pair(a, b, a_ip, b_ip);
  deliver_unacknowledged(a, b);
  ASSERT_TRUE(b.dev->set_faults("").ok());  // b's next ACK gets through
  const std::vector<Wc> got = run_until(a, b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 2u);
  EXPECT_EQ(got[0].status, WcStatus::kSuccess) << static_cast<int>(got[0].status);
  EXPECT_GE(b.dev->engine().counters().closed_qp_acks, 1u);
  const DeviceStats st = a.dev->stats();
  ASSERT_EQ(st.qps.size(), 1u);
  EXPECT_GE(st.qps[0].counters.retransmitted_packets, 1u);
}

TEST(ClosedQp, TheCoordinatorAcknowledgesOnceTheContextHasClosed) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  make_pair(a, b, a_ip, b_ip);
  deliver_unacknowledged(a, b);
  b.dev.reset();  // the process exits: its block goes back to the coordinator
  const std::vector<Wc> got = run_until(a, b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 2u);
  EXPECT_EQ(got[0].status, WcStatus::kSuccess) << static_cast<int>(got[0].status);
}

// The control: a request the destroyed QP never executed gets no ACK, from the engine or the
// coordinator, and the peer's WQE fails as on hardware.
TEST(ClosedQp, ANewRequestForADestroyedQpIsNotAcknowledged) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  make_pair(a, b, a_ip, b_ip);
  pair_up(a, b, 10);  // 4.2 ms x 8 tries
  ASSERT_EQ(b.dev->device().destroy_qp(b.qp), Errc::kOk);
  const Sge src{a.va(0), 16, a.mr.lkey};
  const SendWr wr = write_wr(3, src, b, 0);
  ASSERT_EQ(a.dev->device().post_send(a.qp, std::span(&wr, 1), nullptr), Errc::kOk);
  const std::vector<Wc> got = run_until(a, b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, WcStatus::kRetryExcErr) << static_cast<int>(got[0].status);
  EXPECT_EQ(b.dev->engine().counters().closed_qp_acks, 0u);
  EXPECT_GE(b.dev->engine().counters().rx_unknown_qpn, 1u);
}

}  // namespace
}  // namespace uroce::engine::test

// Issue 43: a device with thousands of QPs must not pay for the idle ones in every round. The
// engine finds QPs through its directory only for a received packet, an active QP's turn, a due
// timer and a doorbell (EngineCounters::qp_visits), so what a round costs grows with the traffic
// and the active QPs. With 5000 idle QPs in RTS beside one active pair, hundreds of rounds of
// traffic visit fewer QPs in all than one walk over every QP would.
#include <gtest/gtest.h>

#include "device/two_devices.h"
#include "verbs/connect.h"

namespace uroce::engine::test {
namespace {

constexpr std::uint32_t kIdle = 5000;
constexpr std::uint32_t kMessages = 200;

// `n` RC QPs on `s`'s device, in RTS towards `peer`'s QP number, never posted to.
std::vector<QpHandle> add_idle_qps(Side& s, const Side& peer, std::uint32_t n) {
  Device& dev = s.dev->device();
  std::vector<QpHandle> out;
  out.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    QpInitAttr init;
    init.send_cq = s.cq;
    init.recv_cq = s.cq;
    init.cap = QpCap{1, 1, 1, 1, 0};
    auto qp = dev.create_qp(s.pd, init);
    EXPECT_TRUE(qp.ok());
    if (!qp.ok()) break;
    verbs::RcConnection c;
    c.peer_ip = v4(peer.ip.c_str());
    c.peer_qpn = peer.qpn;
    EXPECT_EQ(verbs::connect_rc_qp(dev, qp->handle, c), Errc::kOk);
    out.push_back(qp->handle);
  }
  return out;
}

TEST(IdleQps, RoundsVisitTheActiveQpsNotTheIdleOnes) {
  const char* const a_ip = unique_ip();
  const char* const b_ip = unique_ip();
  Side a, b;
  make_side(a, a_ip);
  make_side(b, b_ip);
  pair_up(a, b);
  const std::vector<QpHandle> idle = add_idle_qps(a, b, kIdle);
  ASSERT_EQ(idle.size(), kIdle);

  const std::uint64_t before = a.dev->engine().counters().qp_visits;
  std::uint64_t rounds = 0;
  for (std::uint32_t m = 0; m < kMessages; ++m) {
    const Sge sge{a.va(0), 64, a.mr.lkey};
    const SendWr wr = write_wr(m, sge, b, 64);
    ASSERT_EQ(a.dev->device().post_send(a.qp, std::span(&wr, 1), nullptr), Errc::kOk);
    std::size_t done = 0;
    const Instant give_up = UdpDevice::now() + Duration::s(20);
    while (done == 0 && UdpDevice::now() < give_up) {
      a.dev->progress();  // one round each
      ++rounds;
      b.dev->progress();
      Wc wc[4];
      auto k = a.dev->device().poll_cq(a.cq, wc);
      ASSERT_TRUE(k.ok());
      for (std::size_t i = 0; i < k.value(); ++i) {
        ASSERT_EQ(wc[i].status, WcStatus::kSuccess);
        ASSERT_EQ(wc[i].wr_id, m);
      }
      done += k.value();
    }
    ASSERT_EQ(done, 1u) << "message " << m;
  }
  const std::uint64_t visits = a.dev->engine().counters().qp_visits - before;
  EXPECT_GE(rounds, kMessages);
  // One walk over every QP in any of these rounds alone would be kIdle visits.
  EXPECT_LT(visits, kIdle) << visits << " QP visits in " << rounds << " rounds";
  // And per message a handful: the WRITE's turn, its ACK, its timer, its doorbell.
  EXPECT_LE(visits, kMessages * 8u) << visits << " QP visits for " << kMessages << " messages";
}

}  // namespace
}  // namespace uroce::engine::test

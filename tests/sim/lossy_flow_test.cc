// One flow under random loss (sim/lossy_flow.h), with the loss recovery of transport/recovery.cc
// and with IBTA's (a fixed ACK timeout and a 128-PSN window).
#include "sim/lossy_flow.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace uroce::sim {
namespace {

LossyFlowOptions with_loss(std::uint32_t per_100k, bool adaptive) {
  LossyFlowOptions o;
  o.loss = fault::Ratio{per_100k, 100'000};
  o.adaptive_recovery = adaptive;
  return o;
}

void print(const char* what, const LossyFlowResult& r) {
  std::printf(
      "%s: goodput %.3f Gb/s, retransmitted %.4f, timeouts %llu, adaptive %llu, probes %llu, "
      "naks %llu, srtt %lld ns, rto %lld ns, window %u\n",
      what, r.goodput_bps / 1e9, r.retransmitted_share,
      static_cast<unsigned long long>(r.timeouts),
      static_cast<unsigned long long>(r.adaptive_timeouts),
      static_cast<unsigned long long>(r.tail_probes), static_cast<unsigned long long>(r.seq_naks),
      static_cast<long long>(r.srtt_ns), static_cast<long long>(r.rto_ns), r.send_window);
}

TEST(LossyFlow, Explore) {
  for (bool adaptive : {true, false}) {
    for (std::uint32_t l : {0u, 100u, 1000u, 5000u}) {
      const LossyFlowResult r = run_lossy_flow(with_loss(l, adaptive));
      ASSERT_TRUE(r.ok) << r.failure;
      char what[64];
      std::snprintf(what, sizeof what, "%s loss %u/100k", adaptive ? "adaptive" : "ibta", l);
      print(what, r);
    }
  }
}

}  // namespace
}  // namespace uroce::sim

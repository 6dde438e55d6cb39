// One flow under random loss in the simulator (sim/lossy_flow.h): goodput with uroce's loss
// recovery (adaptive RTO, tail-loss probe, BDP window) and with IBTA's (the full ACK timeout, a
// 128-PSN window), as ratios of the loss-free goodput of the same seed, at 0.1%, 1% and 5% loss.
// Simulated time: the figures are the same on any machine.
//
//   lossy_flow [--seed 1] [--seeds 5] [--duration-ms 200]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <vector>

#include "sim/lossy_flow.h"

namespace {

struct Stats {
  std::vector<double> ratio;
  double retransmitted = 0;
  std::uint64_t timeouts = 0, adaptive = 0, probes = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "One RC flow under random loss: goodput against no loss, with and without uroce's "
      "loss recovery");
  std::uint64_t seed = 1;
  std::uint32_t seeds = 5;
  std::int64_t duration_ms = 200;
  app.add_option("--seed", seed, "First seed");
  app.add_option("--seeds", seeds, "Seeds")->check(CLI::Range(1, 1000));
  app.add_option("--duration-ms", duration_ms, "Simulated time of each run")
      ->check(CLI::Range(20, 100000));
  CLI11_PARSE(app, argc, argv);

  const std::uint32_t losses[] = {100, 1000, 5000};  // per 100,000 frames
  std::printf("%-6s %-9s %8s %8s %8s %14s %9s %9s %7s\n", "loss", "recovery", "mean", "min", "max",
              "retransmitted", "timeouts", "adaptive", "probes");
  for (std::uint32_t loss : losses) {
    for (bool adaptive : {true, false}) {
      Stats st;
      for (std::uint32_t i = 0; i < seeds; ++i) {
        uroce::sim::LossyFlowOptions o;
        o.seed = seed + i;
        o.duration_ns = duration_ms * 1'000'000;
        o.adaptive_recovery = adaptive;
        const uroce::sim::LossyFlowResult clean = uroce::sim::run_lossy_flow(o);
        o.loss = uroce::fault::Ratio{loss, 100'000};
        const uroce::sim::LossyFlowResult r = uroce::sim::run_lossy_flow(o);
        if (!clean.ok || !r.ok) {
          std::fprintf(stderr, "FAIL %s%s\n", clean.failure.c_str(), r.failure.c_str());
          return 1;
        }
        st.ratio.push_back(r.goodput_bps / clean.goodput_bps);
        st.retransmitted += r.retransmitted_share / seeds;
        st.timeouts += r.timeouts;
        st.adaptive += r.adaptive_timeouts;
        st.probes += r.tail_probes;
      }
      double mean = 0;
      for (double x : st.ratio) mean += x / static_cast<double>(st.ratio.size());
      std::printf(
          "%5.1f%% %-9s %8.3f %8.3f %8.3f %14.3f %9llu %9llu %7llu\n", loss / 1000.0,
          adaptive ? "uroce" : "IBTA", mean, *std::min_element(st.ratio.begin(), st.ratio.end()),
          *std::max_element(st.ratio.begin(), st.ratio.end()), st.retransmitted,
          static_cast<unsigned long long>(st.timeouts),
          static_cast<unsigned long long>(st.adaptive), static_cast<unsigned long long>(st.probes));
    }
  }
  return 0;
}

// One flow under random loss in the simulator (sim/lossy_flow.h): goodput with uroce's loss
// recovery (adaptive RTO, tail-loss probe, BDP window) and with IBTA's (the full ACK timeout, a
// 128-PSN window), as ratios of the loss-free goodput of the same seed, at 0.1%, 1% and 5% loss.
// Simulated time: the figures are the same on any machine.
//
//   lossy_flow [--seed 1] [--seeds 5] [--duration-ms 200]
//
// With --receiver-frame-cost-us or --receiver-off-ms: no loss in the network but a slow or
// descheduled receiver behind a finite socket buffer (`ib_write_bw -q 4` on a loaded host: four
// QPs of 128 64-KiB WRITEs each, the device's congestion control), one run with each recovery.
//
//   lossy_flow --receiver-frame-cost-us 20 --receiver-off-ms 90 --receiver-period-ms 100
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

// The slow, descheduled receiver (above): one row per recovery. 0 when both runs held their
// oracles.
int slow_receiver(uroce::sim::LossyFlowOptions o) {
  int status = 0;
  std::printf("%-9s %10s %9s %14s %9s %9s %7s %9s %7s %s\n", "recovery", "Gb/s", "WRITEs",
              "retransmitted", "timeouts", "adaptive", "probes", "rx drops", "window", "result");
  for (bool adaptive : {true, false}) {
    o.adaptive_recovery = adaptive;
    const uroce::sim::LossyFlowResult r = uroce::sim::run_lossy_flow(o);
    if (!r.ok) status = 1;
    std::printf("%-9s %10.3f %9llu %14.3f %9llu %9llu %7llu %9llu %7u %s\n",
                adaptive ? "uroce" : "IBTA", r.goodput_bps / 1e9,
                static_cast<unsigned long long>(r.completed), r.retransmitted_share,
                static_cast<unsigned long long>(r.timeouts),
                static_cast<unsigned long long>(r.adaptive_timeouts),
                static_cast<unsigned long long>(r.tail_probes),
                static_cast<unsigned long long>(r.socket_drops), r.send_window,
                r.ok ? "ok" : r.failure.c_str());
  }
  return status;
}

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
  uroce::sim::LossyFlowOptions slow;
  slow.qps = 4;
  slow.window = 128;
  slow.congestion_control = uroce::DeviceConfig{}.congestion_control;
  slow.receiver_socket_bytes = 8u << 20;
  std::int64_t cost_us = 0, off_ms = 0, period_ms = 100;
  app.add_option("--qps", slow.qps, "Slow receiver: QPs")->check(CLI::Range(1, 64));
  app.add_option("--window", slow.window, "Slow receiver: WRITEs outstanding per QP");
  app.add_option("--receiver-socket-bytes", slow.receiver_socket_bytes, "Its socket buffer");
  app.add_option("--receiver-frame-cost-us", cost_us, "CPU it spends per frame");
  app.add_option("--receiver-off-ms", off_ms, "Descheduled this long ...");
  app.add_option("--receiver-period-ms", period_ms, "... of every this long");
  CLI11_PARSE(app, argc, argv);
  if (cost_us > 0 || off_ms > 0) {
    slow.seed = seed;
    slow.duration_ns = duration_ms * 1'000'000;
    slow.warmup_ns = slow.duration_ns / 10;
    slow.receiver_frame_cost_ns = cost_us * 1000;
    slow.receiver_deschedule_off_ns = off_ms * 1'000'000;
    slow.receiver_deschedule_period_ns = off_ms > 0 ? period_ms * 1'000'000 : 0;
    return slow_receiver(slow);
  }

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

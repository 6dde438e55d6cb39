#include "tools/incast_cmd.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cinttypes>
#include <optional>
#include <string>

namespace uroce::tools {

// Long: the option table of uroce incast, one option per statement.
void add_incast_options(CLI::App& sub, IncastCommand& c) {
  sim::IncastOptions& o = c.incast;
  cc::DcqcnParams& p = o.dcqcn_params;
  sub.add_option("--seed", o.seed, "Seed")->capture_default_str();
  sub.add_option("-n,--senders", o.senders, "Senders into the one receiver")
      ->capture_default_str()
      ->check(CLI::Range(1, 250));
  sub.add_option("--cc", c.cc_name,
                 "Every QP's congestion control: none, dcqcn, aimd, dcqcn-aimd (a device's "
                 "default)")
      ->capture_default_str()
      ->check([](const std::string& name) {
        return congestion_control_from_name(name) ? std::string{} : "unknown congestion control";
      });
  sub.add_flag("--no-cc", c.no_cc, "No congestion control (--cc none)");
  sub.add_option("--link-bps", o.link_bps, "Every link's and the port's rate, bit/s")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{1'000'000}, std::uint64_t{400'000'000'000}));
  sub.add_option("--link-delay-ns", o.link_delay_ns, "Every link's one-way delay")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1'000'000'000}));
  sub.add_option("--mtu", o.mtu, "Path MTU: 256, 512, 1024, 2048 or 4096")
      ->capture_default_str()
      ->check(CLI::IsMember({256, 512, 1024, 2048, 4096}));
  sub.add_option("--buffer", o.port_buffer_bytes, "The port's buffer, bytes")
      ->capture_default_str();
  sub.add_option("--kmin", o.ecn_kmin_bytes, "ECN Kmin, bytes")->capture_default_str();
  sub.add_option("--kmax", o.ecn_kmax_bytes, "ECN Kmax, bytes")->capture_default_str();
  sub.add_option("--pmax", o.ecn_pmax_percent, "ECN marking probability at Kmax, %")
      ->capture_default_str()
      ->check(CLI::Range(0, 100));
  sub.add_flag("!--mark-on-enqueue", o.ecn_mark_on_dequeue,
               "Mark ECN on the queue a frame finds (else on the one it leaves)");
  sub.add_option("--window", o.window, "WRITEs outstanding per sender")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  sub.add_option("--message", o.message_bytes, "Bytes per WRITE")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  sub.add_option("--ack-timeout", o.ack_timeout, "The QPs' IBTA ACK timeout exponent")
      ->capture_default_str()
      ->check(CLI::Range(1, 31));
  sub.add_flag(
      "--recovery", o.adaptive_recovery,
      "The transport's adaptive loss recovery (RTO from RTTs, tail-loss probe, BDP window)");
  sub.add_flag("!--no-bdp-window", o.bdp_window, "With --recovery: no BDP window");
  sub.add_flag("--selective-repeat", o.selective_repeat,
               "Selective repeat between each sender and the receiver");
  sub.add_option("--duration-ns", o.duration_ns, "Simulated time the senders post")
      ->capture_default_str();
  sub.add_option("--converge-ns", o.converge_ns, "Measurements start then")->capture_default_str();
  sub.add_option("--trace-us", c.trace_us, "Print the queue and the rates every so often");
  sub.add_option("--trace-flows", c.trace_flows, "Senders shown in the trace")
      ->capture_default_str();
  // DCQCN's parameters, by their mlx5 names.
  sub.add_option("--rp-clamp-tgt-rate", p.rp_clamp_tgt_rate)->capture_default_str();
  sub.add_option("--rp-clamp-tgt-rate-ati", p.rp_clamp_tgt_rate_ati)->capture_default_str();
  sub.add_option("--rp-time-reset-us", p.rp_time_reset_us)->capture_default_str();
  sub.add_option("--rp-byte-reset", p.rp_byte_reset)->capture_default_str();
  sub.add_option("--rp-threshold", p.rp_threshold)->capture_default_str();
  sub.add_option("--rp-ai-rate", p.rp_ai_rate_mbps)->capture_default_str();
  sub.add_option("--rp-hai-rate", p.rp_hai_rate_mbps)->capture_default_str();
  sub.add_option("--rp-min-dec-fac", p.rp_min_dec_fac)->capture_default_str();
  sub.add_option("--rp-rate-to-set-on-first-cnp", p.rp_rate_to_set_on_first_cnp_mbps)
      ->capture_default_str();
  sub.add_option("--rp-dce-tcp-g", p.rp_dce_tcp_g)->capture_default_str();
  sub.add_option("--rp-dce-tcp-rtt-us", p.rp_dce_tcp_rtt_us)->capture_default_str();
  sub.add_option("--rp-rate-reduce-monitor-period-us", p.rp_rate_reduce_monitor_period_us)
      ->capture_default_str();
  sub.add_option("--np-min-time-between-cnps-us", p.np_min_time_between_cnps_us)
      ->capture_default_str();
  sub.add_option("--burst-bytes", p.burst_bytes, "Pacing: bytes that may leave at once")
      ->capture_default_str();
  // Aimd's window (aimd and dcqcn-aimd).
  cc::AimdParams& w = o.aimd_params;
  sub.add_option("--ecn-window", w.ecn_rule, "dcqcn-aimd: the window's ECN echo rule")
      ->capture_default_str();
  sub.add_option("--ecn-hold-growth", w.ecn_hold_growth)->capture_default_str();
  sub.add_option("--ecn-ai-packets-per-rtt", w.ecn_ai_packets_per_rtt)->capture_default_str();
  sub.add_option("--ecn-gain", w.ecn_gain, "The ECN echo rule's gain")->capture_default_str();
  sub.add_option("--ai-packets-per-rtt", w.ai_packets_per_rtt, "The window's additive increase")
      ->capture_default_str();
}

namespace {

void print_trace(const sim::IncastResult& r, std::uint32_t flows, std::FILE* out) {
  std::fprintf(out, "%10s %8s %6s %7s", "t_us", "queue_B", "drops", "marks");
  const std::size_t shown = std::min<std::size_t>(flows, r.flows.size());
  for (std::size_t f = 0; f < shown; ++f) {
    std::fprintf(out, "  f%-2zu %6s %5s %5s %5s %6s", f, "Mb/s", "win", "cnp", "retx", "Gb/s");
  }
  std::fprintf(out, "\n");
  const sim::IncastSample* prev = nullptr;
  for (const sim::IncastSample& s : r.trace) {
    std::fprintf(out, "%10.1f %8" PRIu64 " %6" PRIu64 " %7" PRIu64,
                 static_cast<double>(s.at_ns) / 1e3, s.queue_bytes, s.drops, s.ecn_marked);
    for (std::size_t f = 0; f < shown; ++f) {
      double gbps = 0;
      if (prev != nullptr && s.at_ns > prev->at_ns) {
        gbps = static_cast<double>(s.forwarded_bytes[f] - prev->forwarded_bytes[f]) * 8 /
               static_cast<double>(s.at_ns - prev->at_ns);
      }
      const std::uint32_t w = s.window[f];
      std::fprintf(out, "      %6" PRIu64 " %5s %5" PRIu64 " %5" PRIu64 " %6.2f", s.rate_mbps[f],
                   w == cc::kUnlimitedWindow ? "-" : std::to_string(w).c_str(), s.cnps[f],
                   s.retransmitted[f], gbps);
    }
    std::fprintf(out, "\n");
    prev = &s;
  }
}

}  // namespace

int incast_run(IncastCommand c, std::FILE* out) {
  const std::optional<DeviceConfig::CongestionControl> cc = congestion_control_from_name(c.cc_name);
  if (!cc) {
    std::fprintf(out, "unknown congestion control %s\n", c.cc_name.c_str());
    return 1;
  }
  c.incast.cc = c.no_cc ? DeviceConfig::CongestionControl::kNone : *cc;
  c.incast.trace_interval_ns = c.trace_us * 1000;
  const sim::IncastResult r = sim::run_incast(c.incast);
  if (c.trace_us > 0) print_trace(r, c.trace_flows, out);
  std::uint64_t retransmitted = 0, timeouts = 0, cnps = 0;
  for (const sim::IncastFlow& f : r.flows) {
    retransmitted += f.retransmitted_packets;
    timeouts += f.timeouts;
    cnps += f.cnps_received;
  }
  const sim::IncastOptions& o = c.incast;
  std::fprintf(out,
               "incast seed %" PRIu64 ", %" PRIu32
               " senders, %s: utilisation %.3f, goodput share "
               "%.3f (ceiling %.3f), Jain %.3f, drops %" PRIu64 " (%" PRIu64
               " after convergence), p99 queue %" PRIu64 " B (Kmax %" PRIu64 ", max %" PRIu64
               "), ECN marks %" PRIu64 ", CNPs sent %" PRIu64 " heard %" PRIu64
               ", retransmitted %" PRIu64 ", timeouts %" PRIu64 "\n",
               o.seed, o.senders, congestion_control_name(o.cc), r.utilisation, r.goodput_share,
               r.goodput_ceiling, r.jain, r.drops, r.drops_measured, r.queue_p99_bytes,
               o.ecn_kmax_bytes, r.queue_max_bytes, r.ecn_marked, r.cnps_sent, cnps, retransmitted,
               timeouts);
  if (!r.ok) std::fprintf(out, "FAIL %s\n", r.failure.c_str());
  return r.ok ? 0 : 1;
}

}  // namespace uroce::tools

#include "tools/sim_cmd.h"

#include <cinttypes>
#include <string>
#include <utility>
#include <vector>

namespace uroce::tools {

std::optional<std::string> sim_check(const SimCommand& cmd) {
  if (!cmd.cluster.faults || !cmd.cluster.fault_spec) return std::nullopt;
  // The spec fits every seed's plan alike: it is checked against the first one's.
  sim::FaultPlanOptions po;
  po.host_count = cmd.cluster.hosts;
  po.fault_phase_ns = cmd.cluster.fault_phase_ns;
  auto p = sim::FaultPlan::generate(cmd.cluster.seed, po).with_faults(*cmd.cluster.fault_spec);
  if (!p.ok()) return p.error();
  return std::nullopt;
}

namespace {

// "SEND 12, ..., FLUSH 3; checks: memory window 1, ...": a run's (or a swarm's) operations by
// kind and the scripted checks that ran.
std::string ops_line(const std::vector<std::pair<std::string, std::uint64_t>>& by_kind,
                     const std::uint64_t (&checks)[4]) {
  std::string line;
  for (const auto& [name, n] : by_kind) {
    line += (line.empty() ? "" : ", ") + name + " " + std::to_string(n);
  }
  static const char* const kChecks[4] = {"memory window", "SEND_WITH_INV of an MR",
                                         "unmapped ODP page", "FLUSH without access"};
  line += "; checks:";
  for (int i = 0; i < 4; ++i) {
    line += std::string(i == 0 ? " " : ", ") + kChecks[i] + " " + std::to_string(checks[i]);
  }
  return line;
}

void add_checks(const sim::ClusterResult& r, std::uint64_t (&checks)[4]) {
  checks[0] += r.memory_windows_checked;
  checks[1] += r.send_invs_checked;
  checks[2] += r.odp_holes_checked;
  checks[3] += r.flush_refusals_checked;
}

}  // namespace

int sim_run(const SimCommand& cmd, std::FILE* out) {
  std::uint64_t passed = 0;
  std::uint64_t failed = 0;
  std::uint64_t retry_exceeded_seeds = 0;  // passing seeds where some RC QP ran out of retries
  std::uint64_t retry_exceeded_qps = 0;
  std::uint64_t landed = 0;            // failed or flushed WRs of torn-down pairs seen to have run
  std::uint64_t kept = 0, resent = 0;  // selective repeat (--selective-repeat)
  // Passing seeds' operations by kind, and their scripted checks.
  std::vector<std::pair<std::string, std::uint64_t>> by_kind;
  std::uint64_t checks[4] = {};
  for (std::uint64_t i = 0; i < cmd.swarm; ++i) {
    sim::ClusterOptions o = cmd.cluster;
    o.seed = cmd.cluster.seed + i;
    if (i > 0) o.pcap_path.clear();  // a capture is of one run
    const sim::ClusterResult r = sim::run_cluster(o);
    if (r.ok) {
      ++passed;
      if (r.retry_exceeded_qps > 0) ++retry_exceeded_seeds;
      retry_exceeded_qps += r.retry_exceeded_qps;
      landed += r.unfinished_wrs_landed;
      kept += r.out_of_order_kept;
      resent += r.selective_retransmits;
      if (by_kind.empty()) {
        by_kind = r.ops_by_kind;
      } else {
        for (std::size_t k = 0; k < by_kind.size(); ++k)
          by_kind[k].second += r.ops_by_kind[k].second;
      }
      add_checks(r, checks);
      if (cmd.verbose || cmd.swarm == 1) {
        std::fprintf(out,
                     "seed %" PRIu64 ": ok: %" PRIu64 " operations, %" PRIu64
                     " frames sent, %" PRIu64 " dropped, %" PRIu64 " ICRC drops, %" PRIu64
                     " retransmitted, %" PRIu64 " QPs retry exceeded, %" PRIu64
                     " ACKs held (%" PRIu64 " deferred), %.3f ms simulated\n",
                     o.seed, r.ops_completed, r.frames_sent, r.frames_dropped, r.icrc_drops,
                     r.retransmissions, r.retry_exceeded_qps, r.acks_held, r.acks_deferred,
                     static_cast<double>(r.simulated_ns) / 1e6);
        std::uint64_t own[4] = {};
        add_checks(r, own);
        std::fprintf(out, "  operations: %s\n", ops_line(r.ops_by_kind, own).c_str());
      }
      continue;
    }
    ++failed;
    std::fprintf(out, "FAIL %s\n%s\nreplay: %s\n", r.failure.c_str(), r.plan.c_str(),
                 sim::replay_command(o).c_str());
  }
  if (!by_kind.empty() && cmd.swarm > 1) {  // one run's were printed with it
    std::fprintf(out, "operations (passing seeds): %s\n", ops_line(by_kind, checks).c_str());
  }
  std::fprintf(out,
               "sim: %" PRIu64 " passed, %" PRIu64 " failed; %" PRIu64
               " RC QPs ended with retry exceeded (in %" PRIu64 " passing seeds; %" PRIu64
               " of their pairs' failed or flushed WRs had run)\n",
               passed, failed, retry_exceeded_qps, retry_exceeded_seeds, landed);
  if (cmd.cluster.selective_repeat_percent != 0) {
    std::fprintf(out,
                 "selective repeat: %" PRIu64 " out-of-order requests kept, %" PRIu64
                 " packets resent alone (passing seeds)\n",
                 kept, resent);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace uroce::tools

#include "tools/sim_cmd.h"

#include <cinttypes>

namespace uroce::tools {

int sim_run(const SimCommand& cmd, std::FILE* out) {
  std::uint64_t passed = 0;
  std::uint64_t failed = 0;
  for (std::uint64_t i = 0; i < cmd.swarm; ++i) {
    sim::ClusterOptions o = cmd.cluster;
    o.seed = cmd.cluster.seed + i;
    if (i > 0) o.pcap_path.clear();  // a capture is of one run
    const sim::ClusterResult r = sim::run_cluster(o);
    if (r.ok) {
      ++passed;
      if (cmd.verbose || cmd.swarm == 1) {
        std::fprintf(out,
                     "seed %" PRIu64 ": ok: %" PRIu64 " operations, %" PRIu64
                     " frames sent, %" PRIu64 " dropped, %" PRIu64 " ICRC drops, %" PRIu64
                     " retransmitted, %.3f ms simulated\n",
                     o.seed, r.ops_completed, r.frames_sent, r.frames_dropped, r.icrc_drops,
                     r.retransmissions, static_cast<double>(r.simulated_ns) / 1e6);
      }
      continue;
    }
    ++failed;
    std::fprintf(out, "FAIL %s\n%s\nreplay: %s\n", r.failure.c_str(), r.plan.c_str(),
                 sim::replay_command(o).c_str());
  }
  std::fprintf(out, "sim: %" PRIu64 " passed, %" PRIu64 " failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace uroce::tools

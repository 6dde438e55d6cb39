// `uroce sim`: runs the deterministic cluster simulation for one seed or a swarm of seeds and
// prints every failing seed with the command that replays it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "sim/cluster.h"

namespace uroce::tools {

struct SimCommand {
  sim::ClusterOptions cluster;
  std::uint64_t swarm = 1;  // seeds cluster.seed .. cluster.seed + swarm - 1
  bool verbose = false;
};

// Why the command cannot run (a fault spec the simulator cannot apply), or nullopt.
std::optional<std::string> sim_check(const SimCommand& cmd);

// Returns 0 when every seed passed, 1 otherwise.
int sim_run(const SimCommand& cmd, std::FILE* out);

}  // namespace uroce::tools

// The simulator's canary: `uroce sim --seed 1 --swarm 50` linked with a responder built with
// UROCE_CANARY (a duplicate atomic executed a second time; see responder.cc). CMake compiles
// responder.cc into this program, so the linker takes its definitions from that object and never
// pulls the correct responder from the transport library. canary_test.sh requires the swarm to
// fail, and by the atomics oracle.
#include <cstdio>

#include "tools/sim_cmd.h"

int main() {
  uroce::tools::SimCommand cmd;
  cmd.cluster.seed = 1;
  cmd.swarm = 50;
  return uroce::tools::sim_run(cmd, stdout);
}

// The simulator's canary: `uroce sim --seed 1 --swarm 50` linked with a responder built with
// UROCE_CANARY (a duplicate atomic executed a second time; see responder.cc). CMake compiles
// responder.cc into this program, so the linker takes its definitions from that object and never
// pulls the correct responder from the transport library. canary_test.sh requires the swarm to
// fail, and by the atomics oracle.
// uroce_sim_canary_atomic_write is the same program with UROCE_CANARY_ATOMIC_WRITE (a duplicate
// ATOMIC WRITE placed a second time), run on fewer seeds: `canary SWARM` takes the swarm's size.
#include <cstdio>
#include <cstdlib>

#include "tools/sim_cmd.h"

int main(int argc, char** argv) {
  uroce::tools::SimCommand cmd;
  cmd.cluster.seed = 1;
  cmd.swarm = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 50;
  return uroce::tools::sim_run(cmd, stdout);
}

// The cluster simulation's own properties: determinism, fault-free runs, the oracles' reach.
#include "sim/cluster.h"

#include <gtest/gtest.h>

#include <string>

namespace uroce::sim {
namespace {

TEST(Cluster, OneSeedReproducesARunExactly) {
  ClusterOptions o;
  o.seed = 42;
  const ClusterResult a = run_cluster(o);
  const ClusterResult b = run_cluster(o);
  ASSERT_TRUE(a.ok) << a.failure << "\n" << a.plan;
  EXPECT_EQ(a.frames_sent, b.frames_sent);
  EXPECT_EQ(a.frames_delivered, b.frames_delivered);
  EXPECT_EQ(a.retransmissions, b.retransmissions);
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.simulated_ns, b.simulated_ns);
  EXPECT_EQ(a.plan, b.plan);
  o.seed = 43;
  const ClusterResult c = run_cluster(o);
  ASSERT_TRUE(c.ok) << c.failure;
  EXPECT_NE(a.plan, c.plan);
  EXPECT_NE(a.frames_sent, c.frames_sent);
}

TEST(Cluster, WithoutFaultsNothingIsRetransmittedOrDropped) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    ClusterOptions o;
    o.seed = seed;
    o.faults = false;
    const ClusterResult r = run_cluster(o);
    ASSERT_TRUE(r.ok) << r.failure;
    EXPECT_EQ(r.frames_dropped, 0u) << seed;
    EXPECT_EQ(r.icrc_drops, 0u) << seed;
    EXPECT_GT(r.ops_completed, 0u);
  }
}

TEST(Cluster, FaultsAreReallyExercised) {
  std::uint64_t retransmissions = 0, icrc_drops = 0, dropped = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    ClusterOptions o;
    o.seed = seed;
    const ClusterResult r = run_cluster(o);
    ASSERT_TRUE(r.ok) << r.failure << "\n" << r.plan;
    retransmissions += r.retransmissions;
    icrc_drops += r.icrc_drops;
    dropped += r.frames_dropped;
  }
  EXPECT_GT(retransmissions, 1000u);
  EXPECT_GT(icrc_drops, 20u);  // corruption reached the receivers and the ICRC caught it
  EXPECT_GT(dropped, 500u);
}

TEST(Cluster, ReplayCommandNamesTheRun) {
  ClusterOptions o;
  o.seed = 77;
  o.hosts = 4;
  o.faults = false;
  EXPECT_EQ(replay_command(o), "uroce sim --seed 77 --no-faults --hosts 4");
}

}  // namespace
}  // namespace uroce::sim

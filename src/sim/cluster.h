// A simulated cluster: hosts running the real verbs, transport and engine over the simulated
// network, a seeded workload of RC, UC and UD operations, and oracles checked after every event.
//
// One seed derives everything: the fault plan (FaultPlan::generate), the workload (operation
// kinds, sizes, queue depths, PSNs, MTU) and the initial memory contents. A run has a fault
// phase and then a liveness phase (no faults) in which every posted work request must complete.
//
// Oracles (a violation ends the run with a message naming the seed):
// - every posted WR completes exactly once, in posting order per QP, with the expected status;
// - every byte delivered equals what was sent: SEND and WRITE contents at the receiver, READ
//   results at the requester (UC and UD may lose messages, never corrupt them);
// - atomics are linearizable: the values returned by successful Fetch&Add and Compare&Swap on
//   a counter are exactly its successive values, and its final value adds up;
// - nothing is written outside the intended places: every host's memory, registered or not,
//   equals an expected image at the end (and at each completion for the bytes it concerns);
// - SEND with Invalidate of an ordinary MR (all of uroce's) fails as IBTA and rxe say, checked
//   once at the end of a run on one RC pair (it takes the pair into the error state);
// - every frame a host emits passes the wire parser (the checks of `uroce pcap check`);
// - liveness: once faults stop, every QP finishes within the liveness limit.
#pragma once

#include <cstdint>
#include <string>

#include "base/time.h"
#include "uroce/types.h"

namespace uroce::sim {

struct ClusterOptions {
  std::uint64_t seed = 1;
  std::uint32_t hosts = 3;
  std::uint32_t rc_pairs = 3;  // RC QP pairs between hosts drawn from the seed
  std::uint32_t uc_pairs = 1;
  std::uint32_t ud_pairs = 1;  // UD QPs exchanging datagrams both ways
  std::uint32_t ops_per_qp = 24;
  std::uint32_t max_message_bytes = 0;  // 0: up to 3 path MTUs (+100), at most 16 KiB
  bool faults = true;
  std::int64_t fault_phase_ns = 20'000'000;
  std::int64_t liveness_limit_ns = 60'000'000'000;  // simulated time after the fault phase
  std::string pcap_path;  // when set, every frame as sent is written there
  // Scale runs: many QPs with little work each (memory per QP, engine scaling).
  std::uint32_t idle_qps_per_host = 0;
};

struct ClusterResult {
  bool ok = true;
  std::string failure;  // the first oracle violation
  std::string plan;     // the fault plan, printable
  std::uint64_t ops_completed = 0;
  std::uint64_t frames_sent = 0;
  std::uint64_t frames_delivered = 0;
  std::uint64_t frames_dropped = 0;
  std::uint64_t retransmissions = 0;
  std::uint64_t icrc_drops = 0;
  std::uint64_t events = 0;
  std::int64_t simulated_ns = 0;
};

ClusterResult run_cluster(const ClusterOptions& options);

// The command that replays a run.
std::string replay_command(const ClusterOptions& options);

}  // namespace uroce::sim

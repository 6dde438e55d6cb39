// A simulated cluster: hosts running the real verbs, transport and engine over the simulated
// network, a seeded workload of RC, UC and UD operations, and oracles checked after every event.
//
// One seed derives everything: the fault plan (FaultPlan::generate), the workload (operation
// kinds, sizes, queue depths, PSNs, MTU) and the initial memory contents. A run has a fault
// phase and then a liveness phase (no faults) in which every posted work request must complete.
//
// Oracles (a violation ends the run with a message naming the seed):
// - every posted WR completes exactly once, in posting order per QP, with the expected status:
//   success, except that an RC QP (retry_cnt 7: 7 retries, as IBTA and hardware) may end a WR
//   with RETRY_EXC_ERR when the faults justify it (during the fault phase, or within the QP's
//   retry budget of 8 ACK timeouts after it; never in a run without faults). That is the QP's
//   first error, every later WR on it flushes, and the application tears the pair down (the
//   peer QP to ERR, so its WRs flush too); what the failed and flushed WRs did is then unknown
//   (see below), and the pair's unfinished work is no liveness failure;
// - every byte delivered equals what was sent: SEND and WRITE contents at the receiver, READ
//   results at the requester (UC and UD may lose messages, never corrupt them);
// - atomics are linearizable: the values returned by successful Fetch&Add and Compare&Swap on
//   a counter are exactly its successive values, and its final value adds up; a value nobody
//   saw must be the one a failed (possibly executed) atomic took: any for a Fetch&Add, its
//   compare value for a Compare&Swap;
// - nothing is written outside the intended places: every host's memory, registered or not,
//   equals an expected image at the end (and at each completion for the bytes it concerns);
//   the targets of failed and flushed RC WRs (and the receive buffer a message was being
//   placed in) hold, byte for byte, the old or the new contents, or bytes that a packet placed
//   in one pass (issue 14) left where its intact self would have gone before it failed its
//   ICRC (the host records each such range as the engine writes it);
// - ATOMIC WRITE (IBTA 1.5, RC only; each side's all into one 8-byte aligned slot at its
//   peer): a QP's are placed in order, each exactly once (a duplicate is answered, never placed
//   again), 8 bytes at a time: when one completes its slot holds its value or that of a later
//   one already posted, and at the end the last one's;
// - FLUSH (IBTA 1.5, RC only; placement type global, of the region or of a range): when it
//   completes, every WRITE and ATOMIC WRITE its QP posted before it into what it flushed is in
//   place at the peer;
// - every successful completion has the opcode of its WR;
// - scripted checks after the workload, each on a pair of its own (a workload pair left alone,
//   or one made for it): SEND with Invalidate of an ordinary MR (all of uroce's) fails as IBTA
//   and rxe say; a type 2 memory window is bound, written through, invalidated by SEND with
//   Invalidate, bound again, invalidated by LOCAL_INV, and a WRITE through it then fails with
//   REM_ACCESS_ERR; a WRITE into an unmapped page of an ODP region fails so too; a FLUSH of a
//   region without the flush access fails so too (each takes its pair into the error state);
// - every frame a host emits passes the wire parser (the checks of `uroce pcap check`);
// Hosts receive as the engine's deferred path does in production (datapath/udp): the ICRC of a
// message continuation is checked in the pass that places its payload, every other packet's
// before it is read.
// - liveness: once faults stop, every QP finishes within the liveness limit.
// XRC pairs (issue 41) are an initiator (XRC_SEND) posting RC's operations and a target
// (XRC_RECV) on another host placing them into an XRC SRQ of its own: the RC oracles hold for
// them, the receives checked as they complete on the SRQ's CQ (an SRQ's WQEs do not flush: a
// torn-down target leaves the ones nothing took posted, untouched).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/time.h"
#include "engine/ack_policy.h"
#include "fault/fault.h"
#include "sim/fault_plan.h"
#include "uroce/types.h"

namespace uroce::sim {

struct ClusterOptions {
  std::uint64_t seed = 1;
  std::uint32_t hosts = 3;
  std::uint32_t rc_pairs = 3;  // RC QP pairs between hosts drawn from the seed
  std::uint32_t uc_pairs = 1;
  std::uint32_t ud_pairs = 1;  // UD QPs exchanging datagrams both ways
  // XRC initiator/target pairs, one way each, every target with an XRC SRQ (drawn after the
  // other pairs: with none, a seed's run is what it was before XRC).
  std::uint32_t xrc_pairs = 0;
  std::uint32_t ops_per_qp = 24;
  std::uint32_t max_message_bytes = 0;  // 0: up to 3 path MTUs (+100), at most 16 KiB
  bool faults = true;
  std::int64_t fault_phase_ns = 20'000'000;
  std::int64_t liveness_limit_ns = 60'000'000'000;  // simulated time after the fault phase
  std::string pcap_path;  // when set, every frame as sent is written there
  // Scale runs: many QPs with little work each (memory per QP, engine scaling).
  std::uint32_t idle_qps_per_host = 0;
  // Tests: this fault plan instead of the seed's (its host_count must be `hosts`; its
  // fault_phase_ns replaces fault_phase_ns). Used only when `faults` is set.
  std::optional<FaultPlan> plan;
  // `uroce sim --faults SPEC`: the plan's faults from a fault spec instead of the seed's
  // (FaultPlan::with_faults: the run fails, saying why, if the spec does not fit). Used only
  // when `faults` is set.
  std::optional<fault::FaultSpec> fault_spec;
  // Corruption aimed at the fields that say where bytes go (issue 14's safety rule): during the
  // fault phase, this many of every 1000 frames a host receives get one bit flipped in the BTH
  // opcode, pad count, destination QPN or PSN, in the RETH's address, rkey or length, or else
  // in the payload, pad or ICRC (the link's own corruption flips bits anywhere, mostly in the
  // payload). On top of the plan's faults; a run without faults has none.
  std::uint32_t aimed_corruption_per_mille = 0;
  // Each host's ACK policy, as a real device's (engine::AckPolicyConfig, UROCE_HOLD_ACKS,
  // UROCE_DEFER_ACKS): positive ACKs held for the request behind them, and deferred behind a
  // request that overtakes them. On by default, as on a device.
  engine::AckPolicyConfig acks;
  // Selective repeat (issue 39) on this many of every 100 RC pairs, both sides, each pair drawn
  // from the seed (without touching the workload's draws): 0 none (go-back-N, as towards rxe),
  // 100 all.
  std::uint32_t selective_repeat_percent = 0;
};

struct ClusterResult {
  bool ok = true;
  std::string failure;  // the first oracle violation
  std::string plan;     // the fault plan, printable, with its replay on every host
  std::uint64_t ops_completed = 0;
  std::uint64_t xrc_ops_completed = 0;  // of them, by XRC initiators
  // Of them, by operation, in the workload's order, named as the failures name them ("SEND",
  // ..., "ATOMIC_WRITE", "FLUSH"): every kind, drawn or not (completed_ops()).
  std::vector<std::pair<std::string, std::uint64_t>> ops_by_kind;
  // The scripted checks after the workload that ran to their end (each at most once a run):
  // the memory window's life (check_memory_window), SEND with Invalidate of an MR, a WRITE into
  // an unmapped ODP page, a FLUSH of a region without the flush access.
  std::uint64_t memory_windows_checked = 0;
  std::uint64_t send_invs_checked = 0;
  std::uint64_t odp_holes_checked = 0;
  std::uint64_t flush_refusals_checked = 0;
  std::uint64_t frames_sent = 0;
  std::uint64_t frames_delivered = 0;
  std::uint64_t frames_dropped = 0;
  std::uint64_t retransmissions = 0;
  // Selective repeat: packets resent alone, and out-of-order requests kept (QpCounters).
  std::uint64_t selective_retransmits = 0;
  std::uint64_t out_of_order_kept = 0;
  // ACKs the hosts' rounds held for a later flush, and of them kept behind a request
  // (engine::EngineCounters::tx_acks_held, tx_acks_deferred), summed over hosts.
  std::uint64_t acks_held = 0;
  std::uint64_t acks_deferred = 0;
  std::uint64_t icrc_drops = 0;
  // Frames given aimed corruption (ClusterOptions::aimed_corruption_per_mille).
  std::uint64_t aimed_corruptions = 0;
  // Packets whose payload the engines placed in the same pass as their ICRC check (issue 14),
  // and of those, the ones whose check then failed (counted in icrc_drops too).
  std::uint64_t one_pass_packets = 0;
  std::uint64_t one_pass_icrc_drops = 0;
  // Bytes that such failed packets left behind in the target of a WR that then failed or
  // flushed (never rewritten: RDMA leaves that memory undefined). Each lies where the WR's own
  // next packet would have gone; anywhere else the memory oracles see them as foreign bytes.
  std::uint64_t unverified_bytes_left = 0;
  std::uint64_t events = 0;
  std::int64_t simulated_ns = 0;
  // RC QPs whose retries ran out (a WR completed with RETRY_EXC_ERR), and the pairs the
  // workload then tore down.
  std::uint64_t retry_exceeded_qps = 0;
  std::uint64_t torn_down_pairs = 0;
  // Of the failed or flushed WRs of torn-down pairs, those seen to have run (in part): a WRITE
  // target, READ destination or receive buffer with new bytes, a counter value only a failed
  // atomic can have taken.
  std::uint64_t unfinished_wrs_landed = 0;
};

ClusterResult run_cluster(const ClusterOptions& options);

// How many operations named `name` (ClusterResult::ops_by_kind) completed successfully.
std::uint64_t completed_ops(const ClusterResult& r, std::string_view name);

// The command that replays a run.
std::string replay_command(const ClusterOptions& options);

}  // namespace uroce::sim

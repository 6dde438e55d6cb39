// One flow under random loss (issue 39's loss recovery): a sender host streams RDMA WRITEs over
// one RC QP (or several, as `ib_write_bw -q`) to a receiver host across a link that loses each
// frame, in either direction, with the same probability. Both hosts run the real device's round
// (engine::Engine::round, planned by a Scheduler with a device's defaults) and the real verbs and
// transport. The receiver may be a slow, descheduled process: a finite socket buffer that drops
// what does not fit, a CPU cost per frame, periods in which it runs no round (sim/scenario_host.h).
//
// Time is simulated: a run is a pure function of its options (the seed draws the losses).
// Measured after `warmup_ns`, to the end of posting: the goodput (WRITE payload completed per
// second). Over the whole run: the share of request packets that were retransmissions, the IBTA
// ACK timeouts, the adaptive timeouts and the tail-loss probes. Oracles: every WRITE completes
// exactly once, in order, successfully, and when it completes the receiver's memory holds what
// it wrote.
#pragma once

#include <cstdint>
#include <string>

#include "fault/fault.h"
#include "uroce/verbs.h"

namespace uroce::sim {

struct LossyFlowOptions {
  std::uint64_t seed = 1;
  fault::Ratio loss;  // each frame, each direction
  // How the sender recovers. adaptive_recovery: RTO from RTTs, tail-loss probe and BDP window
  // (transport::RecoveryParams, DeviceConfig::adaptive_recovery); off, IBTA's ACK timeout and a
  // 128-PSN window. Room for more switches of the recovery here (selective repeat).
  bool adaptive_recovery = true;
  // The sender's congestion control. None by default: the loss here is random, not congestion,
  // and the scenario measures the recovery; a loss-driven rule (aimd, the device's default
  // dcqcn-aimd) takes each loss for congestion and cuts its window, as TCP's Reno does.
  DeviceConfig::CongestionControl congestion_control = DeviceConfig::CongestionControl::kNone;
  std::uint64_t link_bps = 10'000'000'000;
  std::int64_t link_delay_ns = 10'000;  // one way
  std::uint32_t message_bytes = 65536;  // each WRITE
  std::uint32_t window = 8;             // WRITEs outstanding per QP (8 x 16 packets: 128 PSNs)
  std::uint32_t qps = 1;                // RC QPs from the sender to the receiver, 1..64
  std::uint32_t mtu = 4096;             // path MTU: 256, 512, 1024, 2048 or 4096
  std::uint8_t ack_timeout = 14;        // 67 ms, as perftest and ibv_rc_pingpong set it
  std::uint8_t retry_cnt = 7;
  std::int64_t duration_ns = 200'000'000;  // the sender posts until then
  std::int64_t warmup_ns = 10'000'000;     // goodput is measured from then
  // The receiver's process (ScenarioHostOptions): its socket's buffer in bytes of frames (0: no
  // limit), the CPU each frame it receives costs it, and descheduled the first `off` of every
  // `period` (0: never).
  std::uint64_t receiver_socket_bytes = 0;
  std::int64_t receiver_frame_cost_ns = 0;
  std::int64_t receiver_deschedule_period_ns = 0;
  std::int64_t receiver_deschedule_off_ns = 0;
};

struct LossyFlowResult {
  bool ok = true;
  std::string failure;          // the first oracle violation, with the seed
  double goodput_bps = 0;       // WRITE payload completed per second, after the warm-up
  std::uint64_t completed = 0;  // WRITEs, whole run, all QPs
  // The sender's QPs' counters, summed.
  std::uint64_t packets_sent = 0;  // requests and probes
  std::uint64_t retransmitted_packets = 0;
  double retransmitted_share = 0;  // retransmitted / sent
  std::uint64_t timeouts = 0;      // IBTA ACK timeouts
  std::uint64_t adaptive_timeouts = 0;
  std::uint64_t tail_probes = 0;
  std::uint64_t seq_naks = 0;  // sequence NAKs the sender received
  std::uint64_t retry_exceeded = 0;
  std::uint64_t frames_lost = 0;   // by the network
  std::uint64_t socket_drops = 0;  // by the receiver's full socket buffer
  std::int64_t srtt_ns = 0;        // the sender's first QP's, at the end
  std::int64_t rto_ns = 0;
  std::uint32_t send_window = 0;
};

LossyFlowResult run_lossy_flow(const LossyFlowOptions& opt);

}  // namespace uroce::sim

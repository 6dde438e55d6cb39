// N senders into one receiver through a switch port (issue 39's incast): each sender host streams
// RDMA WRITEs over its own RC QP to the receiver host, whose port (Network::configure_port) is the
// bottleneck, with ECN marking between Kmin and Kmax and a finite buffer. Every host runs the
// real device's round (engine::Engine::round, planned by a Scheduler with a device's defaults)
// and the real verbs and transport, with the congestion control chosen (none, DCQCN, Aimd or
// both: DeviceConfig::CongestionControl).
//
// Time is simulated: a run is a pure function of its options (the seed draws the order of the
// senders' start and the port's marking). Measured after `converge_ns`, over the rest of the run:
// the port's utilisation (bytes it sent on against its capacity), each flow's goodput
// (WRITE payload bytes completed), Jain's fairness index over them, the port's drops and the
// 99th percentile of the queue its arrivals found. Oracles: every WRITE completes once, in order,
// successfully, and the receiver's memory holds what the last WRITE of each flow wrote.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/aimd.h"
#include "cc/dcqcn.h"
#include "uroce/verbs.h"

namespace uroce::sim {

struct IncastOptions {
  std::uint64_t seed = 1;
  std::uint32_t senders = 2;
  // Every QP's congestion control: a device's default (dcqcn-aimd).
  DeviceConfig::CongestionControl cc = DeviceConfig{}.congestion_control;
  cc::DcqcnParams dcqcn_params;                // DCQCN's parameters (line_rate_mbps 0: link_bps)
  cc::AimdParams aimd_params;                  // Aimd's
  std::uint64_t link_bps = 10'000'000'000;     // every host's link, and the receiver's port
  std::int64_t link_delay_ns = 2'000;          // one way, per link
  std::uint64_t port_buffer_bytes = 1u << 20;  // the port's tail-drop limit
  std::uint64_t ecn_kmin_bytes = 40'000;       // 0 with kmax 0: no marking
  std::uint64_t ecn_kmax_bytes = 160'000;
  std::uint32_t ecn_pmax_percent = 20;
  bool ecn_mark_on_dequeue = true;        // PortConfig::ecn_mark_on_dequeue; else at enqueue
  std::uint32_t message_bytes = 65536;    // each WRITE
  std::uint32_t window = 8;               // WRITEs outstanding per sender
  std::uint32_t mtu = 4096;               // path MTU: 256, 512, 1024, 2048 or 4096
  std::uint8_t ack_timeout = 12;          // the QPs' IBTA timeout: 4.096 us << it (12: 16.8 ms)
  std::int64_t duration_ns = 20'000'000;  // the senders post until then
  std::int64_t converge_ns = 10'000'000;  // measurements start then
  // > 0: a sample of the port and of every sender every so often (IncastResult::trace).
  std::int64_t trace_interval_ns = 0;
  // The transport's loss recovery (DeviceConfig::adaptive_recovery: an RTO from measured RTTs, a
  // tail-loss probe, a BDP window) on every host, and selective repeat between each sender and
  // the receiver (transport::Qp::set_selective_repeat: both ends are uroce).
  bool adaptive_recovery = false;
  bool bdp_window = true;  // with adaptive_recovery: its BDP window too (RecoveryParams)
  bool selective_repeat = false;
};

// The port and the senders at one moment of the run (IncastOptions::trace_interval_ns).
struct IncastSample {
  std::int64_t at_ns = 0;  // since the start
  std::uint64_t queue_bytes = 0;
  std::uint64_t drops = 0;       // the port's, so far
  std::uint64_t ecn_marked = 0;  // the port's, so far
  // Per sender: DCQCN's current rate (0: not limited, or no DCQCN), congestion control's window,
  // CNPs it heard, packets it retransmitted and bytes the port forwarded for it, so far.
  std::vector<std::uint64_t> rate_mbps;
  std::vector<std::uint32_t>
      window;  // congestion control's PSN window (cc::kUnlimitedWindow: none)
  std::vector<std::uint64_t> cnps;
  std::vector<std::uint64_t> retransmitted;
  std::vector<std::uint64_t> forwarded_bytes;
};

struct IncastFlow {
  std::uint64_t goodput_bytes = 0;  // WRITE payload completed in the measured window
  std::uint64_t completed = 0;      // WRITEs completed in the whole run
  std::uint64_t retransmitted_packets = 0;
  std::uint64_t timeouts = 0;
  std::uint64_t cnps_received = 0;  // rp_cnp_handled
};

struct IncastResult {
  bool ok = true;
  std::string failure;  // the first oracle violation, with the seed
  std::vector<IncastFlow> flows;
  double utilisation = 0;    // bytes the port sent on / its capacity, measured window
  double goodput_share = 0;  // sum of flows' goodput / capacity, in the measured window
  // The most goodput_share can be when the port is busy all along and nothing is sent twice: the
  // payload's share of each WRITE's frames (Ethernet, IPv4, UDP, BTH, RETH, ICRC counted).
  double goodput_ceiling = 0;
  double jain = 0;                    // over the flows' goodput
  std::uint64_t drops = 0;            // the port's, whole run
  std::uint64_t drops_measured = 0;   // the port's, in the measured window
  std::uint64_t ecn_marked = 0;       // the port's, whole run
  std::uint64_t cnps_sent = 0;        // by the receiver (np_cnp_sent)
  std::uint64_t queue_p99_bytes = 0;  // in the measured window
  std::uint64_t queue_max_bytes = 0;  // whole run
  std::vector<IncastSample> trace;
};

IncastResult run_incast(const IncastOptions& opt);

// Jain's fairness index of `x`: (sum x)^2 / (n * sum x^2); 1 for equal shares, 1/n for one taking
// all. 0 for an empty or all-zero input.
double jain_index(const std::vector<double>& x);

}  // namespace uroce::sim

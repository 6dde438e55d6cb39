// Counters of a UdpDevice: a snapshot of the engine's, the datapath's and every live QP's
// counters, with names in the spirit of the kernel's `rdma statistic` (rxe's hw_counters:
// sent_pkts, rcvd_pkts, duplicate_request, out_of_seq_request, rcvd_rnr_err, send_rnr_err,
// rcvd_seq_err, retry_exceeded_err, retry_rnr_exceeded_err; ConnectX's implied_nak_seq_err)
// where the meaning matches, and uroce's own names for the rest.
//
// Text form, one line per device and with QPs one line per QP (`rdma statistic show` style):
//   link uroce0/1 pid 4242 sent_pkts 12 rcvd_pkts 12 ...
//   qp uroce0/1 pid 4242 lqpn 17 type RC state RTS sent_pkts 6 ...
//   faults uroce0/1 pid 4242 seed 7 spec "loss=1%,seed=7" tx_packets 10 tx_loss 1 ... rx_...
//     (only while the device has faults: each direction's matched packets and injections)
// JSON form: one object per device, {"ifname":"uroce0","port":1,"pid":4242,"sent_pkts":12,...,
// "drops":{"bad_icrc":0,...},"qps":[{"lqpn":17,"type":"RC","state":"RTS",...}]} ("qps" only
// when asked for; "faults":{"spec":...,"seed":...,"tx":{"packets":...,"loss":...},"rx":{...}}
// while it has faults).
//
// Bytes: a device's sent_bytes/rcvd_bytes count whole RoCEv2 packets as UDP carries them (BTH
// through ICRC); a QP's sent_payload_bytes/rcvd_payload_bytes count payload only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "datapath/udp.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "seal/sealed_datapath.h"
#include "transport/qp.h"

namespace uroce::engine {

struct QpStats {
  std::uint32_t qpn = 0;
  QpType type = QpType::kRc;
  QpState state = QpState::kReset;
  std::uint32_t outstanding_send_wqes = 0;
  std::uint32_t dest_qpn = 0;  // a connected QP's peer (0 before RTR and for UD)
  transport::QpCounters counters;
  // Loss recovery's state (transport/recovery.cc): smoothed and minimum RTT (0 before a sample),
  // the retransmission timeout in force (0 when infinite) and the PSN window.
  std::int64_t srtt_ns = 0;
  std::int64_t min_rtt_ns = 0;
  std::int64_t rto_ns = 0;
  std::uint32_t send_window = 0;
  bool selective_repeat = false;  // recovers by selective repeat (docs/ARCHITECTURE.md)
  cc::CcState cc;  // the congestion control's rate and window (cc/congestion_control.h)
  // Where a stalled connection stands: the requester's next PSN, the completer's oldest
  // unacknowledged one and the responder's expected one; the time to the QP's next deadline and
  // to the engine's timer for it (-1: none), responses waiting to leave, and whether the engine
  // has the QP on its active list.
  std::uint32_t sq_psn = 0;
  std::uint32_t unacked_psn = 0;
  std::uint32_t rq_psn = 0;
  std::int64_t timer_in_us = -1;
  std::int64_t armed_in_us = -1;
  bool responses_waiting = false;
  bool active = false;
};

// A live QP's statistics.
QpStats qp_stats(const transport::Qp& qp);
// The same, with the engine's view of the QP at `now` (its timer and active list).
QpStats qp_stats(const transport::Qp& qp, const Engine& engine, Instant now);

using NamedCounters = std::vector<std::pair<std::string_view, std::uint64_t>>;

// A device's faults (fault/fault.h): the spec in effect ("" when none), its seed, and what each
// direction's stage did.
struct FaultStats {
  std::string spec;
  std::uint64_t seed = 0;
  fault::StageCounters tx;
  fault::StageCounters rx;
};

// A completion queue and its channel, for `uroce stats --qp`: where a consumer that waits for
// an event stands (cq lines).
struct CqStats {
  std::uint32_t cq = 0;  // the CQ's handle index
  std::uint32_t queued = 0;
  std::uint32_t capacity = 0;
  std::uint8_t arm = 0;  // 0: not armed, 1: next completion, 2: solicited only
  bool error = false;
  std::uint64_t events = 0;           // completion events fired
  bool has_channel = false;           // a completion channel is attached
  std::uint32_t channel_waiting = 0;  // its events in the channel, not yet taken
  std::uint32_t channel_unacked = 0;  // taken (ibv_get_cq_event), not acknowledged
  bool channel_readable = false;      // the channel's fd polls readable
};

struct DeviceStats {
  std::string name;
  std::uint8_t port = 1;
  int pid = 0;
  EngineCounters engine;
  datapath::UdpCounters datapath;
  seal::SealCounters seal;  // zero with aead=off
  std::uint64_t async_events_dropped = 0;
  // Completion events an arming fired at once (a completion was queued before it).
  std::uint64_t cq_events_at_arm = 0;
  std::uint64_t stats_requests = 0;  // requests served by the stats endpoint
  // Thread mode: how often the progress thread woke up, and the packets its own rounds received
  // (the rest were received by the application's rounds).
  std::uint64_t thread_wakeups = 0;
  std::uint64_t thread_rx_pkts = 0;
  // The progress policy's counters (engine/scheduler.h): rounds of the application and of the
  // thread, and how the socket changed hands (all zero without a progress thread but
  // app_rounds).
  SchedulerCounters sched;
  std::vector<QpStats> qps;             // every live QP, by QPN
  std::vector<CqStats> cqs;             // every live CQ
  transport::QpCounters destroyed_qps;  // the sums of the QPs destroyed since open
  FaultStats faults;

  // The device's counters by name, in output order. Counters that come from QPs are sums over
  // every QP the device has had (destroyed_qps plus the live ones), as rxe's are.
  NamedCounters device_counters() const;
};

// A QP's counters by name, in output order.
NamedCounters qp_counters(const QpStats& qp);

std::string format_stats_text(const DeviceStats& s, bool with_qps);
std::string format_stats_json(const DeviceStats& s, bool with_qps);

}  // namespace uroce::engine

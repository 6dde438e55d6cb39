// The progress engine of one device: received packets to their QP, due timers, and QPs with
// something to send to the datapath. It reads no clock either: the caller (the device's threads
// in production, the simulators in tests) passes `now`, which is what lets the simulators run it
// unchanged.
//
//   round(now, plan, kind)      one progress round, the one every executor runs: the real
//                               device (device/udp_device.cc) and both simulators
//                               (sim/cluster.cc, sim/progress_sim.cc). With kind kReceive:
//                                 1. transmit what was posted since the last round
//                                 2. receive a burst from the datapath: each packet to its QP
//                                 3. fire due timers
//                                 4. transmit what 2 and 3 made, and held ACKs now due
//                               kTransmit (a post's own round) does 1 only. `plan` (the
//                               Scheduler's) says how much may be sent and what happens to
//                               positive ACKs (its AckMode, the AckPolicy's); the report is what
//                               the Scheduler needs next.
//
// The parts a round is made of, also called directly by tests and by the device outside rounds:
//   handle_rx(now, pkt, info)   a packet arrived: demux by destination QPN. Parsed, and verified
//                               unless info.pending says its ICRC is to be checked here, in the
//                               same pass as its payload is placed (issue 14)
//   doorbell(qpn)               an application posted work to a QP
//   handle_timers(now)          fire every QP timer that is due
//   flush_tx(now, budget, mode) transmit for QPs with work, round robin, fair per burst, then
//                               flush the datapath (which may batch). Per `mode`, holds QPs
//                               whose only packet is an ACK for the next flush, and keeps an
//                               ACK a request overtook behind it: the AckPolicy decides which
//                               (engine/ack_policy.h), the engine carries it out
//   next_timeout()              when handle_timers() next has work, or the datapath (a packet
//                               its fault stage holds back falls due)
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/serial_use.h"
#include "base/source_budget.h"
#include "base/time.h"
#include "datapath/datapath.h"
#include "engine/ack_policy.h"
#include "engine/scheduler.h"
#include "transport/closed_qps.h"
#include "transport/qp.h"
#include "wire/packet.h"

namespace uroce::engine {

// Where the engine finds QPs (verbs' device implements it).
class QpDirectory {
 public:
  virtual ~QpDirectory() = default;
  virtual transport::Qp* find_qp(std::uint32_t qpn) = 0;
};

struct EngineCounters {
  std::uint64_t rx_packets = 0;
  std::uint64_t rx_bytes = 0;
  std::uint64_t tx_packets = 0;
  std::uint64_t tx_bytes = 0;
  std::uint64_t rx_unknown_qpn = 0;
  std::uint64_t tx_backpressure = 0;
  std::uint64_t timer_fires = 0;
  // QPs looked up (a received packet's, an active QP's turn, a due timer's, a doorbell's): what a
  // round costs in QPs. It grows with the traffic and the active QPs, never with the idle ones:
  // no round walks every QP (issue 43).
  std::uint64_t qp_visits = 0;
  std::uint64_t tx_acks_held = 0;      // ACKs a flush_tx held for the next one (AckMode::kHold)
  std::uint64_t tx_acks_deferred = 0;  // held ACKs kept behind a request (kHoldAndDefer)
  std::uint64_t closed_qp_acks = 0;    // duplicates acknowledged for destroyed QPs (ClosedQps)
  // Packets for no QP dropped unlooked-at: their source was out of its budget (kUnknownQpnBurst,
  // kUnknownQpnPerSecond; docs/SECURITY.md).
  std::uint64_t rx_unknown_qpn_src_limited = 0;
  // Packets whose payload was placed in the same pass as their ICRC was checked (issue 14),
  // failed checks included (those are counted as bad_icrc drops too).
  std::uint64_t rx_one_pass = 0;
  std::array<std::uint64_t, wire::kDropReasonCount> rx_drops{};  // by DropReason
};

class Engine;

// An application's round as a host that polls runs it: `sched` plans it, the engine runs it,
// `sched` hears what it did (the simulators' hosts; UdpDevice does the same under its locks).
struct AppRound {
  RoundReport report;
  AppAfter after;
};

class Engine {
 public:
  Engine(QpDirectory& qps, datapath::Datapath& dp, const wire::IpAddress& local);
  Engine(const Engine&) = delete;  // rx_handler_ and active_flag_ point into it
  Engine& operator=(const Engine&) = delete;

  enum class RoundKind : std::uint8_t {
    kReceive,   // transmit, receive a burst, timers, transmit again (progress(), the thread)
    kTransmit,  // transmit only (a post's own round: the drop-in's ibv_post_send, transmit())
  };
  // One progress round (see the top of this file). want_next_timer: fill report.next_timer
  // (next_timeout() walks the timer heap; a round whose caller does not sleep after it skips it).
  RoundReport round(Instant now, const RoundPlan& plan, RoundKind kind,
                    bool want_next_timer = true);
  // Datagrams a receiving round takes from the datapath (each of datapath/udp's recvmmsg buffers
  // may hold several packets coalesced by GRO).
  static constexpr std::size_t kRxBurst = 64;
  // What round() reports of the engine's state, for a caller that ran no round (wait()).
  RoundReport state(bool want_next_timer);
  // Sends every ACK that rounds following `acks` hold, outside a round, and tells it so: what a
  // device does when a QP is about to be modified or destroyed (DoorbellHandler::qp_changing),
  // while the QP can still send them. Every held ACK, not only that QP's: they are all due soon
  // anyway.
  void flush_held_acks(Instant now, AckPolicy& acks);
  // The datapath's packet in the engine: its outer headers to the QP's PacketInfo, then
  // handle_rx. What round() gives datapath::receive.
  void handle_datapath_rx(Instant now, const wire::RocePacket& pkt, const datapath::RxMeta& meta);

  // With info.pending: the ICRC is checked first, while the payload is copied to where the QP's
  // state says it goes (transport::Qp::one_pass_target), or with no copy where it says nothing;
  // a packet that fails it is a bad_icrc drop and reaches nothing else (no QP, no closed QP, no
  // counter but that drop). pkt.payload must not alias anything the packet may be placed in.
  void handle_rx(Instant now, const wire::RocePacket& pkt, const transport::PacketInfo& info);
  void count_drop(wire::DropReason r) { ++counters_.rx_drops[static_cast<std::size_t>(r)]; }
  void doorbell(std::uint32_t qpn);
  // The QP is being destroyed (still found in the directory): keeps its closed state
  // (transport/closed_qps.h), so that a retransmission of a request it executed is acknowledged
  // again. Returns that state (nullopt for a QP with nothing to keep), for the device's
  // coordinator, which answers for the QP once its context has gone.
  std::optional<transport::ClosedQp> qp_destroying(Instant now, std::uint32_t qpn);
  void handle_timers(Instant now);
  // Sends up to `budget` packets, then flushes the datapath (which may batch them): no packet
  // is left queued on the way out referring to registered memory. Returns how many were sent.
  //
  // acks (AckPolicy::mode): kHold, a QP that AckPolicy::sets_aside (its only packet is a
  // positive ACK that may wait) stays active without sending it; held_acks() counts those. The
  // caller sends them with its next flush in kSend, soon: a responder that answers a request with
  // its own next request (a ping-pong of WRITEs or SENDs) then sends the ACK in the same batch as
  // that request, one system call per hop instead of two, and the peer, polling for its ACK,
  // finds the request in the same receive batch. The transport coalesces a held ACK with later
  // ones. kHoldAndDefer also keeps a held ACK that a request overtook behind it, still held
  // (AckPolicy::defers_behind), instead of following it in the same batch.
  std::size_t flush_tx(Instant now, std::size_t budget = SIZE_MAX, AckMode acks = AckMode::kSend);
  Instant next_timeout();
  bool has_tx_work() const {
    return !active_.empty() || has_pending_ || !closed_acks_.empty() || dp_.tx_queued();
  }
  // QPs the last flush_tx held with only an ACK to send.
  std::size_t held_acks() const { return held_; }
  // Transmit work beyond the ACKs the last flush_tx held.
  bool has_unheld_tx_work() const {
    return active_.size() > held_ || has_pending_ || !closed_acks_.empty() || dp_.tx_queued();
  }
  // Whether flush_tx(now, budget, acks) has anything to do: work beyond the held ACKs, or held
  // ACKs that may leave now. A flush without either only sets the same ACKs aside again.
  bool has_tx_work_to_flush(AckMode acks) const {
    return has_unheld_tx_work() || (!AckPolicy::holds(acks) && held_ > 0);
  }
  const EngineCounters& counters() const { return counters_; }
  const wire::IpAddress& local() const { return local_; }
  // The engine's view of one QP, for `uroce stats --qp`: when its timer is armed (never: not
  // armed), and whether it is on the active list.
  Instant armed_at(std::uint32_t qpn) const {
    auto it = armed_.find(qpn);
    return it == armed_.end() ? Instant::never() : it->second;
  }
  bool is_active(std::uint32_t qpn) const {
    auto it = is_active_.find(qpn);
    return it != is_active_.end() && it->second;
  }

  // Packets per QP before the next QP gets its turn.
  static constexpr std::size_t kBurst = 16;
  // Per source (IP address and UDP port): packets for no QP here (an unknown or closed QPN) that
  // it may send at once, and per second after. Past that they are dropped before the closed QPs'
  // look-up and the ACK it may send, and counted (rx_unknown_qpn_src_limited): a flood from one
  // source costs bounded work, and other sources keep theirs (docs/SECURITY.md). A peer whose QP
  // was destroyed retransmits at most a window, well within it.
  static constexpr std::uint32_t kUnknownQpnBurst = 256;
  static constexpr std::uint32_t kUnknownQpnPerSecond = 256;

 private:
  struct Timer {
    Instant at;
    std::uint32_t qpn;
    bool operator>(const Timer& o) const { return at > o.at || (at == o.at && qpn > o.qpn); }
  };
  // The deferred ICRC check of handle_rx: places the payload in the same pass where `qp` says it
  // goes. False (and counted) when the check fails. Clears info.pending.
  bool check_pending(const wire::RocePacket& pkt, transport::PacketInfo& info, transport::Qp* qp);
  // The directory's QP (counted in qp_visits).
  transport::Qp* find(std::uint32_t qpn) {
    ++counters_.qp_visits;
    return qps_.find_qp(qpn);
  }
  void arm(std::uint32_t qpn, const transport::Qp& qp);
  void activate(std::uint32_t qpn);
  // is_active_'s flag of `qpn`, the last one's kept at hand: a ping-pong's packets, doorbells
  // and turns all name one QP (issue 40). Entries are never erased, and an unordered_map's
  // elements stay where they are when it grows, so the pointer stays valid.
  bool& active_flag(std::uint32_t qpn) {
    if (active_flag_ == nullptr || active_flag_qpn_ != qpn) {
      active_flag_ = &is_active_[qpn];
      active_flag_qpn_ = qpn;
    }
    return *active_flag_;
  }
  bool transmit(Instant now, const transport::TxPacket& tx);
  std::size_t poll_and_transmit(Instant now, std::size_t budget, AckMode acks);
  void keep_pending(std::uint32_t qpn, transport::Qp& qp, const transport::TxPacket& tx);
  // Whether a flush since the last call deferred an ACK (the caller's hold starts over).
  bool take_acks_deferred() { return std::exchange(acks_deferred_, false); }

  QpDirectory& qps_;
  datapath::Datapath& dp_;
  // Not thread-safe: the caller serialises every call (UdpDevice under its device mutex). Each
  // entry point opens a scope that asserts so in debug builds (base/owner.h).
  mutable SerialUse serial_;
  // What round() hands the datapath (made once: a std::function made per round may allocate),
  // and the round's `now` it reads.
  datapath::Datapath::RxHandler rx_handler_;
  Instant round_now_ = Instant::from_ns(0);
  wire::IpAddress local_;
  EngineCounters counters_;
  std::array<MutBytes, transport::kMaxSge> placement_;  // check_pending's scratch
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  std::unordered_map<std::uint32_t, Instant> armed_;  // earliest deadline in timers_ per QP
  // arm()'s last entry, kept at hand as active_flag()'s; handle_timers() forgets it when it
  // erases an entry.
  std::pair<const std::uint32_t, Instant>* armed_entry_ = nullptr;
  std::vector<std::uint32_t> active_;  // round-robin order
  std::vector<std::uint32_t> due_;     // scratch for handle_timers
  std::unordered_map<std::uint32_t, bool> is_active_;
  bool* active_flag_ = nullptr;  // active_flag()'s last entry
  std::uint32_t active_flag_qpn_ = 0;
  std::size_t next_active_ = 0;
  std::vector<std::uint32_t> held_list_;  // during a holding flush_tx: set aside
  std::size_t held_ = 0;
  bool acks_deferred_ = false;
  // A packet the datapath could not take; sent before anything else.
  transport::TxPacket pending_;
  // What poll_and_transmit builds each packet in: a member, so that a call does not initialise
  // the 600-odd bytes of a TxPacket (its 32 payload pieces) each time.
  transport::TxPacket tx_;
  std::vector<std::byte> pending_payload_;  // pending_'s payload, copied
  std::uint32_t pending_qpn_ = 0;
  bool has_pending_ = false;
  // Destroyed QPs, and the ACKs they owe (sent before anything else; a few at most: one per
  // retransmitted duplicate, and more than kMaxClosedAcks waiting are dropped as the peer retries).
  transport::ClosedQps closed_;
  std::vector<transport::TxPacket> closed_acks_;
  static constexpr std::size_t kMaxClosedAcks = 64;
  SourceBudget unknown_qpn_budget_{kUnknownQpnBurst, kUnknownQpnPerSecond};
};

AppRound run_app_round(Engine& engine, Scheduler& sched, Instant now, Engine::RoundKind kind);

}  // namespace uroce::engine

#include "engine/engine.h"

#include "base/assert.h"

namespace uroce::engine {

Engine::Engine(QpDirectory& qps, datapath::Datapath& dp, const wire::IpAddress& local)
    : qps_(qps), dp_(dp), local_(local) {
  rx_handler_ = [this](const wire::RocePacket& pkt, const datapath::RxMeta& meta) {
    handle_datapath_rx(round_now_, pkt, meta);
  };
}

RoundReport Engine::round(Instant now, const RoundPlan& plan, RoundKind kind,
                          bool want_next_timer) {
  SerialUse::Scope serial(serial_);
  UROCE_ASSERT(plan.tx_budget > 0);
  RoundReport r;
  if (kind == RoundKind::kTransmit) {
    r.sent = flush_tx(now, plan.tx_budget, plan.acks);
  } else {
    // What was posted since the last round leaves first: a request must not wait behind the
    // read of the socket, which is a system call (about a microsecond) even when it finds
    // nothing, and is on every hop of a ping-pong (the answer is posted right after the
    // question arrives, then the next round sends it).
    if (has_unheld_tx_work()) r.sent = flush_tx(now, plan.tx_budget, plan.acks);
    round_now_ = now;
    r.received = dp_.receive(now, kRxBurst, rx_handler_);
    handle_timers(now);
    // Again for what the packets and timers made, or for held ACKs whose hold is over; not in a
    // round with neither (a ping-pong's empty polls while its ACK waits for the next request).
    if (r.sent < plan.tx_budget && has_tx_work_to_flush(plan.acks)) {
      r.sent += flush_tx(now, plan.tx_budget - r.sent, plan.acks);
    }
  }
  UROCE_ASSERT(r.sent <= plan.tx_budget);
  const std::size_t received = r.received;
  const std::size_t sent = r.sent;
  r = state(want_next_timer);
  r.received = received;
  r.sent = sent;
  // A round that holds nothing leaves nothing held, unless its budget ran out first.
  UROCE_ASSERT(AckPolicy::holds(plan.acks) || r.held_acks == 0 || r.sent == plan.tx_budget);
  return r;
}

void Engine::flush_held_acks(Instant now, AckPolicy& acks) {
  SerialUse::Scope serial(serial_);
  if (acks.due().is_never()) return;
  flush_tx(now, SIZE_MAX, AckMode::kSend);
  acks.flushed();
}

AppRound run_app_round(Engine& engine, Scheduler& sched, Instant now, Engine::RoundKind kind) {
  AppRound a;
  a.report = engine.round(now, sched.app_round_begin(now), kind);
  a.after = sched.app_round_end(now, a.report);
  return a;
}

RoundReport Engine::state(bool want_next_timer) {
  SerialUse::Scope serial(serial_);
  RoundReport r;
  r.held_acks = held_acks();
  r.acks_deferred = take_acks_deferred();
  r.tx_left = has_unheld_tx_work();
  if (want_next_timer) r.next_timer = next_timeout();
  return r;
}

void Engine::handle_datapath_rx(Instant now, const wire::RocePacket& pkt,
                                const datapath::RxMeta& meta) {
  SerialUse::Scope serial(serial_);
  transport::PacketInfo info;
  info.src = meta.src;
  info.src_port = meta.src_port;
  info.ecn = static_cast<std::uint8_t>(meta.tos & 3u);
  info.ip_header = meta.ip_header;
  info.pending = meta.pending;
  info.may_teach_port = meta.may_teach_port;
  handle_rx(now, pkt, info);
}

void Engine::arm(std::uint32_t qpn, const transport::Qp& qp) {
  const Instant t = qp.poll_timeout();
  if (t.is_never()) return;
  if (armed_entry_ == nullptr || armed_entry_->first != qpn) {
    auto it = armed_.find(qpn);
    armed_entry_ = it == armed_.end() ? nullptr : &*it;
  }
  if (armed_entry_ != nullptr && armed_entry_->second <= t) return;  // an earlier entry re-arms
  if (armed_entry_ != nullptr) {
    armed_entry_->second = t;
  } else {
    armed_entry_ = &*armed_.emplace(qpn, t).first;
  }
  timers_.push(Timer{t, qpn});
}

void Engine::activate(std::uint32_t qpn) {
  // A doorbell, a packet or a timer may have given a QP whose ACK the last flush held something
  // else to send: has_unheld_tx_work() must not say no until the next flush has looked.
  held_ = 0;
  bool& flag = active_flag(qpn);
  if (flag) return;
  flag = true;
  active_.push_back(qpn);
}

void Engine::doorbell(std::uint32_t qpn) {
  SerialUse::Scope serial(serial_);
  if (find(qpn) == nullptr) return;
  activate(qpn);
}

bool Engine::check_pending(const wire::RocePacket& pkt, transport::PacketInfo& info,
                           transport::Qp* qp) {
  UROCE_ASSERT(info.pending != nullptr);
  wire::PendingIcrc& pending = *info.pending;
  info.pending = nullptr;
  // The QP that the unverified QPN names. Should corruption have named another QP, that QP's
  // state alone still decides where the bytes go: where its own next packet, which writes them
  // again, goes.
  const std::size_t pieces = qp != nullptr ? qp->one_pass_target(pkt, info, placement_) : 0;
  for (std::size_t i = 0; i < pieces; ++i) pending.copy_payload(placement_[i]);
  UROCE_ASSERT(pieces == 0 || pending.copied_bytes() == pkt.payload.size());
  if (pieces > 0) ++counters_.rx_one_pass;
  if (!pending.finish()) {
    count_drop(wire::DropReason::kBadIcrc);
    return false;
  }
  info.payload_placed = pieces > 0;
  return true;
}

void Engine::handle_rx(Instant now, const wire::RocePacket& pkt,
                       const transport::PacketInfo& info_in) {
  SerialUse::Scope serial(serial_);
  const std::uint32_t qpn = pkt.bth().dest_qpn();
  transport::Qp* qp = find(qpn);
  transport::PacketInfo info = info_in;
  if (info.pending != nullptr && !check_pending(pkt, info, qp)) return;
  ++counters_.rx_packets;
  counters_.rx_bytes += pkt.bytes.size();
  if (qp == nullptr) {
    const SourceKey source{info.src.bytes, info.src_port};
    if (!unknown_qpn_budget_.allows(source, now)) {
      ++counters_.rx_unknown_qpn_src_limited;
      return;
    }
    unknown_qpn_budget_.charge(source, now);
    transport::TxPacket ack;
    if (closed_acks_.size() < kMaxClosedAcks && closed_.answer(now, pkt, info.src, ack)) {
      closed_acks_.push_back(ack);
      ++counters_.closed_qp_acks;
      return;
    }
    ++counters_.rx_unknown_qpn;  // rxe drops these silently too
    return;
  }
  qp->handle_packet(now, pkt, info);
  arm(qpn, *qp);
  activate(qpn);
}

std::optional<transport::ClosedQp> Engine::qp_destroying(Instant now, std::uint32_t qpn) {
  SerialUse::Scope serial(serial_);
  const transport::Qp* qp = find(qpn);
  if (qp == nullptr) return std::nullopt;
  auto c = transport::closed_state(*qp, now);
  if (c) closed_.add(*c);
  return c;
}

void Engine::handle_timers(Instant now) {
  SerialUse::Scope serial(serial_);
  if (timers_.empty() || timers_.top().at > now) return;  // most rounds (issue 40)
  // Take the due entries first: a QP re-armed while they are handled waits for the next call,
  // so a QP that keeps reporting a past deadline cannot hold this loop.
  due_.clear();
  while (!timers_.empty() && timers_.top().at <= now) {
    const Timer t = timers_.top();
    timers_.pop();
    auto it = armed_.find(t.qpn);
    if (it == armed_.end() || it->second != t.at) continue;  // superseded
    armed_entry_ = nullptr;
    armed_.erase(it);
    due_.push_back(t.qpn);
  }
  for (std::uint32_t qpn : due_) {
    transport::Qp* qp = find(qpn);
    if (qp == nullptr) continue;
    ++counters_.timer_fires;
    qp->handle_timeout(now);
    arm(qpn, *qp);
    activate(qpn);
  }
}

Instant Engine::next_timeout() {
  SerialUse::Scope serial(serial_);
  // The datapath's own deadline (a packet its fault stage holds) counts: flush_tx and the
  // receive at that time release it.
  const Instant dp = dp_.next_deadline();
  // Drop superseded entries so the answer is the real next deadline.
  while (!timers_.empty()) {
    const Timer& t = timers_.top();
    auto it = armed_.find(t.qpn);
    if (it != armed_.end() && it->second == t.at) return std::min(t.at, dp);
    timers_.pop();
  }
  return dp;
}

bool Engine::transmit(Instant now, const transport::TxPacket& tx) {
  if (!dp_.send(now, transport::outer_headers(local_, tx.av), tx.header_span(), tx.payload())) {
    ++counters_.tx_backpressure;
    return false;
  }
  ++counters_.tx_packets;
  counters_.tx_bytes += tx.header_bytes + tx.payload_bytes;
  return true;
}

std::size_t Engine::flush_tx(Instant now, std::size_t budget, AckMode acks) {
  SerialUse::Scope serial(serial_);
  held_list_.clear();
  if (AckPolicy::holds(acks)) {
    // Set aside the QPs with only an ACK to send; they stay marked active and rejoin the list.
    for (std::size_t i = 0; i < active_.size();) {
      transport::Qp* qp = find(active_[i]);
      if (qp != nullptr && AckPolicy::sets_aside(acks, *qp)) {
        qp->note_ack_held();
        held_list_.push_back(active_[i]);
        active_[i] = active_.back();
        active_.pop_back();
      } else {
        ++i;
      }
    }
  }
  const std::size_t sent = poll_and_transmit(now, budget, acks);
  dp_.flush(now);
  held_ = held_list_.size();
  UROCE_ASSERT(AckPolicy::holds(acks) ||
               held_ == 0);  // set aside, or deferred, only while holding ACKs
  counters_.tx_acks_held += held_;
  active_.insert(active_.end(), held_list_.begin(), held_list_.end());
  return sent;
}

// A packet the datapath had no room for waits, maybe past the completion of its WQE (UC and UD
// complete when sent; a READ response's memory belongs to the application): its bytes are kept
// as they are now, and it leaves first in the next round.
void Engine::keep_pending(std::uint32_t qpn, transport::Qp& qp, const transport::TxPacket& tx) {
  UROCE_ASSERT(!has_pending_);  // one waiting packet at most: it went out first
  pending_ = tx;
  pending_payload_.clear();
  for (ConstBytes piece : tx.payload()) {
    pending_payload_.insert(pending_payload_.end(), piece.begin(), piece.end());
  }
  pending_.pieces[0] = ConstBytes(pending_payload_);
  pending_.num_pieces = pending_payload_.empty() ? 0 : 1;
  pending_qpn_ = qpn;
  has_pending_ = true;
  arm(qpn, qp);
}

std::size_t Engine::poll_and_transmit(Instant now, std::size_t budget, AckMode acks) {
  std::size_t sent = 0;
  if (has_pending_) {
    if (!transmit(now, pending_)) return 0;
    has_pending_ = false;
    ++sent;
    if (transport::Qp* qp = find(pending_qpn_)) arm(pending_qpn_, *qp);
  }
  while (!closed_acks_.empty() && sent < budget) {
    if (!transmit(now, closed_acks_.back())) return sent;  // an ACK has no payload to keep
    closed_acks_.pop_back();
    ++sent;
  }
  transport::TxPacket& tx = tx_;
  // Round robin over active QPs, kBurst packets each per turn.
  while (sent < budget && !active_.empty()) {
    if (next_active_ >= active_.size()) next_active_ = 0;
    const std::uint32_t qpn = active_[next_active_];
    transport::Qp* qp = find(qpn);
    std::size_t n = 0;
    bool more = qp != nullptr;
    bool deferred = false;
    while (more && n < kBurst && sent < budget) {
      if (!qp->poll_transmit(now, tx)) {
        more = false;
        break;
      }
      if (!transmit(now, tx)) {
        keep_pending(qpn, *qp, tx);
        return sent;
      }
      ++n;
      ++sent;
      if (AckPolicy::defers_behind(acks, *qp)) {
        // The ACK the request overtook stays behind it, held: set aside with the held ones.
        qp->defer_ack();
        ++counters_.tx_acks_deferred;
        acks_deferred_ = true;
        deferred = true;
        break;
      }
    }
    if (qp != nullptr) arm(qpn, *qp);
    if (deferred) {
      held_list_.push_back(qpn);  // still marked active; flush_tx puts it back
    } else if (!more) {
      // Idle (or gone): leave the active list until a doorbell, a packet or a timer.
      active_flag(qpn) = false;
    }
    if (deferred || !more) {
      active_[next_active_] = active_.back();
      active_.pop_back();
    } else {
      ++next_active_;
    }
  }
  return sent;
}

}  // namespace uroce::engine

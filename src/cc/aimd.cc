#include "cc/aimd.h"

#include <algorithm>

#include "base/assert.h"

namespace uroce::cc {

Aimd::Aimd(const AimdParams& p)
    : p_(p),
      cwnd_(static_cast<double>(std::max(p.initial_window_packets, p.min_window_packets))),
      ssthresh_(static_cast<double>(p.max_window_packets)),
      ring_(p.rtt_ring_packets) {
  UROCE_CHECK(p.min_window_packets >= 1 && p.min_window_packets <= p.max_window_packets);
  UROCE_CHECK(p.loss_decrease >= 0.0 && p.loss_decrease < 1.0);
  UROCE_CHECK(p.max_delay_decrease >= 0.0 && p.max_delay_decrease < 1.0);
  UROCE_CHECK(p.delay_beta >= 0.0 && p.ai_packets_per_rtt >= 0.0);
  UROCE_CHECK(p.burst_packets >= 1 && p.rtt_ring_packets >= 1);
  UROCE_CHECK(p.target_headroom_us >= 0 && p.min_rtt_window_ms > 0);
  UROCE_CHECK(p.ecn_gain > 0.0 && p.ecn_gain <= 1.0);
  cwnd_ = std::min(cwnd_, static_cast<double>(p.max_window_packets));
}

Duration Aimd::target() const {
  if (min_rtt_ == Duration::zero()) return Duration::zero();
  const Duration scaled = min_rtt_ * p_.target_scale_percent / 100;
  return min_rtt_ + std::max(Duration::us(p_.target_headroom_us), scaled);
}

Duration Aimd::pacing_interval() const {
  if (p_.pacing_gain_percent == 0 || srtt_ == Duration::zero()) return Duration::zero();
  const double ns = static_cast<double>(srtt_.count_ns()) * 100.0 /
                    (static_cast<double>(p_.pacing_gain_percent) * cwnd_);
  return Duration::ns(static_cast<std::int64_t>(ns));
}

Instant Aimd::paced_send_time(Instant now) {
  const Duration interval = pacing_interval();
  if (interval == Duration::zero()) return now;
  // A packet may leave while what is charged ahead of it stays within the burst.
  const Instant at = paced_until_ + Duration::ns(-interval.count_ns() * (p_.burst_packets - 1));
  if (at <= now) return now;
  ++counters_.paced_waits;
  return at;
}

void Aimd::note_sent(Instant now) {
  if (const Duration interval = pacing_interval(); interval != Duration::zero()) {
    paced_until_ = std::max(paced_until_, now) + interval;
  }
  if (transport_samples_) return;
  if (ring_size_ == ring_.size()) {  // full: the oldest one's time is given up
    ring_head_ = (ring_head_ + 1) % static_cast<std::uint32_t>(ring_.size());
    --ring_size_;
    ++unknown_;
  }
  std::int64_t at = now.ns();
  if (retransmits_ > 0) {
    --retransmits_;
    at = -1;
  }
  ring_[(ring_head_ + ring_size_) % ring_.size()] = at;
  ++ring_size_;
}

Duration Aimd::own_sample(const AckEvent& ack) {
  const std::uint32_t n = ack.acked_packets;
  // Consistent: the PSNs outstanding before this ACK are the ones it covers and those it says
  // are still out.
  bool trusted = unknown_ + ring_size_ == ack.in_flight + n;
  std::uint32_t left = n;
  const std::uint32_t u = std::min(unknown_, left);
  unknown_ -= u;
  left -= u;
  std::int64_t newest = -1;
  const auto cap = static_cast<std::uint32_t>(ring_.size());
  while (left > 0 && ring_size_ > 0) {
    newest = ring_[ring_head_];
    ring_head_ = (ring_head_ + 1) % cap;
    --ring_size_;
    --left;
  }
  if (left > 0 || u == n) trusted = false;  // more acknowledged than known, or none of them timed
  // Align with what the transport says is outstanding.
  while (unknown_ + ring_size_ > ack.in_flight) {
    if (unknown_ > 0) {
      --unknown_;
    } else {
      ring_head_ = (ring_head_ + 1) % cap;
      --ring_size_;
    }
  }
  unknown_ += ack.in_flight - (unknown_ + ring_size_);
  if (!trusted || newest < 0) return Duration::zero();
  return std::max(ack.now - Instant::from_ns(newest), Duration::ns(1));
}

void Aimd::rtt_sample(Instant now, Duration rtt) {
  ++counters_.rtt_samples;
  srtt_ = srtt_ == Duration::zero() ? rtt : (srtt_ * 7 + rtt) / 8;
  if (min_rtt_ == Duration::zero() || rtt <= min_rtt_ ||
      now - min_rtt_at_ > Duration::ms(p_.min_rtt_window_ms)) {
    min_rtt_ = rtt;
    min_rtt_at_ = now;
  }
  round_min_ = round_min_ == Duration::zero() ? rtt : std::min(round_min_, rtt);
}

void Aimd::end_round(Instant now) {
  if (p_.ecn_rule) ecn_round();
  if (p_.delay_rule && round_min_ != Duration::zero()) {
    const Duration t = target();
    if (round_min_ > t) {
      ++rounds_above_;
      if (rounds_above_ >= p_.competing_after_rounds) competing_ = true;
      if (competing_) {
        ++counters_.competing_rounds;
        delay_high_ = false;
      } else {
        const double over = static_cast<double>((round_min_ - t).count_ns()) /
                            static_cast<double>(round_min_.count_ns());
        const double factor = std::max(1.0 - p_.delay_beta * over, 1.0 - p_.max_delay_decrease);
        cwnd_ = std::max(static_cast<double>(p_.min_window_packets), cwnd_ * factor);
        ssthresh_ = cwnd_;  // slow start ends here
        delay_high_ = true;
        ++counters_.delay_decreases;
      }
    } else {
      rounds_above_ = 0;
      competing_ = false;
      delay_high_ = false;
    }
  }
  round_min_ = Duration::zero();
  round_end_ = now + srtt_;
}

void Aimd::ecn_round() {
  if (round_acked_ == 0 && round_echoes_ == 0) return;
  const double share =
      std::min(1.0, static_cast<double>(round_echoes_) /
                        static_cast<double>(std::max<std::uint64_t>(round_acked_, 1)));
  ecn_alpha_ = (1.0 - p_.ecn_gain) * ecn_alpha_ + p_.ecn_gain * share;
  ecn_high_ = round_echoes_ > 0;
  if (ecn_high_) {
    rounds_since_echo_ = 0;
  } else if (rounds_since_echo_ != 0xffffffffu) {
    ++rounds_since_echo_;
  }
  if (round_echoes_ > 0) {
    cwnd_ = std::max(static_cast<double>(p_.min_window_packets), cwnd_ * (1.0 - ecn_alpha_ / 2));
    ssthresh_ = cwnd_;  // slow start ends here
    ++counters_.ecn_decreases;
  }
  round_acked_ = 0;
  round_echoes_ = 0;
}

void Aimd::on_congestion_echo(Instant) {
  ++counters_.ecn_echoes;
  ++round_echoes_;
}

void Aimd::on_ack(const AckEvent& ack) {
  Duration sample = Duration::zero();
  if (ack.rtt > Duration::zero()) {
    transport_samples_ = true;
    sample = ack.rtt;
  } else if (!transport_samples_) {
    sample = own_sample(ack);
  }
  if (sample != Duration::zero()) rtt_sample(ack.now, sample);
  round_acked_ += ack.acked_packets;
  if (srtt_ != Duration::zero()) {
    if (round_end_.is_never()) round_end_ = ack.now + srtt_;
    if (ack.now >= round_end_) end_round(ack.now);
  }
  if (undo_armed_ && ack.acked_packets > 0) {
    undo_armed_ = false;
    if (min_rtt_ != Duration::zero() && ack.now - last_cut_ < min_rtt_) {
      cwnd_ = undo_cwnd_;  // the timeout was spurious: the originals were acknowledged
      ssthresh_ = undo_ssthresh_;
      ++counters_.spurious_timeouts;
    }
  }
  const std::uint32_t flight_before = ack.in_flight + ack.acked_packets;
  flight_ = ack.in_flight;
  const bool recovering = recovery_left_ > 0;
  recovery_left_ -= std::min(recovery_left_, ack.acked_packets);
  if (ack.acked_packets == 0 || recovering || (delay_high_ && !competing_)) return;
  // Nor while the network marks this flow's packets (the echo rule's rounds, above).
  if (p_.ecn_hold_growth && (ecn_high_ || round_echoes_ > 0)) return;
  // Grow only a window the sender uses (at least half of it was out).
  if (2.0 * static_cast<double>(flight_before) < cwnd_) return;
  const double acked = static_cast<double>(ack.acked_packets);
  if (cwnd_ < ssthresh_) {
    cwnd_ = std::min(cwnd_ + acked, ssthresh_);
  } else {
    // Never faster than slow start (one PSN per PSN acknowledged): a window of a few PSNs
    // would otherwise grow several times over in one round.
    const bool marking = p_.ecn_rule && rounds_since_echo_ < p_.ecn_memory_rounds;
    const double ai = marking ? p_.ecn_ai_packets_per_rtt : p_.ai_packets_per_rtt;
    cwnd_ += std::min(ai * acked / cwnd_, acked);
  }
  cwnd_ = std::min(cwnd_, static_cast<double>(p_.max_window_packets));
}

void Aimd::on_loss(Instant now, LossSignal signal) {
  // What was outstanding is sent again (go-back-N): not timed (Karn's rule).
  retransmits_ = std::min(unknown_ + ring_size_, static_cast<std::uint32_t>(ring_.size()));
  ring_size_ = 0;
  unknown_ = 0;
  const std::uint32_t flight = flight_;
  flight_ = 0;
  recovery_left_ = std::max(recovery_left_, flight);
  if (!last_cut_.is_never() && srtt_ != Duration::zero() && now - last_cut_ < srtt_) {
    ++counters_.losses_ignored;  // the same round trip's loss: cut once
    return;
  }
  const double base = flight > 0 ? std::min(cwnd_, static_cast<double>(flight)) : cwnd_;
  const double floor = static_cast<double>(p_.min_window_packets);
  undo_armed_ = signal == LossSignal::kTimeout;
  undo_cwnd_ = cwnd_;
  undo_ssthresh_ = ssthresh_;
  ssthresh_ = std::max(floor, base * (1.0 - p_.loss_decrease));
  cwnd_ = ssthresh_;
  if (signal == LossSignal::kTimeout && p_.timeout_window_packets != 0) {
    cwnd_ = std::max(floor, std::min(cwnd_, static_cast<double>(p_.timeout_window_packets)));
  }
  last_cut_ = now;
  ++counters_.loss_decreases;
}

CcState Aimd::state() const {
  CcState s;
  s.window_packets = window_packets();
  s.loss_cuts = counters_.loss_decreases;
  s.delay_cuts = counters_.delay_decreases;
  s.spurious_timeouts = counters_.spurious_timeouts;
  s.competing = competing_;
  return s;
}

}  // namespace uroce::cc

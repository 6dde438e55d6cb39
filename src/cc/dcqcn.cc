#include "cc/dcqcn.h"

#include <algorithm>

#include "base/assert.h"

namespace uroce::cc {

namespace {

// Rate-increase events a call may run at once: a QP idle for seconds catches up in one call, and
// after this many the rate is at its line anyway (each event halves the gap to a target that
// only grows).
constexpr std::uint32_t kMaxIncreasesAtOnce = 4096;

// Nanoseconds that `bytes` take at `mbps` (> 0).
std::int64_t transmit_ns(std::uint64_t bytes, std::uint64_t mbps) {
  return static_cast<std::int64_t>(bytes * 8 * 1000 / mbps);
}

}  // namespace

DcqcnReactionPoint::DcqcnReactionPoint(const DcqcnParams& p)
    : p_(p), alpha_(static_cast<double>(p.rp_initial_alpha_value) / 1024.0) {
  UROCE_CHECK(p.rp_dce_tcp_g <= 1024 && p.rp_initial_alpha_value <= 1024);
  UROCE_CHECK(p.rp_min_dec_fac <= 100 && p.rp_min_rate_mbps > 0);
  UROCE_CHECK(p.rp_time_reset_us > 0 && p.rp_byte_reset > 0 && p.rp_dce_tcp_rtt_us > 0);
  UROCE_CHECK(p.line_rate_mbps_if_unknown > 0);
}

std::uint64_t DcqcnReactionPoint::line_mbps() const {
  return p_.line_rate_mbps != 0 ? p_.line_rate_mbps : p_.line_rate_mbps_if_unknown;
}

void DcqcnReactionPoint::set_rate(Instant now, std::uint64_t mbps) {
  // What the pacer still owes was charged at the old rate: it is owed at the new one, so that a
  // packet held back at a low rate goes as soon as the new rate allows, and one charged at a
  // high rate does not leave early after a cut.
  if (current_mbps_ != 0 && mbps != 0 && paced_until_ > now) {
    const auto owed = static_cast<unsigned __int128>((paced_until_ - now).count_ns());
    paced_until_ = now + Duration::ns(static_cast<std::int64_t>(owed * current_mbps_ / mbps));
  } else if (mbps == 0) {
    paced_until_ = std::min(paced_until_, now);
  }
  current_mbps_ = mbps;
}

std::uint32_t DcqcnReactionPoint::stage() const { return std::max(timer_stages_, byte_stages_); }

bool DcqcnReactionPoint::on_cnp(Instant now) {
  advance(now);
  ++counters_.rp_cnp_handled;
  cnp_in_period_ = true;
  const Duration monitor = Duration::us(p_.rp_rate_reduce_monitor_period_us);
  if (!last_cut_.is_never() && now - last_cut_ < monitor) {
    ++counters_.rp_cnp_ignored;
    return false;
  }
  if (current_mbps_ == 0) {
    // The first CNP since the rate was last unlimited: start from the configured rate (the
    // target too).
    current_mbps_ = p_.rp_rate_to_set_on_first_cnp_mbps != 0
                        ? std::min(p_.rp_rate_to_set_on_first_cnp_mbps, line_mbps())
                        : line_mbps();
    target_mbps_ = current_mbps_;
    alpha_at_ = now;
  } else if (p_.rp_clamp_tgt_rate || (p_.rp_clamp_tgt_rate_ati && timer_stages_ > 0)) {
    target_mbps_ = current_mbps_;
  }
  const double floor_factor = static_cast<double>(p_.rp_min_dec_fac) / 100.0;
  const double factor = std::max(1.0 - alpha_ / 2.0, floor_factor);
  set_rate(now, std::max<std::uint64_t>(
                    p_.rp_min_rate_mbps,
                    static_cast<std::uint64_t>(static_cast<double>(current_mbps_) * factor)));
  const double g = static_cast<double>(1024 - p_.rp_dce_tcp_g) / 1024.0;
  alpha_ = (1.0 - g) * alpha_ + g;
  last_cut_ = now;
  timer_at_ = now + Duration::us(p_.rp_time_reset_us);
  bytes_since_ = 0;
  timer_stages_ = 0;
  byte_stages_ = 0;
  ++counters_.rp_rate_cuts;
  UROCE_ASSERT(current_mbps_ >= p_.rp_min_rate_mbps && current_mbps_ <= target_mbps_);
  return true;
}

void DcqcnReactionPoint::run_timers(Instant now) {
  UROCE_ASSERT(limited());
  // Alpha: one decay per dce_tcp_rtt period that saw no CNP (a period with one was counted by
  // the cut).
  const Duration rtt = Duration::us(p_.rp_dce_tcp_rtt_us);
  if (!alpha_at_.is_never() && now - alpha_at_ >= rtt) {
    std::int64_t periods = (now - alpha_at_).count_ns() / rtt.count_ns();
    alpha_at_ = alpha_at_ + rtt * periods;
    if (cnp_in_period_) --periods;
    cnp_in_period_ = false;
    const double keep = static_cast<double>(p_.rp_dce_tcp_g) / 1024.0;
    for (std::int64_t i = 0; i < periods && alpha_ > 1e-9; ++i) alpha_ *= keep;
  }
  // The rate-increase timer.
  std::uint32_t n = 0;
  while (limited() && timer_at_ <= now && n++ < kMaxIncreasesAtOnce) {
    ++timer_stages_;
    timer_at_ = timer_at_ + Duration::us(p_.rp_time_reset_us);
    increase(now);
  }
  if (limited() && timer_at_ <= now) timer_at_ = now + Duration::us(p_.rp_time_reset_us);
}

void DcqcnReactionPoint::charge(Instant now, std::uint32_t bytes) {
  UROCE_ASSERT(limited());
  paced_until_ = std::max(paced_until_, now) + Duration::ns(transmit_ns(bytes, current_mbps_));
  bytes_since_ += bytes;
  std::uint32_t n = 0;
  while (limited() && bytes_since_ >= p_.rp_byte_reset && n++ < kMaxIncreasesAtOnce) {
    bytes_since_ -= p_.rp_byte_reset;
    ++byte_stages_;
    increase(now);
  }
}

void DcqcnReactionPoint::increase(Instant now) {
  UROCE_ASSERT(limited());
  ++counters_.rp_rate_increases;
  const std::uint32_t f = p_.rp_threshold;
  const std::uint32_t hi = std::max(timer_stages_, byte_stages_);
  const std::uint32_t lo = std::min(timer_stages_, byte_stages_);
  const std::uint64_t line = line_mbps();
  if (lo > f) {
    target_mbps_ += std::uint64_t{lo - f} * p_.rp_hai_rate_mbps;  // hyper increase
  } else if (hi > f) {
    target_mbps_ += p_.rp_ai_rate_mbps;  // additive increase
  }                                      // else fast recovery: the target stays
  target_mbps_ = std::min(target_mbps_, line);
  const std::uint64_t next = (current_mbps_ + target_mbps_ + 1) / 2;
  set_rate(now, next >= line ? 0 : next);
  if (next >= line) {
    // Back at the line: unlimited again, as before the first CNP.
    target_mbps_ = 0;
    timer_at_ = Instant::never();
    alpha_at_ = Instant::never();
  }
}

Instant DcqcnReactionPoint::paced_send_time(Instant now, std::uint32_t bytes) const {
  UROCE_ASSERT(limited());
  // A packet may leave while what is charged ahead of it stays within the burst allowance.
  const Duration burst = Duration::ns(transmit_ns(std::max(p_.burst_bytes, bytes), current_mbps_));
  const Instant at = paced_until_ + Duration::ns(-burst.count_ns());
  // No later than the next rate-increase event: a QP held back at a low rate asks again then,
  // and goes sooner if the rate has risen.
  if (at <= now) return now;
  return timer_at_ > now ? std::min(at, timer_at_) : at;
}

Instant Dcqcn::limited_send_time(Instant now, std::uint32_t bytes) {
  rp_.advance(now);
  const Instant at = rp_.next_send_time(now, bytes);
  if (at > now) ++rp_.counters().paced_waits;
  return at;
}

void Dcqcn::on_ecn_ce(Instant) {
  ++rp_.counters().np_ecn_marked_roce_packets;
  cnp_owed_ = true;
}

bool Dcqcn::take_cnp(Instant now) {
  // As the paper's notification point: a CE-marked packet gets a CNP unless one went to this QP
  // within np_min_time_between_cnps; a mark inside that window gets none later.
  if (!cnp_owed_) return false;
  cnp_owed_ = false;
  if (!last_cnp_.is_never() && now - last_cnp_ < cnp_gap_) {
    return false;
  }
  last_cnp_ = now;
  ++rp_.counters().np_cnp_sent;
  return true;
}

}  // namespace uroce::cc

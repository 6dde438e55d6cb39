// DCQCN (Zhu et al., SIGCOMM 2015), as ConnectX implements it: the congestion control of RoCEv2
// in data centres, driven by ECN. Three roles:
//
//   congestion point  a switch queue marks ECN CE on ECT packets as it fills (RED-like, between
//                     Kmin and Kmax); not here: the network's (the simulator's links, the test
//                     bed's BPF marker)
//   notification      the receiver of CE-marked packets sends the sender's QP a CNP (BTH opcode
//   point (NP)        0x81, wire/opcodes.def), at most one per QP per np_min_time_between_cnps
//   reaction point    the sender's QP cuts its rate on a CNP by alpha/2 (alpha: an estimate of
//   (RP)              how often CNPs come) and recovers when they stop: fast recovery towards
//                     the rate before the cut, then additive and hyper increase of that target
//
// The reaction point's rate, in states (each transition on an event with its `now`):
//
//        CNP (at most one cut per rate_reduce_monitor_period): target = current when clamped
//        (below); current *= max(1 - alpha/2, min_dec_fac); alpha += g (1 - alpha)
//     +------------------------------------------------------------------+
//     v                                                                  |
//   [ fast recovery ] --timer (time_reset) or bytes (byte_reset) expire--+--> current =
//     stage < threshold                                                  |    (current+target)/2
//   [ additive ] one counter past threshold: target += ai_rate, then current = (current+target)/2
//   [ hyper ]    both counters past threshold: target += i * hai_rate (i: stages beyond), ditto
//   alpha decays by (1 - g) every dce_tcp_rtt without a CNP
//
// Every figure is an integer or a double computed from the inputs alone: the same sequence of
// events gives the same rates on every run (the simulator relies on it). Units are in the names.
#pragma once

#include <cstdint>

#include "base/time.h"
#include "cc/congestion_control.h"

namespace uroce::cc {

// The knobs, named as mlx5's cc_params name them (Linux drivers/infiniband/hw/mlx5/cong.c), with
// ConnectX firmware's defaults: those NVIDIA documents (roce-facts.md: g 1019/1024, dce_tcp_rtt
// 1 us, initial alpha 1023/1024, first CNP leaves the rate, minimum decrease factor 50%, minimum
// rate 1 Mb/s, rate-reduce monitor period 4 us), and the rest as `mlxconfig -q` shows them on a
// ConnectX (CLAMP_TGT_RATE 0, CLAMP_TGT_RATE_AFTER_TIME_INC 1, RPG_TIME_RESET 300,
// RPG_BYTE_RESET 32767, RPG_THRESHOLD 1, RPG_AI_RATE 5, RPG_HAI_RATE 50, MIN_TIME_BETWEEN_CNPS 4).
// Where the paper differs (F = 5 stages, N = 50 us between CNPs, a target always clamped to the
// rate before the cut), ConnectX's figure is taken: the issue asks for DCQCN as ConnectX runs it.
struct DcqcnParams {
  // Reaction point.
  // On a cut, the target takes the rate before it: always (clamp_tgt_rate), or only when a
  // timer event raised the rate since the last cut (clamp_tgt_rate_ati, "after time increase").
  // Otherwise the target stays where it was, so that fast recovery heads back to the rate
  // before the congestion episode instead of ratcheting down with each CNP of it.
  bool rp_clamp_tgt_rate = false;
  bool rp_clamp_tgt_rate_ati = true;
  std::int64_t rp_time_reset_us = 300;  // rate-increase timer
  std::uint64_t rp_byte_reset = 32767;  // rate-increase byte counter (bytes sent)
  std::uint32_t rp_threshold = 1;       // fast-recovery stages before additive increase
  std::uint64_t rp_ai_rate_mbps = 5;    // additive increase of the target
  std::uint64_t rp_hai_rate_mbps = 50;  // hyper increase of the target, per stage beyond
  std::uint32_t rp_min_dec_fac = 50;    // a cut leaves at least this % of the rate
  std::uint64_t rp_min_rate_mbps = 1;   // never below
  // The rate a QP not yet limited takes on its first CNP, before the cut (0: the line rate).
  std::uint64_t rp_rate_to_set_on_first_cnp_mbps = 0;
  std::uint32_t rp_dce_tcp_g = 1019;   // alpha's gain is (1024 - g) / 1024
  std::int64_t rp_dce_tcp_rtt_us = 1;  // alpha decays once per this period without a CNP
  std::int64_t rp_rate_reduce_monitor_period_us = 4;  // at most one cut per period
  std::uint32_t rp_initial_alpha_value = 1023;        // of 1024
  // Notification point.
  std::int64_t np_min_time_between_cnps_us = 4;
  // uroce's own: the rate a QP starts at and never exceeds (its link: 0 means unlimited until
  // the first CNP, which then cuts from line_rate_mbps_if_unknown), and how many bytes may leave
  // at once when paced (a user-space device wakes in microseconds, not nanoseconds).
  std::uint64_t line_rate_mbps = 0;
  std::uint64_t line_rate_mbps_if_unknown = 100'000;
  std::uint32_t burst_bytes = 16 * 1024;
};

struct DcqcnCounters {
  std::uint64_t rp_cnp_handled = 0;  // CNPs that reached the reaction point
  std::uint64_t rp_cnp_ignored = 0;  // of which within a rate-reduce monitor period
  std::uint64_t rp_rate_cuts = 0;
  std::uint64_t rp_rate_increases = 0;  // timer or byte-counter events
  std::uint64_t np_ecn_marked_roce_packets = 0;
  std::uint64_t np_cnp_sent = 0;  // take_cnp() said yes
  std::uint64_t paced_waits = 0;  // next_send_time() said later
};

// The reaction point alone: the rate of one sender QP.
class DcqcnReactionPoint {
 public:
  explicit DcqcnReactionPoint(const DcqcnParams& p);

  // A CNP for this QP arrived. Returns false when it was ignored (within the monitor period).
  bool on_cnp(Instant now);
  // These three run for every packet sent, and do nothing while the rate is unlimited (no CNP
  // yet): that test is in line, the work out of line (issue 40: the message rate's send path).
  //
  // `bytes` left the QP at `now`: the byte counter, and the pacing clock.
  void on_sent(Instant now, std::uint32_t bytes) {
    if (limited()) charge(now, bytes);
  }
  // Runs the timers that fall due by `now` (rate increase, alpha decay). The transport calls it
  // before it asks next_send_time(), so a QP that sent nothing for a while recovers all the same.
  void advance(Instant now) {
    if (limited()) run_timers(now);
  }
  // When a packet of `bytes` may leave: `now` while the rate is unlimited or the burst allows.
  Instant next_send_time(Instant now, std::uint32_t bytes) const {
    return limited() ? paced_send_time(now, bytes) : now;
  }

  bool limited() const { return current_mbps_ != 0; }  // a CNP has cut the rate since start
  std::uint64_t current_mbps() const { return current_mbps_; }
  std::uint64_t target_mbps() const { return target_mbps_; }
  double alpha() const { return alpha_; }
  std::uint32_t stage() const;  // max(timer stages, byte stages) since the last cut
  const DcqcnCounters& counters() const { return counters_; }
  DcqcnCounters& counters() { return counters_; }

 private:
  void charge(Instant now, std::uint32_t bytes);                    // on_sent, limited
  void run_timers(Instant now);                                     // advance, limited
  Instant paced_send_time(Instant now, std::uint32_t bytes) const;  // next_send_time, limited
  void increase(Instant now);
  void set_rate(Instant now, std::uint64_t mbps);  // current_mbps_, the pacer's debt rescaled
  std::uint64_t line_mbps() const;

  DcqcnParams p_;
  std::uint64_t current_mbps_ = 0;  // 0: unlimited (no CNP yet)
  std::uint64_t target_mbps_ = 0;
  double alpha_;
  Instant alpha_at_ = Instant::never();  // when alpha last decayed (never: before any CNP)
  Instant last_cut_ = Instant::never();
  Instant timer_at_ = Instant::never();  // the next rate-increase timer event
  std::uint64_t bytes_since_ = 0;        // toward rp_byte_reset
  std::uint32_t timer_stages_ = 0;
  std::uint32_t byte_stages_ = 0;
  bool cnp_in_period_ = false;  // a CNP since alpha's last update
  // Pacing: the time the bucket is empty again (bytes are charged at the current rate).
  Instant paced_until_ = Instant::from_ns(0);
  DcqcnCounters counters_;
};

// One QP's DCQCN: the reaction point for what it sends, the notification point for what it
// receives.
class Dcqcn final : public CongestionControl {
 public:
  explicit Dcqcn(const DcqcnParams& p)
      : cnp_gap_(Duration::us(p.np_min_time_between_cnps_us)), rp_(p) {}

  Instant next_send_time(Instant now, std::uint32_t bytes) override {
    if (!rp_.limited()) return now;  // advance() and the pacer have nothing to do
    return limited_send_time(now, bytes);
  }
  void on_sent(Instant now, std::uint32_t bytes) override { rp_.on_sent(now, bytes); }
  void on_ack(const AckEvent& ack) override { rp_.advance(ack.now); }
  void on_cnp(Instant now) override { rp_.on_cnp(now); }
  void on_ecn_ce(Instant now) override;
  bool take_cnp(Instant now) override;
  bool ecn_capable() const override { return true; }
  CcState state() const override {
    CcState s;
    s.rate_mbps = rp_.current_mbps();
    return s;
  }

  const DcqcnReactionPoint& reaction_point() const { return rp_; }
  const DcqcnCounters& counters() const { return rp_.counters(); }

 private:
  Instant limited_send_time(Instant now, std::uint32_t bytes);  // next_send_time, rate limited
  Duration cnp_gap_;                                            // np_min_time_between_cnps
  DcqcnReactionPoint rp_;
  bool cnp_owed_ = false;  // CE seen since the last CNP
  Instant last_cnp_ = Instant::never();
};

}  // namespace uroce::cc

// A congestion window driven by loss and delay, for networks that drop instead of marking ECN
// (plain Ethernet, a link shared with TCP): additive increase, multiplicative decrease, as TCP
// Reno does it, with a delay rule in the manner of Swift (Kumar et al., SIGCOMM 2020) that keeps
// the queue short while no loss-driven flow shares it, and Copa's (NSDI 2018) test for when one
// does. One QP's sender; the window counts PSNs, as the transport's own window does.
//
//   slow start   window < ssthresh: +1 per PSN acknowledged (doubles per round trip), from
//                initial_window_packets; ends at ssthresh, on a loss, or on a round whose RTT
//                is above the target
//   additive     +ai_packets_per_rtt per round trip (ai / window per PSN acknowledged), while
//   increase     the last round's RTT was at or below the target (or the rule is competing)
//   loss         on_loss: window = max(min, min(window, flight) * (1 - loss_decrease)), as RFC
//                5681 takes FlightSize, at most once per round trip. A timeout cuts the same way
//                (with timeout_window_packets set, it restarts slow start from there, as RFC
//                5681 does): an adaptive RTO on a busy host fires on late ACKs far more often
//                than a path goes dark
//   spurious     a timeout whose first ACK comes sooner than min_rtt after it acknowledges the
//   timeout      packets sent before it, not their retransmissions (which cannot be answered
//                that fast): the cut is undone (Eifel, RFC 3522, with the RTT as the clock)
//   delay        once per round (a smoothed RTT long): when the round's smallest RTT sample is
//                above target = min_rtt + max(target_headroom, min_rtt * target_scale_percent),
//                window *= max(1 - delay_beta * (rtt - target) / rtt, 1 - max_delay_decrease)
//   competing    after competing_after_rounds rounds in a row above the target, the queue is not
//                this flow's to drain (a TCP flow, which fills the buffer until it drops, shares
//                it): the delay rule stands down and the window follows loss alone, as TCP's
//                does, so the two share the link instead of uroce yielding it; the first round
//                at or below the target again ends this
//   pacing       packets leave at gain * window / srtt, burst_packets at once; none before the
//                first RTT sample
//   ECN echo     once per round, when the round heard a congestion echo (on_congestion_echo:
//                DcqcnAimd passes on every CNP its QP receives), window *= 1 - ecn_alpha / 2,
//                where ecn_alpha is a moving average (gain ecn_gain) of the share of the
//                round's acknowledged PSNs that were echoed (CNPs / PSNs, at most 1), as DCTCP
//                (Alizadeh et al., SIGCOMM 2010) does with ECE; slow start ends there
//   floor        the window never goes below min_window_packets (>= 1)
//   recovery     after a loss the go-back-N sends again what was outstanding; the window lets
//                those PSNs go (it is at least what of them is not yet acknowledged) and the cut
//                applies to what comes after them, and nothing grows until they are all
//                acknowledged (the go-back-N resends them in order; the receiver may hold some
//                already and acknowledge past the lost one, which the transport takes).
//
// Defaults: the delay rule and pacing are OFF (AimdParams::delay_rule, pacing_gain_percent 0), so
// the window follows loss alone, ACK-clocked, as Reno's does without fq. Measured on the test bed
// (tests/netbed, 2 CPUs, every sender and receiver a busy process): the RTT samples measured the
// host's scheduler, not the bottleneck's queue (min 8-18 us, srtt 0.25-9 ms with the queue
// empty), so the delay rule cut all the time: 3 senders used 0.48 of the link, one flow beside
// TCP 0.06-0.09 of it. Pacing at the window's rate made a sender wait on a timer that the host
// wakes late: 3 senders used 0.65 of the link with pacing, 0.99 without (delay rule off in both).
// Both stay available for hosts that are not oversubscribed (dedicated cores, a busy-polling
// device per core).
//
// The window grows only while the sender uses at least half of it (a QP the application or the
// transport's own window holds back does not build up a window it never tested).
//
// RTT samples: the transport's (AckEvent::rtt, Karn's rule) when it gives them. Until then this
// rule times its own from on_sent and on_ack: one send time per PSN in a ring sized at
// construction, checked against AckEvent::in_flight after every ACK; a mismatch (a READ, whose
// one request takes many PSNs) or a retransmission (after on_loss, the PSNs outstanding then are
// sent again: Karn's rule) gives no sample. Without samples the delay rule and pacing stay off
// and the window follows loss alone.
//
// Deterministic: the same events give the same windows on every run; nothing reads a clock and
// nothing is allocated after construction.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/time.h"
#include "cc/congestion_control.h"

namespace uroce::cc {

struct AimdParams {
  // The window, in PSNs.
  // Above TCP's IW10 (RFC 6928): a uroce peer defers the ACKs of a ping-pong's requests behind
  // its answers until they cover 16 PSNs (transport::kMaxPsnsBehindADeferredAck), so a window
  // that closes before then waits for the peer's ACK hold to run out, which also turns the
  // peer's deferring off for the next 64 messages (ProgressSim's ping-pong: 67 of 100 messages
  // ACKed alone with 10, 25 with 32). Twice that: a stream of one-packet messages keeps its
  // ACKs deferred while slow start tests the path.
  std::uint32_t initial_window_packets = 32;
  std::uint32_t min_window_packets = 1;  // the floor (at least 1)
  std::uint32_t max_window_packets = 1u << 16;
  // Reno's is 1 per round trip. 4: this rule's round trip, timed in user space on a busy host,
  // runs several times the kernel TCP's beside it (its srtt 2-5 ms where the queue holds 2 ms),
  // so at 1 its window grew that much slower in real time (test bed, one TCP flow, the adaptive
  // recovery on: 0.19 of the link at 1, 0.31 at 4).
  double ai_packets_per_rtt = 4.0;
  // Loss: the share of the flight a loss takes away (Reno 0.5, CUBIC 0.3). 0.3: a loss costs
  // uroce's go-back-N a whole window of retransmissions already.
  double loss_decrease = 0.3;
  // After an ACK timeout: 0 cuts as any loss; else slow start again from this (RFC 5681: 1).
  std::uint32_t timeout_window_packets = 0;
  // The delay rule (above) on or off: off by default (above: "Defaults").
  bool delay_rule = false;
  // Delay. The target over the path's smallest RTT: the larger of a fixed headroom and a share
  // of that RTT (so a longer path is allowed a proportionally longer queue). 300 us: a user-space
  // stack on a busy host sees its RTT vary by a hundred microseconds or more with no queue in
  // the network at all (the test bed, 2 CPUs shared: min 15-25 us, median 90, tenth decile
  // 130-160); a tighter target cuts on the host's scheduling, not on the network's queue.
  std::int64_t target_headroom_us = 300;
  std::uint32_t target_scale_percent = 100;
  // Gentler than Swift (beta 0.8, max_mdf 0.5) for the same reason: a round above the target
  // cuts at most a fifth; loss, not delay, is the hard limit.
  double delay_beta = 0.4;
  double max_delay_decrease = 0.2;
  // The ECN echo rule (above). It hears only what on_congestion_echo is told, and only DcqcnAimd
  // tells it (its packets leave ECN-capable): Aimd alone sends nothing a switch may mark, and a
  // path that never marks (loopback, a network without ECN) never echoes, so the window then
  // follows loss alone exactly as without it.
  bool ecn_rule = true;
  double ecn_gain = 1.0 / 16;  // DCTCP's g
  bool ecn_hold_growth = true;
  // The additive increase while the path marks (an echo within the last ecn_memory_rounds
  // rounds): DCTCP's one PSN per round, not ai_packets_per_rtt (sized to hold a share beside
  // loss-driven TCP; N flows add N times it each round, more than the marks take back when N
  // windows of a few PSNs fill the queue).
  double ecn_ai_packets_per_rtt = 1.0;
  std::uint32_t ecn_memory_rounds = 16;
  std::uint32_t competing_after_rounds = 5;  // Copa: the queue did not empty in 5 round trips
  // The smallest RTT is forgotten after this long without a sample as small (a changed path).
  std::int64_t min_rtt_window_ms = 10'000;
  // Pacing: 0 off (the default, above: "Defaults"); else packets leave at this share of
  // window / srtt (125: above the window's rate, so it can grow).
  std::uint32_t pacing_gain_percent = 0;
  std::uint32_t burst_packets = 16;  // may leave at once (a user-space device wakes late)
  // The ring of send times for the rule's own RTT samples (PSNs outstanding it can time).
  std::uint32_t rtt_ring_packets = 4096;
};

struct AimdCounters {
  std::uint64_t loss_decreases = 0;     // on_loss that cut the window
  std::uint64_t losses_ignored = 0;     // on_loss within a round trip of the last cut
  std::uint64_t spurious_timeouts = 0;  // cuts undone (see above)
  std::uint64_t delay_decreases = 0;    // rounds whose RTT was above the target
  std::uint64_t competing_rounds = 0;   // rounds above the target with the delay rule stood down
  std::uint64_t ecn_echoes = 0;         // on_congestion_echo calls
  std::uint64_t ecn_decreases = 0;      // rounds that heard an echo and cut the window
  std::uint64_t rtt_samples = 0;        // taken (the transport's or the rule's own)
  std::uint64_t paced_waits = 0;        // next_send_time() said later
};

class Aimd final : public CongestionControl {
 public:
  explicit Aimd(const AimdParams& p);

  // next_send_time, on_sent and window_packets run for every packet sent: what they do without
  // pacing (the default) and after the transport's first RTT sample is in line, the rest out
  // of line (issue 40: the message rate's send path).
  Instant next_send_time(Instant now, std::uint32_t) override {
    return pacing() ? paced_send_time(now) : now;
  }
  void on_sent(Instant now, std::uint32_t) override {
    ++flight_;
    if (pacing() || !transport_samples_) note_sent(now);
  }
  void on_ack(const AckEvent& ack) override;
  void on_loss(Instant now, LossSignal signal) override;
  std::uint32_t window_packets() const override {
    return std::max({p_.min_window_packets, static_cast<std::uint32_t>(cwnd_), recovery_left_});
  }
  // Not ECN: a CNP or a CE mark means nothing to this rule (Dcqcn and DcqcnAimd hear them).
  void on_cnp(Instant) override {}
  void on_ecn_ce(Instant) override {}
  bool take_cnp(Instant) override { return false; }
  CcState state() const override;
  // The network marked one of this flow's packets CE (a CNP reached the sender): the ECN echo
  // rule's signal (above). Not a CongestionControl hook: DcqcnAimd calls it.
  void on_congestion_echo(Instant now);

  double window() const { return cwnd_; }
  double ssthresh() const { return ssthresh_; }
  double ecn_alpha() const { return ecn_alpha_; }
  bool in_slow_start() const { return cwnd_ < ssthresh_; }
  bool competing() const { return competing_; }
  Duration srtt() const { return srtt_; }        // zero before the first sample
  Duration min_rtt() const { return min_rtt_; }  // zero before the first sample
  Duration target() const;                       // zero before the first sample
  const AimdCounters& counters() const { return counters_; }

 private:
  void rtt_sample(Instant now, Duration rtt);
  void end_round(Instant now);
  void ecn_round();  // the ECN echo rule at the end of a round
  // The rule's own RTT timing (see above): the send time of the newest PSN this ACK covers, or
  // zero when it has none it trusts.
  Duration own_sample(const AckEvent& ack);
  Duration pacing_interval() const;  // per packet; zero: no pacing
  // Whether pacing_interval() may be above zero (it is zero without these).
  bool pacing() const { return p_.pacing_gain_percent != 0 && srtt_ != Duration::zero(); }
  Instant paced_send_time(Instant now);  // next_send_time with pacing
  void note_sent(Instant now);           // on_sent's pacing clock and own RTT timing

  AimdParams p_;
  double cwnd_;
  double ssthresh_;
  std::uint32_t flight_ = 0;         // PSNs outstanding, as the last ACK said plus those sent since
  std::uint32_t recovery_left_ = 0;  // of those outstanding at the last loss, not yet acknowledged
  Instant last_cut_ = Instant::never();
  // A timeout's cut, until its first ACK says whether it was spurious: what to restore.
  bool undo_armed_ = false;
  double undo_cwnd_ = 0;
  double undo_ssthresh_ = 0;
  // RTT.
  Duration srtt_ = Duration::zero();
  Duration min_rtt_ = Duration::zero();
  Instant min_rtt_at_ = Instant::never();
  // The round: its end, and the smallest sample within it (zero: none).
  Instant round_end_ = Instant::never();
  Duration round_min_ = Duration::zero();
  bool delay_high_ = false;  // the last round ended above the target
  // The ECN echo rule: DCTCP's alpha (starting at 1, as DCTCP's does), and the round's PSNs
  // acknowledged and echoes heard.
  double ecn_alpha_ = 1.0;
  std::uint64_t round_acked_ = 0;
  std::uint64_t round_echoes_ = 0;
  bool ecn_high_ = false;                          // the last round heard an echo
  std::uint32_t rounds_since_echo_ = 0xffffffffu;  // rounds ended since the last echoed one
  std::uint32_t rounds_above_ = 0;
  bool competing_ = false;
  // Pacing: when the bucket is empty again.
  Instant paced_until_ = Instant::from_ns(0);
  // Own RTT timing: send times of the PSNs outstanding, oldest first, in a ring; `unknown_` PSNs
  // outstanding ahead of them whose times it does not know; `retransmits_` of the next sends are
  // go-back-N retransmissions (Karn: not timed).
  std::vector<std::int64_t> ring_;  // ns; negative: a retransmission
  std::uint32_t ring_head_ = 0;
  std::uint32_t ring_size_ = 0;
  std::uint32_t unknown_ = 0;
  std::uint32_t retransmits_ = 0;
  bool transport_samples_ = false;  // the transport timed one: use only its samples from then on
  AimdCounters counters_;
};

}  // namespace uroce::cc

// One rule for networks that mark and networks that drop: DCQCN's rate (cc/dcqcn.h), driven by
// ECN through CNPs, and Aimd's window (cc/aimd.h), driven by loss and delay and, through the
// CNPs, by ECN too. They compose as two independent limits:
//
//   next_send_time   the later of the two: DCQCN's rate and the window's pacing both hold
//   on_sent, on_ack  both (DCQCN's byte counter and timers; the window's growth and RTT)
//   on_loss          the window only (DCQCN has no loss rule)
//   window_packets   the window (DCQCN has none)
//   on_cnp           the window always hears it as an echo, and its ECN echo rule (DCTCP's) cuts
//                    once per round by the share of PSNs echoed. DCQCN's reaction point hears it
//                    when its rate is what holds the flow back (it held a packet within the last
//                    smoothed RTT), before the window has an RTT, and while the rate is not
//                    limited (its first cut of an episode); otherwise the CNP is the window's
//                    alone (counted: cnps_to_window_only)
//   on_ecn_ce, take_cnp, ecn_capable   DCQCN only: packets leave ECT(0), CE marks are answered
//                    with CNPs
//
// Why a CNP does not always reach the rate: the window's echo rule, as DCTCP's, holds the queue
// near the marking threshold, so the port marks all along instead of in episodes. DCQCN raises a
// rate only on its timer (rp_time_reset, 300 us) or byte counter (rp_byte_reset) and resets both
// on every CNP, so a flow that hears a CNP more often than that (eight flows into a 10 Gb/s port:
// one every 40-120 us) never raises its rate; it only cuts it, by a little each time (alpha near
// 0.02). The rates of flows whose windows held them drifted down unseen until they held the flow
// below its window's share, and stayed there, while others' rates happened to sit higher: eight
// senders, seed 1, Jain 0.933 (docs/SIMULATION.md, "Incast"). A rate that holds nothing back is
// cut by nothing: the window, which the same CNP cuts, is the limit that answers. DCQCN itself
// is unchanged (Dcqcn alone, `dcqcn`, hears every CNP as ConnectX does).
//
// On a network that marks, both hear the marks: DCQCN's rate cuts at once on the first CNP of
// an episode (the window waits for its round's end), and the window bounds what is in flight
// and shares the port (64 flows into one port hear a CNP each only every ~55 us, too rarely for
// ConnectX's alpha to cut their rates below the windows': docs/SIMULATION.md, "Incast"). On one
// that drops and never marks, DCQCN's rate stays at the line, the window never hears an echo,
// and it does the work on loss alone, exactly as Aimd alone does (a loopback path neither marks
// nor drops).
#pragma once

#include <algorithm>

#include "cc/aimd.h"
#include "cc/dcqcn.h"

namespace uroce::cc {

class DcqcnAimd final : public CongestionControl {
 public:
  DcqcnAimd(const DcqcnParams& rate, const AimdParams& window) : rate_(rate), window_(window) {}

  Instant next_send_time(Instant now, std::uint32_t bytes) override {
    const Instant rate_at = rate_.next_send_time(now, bytes);
    if (rate_at > now) rate_held_ = now;
    return std::max(rate_at, window_.next_send_time(now, bytes));
  }
  void on_sent(Instant now, std::uint32_t bytes) override {
    rate_.on_sent(now, bytes);
    window_.on_sent(now, bytes);
  }
  void on_ack(const AckEvent& ack) override {
    rate_.on_ack(ack);
    window_.on_ack(ack);
  }
  void on_loss(Instant now, LossSignal signal) override { window_.on_loss(now, signal); }
  std::uint32_t window_packets() const override { return window_.window_packets(); }
  void on_cnp(Instant now) override {
    window_.on_congestion_echo(now);
    if (!rate_.reaction_point().limited() || rate_holds(now)) {
      rate_.on_cnp(now);
    } else {
      ++cnps_to_window_only_;
    }
  }
  void on_ecn_ce(Instant now) override { rate_.on_ecn_ce(now); }
  bool take_cnp(Instant now) override { return rate_.take_cnp(now); }
  bool ecn_capable() const override { return true; }
  CcState state() const override {
    CcState s = window_.state();
    s.rate_mbps = rate_.reaction_point().current_mbps();
    return s;
  }

  const Dcqcn& rate() const { return rate_; }
  const Aimd& window() const { return window_; }
  // CNPs the window heard and DCQCN's reaction point did not (on_cnp, above).
  std::uint64_t cnps_to_window_only() const { return cnps_to_window_only_; }

 private:
  // The rate held a packet back within the last smoothed RTT (none yet: take it as holding).
  bool rate_holds(Instant now) const {
    const Duration srtt = window_.srtt();
    if (srtt == Duration::zero()) return true;
    return !rate_held_.is_never() && now - rate_held_ <= srtt;
  }

  Dcqcn rate_;
  Aimd window_;
  Instant rate_held_ = Instant::never();  // when DCQCN's rate last held a packet back
  std::uint64_t cnps_to_window_only_ = 0;
};

}  // namespace uroce::cc

// One rule for networks that mark and networks that drop: DCQCN's rate (cc/dcqcn.h), driven by
// ECN through CNPs, and Aimd's window (cc/aimd.h), driven by loss and delay and, through the
// CNPs, by ECN too. They compose as two independent limits:
//
//   next_send_time   the later of the two: DCQCN's rate and the window's pacing both hold
//   on_sent, on_ack  both (DCQCN's byte counter and timers; the window's growth and RTT)
//   on_loss          the window only (DCQCN has no loss rule)
//   window_packets   the window (DCQCN has none)
//   on_cnp           both: DCQCN cuts the rate at once; the window hears an echo, and its ECN
//                    echo rule (DCTCP's) cuts once per round by the share of PSNs echoed
//   on_ecn_ce, take_cnp, ecn_capable   DCQCN only: packets leave ECT(0), CE marks are answered
//                    with CNPs
//
// On a network that marks, both hear the marks: DCQCN's rate does the fine control while a few
// flows share the port, and the window bounds what is in flight when many do (64 flows into one
// port hear a CNP each only every ~55 us, too rarely for ConnectX's alpha to cut their rates
// below the windows': docs/SIMULATION.md, "Incast"). On one that drops and never marks, DCQCN's
// rate stays at the line, the window never hears an echo, and it does the work on loss alone,
// exactly as Aimd alone does (a loopback path neither marks nor drops).
#pragma once

#include <algorithm>

#include "cc/aimd.h"
#include "cc/dcqcn.h"

namespace uroce::cc {

class DcqcnAimd final : public CongestionControl {
 public:
  DcqcnAimd(const DcqcnParams& rate, const AimdParams& window) : rate_(rate), window_(window) {}

  Instant next_send_time(Instant now, std::uint32_t bytes) override {
    return std::max(rate_.next_send_time(now, bytes), window_.next_send_time(now, bytes));
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
    rate_.on_cnp(now);
    window_.on_congestion_echo(now);
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

 private:
  Dcqcn rate_;
  Aimd window_;
};

}  // namespace uroce::cc

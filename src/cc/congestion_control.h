// Congestion control hooks of a QP's sender (the DCQCN reaction point plugs in here) and of its
// receiver (the notification point). Pure: every hook takes `now`; nothing reads a clock.
//
// The transport calls, per QP:
//   next_send_time(now, bytes) before each new data packet: the earliest time it may go
//   on_sent(now, bytes)        after each packet it transmits
//   on_ack(now)                on each ACK/response that acknowledges progress
//   on_cnp(now)                when a CNP for this QP arrives
//   on_ecn_ce(now)             when a received packet carries ECN CE (the notification point)
//   take_cnp(now)              whether the receiver should send a CNP now
#pragma once

#include <cstdint>

#include "base/time.h"

namespace uroce::cc {

class CongestionControl {
 public:
  virtual ~CongestionControl() = default;
  virtual Instant next_send_time(Instant now, std::uint32_t bytes) = 0;
  virtual void on_sent(Instant now, std::uint32_t bytes) = 0;
  virtual void on_ack(Instant now) = 0;
  virtual void on_cnp(Instant now) = 0;
  virtual void on_ecn_ce(Instant now) = 0;
  virtual bool take_cnp(Instant now) = 0;
  // Whether the QP's packets leave ECN-capable (ECT(0)), so that the network may mark them CE
  // instead of dropping them.
  virtual bool ecn_capable() const { return false; }
};

// What the kernel's Soft-RoCE does: no congestion control. Sends are never delayed, CNPs are
// ignored and never generated.
class NoCongestionControl final : public CongestionControl {
 public:
  Instant next_send_time(Instant now, std::uint32_t) override { return now; }
  void on_sent(Instant, std::uint32_t) override {}
  void on_ack(Instant) override {}
  void on_cnp(Instant) override {}
  void on_ecn_ce(Instant) override {}
  bool take_cnp(Instant) override { return false; }
};

}  // namespace uroce::cc

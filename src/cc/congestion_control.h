// Congestion control hooks of a QP's sender (the DCQCN reaction point plugs in here) and of its
// receiver (the notification point). Pure: every hook takes `now`; nothing reads a clock.
//
// The transport calls, per QP:
//   next_send_time(now, bytes) before each new data packet: the earliest time it may go
//   on_sent(now, bytes)        after each packet it transmits
//   on_ack(AckEvent)           on each ACK/response that acknowledges progress (PSNs newly
//                              acknowledged, an RTT sample when one was taken)
//   on_loss(now, LossSignal)   when the sender learns of a loss: ACK timeout, sequence NAK or
//                              implied NAK (each recovery episode once)
//   window_packets()           the most PSNs the sender may have unacknowledged (a window-based
//                              rule; the transport takes the smaller of it and its own window)
//   on_cnp(now)                when a CNP for this QP arrives
//   on_ecn_ce(now)             when a received packet carries ECN CE (the notification point)
//   take_cnp(now)              whether the receiver should send a CNP now
#pragma once

#include <cstdint>

#include "base/time.h"

namespace uroce::cc {

// What one acknowledgement told the sender.
struct AckEvent {
  Instant now;
  std::uint32_t acked_packets = 0;  // PSNs this response newly acknowledged
  // The round-trip time of one packet this response acknowledged, when the transport timed one
  // (never a retransmitted one: Karn's rule); zero when it took no sample.
  Duration rtt = Duration::zero();
  std::uint32_t in_flight = 0;  // PSNs still unacknowledged after it
};

// How the sender learnt of a loss.
enum class LossSignal : std::uint8_t {
  kTimeout,  // the retransmission timer ran out
  kNak,      // a PSN sequence NAK, or an implied NAK (a READ response or atomic ACK past a gap)
};

inline constexpr std::uint32_t kUnlimitedWindow = 0xffffffffu;

// What a rule holds now, for `uroce stats --qp` (mlx5 and rxe have no per-QP names for these).
struct CcState {
  std::uint64_t rate_mbps = 0;                      // the rate limit in force; 0: none
  std::uint32_t window_packets = kUnlimitedWindow;  // the PSN window; kUnlimitedWindow: none
  std::uint64_t loss_cuts = 0;                      // window cuts on loss
  std::uint64_t delay_cuts = 0;                     // window cuts on delay
  std::uint64_t spurious_timeouts = 0;              // timeout cuts undone
  bool competing = false;  // the delay rule stood down: a loss-driven flow shares the queue
};

class CongestionControl {
 public:
  virtual ~CongestionControl() = default;
  virtual Instant next_send_time(Instant now, std::uint32_t bytes) = 0;
  virtual void on_sent(Instant now, std::uint32_t bytes) = 0;
  virtual void on_ack(const AckEvent& ack) = 0;
  virtual void on_loss(Instant /*now*/, LossSignal /*signal*/) {}
  virtual std::uint32_t window_packets() const { return kUnlimitedWindow; }
  virtual void on_cnp(Instant now) = 0;
  virtual void on_ecn_ce(Instant now) = 0;
  virtual bool take_cnp(Instant now) = 0;
  // Whether the QP's packets leave ECN-capable (ECT(0)), so that the network may mark them CE
  // instead of dropping them.
  virtual bool ecn_capable() const { return false; }
  virtual CcState state() const {
    CcState s;
    s.window_packets = window_packets();
    return s;
  }
};

// What the kernel's Soft-RoCE does: no congestion control. Sends are never delayed, CNPs are
// ignored and never generated.
class NoCongestionControl final : public CongestionControl {
 public:
  Instant next_send_time(Instant now, std::uint32_t) override { return now; }
  void on_sent(Instant, std::uint32_t) override {}
  void on_ack(const AckEvent&) override {}
  void on_cnp(Instant) override {}
  void on_ecn_ce(Instant) override {}
  bool take_cnp(Instant) override { return false; }
};

}  // namespace uroce::cc

// Loss recovery of RC requests beyond IBTA's fixed ACK timeout (issue 39): RTT samples, an
// adaptive retransmission timeout (ConnectX's "adaptive retransmission"), a tail-loss probe and a
// window sized to the bandwidth-delay product. Pure: every decision from the `now` given.
//
// RTT samples (RFC 6298). One packet at a time is timed: a new request packet (never sent before)
// that carries AckReq. The first response whose progress covers its PSN gives the sample. A
// retransmission of a PSN at or before the timed one cancels the timing (Karn's rule): its ACK
// could answer either copy. SRTT, RTTVAR and the minimum RTT are kept per QP.
//
// Adaptive retransmission timeout. RTO = SRTT + 4 * RTTVAR, at least RecoveryParams::min_rto
// (kMinRto) and the QP's floor after spurious timeouts, doubled at each adaptive timeout without
// progress, never beyond ack_timeout(). Its timer runs beside the IBTA ACK timer (comp_.deadline),
// which keeps its rules unchanged: armed by the first packet outstanding, restarted by progress,
// and the only one that spends retry_cnt. An adaptive timeout goes back N
// (cc::LossSignal::kTimeout) and spends nothing, so a QP fails with retry-exceeded exactly when the
// IBTA rule fails it: retry_cnt + 1 expiries of the full ACK timeout without progress. Once the
// IBTA timer has expired, the adaptive one stays off until progress. Before the first sample, and
// with timeout 0 (infinite), only the IBTA timer runs.
//
// Spurious timeouts. An adaptive timeout may fire for packets the responder has, their ACKs on the
// way (a slow host, a queue, a descheduled peer). The completer takes those ACKs although the
// go-back-N rewound the requester below them (completer.cc), and the first progress after the
// timeout, if it comes within the minimum RTT, marks the timeout spurious (spurious_timeouts): the
// RTO's floor for that QP doubles from the RTO that fired (note_first_ack_after_rto). Only when no
// earlier retransmission was outstanding at the timeout: a probe's or a go-back-N's ACK may come
// at any time after it (taken for spurious, those cost the 5% lossy flow a third of its goodput,
// the floor raised towards the IBTA timeout).
//
// Tail-loss probe. When no packet has left and nothing was acknowledged for 2 * SRTT +
// kProbeAckAllowance (and the retransmission timer is further off), the requester resends one
// packet with AckReq, once until the next progress: the newest one sent, whose duplicate makes
// the responder re-ACK what it has and whose loss it repairs, or whose arrival after a lost
// earlier packet makes the responder NAK the gap. While going back N, the oldest unacknowledged
// packet instead (the retransmission that was lost again: the responder stays silent after its
// one NAK until that PSN arrives). SENDs and WRITEs only: a READ or atomic is left to its timer.
//
// BDP window. Each RTT sample also measures the delivery rate: PSNs acknowledged between the
// timed packet's departure and its ACK, over its RTT. A max filter keeps the rate (a lower
// sample pulls it down by an eighth of the difference), and the window is kBdpWindowGain times
// rate * min RTT, at most kMaxBdpWindow, at least kMaxUnackedPsns on a path that loses nothing
// and kMinBdpWindow for kLossyRtts SRTTs after each go-back-N. The requester sets AckReq at least
// every half window, so that a window below 2 * kMaxPacketsPerAck is acknowledged before it
// fills.
#include <algorithm>
#include <cmath>

#include "transport/qp.h"
#include "wire/psn.h"

namespace uroce::transport {

Duration Qp::base_rto() const {
  const Duration ibta = ack_timeout();
  if (!env_.recovery.adaptive_rto || ibta.is_infinite() || rec_.samples == 0) return ibta;
  // RFC 6298 (2.3): SRTT + max(G, 4 * RTTVAR), G the clock granularity (1 us here: `now` has ns).
  Duration rto = rec_.srtt + std::max(rec_.rttvar * 4, Duration::us(1));
  rto = std::max({rto, env_.recovery.min_rto, rec_.rto_floor});
  return std::min(rto, ibta);
}

Duration Qp::rto() const {
  const Duration ibta = ack_timeout();
  Duration rto = base_rto();
  for (std::uint32_t i = 0; i < rec_.backoff && rto < ibta; ++i) rto = rto * 2;
  return std::min(rto, ibta);
}

Duration Qp::probe_timeout() const { return rec_.srtt * 2 + kProbeAckAllowance; }

std::uint32_t Qp::recovery_window(std::uint32_t cc_window) const {
  if (!env_.recovery.bdp_window) return kMaxUnackedPsns;
  const std::uint32_t w = steady_window(cc_window);
  return rec_.restart_window == 0 ? w : std::min(w, rec_.restart_window);
}

std::uint32_t Qp::steady_window(std::uint32_t cc_window) const {
  if (rec_.window == 0) return kMaxUnackedPsns;
  // A window-based congestion control (cc::CongestionControl::window_packets) sizes the window
  // itself, up to the ceiling: the BDP estimate follows the flow's own past rate, and would pin
  // the rule's window (an aimd flow beside a fixed-window one stayed at kMinBdpWindow after a
  // loss, with 27% of the link).
  if (cc_window != cc::kUnlimitedWindow) return kMaxBdpWindow;
  return rec_.lossy ? rec_.window : std::max(rec_.window, kMaxUnackedPsns);
}

std::uint32_t Qp::send_window() const {
  const std::uint32_t cc_window = env_.cc->window_packets();
  return std::min(recovery_window(cc_window), cc_window);
}

bool Qp::awaiting_first_rtt_sample() const {
  return env_.recovery.ack_req_until_sampled && rec_.samples == 0;
}

std::uint32_t Qp::ack_req_interval() const {
  return std::clamp<std::uint32_t>(send_window() / 2, 1, kMaxPacketsPerAck);
}

void Qp::arm_recovery_timers(Instant now, bool restart_rto) {
  const bool outstanding =
      type_ == QpType::kRc && comp_.psn != req_.psn && sq_count_ > 0 && rec_.samples > 0;
  if (!outstanding) {
    rec_.rto_deadline = Instant::never();
    rec_.probe_deadline = Instant::never();
    return;
  }
  if (!env_.recovery.adaptive_rto || comp_.deadline.is_never()) {
    rec_.rto_deadline = Instant::never();
  } else if (restart_rto || rec_.rto_deadline.is_never()) {
    // Useless at or after the IBTA timer: that one goes back N (and counts) then.
    const Instant t = now + rto();
    rec_.rto_deadline = t < comp_.deadline ? t : Instant::never();
  }
  std::uint32_t psn = 0;
  std::uint32_t index = 0;
  if (env_.recovery.tail_probe && rec_.probes < kMaxProbes && probe_target(psn, index)) {
    const Instant t = now + probe_timeout();
    rec_.probe_deadline = t < earliest(comp_.deadline, rec_.rto_deadline) ? t : Instant::never();
  } else {
    rec_.probe_deadline = Instant::never();
  }
}

std::uint64_t Qp::go_backs() const {
  return counters_.timeouts + counters_.adaptive_timeouts + counters_.implied_naks;
}

void Qp::note_loss(Instant now) {
  rec_.lossy = true;
  rec_.lossy_until = now + rec_.srtt * kLossyRtts;
}

void Qp::note_stall() {
  // Whatever was outstanding went unanswered for a whole timeout: the responder is gone, or
  // its process was not running (a descheduled peer: its socket fills and drops what comes on
  // top). A go-back-N of the whole window then resends it all into that full socket, at every
  // timeout, and the packet the responder waits for is as likely to be dropped as any other.
  // Restart small instead (RFC 5681's loss window after a retransmission timeout), and grow
  // by what comes back (note_acked). Only with the BDP window: off, IBTA's and rxe's 128.
  if (env_.recovery.bdp_window) rec_.restart_window = kMinBdpWindow;
}

void Qp::note_nak_go_back(Instant now, std::uint32_t psn) {
  note_loss(now);
  rec_.nak_go_back = true;
  rec_.nak_psn = psn;
  rec_.go_backs = go_backs();
}

bool Qp::unambiguous(std::uint32_t psn) const {
  // Sent again after a sequence NAK at a lower PSN, in the go-back that NAK started: the first
  // copy reached a responder that discarded it (it accepts nothing past the gap until the gap's
  // own packet comes), unless the network reordered the lost one behind it.
  return rec_.nak_go_back && rec_.go_backs == go_backs() && going_back() &&
         comp_.retry_psn == rec_.nak_psn && wire::psn_gt(psn, rec_.nak_psn);
}

void Qp::note_request_sent(Instant now, std::uint32_t psn, bool fresh, bool ack_req) {
  if (type_ != QpType::kRc) return;
  if (!fresh && rec_.timing && wire::psn_le(psn, rec_.timed_psn)) rec_.timing = false;  // Karn
  if (!fresh) note_resent(psn);
  if ((fresh || unambiguous(psn)) && ack_req && !rec_.timing) {
    rec_.timing = true;
    rec_.timed_psn = psn;
    rec_.timed_at = now;
    rec_.delivered_at_send = rec_.delivered;
  }
  arm_recovery_timers(now, /*restart_rto=*/false);
}

void Qp::note_resent(std::uint32_t psn) {
  if (!rec_.resent_unacked || wire::psn_gt(psn, rec_.resent_psn)) rec_.resent_psn = psn;
  rec_.resent_unacked = true;
}

Duration Qp::note_acked(Instant now, std::uint32_t acked) {
  if (type_ != QpType::kRc || acked == 0) return Duration::zero();
  rec_.delivered += acked;
  Duration sample = Duration::zero();
  if (rec_.timing && wire::psn_gt(comp_.psn, rec_.timed_psn)) {
    rec_.timing = false;
    const Duration r = now - rec_.timed_at;
    // A response cannot come back in no time: a zero sample is a test feeding one by hand.
    if (r > Duration::zero()) {
      sample = r;
      if (rec_.samples == 0) {
        rec_.srtt = r;
        rec_.rttvar = r / 2;
      } else {
        const Duration err = rec_.srtt > r ? rec_.srtt - r : r - rec_.srtt;
        rec_.rttvar = (rec_.rttvar * 3 + err) / 4;
        rec_.srtt = (rec_.srtt * 7 + r) / 8;
      }
      ++rec_.samples;
      if (r < rec_.min_rtt || now - rec_.min_rtt_at > kMinRttLifetime) {
        rec_.min_rtt = r;
        rec_.min_rtt_at = now;
      }
      const double delivered = static_cast<double>(rec_.delivered - rec_.delivered_at_send);
      const double rate = delivered * 1e9 / static_cast<double>(r.count_ns());
      if (rate >= rec_.rate_pps) {
        rec_.rate_pps = rate;
      } else {
        rec_.rate_pps -= (rec_.rate_pps - rate) / 8;
      }
      const double bdp = rec_.rate_pps * static_cast<double>(rec_.min_rtt.count_ns()) / 1e9;
      const double window = std::ceil(bdp * kBdpWindowGain);
      rec_.window = window >= kMaxBdpWindow
                        ? kMaxBdpWindow
                        : std::max(kMinBdpWindow, static_cast<std::uint32_t>(window));
    }
  }
  if (rec_.restart_window != 0) {
    // Slow start: the window doubles per round trip until it is the steady one again.
    rec_.restart_window += acked;
    if (rec_.restart_window >= steady_window(env_.cc->window_packets())) rec_.restart_window = 0;
  }
  if (rec_.rto_check) note_first_ack_after_rto(now);
  if (rec_.resent_unacked && wire::psn_gt(comp_.psn, rec_.resent_psn)) rec_.resent_unacked = false;
  rec_.backoff = 0;
  rec_.probes = 0;
  if (rec_.lossy && now >= rec_.lossy_until) rec_.lossy = false;
  arm_recovery_timers(now, /*restart_rto=*/true);
  return sample;
}

void Qp::note_first_ack_after_rto(Instant now) {
  // Eifel's question (RFC 3522) asked by time, without timestamps: progress within the minimum RTT
  // of the timeout cannot answer a retransmission sent at the timeout, nor one sent before it
  // (handle_recovery_timeout tests only when none was outstanding), so it answers packets sent
  // before it, which were not lost but late. An ACK of PSNs not yet sent again proves less: the
  // responder re-ACKs its latest PSN for a duplicate, and after lost ACKs the timeout was needed.
  // The response (RFC 4015's, in the spirit of Linux's undo): back off, for good. The floor becomes
  // twice the RTO that fired, at most the ACK timeout; congestion control undoes its own cut
  // (cc/aimd.h). The go-back-N has cost the resends only: the completer took the ACKs of the
  // packets sent before it (handle_response), and the requester passed what they acknowledge.
  rec_.rto_check = false;
  if (rec_.samples == 0 || now - rec_.rto_fired_at >= rec_.min_rtt) return;
  ++counters_.spurious_timeouts;
  rec_.rto_floor = std::min(std::max(rec_.rto_floor, rec_.rto_fired * 2), ack_timeout());
}

void Qp::note_ibta_timeout(Instant now) {
  note_loss(now);
  rec_.rto_check = false;
  // The full ACK timeout passed without progress: the adaptive timer has nothing to add until
  // progress (rto() is ack_timeout() at this backoff).
  rec_.timing = false;
  rec_.backoff = 64;
  rec_.rto_deadline = Instant::never();
  note_stall();
}

void Qp::handle_recovery_timeout(Instant now) {
  const bool live = type_ == QpType::kRc && (state_ == QpState::kRts || state_ == QpState::kSqd) &&
                    comp_.psn != req_.psn && sq_count_ > 0 && req_.rnr_resume.is_never();
  if (rec_.rto_deadline <= now) {
    rec_.rto_deadline = Instant::never();
    rec_.probe_deadline = Instant::never();
    if (!live) return;
    // Go back N as the IBTA timer would, without spending retry_cnt; the retransmission arms
    // the timer again (note_request_sent), backed off.
    ++counters_.adaptive_timeouts;
    // Spurious or not, the first progress tells only when no earlier retransmission could be
    // what it answers (a probe's, an earlier go-back-N's).
    rec_.rto_check = !rec_.resent_unacked;
    rec_.rto_fired_at = now;
    rec_.rto_fired = rto();
    // A second adaptive timeout without progress: not a late ACK but a stall.
    if (rec_.backoff > 0) note_stall();
    ++rec_.backoff;
    note_loss(now);
    rec_.timing = false;
    env_.cc->on_loss(now, cc::LossSignal::kTimeout);
    start_retry(comp_.psn, /*restart=*/true);
    return;
  }
  if (rec_.probe_deadline <= now) {
    rec_.probe_deadline = Instant::never();
    if (live && rec_.probes < kMaxProbes) rec_.probe_due = true;
  }
}

bool Qp::probe_target(std::uint32_t& psn, std::uint32_t& index) const {
  if (type_ != QpType::kRc || comp_.psn == req_.psn || sq_count_ == 0) return false;
  const std::uint32_t end = sq_tail_ + sq_count_;
  if (going_back() || rec_.probes > 0) {
    psn = comp_.psn;
    index = sq_tail_;
  } else {
    // The newest packet sent: in the WQE being sent, or the last one sent whole.
    psn = wire::psn_add(req_.psn, -1);
    index = req_.next_wqe;
    if (index == end || sq_at(index).state != WqeState::kSending) {
      if (index == sq_tail_) return false;
      --index;
    }
  }
  const SendWqe& w = sq_at(index);
  return w.state != WqeState::kPosted && w.state != WqeState::kDone &&
         !w.wr_op->is_read_or_atomic() && wire::psn_ge(psn, w.first_psn) &&
         wire::psn_le(psn, w.last_psn);
}

bool Qp::poll_probe(Instant now, TxPacket& out) {
  rec_.probe_due = false;
  std::uint32_t psn = 0;
  std::uint32_t index = 0;
  if (!probe_target(psn, index)) return false;
  SendWqe& w = sq_at(index);
  // Build the packet at `psn` as a retransmission would, then put the requester back where it
  // was: the probe is one packet beside the stream, not a go-back.
  const Requester saved = req_;
  const std::uint64_t sent_bytes = w.sent_bytes;
  const WqeState wqe_state = w.state;
  req_.psn = psn;
  w.sent_bytes = std::min<std::uint64_t>(
      std::uint64_t{static_cast<std::uint32_t>(wire::psn_diff(psn, w.first_psn))} * mtu_bytes_,
      w.length);
  w.state = WqeState::kSending;
  rec_.force_ack_req = true;
  build_request_packet(w, index, out);
  rec_.force_ack_req = false;
  if (state_ == QpState::kErr) return false;  // a local protection error failed the WQE
  const std::uint32_t max_sent_psn = req_.max_sent_psn;
  req_ = saved;
  req_.max_sent_psn = max_sent_psn;
  w.sent_bytes = sent_bytes;
  w.state = wqe_state;
  ++rec_.probes;
  ++counters_.tail_probes;
  env_.cc->on_sent(now, out.payload_bytes);
  ++counters_.packets_sent;
  counters_.bytes_sent += out.payload_bytes;
  note_request_sent(now, psn, /*fresh=*/false, /*ack_req=*/true);
  return true;
}

}  // namespace uroce::transport

// The completer: matches responses (ACK, NAK, READ responses, atomic ACKs) to outstanding send
// WQEs and completes them in order (IBTA 9.7.5.2, 9.9; rxe_comp.c).
//
// A response with PSN p implicitly acknowledges every request before p: SEND and WRITE WQEs
// that end before p complete; a READ or atomic that ends before p, or a READ response after a
// gap, means a response was lost, and the requester goes back to it at once (implied NAK).
// NAK PSN sequence error and the local ACK timeout go back N;
// RNR NAK waits the responder's timer first. retry_cnt and rnr_retry count consecutive retries
// without progress. rnr_retry 7 means infinite; retry_cnt 7 means 7 retries, as IBTA and
// hardware have it (rxe alone treats retry_cnt 7 as infinite too).
#include <cstring>

#include "base/assert.h"
#include "transport/qp.h"
#include "transport/sgl.h"
#include "wire/aeth.h"
#include "wire/psn.h"

namespace uroce::transport {

using wire::Opcode;

void Qp::reset_retry_counters() {
  // rxe reset_retry_counters: progress restores both budgets and ends the go-back-N mark. Left
  // set, the mark would compare as "not yet past" again once the completer has moved 2^23 PSNs
  // beyond it (24-bit PSN comparisons turn round), and suppress the next NAK's recovery.
  comp_.retry_cnt = attr_.retry_cnt;
  comp_.rnr_retry = attr_.rnr_retry;
  comp_.retry_started = false;
}

void Qp::note_progress(Instant now) {
  reset_retry_counters();
  comp_.deadline = comp_.psn == req_.psn ? Instant::never() : now + ack_timeout();
  report_ack(now);
}

void Qp::report_ack(Instant now) {
  // What congestion control hears of an acknowledgement: the PSNs it covers that were not
  // reported before (comp_.reported_psn follows comp_.psn; a go-back-N never moves it back).
  cc::AckEvent ack{.now = now};
  if (wire::psn_gt(comp_.psn, comp_.reported_psn)) {
    ack.acked_packets = static_cast<std::uint32_t>(wire::psn_diff(comp_.psn, comp_.reported_psn));
    comp_.reported_psn = comp_.psn;
  }
  ack.in_flight = (req_.psn - comp_.psn) & wire::kPsnMask;
  ack.rtt = note_acked(now, ack.acked_packets);  // RTT sample and timers (recovery.cc)
  env_.cc->on_ack(ack);
}

bool Qp::going_back() const {
  return comp_.retry_started && wire::psn_le(comp_.psn, comp_.retry_psn);
}

bool Qp::start_retry(std::uint32_t psn, bool restart) {
  if (!restart && going_back()) return false;
  comp_.retry_started = true;
  comp_.retry_psn = psn;
  comp_.stream_psn = wire::psn_add(comp_.psn, -1);
  retry_from(psn);
  return true;
}

void Qp::implied_nak(Instant now, std::uint32_t psn) {
  // A READ response or atomic ACK at `psn`, beyond the PSN the completer waits for: the response
  // at comp_.psn was lost. Go back to it now, as a sequence NAK would make it (IBTA's implied
  // NAK; hardware counts it as implied_nak_seq_err, rdmavt restarts the same way), not one ACK
  // timeout later: with several large READs outstanding, waiting costs the timeout plus every
  // response sent meanwhile, all beyond the gap and dropped.
  //
  // Each response of a rising stream here also re-arms the ACK timer: the responder is alive and
  // still sending what it was asked before. rxe serves a re-request only after the stream it is
  // sending (one packet after another, each request in turn), so a timeout now would only queue
  // one more whole replay behind it; on a slow responder every such replay makes the next
  // timeout likelier, until retry_cnt runs out while the responder works through our duplicates
  // (the interop matrix's urx5 case against a slowed VM did exactly that with a 1 MiB READ).
  // Without responses the timer runs as before. Bounded all the same: a stream rises through at
  // most the PSNs outstanding, and a newer stream without progress spends a retry.
  if (going_back()) {
    // Going back already. Behind the lost packet the rest of its stream is still arriving, its
    // PSNs rising: no new request for those. A PSN below the last one seen, among the first few
    // past the one awaited, starts a newer stream (the replay, which begins at the PSN asked
    // for), whose own first packets were lost as well: ask again, for a retry. A lower PSN
    // further on is a packet of a stream already seen, reordered or duplicated on the way: it
    // asks nothing (counted as a newer stream, each would spend a retry and queue one more
    // replay; with 256 PSNs of READs outstanding, 1% of reordering and duplication spent all 7
    // within one gap). A duplicate, at the same PSN, asks nothing and does not re-arm the timer.
    const bool rising = wire::psn_gt(psn, comp_.stream_psn);
    const bool newer_stream =
        wire::psn_lt(psn, comp_.stream_psn) && wire::psn_diff(psn, comp_.psn) <= kReplayStartSlack;
    if (rising || newer_stream) comp_.stream_psn = psn;
    if (rising) comp_.deadline = now + ack_timeout();
    if (!newer_stream) return;
    if (comp_.retry_cnt == 0) {
      ++counters_.retry_exceeded;
      fail_wqe(sq_tail_, WcStatus::kRetryExcErr);
      return;
    }
    --comp_.retry_cnt;
  }
  ++counters_.implied_naks;
  env_.cc->on_loss(now, cc::LossSignal::kNak);
  start_retry(comp_.psn, /*restart=*/true);
  comp_.stream_psn = psn;
  comp_.deadline = now + ack_timeout();
}

void Qp::complete_acked_through(std::uint32_t psn) {
  // Completes the SEND/WRITE WQEs whose last PSN is before `psn`.
  while (sq_count_ > 0) {
    SendWqe& w = sq_at(sq_tail_);
    if (w.state != WqeState::kPending || !wire::psn_lt(w.last_psn, psn)) return;
    if (w.wr_op->is_read_or_atomic()) return;
    comp_.psn = wire::psn_add(w.last_psn, 1);
    reset_retry_counters();
    complete_send(sq_tail_, WcStatus::kSuccess);
  }
}

bool Qp::scatter_read_response(SendWqe& w, std::uint32_t index, std::uint64_t offset,
                               ConstBytes data) {
  // Response data lands at `offset` of the WQE's scatter list (local write access).
  return scatter(*env_.memory, env_.pd, sges_of(index).first(w.num_sge), offset, data) ==
         ScatterResult::kOk;
}

// Long: the completer's checks of a response in rxe's order, then one dispatch.
void Qp::handle_response(Instant now, const wire::RocePacket& pkt, bool placed) {
  // An XRC initiator takes XRC responses, an RC QP RC ones (an XRC target sends nothing that is
  // answered).
  if (type_ != QpType::kRc || (state_ != QpState::kRts && state_ != QpState::kSqd) ||
      pkt.op->transport != response_transport()) {
    ++counters_.dropped;
    return;
  }
  const std::uint32_t psn = pkt.bth().psn();
  // XRC responses are RC's under another prefix: compared as RC's below.
  const Opcode op = wire::rc_operation(pkt.op->opcode());
  // Stale (already acknowledged) or never sent: ignore (rxe check_psn: duplicate responses are
  // silently dropped). Sent means below req_.psn_end, not below req_.psn: a go-back-N lowers
  // req_.psn, and the responses to what was sent before it are still on the way. Dropped, they
  // would show no progress until the resends passed them, and a timer that went back too soon
  // (the adaptive one on a slow host) would go on to spend retry_cnt on the IBTA timer.
  // A READ response or an atomic ACK says nothing of the responses before it (a gap there is
  // an implied NAK): beyond the rewound req_.psn it counts only at the PSN the completer waits
  // for, continuing the stream it had.
  const bool stale = wire::psn_lt(psn, comp_.psn);
  const bool nak = pkt.op->has(wire::ExtHeader::kAeth) &&
                   wire::aeth_type(pkt.aeth().syndrome()) != wire::AethType::kAck;
  const bool sent =
      wire::psn_lt(psn, req_.psn) ||
      (op == Opcode::kRcAcknowledge ? wire::psn_lt(psn, req_.psn_end)
                                    : !nak && psn == comp_.psn && psn != req_.psn_end);
  if (sq_count_ == 0 || stale || !sent) {
    ++counters_.dropped;
    // A stale response while requests are outstanding: the responder is still answering ones
    // we sent before, replays that rxe sends one after another, each to its end (a READ asked
    // again more than once, the last READ's or this one's). Ours comes after them, so the timer
    // waits for silence, as in implied_nak(), and does not go back again meanwhile: each
    // request would queue one more replay. A duplicate of the last stale PSN does not re-arm it.
    // (Each stream answers a request that was sent, so they end; a peer that kept sending stale
    // responses could hold the QP open, as it can with RNR NAKs and rnr_retry 7.)
    if (sq_count_ > 0 && stale && comp_.deadline != Instant::never()) {
      if (psn != comp_.stale_psn) comp_.deadline = now + ack_timeout();
      comp_.stale_psn = psn;
    }
    return;
  }
  // A response at or beyond the rewound req_.psn: the responder has every PSN before it (and,
  // unless it is a NAK, this one), sent before the go-back-N. The requester passes them.
  if (wire::psn_ge(psn, req_.psn)) {
    skip_acknowledged(nak ? wire::psn_add(psn, -1) : psn);
    if (nak ? wire::psn_gt(psn, req_.psn) : wire::psn_ge(psn, req_.psn)) {
      ++counters_.dropped;  // the WQEs there were not sent (cannot happen)
      return;
    }
  }
  complete_acked_through(psn);
  if (sq_count_ == 0) return;
  const std::uint32_t index = sq_tail_;
  const SendWqe& w = sq_at(index);
  if (wire::psn_lt(w.last_psn, psn)) {
    // A READ or atomic ends before this response: its own response was lost. Go back to it.
    ++counters_.out_of_sequence;
    implied_nak(now, psn);
    return;
  }
  const bool has_aeth = pkt.op->has(wire::ExtHeader::kAeth);
  const std::uint8_t syndrome = has_aeth ? pkt.aeth().syndrome() : 0;
  if (has_aeth && wire::aeth_type(syndrome) != wire::AethType::kAck) {
    if (op != Opcode::kRcAcknowledge) {  // a NAK rides only on an Acknowledge (IBTA 9.7.5.1)
      ++counters_.dropped;
      return;
    }
    // Selective repeat: a sequence NAK whose responder kept what followed the PSN it names.
    if (sr_.on && (pkt.bytes[8] & kBthSrKeptBit) != std::byte{0} &&
        syndrome == wire::make_nak_syndrome(wire::NakCode::kPsnSequenceError) &&
        sr_handle_nak(now, index, psn)) {
      return;
    }
    handle_nak(now, index, psn, syndrome);
    return;
  }

  switch (op) {
    case Opcode::kRcAcknowledge:
      handle_ack(now, index, psn);
      return;
    case Opcode::kRcAtomicAcknowledge:
      handle_atomic_ack(now, pkt, index, psn);
      return;
    case Opcode::kRcRdmaReadResponseFirst:
    case Opcode::kRcRdmaReadResponseMiddle:
    case Opcode::kRcRdmaReadResponseLast:
    case Opcode::kRcRdmaReadResponseOnly:
      handle_read_response(now, pkt, index, psn, placed);
      return;
    default:
      ++counters_.dropped;
      return;
  }
}

void Qp::handle_ack(Instant now, std::uint32_t index, std::uint32_t psn) {
  UROCE_ASSERT(sq_count_ > 0 && index == sq_tail_);  // the oldest WQE (handle_response)
  const SendWqe& w = sq_at(index);
  UROCE_ASSERT(wire::psn_le(psn, w.last_psn));  // an ACK past it completed it already
  if (w.wr_op->is_read_or_atomic()) {
    ++counters_.dropped;  // a plain ACK cannot answer a READ or an atomic
    return;
  }
  comp_.psn = wire::psn_add(psn, 1);
  if (psn == w.last_psn && w.state == WqeState::kPending) complete_send(index, WcStatus::kSuccess);
  note_progress(now);
}

void Qp::handle_nak(Instant now, std::uint32_t index, std::uint32_t psn, std::uint8_t syndrome) {
  UROCE_ASSERT(sq_count_ > 0 && index == sq_tail_);  // the oldest WQE (handle_response)
  UROCE_ASSERT(wire::aeth_type(syndrome) != wire::AethType::kAck);
  const std::uint8_t value = wire::aeth_value(syndrome);
  switch (wire::aeth_type(syndrome)) {
    case wire::AethType::kRnrNak:
      ++counters_.rnr_naks_received;
      if (comp_.rnr_retry == 0) {
        ++counters_.rnr_retry_exceeded;
        fail_wqe(index, WcStatus::kRnrRetryExcErr);
        return;
      }
      if (comp_.rnr_retry != 7) --comp_.rnr_retry;
      comp_.psn = psn;
      retry_from(psn);
      req_.rnr_resume = now + Duration::us(wire::rnr_timer_us(value));
      comp_.deadline = Instant::never();
      return;
    case wire::AethType::kNak:
      switch (static_cast<wire::NakCode>(value)) {
        case wire::NakCode::kPsnSequenceError:
          ++counters_.seq_naks_received;
          // A NAK at p acknowledges every PSN before p: past the oldest unacknowledged one,
          // that is forward progress, and retry_cnt counts consecutive retries without
          // progress (rxe resets it on ACKs only, which its infinite retry_cnt 7 hides).
          // Without this, a long message on a lossy link fails after retry_cnt losses in a
          // row between two AckReq ACKs, however much got through between them.
          if (wire::psn_gt(psn, comp_.psn)) reset_retry_counters();
          comp_.psn = psn;
          report_ack(now);
          if (going_back()) return;
          if (comp_.retry_cnt == 0) {
            ++counters_.retry_exceeded;
            fail_wqe(index, WcStatus::kRetryExcErr);
            return;
          }
          --comp_.retry_cnt;
          env_.cc->on_loss(now, cc::LossSignal::kNak);
          start_retry(psn);
          note_nak_go_back(now, psn);  // RTT samples from the retransmissions (recovery.cc)
          comp_.deadline = now + ack_timeout();
          return;
        case wire::NakCode::kInvalidRequest:
          ++counters_.other_naks_received;
          fail_wqe(index, WcStatus::kRemInvReqErr);
          return;
        case wire::NakCode::kRemoteAccessError:
          ++counters_.other_naks_received;
          fail_wqe(index, WcStatus::kRemAccessErr);
          return;
        case wire::NakCode::kRemoteOperationalError:
          ++counters_.other_naks_received;
          fail_wqe(index, WcStatus::kRemOpErr);
          return;
        default:
          ++counters_.other_naks_received;
          fail_wqe(index, WcStatus::kRemInvRdReqErr);
          return;
      }
    default:
      ++counters_.dropped;  // reserved syndrome
      return;
  }
}

void Qp::handle_atomic_ack(Instant now, const wire::RocePacket& pkt, std::uint32_t index,
                           std::uint32_t psn) {
  UROCE_ASSERT(sq_count_ > 0 && index == sq_tail_);  // the oldest WQE (handle_response)
  SendWqe& w = sq_at(index);
  if (!w.wr_op->is(kWrAtomic) || psn != w.first_psn || w.state != WqeState::kPending) {
    ++counters_.dropped;
    return;
  }
  // The original remote value, in host byte order, into the local buffer (8 bytes).
  const std::uint64_t orig = pkt.atomic_ack_eth().orig();
  std::byte buf[8];
  std::memcpy(buf, &orig, sizeof orig);
  if (!scatter_read_response(w, index, 0, ConstBytes(buf, 8))) {
    fail_wqe(index, WcStatus::kLocProtErr);
    return;
  }
  comp_.psn = wire::psn_add(psn, 1);
  complete_send(index, WcStatus::kSuccess);
  note_progress(now);
}

void Qp::handle_read_response(Instant now, const wire::RocePacket& pkt, std::uint32_t index,
                              std::uint32_t psn, bool placed) {
  UROCE_ASSERT(sq_count_ > 0 && index == sq_tail_);  // the oldest WQE (handle_response)
  SendWqe& w = sq_at(index);
  if (w.wr_op->answered_empty()) {
    // ATOMIC WRITE and FLUSH: one READ Response Only without data at their PSN completes them
    // (rxe_comp.c check_ack(): COMPST_WRITE_SEND for an ATOMIC WRITE, a zero-length READ for a
    // FLUSH). Anything else answers no request of theirs.
    if (psn != w.first_psn || w.state != WqeState::kPending ||
        wire::rc_operation(pkt.op->opcode()) != Opcode::kRcRdmaReadResponseOnly) {
      ++counters_.dropped;
      return;
    }
    if (!pkt.payload.empty()) {
      fail_wqe(index, WcStatus::kBadRespErr);
      return;
    }
    comp_.psn = wire::psn_add(psn, 1);
    complete_send(index, WcStatus::kSuccess);
    note_progress(now);
    return;
  }
  if (!w.wr_op->is(kWrRead) || w.state != WqeState::kPending) {
    ++counters_.dropped;
    return;
  }
  if (psn != comp_.psn) {
    // An earlier response packet was lost (rxe waits for the timeout here).
    ++counters_.out_of_sequence;
    implied_nak(now, psn);
    return;
  }
  const bool first = pkt.op->is(wire::kFlagFirst);
  const bool last = pkt.op->is(wire::kFlagLast);
  // The response at the PSN of the latest READ request starts the response to it. At the
  // READ's first PSN it must be a First or an Only. A re-request of the rest (mid-message)
  // may be answered with any of them: a hardware responder starts over with First/Only,
  // rxe continues the original sequence (rxe_resp.c duplicate_request: the resource is
  // replayed, rdatm_res_state_replay, unless the re-request is at the READ's first PSN;
  // read_reply then sends Middle, and Last for the final packet). Anywhere else only a
  // continuation (Middle/Last) of an open stream fits; a First/Only there answers no request
  // that was sent, and a continuation without a start waits for the retry.
  const bool starts = psn == w.read_req_psn && (first || psn != w.first_psn);
  if (!starts && (first || !comp_.read_stream_open)) {
    ++counters_.out_of_sequence;
    return;
  }
  const std::uint64_t offset =
      std::uint64_t{static_cast<std::uint32_t>(wire::psn_diff(psn, w.first_psn))} * mtu_bytes_;
  const std::size_t len = pkt.payload.size();
  // First and Middle carry exactly the PMTU, Last and Only at most the PMTU, and together
  // they end exactly at the READ's length; anything else is a bad response.
  const bool length_ok =
      len <= mtu_bytes_ &&
      (last ? offset + len == w.length : (len == mtu_bytes_ && offset + len < w.length));
  if (!length_ok) {
    fail_wqe(index, WcStatus::kBadRespErr);
    return;
  }
  UROCE_ASSERT(!placed || !first);  // only a continuation is placed before (one_pass_target)
  if (len > 0 && !placed && !scatter_read_response(w, index, offset, pkt.payload)) {
    fail_wqe(index, WcStatus::kLocProtErr);
    return;
  }
  comp_.read_stream_open = !last;
  comp_.psn = wire::psn_add(psn, 1);
  if (last) complete_send(index, WcStatus::kSuccess);
  note_progress(now);
}

void Qp::handle_retry_timeout(Instant now) {
  if (state_ != QpState::kRts && state_ != QpState::kSqd) {
    comp_.deadline = Instant::never();
    return;
  }
  if (comp_.psn == req_.psn || sq_count_ == 0) {
    comp_.deadline = Instant::never();
    return;
  }
  ++counters_.timeouts;
  if (comp_.retry_cnt == 0) {
    ++counters_.retry_exceeded;
    fail_wqe(sq_tail_, WcStatus::kRetryExcErr);
    return;
  }
  --comp_.retry_cnt;
  env_.cc->on_loss(now, cc::LossSignal::kTimeout);
  start_retry(comp_.psn, /*restart=*/true);
  comp_.deadline = now + ack_timeout();
}

}  // namespace uroce::transport

// Selective repeat between two uroce peers that negotiated it (issue 39; IRN, Mittal et al.,
// SIGCOMM 2018, within IBTA's packet formats). Off on every QP unless Qp::set_selective_repeat()
// turned it on; then RC requests and NAKs follow the rules below, and everything else (UC, UD,
// READ responses, RNR, timeouts) is go-back-N as before. docs/ARCHITECTURE.md, "Selective
// repeat", says how peers agree on it.
//
// Responder: what it keeps. A request past the expected PSN (ePSN), less than kSrWindow beyond
// it and verified (its ICRC checked: the one-pass receive of issue 14 places only at the ePSN,
// so a header never chooses where bytes go before its packet is verified), is kept when the
// place of its payload is fixed by validated state:
//   - an RDMA WRITE First or Only: its own RETH, checked against the memory region as
//     execute_request() checks it; its payload goes to the RETH's address;
//   - a WRITE Middle or Last inside the PSN range of a WRITE whose First was validated: the one
//     in progress at the ePSN (resp_.write_va, write_resid) or a kept First (its RETH's length
//     fixes the range, so no other message can start inside it); the offset is (PSN - first
//     PSN) * MTU, the length the one the range allows there;
//   - a SEND First or Only whose receive WQE is certain: with the QP's own RQ (not an SRQ), when
//     no packet that is missing before it can take a WQE (sr_recv_wqe_index), the WQE that many
//     places down the RQ as messages before it take WQEs;
//   - a SEND Middle or Last of the SEND in progress (its receive WQE taken by a verified First)
//     or of a kept SEND First, when every PSN between is a kept SEND Middle or a lone missing
//     one: only then is it certain to belong to that SEND (its length is known only at its Last,
//     and two missing PSNs in a row could be that SEND's Last and the next one's First);
//   - a READ or an atomic request, as its headers alone: it executes when its turn comes.
// Not kept: a SEND whose WQE or message is not certain, and anything whose checks fail (wrong
// length, no access, outside every known range, out of the window).
// Such a packet is dropped and cuts the run: nothing at or beyond its PSN is kept (those kept
// there are released; their bytes are rewritten by the retransmission) until the ePSN passes.
// Kept packets are held in a bitmap of kSrWindow slots beyond the ePSN, each with its headers.
// When the ePSN arrives and executes, the kept packets that follow it are replayed through
// execute_request() in PSN order (their payload already in place), so the MSN, receive WQE
// consumption, completions and ACKs happen in order: a message completes only when all its
// packets are in.
//
// What the responder says (a sequence NAK is IBTA's; kBthSrKeptBit is a reserved BTH bit):
//   - every out-of-order request (kept, dropped or a duplicate of a kept one) while the
//     responder holds packets past the ePSN: a sequence NAK at the ePSN with kBthSrKeptBit. It
//     means "every PSN before this one executed; this one is missing; I keep packets after it".
//   - while it holds none: a plain sequence NAK, once per run, as rxe: "go back N from here".
//   - after a gap is filled and the kept packets replayed: an ACK of all of them, and then, if
//     packets are still held beyond the new ePSN, a NAK with the bit at it (the next hole); if
//     none is held but the run was cut after a NAK with the bit, a plain NAK there, so the
//     sender goes back N from the first packet that was not kept.
// Requester: a NAK with the bit at p completes everything before p and resends the packet at p
// alone (a SEND or WRITE packet; a READ or atomic there goes back N as before), then goes on
// sending new packets in its window. Holes it cannot know about come up one by one, each as the
// next NAK with the bit. The resend of p may be lost: each packet sent before it can cause at
// most one more NAK at p, so more NAKs at p than packets sent past p before the resend mean a
// packet sent after it arrived without it, and p goes again (spending no retry_cnt: the ACK
// timer, not re-armed, spends one if the resends never get through). A plain sequence NAK, the ACK
// timeout and an RNR NAK go back N as before; the responder takes a resent packet that it holds as
// a duplicate of a kept one.
#include <algorithm>
#include <bitset>
#include <cstring>

#include "base/assert.h"
#include "transport/qp.h"
#include "transport/sgl.h"
#include "wire/aeth.h"
#include "wire/psn.h"

namespace uroce::transport {

namespace {

// The payload a kept request is replayed with: execute_request() reads only its length, the
// bytes being in place already (placed = true).
constexpr std::array<std::byte, wire::kMaxPayloadBytes> kPlacedPayload{};

}  // namespace

void Qp::set_selective_repeat(bool on) {
  // XRC runs go-back-N: a target places a request with the PD of the SRQ it names, which it
  // binds only at the request's turn.
  if (type_ != QpType::kRc || env_.xrc != XrcRole::kNone) return;
  // Its slots (20 KiB) only for a QP that uses them, allocated once, when the connection is set
  // up: never on the data path.
  if (on && sr_slots_.empty()) sr_slots_.resize(kSrWindow);
  UROCE_ASSERT(!on || sr_slots_.size() == kSrWindow);  // indexed by PSN modulo the window
  if (!on) {
    sr_release_from(wire::psn_add(resp_.psn, 1));
    sr_ = SelectiveRepeat{};
  }
  sr_.on = on;
}

void Qp::sr_forget(std::uint32_t from, std::uint32_t to) {
  if (sr_.held == 0) return;
  if (static_cast<std::uint32_t>(wire::psn_diff(to, from)) >= kSrWindow) {
    for (SrSlot& s : sr_slots_) s.held = false;
    sr_.held = 0;
    return;
  }
  for (std::uint32_t p = from; p != to; p = wire::psn_add(p, 1)) {
    if (sr_holds(p)) {
      UROCE_ASSERT(sr_.held > 0);  // sr_.held counts the held slots
      sr_slot(p).held = false;
      --sr_.held;
    }
  }
}

void Qp::sr_release_from(std::uint32_t psn) {
  if (sr_.held == 0) return;
  for (SrSlot& s : sr_slots_) {
    if (s.held && wire::psn_ge(s.psn, psn)) {
      UROCE_ASSERT(sr_.held > 0);  // sr_.held counts the held slots
      s.held = false;
      --sr_.held;
    }
  }
}

void Qp::sr_queue_seq_nak(bool kept) {
  const std::uint8_t syndrome = wire::make_nak_syndrome(wire::NakCode::kPsnSequenceError);
  ++counters_.seq_naks_sent;
  queue_ack(syndrome, resp_.psn);
  // queue_ack() may keep a NAK already queued at this PSN: it says what this one says.
  Response& back = responses_.back();
  if (back.kind == Response::Kind::kAck && back.psn == resp_.psn && back.syndrome == syndrome) {
    back.sr_kept = kept;
  }
  sr_.told_kept = kept;
  // A plain NAK sends the requester back to the ePSN: everything from there comes again, so no
  // packet dropped before matters any more, and those that arrive next may be kept.
  if (!kept) sr_.cut = false;
}

namespace {

bool overlaps(std::uintptr_t a, std::size_t alen, std::uintptr_t b, std::size_t blen) {
  return a < b + blen && b < a + alen;
}

bool overlaps_any(ConstBytes range, std::span<const MutBytes> pieces) {
  const auto a = reinterpret_cast<std::uintptr_t>(range.data());
  for (const MutBytes p : pieces) {
    if (overlaps(a, range.size(), reinterpret_cast<std::uintptr_t>(p.data()), p.size())) {
      return true;
    }
  }
  return false;
}

}  // namespace

// Long: one pass from the ePSN with a small state machine whose state is local.
bool Qp::sr_order_allows(std::uint32_t psn, bool send_continuation,
                         std::span<const MutBytes> pieces) const {
  // One pass from the ePSN: the message running at each PSN, its kind and, for a WRITE or a
  // READ, its last PSN (a SEND's is known only at its Last).
  enum class Run : std::uint8_t { kWrite, kSend, kRead, kEnded };
  Run run = Run::kEnded;
  std::uint32_t end = 0;
  switch (resp_.in_message) {
    case MsgKind::kWrite:
      run = Run::kWrite;
      end = wire::psn_add(resp_.psn, std::int64_t{packets_for(resp_.write_resid, mtu_bytes_)} - 1);
      break;
    case MsgKind::kSend:
      run = Run::kSend;
      break;
    case MsgKind::kNone:
      return false;  // the missing packet at the ePSN may be a READ or an atomic
  }
  bool missing = true;  // the ePSN's packet
  for (std::uint32_t q = wire::psn_add(resp_.psn, 1); q != psn; q = wire::psn_add(q, 1)) {
    if (sr_holds(q)) {
      const SrSlot& s = sr_slots_[q % kSrWindow];
      const wire::OpcodeInfo* op = wire::opcode_info(std::to_integer<std::uint8_t>(s.header[0]));
      const ConstBytes hdr(s.header);
      if (op->is(wire::kFlagRead) || op->is(wire::kFlagAtomic)) {
        // It reads (or swaps) memory when its turn comes: nothing after it may change that
        // memory before.
        const bool read = op->is(wire::kFlagRead);
        std::uint64_t va = 0, length = 8;
        std::uint32_t rkey = 0;
        if (read) {
          const wire::RethView reth(hdr.subspan(op->offset_of(wire::ExtHeader::kReth)));
          va = reth.va();
          rkey = reth.rkey();
          length = reth.dma_length();
        } else {
          const wire::AtomicEthView a(hdr.subspan(op->offset_of(wire::ExtHeader::kAtomicEth)));
          va = a.va();
          rkey = a.rkey();
        }
        if (length > 0) {
          auto mem = env_.memory->resolve(env_.pd, qpn_, rkey, true, va, length,
                                          read ? kAccessRemoteRead : kAccessRemoteAtomic);
          if (!mem.ok() || overlaps_any(mem.value(), pieces)) return false;
        }
        run = Run::kRead;
        end = read ? wire::psn_add(q, std::int64_t{packets_for(length, mtu_bytes_)} - 1) : q;
      } else if (op->is(wire::kFlagWrite) && op->is(wire::kFlagFirst) && !op->is(wire::kFlagLast)) {
        const wire::RethView reth(hdr.subspan(op->offset_of(wire::ExtHeader::kReth)));
        run = Run::kWrite;
        end = wire::psn_add(q, std::int64_t{packets_for(reth.dma_length(), mtu_bytes_)} - 1);
      } else if (op->is(wire::kFlagLast)) {
        run = Run::kEnded;
      } else if (op->is(wire::kFlagSend) && op->is(wire::kFlagFirst)) {
        run = Run::kSend;
      }
      missing = false;
      continue;
    }
    // A missing packet must be part of the message running there: inside a WRITE's or a READ's
    // PSNs, or alone between two packets of a SEND (sr_send_run). Anything else could be a READ
    // or an atomic this packet must not overtake, or a WRITE to the same bytes.
    bool known = (run == Run::kWrite || run == Run::kRead) && wire::psn_le(q, end);
    if (run == Run::kSend && !missing) {
      const std::uint32_t next = wire::psn_add(q, 1);
      known = next == psn
                  ? send_continuation
                  : sr_slot_is(next, wire::kFlagSend) && !sr_slot_is(next, wire::kFlagFirst);
    }
    if (!known) return false;
    missing = true;
  }
  return true;
}

void Qp::sr_copy(std::uint32_t psn, std::span<const MutBytes> pieces, ConstBytes src) {
  if (sr_.held == 0) {  // every QP's in-order WRITE comes here
    for (const MutBytes dst : pieces) {
      if (!dst.empty()) std::memcpy(dst.data(), src.data(), dst.size());
      src = src.subspan(dst.size());
    }
    return;
  }
  std::size_t off = 0;
  for (const MutBytes dst : pieces) {
    // A piece is at most one packet's payload (the `later` bits below), within `src`.
    UROCE_ASSERT(dst.size() <= wire::kMaxPayloadBytes && off + dst.size() <= src.size());
    const ConstBytes part = src.subspan(off, dst.size());
    off += dst.size();
    // The bytes that kept packets past `psn` placed already: theirs are the later writes.
    std::bitset<wire::kMaxPayloadBytes> later;
    bool any = false;
    const auto d = reinterpret_cast<std::uintptr_t>(dst.data());
    for (const SrSlot& s : sr_slots_) {
      if (!s.held || !wire::psn_gt(s.psn, psn)) continue;
      for (std::size_t i = 0; i < s.pieces; ++i) {
        if (!overlaps(d, dst.size(), s.piece_at[i], s.piece_len[i])) continue;
        const std::uintptr_t from = std::max(d, s.piece_at[i]);
        const std::uintptr_t to = std::min(d + dst.size(), s.piece_at[i] + s.piece_len[i]);
        for (std::uintptr_t b = from; b < to; ++b) later.set(b - d);
        any = true;
      }
    }
    if (!any) {
      if (!dst.empty()) std::memcpy(dst.data(), part.data(), dst.size());
      continue;
    }
    for (std::size_t i = 0; i < dst.size(); ++i) {
      if (!later.test(i)) dst[i] = part[i];
    }
  }
}

ScatterResult Qp::sr_scatter(std::uint32_t psn, std::span<const Sge> sges, std::uint64_t offset,
                             ConstBytes data) {
  std::array<MutBytes, kMaxSge> pieces{};
  std::size_t n = 0;
  const ScatterResult r =
      scatter_targets(*env_.memory, env_.pd, sges, offset, data.size(), pieces, n);
  if (r == ScatterResult::kOk) sr_copy(psn, std::span(pieces).first(n), data);
  return r;
}

bool Qp::sr_slot_is(std::uint32_t psn, std::uint32_t flag) const {
  return sr_holds(psn) &&
         wire::opcode_info(std::to_integer<std::uint8_t>(sr_slots_[psn % kSrWindow].header[0]))
             ->is(flag);
}

bool Qp::sr_send_run(std::uint32_t from, std::uint32_t to, bool from_missing) const {
  // A missing PSN between two packets of one SEND is one of its Middles: it could only be
  // that SEND's Last if the packet after it were a First. Two missing PSNs in a row could be its
  // Last and the next message's First.
  bool missing = from_missing;
  for (std::uint32_t p = wire::psn_add(from, 1); p != to; p = wire::psn_add(p, 1)) {
    if (!sr_holds(p)) {
      if (missing) return false;
      missing = true;
      continue;
    }
    if (!sr_slot_is(p, wire::kFlagSend) || sr_slot_is(p, wire::kFlagFirst) ||
        sr_slot_is(p, wire::kFlagLast)) {
      return false;
    }
    missing = false;
  }
  return true;
}

int Qp::sr_recv_wqe_index(std::uint32_t psn) const {
  // Known only with the QP's own RQ (an SRQ's WQEs go to whichever QP takes them first), when
  // the missing packet at the ePSN takes none (a continuation of the SEND in progress, whose WQE
  // is taken, or a WRITE Middle: a Last may carry immediate data), and when every packet missing
  // between the ePSN and `psn` is certain to take none either: alone, between a kept packet that
  // is not a Last and a kept continuation, it is a Middle.
  if (env_.rq_is_srq || resp_.has_wqe != (resp_.in_message == MsgKind::kSend)) return -1;
  if (resp_.in_message == MsgKind::kNone ||
      (resp_.in_message == MsgKind::kWrite && resp_.write_resid <= mtu_bytes_)) {
    return -1;
  }
  std::uint32_t taken = 0;
  bool missing = true;      // the packet before is missing: at first the ePSN's, ...
  bool unsure = false;      // ... which takes none; a later one may, unless bracketed
  bool after_last = false;  // the packet before is a kept Last
  for (std::uint32_t p = wire::psn_add(resp_.psn, 1); p != psn; p = wire::psn_add(p, 1)) {
    if (!sr_holds(p)) {
      if (missing || after_last) return -1;  // two in a row, or the next message's start
      missing = unsure = true;
      continue;
    }
    const wire::OpcodeInfo* op =
        wire::opcode_info(std::to_integer<std::uint8_t>(sr_slots_[p % kSrWindow].header[0]));
    if (unsure && op->is(wire::kFlagFirst)) return -1;  // the missing one may be a Last or Only
    const bool takes = op->is(wire::kFlagSend)
                           ? op->is(wire::kFlagFirst)
                           : op->has(wire::ExtHeader::kImmDt) && op->is(wire::kFlagLast);
    if (takes) ++taken;
    missing = unsure = false;
    after_last = op->is(wire::kFlagLast);
  }
  if (unsure) return -1;  // the packet just before may be a Last or an Only
  return taken < env_.rq->size() ? static_cast<int>(taken) : -1;
}

bool Qp::sr_keepable(const wire::RocePacket& pkt) const {
  const wire::OpcodeInfo& op = *pkt.op;
  const auto d = static_cast<std::uint32_t>(wire::psn_diff(pkt.bth().psn(), resp_.psn));
  if (d >= kSrWindow || op.header_bytes + wire::kIcrcBytes > SrSlot{}.header.size()) return false;
  // ATOMIC WRITE and FLUSH (IBTA 1.5) are not kept: the requester resends them after the gap.
  if (op.is(wire::kFlagAtomicWrite) || op.is(wire::kFlagFlush)) return false;
  // execute_request()'s checks that do not depend on order: the QP's access flags, and First
  // and Middle carrying exactly the MTU, Last 1..MTU bytes, Only 0..MTU.
  const std::uint32_t access = attr_.qp_access_flags;
  if ((op.is(wire::kFlagWrite) && !(access & kAccessRemoteWrite)) ||
      (op.is(wire::kFlagRead) && !(access & kAccessRemoteRead)) ||
      (op.is(wire::kFlagAtomic) && !(access & kAccessRemoteAtomic))) {
    return false;
  }
  if (!op.is(wire::kFlagPayload)) return true;
  const std::size_t payload = pkt.payload.size();
  const bool last = op.is(wire::kFlagLast);
  if (payload > mtu_bytes_ || (!last && payload != mtu_bytes_)) return false;
  return !(last && !op.is(wire::kFlagFirst) && payload == 0);
}

std::uint32_t Qp::sr_message_start(std::uint32_t psn) const {
  for (std::uint32_t p = wire::psn_add(psn, -1); p != resp_.psn; p = wire::psn_add(p, -1)) {
    if (sr_slot_is(p, wire::kFlagFirst)) return p;
  }
  return resp_.psn;
}

Qp::SrWrite Qp::sr_write_at(std::uint32_t psn, std::uint32_t start) const {
  UROCE_ASSERT(start == resp_.psn || wire::psn_lt(start, psn));  // sr_message_start(psn)
  if (start != resp_.psn) {
    const SrSlot& s = sr_slots_[start % kSrWindow];
    const wire::OpcodeInfo* sop = wire::opcode_info(std::to_integer<std::uint8_t>(s.header[0]));
    if (!sop->is(wire::kFlagWrite) || sop->is(wire::kFlagLast)) return {};
    const wire::RethView reth(ConstBytes(s.header).subspan(sop->offset_of(wire::ExtHeader::kReth)));
    const std::uint64_t done =
        std::uint64_t{static_cast<std::uint32_t>(wire::psn_diff(psn, start))} * mtu_bytes_;
    if (done >= reth.dma_length()) return {};
    return {true, reth.va() + done, reth.dma_length() - done, reth.rkey()};
  }
  if (resp_.in_message != MsgKind::kWrite) return {};
  const std::uint64_t done =
      std::uint64_t{static_cast<std::uint32_t>(wire::psn_diff(psn, resp_.psn))} * mtu_bytes_;
  if (done >= resp_.write_resid) return {};
  return {true, resp_.write_va + done, resp_.write_resid - done, resp_.write_rkey};
}

bool Qp::sr_write_targets(const wire::RocePacket& pkt, const SrWrite& w, std::span<MutBytes> pieces,
                          std::size_t& n) const {
  const std::size_t payload = pkt.payload.size();
  const bool last = pkt.op->is(wire::kFlagLast);
  std::uint64_t va = w.va;
  std::uint32_t rkey = w.rkey;
  if (pkt.op->is(wire::kFlagFirst)) {
    if (w.in_write) return false;  // inside a WRITE already: not a request a peer sends
    const wire::RethView reth = pkt.reth();
    const std::uint64_t length = reth.dma_length();
    if (length > kMaxMessageBytes || (last ? payload != length : payload >= length)) {
      return false;
    }
    if (length > 0 &&
        !env_.memory
             ->resolve(env_.pd, qpn_, reth.rkey(), true, reth.va(), length, kAccessRemoteWrite)
             .ok()) {
      return false;
    }
    va = reth.va();
    rkey = reth.rkey();
  } else if (!w.in_write || (last ? payload != w.resid : payload >= w.resid)) {
    return false;
  }
  if (payload > 0) {
    auto mem = env_.memory->resolve(env_.pd, qpn_, rkey, true, va, payload, kAccessRemoteWrite);
    if (!mem.ok()) return false;
    pieces[n++] = mem.value();
  }
  return true;
}

bool Qp::sr_send_targets(const wire::RocePacket& pkt, std::uint32_t start,
                         std::span<MutBytes> pieces, std::size_t& n) const {
  const std::uint32_t psn = pkt.bth().psn();
  const bool first = pkt.op->is(wire::kFlagFirst);
  // The receive WQE and the offset in it: a SEND First starts the WQE it will take; a
  // continuation follows the kept SEND First before it, or the SEND in progress.
  std::span<const Sge> sges;
  std::uint64_t offset = 0;
  if (first || start != resp_.psn) {
    const std::uint32_t from = first ? psn : start;
    if (!first && (!sr_slot_is(from, wire::kFlagSend) || sr_slot_is(from, wire::kFlagLast) ||
                   !sr_send_run(from, psn, false))) {
      return false;
    }
    const int j = sr_recv_wqe_index(from);
    if (j < 0) return false;
    sges = env_.rq->at(static_cast<std::uint32_t>(j)).sges;
    offset = std::uint64_t{static_cast<std::uint32_t>(wire::psn_diff(psn, from))} * mtu_bytes_;
  } else {
    if (resp_.in_message != MsgKind::kSend || !resp_.has_wqe ||
        !sr_send_run(resp_.psn, psn, true)) {
      return false;
    }
    sges = std::span<const Sge>(resp_.wqe_sges).first(resp_.wqe_num_sge);
    offset = resp_.recv_offset +
             std::uint64_t{static_cast<std::uint32_t>(wire::psn_diff(psn, resp_.psn))} * mtu_bytes_;
  }
  return scatter_targets(*env_.memory, env_.pd, sges, offset, pkt.payload.size(), pieces, n) ==
         ScatterResult::kOk;
}

void Qp::sr_hold(const wire::RocePacket& pkt, std::span<const MutBytes> pieces) {
  const std::uint32_t psn = pkt.bth().psn();
  UROCE_ASSERT(wire::psn_gt(psn, resp_.psn));  // kept: past the ePSN (sr_keepable)
  UROCE_ASSERT(pieces.size() <= kSrPieces &&
               pkt.op->header_bytes + wire::kIcrcBytes <= SrSlot{}.header.size());
  sr_copy(psn, pieces, pkt.payload);
  SrSlot& s = sr_slot(psn);
  // Held slots lie within one window past the ePSN: the one for `psn` is free.
  UROCE_ASSERT(!s.held && sr_.held < kSrWindow);
  s.held = true;
  s.psn = psn;
  s.payload_bytes = static_cast<std::uint16_t>(pkt.payload.size());
  s.pieces = static_cast<std::uint8_t>(pieces.size());
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    s.piece_at[i] = reinterpret_cast<std::uintptr_t>(pieces[i].data());
    s.piece_len[i] = static_cast<std::uint16_t>(pieces[i].size());
  }
  s.header.fill(std::byte{0});
  std::memcpy(s.header.data(), pkt.bytes.data(), pkt.op->header_bytes);
  ++sr_.held;
  ++counters_.out_of_order_kept;
}

bool Qp::sr_keep(const wire::RocePacket& pkt) {
  UROCE_ASSERT(sr_.on && type_ == QpType::kRc && sr_slots_.size() == kSrWindow);
  if (!sr_keepable(pkt)) return false;
  const wire::OpcodeInfo& op = *pkt.op;
  const std::uint32_t psn = pkt.bth().psn();
  const std::uint32_t start = sr_message_start(psn);
  const SrWrite w = sr_write_at(psn, start);
  // Where the payload goes, resolved as execute_request() resolves it.
  std::array<MutBytes, kMaxSge> pieces{};
  std::size_t n = 0;
  if (op.is(wire::kFlagWrite)) {
    if (!sr_write_targets(pkt, w, pieces, n)) return false;
  } else if (op.is(wire::kFlagSend)) {
    // A SEND inside a WRITE is not a request a peer sends.
    if (w.in_write || !sr_send_targets(pkt, start, pieces, n)) return false;
  } else if (!(op.is(wire::kFlagRead) || op.is(wire::kFlagAtomic))) {
    return false;
  }
  if (n > kSrPieces) return false;
  const bool continuation = op.is(wire::kFlagSend) && !op.is(wire::kFlagFirst);
  if (n > 0 && !sr_order_allows(psn, continuation, std::span(pieces).first(n))) return false;
  sr_hold(pkt, std::span(pieces).first(n));
  return true;
}

void Qp::sr_out_of_order(const wire::RocePacket& pkt) {
  ++counters_.out_of_sequence;
  const std::uint32_t psn = pkt.bth().psn();
  UROCE_ASSERT(wire::psn_gt(psn, resp_.psn));  // past the ePSN (handle_rc_request)
  if (sr_holds(psn)) {
    ++counters_.duplicate_requests;  // a retransmission of a packet kept already
  } else if ((sr_.cut && wire::psn_ge(psn, sr_.cut_psn)) || !sr_keep(pkt)) {
    if (!sr_.cut || wire::psn_lt(psn, sr_.cut_psn)) {
      sr_.cut = true;
      sr_.cut_psn = psn;
      sr_release_from(psn);
    }
  }
  if (sr_.held > 0) {
    sr_queue_seq_nak(true);
  } else if (!resp_.nak_sent || sr_.told_kept) {
    resp_.nak_sent = true;
    sr_queue_seq_nak(false);
  }
}

void Qp::sr_after_in_order(std::uint32_t psn, RespStatus s) {
  if (s == RespStatus::kRnr) {
    // The requester goes back N after its RNR timer: whatever is kept comes again.
    sr_release_from(wire::psn_add(psn, 1));
    sr_.cut = false;
    sr_.told_kept = false;
    return;
  }
  if (s != RespStatus::kOk || state_ == QpState::kErr) return;
  sr_forget(wire::psn_add(psn, 1), resp_.psn);  // inside a READ's PSNs: never sent by a peer
  sr_drain();
}

void Qp::sr_drain() {
  bool drained = false;
  while (sr_holds(resp_.psn)) {
    SrSlot& slot = sr_slot(resp_.psn);
    UROCE_ASSERT(sr_.held > 0);  // sr_.held counts the held slots
    slot.held = false;
    --sr_.held;
    const std::uint32_t psn = resp_.psn;
    wire::RocePacket pkt;
    pkt.op = wire::opcode_info(std::to_integer<std::uint8_t>(slot.header[0]));
    pkt.bytes = ConstBytes(slot.header).first(pkt.op->header_bytes + wire::kIcrcBytes);
    pkt.payload = ConstBytes(kPlacedPayload).first(slot.payload_bytes);
    sr_.draining = true;
    const RespStatus s = execute_request(pkt, /*placed=*/true);
    sr_.draining = false;
    answer_request(pkt, s);
    if (s == RespStatus::kRnr) {
      sr_after_in_order(psn, s);
      return;
    }
    if (state_ == QpState::kErr) return;
    if (s != RespStatus::kOk) break;  // kBusy: dropped, the requester resends it
    sr_forget(wire::psn_add(psn, 1), resp_.psn);
    drained = true;
  }
  // One ACK of everything replayed (unless the last one's AckReq asked for it already).
  const std::uint32_t through = wire::psn_add(resp_.psn, -1);
  if (drained && (responses_.empty() || responses_.back().kind != Response::Kind::kAck ||
                  responses_.back().psn != through)) {
    queue_ack(wire::make_ack_syndrome(), through);
  }
  if (sr_.held > 0) {
    resp_.nak_sent = true;
    sr_queue_seq_nak(true);
    return;
  }
  if (sr_.told_kept && sr_.cut) {
    // The requester resent only what it was told was missing; the run's cut packets come next.
    resp_.nak_sent = true;
    sr_queue_seq_nak(false);
  }
  sr_.told_kept = false;
  sr_.cut = false;
}

bool Qp::sr_handle_nak(Instant now, std::uint32_t index, std::uint32_t psn) {
  UROCE_ASSERT(sr_.on && sq_count_ > 0 && index == sq_tail_);  // from handle_response
  const SendWqe& w = sq_at(index);
  // A READ or atomic to resend, or a packet never sent: go back N as for any sequence NAK.
  if (w.wr_op->is_read_or_atomic() || w.state == WqeState::kPosted ||
      wire::psn_lt(psn, w.first_psn) || wire::psn_gt(psn, w.last_psn) ||
      !wire::psn_lt(psn, req_.psn)) {
    return false;
  }
  ++counters_.seq_naks_received;
  const bool progress = wire::psn_gt(psn, comp_.psn);
  if (progress) reset_retry_counters();
  comp_.psn = psn;
  report_ack(now);
  const bool same_hole = psn == sr_.resend_psn && (sr_.resend_pending || sr_.resend_active);
  if (going_back()) {
    // The go-back-N resent psn already; a NAK here comes from a packet sent before it, or from
    // one after it that arrived without it (retry_from counted the first kind): then psn alone
    // goes again.
    if (!same_hole || sr_.resend_pending) return true;
    if (sr_.naks_left > 0) {
      --sr_.naks_left;
      return true;
    }
    sr_.resend_active = false;
    sr_.resend_pending = true;
    return true;
  }
  if (same_hole) {
    ++sr_.naks_seen;
    if (sr_.resend_pending) return true;
    if (sr_.naks_left > 0) {
      --sr_.naks_left;
      return true;
    }
    // More NAKs at psn than packets sent before its resend: the resend was lost.
  } else {
    sr_.naks_seen = 1;
    sr_.resends = 0;
  }
  // A new hole without progress spends a retry, as a plain sequence NAK does. A lost resend
  // does not (reordering and duplication make the NAK count a guess) and leaves the ACK timer
  // running: the timeout spends one if the resends never get through.
  if (!same_hole && !progress) {
    if (comp_.retry_cnt == 0) {
      ++counters_.retry_exceeded;
      fail_wqe(index, WcStatus::kRetryExcErr);
      return true;
    }
    --comp_.retry_cnt;
  }
  if (!same_hole) env_.cc->on_loss(now, cc::LossSignal::kNak);
  sr_.resend_psn = psn;
  sr_.resend_pending = true;
  sr_.resend_active = false;
  if (!same_hole) comp_.deadline = now + ack_timeout();
  return true;
}

void Qp::sr_going_back(std::uint32_t psn) {
  const std::uint32_t sent_past =
      wire::psn_gt(req_.psn, psn) ? static_cast<std::uint32_t>(wire::psn_diff(req_.psn, psn)) - 1
                                  : 0;
  sr_.resend_pending = false;
  sr_.resend_active = true;
  sr_.resend_psn = psn;
  sr_.resends = 2;  // no round-trip sample from a go-back-N
  sr_.naks_seen = 0;
  sr_.naks_left = sent_past + 2;
  sr_.resend_deadline = Instant::never();
}

Duration Qp::sr_rto() const {
  // Four smoothed round trips, at least 100 us (IRN's RTO_low); before any sample, a quarter of
  // the ACK timeout (at most 10 ms).
  if (sr_.srtt.count_ns() > 0) return std::max(sr_.srtt * 4, Duration::us(100));
  const Duration t = ack_timeout();
  return t.is_infinite() ? Duration::ms(10) : std::min(t / 4, Duration::ms(10));
}

void Qp::sr_after_response(Instant now) {
  if (!wire::psn_gt(comp_.psn, sr_.resend_psn)) return;
  // The hole is filled.
  if (sr_.resends == 1) {
    const Duration sample = now - sr_.resent_at;
    sr_.srtt = sr_.srtt.count_ns() == 0 ? sample : (sr_.srtt * 7 + sample) / 8;
  }
  sr_.resend_active = false;
  sr_.resend_deadline = Instant::never();
}

void Qp::sr_resend_timeout(Instant now) {
  sr_.resend_deadline = Instant::never();
  if (!sr_.resend_active || (state_ != QpState::kRts && state_ != QpState::kSqd)) return;
  if (wire::psn_lt(sr_.resend_psn, comp_.psn)) {
    sr_after_response(now);
    return;
  }
  // No word of the resend: it or its answer was lost. Again (the ACK timer, which this does not
  // re-arm, bounds how long).
  sr_.resend_active = false;
  sr_.resend_pending = true;
}

bool Qp::sr_poll_resend(Instant now, TxPacket& out) {
  const std::uint32_t psn = sr_.resend_psn;
  if (sq_count_ == 0 || wire::psn_lt(psn, comp_.psn) || !wire::psn_lt(psn, req_.psn)) {
    sr_.resend_pending = false;  // acknowledged since
    return false;
  }
  const std::uint32_t index = sq_tail_;
  const SendWqe& w = sq_at(index);
  if (w.wr_op->is_read_or_atomic() || w.state == WqeState::kPosted ||
      wire::psn_lt(psn, w.first_psn) || wire::psn_gt(psn, w.last_psn)) {
    sr_.resend_pending = false;
    return false;
  }
  const std::uint64_t offset =
      std::uint64_t{static_cast<std::uint32_t>(wire::psn_diff(psn, w.first_psn))} * mtu_bytes_;
  UROCE_ASSERT(offset <= w.length);  // psn is one of the WQE's PSNs (checked above)
  const auto bytes =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(w.length - offset, mtu_bytes_));
  const Instant allowed = env_.cc->next_send_time(now, bytes);
  if (allowed > now) {
    req_.pace_until = allowed;
    return false;
  }
  req_.pace_until = Instant::never();
  out.av = path_;
  if (!fill_message_packet(w, index, psn, offset, /*ack_req=*/true, attr_.dest_qp_num, out)) {
    fail_wqe(index, WcStatus::kLocProtErr);
    return false;
  }
  sr_.resend_pending = false;
  sr_.resend_active = true;
  // Each packet sent past psn before this resend and not heard of yet may still bring one NAK
  // at psn (and a duplicated one more: the slack).
  UROCE_ASSERT(wire::psn_lt(psn, req_.psn));  // sent (checked above): sent_past >= 0
  const auto sent_past = static_cast<std::uint32_t>(wire::psn_diff(req_.psn, psn)) - 1;
  sr_.naks_left = sent_past - std::min(sent_past, sr_.naks_seen) + 2;
  // Karn: only a hole's first resend times the round trip.
  if (sr_.resends++ == 0) sr_.resent_at = now;
  sr_.resend_deadline = now + sr_rto();
  env_.cc->on_sent(now, out.payload_bytes);
  ++counters_.packets_sent;
  counters_.bytes_sent += out.payload_bytes;
  ++counters_.retransmitted_packets;
  ++counters_.selective_retransmits;
  note_resent(psn);
  if (comp_.deadline.is_never()) comp_.deadline = now + ack_timeout();
  return true;
}

}  // namespace uroce::transport

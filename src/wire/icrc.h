// RoCEv2 invariant CRC (IBTA RoCEv2 annex A17.8; rxe's rxe_icrc.c).
//
// ICRC = CRC-32 (reflected IEEE 802.3 polynomial, as zlib) over
//   8 bytes of 0xff (the absent LRH) | IP header | UDP header | BTH | extension headers | payload
//   | pad,
// with the variant fields set to all-ones first: IPv4 TOS, TTL and header checksum; IPv6 traffic
// class, flow label and hop limit; the UDP checksum; BTH byte 4 (FECN, BECN, reserved). It is
// stored on the wire least-significant byte first.
//
// `ip_udp` is always the IP header (20 bytes for IPv4, which uroce requires without options, or 40
// for IPv6; the version is read from the first nibble) immediately followed by the 8-byte UDP
// header. Nothing here allocates.
//
// Where the CPU has PCLMULQDQ (any x86-64 CPU of the last decade) the CRC runs in the widest of
// wire/crc32_fold.h's kernels it can run (512-, 256- or 128-bit), which masks the variant header
// fields as it reads them when the IP header and the BTH are contiguous in memory (as in any
// received or built frame); elsewhere ISA-L's crc32_gzip_refl.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <optional>

#include "base/bytes.h"
#include "wire/opcode.h"

namespace uroce::wire {

// Plain CRC-32 as zlib's crc32(): pass 0 to start, the previous result to continue.
std::uint32_t crc32(std::uint32_t crc, ConstBytes data);

// Copies `src` to the start of `dst` (at least as large; the two must not overlap) and returns
// the crc32() of the bytes as copied, in one pass over the bytes where a crc32_fold.h kernel runs
// (memcpy and then crc32() of the copy elsewhere): each byte is read once, so the CRC covers the
// copy even while another thread rewrites `src`. For a send path that copies the payload anyway.
std::uint32_t copy_and_crc32(std::uint32_t crc, MutBytes dst, ConstBytes src);

// Which implementation crc32() and the ICRC run on this CPU, for `uroce doctor`: the
// crc32_fold.h kernel chosen at run time ("vpclmul512: 512-bit VPCLMULQDQ folding (AVX-512)",
// ...), or ISA-L's crc32_gzip_refl where the CPU has no PCLMULQDQ.
const char* crc32_implementation();

// What a packet's ICRC owes its outer headers: the CRC register (zlib convention) after the
// pseudo-LRH and the masked IP and UDP headers `ip_udp`. It depends only on the fields the ICRC
// covers there (addresses, ports, lengths, the IPv4 identification and DF), not on the masked
// ones (TOS, TTL, the IPv4 header checksum, the IPv6 traffic class, flow label and hop limit, the
// UDP checksum): a sender or receiver that sees the same covered fields again may keep it and
// start each packet's ICRC from it (icrc_continue()), instead of writing the headers again.
std::uint32_t icrc_outer_state(ConstBytes ip_udp);

// The ICRC of a packet whose outer headers left `outer_state` (icrc_outer_state()): continues
// over the masked BTH (the first 12 bytes of `bth_onward`) and the rest of `bth_onward`.
// icrc_continue(icrc_outer_state(ip_udp), roce) == icrc_compute(ip_udp, roce).
std::uint32_t icrc_continue(std::uint32_t outer_state, ConstBytes bth_onward);

// Incremental ICRC, for packets whose payload is gathered from several buffers.
class IcrcAccumulator {
 public:
  // Feeds the masked pseudo-LRH, IP and UDP headers, and the masked BTH (the first 12 bytes of
  // `bth_onward`) followed by the rest of `bth_onward`.
  IcrcAccumulator(ConstBytes ip_udp, ConstBytes bth_onward);
  // The same from the state the outer headers left (icrc_outer_state()).
  IcrcAccumulator(std::uint32_t outer_state, ConstBytes bth_onward);
  void update(ConstBytes data) { crc_ = crc32(crc_, data); }
  // Copies `src` to the start of `dst` as copy_and_crc32() does and feeds it.
  void copy_and_update(MutBytes dst, ConstBytes src) { crc_ = copy_and_crc32(crc_, dst, src); }
  std::uint32_t value() const { return crc_; }

 private:
  std::uint32_t crc_;
};

// How a receiver accepts an ICRC that differs from the one it computed: datapath/udp, which
// cannot see the IPv4 identification and DF flag, accepts one that some identification (and DF)
// explains (Ipv4IdIcrcDelta). Without one, only an equal ICRC is accepted.
class IcrcCheck {
 public:
  virtual ~IcrcCheck() = default;
  // `computed` is the ICRC of the packet's bytes as the receiver has them, `stored` the one it
  // carries; `roce_bytes` is its length from the BTH through the ICRC.
  virtual bool accepts(std::size_t roce_bytes, std::uint32_t computed, std::uint32_t stored) = 0;
};

// The ICRC check of a received packet, computed in the same pass as its payload is copied to
// where the transport places it (issue 14: one pass over the payload on receive).
//
// Built over the masked outer headers and the transport headers; then copy_payload() copies the
// payload to its destinations, in order, folding each byte into the CRC as it goes; finish()
// folds in whatever was not copied (all of it, for a packet that is not placed this way) and the
// pad, and runs the check, once. Before finish() nothing about the packet is known to be intact:
// a caller may place its payload only where validated state, not the packet's own headers, says
// it belongs (transport::Qp::one_pass_target).
//
// The spans and the check must outlive the object. Nothing here allocates.
class PendingIcrc {
 public:
  // `ip_udp` as for icrc_compute(); `roce_with_icrc` the packet from the BTH through the ICRC;
  // `payload` the payload within it (after the transport headers, before the pad). `check`
  // may be null: equal or rejected.
  PendingIcrc(ConstBytes ip_udp, ConstBytes roce_with_icrc, ConstBytes payload, IcrcCheck* check);
  // The same from the state the outer headers left (icrc_outer_state()).
  PendingIcrc(std::uint32_t outer_state, ConstBytes roce_with_icrc, ConstBytes payload,
              IcrcCheck* check);
  PendingIcrc(const PendingIcrc&) = delete;
  PendingIcrc& operator=(const PendingIcrc&) = delete;

  std::size_t payload_bytes() const { return payload_bytes_; }
  // Payload bytes copied so far.
  std::size_t copied_bytes() const { return copied_; }
  // Copies the next dst.size() bytes of the payload to `dst` (at most what is left of it) and
  // folds them into the CRC. Only before finish().
  void copy_payload(MutBytes dst);
  // Folds in the rest of the payload and the pad and checks the ICRC; the verdict is kept.
  // Once only.
  bool finish();
  // Ends the check without computing it (finished() true, verified() false, skipped() true):
  // the handler vouches for the packet's bytes another way, or dropped it for another reason.
  // A sealed packet whose AEAD tag verified needs no ICRC (seal::SealedDatapath). Only before
  // finish().
  void skip();
  bool finished() const { return finished_; }
  bool verified() const { return verified_; }
  bool skipped() const { return skipped_; }

 private:
  IcrcAccumulator acc_;
  ConstBytes rest_;  // payload and pad
  std::size_t payload_bytes_;
  std::size_t copied_ = 0;
  std::uint32_t stored_;
  std::size_t roce_bytes_;
  IcrcCheck* check_;
  bool finished_ = false;
  bool verified_ = false;
  bool skipped_ = false;
};

// The packets whose ICRC a receiver may check in the same pass as it places their payload: the
// continuations (Middle and Last, with payload) of RC WRITEs and READ responses, whose
// destination and length the receiver's state fixed when an earlier, verified packet started the
// message (the RETH's range, the READ's), and whose bytes, if the packet turns out corrupted,
// the retransmission of that PSN writes again. Every other packet's own headers would choose
// where it goes (a RETH, a receive WQE taken, an atomic, a UD datagram) or it carries nothing to
// place: it is verified before anything reads it. Left out as well:
//   - UC: nothing is retransmitted there, so what a corrupted continuation placed would stay in
//     the target of a message that never completes;
//   - SEND continuations: the responder does not know a SEND's length before its Last, so a
//     corrupted continuation (a Middle's length where the real packet is a shorter Last) could
//     write past the end of the message, into bytes of the receive buffer that nothing writes
//     again.
constexpr bool icrc_deferrable(const OpcodeInfo& op) {
  if (op.transport != Transport::kRc) return false;
  if (op.is(kFlagFirst) || !op.is(kFlagPayload)) return false;
  if (!op.is(kFlagMiddle) && !op.is(kFlagLast)) return false;
  if (op.is(kFlagRequest)) return op.is(kFlagWrite);
  return op.is(kFlagResponse) && op.is(kFlagRead);
}

// ICRC of a packet; `roce` runs from the BTH to the end of the pad (the ICRC itself excluded).
std::uint32_t icrc_compute(ConstBytes ip_udp, ConstBytes roce);

// True when the last 4 bytes of `roce_with_icrc` hold the ICRC of what precedes them.
bool icrc_verify(ConstBytes ip_udp, ConstBytes roce_with_icrc);

// rxe's ICRC, for the opcodes with kFlagRxeIcrc (RC FLUSH). The kernel's Soft-RoCE computes
// every ICRC (drivers/infiniband/sw/rxe/rxe_icrc.c: rxe_icrc_check(), rxe_icrc_generate()) as
// rxe_icrc_hdr(), the masked pseudo-LRH, IP, UDP and BTH headers followed by the rest of the
// opcode's headers (rxe_opcode[opcode].length bytes from the BTH), continued over payload_addr()
// for payload_size() + bth_pad() bytes (rxe_hdr.h: the BTH plus offset[RXE_PAYLOAD], and the
// packet's length less that offset and the ICRC). rxe_opcode.c's IB_OPCODE_RC_FLUSH entry sets
// no offset[RXE_PAYLOAD]: it is 0, so the "payload" is the packet itself from the BTH up to the
// ICRC, and rxe's ICRC of a FLUSH covers its 32 header bytes twice, masked and then as they are.
// Two rxe peers agree with each other, IBTA's receivers (and uroce's, without this) do not. For
// a FLUSH (no payload, no pad) it is the IBTA ICRC continued over the same bytes once more.
//
// `roce` runs from the BTH to the end of the pad (the ICRC itself excluded); the header part is
// its opcode's header_bytes (all of `roce` when shorter, a BTH's for an unknown opcode).
std::uint32_t icrc_rxe_continue(std::uint32_t outer_state, ConstBytes roce);
std::uint32_t icrc_rxe_compute(ConstBytes ip_udp, ConstBytes roce);

// The opcode of the packet `roce` (from the BTH, not yet verified) when it is one whose ICRC may
// be rxe's (kFlagRxeIcrc), else null. What makes a receiver try rxe's form: the opcode byte is
// covered by both forms, so a corrupted one fails either check.
const OpcodeInfo* icrc_rxe_opcode(ConstBytes roce);

// For Ipv4IdIcrcDelta: rxe's ICRC of a packet of `roce_bytes` (BTH through ICRC) whose opcode is
// `op` reads as many bytes after the IPv4 identification as the IBTA ICRC of a packet of this
// many bytes does (its headers once more), so Ipv4IdIcrcDelta(icrc_rxe_delta_bytes(...)) gives
// the identification's part in it.
std::size_t icrc_rxe_delta_bytes(const OpcodeInfo& op, std::size_t roce_bytes);

// Which ICRC a packet carries, of those a receiver accepts: the IBTA's, or rxe's for an opcode
// with kFlagRxeIcrc (never for another).
enum class IcrcForm : std::uint8_t { kIbta, kRxe };
// The form of the last 4 bytes of `roce_with_icrc`, or nullopt when they are neither (`ip_udp`
// as for icrc_compute()). The IBTA's is tried first, and rxe's only for kFlagRxeIcrc opcodes.
std::optional<IcrcForm> icrc_match(ConstBytes ip_udp, ConstBytes roce_with_icrc);

// How an IPv4 packet's ICRC depends on its identification field, which the ICRC covers
// (roce-facts.md). The CRC is affine in its input: for two inputs of the same length,
// ICRC(id = v) = ICRC(id = 0) ^ delta(v), where delta is linear in v's 16 bits and depends
// otherwise only on how many bytes follow the identification field (each bit's contribution is
// that bit's CRC multiplied by x^(8 * rest) modulo the polynomial). A sender whose kernel numbers
// GSO segments 0, 1, 2, ... turns one ICRC computed with id 0 into each segment's; a receiver
// on a UDP socket, which never sees the identification, solves for it.
class Ipv4IdIcrcDelta {
 public:
  // For packets whose RoCE part (BTH through ICRC) is `roce_bytes` long.
  explicit Ipv4IdIcrcDelta(std::size_t roce_bytes);
  std::size_t roce_bytes() const { return roce_bytes_; }
  std::uint32_t operator()(std::uint16_t id) const {
    std::uint32_t d = 0;
    for (unsigned v = id; v != 0; v &= v - 1) d ^= bit_[static_cast<unsigned>(std::countr_zero(v))];
    return d;
  }
  // The identification whose delta is `delta` (= the stored ICRC ^ the ICRC computed with
  // id 0), or nullopt when none has it: the 32x16 system over GF(2), solved in at most 32 steps
  // from the echelon form the constructor builds. 16 of the ICRC's 32 bits are spent on finding
  // the id, so a corrupted packet is still rejected with probability 1 - 2^-16.
  std::optional<std::uint16_t> solve(std::uint32_t delta) const;
  // The same algebra for the DF flag, which the ICRC covers too: a packet sent with DF clear
  // and identification v has ICRC(DF set, id 0) ^ df_clear() ^ (*this)(v). The 16 identification
  // bits and DF are 17 distinct bits of one 32-bit word, so their deltas are independent: no
  // identification with DF set explains a DF-clear packet, and solve(delta ^ df_clear()) finds
  // the identification of one (with both tries, 15 bits are left against corruption).
  std::uint32_t df_clear() const { return df_clear_; }

 private:
  std::size_t roce_bytes_;
  std::uint32_t df_clear_ = 0;
  std::array<std::uint32_t, 16> bit_{};    // delta of each single bit of the identification
  std::array<std::uint32_t, 32> basis_{};  // echelon form: basis_[b]'s highest set bit is b
  std::array<std::uint16_t, 32> combo_{};  // the identification bits that make basis_[b]
};

// For an IPv4 packet whose identification the receiver cannot see (a UDP socket does not show
// it, and rxe sends nonzero ones): the identification that makes the ICRC valid, or nullopt when
// none does. `ip_udp` is the packet's IP and UDP header with identification 0. (One ICRC pass
// and Ipv4IdIcrcDelta::solve; a receiver that has the ICRC with id 0 already solves directly.)
std::optional<std::uint16_t> icrc_recover_ipv4_identification(ConstBytes ip_udp,
                                                              ConstBytes roce_with_icrc);

}  // namespace uroce::wire

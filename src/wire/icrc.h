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
#include <cstdint>
#include <optional>

#include "base/bytes.h"

namespace uroce::wire {

// Plain CRC-32 as zlib's crc32(): pass 0 to start, the previous result to continue.
std::uint32_t crc32(std::uint32_t crc, ConstBytes data);

// Copies `src` to the start of `dst` (at least as large; the two must not overlap) and returns
// crc32(crc, src), in one pass over the bytes where a crc32_fold.h kernel runs (memcpy and then
// crc32() elsewhere). For a send path that copies the payload into the packet anyway.
std::uint32_t copy_and_crc32(std::uint32_t crc, MutBytes dst, ConstBytes src);

// Incremental ICRC, for packets whose payload is gathered from several buffers.
class IcrcAccumulator {
 public:
  // Feeds the masked pseudo-LRH, IP and UDP headers, and the masked BTH (the first 12 bytes of
  // `bth_onward`) followed by the rest of `bth_onward`.
  IcrcAccumulator(ConstBytes ip_udp, ConstBytes bth_onward);
  void update(ConstBytes data) { crc_ = crc32(crc_, data); }
  // Copies `src` to the start of `dst` as copy_and_crc32() does and feeds it.
  void copy_and_update(MutBytes dst, ConstBytes src) { crc_ = copy_and_crc32(crc_, dst, src); }
  std::uint32_t value() const { return crc_; }

 private:
  std::uint32_t crc_;
};

// ICRC of a packet; `roce` runs from the BTH to the end of the pad (the ICRC itself excluded).
std::uint32_t icrc_compute(ConstBytes ip_udp, ConstBytes roce);

// True when the last 4 bytes of `roce_with_icrc` hold the ICRC of what precedes them.
bool icrc_verify(ConstBytes ip_udp, ConstBytes roce_with_icrc);

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
    for (unsigned b = 0; b < 16; ++b) {
      if ((id >> b) & 1u) d ^= bit_[b];
    }
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

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
// Where the CPU has AVX-512 and VPCLMULQDQ the CRC runs in wire/crc32_fold.h's kernel, which masks
// the variant header fields as it reads them when the IP header and the BTH are contiguous in
// memory (as in any received or built frame); elsewhere ISA-L's crc32_gzip_refl.
#pragma once

#include <cstdint>
#include <optional>

#include "base/bytes.h"

namespace uroce::wire {

// Plain CRC-32 as zlib's crc32(): pass 0 to start, the previous result to continue.
std::uint32_t crc32(std::uint32_t crc, ConstBytes data);

// Copies `src` to the start of `dst` (at least as large; the two must not overlap) and returns
// crc32(crc, src), in one pass over the bytes where the CPU has AVX-512 and VPCLMULQDQ (memcpy and
// then crc32() elsewhere). For a send path that copies the payload into the packet anyway.
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

// For an IPv4 packet whose identification the receiver cannot see (a UDP socket does not show
// it, and rxe sends nonzero ones): the identification that makes the ICRC valid, or nullopt when
// none does. `ip_udp` is the packet's IP and UDP header with identification 0.
//
// The CRC is affine in its input, so the ICRC of the packet with identification `id` is the
// ICRC with identification 0 XOR a linear function of id's 16 bits: each bit's contribution is
// a CRC of one bit followed by the rest of the packet as zeros, which is that bit's 14-byte CRC
// multiplied by x^(8 * rest) modulo the polynomial. Solving the 32x16 system over GF(2) finds
// the id. 16 of the ICRC's 32 bits are spent on finding it, so a corrupted packet still fails
// with probability 1 - 2^-16.
std::optional<std::uint16_t> icrc_recover_ipv4_identification(ConstBytes ip_udp,
                                                              ConstBytes roce_with_icrc);

}  // namespace uroce::wire

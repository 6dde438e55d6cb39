#include "wire/icrc.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "wire/crc32_fold.h"
#include "wire/ip.h"
#include "wire/opcode.h"

namespace uroce::wire {

namespace {

// crc32() of the 8-byte all-ones pseudo-LRH. rxe starts its raw CRC at 0xdebb20e3, the
// non-inverted register value after those bytes; in zlib's convention that is its complement.
constexpr std::uint32_t kCrcAfterPseudoLrh = ~0xdebb20e3u;

// The variant fields as an OR mask over the first 64 bytes from the IP header on (IP header, UDP
// header, BTH and what follows): ORing it in sets them to all-ones.
constexpr std::size_t kMaskBytes = 64;
using Mask = std::array<std::byte, kMaskBytes>;
constexpr Mask make_mask(bool v6) {
  constexpr std::byte kOnes{0xff};
  Mask m{};
  const std::size_t ip_len = v6 ? kIpv6Bytes : kIpv4Bytes;
  if (v6) {
    m[0] = std::byte{0x0f};  // traffic class (high nibble) ...
    m[1] = kOnes;            // ... traffic class (low nibble) and flow label
    m[2] = kOnes;
    m[3] = kOnes;
    m[7] = kOnes;  // hop limit
  } else {
    m[1] = kOnes;   // TOS (DSCP and ECN)
    m[8] = kOnes;   // TTL
    m[10] = kOnes;  // header checksum
    m[11] = kOnes;
  }
  m[ip_len + 6] = kOnes;  // UDP checksum
  m[ip_len + 7] = kOnes;
  m[ip_len + kUdpBytes + 4] = kOnes;  // BTH byte 4: FECN, BECN and 6 reserved bits
  return m;
}
alignas(kMaskBytes) constexpr Mask kMaskV4 = make_mask(false);
alignas(kMaskBytes) constexpr Mask kMaskV6 = make_mask(true);

// The CRC register (zlib convention) after the pseudo-LRH, the masked IP, UDP and BTH headers
// and the rest of `bth_onward`.
std::uint32_t icrc_of(ConstBytes ip_udp, ConstBytes bth_onward) {
  UROCE_CHECK(bth_onward.size() >= kBthBytes);
  UROCE_CHECK(!ip_udp.empty());
  const bool v6 = (static_cast<unsigned>(ip_udp[0]) >> 4) == 6;
  UROCE_CHECK(ip_udp.size() == (v6 ? kIpv6Bytes : kIpv4Bytes) + kUdpBytes);
  const Mask& mask = v6 ? kMaskV6 : kMaskV4;
  const std::size_t total = ip_udp.size() + bth_onward.size();
  const bool contiguous = ip_udp.data() + ip_udp.size() == bth_onward.data();
  if (contiguous && crc32_fold::available()) {
    // As in every received or built frame: one pass that masks as it reads.
    return crc32_fold::crc32(kCrcAfterPseudoLrh, ip_udp.data(), total, mask.data());
  }
  // Otherwise the first 64 bytes (or all, if fewer) are masked into a buffer, then the rest is
  // read where it lies. The buffer is written in whole vectors where the compiler can (the loop
  // over 64 contiguous bytes), so that the CRC's 16-byte loads of it are not stalled on narrower
  // stores still in flight.
  alignas(kMaskBytes) Mask head{};
  const std::size_t head_len = std::min(total, kMaskBytes);
  const std::size_t from_bth = head_len - ip_udp.size();
  if (contiguous && head_len == kMaskBytes) {
    const std::byte* src = ip_udp.data();
    for (std::size_t i = 0; i < kMaskBytes; ++i) head[i] = src[i] | mask[i];
  } else {
    std::memcpy(head.data(), ip_udp.data(), ip_udp.size());
    std::memcpy(head.data() + ip_udp.size(), bth_onward.data(), from_bth);
    for (std::size_t i = 0; i < kMaskBytes; ++i) head[i] |= mask[i];
  }
  const std::uint32_t crc = crc32(kCrcAfterPseudoLrh, ConstBytes(head).first(head_len));
  return from_bth == bth_onward.size() ? crc : crc32(crc, bth_onward.subspan(from_bth));
}

}  // namespace

std::uint32_t crc32(std::uint32_t crc, ConstBytes data) {
  if (crc32_fold::available()) {
    return crc32_fold::crc32(crc, data.data(), data.size(), nullptr);
  }
  // ISA-L's crc32_gzip_refl is zlib's crc32 (PCLMULQDQ folding; the SSE4.2 crc32 instruction
  // computes CRC-32C, a different polynomial, and cannot be used).
  return crc32_gzip_refl(crc, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

std::uint32_t copy_and_crc32(std::uint32_t crc, MutBytes dst, ConstBytes src) {
  UROCE_CHECK(dst.size() >= src.size());
  if (crc32_fold::available()) {
    return crc32_fold::copy_crc32(crc, dst.data(), src.data(), src.size());
  }
  if (!src.empty()) std::memcpy(dst.data(), src.data(), src.size());
  return crc32(crc, src);
}

IcrcAccumulator::IcrcAccumulator(ConstBytes ip_udp, ConstBytes bth_onward)
    : crc_(icrc_of(ip_udp, bth_onward)) {}

std::uint32_t icrc_compute(ConstBytes ip_udp, ConstBytes roce) { return icrc_of(ip_udp, roce); }

bool icrc_verify(ConstBytes ip_udp, ConstBytes roce_with_icrc) {
  if (roce_with_icrc.size() < kBthBytes + kIcrcBytes) return false;
  const std::size_t n = roce_with_icrc.size() - kIcrcBytes;
  return icrc_compute(ip_udp, roce_with_icrc.first(n)) == load_le32(roce_with_icrc, n);
}

namespace {

// GF(2) polynomials modulo the CRC-32 polynomial in the CRC's reflected bit order: bit 31 holds
// the coefficient of x^0, bit 0 that of x^31.
constexpr std::uint32_t kReflectedPoly = 0xEDB88320u;
constexpr std::uint32_t kOne = 1u << 31;  // x^0
constexpr std::uint32_t kX = 1u << 30;    // x^1

std::uint32_t gf2_multiply(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  for (std::uint32_t m = kOne; m != 0; m >>= 1) {
    if ((a & m) != 0) product ^= b;
    b = (b & 1u) != 0 ? (b >> 1) ^ kReflectedPoly : b >> 1;  // b *= x
  }
  return product;
}

// x^e modulo the polynomial, by squaring.
std::uint32_t gf2_x_power(std::uint64_t e) {
  std::uint32_t result = kOne;
  std::uint32_t square = kX;  // x^(2^k)
  for (; e != 0; e >>= 1) {
    if ((e & 1u) != 0) result = gf2_multiply(result, square);
    square = gf2_multiply(square, square);
  }
  return result;
}

// Where the identification sits in the ICRC's input: after the 8-byte pseudo-LRH, at bytes 4
// and 5 of the IPv4 header.
constexpr std::size_t kIdOffset = 8 + 4;
constexpr std::size_t kIdPrefixBytes = kIdOffset + 2;

}  // namespace

std::optional<std::uint16_t> icrc_recover_ipv4_identification(ConstBytes ip_udp,
                                                              ConstBytes roce_with_icrc) {
  if (roce_with_icrc.size() < kBthBytes + kIcrcBytes) return std::nullopt;
  if (ip_udp.size() != kIpv4Bytes + kUdpBytes) return std::nullopt;
  const std::size_t n = roce_with_icrc.size() - kIcrcBytes;
  const std::uint32_t delta =
      icrc_compute(ip_udp, roce_with_icrc.first(n)) ^ load_le32(roce_with_icrc, n);
  if (delta == 0) return std::uint16_t{0};

  // Each identification bit's contribution: the CRC (zero start, no final inversion) of a
  // 14-byte message holding only that bit, shifted over the rest of the ICRC's input.
  const std::size_t input_bytes = 8 + ip_udp.size() + n;
  const std::uint32_t shift = gf2_x_power(8 * std::uint64_t{input_bytes - kIdPrefixBytes});
  std::array<std::byte, kIdPrefixBytes> zeros{};
  const std::uint32_t crc_of_zeros = crc32(0, zeros);
  // Echelon form: basis[b] has its highest set bit at b; combo[b] says which id bits make it.
  std::array<std::uint32_t, 32> basis{};
  std::array<std::uint16_t, 32> combo{};
  for (unsigned bit = 0; bit < 16; ++bit) {
    std::array<std::byte, kIdPrefixBytes> one_bit{};
    const std::size_t byte = bit >= 8 ? kIdOffset : kIdOffset + 1;  // big-endian id
    one_bit[byte] = std::byte{static_cast<std::uint8_t>(1u << (bit % 8))};
    std::uint32_t v = gf2_multiply(crc32(0, one_bit) ^ crc_of_zeros, shift);
    auto c = static_cast<std::uint16_t>(1u << bit);
    for (int b = 31; b >= 0 && v != 0; --b) {
      if (((v >> b) & 1u) == 0) continue;
      if (basis[static_cast<std::size_t>(b)] == 0) {
        basis[static_cast<std::size_t>(b)] = v;
        combo[static_cast<std::size_t>(b)] = c;
        break;
      }
      v ^= basis[static_cast<std::size_t>(b)];
      c = static_cast<std::uint16_t>(c ^ combo[static_cast<std::size_t>(b)]);
    }
  }
  std::uint32_t rest = delta;
  std::uint16_t id = 0;
  for (int b = 31; b >= 0; --b) {
    if (((rest >> b) & 1u) == 0) continue;
    if (basis[static_cast<std::size_t>(b)] == 0) return std::nullopt;
    rest ^= basis[static_cast<std::size_t>(b)];
    id = static_cast<std::uint16_t>(id ^ combo[static_cast<std::size_t>(b)]);
  }
  return id;
}

}  // namespace uroce::wire

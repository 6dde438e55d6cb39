#include "wire/icrc.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <array>

#include "wire/ip.h"
#include "wire/opcode.h"

namespace uroce::wire {

namespace {

// crc32() of the 8-byte all-ones pseudo-LRH. rxe starts its raw CRC at 0xdebb20e3, the
// non-inverted register value after those bytes; in zlib's convention that is its complement.
constexpr std::uint32_t kCrcAfterPseudoLrh = ~0xdebb20e3u;

constexpr std::byte kOnes{0xff};

}  // namespace

std::uint32_t crc32(std::uint32_t crc, ConstBytes data) {
  // ISA-L's crc32_gzip_refl is zlib's crc32 (PCLMULQDQ folding; the SSE4.2 crc32 instruction
  // computes CRC-32C, a different polynomial, and cannot be used).
  return crc32_gzip_refl(crc, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

IcrcAccumulator::IcrcAccumulator(ConstBytes ip_udp, ConstBytes bth_onward) {
  UROCE_CHECK(bth_onward.size() >= kBthBytes);
  std::array<std::byte, kIpv6Bytes + kUdpBytes + kBthBytes> buf;
  const bool v6 = (static_cast<unsigned>(ip_udp[0]) >> 4) == 6;
  const std::size_t ip_len = v6 ? kIpv6Bytes : kIpv4Bytes;
  UROCE_CHECK(ip_udp.size() == ip_len + kUdpBytes);
  std::copy(ip_udp.begin(), ip_udp.end(), buf.begin());
  if (v6) {
    buf[0] |= std::byte{0x0f};  // traffic class (high nibble) ...
    buf[1] = kOnes;             // ... traffic class (low nibble) and flow label
    buf[2] = kOnes;
    buf[3] = kOnes;
    buf[7] = kOnes;  // hop limit
  } else {
    buf[1] = kOnes;   // TOS (DSCP and ECN)
    buf[8] = kOnes;   // TTL
    buf[10] = kOnes;  // header checksum
    buf[11] = kOnes;
  }
  buf[ip_len + 6] = kOnes;  // UDP checksum
  buf[ip_len + 7] = kOnes;
  std::byte* bth = buf.data() + ip_len + kUdpBytes;
  std::copy(bth_onward.begin(), bth_onward.begin() + kBthBytes, bth);
  bth[4] = kOnes;  // FECN, BECN and 6 reserved bits
  crc_ = crc32(kCrcAfterPseudoLrh, ConstBytes(buf.data(), ip_len + kUdpBytes + kBthBytes));
  crc_ = crc32(crc_, bth_onward.subspan(kBthBytes));
}

std::uint32_t icrc_compute(ConstBytes ip_udp, ConstBytes roce) {
  return IcrcAccumulator(ip_udp, roce).value();
}

bool icrc_verify(ConstBytes ip_udp, ConstBytes roce_with_icrc) {
  if (roce_with_icrc.size() < kBthBytes + kIcrcBytes) return false;
  const std::size_t n = roce_with_icrc.size() - kIcrcBytes;
  return icrc_compute(ip_udp, roce_with_icrc.first(n)) == load_le32(roce_with_icrc, n);
}

}  // namespace uroce::wire

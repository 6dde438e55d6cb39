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
// The same over the first 64 bytes from the BTH on: byte 4 only.
constexpr Mask make_bth_mask() {
  Mask m{};
  m[4] = std::byte{0xff};
  return m;
}
alignas(kMaskBytes) constexpr Mask kMaskBth = make_bth_mask();

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

// The CRC register continued from `crc` over `data`, whose first min(64, size) bytes are ORed
// with `mask` first.
std::uint32_t crc_masked(std::uint32_t crc, ConstBytes data, const Mask& mask) {
  // The kernels take a masked input of 16 bytes or more (a shorter one, such as the 12-byte BTH
  // of a Middle packet whose payload follows in another call, would go to the bytewise CRC):
  // shorter ones are masked into a buffer here.
  if (crc32_fold::available() && data.size() >= 16) {
    return crc32_fold::crc32(crc, data.data(), data.size(), mask.data());
  }
  alignas(kMaskBytes) Mask head{};
  const std::size_t head_len = std::min(data.size(), kMaskBytes);
  std::memcpy(head.data(), data.data(), head_len);
  for (std::size_t i = 0; i < kMaskBytes; ++i) head[i] |= mask[i];
  crc = crc32(crc, ConstBytes(head).first(head_len));
  return head_len == data.size() ? crc : crc32(crc, data.subspan(head_len));
}

}  // namespace

std::uint32_t icrc_outer_state(ConstBytes ip_udp) {
  UROCE_CHECK(!ip_udp.empty());
  const bool v6 = (static_cast<unsigned>(ip_udp[0]) >> 4) == 6;
  UROCE_CHECK(ip_udp.size() == (v6 ? kIpv6Bytes : kIpv4Bytes) + kUdpBytes);
  return crc_masked(kCrcAfterPseudoLrh, ip_udp, v6 ? kMaskV6 : kMaskV4);
}

std::uint32_t icrc_continue(std::uint32_t outer_state, ConstBytes bth_onward) {
  UROCE_CHECK(bth_onward.size() >= kBthBytes);
  return crc_masked(outer_state, bth_onward, kMaskBth);
}

std::uint32_t crc32(std::uint32_t crc, ConstBytes data) {
  if (crc32_fold::available()) {
    return crc32_fold::crc32(crc, data.data(), data.size(), nullptr);
  }
  // ISA-L's crc32_gzip_refl is zlib's crc32 (PCLMULQDQ folding; the SSE4.2 crc32 instruction
  // computes CRC-32C, a different polynomial, and cannot be used).
  return crc32_gzip_refl(crc, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

const char* crc32_implementation() {
  switch (crc32_fold::selected()) {
    case crc32_fold::Kernel::kVpclmul512:
      return "vpclmul512: 512-bit VPCLMULQDQ folding (AVX-512)";
    case crc32_fold::Kernel::kVpclmul256:
      return "vpclmul256: 256-bit VPCLMULQDQ folding (AVX2)";
    case crc32_fold::Kernel::kPclmul128:
      return "pclmul128: 128-bit PCLMULQDQ folding (SSE4.1)";
    case crc32_fold::Kernel::kNone:
      break;
  }
  return "ISA-L crc32_gzip_refl (this CPU has no PCLMULQDQ for uroce's own kernels)";
}

std::uint32_t copy_and_crc32(std::uint32_t crc, MutBytes dst, ConstBytes src) {
  UROCE_CHECK(dst.size() >= src.size());
  if (crc32_fold::available()) {
    return crc32_fold::copy_crc32(crc, dst.data(), src.data(), src.size());
  }
  if (!src.empty()) std::memcpy(dst.data(), src.data(), src.size());
  // Over the copy: `src` may be memory another thread rewrites (a READ response's snapshot).
  return crc32(crc, ConstBytes(dst.first(src.size())));
}

IcrcAccumulator::IcrcAccumulator(ConstBytes ip_udp, ConstBytes bth_onward)
    : crc_(icrc_of(ip_udp, bth_onward)) {}

IcrcAccumulator::IcrcAccumulator(std::uint32_t outer_state, ConstBytes bth_onward)
    : crc_(icrc_continue(outer_state, bth_onward)) {}

std::uint32_t icrc_compute(ConstBytes ip_udp, ConstBytes roce) { return icrc_of(ip_udp, roce); }

bool icrc_verify(ConstBytes ip_udp, ConstBytes roce_with_icrc) {
  if (roce_with_icrc.size() < kBthBytes + kIcrcBytes) return false;
  const std::size_t n = roce_with_icrc.size() - kIcrcBytes;
  return icrc_compute(ip_udp, roce_with_icrc.first(n)) == load_le32(roce_with_icrc, n);
}

const OpcodeInfo* icrc_rxe_opcode(ConstBytes roce) {
  if (roce.empty()) return nullptr;
  const OpcodeInfo* op = opcode_info(std::to_integer<std::uint8_t>(roce[0]));
  return op != nullptr && op->is(kFlagRxeIcrc) ? op : nullptr;
}

std::uint32_t icrc_rxe_continue(std::uint32_t outer_state, ConstBytes roce) {
  UROCE_CHECK(roce.size() >= kBthBytes);
  // rxe_icrc_hdr(): the masked headers, rxe_opcode[].length bytes from the BTH.
  const OpcodeInfo* op = opcode_info(std::to_integer<std::uint8_t>(roce[0]));
  const std::size_t headers =
      std::min<std::size_t>(op != nullptr ? op->header_bytes : kBthBytes, roce.size());
  const std::uint32_t crc = icrc_continue(outer_state, roce.first(headers));
  // Then payload_addr() for payload_size() + bth_pad() bytes: with offset[RXE_PAYLOAD] 0, the
  // packet from the BTH (unmasked) up to the ICRC.
  return crc32(crc, roce);
}

std::uint32_t icrc_rxe_compute(ConstBytes ip_udp, ConstBytes roce) {
  return icrc_rxe_continue(icrc_outer_state(ip_udp), roce);
}

std::size_t icrc_rxe_delta_bytes(const OpcodeInfo& op, std::size_t roce_bytes) {
  UROCE_CHECK(roce_bytes >= kBthBytes + kIcrcBytes);
  return std::min<std::size_t>(op.header_bytes, roce_bytes - kIcrcBytes) + roce_bytes;
}

std::optional<IcrcForm> icrc_match(ConstBytes ip_udp, ConstBytes roce_with_icrc) {
  if (roce_with_icrc.size() < kBthBytes + kIcrcBytes) return std::nullopt;
  const std::size_t n = roce_with_icrc.size() - kIcrcBytes;
  const std::uint32_t stored = load_le32(roce_with_icrc, n);
  if (icrc_compute(ip_udp, roce_with_icrc.first(n)) == stored) return IcrcForm::kIbta;
  if (icrc_rxe_opcode(roce_with_icrc) != nullptr &&
      icrc_rxe_compute(ip_udp, roce_with_icrc.first(n)) == stored) {
    return IcrcForm::kRxe;
  }
  return std::nullopt;
}

PendingIcrc::PendingIcrc(ConstBytes ip_udp, ConstBytes roce_with_icrc, ConstBytes payload,
                         IcrcCheck* check)
    : PendingIcrc(icrc_outer_state(ip_udp), roce_with_icrc, payload, check) {}

PendingIcrc::PendingIcrc(std::uint32_t outer_state, ConstBytes roce_with_icrc, ConstBytes payload,
                         IcrcCheck* check)
    : acc_(outer_state,
           roce_with_icrc.first(static_cast<std::size_t>(payload.data() - roce_with_icrc.data()))),
      rest_(roce_with_icrc.subspan(
          static_cast<std::size_t>(payload.data() - roce_with_icrc.data()),
          roce_with_icrc.size() - kIcrcBytes -
              static_cast<std::size_t>(payload.data() - roce_with_icrc.data()))),
      payload_bytes_(payload.size()),
      stored_(load_le32(roce_with_icrc, roce_with_icrc.size() - kIcrcBytes)),
      roce_bytes_(roce_with_icrc.size()),
      check_(check) {
  // The payload lies inside the packet, after the BTH and before the ICRC.
  UROCE_CHECK(payload.data() >= roce_with_icrc.data() + kBthBytes);
  UROCE_CHECK(payload.size() <= rest_.size());
}

void PendingIcrc::copy_payload(MutBytes dst) {
  UROCE_CHECK(!finished_);
  UROCE_CHECK(dst.size() <= payload_bytes_ - copied_);
  acc_.copy_and_update(dst, rest_.subspan(copied_, dst.size()));
  copied_ += dst.size();
}

bool PendingIcrc::finish() {
  UROCE_CHECK(!finished_);
  finished_ = true;
  acc_.update(rest_.subspan(copied_));
  const std::uint32_t computed = acc_.value();
  verified_ =
      computed == stored_ || (check_ != nullptr && check_->accepts(roce_bytes_, computed, stored_));
  return verified_;
}

void PendingIcrc::skip() {
  UROCE_CHECK(!finished_);
  finished_ = true;
  skipped_ = true;
}

namespace {

// Polynomial arithmetic modulo the CRC-32 polynomial in the reflected representation that the
// CRC register uses: bit 31 is the coefficient of x^0. (The algebra is the one zlib's
// crc32_combine rests on: appending n zero bytes multiplies the register by x^(8n).)
constexpr std::uint32_t kPolyReflected = 0xedb88320u;

constexpr std::uint32_t mul_mod_p(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  for (std::uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if ((a & m) != 0) product ^= b;
    b = (b & 1u) != 0 ? (b >> 1) ^ kPolyReflected : b >> 1;  // b *= x
  }
  return product;
}

// x^(8n) mod p.
constexpr std::uint32_t x_pow_8n(std::size_t n) {
  std::uint32_t result = 1u << 31;  // x^0
  std::uint32_t base = 1u << 23;    // x^8
  while (n != 0) {
    if ((n & 1u) != 0) result = mul_mod_p(result, base);
    base = mul_mod_p(base, base);
    n >>= 1;
  }
  return result;
}

// The CRC register, started at 0 and not inverted, after the two bytes of a big-endian 16-bit
// value: the contribution of those bytes alone, before the bytes that follow shift it.
constexpr std::uint32_t raw_crc_be16(std::uint16_t v) {
  std::uint32_t c = 0;
  for (const unsigned byte : {static_cast<unsigned>(v >> 8), static_cast<unsigned>(v & 0xffu)}) {
    c ^= byte;
    for (int i = 0; i < 8; ++i) c = (c & 1u) != 0 ? (c >> 1) ^ kPolyReflected : c >> 1;
  }
  return c;
}

}  // namespace

Ipv4IdIcrcDelta::Ipv4IdIcrcDelta(std::size_t roce_bytes) : roce_bytes_(roce_bytes) {
  UROCE_CHECK(roce_bytes >= kBthBytes + kIcrcBytes);
  // After the identification (IPv4 bytes 4-5) the ICRC reads the rest of the IPv4 header
  // (14 bytes), the UDP header (8) and BTH through pad (roce_bytes - 4).
  const std::uint32_t shift = x_pow_8n(kIpv4Bytes - 6 + kUdpBytes + roce_bytes - kIcrcBytes);
  // DF is bit 14 of the flags/fragment-offset word (IPv4 bytes 6-7), two bytes further on.
  df_clear_ = mul_mod_p(x_pow_8n(kIpv4Bytes - 8 + kUdpBytes + roce_bytes - kIcrcBytes),
                        raw_crc_be16(0x4000));
  for (unsigned b = 0; b < 16; ++b) {
    bit_[b] = mul_mod_p(shift, raw_crc_be16(static_cast<std::uint16_t>(1u << b)));
    // Into echelon form.
    std::uint32_t v = bit_[b];
    auto c = static_cast<std::uint16_t>(1u << b);
    for (int top = 31; top >= 0 && v != 0; --top) {
      const auto t = static_cast<std::size_t>(top);
      if (((v >> top) & 1u) == 0) continue;
      if (basis_[t] == 0) {
        basis_[t] = v;
        combo_[t] = c;
        break;
      }
      v ^= basis_[t];
      c = static_cast<std::uint16_t>(c ^ combo_[t]);
    }
  }
}

std::optional<std::uint16_t> Ipv4IdIcrcDelta::solve(std::uint32_t delta) const {
  std::uint16_t id = 0;
  for (int top = 31; top >= 0 && delta != 0; --top) {
    const auto t = static_cast<std::size_t>(top);
    if (((delta >> top) & 1u) == 0) continue;
    if (basis_[t] == 0) return std::nullopt;  // no identification explains this difference
    delta ^= basis_[t];
    id = static_cast<std::uint16_t>(id ^ combo_[t]);
  }
  return id;
}

std::optional<std::uint16_t> icrc_recover_ipv4_identification(ConstBytes ip_udp,
                                                              ConstBytes roce_with_icrc) {
  if (roce_with_icrc.size() < kBthBytes + kIcrcBytes) return std::nullopt;
  if (ip_udp.size() != kIpv4Bytes + kUdpBytes) return std::nullopt;
  const std::size_t n = roce_with_icrc.size() - kIcrcBytes;
  const std::uint32_t delta =
      icrc_compute(ip_udp, roce_with_icrc.first(n)) ^ load_le32(roce_with_icrc, n);
  if (delta == 0) return std::uint16_t{0};
  return Ipv4IdIcrcDelta(roce_with_icrc.size()).solve(delta);
}

}  // namespace uroce::wire

#include "wire/crc32_fold.h"

#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <iterator>

#include "base/assert.h"
#include "wire/crc32_fold_internal.h"

// The arithmetic
//
// Read the input as one polynomial over GF(2), its first bit the highest power: a CRC is that
// polynomial times x^32, mod P(x). A reflected CRC keeps every value bit-reversed, so a
// little-endian 64-bit load of 8 bytes is a polynomial of degree < 64 whose x^63 coefficient is
// bit 0.
//
// Folding. A 128-bit lane holding 16 input bytes C = L*x^64 + H (L: its first 8 bytes) that is
// followed by D more bits of input contributes C*x^D = L*x^(D+64) + H*x^D to the CRC. Modulo P
// that is L*(x^(D+64) mod P) + H*(x^D mod P): two 64x32-bit carry-less products of at most 96
// bits, which fit back into a 128-bit lane and can be XORed into the lane D bits later. With
// reflected operands a carry-less product comes out one bit short of the lane's scale, and the
// product of a lane half by a constant holding x^e mod P in bits 1..32 (fold_constant(e)) lands
// scaled by x^32 more; hence the constants x^(D+32) for L and x^(D-32) for H, as in Intel's
// "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction" (2009).
//   - Main loop: 4 accumulators of 64 bytes (4 lanes each), 256 bytes apart, fold by
//     D = 4 * 512 bits; so do the blocks in front of the first group of 4.
//   - End: the last 256 bytes (16 lanes, the 4 accumulators) fold onto their last lane at once,
//     lane L by D = (15 - L) * 128 bits. Inputs of at most 256 bytes do that directly.
// The last 128 bits are reduced to 32 by one more fold (x^96, x^64) and Barrett reduction with
// mu = floor(x^64 / P), as in zlib's crc32_simd.c.
//
// Speed. On AMD Zen 4 a VPCLMULQDQ issues once per 2 cycles whatever its width, so a 512-bit
// one (4 products of 64x64 bits) per 2 cycles is the most there is: 2 products per cycle, and
// one product per 8 input bytes, so at best 16 bytes per cycle. The loop's latency (5 cycles per
// fold) is covered by 2 accumulators; 4 are used (8 were no faster in a loop-only test).
//
// Any length. Zero bytes in front of a message do not change its raw CRC (the register without
// zlib's initial and final inversion) when that starts at 0. So the first len % 64 bytes become a
// block of their own, zero-padded at the front, and everything after is whole 64-byte blocks. The
// starting register (zlib's ~crc) is XORed into the first 4 input bytes, which is what feeding
// those bytes to a register holding it does.

// GCC 12's AVX-512 intrinsics fill their unused merge operand with a deliberately uninitialised
// value, which -Wmaybe-uninitialized reports once they are inlined at -O2 and up (GCC bug 105593,
// fixed in GCC 13). Nothing here reads an uninitialised value.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace uroce::wire::crc32_fold {

using detail::crc32_bytewise;
using detail::fold_by_bits;
using detail::Pair;
using detail::reduce128;

#define UROCE_VPCLMUL_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,vpclmulqdq,pclmul,sse4.1")))

namespace {

// ternarylogic truth tables, named by the operands a, b, c in that order.
constexpr int kA = 0xf0;
constexpr int kB = 0xcc;
constexpr int kC = 0xaa;
constexpr int kXor3 = kA ^ kB ^ kC;

// Folds each lane of a 64-byte block forward by 4 blocks (the main loop's stride).
constexpr Pair kFold4 = fold_by_bits(4 * 512);

// kLaneFold[m] folds a 64-byte block that is block m (0..3) of the last 256 input bytes onto
// the last 16 bytes: its lane l, lane L = 4m + l of those 256 bytes, by 15 - L lanes. The last
// lane itself (m = 3, l = 3) gets zeros and is added unmultiplied.
struct alignas(64) LaneFold {
  std::uint64_t q[8];
};
constexpr LaneFold lane_fold(std::uint32_t m) {
  LaneFold f{};
  for (std::uint32_t l = 0; l < 4; ++l) {
    const std::uint32_t lanes_before_last = 15 - (4 * m + l);
    if (lanes_before_last == 0) continue;
    const Pair p = fold_by_bits(128 * lanes_before_last);
    f.q[2 * l] = p.lo;
    f.q[2 * l + 1] = p.hi;
  }
  return f;
}
constexpr LaneFold kLaneFold[4] = {lane_fold(0), lane_fold(1), lane_fold(2), lane_fold(3)};

// Byte masks (bit i: byte i) of the lowest or highest n bits, 1 <= n <= 64 (shifts of at most
// 63, so no branch).
constexpr std::uint64_t low_bits(std::size_t n) { return ~std::uint64_t{0} >> (64 - n); }
constexpr std::uint64_t high_bits(std::size_t n) { return ~std::uint64_t{0} << (64 - n); }

UROCE_VPCLMUL_TARGET inline __m512i broadcast(Pair k) {
  return _mm512_broadcast_i32x4(
      _mm_set_epi64x(static_cast<long long>(k.hi), static_cast<long long>(k.lo)));
}

// v folded forward by the constants k, XORed with x.
UROCE_VPCLMUL_TARGET inline __m512i fold(__m512i v, __m512i k, __m512i x) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(v, k, 0x00),
                                   _mm512_clmulepi64_epi128(v, k, 0x11), x, kXor3);
}

// v, block m of the last 256 input bytes, folded onto the last 16 bytes and XORed with x.
UROCE_VPCLMUL_TARGET inline __m512i fold_lanes(__m512i v, std::size_t m, __m512i x) {
  return fold(v, _mm512_load_si512(kLaneFold[m].q), x);
}

// The last lane of v: what fold_lanes(v, 3, ...) leaves out.
UROCE_VPCLMUL_TARGET inline __m512i last_lane(__m512i v) { return _mm512_maskz_mov_epi64(0xc0, v); }

// The raw CRC (no inversions) of input folded into 64 bytes whose lanes 0..2 are already folded
// onto lane 3 (so that only the XOR of the four lanes matters).
UROCE_VPCLMUL_TARGET inline std::uint32_t reduce_lanes(__m512i y) {
  const __m256i y2 = _mm256_xor_si256(_mm512_castsi512_si256(y), _mm512_extracti64x4_epi64(y, 1));
  return reduce128(_mm_xor_si128(_mm256_castsi256_si128(y2), _mm256_extracti128_si256(y2, 1)));
}

UROCE_VPCLMUL_TARGET inline __m512i iota_bytes() {
  return _mm512_set_epi64(0x3f3e3d3c3b3a3938, 0x3736353433323130, 0x2f2e2d2c2b2a2928,
                          0x2726252423222120, 0x1f1e1d1c1b1a1918, 0x1716151413121110,
                          0x0f0e0d0c0b0a0908, 0x0706050403020100);
}

// `p - back` as a pointer, possibly before the start of p's object: only for a masked load or
// store whose mask leaves out the bytes in front (AVX-512 suppresses faults on masked-off bytes;
// clang's AddressSanitizer checks each enabled byte of such an access, GCC's none).
inline const std::byte* back_off(const std::byte* p, std::size_t back) {
  return reinterpret_cast<const std::byte*>(reinterpret_cast<std::uintptr_t>(p) - back);
}
inline std::byte* back_off(std::byte* p, std::size_t back) {
  return reinterpret_cast<std::byte*>(reinterpret_cast<std::uintptr_t>(p) - back);
}

// The kernel: crc32 of src[0..len) with the first 64 bytes ORed with or_mask[0..64) (kMasked);
// with kCopy it also stores every byte it reads to dst. len >= 4.
// Long: the AVX-512 fold; its cases share live registers that a split would spill.
template <bool kCopy, bool kMasked>
UROCE_VPCLMUL_TARGET std::uint32_t kernel(std::uint32_t crc, std::byte* dst, const std::byte* src,
                                          std::size_t len, const std::byte* or_mask) {
  const std::uint32_t reg = ~crc;  // the starting register, XORed into the first 4 input bytes
  if (len <= 64) {
    // One block: the input right-aligned, zeros in front, loaded in place by a masked load from
    // 64 - len bytes before it.
    const __mmask64 m = high_bits(len);
    const std::size_t back = 64 - len;
    __m512i d = _mm512_maskz_loadu_epi8(m, back_off(src, back));
    if constexpr (kCopy) _mm512_mask_storeu_epi8(back_off(dst, back), m, d);
    if constexpr (kMasked)
      d = _mm512_or_si512(d, _mm512_maskz_loadu_epi8(m, back_off(or_mask, back)));
    // The register goes to bytes 64 - len .. 67 - len: byte j takes byte (j + len) mod 64.
    const __m512i idx = _mm512_add_epi8(iota_bytes(), _mm512_set1_epi8(static_cast<char>(len)));
    const __m512i sv = _mm512_maskz_permutexvar_epi8(
        m, idx, _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(reg))));
    d = _mm512_xor_si512(d, sv);
    return ~reduce_lanes(fold_lanes(d, 3, last_lane(d)));
  }

  // The head: the first r = len % 64 bytes as a block of their own, right-aligned. Then n whole
  // blocks from src + r; the masking and the starting register, defined over input bytes 0..63,
  // are shifted down by r bytes for the first of them.
  const std::size_t r = len % 64;
  const std::size_t n = len / 64;
  const __m512i sv = _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(reg)));
  const __mmask64 hm = ~low_bits(64 - r);  // the head's bytes, right-aligned (none if r == 0)
  __m512i head = _mm512_maskz_loadu_epi8(hm, back_off(src, 64 - r));
  if constexpr (kCopy) _mm512_mask_storeu_epi8(back_off(dst, 64 - r), hm, head);
  if constexpr (kMasked) {
    head = _mm512_or_si512(head, _mm512_maskz_loadu_epi8(hm, back_off(or_mask, 64 - r)));
  }
  const __m512i idx = _mm512_add_epi8(iota_bytes(), _mm512_set1_epi8(static_cast<char>(r)));
  head = _mm512_xor_si512(head, _mm512_maskz_permutexvar_epi8(hm, idx, sv));
  // What of the register falls beyond the head (r < 4) goes to the start of block 0.
  const __m512i sv1 =
      _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(r < 4 ? reg >> (8 * r) : 0u)));
  src += r;
  if constexpr (kCopy) dst += r;

  auto block = [&](std::size_t i) UROCE_VPCLMUL_TARGET {
    const __m512i v = _mm512_loadu_si512(src + 64 * i);
    if constexpr (kCopy) _mm512_storeu_si512(dst + 64 * i, v);
    return v;
  };
  __m512i b0 = block(0);
  if constexpr (kMasked) {
    b0 = _mm512_or_si512(b0, _mm512_maskz_loadu_epi8(low_bits(64 - r), or_mask + r));
  }
  b0 = _mm512_xor_si512(b0, sv1);

  if (n < 4) {
    // At most 256 bytes: the n blocks are the last n of the final 256, the head the one before
    // them; each is folded straight onto the last lane.
    const __m512i last = n == 1 ? b0 : block(n - 1);
    __m512i y = fold_lanes(last, 3, last_lane(last));
    if (n > 1) y = fold_lanes(b0, 4 - n, y);
    if (n > 2) y = fold_lanes(block(1), 2, y);
    if (r != 0) y = fold_lanes(head, 3 - n, y);
    return ~reduce_lanes(y);
  }

  // Four accumulators, each a column of 64-byte blocks 256 bytes apart, start at the first group
  // of four whole blocks that ends a multiple of 256 bytes before the end: blocks hb..hb+3, where
  // hb = n % 4. The hb blocks and the head in front of them are folded forward by 256 bytes into
  // the accumulator of the column they belong to.
  const std::size_t hb = n % 4;
  const __m512i k4 = broadcast(kFold4);
  __m512i a0 = hb == 0 ? b0 : block(hb);
  __m512i a1 = block(hb + 1);
  __m512i a2 = block(hb + 2);
  __m512i a3 = block(hb + 3);
  switch (hb) {
    case 0:
      if (r != 0) a3 = fold(head, k4, a3);
      break;
    case 1:
      a3 = fold(b0, k4, a3);
      if (r != 0) a2 = fold(head, k4, a2);
      break;
    case 2:
      a2 = fold(b0, k4, a2);
      a3 = fold(block(1), k4, a3);
      if (r != 0) a1 = fold(head, k4, a1);
      break;
    default:
      a1 = fold(b0, k4, a1);
      a2 = fold(block(1), k4, a2);
      a3 = fold(block(2), k4, a3);
      if (r != 0) a0 = fold(head, k4, a0);
      break;
  }
  for (std::size_t i = hb + 4; i < n; i += 4) {
    a0 = fold(a0, k4, block(i));
    a1 = fold(a1, k4, block(i + 1));
    a2 = fold(a2, k4, block(i + 2));
    a3 = fold(a3, k4, block(i + 3));
  }
  // The four accumulators are the last 256 bytes: all 15 lanes folded onto the last at once.
  const __m512i y01 = fold_lanes(a0, 0, fold_lanes(a1, 1, last_lane(a3)));
  const __m512i y23 = fold_lanes(a2, 2, fold_lanes(a3, 3, _mm512_setzero_si512()));
  return ~reduce_lanes(_mm512_xor_si512(y01, y23));
}

UROCE_VPCLMUL_TARGET std::uint32_t crc32_impl(std::uint32_t crc, const std::byte* data,
                                              std::size_t len, const std::byte* or_mask) {
  return or_mask != nullptr ? kernel<false, true>(crc, nullptr, data, len, or_mask)
                            : kernel<false, false>(crc, nullptr, data, len, nullptr);
}

UROCE_VPCLMUL_TARGET std::uint32_t copy_crc32_impl(std::uint32_t crc, std::byte* dst,
                                                   const std::byte* src, std::size_t len) {
  return kernel<true, false>(crc, dst, src, len, nullptr);
}

bool detect(Kernel k) {
  __builtin_cpu_init();
  const bool pclmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  switch (k) {
    case Kernel::kNone:
      return true;
    case Kernel::kPclmul128:
      return pclmul;
    case Kernel::kVpclmul256:
      return pclmul && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("vpclmulqdq");
    case Kernel::kVpclmul512:
      return pclmul && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi") &&
             __builtin_cpu_supports("vpclmulqdq");
  }
  return false;
}

// What the CPU supports (detected once) and which kernel runs.
struct Selection {
  bool supported[std::size(kKernels)];
  Kernel selected;
};
Selection& selection() {
  static Selection s = [] {
    Selection init{};
    for (const Kernel k : kKernels) {
      init.supported[static_cast<std::size_t>(k)] = detect(k);
      if (init.supported[static_cast<std::size_t>(k)]) init.selected = k;  // the widest wins
    }
    return init;
  }();
  return s;
}

}  // namespace

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::kNone:
      return "none";
    case Kernel::kPclmul128:
      return "pclmul128";
    case Kernel::kVpclmul256:
      return "vpclmul256";
    case Kernel::kVpclmul512:
      return "vpclmul512";
  }
  return "?";
}

bool supported(Kernel k) { return selection().supported[static_cast<std::size_t>(k)]; }

Kernel selected() { return selection().selected; }

void select_for_testing(Kernel k) {
  UROCE_CHECK(supported(k));
  selection().selected = k;
}

namespace detail {

namespace {

// The CRC of each byte value, reflected: one lookup per byte instead of eight shifts (a 2-byte
// payload, perftest's default, took about 140 instructions a bit at a time).
constexpr std::array<std::uint32_t, 256> kByteTable = [] {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t r = i;
    for (int b = 0; b < 8; ++b) r = (r >> 1) ^ ((r & 1u) != 0 ? kPolyReflected : 0u);
    t[i] = r;
  }
  return t;
}();

}  // namespace

std::uint32_t crc32_bytewise(std::uint32_t crc, const std::byte* p, std::size_t len,
                             const std::byte* or_mask) {
  std::uint32_t r = ~crc;
  for (std::size_t i = 0; i < len; ++i) {
    const std::byte m = or_mask != nullptr && i < 64 ? or_mask[i] : std::byte{0};
    r = (r >> 8) ^ kByteTable[(r ^ static_cast<std::uint32_t>(p[i] | m)) & 0xffu];
  }
  return ~r;
}

std::uint32_t vpclmul512::crc32(std::uint32_t crc, const std::byte* data, std::size_t len,
                                const std::byte* or_mask) {
  // Fewer than 4 bytes cannot hold the starting register.
  if (len < 4) return crc32_bytewise(crc, data, len, or_mask);
  return crc32_impl(crc, data, len, or_mask);
}

std::uint32_t vpclmul512::copy_crc32(std::uint32_t crc, std::byte* dst, const std::byte* src,
                                     std::size_t len) {
  if (len < 4) {
    if (len > 0) std::memcpy(dst, src, len);
    return crc32_bytewise(crc, src, len, nullptr);
  }
  return copy_crc32_impl(crc, dst, src, len);
}

}  // namespace detail

namespace {

// Each kernel's entry points, indexed by Kernel (kNone: none).
struct EntryPoints {
  std::uint32_t (*crc32)(std::uint32_t, const std::byte*, std::size_t, const std::byte*);
  std::uint32_t (*copy_crc32)(std::uint32_t, std::byte*, const std::byte*, std::size_t);
};
constexpr EntryPoints kEntryPoints[] = {
    {nullptr, nullptr},
    {detail::pclmul128::crc32, detail::pclmul128::copy_crc32},
    {detail::vpclmul256::crc32, detail::vpclmul256::copy_crc32},
    {detail::vpclmul512::crc32, detail::vpclmul512::copy_crc32},
};
static_assert(std::size(kEntryPoints) == std::size(kKernels));

const EntryPoints& entry_points() {
  const EntryPoints& e = kEntryPoints[static_cast<std::size_t>(selected())];
  UROCE_CHECK(e.crc32 != nullptr && "a crc32_fold function called without a kernel");
  return e;
}

}  // namespace

std::uint32_t crc32(std::uint32_t crc, const std::byte* data, std::size_t len,
                    const std::byte* or_mask) {
  return entry_points().crc32(crc, data, len, or_mask);
}

std::uint32_t copy_crc32(std::uint32_t crc, std::byte* dst, const std::byte* src, std::size_t len) {
  return entry_points().copy_crc32(crc, dst, src, len);
}

}  // namespace uroce::wire::crc32_fold

// What the CRC-32 folding kernels of crc32_fold.h share, internal to src/wire: the constants, the
// last reduction from 128 bits to 32, the bytewise CRC for the shortest inputs, and each kernel's
// entry points (crc32_fold.cc: 512-bit; crc32_fold_vpclmul256.cc and crc32_fold_pclmul128.cc:
// the lane kernel of crc32_fold_lanes.inc on 256- and 128-bit registers). crc32_fold.cc chooses
// among them.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "wire/crc32_fold.h"

// The instructions every folding kernel needs. A function with this target may be inlined into
// one with a larger target (each kernel's), which is how the kernels share reduce128().
#define UROCE_PCLMUL_TARGET __attribute__((target("pclmul,sse4.1")))

namespace uroce::wire::crc32_fold::detail {

// A 128-bit constant pair that folds a 16-byte lane forward by `bits` (in the low qword, the
// factor for the lane's first 8 bytes); see "The arithmetic" in crc32_fold.cc.
struct Pair {
  std::uint64_t lo;
  std::uint64_t hi;
};
constexpr Pair fold_by_bits(std::uint32_t bits) {
  return {fold_constant(bits + 32), fold_constant(bits - 32)};
}

inline constexpr std::uint64_t kX96 = fold_constant(96);
inline constexpr std::uint64_t kX64 = fold_constant(64);
inline constexpr std::uint64_t kMu = barrett_mu();

// The raw CRC (no inversions) of an input whose last 16 bytes, with everything before them
// already folded in, are x: two folds to 64 bits, then Barrett reduction with mu = floor(x^64 / P),
// as in zlib's crc32_simd.c.
[[gnu::always_inline]] UROCE_PCLMUL_TARGET inline std::uint32_t reduce128(__m128i x) {
  // 128 -> 96 bits: the first 8 bytes times x^96, added to the last 8.
  const __m128i mask32 = _mm_setr_epi32(-1, 0, -1, 0);
  x = _mm_xor_si128(_mm_clmulepi64_si128(x, _mm_cvtsi64_si128(static_cast<long long>(kX96)), 0x00),
                    _mm_srli_si128(x, 8));
  // 96 -> 64 bits: the first 4 bytes times x^64, added to the rest.
  x = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x, mask32),
                                         _mm_cvtsi64_si128(static_cast<long long>(kX64)), 0x00),
                    _mm_srli_si128(x, 4));
  // Barrett reduction to 32 bits.
  const __m128i poly_mu =
      _mm_set_epi64x(static_cast<long long>(kMu), static_cast<long long>(kPolyReflected33));
  __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x, mask32), poly_mu, 0x10);
  t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), poly_mu, 0x00);
  return static_cast<std::uint32_t>(_mm_extract_epi32(_mm_xor_si128(x, t), 1));
}

// crc32() a byte at a time (a table), each of the first 64 bytes ORed with or_mask[i] (nullptr:
// none): for inputs too short for a kernel.
std::uint32_t crc32_bytewise(std::uint32_t crc, const std::byte* p, std::size_t len,
                             const std::byte* or_mask);

// Each kernel's crc32() and copy_crc32() as crc32_fold.h states them, for any length, in a
// namespace named after the kernel. Each requires supported() of its kernel.
#define UROCE_CRC32_FOLD_ENTRY_POINTS(kernel)                                       \
  namespace kernel {                                                                \
  std::uint32_t crc32(std::uint32_t crc, const std::byte* data, std::size_t len,    \
                      const std::byte* or_mask);                                    \
  std::uint32_t copy_crc32(std::uint32_t crc, std::byte* dst, const std::byte* src, \
                           std::size_t len);                                        \
  }
UROCE_CRC32_FOLD_ENTRY_POINTS(vpclmul512)
UROCE_CRC32_FOLD_ENTRY_POINTS(vpclmul256)
UROCE_CRC32_FOLD_ENTRY_POINTS(pclmul128)
#undef UROCE_CRC32_FOLD_ENTRY_POINTS

}  // namespace uroce::wire::crc32_fold::detail

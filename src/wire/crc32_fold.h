// CRC-32 (zlib's: reflected polynomial 0xEDB88320) by carry-less multiplication folding, in three
// kernels chosen at run time: 512-bit registers (AVX-512 + VPCLMULQDQ), 256-bit ones (AVX2 +
// VPCLMULQDQ) and 128-bit ones (PCLMULQDQ only). Internal to src/wire: icrc.h's crc32(),
// copy_and_crc32() and the ICRC use the widest the CPU has, and ISA-L's crc32_gzip_refl where it
// has none.
//
// The 512-bit kernel (crc32_fold.cc). Why not only ISA-L: its AVX-512 kernel
// (crc32_gzip_refl_by16_10) pays a serial 16-byte fold loop for every length that is not a
// multiple of 256 bytes, a second kernel call for a separately masked ICRC header, and it cannot
// copy while it reads. This kernel
//   - treats the first `len % 64` bytes as one zero-padded 64-byte block, so that every other
//     load is a whole 64-byte block and no length has a slow tail;
//   - can OR a 64-byte mask into the first 64 bytes of the input as it reads them, which is
//     exactly the ICRC's masking of the variant header fields (icrc.cc);
//   - can store every block it loads to a second buffer: a fused copy and CRC.
// Its speed is bounded by VPCLMULQDQ throughput (docs/PERFORMANCE.md has the numbers). The 256-
// and 128-bit kernels (crc32_fold_lanes.inc) do the same without masked loads: the first
// len % 16 bytes become a zero-padded lane by a byte shuffle, and they mask and copy alike.
//
// The folding constants are computed at compile time from the polynomial by the constexpr
// functions below (see "The arithmetic" in crc32_fold.cc); tests/wire/crc32_fold_test.cc checks
// them against the published values and the kernel against bitwise and ISA-L CRC-32.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::wire::crc32_fold {

inline constexpr std::uint32_t kPolyReflected = 0xedb88320u;

// x^n mod P(x) as a reflected 32-bit value: bit k holds the coefficient of x^(31-k).
constexpr std::uint32_t xpow_mod(std::uint32_t n) {
  std::uint32_t r = 0x80000000u;  // x^0
  for (std::uint32_t i = 0; i < n; ++i) r = (r >> 1) ^ ((r & 1u) != 0 ? kPolyReflected : 0u);
  return r;
}

// The 64-bit PCLMULQDQ operand that multiplies by x^n mod P: the reflected value shifted up one
// bit, which absorbs the one-bit offset of a carry-less product of two reflected operands.
constexpr std::uint64_t fold_constant(std::uint32_t n) {
  return static_cast<std::uint64_t>(xpow_mod(n)) << 1;
}

// The reflected 33-bit polynomial, P(x) with its x^32 term.
inline constexpr std::uint64_t kPolyReflected33 =
    (static_cast<std::uint64_t>(kPolyReflected) << 1) | 1u;

// Barrett's constant: floor(x^64 / P(x)), a polynomial of degree 32, reflected over 33 bits.
constexpr std::uint64_t barrett_mu() {
  constexpr std::uint64_t kPoly = 0x104c11db7u;  // P(x) in normal bit order, x^32 included
  // Long division of x^64 by P(x), the 65-bit dividend kept as `hi` (the x^64 bit) and `lo`.
  std::uint64_t hi = 1;
  std::uint64_t lo = 0;
  std::uint64_t quotient = 0;
  for (int d = 64; d >= 32; --d) {
    const bool bit = d == 64 ? (hi & 1u) != 0 : ((lo >> d) & 1u) != 0;
    if (!bit) continue;
    quotient |= std::uint64_t{1} << (d - 32);
    if (d == 64) {
      hi ^= 1u;  // x^64 term of P(x) << 32
      lo ^= kPoly << 32;
    } else {
      lo ^= kPoly << (d - 32);
    }
  }
  std::uint64_t reflected = 0;
  for (int i = 0; i <= 32; ++i) {
    if (((quotient >> i) & 1u) != 0) reflected |= std::uint64_t{1} << (32 - i);
  }
  return reflected;
}

// The kernels, each for the CPUs that have its instructions (checked once, with cpuid through
// __builtin_cpu_supports; each kernel is compiled with per-function target attributes, so the
// binary runs on any x86-64 CPU).
enum class Kernel : std::uint8_t {
  kNone,        // no kernel: icrc.h's functions call ISA-L's crc32_gzip_refl
  kPclmul128,   // 128-bit PCLMULQDQ with SSE4.1 (crc32_fold_pclmul128.cc)
  kVpclmul256,  // 256-bit VPCLMULQDQ with AVX2, no AVX-512 (crc32_fold_vpclmul256.cc)
  kVpclmul512,  // 512-bit VPCLMULQDQ with AVX-512 F/BW/VL/VBMI (crc32_fold.cc)
};
inline constexpr Kernel kKernels[] = {Kernel::kNone, Kernel::kPclmul128, Kernel::kVpclmul256,
                                      Kernel::kVpclmul512};

// "none", "pclmul128", "vpclmul256" or "vpclmul512".
const char* kernel_name(Kernel k);

// True when this CPU and its OS can run k (kNone: always).
bool supported(Kernel k);

// The kernel that crc32() and copy_crc32() below run, and through them icrc.h's functions: the
// widest supported one, unless select_for_testing() chose another.
Kernel selected();

// Makes k the selected kernel (kNone: the callers' ISA-L fallback), so that every kernel and the
// fallback can be tested and measured on one machine. Requires supported(k). Not thread-safe: for
// tests and benchmarks only.
void select_for_testing(Kernel k);

// The selected kernel is not kNone.
inline bool available() { return selected() != Kernel::kNone; }

// crc32(crc, data[0..len)) as zlib computes it, where each of the first min(len, 64) bytes is
// first ORed with or_mask[i] (or_mask == nullptr: no masking), by the selected kernel. Requires
// available().
std::uint32_t crc32(std::uint32_t crc, const std::byte* data, std::size_t len,
                    const std::byte* or_mask);

// Copies src[0..len) to dst (not overlapping) and returns crc32(crc, src[0..len)), by the
// selected kernel. Requires available().
std::uint32_t copy_crc32(std::uint32_t crc, std::byte* dst, const std::byte* src, std::size_t len);

}  // namespace uroce::wire::crc32_fold

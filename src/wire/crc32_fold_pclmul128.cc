// The CRC-32 folding kernel on 128-bit registers with PCLMULQDQ and SSE4.1 only (no VEX
// encoding): for x86-64 CPUs without VPCLMULQDQ. crc32_fold_lanes.inc holds the algorithm.
//
// Speed. One 16-byte fold is two PCLMULQDQ (64x64-bit products), so at best 8 input bytes per
// PCLMULQDQ issue. Eight accumulators (128 bytes per iteration) keep the loop bound by that
// issue rate rather than by the fold's latency (a product of 3-7 cycles and an XOR, against a
// PCLMULQDQ every 1-2 cycles on current cores): a fold of each accumulator waits for its
// previous one, 8 folds (16 products) later.
#include <immintrin.h>

#include <array>
#include <cstring>

#include "wire/crc32_fold_internal.h"

#define UROCE_LANES_TARGET UROCE_PCLMUL_TARGET

namespace uroce::wire::crc32_fold::detail {
namespace pclmul128 {

// The register width's operations that crc32_fold_lanes.inc is written over. The same shape as
// crc32_fold_vpclmul256.cc's Vec, line for line, but other intrinsics under another target
// attribute: the algorithm is shared already, the wrappers cannot be.
struct Vec {
  using V = __m128i;
  static constexpr std::size_t kLanes = 1;
  static constexpr std::size_t kAccumulators = 8;

  UROCE_LANES_TARGET static V load(const std::byte* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
  UROCE_LANES_TARGET static void store(std::byte* p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
  }
  UROCE_LANES_TARGET static V load_aligned(const std::uint64_t* q) {
    return _mm_load_si128(reinterpret_cast<const __m128i*>(q));
  }
  UROCE_LANES_TARGET static V broadcast(Pair k) {
    return _mm_set_epi64x(static_cast<long long>(k.hi), static_cast<long long>(k.lo));
  }
  UROCE_LANES_TARGET static V clmul_lo(V v, V k) { return _mm_clmulepi64_si128(v, k, 0x00); }
  UROCE_LANES_TARGET static V clmul_hi(V v, V k) { return _mm_clmulepi64_si128(v, k, 0x11); }
  UROCE_LANES_TARGET static V xor3(V a, V b, V c) { return _mm_xor_si128(_mm_xor_si128(a, b), c); }
  UROCE_LANES_TARGET static V bit_or(V a, V b) { return _mm_or_si128(a, b); }
  UROCE_LANES_TARGET static V bit_xor(V a, V b) { return _mm_xor_si128(a, b); }
  // The register of lanes[0..kLanes) (lane 0 lowest) and back to one lane.
  UROCE_LANES_TARGET static V join(const __m128i* lanes) { return lanes[0]; }
  UROCE_LANES_TARGET static __m128i sum_lanes(V v) { return v; }
  // v with all lanes but the last zeroed.
  UROCE_LANES_TARGET static V last_lane(V v) { return v; }
};

#include "wire/crc32_fold_lanes.inc"

}  // namespace pclmul128
}  // namespace uroce::wire::crc32_fold::detail

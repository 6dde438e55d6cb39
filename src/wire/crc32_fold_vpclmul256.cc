// The CRC-32 folding kernel on 256-bit registers with AVX2 and VPCLMULQDQ, and no AVX-512
// instruction (the target below does not enable any): for CPUs such as AMD Zen 3 that have
// VPCLMULQDQ without AVX-512. crc32_fold_lanes.inc holds the algorithm.
//
// Speed. A 256-bit VPCLMULQDQ does two 64x64-bit products, so at best 16 input bytes per issue.
// Four accumulators of 32 bytes (128 bytes per iteration) cover the fold's latency (a product and
// an XOR, 4-8 cycles) at one VPCLMULQDQ per cycle: each accumulator's fold waits on its previous
// one, 8 products later.
#include <immintrin.h>

#include <array>
#include <cstring>

#include "wire/crc32_fold_internal.h"

#define UROCE_LANES_TARGET __attribute__((target("avx2,vpclmulqdq,pclmul,sse4.1")))

namespace uroce::wire::crc32_fold::detail {
namespace vpclmul256 {

// The register width's operations that crc32_fold_lanes.inc is written over. The same shape as
// crc32_fold_pclmul128.cc's Vec, line for line, but other intrinsics under another target
// attribute: the algorithm is shared already, the wrappers cannot be.
struct Vec {
  using V = __m256i;
  static constexpr std::size_t kLanes = 2;
  static constexpr std::size_t kAccumulators = 4;

  UROCE_LANES_TARGET static V load(const std::byte* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  UROCE_LANES_TARGET static void store(std::byte* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
  UROCE_LANES_TARGET static V load_aligned(const std::uint64_t* q) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
  }
  UROCE_LANES_TARGET static V broadcast(Pair k) {
    return _mm256_broadcastsi128_si256(
        _mm_set_epi64x(static_cast<long long>(k.hi), static_cast<long long>(k.lo)));
  }
  UROCE_LANES_TARGET static V clmul_lo(V v, V k) { return _mm256_clmulepi64_epi128(v, k, 0x00); }
  UROCE_LANES_TARGET static V clmul_hi(V v, V k) { return _mm256_clmulepi64_epi128(v, k, 0x11); }
  UROCE_LANES_TARGET static V xor3(V a, V b, V c) {
    return _mm256_xor_si256(_mm256_xor_si256(a, b), c);
  }
  UROCE_LANES_TARGET static V bit_or(V a, V b) { return _mm256_or_si256(a, b); }
  UROCE_LANES_TARGET static V bit_xor(V a, V b) { return _mm256_xor_si256(a, b); }
  // The register of lanes[0..kLanes) (lane 0 lowest) and back to one lane.
  UROCE_LANES_TARGET static V join(const __m128i* lanes) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lanes[0]), lanes[1], 1);
  }
  UROCE_LANES_TARGET static __m128i sum_lanes(V v) {
    return _mm_xor_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  }
  // v with all lanes but the last zeroed.
  UROCE_LANES_TARGET static V last_lane(V v) {
    return _mm256_blend_epi32(_mm256_setzero_si256(), v, 0xf0);
  }
};

#include "wire/crc32_fold_lanes.inc"

}  // namespace vpclmul256
}  // namespace uroce::wire::crc32_fold::detail

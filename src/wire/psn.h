// 24-bit packet sequence numbers (IBTA vol. 1, 9.7.1): arithmetic modulo 2^24 with wrap-around.
// Comparisons are meaningful only for PSNs less than 2^23 apart, which the transport guarantees by
// bounding its window (rxe: at most 128 unacknowledged PSNs).
#pragma once

#include <cstdint>

namespace uroce::wire {

inline constexpr std::uint32_t kPsnMask = 0xffffffu;
inline constexpr std::uint32_t kPsnModulus = 0x1000000u;

constexpr std::uint32_t psn_add(std::uint32_t psn, std::int64_t delta) {
  return static_cast<std::uint32_t>((static_cast<std::int64_t>(psn) + delta) &
                                    static_cast<std::int64_t>(kPsnMask));
}

// Signed distance a - b in [-2^23, 2^23).
constexpr std::int32_t psn_diff(std::uint32_t a, std::uint32_t b) {
  const std::uint32_t d = (a - b) & kPsnMask;
  return static_cast<std::int32_t>(d >= 0x800000u ? static_cast<std::int64_t>(d) - kPsnModulus
                                                  : static_cast<std::int64_t>(d));
}

constexpr bool psn_lt(std::uint32_t a, std::uint32_t b) { return psn_diff(a, b) < 0; }
constexpr bool psn_le(std::uint32_t a, std::uint32_t b) { return psn_diff(a, b) <= 0; }
constexpr bool psn_gt(std::uint32_t a, std::uint32_t b) { return psn_diff(a, b) > 0; }
constexpr bool psn_ge(std::uint32_t a, std::uint32_t b) { return psn_diff(a, b) >= 0; }

static_assert(psn_add(0xffffff, 1) == 0);
static_assert(psn_add(0, -1) == 0xffffff);
static_assert(psn_diff(0, 0xffffff) == 1);
static_assert(psn_diff(0xffffff, 0) == -1);
static_assert(psn_lt(0xfffff0, 5));

}  // namespace uroce::wire

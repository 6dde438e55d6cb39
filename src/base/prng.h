// A small, fast, seeded pseudo-random generator (xoshiro256**, seeded through splitmix64).
// Every random choice in uroce's core and simulator comes from one of these, seeded explicitly,
// so that one seed reproduces a run.
#pragma once

#include <cstdint>

#include "base/assert.h"

namespace uroce {

// splitmix64's finalizer: a bijection that mixes every input bit into every output bit.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Mixes a seed with a tag into an independent seed (mix64 over both): how one seed gives the
// seeds of independent streams (a simulated link's faults, a fault rule's, a harness's own).
constexpr std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t tag) {
  return mix64(mix64(seed) ^ mix64(tag + 0x9e3779b97f4a7c15ull));
}

class Prng {
 public:
  explicit Prng(std::uint64_t seed) {
    for (auto& s : s_) s = splitmix64(seed);
  }

  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, bound), bound > 0 (Lemire's multiply-shift with rejection).
  std::uint64_t below(std::uint64_t bound) {
    UROCE_ASSERT(bound > 0);
    while (true) {
      const unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
      const auto low = static_cast<std::uint64_t>(m);
      if (low >= bound || low >= (0 - bound) % bound) return static_cast<std::uint64_t>(m >> 64);
    }
  }

  // Uniform in [lo, hi].
  std::uint64_t range(std::uint64_t lo, std::uint64_t hi) {
    UROCE_ASSERT(lo <= hi);
    return lo + below(hi - lo + 1);
  }

  // True with probability numerator / denominator (integer ratios, as fault settings are).
  bool chance(std::uint64_t numerator, std::uint64_t denominator) {
    UROCE_ASSERT(denominator > 0);
    return below(denominator) < numerator;
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix64(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::uint64_t s_[4];
};

}  // namespace uroce

#include "base/prng.h"

#include <gtest/gtest.h>

#include <array>

namespace uroce {
namespace {

TEST(Prng, SameSeedSameSequenceOtherSeedOtherSequence) {
  Prng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const auto x = a.next();
    EXPECT_EQ(x, b.next());
    differs |= x != c.next();
  }
  EXPECT_TRUE(differs);
}

TEST(Prng, BelowStaysInRangeAndCoversIt) {
  Prng p(7);
  std::array<int, 10> hist{};
  for (int i = 0; i < 10000; ++i) {
    const auto v = p.below(10);
    ASSERT_LT(v, 10u);
    ++hist[v];
  }
  for (int h : hist) EXPECT_GT(h, 800);  // ~1000 each; a broken generator misses buckets
  for (int i = 0; i < 1000; ++i) {
    const auto v = p.range(5, 7);
    EXPECT_GE(v, 5u);
    EXPECT_LE(v, 7u);
  }
}

TEST(Prng, ChanceMatchesItsRatio) {
  Prng p(11);
  int hits = 0;
  for (int i = 0; i < 100000; ++i) hits += p.chance(1, 20);
  EXPECT_GT(hits, 4500);
  EXPECT_LT(hits, 5500);
  for (int i = 0; i < 100; ++i) {
    EXPECT_FALSE(p.chance(0, 5));
    EXPECT_TRUE(p.chance(5, 5));
  }
}

}  // namespace
}  // namespace uroce

#include "wire/psn.h"

#include <gtest/gtest.h>

namespace uroce::wire {
namespace {

TEST(Psn, AddWrapsAt2To24) {
  EXPECT_EQ(psn_add(0xfffffe, 3), 1u);
  EXPECT_EQ(psn_add(1, -3), 0xfffffeu);
  EXPECT_EQ(psn_add(5, 0x1000000), 5u);
  EXPECT_EQ(psn_add(0x123456, 0), 0x123456u);
}

TEST(Psn, DiffIsSignedAcrossTheWrap) {
  EXPECT_EQ(psn_diff(2, 0xfffffe), 4);
  EXPECT_EQ(psn_diff(0xfffffe, 2), -4);
  EXPECT_EQ(psn_diff(0x7fffff, 0), 0x7fffff);
  EXPECT_EQ(psn_diff(0x800000, 0), -0x800000);
  for (std::uint32_t base : {0u, 100u, 0x7fffffu, 0xffff00u, 0xffffffu}) {
    for (std::int32_t d : {-1000, -1, 0, 1, 127, 128, 1000}) {
      EXPECT_EQ(psn_diff(psn_add(base, d), base), d) << base << " " << d;
    }
  }
}

TEST(Psn, Ordering) {
  EXPECT_TRUE(psn_lt(0xffffff, 0));
  EXPECT_TRUE(psn_gt(0, 0xffffff));
  EXPECT_TRUE(psn_le(7, 7));
  EXPECT_TRUE(psn_ge(7, 7));
  EXPECT_FALSE(psn_lt(7, 7));
  EXPECT_TRUE(psn_lt(0xfffff0, 0x10));
  EXPECT_FALSE(psn_lt(0x10, 0xfffff0));
}

}  // namespace
}  // namespace uroce::wire

#include "base/ring.h"

#include <gtest/gtest.h>

namespace uroce {
namespace {

TEST(BoundedRing, FifoAcrossTheWrap) {
  BoundedRing<int> r(3);
  for (int round = 0; round < 5; ++round) {
    r.push_back(round * 10);
    r.push_back(round * 10 + 1);
    EXPECT_EQ(r.size(), 2u);
    EXPECT_EQ(r.front(), round * 10);
    EXPECT_EQ(r.back(), round * 10 + 1);
    EXPECT_EQ(r[1], round * 10 + 1);
    r.pop_front();
    r.pop_front();
    EXPECT_TRUE(r.empty());
  }
  r.push_back(1);
  r.push_back(2);
  r.push_back(3);
  EXPECT_TRUE(r.full());
  r.clear();
  EXPECT_TRUE(r.empty());
}

TEST(BoundedRingDeathTest, OverflowAndUnderflowAreBugs) {
  BoundedRing<int> r(1);
  r.push_back(1);
  EXPECT_DEATH(r.push_back(2), "assertion failed");
  r.pop_front();
  EXPECT_DEATH(r.pop_front(), "assertion failed");
}

}  // namespace
}  // namespace uroce

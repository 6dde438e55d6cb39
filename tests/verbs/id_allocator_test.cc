#include "verbs/id_allocator.h"

#include <gtest/gtest.h>

namespace uroce::verbs {
namespace {

TEST(CyclicIdAllocator, HandsOutNumbersInOrderFromTheFirst) {
  CyclicIdAllocator a(0x11, 0x20, 16, 0x11);
  EXPECT_EQ(a.allocate(), 0x11u);
  EXPECT_EQ(a.allocate(), 0x12u);
  EXPECT_EQ(a.allocate(), 0x13u);
  EXPECT_EQ(a.live(), 3u);
}

TEST(CyclicIdAllocator, AReleasedNumberIsReusedOnlyAfterTheOthers) {
  CyclicIdAllocator a(1, 4, 4, 1);
  EXPECT_EQ(a.allocate(), 1u);
  EXPECT_EQ(a.allocate(), 2u);
  a.release(1);
  EXPECT_FALSE(a.in_use(1));
  EXPECT_EQ(a.allocate(), 3u);
  EXPECT_EQ(a.allocate(), 4u);
  EXPECT_EQ(a.allocate(), 1u);  // wrapped around; 2 is still in use
  EXPECT_EQ(a.allocate(), std::nullopt);
  a.release(3);
  EXPECT_EQ(a.allocate(), 3u);
}

TEST(CyclicIdAllocator, MaxLiveBoundsTheNumbersInUse) {
  CyclicIdAllocator a(10, 100, 2, 50);
  EXPECT_EQ(a.allocate(), 50u);
  EXPECT_EQ(a.allocate(), 51u);
  EXPECT_EQ(a.allocate(), std::nullopt);
  a.release(50);
  EXPECT_EQ(a.allocate(), 52u);
}

TEST(CyclicIdAllocator, StartsAnywhereAndWraps) {
  CyclicIdAllocator a(1, 3, 3, 3);
  EXPECT_EQ(a.allocate(), 3u);
  EXPECT_EQ(a.allocate(), 1u);
  EXPECT_EQ(a.allocate(), 2u);
}

}  // namespace
}  // namespace uroce::verbs

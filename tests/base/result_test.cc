#include "base/result.h"

#include <gtest/gtest.h>

#include <string>

namespace uroce {
namespace {

Result<int, std::string> half(int v) {
  if (v % 2 != 0) return Err{std::string("odd")};
  return v / 2;
}

TEST(Result, ValueAndError) {
  auto ok = half(8);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 4);
  auto bad = half(3);
  ASSERT_FALSE(bad.ok());
  EXPECT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(bad.error(), "odd");
}

TEST(Result, SameTypeForValueAndError) {
  Result<int, int> v(7);
  Result<int, int> e(Err{7});
  EXPECT_TRUE(v.ok());
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.error(), 7);
}

TEST(ResultDeathTest, WrongSideAborts) {
  auto bad = half(3);
  EXPECT_DEATH((void)bad.value(), "assertion failed");
  auto ok = half(2);
  EXPECT_DEATH((void)ok.error(), "assertion failed");
}

}  // namespace
}  // namespace uroce

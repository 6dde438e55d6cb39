#include "base/time.h"

#include <gtest/gtest.h>

namespace uroce {
namespace {

TEST(Time, DurationUnits) {
  EXPECT_EQ(Duration::us(3).count_ns(), 3000);
  EXPECT_EQ(Duration::ms(2).count_ns(), 2'000'000);
  EXPECT_EQ(Duration::s(1).count_ns(), 1'000'000'000);
  EXPECT_LT(Duration::us(999), Duration::ms(1));
  EXPECT_EQ((Duration::us(4) * 3 / 2).count_ns(), 6000);
}

TEST(Time, InstantArithmeticSaturatesAtNever) {
  const Instant t = Instant::from_ns(100);
  EXPECT_EQ((t + Duration::ns(50)).ns(), 150);
  EXPECT_EQ((t + Duration::ns(50)) - t, Duration::ns(50));
  EXPECT_TRUE((t + Duration::infinite()).is_never());
  EXPECT_TRUE((Instant::never() + Duration::ns(1)).is_never());
  EXPECT_EQ(earliest(t, Instant::never()), t);
  EXPECT_LT(t, Instant::never());
}

}  // namespace
}  // namespace uroce

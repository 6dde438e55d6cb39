#include "base/bytes.h"

#include <gtest/gtest.h>

#include <array>

namespace uroce {
namespace {

TEST(Bytes, LoadsAreBigEndian) {
  const std::array<std::byte, 8> b = {std::byte{0x01}, std::byte{0x02}, std::byte{0x03},
                                      std::byte{0x04}, std::byte{0x05}, std::byte{0x06},
                                      std::byte{0x07}, std::byte{0x08}};
  EXPECT_EQ(load_u8(b, 7), 0x08);
  EXPECT_EQ(load_be16(b, 1), 0x0203);
  EXPECT_EQ(load_be24(b, 1), 0x020304u);
  EXPECT_EQ(load_be32(b, 0), 0x01020304u);
  EXPECT_EQ(load_be64(b, 0), 0x0102030405060708ull);
  EXPECT_EQ(load_le32(b, 0), 0x04030201u);
}

TEST(Bytes, StoresRoundTrip) {
  std::array<std::byte, 8> b{};
  store_be64(b, 0, 0x1122334455667788ull);
  EXPECT_EQ(static_cast<int>(b[0]), 0x11);
  EXPECT_EQ(static_cast<int>(b[7]), 0x88);
  store_be24(b, 1, 0xabcdef);
  EXPECT_EQ(load_be24(b, 1), 0xabcdefu);
  EXPECT_EQ(static_cast<int>(b[0]), 0x11);  // neighbours untouched
  EXPECT_EQ(static_cast<int>(b[4]), 0x55);
  store_le32(b, 4, 0xdeadbeef);
  EXPECT_EQ(static_cast<int>(b[4]), 0xef);
  EXPECT_EQ(load_le32(b, 4), 0xdeadbeefu);
  store_be16(b, 6, 0x0102);
  EXPECT_EQ(load_be16(b, 6), 0x0102);
}

TEST(Bytes, BitFieldsKeepOtherBits) {
  std::array<std::byte, 1> b = {std::byte{0xa5}};  // 1010 0101
  EXPECT_EQ(load_bits8(b, 0, 4, 2), 0x2);          // bits 5..4 = 10
  store_bits8(b, 0, 4, 2, 0x1);
  EXPECT_EQ(static_cast<int>(b[0]), 0x95);  // 1001 0101
  store_bits8(b, 0, 0, 4, 0xff);            // value wider than the field is masked
  EXPECT_EQ(static_cast<int>(b[0]), 0x9f);
}

#ifndef NDEBUG
TEST(BytesDeathTest, OutOfRangeAccessAborts) {
  const std::array<std::byte, 3> b{};
  EXPECT_DEATH((void)load_be32(b, 0), "assertion failed");
  EXPECT_DEATH((void)load_u8(b, 3), "assertion failed");
}
#endif

}  // namespace
}  // namespace uroce

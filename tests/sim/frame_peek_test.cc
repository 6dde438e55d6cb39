#include "sim/frame_peek.h"

#include <gtest/gtest.h>

#include "sim_frames.h"
#include "wire/packet.h"

namespace uroce::sim {
namespace {

using test::Bytes;
using test::roce_frame;
using test::v4;
using test::v6;

TEST(FramePeek, FindsTheIpHeaderAndDestination) {
  const Bytes f4 = roce_frame(v4(1), v4(2), 8, 1);
  auto p = peek_ip(f4);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->ip_offset, 14u);
  EXPECT_FALSE(p->v6);
  EXPECT_EQ(p->dst, v4(2));

  const Bytes f6 = roce_frame(v6(1), v6(2), 8, 1);
  p = peek_ip(f6);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->ip_offset, 14u);
  EXPECT_TRUE(p->v6);
  EXPECT_EQ(p->dst, v6(2));

  // Two tags: 802.1ad then 802.1Q.
  Bytes tagged = f6;
  const Bytes tags = {std::byte{0x88}, std::byte{0xa8}, std::byte{0}, std::byte{1},
                      std::byte{0x81}, std::byte{0x00}, std::byte{0}, std::byte{2}};
  tagged.insert(tagged.begin() + 12, tags.begin(), tags.end());
  p = peek_ip(tagged);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->ip_offset, 22u);
  EXPECT_EQ(p->dst, v6(2));
}

TEST(FramePeek, RejectsWhatARouterCouldNotRoute) {
  const Bytes f4 = roce_frame(v4(1), v4(2), 8, 1);
  EXPECT_FALSE(peek_ip(ConstBytes(f4).first(13)).has_value());
  EXPECT_FALSE(peek_ip(ConstBytes(f4).first(14 + 19)).has_value());  // IPv4 header cut short
  EXPECT_TRUE(peek_ip(ConstBytes(f4).first(14 + 20)).has_value());
  Bytes wrong = f4;
  store_be16(wrong, 12, wire::kEtherTypeIpv6);  // IPv4 header under the IPv6 EtherType
  EXPECT_FALSE(peek_ip(wrong).has_value());
  Bytes three_tags = f4;
  const Bytes tag = {std::byte{0x81}, std::byte{0x00}, std::byte{0}, std::byte{1}};
  for (int i = 0; i < 3; ++i) three_tags.insert(three_tags.begin() + 12, tag.begin(), tag.end());
  EXPECT_FALSE(peek_ip(three_tags).has_value());
}

TEST(FramePeek, MarkCeKeepsTheIpv4ChecksumRightForEveryTos) {
  for (unsigned tos = 0; tos < 256; ++tos) {
    Bytes f = roce_frame(v4(1), v4(200), 12, tos, static_cast<std::uint8_t>(tos));
    const Bytes before = f;
    const auto p = peek_ip(f);
    ASSERT_TRUE(p.has_value());
    const std::uint8_t ecn = tos & 3u;
    EXPECT_EQ(ecn_bits(f, *p), ecn);
    EXPECT_EQ(mark_ce(f, *p), ecn == 0b01 || ecn == 0b10);
    EXPECT_EQ(load_u8(f, 15), ecn == 0 ? tos : (tos | 3u));
    const ConstBytes ip = ConstBytes(f).subspan(14, 20);
    EXPECT_EQ(load_be16(ip, 10), wire::ipv4_header_checksum(ip)) << "tos " << tos;
    if (ecn == 0 || ecn == 3) {
      EXPECT_EQ(f, before);
    }
  }
}

TEST(FramePeek, MarkCeKeepsAWrongChecksumWrongByTheSameAmount) {
  Bytes f = roce_frame(v4(1), v4(2), 12, 1, 0b10);
  store_be16(f, 24, static_cast<std::uint16_t>(load_be16(f, 24) + 1));  // off by one
  const auto p = peek_ip(f);
  ASSERT_TRUE(mark_ce(f, *p));
  const ConstBytes ip = ConstBytes(f).subspan(14, 20);
  EXPECT_EQ(load_be16(ip, 10), static_cast<std::uint16_t>(wire::ipv4_header_checksum(ip) + 1));
}

}  // namespace
}  // namespace uroce::sim

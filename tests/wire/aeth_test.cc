#include "wire/aeth.h"

#include <gtest/gtest.h>

namespace uroce::wire {
namespace {

TEST(Aeth, SyndromeTypes) {
  EXPECT_EQ(aeth_type(0x1f), AethType::kAck);
  EXPECT_EQ(aeth_type(0x00), AethType::kAck);
  EXPECT_EQ(aeth_type(0x2c), AethType::kRnrNak);
  EXPECT_EQ(aeth_value(0x2c), 12);
  EXPECT_EQ(aeth_type(0x60), AethType::kNak);
  EXPECT_EQ(aeth_type(0x40), AethType::kReserved);
  EXPECT_EQ(aeth_type(0x80), AethType::kReserved);
  EXPECT_EQ(make_nak_syndrome(NakCode::kRemoteAccessError), 0x62);
  EXPECT_EQ(make_rnr_nak_syndrome(12), 0x2c);
  EXPECT_EQ(make_ack_syndrome(), 0x1f);
}

TEST(Aeth, RnrTimerTable) {
  EXPECT_EQ(rnr_timer_us(0), 655360u);
  EXPECT_EQ(rnr_timer_us(1), 10u);
  EXPECT_EQ(rnr_timer_us(12), 640u);
  EXPECT_EQ(rnr_timer_us(14), 1280u);
  EXPECT_EQ(rnr_timer_us(31), 491520u);
  for (unsigned c = 2; c < 32; ++c)
    EXPECT_GT(rnr_timer_us(static_cast<std::uint8_t>(c)),
              rnr_timer_us(static_cast<std::uint8_t>(c - 1)));
}

TEST(Aeth, Describe) {
  EXPECT_EQ(describe_syndrome(0x1f), "ACK (no credit count)");
  EXPECT_EQ(describe_syndrome(0x05), "ACK credits=5");
  EXPECT_EQ(describe_syndrome(0x2c), "RNR NAK timer=12 (0.64 ms)");
  EXPECT_EQ(describe_syndrome(0x60), "NAK PSN sequence error");
  EXPECT_EQ(describe_syndrome(0x61), "NAK invalid request");
  EXPECT_EQ(describe_syndrome(0x62), "NAK remote access error");
  EXPECT_EQ(describe_syndrome(0x63), "NAK remote operational error");
  EXPECT_EQ(describe_syndrome(0x45), "reserved syndrome 0x45");
}

}  // namespace
}  // namespace uroce::wire

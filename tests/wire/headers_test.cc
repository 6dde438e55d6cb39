#include "wire/headers.h"

#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "support/golden.h"

namespace uroce::wire {
namespace {

using test::from_hex;

TEST(Bth, EncodesTheSpecLayout) {
  std::array<std::byte, 12> b{};
  Bth h;
  h.opcode = 0x0b;
  h.solicited = true;
  h.mig_req = false;
  h.pad_count = 3;
  h.tver = 0;
  h.pkey = 0xffff;
  h.fecn = false;
  h.becn = true;
  h.dest_qpn = 0x123456;
  h.ack_req = true;
  h.psn = 0xabcdef;
  BthMut(b).encode(h);
  EXPECT_EQ(std::vector<std::byte>(b.begin(), b.end()), from_hex("0b b0 ffff 40 123456 80 abcdef"));
  EXPECT_EQ(BthView(b).decode(), h);
}

TEST(Bth, SettersTouchOnlyTheirField) {
  std::array<std::byte, 12> b;
  b.fill(std::byte{0xff});
  const BthMut m(b);
  m.set_pad_count(0);
  EXPECT_EQ(static_cast<int>(b[1]), 0xcf);
  m.set_solicited(false);
  EXPECT_EQ(static_cast<int>(b[1]), 0x4f);
  m.set_becn(false);
  EXPECT_EQ(static_cast<int>(b[4]), 0xbf);
  m.set_ack_req(false);
  EXPECT_EQ(static_cast<int>(b[8]), 0x7f);
  m.set_dest_qpn(0x01000002);  // wider than 24 bits: masked
  EXPECT_EQ(BthView(b).dest_qpn(), 0x000002u);
  EXPECT_EQ(static_cast<int>(b[4]), 0xbf);
  m.set_psn(0);
  EXPECT_EQ(static_cast<int>(b[8]), 0x7f);
  EXPECT_EQ(BthView(b).psn(), 0u);
  m.set_tver(1);
  EXPECT_EQ(BthView(b).tver(), 1);
  EXPECT_EQ(BthView(b).pad_count(), 0);
}

TEST(Bth, EncodeClearsReservedBits) {
  std::array<std::byte, 12> b;
  b.fill(std::byte{0xff});
  BthMut(b).encode(Bth{});
  EXPECT_EQ(static_cast<int>(b[4]), 0x00);
  EXPECT_EQ(static_cast<int>(b[8]), 0x00);
}

TEST(ExtHeaders, Layouts) {
  std::array<std::byte, 28> b{};
  RethMut(b).encode(Reth{0x0102030405060708ull, 0xaabbccdd, 0x11223344});
  EXPECT_EQ(std::vector<std::byte>(b.begin(), b.begin() + 16),
            from_hex("0102030405060708 aabbccdd 11223344"));
  EXPECT_EQ(RethView(b).decode(), (Reth{0x0102030405060708ull, 0xaabbccdd, 0x11223344}));

  b.fill(std::byte{0xee});
  AethMut(b).encode(Aeth{0x62, 0x123456});
  EXPECT_EQ(std::vector<std::byte>(b.begin(), b.begin() + 4), from_hex("62123456"));

  AtomicEthMut(b).encode(AtomicEth{1, 2, 3, 4});
  EXPECT_EQ(std::vector<std::byte>(b.begin(), b.end()),
            from_hex("0000000000000001 00000002 0000000000000003 0000000000000004"));
  EXPECT_EQ(AtomicEthView(b).decode(), (AtomicEth{1, 2, 3, 4}));

  b.fill(std::byte{0xee});
  DethMut(b).encode(Deth{0x11111111, 0xabcdef});
  EXPECT_EQ(std::vector<std::byte>(b.begin(), b.begin() + 8), from_hex("11111111 00 abcdef"));
  EXPECT_EQ(DethView(b).decode(), (Deth{0x11111111, 0xabcdef}));

  AtomicAckEthMut(b).set_orig(0x8877665544332211ull);
  EXPECT_EQ(AtomicAckEthView(b).orig(), 0x8877665544332211ull);
  ImmDtMut(b).set_value(0xcafef00d);
  EXPECT_EQ(std::vector<std::byte>(b.begin(), b.begin() + 4), from_hex("cafef00d"));
  EXPECT_EQ(IethView(b).value(), 0xcafef00du);

  // FETH (rxe_hdr.h): placement type in bits 3..0, selectivity level in bits 5..4.
  b.fill(std::byte{0xee});
  FethMut(b).encode(Feth{kFlushGlobal | kFlushPersistent, kFlushMr});
  EXPECT_EQ(std::vector<std::byte>(b.begin(), b.begin() + 4), from_hex("00000013"));
  EXPECT_EQ(FethView(b).decode(), (Feth{3, 1}));
  EXPECT_EQ(FethView(from_hex("ffffffe1")).decode(), (Feth{1, 2}));
  EXPECT_EQ(FethView(from_hex("ffffffe1")).reserved(), 0x3ffffffu);

  // XRCETH (IBTA 9.3.5): a reserved byte sent as 0, then the 24-bit XRC SRQ number.
  b.fill(std::byte{0xee});
  XrcEthMut(b).set_srqn(0xfedcba98);
  EXPECT_EQ(std::vector<std::byte>(b.begin(), b.begin() + 4), from_hex("00dcba98"));
  EXPECT_EQ(XrcEthView(from_hex("ff123456")).srqn(), 0x123456u);
  EXPECT_EQ(XrcEthView(from_hex("ff123456")).reserved(), 0xffu);
}

TEST(HeadersDeathTest, ViewOfShortSpanAborts) {
  std::array<std::byte, 11> b{};
  EXPECT_DEATH(BthView{std::span<const std::byte>(b)}, "assertion failed");
}

}  // namespace
}  // namespace uroce::wire

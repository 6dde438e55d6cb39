#include "wire/opcode.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace uroce::wire {
namespace {

bool name_has(const OpcodeInfo& op, const std::string& word) {
  return std::string(op.name).find(word) != std::string::npos;
}

TEST(Opcode, TableHoldsExactlyTheKnownOpcodes) {
  std::set<std::uint8_t> listed;
  for (Opcode op : kAllOpcodes) listed.insert(static_cast<std::uint8_t>(op));
  EXPECT_EQ(listed.size(), kAllOpcodes.size());
  int valid = 0;
  for (unsigned v = 0; v < 256; ++v) {
    const OpcodeInfo* info = opcode_info(static_cast<std::uint8_t>(v));
    if (info == nullptr) {
      EXPECT_EQ(listed.count(static_cast<std::uint8_t>(v)), 0u) << v;
      continue;
    }
    ++valid;
    EXPECT_EQ(info->value, v);
    EXPECT_EQ(listed.count(static_cast<std::uint8_t>(v)), 1u) << v;
  }
  EXPECT_EQ(valid, 63);
  // Reserved RC opcodes, RD (unsupported, as in rxe), reserved UD opcodes, CNP neighbours, the
  // reserved XRC opcode 0xb5 and XRC's FLUSH and ATOMIC WRITE (not supported).
  for (unsigned v : {0x15u, 0x18u, 0x1fu, 0x2cu, 0x40u, 0x4au, 0x60u, 0x63u, 0x66u, 0x80u, 0xb5u,
                     0xb8u, 0xbcu, 0xbdu, 0xffu}) {
    EXPECT_EQ(opcode_info(static_cast<std::uint8_t>(v)), nullptr) << v;
  }
}

TEST(Opcode, TransportIsTheTopThreeBits) {
  for (Opcode op : kAllOpcodes) {
    const OpcodeInfo& info = opcode_info(op);
    const unsigned top = info.value & 0xe0u;
    switch (info.transport) {
      case Transport::kRc:
        EXPECT_EQ(top, 0x00u) << info.name;
        EXPECT_TRUE(name_has(info, "RC ")) << info.name;
        break;
      case Transport::kUc:
        EXPECT_EQ(top, 0x20u) << info.name;
        EXPECT_TRUE(name_has(info, "UC ")) << info.name;
        break;
      case Transport::kUd:
        EXPECT_EQ(top, 0x60u) << info.name;
        EXPECT_TRUE(name_has(info, "UD ")) << info.name;
        break;
      case Transport::kCnp:
        EXPECT_EQ(info.value, 0x81u);
        break;
      case Transport::kXrc:
        EXPECT_EQ(top, 0xa0u) << info.name;
        EXPECT_TRUE(name_has(info, "XRC ")) << info.name;
        break;
    }
  }
}

// The header sets in opcodes.def agree with the names (IBTA 9.2 table 38), independently of how
// the table was typed.
TEST(Opcode, HeadersFollowFromTheSemantics) {
  for (Opcode op : kAllOpcodes) {
    const OpcodeInfo& i = opcode_info(op);
    SCOPED_TRACE(std::string(i.name));
    EXPECT_EQ(i.has(ExtHeader::kImmDt), name_has(i, "Immediate"));
    EXPECT_EQ(i.is(kFlagImm), name_has(i, "Immediate"));
    EXPECT_EQ(i.has(ExtHeader::kIeth), name_has(i, "Invalidate"));
    EXPECT_EQ(i.is(kFlagInvalidate), name_has(i, "Invalidate"));
    EXPECT_EQ(i.has(ExtHeader::kDeth), i.transport == Transport::kUd);
    const bool reth = name_has(i, "WRITE First") || name_has(i, "WRITE Only") ||
                      name_has(i, "READ Request") || name_has(i, "ATOMIC WRITE") ||
                      name_has(i, "FLUSH");
    EXPECT_EQ(i.has(ExtHeader::kFeth), name_has(i, "FLUSH"));
    EXPECT_EQ(i.is(kFlagFlush), name_has(i, "FLUSH"));
    // rxe's own ICRC (wire/icrc.h): RC FLUSH's quirk alone.
    EXPECT_EQ(i.is(kFlagRxeIcrc), op == Opcode::kRcFlush);
    EXPECT_EQ(i.is(kFlagAtomicWrite), name_has(i, "ATOMIC WRITE"));
    EXPECT_EQ(i.has(ExtHeader::kReth), reth);
    const bool aeth = name_has(i, "Acknowledge") || name_has(i, "Response First") ||
                      name_has(i, "Response Last") || name_has(i, "Response Only");
    EXPECT_EQ(i.has(ExtHeader::kAeth), aeth);
    EXPECT_EQ(i.has(ExtHeader::kAtomicAckEth), name_has(i, "Atomic Acknowledge"));
    EXPECT_EQ(i.has(ExtHeader::kAtomicEth), name_has(i, "Compare") || name_has(i, "Fetch"));
    EXPECT_EQ(i.has(ExtHeader::kCnpReserved), i.transport == Transport::kCnp);
    // IBTA 9.3.5: every XRC request, and nothing else, carries the XRCETH.
    EXPECT_EQ(i.has(ExtHeader::kXrcEth), i.transport == Transport::kXrc && i.is(kFlagRequest));

    const bool only = name_has(i, "Only") || name_has(i, "Request") || name_has(i, "Acknowledge") ||
                      name_has(i, "Compare") || name_has(i, "Fetch") || name_has(i, "CNP") ||
                      name_has(i, "ATOMIC WRITE") || name_has(i, "FLUSH");
    EXPECT_EQ(i.is(kFlagFirst), only || name_has(i, "First"));
    EXPECT_EQ(i.is(kFlagLast), only || name_has(i, "Last"));
    EXPECT_EQ(i.is(kFlagMiddle), name_has(i, "Middle"));
    EXPECT_NE(i.is(kFlagRequest), i.is(kFlagResponse) || i.is(kFlagCnp));
    EXPECT_EQ(i.is(kFlagPayload),
              name_has(i, "SEND") || name_has(i, "WRITE") || name_has(i, "Response"));
  }
}

TEST(Opcode, OffsetsAreComputedInPacketOrder) {
  for (Opcode op : kAllOpcodes) {
    const OpcodeInfo& i = opcode_info(op);
    std::size_t expect = kBthBytes;
    for (std::size_t h = 0; h < kExtHeaderCount; ++h) {
      if (!i.has(static_cast<ExtHeader>(h))) continue;
      EXPECT_EQ(i.offset_of(static_cast<ExtHeader>(h)), expect) << i.name;
      expect += kExtHeaderBytes[h];
    }
    EXPECT_EQ(i.header_bytes, expect) << i.name;
    EXPECT_EQ(i.header_bytes % 4, 0u) << i.name;
  }
}

TEST(Opcode, ReceiveWqeRules) {
  // Only SENDs and RDMA WRITEs with immediate consume a receive WQE (IBTA 9.7.4 / rxe).
  for (Opcode op : kAllOpcodes) {
    const OpcodeInfo& i = opcode_info(op);
    const bool consumes =
        (i.is(kFlagSend) && i.is(kFlagFirst)) || (i.is(kFlagWrite) && i.is(kFlagImm));
    EXPECT_EQ(i.is(kFlagRecvWqe), consumes) << i.name;
  }
}

TEST(Opcode, XrcIsRcUnderPrefix101WithTheXrcEthFirst) {
  int xrc = 0;
  for (Opcode op : kAllOpcodes) {
    const OpcodeInfo& x = opcode_info(op);
    if (x.transport != Transport::kXrc) continue;
    ++xrc;
    SCOPED_TRACE(std::string(x.name));
    const OpcodeInfo& r = opcode_info(rc_opcode(op));
    ASSERT_TRUE(r.valid);
    EXPECT_EQ(r.transport, Transport::kRc);
    EXPECT_EQ(std::string(x.name).substr(4), std::string(r.name).substr(3));
    EXPECT_EQ(xrc_opcode(rc_opcode(op)), op);
    if (x.is(kFlagRequest)) {
      EXPECT_EQ(x.offset_of(ExtHeader::kXrcEth), kBthBytes);
      EXPECT_EQ(x.header_bytes, r.header_bytes + 4u);
    } else {
      EXPECT_EQ(x.header_bytes, r.header_bytes);
    }
  }
  EXPECT_EQ(xrc, 23);  // 0xa0..0xb4, 0xb6, 0xb7
}

}  // namespace
}  // namespace uroce::wire

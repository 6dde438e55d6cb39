#include "wire/packet.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "support/golden.h"
#include "wire/builder.h"
#include "wire/icrc.h"

namespace uroce::wire {
namespace {

using Bytes = std::vector<std::byte>;

constexpr std::size_t kEth = 14;
constexpr std::size_t kIp = kEth;
constexpr std::size_t kUdp = kEth + 20;
constexpr std::size_t kRoce = kUdp + 8;

TransportHeaders headers(Opcode op) {
  TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(op);
  h.bth.dest_qpn = 0x11;
  h.bth.psn = 0x100;
  return h;
}

Bytes frame_of(Opcode op, std::size_t payload_bytes) {
  OuterHeaders o;
  o.src = IpAddress::v4(0x0a630b01);
  o.dst = IpAddress::v4(0x0a630b02);
  Bytes payload(payload_bytes, std::byte{0x5a});
  Bytes f(kRoce + 64 + payload_bytes + 8);
  f.resize(build_frame(f, o, headers(op), payload));
  return f;
}

// Recomputes the ICRC after a test edited covered bytes, so that the check under test, not the
// ICRC, is what rejects the packet.
void refresh_icrc(Bytes& f) {
  write_icrc(ConstBytes(f).subspan(kIp, 28), MutBytes(f).subspan(kRoce));
}

// Sets IP total length and UDP length to match the frame's size.
void set_lengths(Bytes& f) {
  store_be16(f, kIp + 2, static_cast<std::uint16_t>(f.size() - kIp));
  store_be16(f, kUdp + 4, static_cast<std::uint16_t>(f.size() - kUdp));
}
void fix_lengths(Bytes& f) {
  set_lengths(f);
  refresh_icrc(f);
}

DropReason frame_error(const Bytes& f) {
  auto r = parse_frame(LinkType::kEthernet, f);
  EXPECT_FALSE(r.ok());
  return r.ok() ? DropReason::kBadIcrc : r.error();
}

struct Case {
  DropReason expect;
  std::function<Bytes()> make;
};

TEST(Parser, EveryDropReasonHasACraftedPacket) {
  const std::vector<Case> cases = {
      {DropReason::kTruncatedLinkHeader, [] { return Bytes(10); }},
      {DropReason::kNotIp,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 8);
         store_be16(f, 12, 0x0806);  // ARP
         return f;
       }},
      {DropReason::kTruncatedIp,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 8);
         f.resize(kIp + 16);
         return f;
       }},
      {DropReason::kBadIpVersion,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 8);
         f[kIp] = std::byte{0x65};
         return f;
       }},
      {DropReason::kIpv4Options,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 8);
         f[kIp] = std::byte{0x46};
         return f;
       }},
      {DropReason::kBadIpLength,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 8);
         store_be16(f, kIp + 2, static_cast<std::uint16_t>(f.size()));  // longer than captured
         return f;
       }},
      {DropReason::kIpFragment,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 8);
         store_be16(f, kIp + 6, 0x2000);  // MF
         return f;
       }},
      {DropReason::kNotUdp,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 8);
         f[kIp + 9] = std::byte{6};
         return f;
       }},
      {DropReason::kBadUdpLength,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 8);
         store_be16(f, kUdp + 4, static_cast<std::uint16_t>(load_be16(f, kUdp + 4) - 4));
         return f;
       }},
      {DropReason::kNotRoceV2Port,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 8);
         store_be16(f, kUdp + 2, 4792);
         return f;
       }},
      {DropReason::kTruncatedBth,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 0);
         f.resize(kRoce + 12);
         set_lengths(f);
         return f;
       }},
      {DropReason::kBadIcrc,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 8);
         f[kRoce + 12] ^= std::byte{1};
         return f;
       }},
      {DropReason::kBadTver,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 8);
         BthMut(MutBytes(f).subspan(kRoce)).set_tver(1);
         refresh_icrc(f);
         return f;
       }},
      {DropReason::kUnknownOpcode,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 8);
         BthMut(MutBytes(f).subspan(kRoce)).set_opcode(0x15);
         refresh_icrc(f);
         return f;
       }},
      {DropReason::kTruncatedHeaders,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 8);  // 12 + 8 bytes, RETH needs 16
         BthMut(MutBytes(f).subspan(kRoce)).set_opcode(0x0a);
         refresh_icrc(f);
         return f;
       }},
      {DropReason::kUnalignedLength,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 8);
         f.insert(f.begin() + static_cast<std::ptrdiff_t>(kRoce + 12), std::byte{0});
         fix_lengths(f);
         return f;
       }},
      {DropReason::kBadPadCount,
       [] {
         Bytes f = frame_of(Opcode::kRcSendOnly, 0);
         BthMut(MutBytes(f).subspan(kRoce)).set_pad_count(3);
         refresh_icrc(f);
         return f;
       }},
      {DropReason::kUnexpectedPayload,
       [] {
         Bytes f = frame_of(Opcode::kRcAcknowledge, 0);
         f.insert(f.begin() + static_cast<std::ptrdiff_t>(kRoce + 16), 4, std::byte{0});
         fix_lengths(f);
         return f;
       }},
      {DropReason::kEmptyPayload,
       [] {
         Bytes f = frame_of(Opcode::kRcRdmaReadResponseOnly, 0);
         BthMut(MutBytes(f).subspan(kRoce)).set_opcode(0x0d);  // READ Response First
         refresh_icrc(f);
         return f;
       }},
      {DropReason::kPaddedNonLastPacket,
       [] {
         Bytes f = frame_of(Opcode::kRcRdmaReadResponseOnly, 3);
         // READ Response Middle, 3 bytes + 1 pad
         BthMut(MutBytes(f).subspan(kRoce)).set_opcode(0x0e);
         refresh_icrc(f);
         return f;
       }},
      {DropReason::kPayloadTooLong, [] { return frame_of(Opcode::kRcSendOnly, 4100); }},
  };
  std::set<DropReason> covered;
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(drop_reason_name(c.expect)));
    EXPECT_EQ(frame_error(c.make()), c.expect);
    covered.insert(c.expect);
  }
  EXPECT_EQ(covered.size(), kDropReasonCount);
}

TEST(Parser, DropReasonNamesAreUniqueSnakeCase) {
  std::set<std::string> names;
  for (std::size_t i = 0; i < kDropReasonCount; ++i) {
    const auto r = static_cast<DropReason>(i);
    const std::string name(drop_reason_name(r));
    EXPECT_TRUE(names.insert(name).second) << name;
    for (char c : name) EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
    EXPECT_FALSE(drop_reason_text(r).empty());
  }
  EXPECT_TRUE(is_not_roce(DropReason::kNotRoceV2Port));
  EXPECT_FALSE(is_not_roce(DropReason::kBadIcrc));
}

TEST(Parser, AcceptsEveryLegalPayloadShape) {
  // Only packets may be empty; a READ response Last needs a byte, First/Middle whole words. A
  // request of another shape is the responder's to NAK (Invalid Request), not the parser's.
  EXPECT_TRUE(parse_frame(LinkType::kEthernet, frame_of(Opcode::kRcSendOnly, 0)).ok());
  EXPECT_TRUE(parse_frame(LinkType::kEthernet, frame_of(Opcode::kRcRdmaWriteOnly, 0)).ok());
  EXPECT_TRUE(parse_frame(LinkType::kEthernet, frame_of(Opcode::kRcRdmaReadResponseOnly, 0)).ok());
  EXPECT_TRUE(parse_frame(LinkType::kEthernet, frame_of(Opcode::kRcSendLast, 1)).ok());
  EXPECT_TRUE(parse_frame(LinkType::kEthernet, frame_of(Opcode::kRcSendFirst, 1024)).ok());
  EXPECT_TRUE(parse_frame(LinkType::kEthernet, frame_of(Opcode::kUdSendOnly, 4096)).ok());
  EXPECT_TRUE(parse_frame(LinkType::kEthernet, frame_of(Opcode::kRcSendLast, 0)).ok());
  EXPECT_TRUE(parse_frame(LinkType::kEthernet, frame_of(Opcode::kRcRdmaWriteMiddle, 0)).ok());
  EXPECT_EQ(frame_error(frame_of(Opcode::kRcRdmaReadResponseLast, 0)), DropReason::kEmptyPayload);
  EXPECT_EQ(frame_error(frame_of(Opcode::kRcRdmaReadResponseMiddle, 0)), DropReason::kEmptyPayload);
}

TEST(Parser, EthernetPaddingAfterTheIpPacketIsIgnored) {
  Bytes f = frame_of(Opcode::kRcAcknowledge, 0);
  f.resize(f.size() + 6, std::byte{0xaa});
  auto r = parse_frame(LinkType::kEthernet, f);
  ASSERT_TRUE(r.ok()) << drop_reason_name(r.error());
  EXPECT_EQ(r->roce.bytes.size(), 20u);
}

TEST(Parser, VlanTaggedAndOtherLinkTypes) {
  const Bytes eth = frame_of(Opcode::kRcSendOnly, 5);
  const ConstBytes ip = ConstBytes(eth).subspan(kIp);
  // 802.1ad + 802.1Q tags.
  Bytes tagged(eth.begin(), eth.begin() + 12);
  for (std::uint8_t b : {0x88, 0xa8, 0x00, 0x07, 0x81, 0x00, 0x00, 0x64}) {
    tagged.push_back(std::byte{b});
  }
  tagged.insert(tagged.end(), eth.begin() + 12, eth.end());
  EXPECT_TRUE(parse_frame(LinkType::kEthernet, tagged).ok());
  // Raw IP, LINKTYPE_IPV4.
  EXPECT_TRUE(parse_frame(LinkType::kRaw, ip).ok());
  EXPECT_TRUE(parse_frame(LinkType::kIpv4, ip).ok());
  EXPECT_EQ(parse_frame(LinkType::kIpv6, ip).error(), DropReason::kBadIpVersion);
  // Linux cooked v1: 16-byte header, protocol at 14.
  Bytes sll(16, std::byte{0});
  store_be16(sll, 14, 0x0800);
  sll.insert(sll.end(), ip.begin(), ip.end());
  EXPECT_TRUE(parse_frame(LinkType::kLinuxSll, sll).ok());
  // Linux cooked v2: 20-byte header, protocol at 0.
  Bytes sll2(20, std::byte{0});
  store_be16(sll2, 0, 0x0800);
  sll2.insert(sll2.end(), ip.begin(), ip.end());
  EXPECT_TRUE(parse_frame(LinkType::kLinuxSll2, sll2).ok());
  EXPECT_TRUE(link_type_supported(1));
  EXPECT_TRUE(link_type_supported(276));
  EXPECT_FALSE(link_type_supported(105));  // 802.11
}

// Copies each prefix into its own exactly-sized heap buffer, so that AddressSanitizer reports
// any read past the end.
void check_every_truncation(const Bytes& full, LinkType link) {
  for (std::size_t len = 0; len < full.size(); ++len) {
    const Bytes prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
    EXPECT_FALSE(parse_frame(link, prefix).ok()) << "prefix of " << len << " bytes accepted";
    (void)parse_frame(link, prefix, FrameOptions{.verify_icrc = false});
  }
}

TEST(Parser, RejectsEveryTruncationOfBuiltPackets) {
  for (Opcode op : kAllOpcodes) {
    const OpcodeInfo& info = opcode_info(op);
    SCOPED_TRACE(std::string(info.name));
    check_every_truncation(frame_of(op, info.is(kFlagPayload) ? 13 : 0), LinkType::kEthernet);
  }
}

TEST(Parser, RejectsEveryTruncationOfGoldenPackets) {
  std::set<std::pair<std::string, std::uint8_t>> seen;
  for (const auto& fr : test::load_all_golden()) {
    const std::uint8_t opcode = load_u8(fr.view(), kRoce);
    if (!seen.insert({fr.file, opcode}).second) continue;
    SCOPED_TRACE(fr.file + " #" + std::to_string(fr.index));
    check_every_truncation(fr.bytes, LinkType::kEthernet);
  }
  EXPECT_GT(seen.size(), 20u);
}

TEST(Parser, ParseRoceNeverReadsPastItsInput) {
  for (Opcode op : kAllOpcodes) {
    const Bytes f = frame_of(op, 9);
    const Bytes roce(f.begin() + kRoce, f.end());
    for (std::size_t len = 0; len <= roce.size(); ++len) {
      const Bytes prefix(roce.begin(), roce.begin() + static_cast<std::ptrdiff_t>(len));
      auto r = parse_roce(prefix);
      if (len < kBthBytes + kIcrcBytes) {
        EXPECT_EQ(r.error(), DropReason::kTruncatedBth);
      }
      if (r.ok()) {
        EXPECT_LE(r->payload.data() + r->payload.size(), prefix.data() + prefix.size());
      }
    }
  }
}

}  // namespace
}  // namespace uroce::wire

// The golden captures of the kernel's Soft-RoCE: every packet must verify, and single-bit
// corruption must be caught exactly where the ICRC covers the packet.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "support/golden.h"
#include "wire/aeth.h"
#include "wire/builder.h"
#include "wire/packet.h"

namespace uroce::wire {
namespace {

TEST(Golden, EveryPacketIsValid) {
  std::map<std::string, std::size_t> per_file;
  for (const auto& fr : test::load_all_golden()) {
    auto f = parse_frame(LinkType::kEthernet, fr.view());
    ASSERT_TRUE(f.ok()) << fr.file << " #" << fr.index << ": " << drop_reason_name(f.error());
    EXPECT_TRUE(f->icrc_checked);
    ++per_file[fr.file];
  }
  EXPECT_EQ(per_file.size(), 11u);
  EXPECT_EQ(per_file["loss_write_bw.pcap"], 5082u);
}

// Facts of rxe's conventions (roce-facts.md) as the captures show them.
TEST(Golden, RxeConventions) {
  std::set<std::uint8_t> syndromes;
  for (const auto& fr : test::load_all_golden()) {
    auto f = parse_frame(LinkType::kEthernet, fr.view());
    ASSERT_TRUE(f.ok());
    const Bth bth = f->roce.bth().decode();
    EXPECT_EQ(bth.pkey, 0xffff);
    EXPECT_EQ(bth.tver, 0);
    EXPECT_FALSE(bth.mig_req);
    EXPECT_TRUE(f->ipv4.dont_fragment);
    // host_python_ud.pcap also holds a plain UDP socket's packets (checksum set, any port).
    if (!(fr.file == "host_python_ud.pcap" && f->udp.src_port == kRoceV2Port)) {
      EXPECT_EQ(f->udp.checksum, 0) << fr.file << " #" << fr.index;
      EXPECT_EQ(f->udp.src_port & 0xc000, 0xc000) << fr.file << " #" << fr.index;
    }
    if (f->roce.op->has(ExtHeader::kAeth)) syndromes.insert(f->roce.aeth().syndrome());
    if (f->roce.op->has(ExtHeader::kDeth) && fr.file == "ud_send.pcap") {
      EXPECT_EQ(f->roce.deth().qkey(), 0x11111111u);
    }
    // AckReq on the last packet of every request message.
    if (f->roce.op->is(kFlagRequest) && f->roce.op->is(kFlagLast) &&
        f->roce.op->transport == Transport::kRc) {
      EXPECT_TRUE(bth.ack_req) << fr.file << " #" << fr.index;
    }
  }
  EXPECT_EQ(syndromes.count(0x60), 1u);  // NAK PSN sequence error (loss_write_bw)
  EXPECT_EQ(syndromes.count(0x2c), 1u);  // RNR NAK, timer 12 (rnr_send)
  EXPECT_EQ(aeth_type(0x2c), AethType::kRnrNak);
}

// Source pinning (transport::Qp::set_peer_udp_port) learns an rxe peer's port from its first
// packet in sequence and drops later packets from any other: rxe must send every packet of a
// connected QP, requests, responses, retransmissions and NAKs alike, from one port
// (rdma_get_udp_sport() at modify_qp).
TEST(Golden, RxeSendsEveryPacketOfAConnectedQpFromOnePort) {
  std::map<std::string, std::set<std::uint16_t>> ports;  // by file, source and destination QPN
  for (const auto& fr : test::load_all_golden()) {
    auto f = parse_frame(LinkType::kEthernet, fr.view());
    ASSERT_TRUE(f.ok());
    const Transport t = f->roce.op->transport;
    if (t != Transport::kRc && t != Transport::kUc) continue;
    const auto& a = f->ipv4.src.bytes;
    const std::string key = fr.file + " from " + std::to_string(a[3]) + " to QPN " +
                            std::to_string(f->roce.bth().dest_qpn());
    ports[key].insert(f->udp.src_port);
  }
  EXPECT_GE(ports.size(), 10u);
  for (const auto& [key, p] : ports) EXPECT_EQ(p.size(), 1u) << key;
}

enum class Expect { kValid, kIcrc, kIcrcOrFragment, kNotValid };

// What flipping bit `bit` of byte `off` of an IPv4 Ethernet frame must do (roce-facts.md, ICRC).
// The BTH starts at byte 42.
Expect expectation_v4(std::size_t off, int /*bit*/) {
  if (off < 12) return Expect::kValid;     // MAC addresses: not covered, not checked
  if (off < 14) return Expect::kNotValid;  // EtherType
  if (off < 34) {
    switch (off - 14) {
      case 1:   // TOS (DSCP, ECN): masked
      case 8:   // TTL: masked
      case 10:  // header checksum: masked (and not verified by RoCE receivers)
      case 11:
        return Expect::kValid;
      case 0:  // version, IHL: framing
      case 2:  // total length: framing
      case 3:
      case 9:  // protocol: framing
        return Expect::kNotValid;
      case 6:  // flags, fragment offset: covered, or a fragment
      case 7:
        return Expect::kIcrcOrFragment;
      default:  // identification, addresses
        return Expect::kIcrc;
    }
  }
  if (off < 42) {
    switch (off - 34) {
      case 2:  // destination port: framing
      case 3:
      case 4:  // length: framing
      case 5:
        return Expect::kNotValid;
      case 6:  // checksum: masked
      case 7:
        return Expect::kValid;
      default:  // source port
        return Expect::kIcrc;
    }
  }
  if (off == 42 + 4) return Expect::kValid;  // BTH FECN, BECN, reserved: masked
  return Expect::kIcrc;  // the rest of the BTH, extension headers, payload, pad, ICRC
}

// The same for an IPv6 Ethernet frame; the BTH starts at byte 62.
Expect expectation_v6(std::size_t off, int bit) {
  if (off < 14) return expectation_v4(off, bit);
  if (off < 54) {
    const std::size_t i = off - 14;
    if (i == 0) return bit >= 4 ? Expect::kNotValid : Expect::kValid;  // version | tclass
    if (i <= 3 || i == 7) return Expect::kValid;  // traffic class, flow label, hop limit
    if (i <= 6) return Expect::kNotValid;         // payload length, next header
    return Expect::kIcrc;                         // addresses
  }
  return expectation_v4(off - 20, bit);  // UDP onward, 20 bytes later than with IPv4
}

void check_flips(const std::vector<std::byte>& original, Expect (*expect)(std::size_t, int),
                 const std::string& what) {
  std::vector<std::byte> f = original;
  for (std::size_t off = 0; off < f.size(); ++off) {
    for (int bit = 0; bit < 8; ++bit) {
      const Expect e = expect(off, bit);
      f[off] ^= std::byte(1u << bit);
      auto r = parse_frame(LinkType::kEthernet, f);
      const std::string got = r.ok() ? "valid" : std::string(drop_reason_name(r.error()));
      switch (e) {
        case Expect::kValid:
          EXPECT_TRUE(r.ok()) << what << " byte " << off << " bit " << bit << ": " << got;
          break;
        case Expect::kIcrc:
          EXPECT_TRUE(!r.ok() && r.error() == DropReason::kBadIcrc)
              << what << " byte " << off << " bit " << bit << ": " << got;
          break;
        case Expect::kIcrcOrFragment:
          EXPECT_TRUE(!r.ok() &&
                      (r.error() == DropReason::kBadIcrc || r.error() == DropReason::kIpFragment))
              << what << " byte " << off << " bit " << bit << ": " << got;
          break;
        case Expect::kNotValid:
          EXPECT_FALSE(r.ok()) << what << " byte " << off << " bit " << bit;
          break;
      }
      f[off] ^= std::byte(1u << bit);
    }
  }
  EXPECT_EQ(f, original);
}

TEST(Golden, SingleBitFlipsAreCaughtExactlyWhereCovered) {
  std::set<std::pair<std::string, std::uint8_t>> seen;
  for (const auto& fr : test::load_all_golden()) {
    const std::uint8_t opcode = load_u8(fr.view(), 42);
    if (!seen.insert({fr.file, opcode}).second) continue;
    check_flips(fr.bytes, expectation_v4, fr.file + " #" + std::to_string(fr.index));
  }
  EXPECT_GT(seen.size(), 20u);
}

TEST(Golden, SingleBitFlipsOfIpv6Packets) {
  OuterHeaders o;
  o.src.v6 = o.dst.v6 = true;
  o.src.bytes = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  o.dst.bytes = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  o.flow_label = 0x12345;
  for (Opcode op : {Opcode::kRcRdmaWriteFirst, Opcode::kRcAtomicAcknowledge, Opcode::kUdSendOnly,
                    Opcode::kCnp}) {
    TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(op);
    h.bth.dest_qpn = 0x42;
    std::vector<std::byte> payload(opcode_info(op).is(kFlagPayload) ? 256 : 0, std::byte{0x77});
    std::vector<std::byte> frame(1024);
    frame.resize(build_frame(frame, o, h, payload));
    check_flips(frame, expectation_v6, std::string(opcode_info(op).name) + " v6");
  }
}

}  // namespace
}  // namespace uroce::wire

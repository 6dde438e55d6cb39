#include "wire/icrc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "crc32_kernel_fixture.h"
#include "support/golden.h"
#include "wire/builder.h"
#include "wire/crc32_fold.h"
#include "wire/packet.h"

namespace uroce::wire {
namespace {

using test::from_hex;

// An independent, deliberately naive ICRC written from roce-facts.md: bitwise CRC-32 over a
// masked copy of the whole pseudo-packet.
std::uint32_t reference_icrc(ConstBytes ip_udp, ConstBytes roce_no_icrc) {
  std::vector<std::uint8_t> m(8, 0xff);
  for (std::byte b : ip_udp) m.push_back(static_cast<std::uint8_t>(b));
  const bool v6 = (m[8] >> 4) == 6;
  const std::size_t ip = 8;
  const std::size_t udp = ip + (v6 ? 40 : 20);
  if (v6) {
    m[ip] |= 0x0f;
    m[ip + 1] = m[ip + 2] = m[ip + 3] = 0xff;
    m[ip + 7] = 0xff;
  } else {
    m[ip + 1] = 0xff;
    m[ip + 8] = 0xff;
    m[ip + 10] = m[ip + 11] = 0xff;
  }
  m[udp + 6] = m[udp + 7] = 0xff;
  const std::size_t bth = m.size();
  for (std::byte b : roce_no_icrc) m.push_back(static_cast<std::uint8_t>(b));
  m[bth + 4] = 0xff;
  std::uint32_t crc = 0xffffffff;
  for (std::uint8_t byte : m) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

TEST(Crc32, StandardCheckValues) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32(0, as_bytes(s.data(), s.size())), 0xcbf43926u);
  const std::vector<std::byte> ones(8, std::byte{0xff});
  // rxe starts its raw CRC at 0xdebb20e3: the register after eight 0xff bytes.
  EXPECT_EQ(~crc32(0, ones), 0xdebb20e3u);
  // Continuation equals one pass.
  EXPECT_EQ(crc32(crc32(0, as_bytes(s.data(), 4)), as_bytes(s.data() + 4, 5)), 0xcbf43926u);
}

// The ConnectX-4 Lx CNP captured on real hardware (roce-facts.md).
TEST(Icrc, HardwareCnpVector) {
  const auto frame = from_hex(
      "e41d2dab2bc2 7cfe90643b32 0800"
      "45c2003c718c40004011 9161 0a001101 0a001201"
      "0000 12b7 0028 0000"
      "81 00 ffff 40 000118 00000000"
      "00000000000000000000000000000000"
      "82fd002a");
  auto f = parse_frame(LinkType::kEthernet, frame);
  ASSERT_TRUE(f.ok()) << drop_reason_name(f.error());
  EXPECT_TRUE(f->icrc_checked);
  EXPECT_EQ(f->roce.icrc(), 0x2a00fd82u);
  EXPECT_EQ(f->roce.op->opcode(), Opcode::kCnp);
  EXPECT_TRUE(f->roce.bth().becn());
  EXPECT_EQ(f->roce.bth().dest_qpn(), 0x118u);
  EXPECT_EQ(f->udp.src_port, 0);  // receivers must not validate the source port
  EXPECT_EQ(f->ipv4.tos & 3, 2);  // ECT(0): masked, so any value verifies
  const auto roce = f->roce.bytes;
  EXPECT_EQ(reference_icrc(f->ip_udp, roce.first(roce.size() - 4)), 0x2a00fd82u);
}

TEST(Icrc, MatchesTheReferenceOnEveryGoldenPacket) {
  std::size_t n = 0;
  for (const auto& fr : test::load_all_golden()) {
    auto f = parse_frame(LinkType::kEthernet, fr.view(), FrameOptions{.verify_icrc = false});
    ASSERT_TRUE(f.ok()) << fr.file << " #" << fr.index;
    const auto roce = f->roce.bytes;
    const auto body = roce.first(roce.size() - 4);
    ASSERT_EQ(icrc_compute(f->ip_udp, body), reference_icrc(f->ip_udp, body))
        << fr.file << " #" << fr.index;
    ASSERT_EQ(icrc_compute(f->ip_udp, body), f->roce.icrc()) << fr.file << " #" << fr.index;
    ++n;
  }
  EXPECT_GT(n, 6000u);
}

TEST(Icrc, Ipv6AndIpv4BuiltPacketsMatchTheReference) {
  std::mt19937 rng(20261129);  // seeded: reproducible
  for (int iter = 0; iter < 200; ++iter) {
    OuterHeaders o;
    const bool v6 = iter % 2 == 1;
    o.src.v6 = o.dst.v6 = v6;
    for (auto& b : o.src.bytes) b = static_cast<std::uint8_t>(rng());
    for (auto& b : o.dst.bytes) b = static_cast<std::uint8_t>(rng());
    o.traffic_class = static_cast<std::uint8_t>(rng());
    o.ttl = static_cast<std::uint8_t>(rng());
    o.flow_label = rng() & 0xfffff;
    o.src_port = static_cast<std::uint16_t>(rng());
    o.ipv4_id = static_cast<std::uint16_t>(rng());
    TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcRdmaWriteOnlyImm);
    h.bth.dest_qpn = rng() & 0xffffff;
    h.bth.psn = rng() & 0xffffff;
    h.bth.fecn = rng() & 1;
    h.reth = Reth{rng(), static_cast<std::uint32_t>(rng()), static_cast<std::uint32_t>(rng())};
    h.imm_data = static_cast<std::uint32_t>(rng());
    std::vector<std::byte> payload(rng() % 4097);
    for (auto& b : payload) b = static_cast<std::byte>(rng());
    std::vector<std::byte> frame(8192);
    frame.resize(build_frame(frame, o, h, payload));
    auto f = parse_frame(LinkType::kEthernet, frame, FrameOptions{.verify_icrc = false});
    ASSERT_TRUE(f.ok()) << drop_reason_name(f.error());
    ASSERT_EQ(f->v6, v6);
    const auto body = f->roce.bytes.first(f->roce.bytes.size() - 4);
    ASSERT_EQ(f->roce.icrc(), reference_icrc(f->ip_udp, body)) << "iteration " << iter;
    EXPECT_TRUE(icrc_verify(f->ip_udp, f->roce.bytes));
  }
}

TEST(Icrc, AccumulatorOverGatheredPiecesEqualsOnePass) {
  OuterHeaders o;
  o.src = IpAddress::v4(0x0a000001);
  o.dst = IpAddress::v4(0x0a000002);
  TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcSendOnly);
  std::vector<std::byte> payload(1000);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>(i * 7);
  std::vector<std::byte> frame(2048);
  frame.resize(build_frame(frame, o, h, payload));
  const ConstBytes ip_udp = ConstBytes(frame).subspan(14, 28);
  const ConstBytes roce = ConstBytes(frame).subspan(42);
  IcrcAccumulator acc(ip_udp, roce.first(12));
  acc.update(roce.subspan(12, 300));
  acc.update(roce.subspan(312, 0));
  acc.update(roce.subspan(312, 700));
  EXPECT_EQ(acc.value(), load_le32(roce, roce.size() - 4));
}

// icrc_compute and IcrcAccumulator on each CRC-32 kernel and on ISA-L (kNone), on headers
// contiguous with the BTH (one masked pass) and in a separate buffer (gathered header).
using IcrcPaths = test::WithCrc32Kernel;

TEST_P(IcrcPaths, ContiguousAndSeparateHeadersMatchTheReference) {
  std::mt19937 rng(4791);
  for (int iter = 0; iter < 600; ++iter) {
    const bool v6 = iter % 2 == 1;
    const std::size_t ip_udp_len = (v6 ? 40 : 20) + 8;
    // Short packets first (a header-only total below the kernel's 64-byte block), then any.
    const std::size_t roce_len =
        12 + (iter < 200 ? static_cast<std::size_t>(iter / 2) : rng() % 5000);
    std::vector<std::byte> frame(ip_udp_len + roce_len);
    for (auto& b : frame) b = static_cast<std::byte>(rng());
    frame[0] = static_cast<std::byte>((v6 ? 0x60 : 0x40) | (rng() & 0xf));
    const ConstBytes ip_udp = ConstBytes(frame).first(ip_udp_len);
    const ConstBytes roce = ConstBytes(frame).subspan(ip_udp_len);
    const std::uint32_t want = reference_icrc(ip_udp, roce);
    ASSERT_EQ(icrc_compute(ip_udp, roce), want) << "iteration " << iter;
    const std::vector<std::byte> ip_udp_copy(ip_udp.begin(), ip_udp.end());
    ASSERT_EQ(icrc_compute(ip_udp_copy, roce), want) << "iteration " << iter;
    const std::vector<std::byte> roce_copy(roce.begin(), roce.end());
    ASSERT_EQ(icrc_compute(ip_udp, roce_copy), want) << "iteration " << iter;
  }
}

// The outer headers' part kept apart (icrc_outer_state) and continued over the BTH onward
// (icrc_continue, the accumulator and PendingIcrc built from it) gives the reference ICRC, on
// every kernel; the fields the ICRC masks (TOS, TTL, checksums; traffic class, flow label, hop
// limit) do not change the state, every covered byte does.
TEST_P(IcrcPaths, OuterStateContinuedOverTheBthMatchesTheReference) {
  std::mt19937 rng(14);
  for (int iter = 0; iter < 400; ++iter) {
    const bool v6 = iter % 2 == 1;
    const std::size_t ip_udp_len = (v6 ? 40 : 20) + 8;
    const std::size_t roce_len =
        12 + (iter < 200 ? static_cast<std::size_t>(iter / 2) : rng() % 5000);
    std::vector<std::byte> ip_udp(ip_udp_len);
    for (auto& b : ip_udp) b = static_cast<std::byte>(rng());
    ip_udp[0] = static_cast<std::byte>((v6 ? 0x60 : 0x40) | (rng() & 0xf));
    std::vector<std::byte> roce(roce_len);
    for (auto& b : roce) b = static_cast<std::byte>(rng());
    const std::uint32_t want = reference_icrc(ip_udp, roce);
    const std::uint32_t state = icrc_outer_state(ip_udp);
    ASSERT_EQ(icrc_continue(state, roce), want) << "iteration " << iter;
    const std::size_t hdr = std::min<std::size_t>(roce_len, 12 + rng() % 40);
    IcrcAccumulator acc(state, ConstBytes(roce).first(hdr));
    acc.update(ConstBytes(roce).subspan(hdr));
    ASSERT_EQ(acc.value(), want) << "iteration " << iter;
    // Every masked byte changed: the same state. One covered bit changed: another.
    std::vector<std::byte> masked = ip_udp;
    const std::vector<std::size_t> variant = v6 ? std::vector<std::size_t>{1, 2, 3, 7, 46, 47}
                                                : std::vector<std::size_t>{1, 8, 10, 11, 26, 27};
    for (std::size_t i : variant) masked[i] = static_cast<std::byte>(rng());
    masked[0] = (masked[0] & std::byte{0xf0}) | static_cast<std::byte>(v6 ? rng() & 0xf : 0);
    if (!v6) masked[0] = ip_udp[0];
    ASSERT_EQ(icrc_outer_state(masked), state) << "iteration " << iter;
    std::vector<std::byte> covered = ip_udp;
    std::size_t at = 0;
    do {
      at = rng() % ip_udp_len;
    } while (at == 0 || std::find(variant.begin(), variant.end(), at) != variant.end());
    covered[at] ^= static_cast<std::byte>(1u << (rng() % 8));
    ASSERT_NE(icrc_outer_state(covered), state) << "iteration " << iter << " byte " << at;
  }
}

TEST_P(IcrcPaths, AccumulatorCopyAndUpdateBuildsThePacketAndItsIcrc) {
  std::mt19937 rng(99);
  for (int iter = 0; iter < 200; ++iter) {
    const std::size_t ip_udp_len = 28;
    const std::size_t hdr_len = 12 + 16;  // BTH and RETH
    std::vector<std::byte> payload(rng() % 4200);
    for (auto& b : payload) b = static_cast<std::byte>(rng());
    std::vector<std::byte> frame(ip_udp_len + hdr_len + payload.size());
    for (std::size_t i = 0; i < ip_udp_len + hdr_len; ++i) frame[i] = static_cast<std::byte>(rng());
    frame[0] = std::byte{0x45};
    const ConstBytes ip_udp = ConstBytes(frame).first(ip_udp_len);
    IcrcAccumulator acc(ip_udp, ConstBytes(frame).subspan(ip_udp_len, hdr_len));
    // The payload arrives in two pieces and is copied into the packet as it is fed.
    const std::size_t cut = payload.empty() ? 0 : rng() % payload.size();
    const MutBytes out = MutBytes(frame).subspan(ip_udp_len + hdr_len);
    acc.copy_and_update(out, ConstBytes(payload).first(cut));
    acc.copy_and_update(out.subspan(cut), ConstBytes(payload).subspan(cut));
    ASSERT_TRUE(std::equal(payload.begin(), payload.end(), out.begin()));
    ASSERT_EQ(acc.value(), reference_icrc(ip_udp, ConstBytes(frame).subspan(ip_udp_len)))
        << "iteration " << iter;
  }
}

// PendingIcrc: the same verdict as icrc_verify whatever is copied through it, in however many
// pieces, and the copied bytes are the payload's. Random packets, random header and pad lengths,
// random splits of the payload, intact or with one bit flipped anywhere (headers, payload, pad,
// ICRC); separate headers (as datapath/udp rebuilds them) or contiguous (as a frame holds them).
TEST_P(IcrcPaths, PendingIcrcCopiesThePayloadAndAgreesWithVerify) {
  std::mt19937 rng(1414);
  for (int iter = 0; iter < 400; ++iter) {
    const bool v6 = iter % 3 == 1;
    const std::size_t ip_udp_len = (v6 ? 40 : 20) + 8;
    const std::size_t hdr_len = 12 + 4 * (rng() % 8);  // BTH and 0..28 bytes of ext headers
    const std::size_t payload_len = iter < 40 ? static_cast<std::size_t>(iter) : rng() % 4200;
    const std::size_t pad = rng() % 4;
    std::vector<std::byte> frame(ip_udp_len + hdr_len + payload_len + pad + 4);
    for (auto& b : frame) b = static_cast<std::byte>(rng());
    frame[0] = static_cast<std::byte>((v6 ? 0x60 : 0x40) | 5);
    const MutBytes roce_mut = MutBytes(frame).subspan(ip_udp_len);
    const std::size_t body = roce_mut.size() - 4;
    store_le32(
        roce_mut, body,
        reference_icrc(ConstBytes(frame).first(ip_udp_len), ConstBytes(roce_mut).first(body)));
    const bool corrupt = iter % 2 == 0;
    if (corrupt) {
      const std::size_t bit = rng() % (frame.size() * 8);
      // Not in a masked (variant) field, which the ICRC does not cover, nor in the IP version
      // (which says how long the IP header is).
      const std::size_t byte = bit / 8;
      const bool masked = v6 ? byte == 0 || (byte >= 1 && byte <= 3) || byte == 7 || byte == 46 ||
                                   byte == 47 || byte == 52
                             : byte == 0 || byte == 1 || byte == 8 || byte == 10 || byte == 11 ||
                                   byte == 26 || byte == 27 || byte == 32;
      if (!masked) frame[byte] ^= static_cast<std::byte>(1u << (bit % 8));
    }
    std::vector<std::byte> ip_udp_copy(frame.begin(),
                                       frame.begin() + static_cast<std::ptrdiff_t>(ip_udp_len));
    const ConstBytes roce = ConstBytes(frame).subspan(ip_udp_len);
    const ConstBytes payload = roce.subspan(hdr_len, payload_len);
    const bool want = icrc_verify(ConstBytes(frame).first(ip_udp_len), roce);
    for (const bool contiguous : {true, false}) {
      const ConstBytes ip_udp =
          contiguous ? ConstBytes(frame).first(ip_udp_len) : ConstBytes(ip_udp_copy);
      PendingIcrc p(ip_udp, roce, payload, nullptr);
      ASSERT_EQ(p.payload_bytes(), payload_len);
      // Copy a random prefix of the payload, in up to 4 random pieces, into guarded buffers.
      const std::size_t copy_len = payload_len == 0 ? 0 : rng() % (payload_len + 1);
      std::vector<std::byte> out(copy_len + 16, std::byte{0xa5});
      std::size_t done = 0;
      for (int piece = 0; piece < 4 && done < copy_len; ++piece) {
        const std::size_t n = piece == 3 ? copy_len - done : rng() % (copy_len - done + 1);
        p.copy_payload(MutBytes(out).subspan(8 + done, n));
        done += n;
      }
      ASSERT_EQ(p.copied_bytes(), done);
      EXPECT_FALSE(p.finished());
      ASSERT_EQ(p.finish(), want) << "iteration " << iter << " contiguous " << contiguous;
      EXPECT_TRUE(p.finished());
      EXPECT_EQ(p.verified(), want);
      ASSERT_TRUE(std::equal(payload.begin(), payload.begin() + static_cast<std::ptrdiff_t>(done),
                             out.begin() + 8));
      for (std::size_t i = 0; i < 8; ++i) {
        ASSERT_EQ(out[i], std::byte{0xa5});
      }
      for (std::size_t i = 8 + done; i < out.size(); ++i) {
        ASSERT_EQ(out[i], std::byte{0xa5});
      }
    }
    if (!corrupt) {
      ASSERT_TRUE(want) << "iteration " << iter;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KernelsAndIsal, IcrcPaths, ::testing::ValuesIn(crc32_fold::kKernels),
                         test::kernel_test_name);

// The ICRC of the same IPv4 packet with identification v is the one with identification 0 XOR a
// delta that depends only on v and the length: checked against the reference on built packets.
TEST(Icrc, Ipv4IdentificationDeltaPredictsEveryIcrc) {
  std::mt19937 rng(4791);
  for (int iter = 0; iter < 60; ++iter) {
    OuterHeaders o;
    for (auto& b : o.src.bytes) b = static_cast<std::uint8_t>(rng());
    for (auto& b : o.dst.bytes) b = static_cast<std::uint8_t>(rng());
    o.ethernet = false;
    TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcRdmaWriteMiddle);
    h.bth.psn = rng() & 0xffffff;
    std::vector<std::byte> payload(4 * (1 + rng() % 1024));
    for (auto& b : payload) b = static_cast<std::byte>(rng());
    std::vector<std::byte> f0(8192);
    f0.resize(build_frame(f0, o, h, payload));
    const std::size_t roce_bytes = f0.size() - 28;
    const Ipv4IdIcrcDelta delta(roce_bytes);
    const std::uint32_t icrc0 = load_le32(f0, f0.size() - 4);
    for (const std::uint16_t id :
         {std::uint16_t{1}, std::uint16_t{2}, std::uint16_t{3}, std::uint16_t{63},
          std::uint16_t{127}, static_cast<std::uint16_t>(rng())}) {
      o.ipv4_id = id;
      std::vector<std::byte> f(8192);
      f.resize(build_frame(f, o, h, payload));
      const ConstBytes ip_udp = ConstBytes(f).first(28);
      const ConstBytes body = ConstBytes(f).subspan(28, roce_bytes - 4);
      const std::uint32_t icrc = load_le32(f, f.size() - 4);
      ASSERT_EQ(icrc, reference_icrc(ip_udp, body));
      EXPECT_EQ(icrc, icrc0 ^ delta(id)) << "id " << id << " roce bytes " << roce_bytes;
      const auto found = delta.solve(icrc ^ icrc0);
      ASSERT_TRUE(found.has_value());
      EXPECT_EQ(*found, id);
    }
    EXPECT_EQ(delta.solve(0), 0);
  }
  // Only a 2^-16 share of all differences is some identification's: most are not.
  const Ipv4IdIcrcDelta d(1024 + 16);
  std::size_t explained = 0;
  for (std::uint32_t i = 0; i < 4096; ++i) explained += d.solve(i * 0x9e3779b9u + 1).has_value();
  EXPECT_LE(explained, 2u);
}

// DF is covered by the ICRC too: clearing it XORs a delta of its own, independent of the
// identification's, so a DF-clear packet is never explained by an identification with DF set,
// and its identification is solved once df_clear() is taken out.
TEST(Icrc, DfClearDeltaIsIndependentOfTheIdentification) {
  std::mt19937 rng(4792);
  for (int iter = 0; iter < 40; ++iter) {
    OuterHeaders o;
    for (auto& b : o.src.bytes) b = static_cast<std::uint8_t>(rng());
    for (auto& b : o.dst.bytes) b = static_cast<std::uint8_t>(rng());
    o.ethernet = false;
    TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcSendOnly);
    h.bth.psn = rng() & 0xffffff;
    std::vector<std::byte> payload(rng() % 4097);
    for (auto& b : payload) b = static_cast<std::byte>(rng());
    h.bth.pad_count = pad_for(payload.size());
    std::vector<std::byte> f0(8192);
    f0.resize(build_frame(f0, o, h, payload));
    const std::size_t roce_bytes = f0.size() - 28;
    const Ipv4IdIcrcDelta delta(roce_bytes);
    const std::uint32_t icrc0 = load_le32(f0, f0.size() - 4);  // DF set, id 0
    for (const std::uint16_t id : {std::uint16_t{0}, std::uint16_t{1}, std::uint16_t{0x4000},
                                   static_cast<std::uint16_t>(rng())}) {
      o.ipv4_df = false;
      o.ipv4_id = id;
      std::vector<std::byte> f(8192);
      f.resize(build_frame(f, o, h, payload));
      ASSERT_EQ(std::to_integer<unsigned>(f[6]) & 0x40u, 0u);
      const std::uint32_t icrc = load_le32(f, f.size() - 4);
      ASSERT_EQ(icrc,
                reference_icrc(ConstBytes(f).first(28), ConstBytes(f).subspan(28, roce_bytes - 4)));
      EXPECT_EQ(icrc, icrc0 ^ delta.df_clear() ^ delta(id));
      EXPECT_FALSE(delta.solve(icrc ^ icrc0).has_value()) << "id " << id;
      const auto found = delta.solve(icrc ^ icrc0 ^ delta.df_clear());
      ASSERT_TRUE(found.has_value());
      EXPECT_EQ(*found, id);
    }
    o.ipv4_df = true;
    o.ipv4_id = 0;
  }
}

TEST(Icrc, VerifyRejectsTooShortInput) {
  const std::vector<std::byte> ip_udp(28, std::byte{0x45});
  const std::vector<std::byte> tiny(15);
  EXPECT_FALSE(icrc_verify(ip_udp, tiny));
}

// The packet's IP/UDP header with the identification cleared, as a UDP receiver rebuilds it.
std::vector<std::byte> without_id(ConstBytes ip_udp) {
  std::vector<std::byte> h(ip_udp.begin(), ip_udp.end());
  h[4] = h[5] = std::byte{0};
  return h;
}

TEST(IcrcIdentification, RecoversEveryGoldenIpv4PacketsIdentification) {
  // rxe sends nonzero identifications: each golden IPv4 packet's is found from its ICRC.
  std::size_t n = 0, nonzero = 0;
  for (const auto& fr : test::load_all_golden()) {
    auto f = parse_frame(LinkType::kEthernet, fr.view());
    ASSERT_TRUE(f.ok()) << fr.file << " #" << fr.index;
    if (f->v6) continue;
    const auto id = static_cast<std::uint16_t>((std::to_integer<unsigned>(f->ip_udp[4]) << 8) |
                                               std::to_integer<unsigned>(f->ip_udp[5]));
    const auto h = without_id(f->ip_udp);
    const auto found = icrc_recover_ipv4_identification(h, f->roce.bytes);
    ASSERT_TRUE(found.has_value()) << fr.file << " #" << fr.index;
    ASSERT_EQ(*found, id) << fr.file << " #" << fr.index;
    ++n;
    if (id != 0) ++nonzero;
  }
  EXPECT_GT(n, 1000u);
  EXPECT_GT(nonzero, 1000u);
}

TEST(IcrcIdentification, EveryIdentificationOfABuiltPacketIsFound) {
  OuterHeaders o;
  o.src = IpAddress::v4(0x0a630001);
  o.dst = IpAddress::v4(0x0a63000b);
  o.src_port = 0xc123;
  TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcSendOnly);
  h.bth.dest_qpn = 0x11;
  h.bth.psn = 0x123456;
  std::vector<std::byte> payload(777);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>(i * 13);
  std::vector<std::byte> frame(2048);
  for (std::uint32_t id = 0; id <= 0xffff; id += 257) {
    o.ipv4_id = static_cast<std::uint16_t>(id);
    frame.resize(2048);
    frame.resize(build_frame(frame, o, h, payload));
    auto f = parse_frame(LinkType::kEthernet, frame);
    ASSERT_TRUE(f.ok());
    const auto found = icrc_recover_ipv4_identification(without_id(f->ip_udp), f->roce.bytes);
    ASSERT_TRUE(found.has_value()) << id;
    EXPECT_EQ(*found, id);
  }
}

TEST(IcrcIdentification, CorruptionOutsideTheIdentificationIsStillCaught) {
  // Every single-bit flip of a 1 KiB packet's covered bytes (outside the identification, which
  // the receiver does not know anyway): the ICRC can absorb 16 bits of unknown identification,
  // so a flip passes only if it equals some identification's contribution. Deterministic: the
  // packet is fixed, and the count of such flips is pinned at 0.
  OuterHeaders o;
  o.src = IpAddress::v4(0x7f000001);
  o.dst = IpAddress::v4(0x7f000002);
  o.ipv4_id = 0x4242;
  TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcRdmaWriteOnly);
  h.bth.dest_qpn = 0x12;
  h.reth = Reth{0x1000, 0x77, 1024};
  std::vector<std::byte> payload(1024);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>(i ^ 0x5a);
  std::vector<std::byte> frame(2048);
  frame.resize(build_frame(frame, o, h, payload));
  auto f = parse_frame(LinkType::kEthernet, frame);
  ASSERT_TRUE(f.ok());
  const auto ip_udp = without_id(f->ip_udp);
  std::vector<std::byte> roce(f->roce.bytes.begin(), f->roce.bytes.end());
  std::size_t passed = 0, tried = 0;
  for (std::size_t byte = 0; byte < roce.size(); ++byte) {
    if (byte == 4) continue;  // BTH byte 4 (FECN/BECN/reserved) is masked
    for (int bit = 0; bit < 8; ++bit) {
      roce[byte] ^= std::byte{static_cast<std::uint8_t>(1u << bit)};
      if (icrc_recover_ipv4_identification(ip_udp, roce).has_value()) ++passed;
      ++tried;
      roce[byte] ^= std::byte{static_cast<std::uint8_t>(1u << bit)};
    }
  }
  EXPECT_EQ(passed, 0u) << "of " << tried;
}

// The check hook sees the computed and stored ICRCs and the length, and decides: here the
// identification recovery datapath/udp does, over a packet sent with a nonzero identification.
TEST(PendingIcrc, CheckHookCanAcceptWhatAnIdentificationExplains) {
  OuterHeaders o;
  o.src = IpAddress::v4(0x0a000001);
  o.dst = IpAddress::v4(0x0a000002);
  o.ipv4_id = 0x1234;
  TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcRdmaWriteMiddle);
  std::vector<std::byte> payload(1024, std::byte{0x3c});
  std::vector<std::byte> frame(2048);
  frame.resize(build_frame(frame, o, h, payload));
  const ConstBytes roce = ConstBytes(frame).subspan(42);
  // The receiver's view: identification 0.
  std::vector<std::byte> ip_udp(frame.begin() + 14, frame.begin() + 42);
  ip_udp[4] = ip_udp[5] = std::byte{0};
  struct Recover final : IcrcCheck {
    std::optional<std::uint16_t> found;
    bool accepts(std::size_t roce_bytes, std::uint32_t computed, std::uint32_t stored) override {
      found = Ipv4IdIcrcDelta(roce_bytes).solve(computed ^ stored);
      return found.has_value();
    }
  } recover;
  const ConstBytes pl = roce.subspan(12, payload.size());
  {
    PendingIcrc plain(ip_udp, roce, pl, nullptr);
    EXPECT_FALSE(plain.finish());
  }
  PendingIcrc p(ip_udp, roce, pl, &recover);
  std::vector<std::byte> out(payload.size());
  p.copy_payload(out);
  EXPECT_TRUE(p.finish());
  EXPECT_EQ(recover.found, std::optional<std::uint16_t>(0x1234));
  EXPECT_EQ(out, payload);
}

TEST(IcrcIdentification, RejectsShortInputAndIpv6) {
  std::vector<std::byte> ip_udp(28), small(15);
  ip_udp[0] = std::byte{0x45};
  EXPECT_FALSE(icrc_recover_ipv4_identification(ip_udp, small).has_value());
  std::vector<std::byte> v6(48);
  std::vector<std::byte> roce(40);
  EXPECT_FALSE(icrc_recover_ipv4_identification(v6, roce).has_value());
}

// `uroce doctor` names the kernel that runs: the selected one, or ISA-L without one.
TEST(Crc32Implementation, NamesTheSelectedKernel) {
  const std::string name = crc32_implementation();
  const crc32_fold::Kernel k = crc32_fold::selected();
  if (k == crc32_fold::Kernel::kNone) {
    EXPECT_EQ(name.rfind("ISA-L", 0), 0u) << name;
  } else {
    EXPECT_EQ(name.rfind(std::string(crc32_fold::kernel_name(k)) + ":", 0), 0u) << name;
  }
}

}  // namespace
}  // namespace uroce::wire

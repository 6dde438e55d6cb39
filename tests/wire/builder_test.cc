#include "wire/builder.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace uroce::wire {
namespace {

using Bytes = std::vector<std::byte>;

// Random values for every field; fields of headers the opcode lacks stay zero, since decoding
// cannot see them.
TransportHeaders random_headers(Opcode op, std::mt19937_64& rng) {
  const OpcodeInfo& info = opcode_info(op);
  TransportHeaders h;
  h.bth.opcode = info.value;
  h.bth.solicited = rng() & 1;
  h.bth.mig_req = rng() & 1;
  h.bth.pkey = static_cast<std::uint16_t>(rng());
  h.bth.fecn = rng() & 1;
  h.bth.becn = rng() & 1;
  h.bth.dest_qpn = static_cast<std::uint32_t>(rng() & 0xffffff);
  h.bth.ack_req = rng() & 1;
  h.bth.psn = static_cast<std::uint32_t>(rng() & 0xffffff);
  if (info.has(ExtHeader::kFeth)) {
    h.feth = Feth{static_cast<std::uint8_t>(rng() & 0xf), static_cast<std::uint8_t>(rng() & 3)};
  }
  if (info.has(ExtHeader::kReth)) {
    h.reth = Reth{rng(), static_cast<std::uint32_t>(rng()), static_cast<std::uint32_t>(rng())};
  }
  if (info.has(ExtHeader::kAeth)) {
    h.aeth = Aeth{static_cast<std::uint8_t>(rng()), static_cast<std::uint32_t>(rng() & 0xffffff)};
  }
  if (info.has(ExtHeader::kAtomicEth)) {
    h.atomic_eth = AtomicEth{rng(), static_cast<std::uint32_t>(rng()), rng(), rng()};
  }
  if (info.has(ExtHeader::kAtomicAckEth)) h.atomic_ack_orig = rng();
  if (info.has(ExtHeader::kDeth)) {
    h.deth = Deth{static_cast<std::uint32_t>(rng()), static_cast<std::uint32_t>(rng() & 0xffffff)};
  }
  if (info.has(ExtHeader::kImmDt)) h.imm_data = static_cast<std::uint32_t>(rng());
  if (info.has(ExtHeader::kIeth)) h.ieth_rkey = static_cast<std::uint32_t>(rng());
  if (info.has(ExtHeader::kXrcEth)) h.xrc_srqn = static_cast<std::uint32_t>(rng() & 0xffffff);
  return h;
}

std::vector<std::size_t> payload_sizes(const OpcodeInfo& info) {
  if (!info.is(kFlagPayload)) return {0};
  if (!info.is(kFlagLast)) return {256, 1024, 4096};  // First/Middle: one path MTU
  if (!info.is(kFlagFirst)) return {1, 2, 3, 4, 1023, 4096};
  return {0, 1, 2, 3, 4, 5, 64, 1024, 4096};
}

TEST(Builder, BuildThenParseGivesBackEveryField) {
  std::mt19937_64 rng(4791);
  int built = 0;
  for (Opcode op : kAllOpcodes) {
    const OpcodeInfo& info = opcode_info(op);
    for (bool v6 : {false, true}) {
      for (std::size_t len : payload_sizes(info)) {
        SCOPED_TRACE(std::string(info.name) + (v6 ? " v6 " : " v4 ") + std::to_string(len));
        const TransportHeaders h = random_headers(op, rng);
        Bytes payload(len);
        for (auto& b : payload) b = static_cast<std::byte>(rng());
        OuterHeaders o;
        o.src.v6 = o.dst.v6 = v6;
        o.src.bytes[3] = 1;
        o.dst.bytes[3] = 2;
        o.traffic_class = 0x02;
        o.ttl = 1;
        o.src_port = 0xc123;
        Bytes frame(8192);
        frame.resize(build_frame(frame, o, h, payload));
        EXPECT_EQ(frame.size(), outer_size(o) + roce_size(info, len));

        auto f = parse_frame(LinkType::kEthernet, frame);
        ASSERT_TRUE(f.ok()) << drop_reason_name(f.error());
        TransportHeaders want = h;
        want.bth.pad_count = pad_for(len);
        EXPECT_EQ(decode_headers(f->roce), want);
        EXPECT_EQ(Bytes(f->roce.payload.begin(), f->roce.payload.end()), payload);
        EXPECT_EQ(f->roce.pad, pad_for(len));
        EXPECT_EQ(f->roce.op, &info);
        EXPECT_EQ(f->udp.src_port, 0xc123);
        EXPECT_EQ(f->udp.dst_port, kRoceV2Port);
        EXPECT_EQ(f->udp.checksum, 0);
        if (v6) {
          EXPECT_EQ(f->ipv6.src, o.src);
          EXPECT_EQ(f->ipv6.hop_limit, 1);
          EXPECT_EQ(f->ipv6.traffic_class, 0x02);
        } else {
          EXPECT_EQ(f->ipv4.dst, o.dst);
          EXPECT_TRUE(f->ipv4.dont_fragment);
          EXPECT_EQ(f->ipv4.identification, 0);
          EXPECT_EQ(f->ipv4.checksum, ipv4_header_checksum(ConstBytes(frame).subspan(14, 20)));
        }
        ++built;
      }
    }
  }
  EXPECT_GT(built, 300);
}

TEST(Builder, PadBytesAreZero) {
  TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcSendOnly);
  Bytes out(64, std::byte{0xee});
  const Bytes payload(5, std::byte{0x11});
  const std::size_t n = write_roce(out, h, payload);
  EXPECT_EQ(n, 12u + 5 + 3 + 4);
  EXPECT_EQ(BthView(out).pad_count(), 3);
  for (std::size_t i = 17; i < 20; ++i) EXPECT_EQ(out[i], std::byte{0}) << i;
}

TEST(Builder, WriteBthHeadersWritesWhatWriteHeadersWritesWithZeroExtensionHeaders) {
  // Every opcode, random BTH fields, an SRQ number and payload lengths of every pad count, over
  // buffers that held other bytes before: the same header bytes and length as write_headers.
  std::mt19937_64 rng(40);
  int compared = 0;
  for (Opcode op : kAllOpcodes) {
    const OpcodeInfo& info = opcode_info(op);
    for (std::size_t payload : {0u, 1u, 2u, 3u, 64u, 4095u}) {
      TransportHeaders h = random_headers(op, rng);
      const TransportHeaders full = h;
      const Bth bth = h.bth;
      const std::uint32_t srqn = static_cast<std::uint32_t>(rng());
      h = TransportHeaders{};
      h.bth = bth;
      h.xrc_srqn = srqn & 0xffffffu;
      Bytes want(64, std::byte{0xee});
      Bytes got(64, std::byte{0x5a});
      // Stale bytes of an earlier packet's headers in the buffer the new one is written to.
      write_headers(got, full, payload);
      const std::size_t n = write_headers(want, h, payload);
      ASSERT_EQ(write_bth_headers(got, info, bth, srqn, payload), n) << info.name;
      EXPECT_EQ(Bytes(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(n)),
                Bytes(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(n)))
          << info.name << " payload " << payload;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 63 * 6);
}

TEST(Builder, RxeUdpSourcePortConvention) {
  // rdma-core's ibv_flow_label_to_udp_sport and rxe's flow label hash (roce-facts.md).
  EXPECT_EQ(flow_label_to_udp_sport(0), 0xc000);
  EXPECT_EQ(flow_label_to_udp_sport(0xfffff), 0xc000 | (0x3fff ^ 0x3f));
  EXPECT_EQ(rxe_flow_label(0x11, 0x12), (0x11u * 0x12u) & 0xfffff);
  const std::uint32_t fl = rxe_flow_label(0x123456, 0x654321);
  EXPECT_LE(fl, 0xfffffu);
  EXPECT_EQ(flow_label_to_udp_sport(fl) & 0xc000, 0xc000);
}

TEST(BuilderDeathTest, UnknownOpcodeIsABug) {
  TransportHeaders h;
  h.bth.opcode = 0x15;
  Bytes out(64);
  EXPECT_DEATH(write_roce(out, h, {}), "assertion failed");
}

}  // namespace
}  // namespace uroce::wire

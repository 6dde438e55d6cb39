// rxe's form of a FLUSH's ICRC (wire/icrc.h, icrc_rxe_continue; docs/INTEROP.md, "FLUSH and
// rxe"), checked against a model of the kernel's code written here from its description, not
// from uroce's: drivers/infiniband/sw/rxe/rxe_icrc.c (rxe_icrc_hdr, rxe_icrc_check,
// rxe_icrc_generate), rxe_hdr.h (payload_addr, payload_size) and rxe_opcode.c (the length and
// offsets of each opcode's entry; IB_OPCODE_RC_FLUSH has no RXE_PAYLOAD offset).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "wire/builder.h"
#include "wire/icrc.h"
#include "wire/packet.h"

namespace uroce::wire {
namespace {

// The kernel's crc32_le(): the raw register, no inversion in or out.
std::uint32_t crc32_le(std::uint32_t crc, const std::uint8_t* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1u) != 0 ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
  }
  return crc;
}

// rxe_icrc_generate() for a packet whose rxe_opcode[] entry has header length `length` and
// payload offset `payload_offset` (RXE_PAYLOAD; 0 for FLUSH): `frame` is the IP header, the UDP
// header, then the BTH through the ICRC; returns the 4 ICRC bytes as rxe stores them.
std::vector<std::uint8_t> rxe_icrc_generate(const std::vector<std::uint8_t>& frame, bool v6,
                                            std::size_t length, std::size_t payload_offset) {
  const std::size_t hdr_size = (v6 ? 40 : 20) + 8;  // sizeof(iphdr or ipv6hdr) + udphdr
  // rxe_icrc_hdr(): pshdr = IP, UDP and BTH, copied and masked.
  std::vector<std::uint8_t> pshdr(frame.begin(), frame.begin() + hdr_size + 12);
  if (v6) {
    pshdr[0] |= 0x0f;            // priority = 0xf (the traffic class's high nibble)
    pshdr[1] = 0xff;             // the traffic class's low nibble and the flow label
    pshdr[2] = pshdr[3] = 0xff;  // flow_lbl[] = 0xff
    pshdr[7] = 0xff;             // hop_limit
  } else {
    pshdr[1] = 0xff;               // tos
    pshdr[8] = 0xff;               // ttl
    pshdr[10] = pshdr[11] = 0xff;  // check = CSUM_MANGLED_0 (0xffff)
  }
  pshdr[hdr_size - 2] = pshdr[hdr_size - 1] = 0xff;  // udph->check
  pshdr[hdr_size + 4] = 0xff;      // bth->qpn |= ~BTH_QPN_MASK: FECN, BECN, resv6a
  std::uint32_t crc = 0xdebb20e3;  // rxe's seed: the 8 bytes of 0xff of the masked LRH
  crc = crc32_le(crc, pshdr.data(), pshdr.size());
  const std::uint8_t* hdr = frame.data() + hdr_size;  // pkt->hdr: the BTH
  crc = crc32_le(crc, hdr + 12, length - 12);
  // payload_addr() = hdr + offset[RXE_PAYLOAD]; payload_size() + bth_pad() = paylen - offset -
  // ICRC, paylen being the UDP payload's length.
  const std::size_t paylen = frame.size() - hdr_size;
  crc = crc32_le(crc, hdr + payload_offset, paylen - payload_offset - 4);
  crc = ~crc;
  // *icrcp = ~icrc in the CPU's (little-endian) order.
  return {static_cast<std::uint8_t>(crc), static_cast<std::uint8_t>(crc >> 8),
          static_cast<std::uint8_t>(crc >> 16), static_cast<std::uint8_t>(crc >> 24)};
}

TransportHeaders flush_headers() {
  TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcFlush);
  h.bth.dest_qpn = 0x000123;
  h.bth.psn = 0xabcdef;
  h.bth.ack_req = true;
  h.bth.fecn = true;  // masked in the header part, covered as is in the second
  h.feth = Feth{kFlushGlobal, kFlushRange};
  h.reth = Reth{0x00007f1234560000, 0x5a5a01, 4096};
  return h;
}

OuterHeaders outer(bool v6) {
  OuterHeaders o;
  o.ethernet = false;
  o.src = v6 ? IpAddress{true, {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}}
             : IpAddress::v4(0x0a7b0002);
  o.dst = v6 ? IpAddress{true, {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}}
             : IpAddress::v4(0x0a7b0001);
  o.src_port = 0xc123;
  o.traffic_class = 0x02;
  o.ttl = 1;
  o.flow_label = 0x12345;
  o.ipv4_id = 0x7b3c;  // rxe's IPv4 packets carry __ip_select_ident()'s
  return o;
}

// A frame (IP through ICRC, no Ethernet) of `h` with `payload`, with the IBTA's ICRC.
std::vector<std::uint8_t> frame_of(const OuterHeaders& o, const TransportHeaders& h,
                                   const std::vector<std::uint8_t>& payload = {}) {
  std::vector<std::byte> f(256);
  f.resize(build_frame(f, o, h, as_bytes(payload.data(), payload.size())));
  std::vector<std::uint8_t> out(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) out[i] = static_cast<std::uint8_t>(f[i]);
  return out;
}

std::size_t ip_udp_bytes(bool v6) { return (v6 ? 40 : 20) + 8; }

void store_icrc(std::vector<std::uint8_t>& frame, const std::vector<std::uint8_t>& icrc) {
  std::copy(icrc.begin(), icrc.end(), frame.end() - 4);
}

std::optional<IcrcForm> match(const std::vector<std::uint8_t>& frame, bool v6) {
  const ConstBytes all = as_bytes(frame.data(), frame.size());
  return icrc_match(all.first(ip_udp_bytes(v6)), all.subspan(ip_udp_bytes(v6)));
}

TEST(RxeFlushIcrc, MatchesTheKernelsComputationOverIpv4AndIpv6) {
  for (const bool v6 : {false, true}) {
    std::vector<std::uint8_t> f = frame_of(outer(v6), flush_headers());
    ASSERT_EQ(f.size(), ip_udp_bytes(v6) + 32 + 4);
    const std::vector<std::uint8_t> ibta(f.end() - 4, f.end());
    // With the RXE_PAYLOAD offset rxe gives every other opcode (the header length), rxe's
    // computation is the IBTA's: the model is right about the masks and the seed.
    EXPECT_EQ(rxe_icrc_generate(f, v6, 32, 32), ibta) << v6;
    const std::vector<std::uint8_t> rxe = rxe_icrc_generate(f, v6, 32, 0);
    EXPECT_NE(rxe, ibta);
    const ConstBytes all = as_bytes(f.data(), f.size());
    const std::uint32_t ours =
        icrc_rxe_compute(all.first(ip_udp_bytes(v6)), all.subspan(ip_udp_bytes(v6), 32));
    EXPECT_EQ(ours, load_le32(as_bytes(rxe.data(), 4), 0)) << v6;
    EXPECT_EQ(match(f, v6), IcrcForm::kIbta);
    store_icrc(f, rxe);
    EXPECT_EQ(match(f, v6), IcrcForm::kRxe) << v6;
  }
}

TEST(RxeFlushIcrc, CorruptionFailsBothForms) {
  std::vector<std::uint8_t> f = frame_of(outer(false), flush_headers());
  store_icrc(f, rxe_icrc_generate(f, false, 32, 0));
  ASSERT_EQ(match(f, false), IcrcForm::kRxe);
  // Every single bit the ICRC covers, in either part (the masked fields aside: TOS, TTL, the
  // checksums, BTH byte 4, which rxe's second pass covers as they are).
  const std::size_t bth = ip_udp_bytes(false);
  // Byte 0 (the IP version) is left alone: another version is another header length.
  for (std::size_t byte = 1; byte + 4 < f.size(); ++byte) {
    if (byte == 1 || byte == 8 || byte == 10 || byte == 11 || byte == 26 || byte == 27) continue;
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<std::uint8_t> bad = f;
      bad[byte] ^= static_cast<std::uint8_t>(1u << bit);
      EXPECT_FALSE(match(bad, false).has_value()) << byte << " " << bit;
    }
  }
  // BTH byte 4 is masked in the header part but covered by rxe's second pass.
  std::vector<std::uint8_t> becn = f;
  becn[bth + 4] ^= 0x40;
  EXPECT_FALSE(match(becn, false).has_value());
  // The ICRC itself.
  std::vector<std::uint8_t> icrc = f;
  icrc.back() ^= 0x01;
  EXPECT_FALSE(match(icrc, false).has_value());
}

// The allowance is RC FLUSH's alone: rxe's rule applied to any other opcode (as if its entry
// lacked the payload offset too) never passes.
TEST(RxeFlushIcrc, NeverAcceptedForAnotherOpcode) {
  std::size_t checked = 0;
  for (const Opcode op : kAllOpcodes) {
    if (op == Opcode::kRcFlush) continue;
    const OpcodeInfo& info = opcode_info(op);
    TransportHeaders h = flush_headers();
    h.bth.opcode = static_cast<std::uint8_t>(op);
    std::vector<std::uint8_t> payload;
    if (info.is(kFlagPayload)) payload.assign(info.is(kFlagAtomicWrite) ? 8 : 13, 0x3c);
    std::vector<std::uint8_t> f = frame_of(outer(false), h, payload);
    ASSERT_EQ(match(f, false), IcrcForm::kIbta) << info.name;
    store_icrc(f, rxe_icrc_generate(f, false, info.header_bytes, 0));
    EXPECT_FALSE(match(f, false).has_value()) << info.name;
    EXPECT_TRUE(icrc_rxe_opcode(as_bytes(f.data() + ip_udp_bytes(false), 12)) == nullptr);
    ++checked;
  }
  EXPECT_EQ(checked, kAllOpcodes.size() - 1);
}

TEST(RxeFlushIcrc, ParseFrameAcceptsItUnlessAskedNotTo) {
  std::vector<std::uint8_t> f = frame_of(outer(false), flush_headers());
  store_icrc(f, rxe_icrc_generate(f, false, 32, 0));
  const ConstBytes all = as_bytes(f.data(), f.size());
  auto frame = parse_frame(LinkType::kIpv4, all);
  ASSERT_TRUE(frame.ok()) << drop_reason_name(frame.error());
  EXPECT_TRUE(frame->icrc_checked);
  EXPECT_EQ(frame->icrc_form, IcrcForm::kRxe);
  EXPECT_EQ(frame->roce.op->opcode(), Opcode::kRcFlush);
  FrameOptions strict;
  strict.accept_rxe_icrc = false;
  auto refused = parse_frame(LinkType::kIpv4, all, strict);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error(), DropReason::kBadIcrc);
  std::vector<std::uint8_t> bad = f;
  bad[ip_udp_bytes(false) + 20] ^= 0x10;  // the RETH's address
  auto corrupted = parse_frame(LinkType::kIpv4, as_bytes(bad.data(), bad.size()));
  ASSERT_FALSE(corrupted.ok());
  EXPECT_EQ(corrupted.error(), DropReason::kBadIcrc);
}

// A receiver on a UDP socket does not see the IPv4 identification that rxe's ICRC covers: the
// identification's part in rxe's form is Ipv4IdIcrcDelta's for icrc_rxe_delta_bytes().
TEST(RxeFlushIcrc, IdentificationDeltaOfRxesFormRecoversRxesIdentification) {
  OuterHeaders o = outer(false);
  std::vector<std::uint8_t> f = frame_of(o, flush_headers());
  store_icrc(f, rxe_icrc_generate(f, false, 32, 0));  // with identification 0x7b3c
  const std::uint32_t stored = load_le32(as_bytes(f.data() + f.size() - 4, 4), 0);
  o.ipv4_id = 0;
  const std::vector<std::uint8_t> f0 = frame_of(o, flush_headers());
  const ConstBytes all0 = as_bytes(f0.data(), f0.size());
  const std::uint32_t rxe0 = icrc_rxe_compute(all0.first(28), all0.subspan(28, 32));
  const OpcodeInfo& op = opcode_info(Opcode::kRcFlush);
  EXPECT_EQ(icrc_rxe_delta_bytes(op, 36), 68u);
  const Ipv4IdIcrcDelta delta(icrc_rxe_delta_bytes(op, 36));
  EXPECT_EQ(delta(0x7b3c), rxe0 ^ stored);
  EXPECT_EQ(delta.solve(rxe0 ^ stored), std::optional<std::uint16_t>(0x7b3c));
  // The IBTA form's delta for this length does not explain it.
  EXPECT_NE(Ipv4IdIcrcDelta(36)(0x7b3c), rxe0 ^ stored);
}

}  // namespace
}  // namespace uroce::wire

// libFuzzer target for the wire parser: parse_roce() and parse_frame() on arbitrary bytes.
//
// Input: byte 0 selects the entry point, the rest is the packet (scripts/fuzz-seeds.py numbers
// its seeds the same way; keep the two in step):
//   selector % 13 == 0           parse_roce(rest)
//   selector % 13 == 1 + 2*i     parse_frame(kLinkTypes[i], rest, verify_icrc = true)
//   selector % 13 == 2 + 2*i     parse_frame(kLinkTypes[i], rest, verify_icrc = false)
//
// Besides "no sanitizer report and no UROCE_CHECK failure inside the parser", every accepted
// packet must satisfy the invariants checked below; a violation aborts through UROCE_CHECK, which
// libFuzzer reports as a crash with the input that caused it.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/assert.h"
#include "base/bytes.h"
#include "wire/builder.h"
#include "wire/icrc.h"
#include "wire/opcode.h"
#include "wire/packet.h"

namespace {

using namespace uroce;
using namespace uroce::wire;

constexpr std::array<LinkType, 6> kLinkTypes = {
    LinkType::kEthernet, LinkType::kRaw,  LinkType::kLinuxSll,
    LinkType::kIpv4,     LinkType::kIpv6, LinkType::kLinuxSll2,
};
constexpr unsigned kSelectorCount = 1 + 2 * kLinkTypes.size();

bool inside(ConstBytes inner, ConstBytes outer) {
  // Compared as addresses: the parser must hand out subspans of what it was given.
  const auto in_begin = reinterpret_cast<std::uintptr_t>(inner.data());
  const auto out_begin = reinterpret_cast<std::uintptr_t>(outer.data());
  return in_begin >= out_begin && in_begin + inner.size() <= out_begin + outer.size();
}

// Which bits of BTH..pad survive decode_headers() + write_roce(). The builder writes zero where
// the mask is zero, and reproduces every other bit:
// - BTH byte 4: FECN and BECN kept, the 6 reserved bits zeroed (IBTA 9.2: reserved, 0 on send).
// - BTH byte 8: AckReq kept, the 7 reserved bits zeroed.
// - DETH byte 4: reserved, zeroed.
// - XRCETH byte 0: reserved, zeroed.
// - The CNP's 16 reserved bytes (RoCEv2 A17.9.3): zeroed.
// - Pad bytes: the builder writes zeros; the parser does not require them to be zero.
// The pad count itself is reproduced exactly: headers and the whole packet are 4-byte multiples
// (parse_roce checks the length), so payload + pad is a multiple of 4 and pad_for(payload) equals
// the pad count the packet carried. TVer is 0 in every accepted packet, so it is reproduced too.
std::vector<std::uint8_t> builder_mask(const RocePacket& pkt) {
  const OpcodeInfo& op = *pkt.op;
  const std::size_t n = pkt.bytes.size() - kIcrcBytes;
  std::vector<std::uint8_t> mask(n, 0xff);
  mask[4] = 0xc0;
  mask[8] = 0x80;
  if (op.has(ExtHeader::kDeth)) mask[op.offset_of(ExtHeader::kDeth) + 4] = 0;
  if (op.has(ExtHeader::kXrcEth)) mask[op.offset_of(ExtHeader::kXrcEth)] = 0;  // reserved byte
  if (op.has(ExtHeader::kFeth)) {  // bits 31..6 reserved: the builder writes zeros
    const std::size_t off = op.offset_of(ExtHeader::kFeth);
    mask[off] = mask[off + 1] = mask[off + 2] = 0;
    mask[off + 3] = 0x3f;
  }
  if (op.has(ExtHeader::kCnpReserved)) {
    const std::size_t off = op.offset_of(ExtHeader::kCnpReserved);
    const auto rsvd = kExtHeaderBytes[static_cast<unsigned>(ExtHeader::kCnpReserved)];
    for (std::size_t i = 0; i < rsvd; ++i) mask[off + i] = 0;
  }
  for (std::size_t i = n - pkt.pad; i < n; ++i) mask[i] = 0;
  return mask;
}

void check_roce(const RocePacket& pkt, ConstBytes input) {
  // The opcode is known, and it is the one in the BTH.
  UROCE_CHECK(pkt.op != nullptr);
  UROCE_CHECK(pkt.op->valid);
  UROCE_CHECK(pkt.bytes.size() >= kBthBytes + kIcrcBytes);
  UROCE_CHECK(opcode_info(pkt.bth().opcode()) == pkt.op);
  const OpcodeInfo& op = *pkt.op;

  // Every span lies inside the input; the payload starts right after the headers.
  UROCE_CHECK(inside(pkt.bytes, input));
  UROCE_CHECK(inside(pkt.payload, pkt.bytes));
  UROCE_CHECK(pkt.payload.data() == pkt.bytes.data() + op.header_bytes);

  // Lengths add up: headers, payload, pad and ICRC are the whole packet.
  UROCE_CHECK(op.header_bytes + pkt.payload.size() + pkt.pad + kIcrcBytes == pkt.bytes.size());
  UROCE_CHECK(pkt.pad == pkt.bth().pad_count());
  UROCE_CHECK(pkt.pad <= 3);
  UROCE_CHECK(pkt.payload.size() <= kMaxPayloadBytes);
  if (!op.is(kFlagPayload)) UROCE_CHECK(pkt.payload.empty() && pkt.pad == 0);

  // Round trip: decoding the headers and building the packet again gives back the same bytes,
  // except where the builder zeroes reserved bits. The buffer has exactly the packet's size, so
  // that AddressSanitizer catches any write past roce_size().
  const TransportHeaders h = decode_headers(pkt);
  UROCE_CHECK(h.bth.opcode == op.value);
  std::vector<std::byte> rebuilt(pkt.bytes.size());
  UROCE_CHECK(roce_size(op, pkt.payload.size()) == pkt.bytes.size());
  UROCE_CHECK(write_roce(rebuilt, h, pkt.payload) == pkt.bytes.size());
  const std::vector<std::uint8_t> mask = builder_mask(pkt);
  for (std::size_t i = 0; i < mask.size(); ++i) {
    const auto original = static_cast<std::uint8_t>(pkt.bytes[i]);
    UROCE_CHECK(static_cast<std::uint8_t>(rebuilt[i]) == (original & mask[i]));
  }

  // The rebuilt packet parses to the same headers (the ICRC bytes are not part of the check).
  auto again = parse_roce(rebuilt);
  UROCE_CHECK(again.ok());
  UROCE_CHECK(again->op == pkt.op);
  UROCE_CHECK(again->pad == pkt.pad);
  UROCE_CHECK(again->payload.size() == pkt.payload.size());
  UROCE_CHECK(decode_headers(*again) == h);
}

bool same_packet(const RocePacket& a, const RocePacket& b) {
  return a.op == b.op && a.pad == b.pad && a.bytes.data() == b.bytes.data() &&
         a.bytes.size() == b.bytes.size() && a.payload.data() == b.payload.data() &&
         a.payload.size() == b.payload.size();
}

void check_frame(const Frame& frame, ConstBytes input, bool verified) {
  UROCE_CHECK(frame.icrc_checked == verified);
  check_roce(frame.roce, input);

  // ip_udp is the IP header and the UDP header, directly followed by the RoCE bytes.
  const std::size_t ip_bytes = frame.v6 ? kIpv6Bytes : kIpv4Bytes;
  UROCE_CHECK(frame.ip_udp.size() == ip_bytes + kUdpBytes);
  UROCE_CHECK(inside(frame.ip_udp, input));
  UROCE_CHECK(frame.ip_udp.data() + frame.ip_udp.size() == frame.roce.bytes.data());
  UROCE_CHECK((static_cast<unsigned>(frame.ip_udp[0]) >> 4) == (frame.v6 ? 6u : 4u));
  UROCE_CHECK(frame.udp.dst_port == kRoceV2Port);
  UROCE_CHECK(frame.udp.length == kUdpBytes + frame.roce.bytes.size());
  if (frame.v6) {
    UROCE_CHECK(frame.ipv6.payload_length == frame.udp.length);
  } else {
    UROCE_CHECK(frame.ipv4.total_length == kIpv4Bytes + frame.udp.length);
  }

  // parse_frame() ends in parse_roce() on the UDP payload: both agree.
  auto roce = parse_roce(frame.roce.bytes);
  UROCE_CHECK(roce.ok());
  UROCE_CHECK(same_packet(*roce, frame.roce));

  if (verified) {
    const std::size_t n = frame.roce.bytes.size() - kIcrcBytes;
    const bool ibta = icrc_compute(frame.ip_udp, frame.roce.bytes.first(n)) == frame.roce.icrc();
    UROCE_CHECK(ibta == (frame.icrc_form == IcrcForm::kIbta));
    // rxe's form stands only for an opcode that has the quirk (RC FLUSH), never for another.
    if (!ibta) {
      UROCE_CHECK(frame.roce.op->is(kFlagRxeIcrc));
      UROCE_CHECK(icrc_rxe_compute(frame.ip_udp, frame.roce.bytes.first(n)) == frame.roce.icrc());
    }
  }
}

void fuzz_frame(LinkType link, ConstBytes input, bool verify) {
  const auto frame = parse_frame(link, input, FrameOptions{verify});
  const auto other = parse_frame(link, input, FrameOptions{!verify});
  // Checking the ICRC only ever turns an accepted frame into a kBadIcrc drop: a frame passes
  // with verification exactly when it passes without it and its stored ICRC is right (the
  // IBTA's, or rxe's for RC FLUSH).
  const auto& with = verify ? frame : other;
  const auto& without = verify ? other : frame;
  if (without.ok()) {
    const RocePacket& pkt = without->roce;
    const std::size_t n = pkt.bytes.size() - kIcrcBytes;
    const bool icrc_ok = icrc_compute(without->ip_udp, pkt.bytes.first(n)) == pkt.icrc() ||
                         (pkt.op->is(kFlagRxeIcrc) &&
                          icrc_rxe_compute(without->ip_udp, pkt.bytes.first(n)) == pkt.icrc());
    UROCE_CHECK(with.ok() == icrc_ok);
    if (!icrc_ok) UROCE_CHECK(with.error() == DropReason::kBadIcrc);
  } else {
    UROCE_CHECK(!with.ok());
  }
  if (with.ok()) {
    UROCE_CHECK(same_packet(with->roce, without->roce));
    UROCE_CHECK(with->ip_udp.data() == without->ip_udp.data());
  }

  if (frame.ok()) check_frame(*frame, input, verify);
  if (other.ok()) check_frame(*other, input, !verify);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const unsigned selector = data[0] % kSelectorCount;
  const ConstBytes input = as_bytes(data + 1, size - 1);
  if (selector == 0) {
    auto pkt = parse_roce(input);
    if (pkt.ok()) check_roce(*pkt, input);
    return 0;
  }
  const unsigned frame_selector = selector - 1;
  fuzz_frame(kLinkTypes[frame_selector / 2], input, frame_selector % 2 == 0);
  return 0;
}

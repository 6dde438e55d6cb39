#include "wire/packet.h"

#include <optional>

#include "wire/icrc.h"

namespace uroce::wire {

namespace {

struct DropInfo {
  std::string_view name;
  std::string_view text;
};

constexpr DropInfo kDropInfo[] = {
#define UROCE_DROP(e, name, text) {name, text},
#include "wire/drop_reasons.def"
#undef UROCE_DROP
};

using Out = Result<RocePacket, DropReason>;
using FrameOut = Result<Frame, DropReason>;

}  // namespace

std::string_view drop_reason_name(DropReason r) {
  return kDropInfo[static_cast<std::size_t>(r)].name;
}
std::string_view drop_reason_text(DropReason r) {
  return kDropInfo[static_cast<std::size_t>(r)].text;
}
bool is_not_roce(DropReason r) {
  return r == DropReason::kNotIp || r == DropReason::kNotUdp || r == DropReason::kNotRoceV2Port;
}

Out parse_roce(ConstBytes p, bool accept_sealed) {
  if (p.size() < kBthBytes + kIcrcBytes) return Err{DropReason::kTruncatedBth};
  const BthView bth(p);
  // rxe hdr_check: only transport version 0 is defined (IBTA 9.2). uroce's sealed packets use
  // 1 and 2 (packet.h), where the caller accepts them.
  std::size_t trailer = 0;
  if (bth.tver() != 0) {
    const bool sealed = bth.tver() == kTverAuthenticated || bth.tver() == kTverEncrypted;
    if (!accept_sealed || !sealed) return Err{DropReason::kBadTver};
    trailer = kSealTrailerBytes;
  }
  const OpcodeInfo* op = opcode_info(bth.opcode());
  if (op == nullptr) return Err{DropReason::kUnknownOpcode};
  if (p.size() < op->header_bytes + trailer + kIcrcBytes) {
    return Err{DropReason::kTruncatedHeaders};
  }
  // Headers, payload + pad and the ICRC are all whole 32-bit words (IBTA 9.2.1.2: pad to a
  // 4-byte multiple).
  if (p.size() % 4 != 0) return Err{DropReason::kUnalignedLength};
  const std::size_t payload_and_pad = p.size() - op->header_bytes - trailer - kIcrcBytes;
  const std::uint8_t pad = bth.pad_count();
  if (pad > payload_and_pad) return Err{DropReason::kBadPadCount};
  const std::size_t payload = payload_and_pad - pad;
  if (!op->is(kFlagPayload)) {
    if (payload_and_pad != 0) return Err{DropReason::kUnexpectedPayload};
  } else {
    const bool first = op->is(kFlagFirst);
    const bool last = op->is(kFlagLast);
    // rxe check_length: First and Middle packets carry exactly one path MTU, a Last packet
    // 1..MTU bytes; only Only packets may be empty. An MTU is a multiple of 4, hence no pad.
    // For READ responses that is the parser's to enforce. A request of the wrong shape must
    // reach its responder instead, which NAKs it Invalid Request (class C) as rxe does: dropped
    // here, it would cost the requester its retry budget.
    if (op->is(kFlagResponse)) {
      if (!(first && last) && payload == 0) return Err{DropReason::kEmptyPayload};
      if (!last && pad != 0) return Err{DropReason::kPaddedNonLastPacket};
    }
    if (payload > kMaxPayloadBytes) return Err{DropReason::kPayloadTooLong};
  }
  RocePacket pkt;
  pkt.op = op;
  pkt.bytes = p;
  pkt.payload = p.subspan(op->header_bytes, payload);
  pkt.pad = pad;
  if (trailer != 0) pkt.trailer = p.subspan(p.size() - kIcrcBytes - trailer, trailer);
  return pkt;
}

bool link_type_supported(int dlt) {
  switch (dlt) {
    case static_cast<int>(LinkType::kEthernet):
    case static_cast<int>(LinkType::kRaw):
    case 12:  // DLT_RAW on some platforms (LINKTYPE_RAW is 101)
    case 14:
    case static_cast<int>(LinkType::kLinuxSll):
    case static_cast<int>(LinkType::kIpv4):
    case static_cast<int>(LinkType::kIpv6):
    case static_cast<int>(LinkType::kLinuxSll2):
      return true;
    default:
      return false;
  }
}

namespace {

// Finds the IP packet inside a link-layer frame. `ether_type` 0 means "read the IP version".
std::optional<DropReason> strip_link(LinkType link, ConstBytes f, Frame& out, ConstBytes& ip,
                                     std::uint16_t& ether_type) {
  ether_type = 0;
  switch (link) {
    case LinkType::kEthernet: {
      if (f.size() < kEthernetBytes) return DropReason::kTruncatedLinkHeader;
      out.has_ethernet = true;
      out.ethernet = decode_ethernet(f);
      std::size_t off = 12;
      ether_type = load_be16(f, off);
      // Up to two VLAN tags (802.1ad outer, 802.1Q inner).
      for (int tags = 0; tags < 2 && (ether_type == kEtherTypeVlan || ether_type == kEtherTypeQinQ);
           ++tags) {
        off += 4;
        if (f.size() < off + 2) return DropReason::kTruncatedLinkHeader;
        ether_type = load_be16(f, off);
      }
      ip = f.subspan(off + 2);
      break;
    }
    case LinkType::kLinuxSll:
      if (f.size() < 16) return DropReason::kTruncatedLinkHeader;
      ether_type = load_be16(f, 14);
      ip = f.subspan(16);
      break;
    case LinkType::kLinuxSll2:
      if (f.size() < 20) return DropReason::kTruncatedLinkHeader;
      ether_type = load_be16(f, 0);
      ip = f.subspan(20);
      break;
    case LinkType::kIpv4:
      ether_type = kEtherTypeIpv4;
      ip = f;
      break;
    case LinkType::kIpv6:
      ether_type = kEtherTypeIpv6;
      ip = f;
      break;
    case LinkType::kRaw:
      ip = f;
      if (ip.empty()) return DropReason::kTruncatedIp;
      switch (load_u8(ip, 0) >> 4) {
        case 4:
          ether_type = kEtherTypeIpv4;
          break;
        case 6:
          ether_type = kEtherTypeIpv6;
          break;
        default:
          return DropReason::kNotIp;
      }
      break;
  }
  if (ether_type != kEtherTypeIpv4 && ether_type != kEtherTypeIpv6) return DropReason::kNotIp;
  return std::nullopt;
}

}  // namespace

FrameOut parse_frame(LinkType link, ConstBytes f, const FrameOptions& opts) {
  Frame out;
  ConstBytes ip;
  std::uint16_t ether_type = 0;
  if (auto drop = strip_link(link, f, out, ip, ether_type)) return Err{*drop};

  ConstBytes udp;  // UDP header and payload, trimmed to the IP length (drops Ethernet padding)
  std::size_t ip_header_bytes = 0;
  if (ether_type == kEtherTypeIpv4) {
    if (ip.size() < kIpv4Bytes) return Err{DropReason::kTruncatedIp};
    if ((load_u8(ip, 0) >> 4) != 4) return Err{DropReason::kBadIpVersion};
    if ((load_u8(ip, 0) & 0xfu) != 5) return Err{DropReason::kIpv4Options};
    out.ipv4 = decode_ipv4(ip);
    if (out.ipv4.total_length > ip.size() || out.ipv4.total_length < kIpv4Bytes + kUdpBytes) {
      return Err{DropReason::kBadIpLength};
    }
    if (out.ipv4.more_fragments || out.ipv4.fragment_offset != 0) {
      return Err{DropReason::kIpFragment};
    }
    if (out.ipv4.protocol != kIpProtoUdp) return Err{DropReason::kNotUdp};
    ip_header_bytes = kIpv4Bytes;
    udp = ip.subspan(kIpv4Bytes, out.ipv4.total_length - kIpv4Bytes);
  } else {
    if (ip.size() < kIpv6Bytes) return Err{DropReason::kTruncatedIp};
    if ((load_u8(ip, 0) >> 4) != 6) return Err{DropReason::kBadIpVersion};
    out.v6 = true;
    out.ipv6 = decode_ipv6(ip);
    if (out.ipv6.payload_length > ip.size() - kIpv6Bytes || out.ipv6.payload_length < kUdpBytes) {
      return Err{DropReason::kBadIpLength};
    }
    if (out.ipv6.next_header != kIpProtoUdp) return Err{DropReason::kNotUdp};
    ip_header_bytes = kIpv6Bytes;
    udp = ip.subspan(kIpv6Bytes, out.ipv6.payload_length);
  }
  out.udp = decode_udp(udp);
  if (out.udp.length != udp.size()) return Err{DropReason::kBadUdpLength};
  // Receivers check only the destination port: RoCEv2 senders choose the source port freely
  // (rxe: 0xC000 | hash; a ConnectX CNP: 0).
  if (out.udp.dst_port != kRoceV2Port) return Err{DropReason::kNotRoceV2Port};
  out.ip_udp = ip.first(ip_header_bytes + kUdpBytes);
  const ConstBytes roce = udp.subspan(kUdpBytes);

  // The ICRC is checked before the BTH is interpreted, so that a corrupted opcode or length field
  // is reported as the corruption it is.
  if (opts.verify_icrc) {
    if (roce.size() < kBthBytes + kIcrcBytes) return Err{DropReason::kTruncatedBth};
    const std::optional<IcrcForm> form = icrc_match(out.ip_udp, roce);
    if (!form || (*form == IcrcForm::kRxe && !opts.accept_rxe_icrc)) {
      return Err{DropReason::kBadIcrc};
    }
    out.icrc_checked = true;
    out.icrc_form = *form;
  }
  auto pkt = parse_roce(roce, opts.accept_sealed);
  if (!pkt.ok()) return Err{pkt.error()};
  out.roce = pkt.value();
  return out;
}

}  // namespace uroce::wire

// Parsing and validating RoCEv2 packets.
//
// Two entry points:
// - parse_roce(): the UDP payload (BTH to ICRC), as a UDP socket delivers it. Header-level checks
//   that rxe makes (rxe_recv.c hdr_check, rxe_resp.c check_length) minus the ICRC, which needs the
//   IP and UDP headers: the caller verifies it with icrc_verify() where it can.
// - parse_frame(): a whole frame as captured (Ethernet, Linux cooked v1/v2 or raw IP), through the
//   IP and UDP headers, then the ICRC, then parse_roce().
// Neither reads outside the given span, allocates, or asserts on input: every rejection is a
// DropReason.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/bytes.h"
#include "base/result.h"
#include "wire/headers.h"
#include "wire/icrc.h"
#include "wire/ip.h"
#include "wire/opcode.h"

namespace uroce::wire {

enum class DropReason : std::uint8_t {
#define UROCE_DROP(e, name, text) e,
#include "wire/drop_reasons.def"
#undef UROCE_DROP
};
inline constexpr std::size_t kDropReasonCount = 0
#define UROCE_DROP(e, name, text) +1
#include "wire/drop_reasons.def"
#undef UROCE_DROP
    ;

std::string_view drop_reason_name(DropReason r);  // "kBadIcrc" -> "bad_icrc"
std::string_view drop_reason_text(DropReason r);  // human-readable sentence
// True for the reasons that mean "some other kind of traffic" (not IP, not UDP, not port 4791);
// every other reason means a malformed or corrupted packet.
bool is_not_roce(DropReason r);

inline constexpr std::size_t kMaxPayloadBytes = 4096;

// Sealed packets (issue 44, docs/SECURITY.md): between uroce peers that protect their packets
// with AEAD, the BTH transport version is 1 (payload authenticated) or 2 (payload encrypted), and
// a trailer of the 12-byte nonce and the 16-byte tag lies between the pad and the ICRC. The pad
// count still counts the payload's pad. Only parse_roce(p, true) accepts them; rxe drops them as
// an unknown transport version.
inline constexpr std::uint8_t kTverAuthenticated = 1;
inline constexpr std::uint8_t kTverEncrypted = 2;
inline constexpr std::size_t kSealNonceBytes = 12;
inline constexpr std::size_t kSealTagBytes = 16;
inline constexpr std::size_t kSealTrailerBytes = kSealNonceBytes + kSealTagBytes;

// A validated packet: BTH through ICRC. Header accessors assert that the opcode has the header.
struct RocePacket {
  const OpcodeInfo* op = nullptr;
  ConstBytes bytes;    // BTH .. ICRC inclusive
  ConstBytes payload;  // excluding pad
  std::uint8_t pad = 0;
  ConstBytes trailer;  // a sealed packet's nonce and tag (empty for a plain one)

  bool sealed() const { return !trailer.empty(); }
  BthView bth() const { return BthView(bytes); }
  RethView reth() const { return RethView(ext(ExtHeader::kReth)); }
  FethView feth() const { return FethView(ext(ExtHeader::kFeth)); }
  AethView aeth() const { return AethView(ext(ExtHeader::kAeth)); }
  AtomicEthView atomic_eth() const { return AtomicEthView(ext(ExtHeader::kAtomicEth)); }
  AtomicAckEthView atomic_ack_eth() const {
    return AtomicAckEthView(ext(ExtHeader::kAtomicAckEth));
  }
  DethView deth() const { return DethView(ext(ExtHeader::kDeth)); }
  ImmDtView immdt() const { return ImmDtView(ext(ExtHeader::kImmDt)); }
  IethView ieth() const { return IethView(ext(ExtHeader::kIeth)); }
  XrcEthView xrceth() const { return XrcEthView(ext(ExtHeader::kXrcEth)); }
  std::uint32_t icrc() const { return load_le32(bytes, bytes.size() - kIcrcBytes); }

 private:
  ConstBytes ext(ExtHeader h) const {
    UROCE_CHECK(op->has(h));
    return bytes.subspan(op->offset_of(h));
  }
};

// `accept_sealed`: a packet with transport version 1 or 2 parses as a sealed packet (its
// trailer set, its payload still as sent) instead of being dropped as kBadTver.
Result<RocePacket, DropReason> parse_roce(ConstBytes udp_payload, bool accept_sealed = false);

// pcap link types (https://www.tcpdump.org/linktypes.html) that parse_frame understands.
enum class LinkType : std::uint16_t {
  kEthernet = 1,
  kRaw = 101,
  kLinuxSll = 113,
  kIpv4 = 228,
  kIpv6 = 229,
  kLinuxSll2 = 276,
};
bool link_type_supported(int dlt);

struct FrameOptions {
  bool verify_icrc = true;
  bool accept_sealed = false;  // parse_roce's: sealed packets parse (RocePacket::trailer)
  // With verify_icrc: a packet whose opcode has kFlagRxeIcrc (RC FLUSH) passes with rxe's ICRC
  // too (wire/icrc.h, icrc_match), as a uroce device's receiver accepts it; false: the IBTA's
  // only.
  bool accept_rxe_icrc = true;
};

struct Frame {
  bool has_ethernet = false;
  Ethernet ethernet;  // when has_ethernet
  bool v6 = false;
  Ipv4 ipv4;  // when !v6
  Ipv6 ipv6;  // when v6
  Udp udp;
  ConstBytes ip_udp;  // the IP header followed by the UDP header, as ICRC input
  RocePacket roce;
  bool icrc_checked = false;
  // When icrc_checked: which ICRC the packet carries (kRxe: rxe's form of a FLUSH's).
  IcrcForm icrc_form = IcrcForm::kIbta;
};

Result<Frame, DropReason> parse_frame(LinkType link, ConstBytes frame,
                                      const FrameOptions& opts = {});

}  // namespace uroce::wire

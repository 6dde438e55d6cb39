// QP 1 (the GSI) in captures, for `uroce pcap check` and `uroce pcap dump`: which RoCEv2 packets
// are MADs to or from QP 1, whether each is well formed, and the decode of a CM MAD (every field
// of cm_mad.def, the private data and its rdma_cm header).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"
#include "wire/cm_mad.h"
#include "wire/packet.h"

namespace uroce::tools {

// A packet to QP 1 (BTH destination QP), or a datagram from it (DETH source QP).
bool is_gsi_packet(const wire::RocePacket& p);

// A well-formed GSI packet: one MAD. `cm` holds the message when the MAD is of the CM class; a
// MAD of another class (Performance Management, vendor classes) is valid but not decoded.
struct GsiMad {
  ConstBytes bytes;  // the 256-byte MAD (the packet's payload, or its first 256 bytes)
  std::uint8_t mgmt_class = 0;
  std::optional<wire::CmMad> cm;
  // After a REP's or RTU's MAD, between uroce peers that seal (devd/cm_keys.h): the key
  // extension, "urkx", its version, and the sender's X25519 public value (version 2: and the
  // transcript MAC). Empty for every other MAD.
  ConstBytes key_extension;
};

// Why a GSI packet is malformed: a snake_case name (as wire's drop reasons) and a sentence.
struct GsiError {
  std::string_view name;
  std::string text;
};

// The checks the receiving GSI makes (IBTA 13.5.1; rxe's QP 1): a UD SEND Only, to QP 1 with
// Q_Key GSI_QKEY (0x80010000), carrying exactly one 256-byte MAD, which parse_cm_mad() accepts
// when its class is CM; a CM REP or RTU may carry uroce's key extension after it (of exactly its
// size, magic and version; anything else after a MAD is bad_cm_mad). Requires is_gsi_packet(p).
Result<GsiMad, GsiError> parse_gsi_packet(const wire::RocePacket& p);

// The detail lines of `uroce pcap dump` for a GSI MAD, indented under the packet's headers.
void dump_gsi_mad(std::FILE* out, const GsiMad& m);

}  // namespace uroce::tools

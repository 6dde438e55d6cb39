#include "tools/pcap_cm.h"

#include <arpa/inet.h>

#include <cinttypes>
#include <string>
#include <variant>
#include <vector>

#include "devd/cm_keys.h"

namespace uroce::tools {

namespace {

using wire::CmAttr;
using wire::CmFieldView;

std::string hex(std::uint64_t v, int digits) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%0*" PRIx64, digits, v);
  return buf;
}

std::string sv(std::string_view s) { return std::string(s); }

// Whether `tail` (what follows a MAD) is uroce's key extension: what the CM takes
// (engine::extension_version) and its three zero bytes.
bool is_key_extension(ConstBytes tail) {
  return engine::extension_version(tail) && load_u8(tail, 5) == 0 && load_u8(tail, 6) == 0 &&
         load_u8(tail, 7) == 0;
}

}  // namespace

bool is_gsi_packet(const wire::RocePacket& p) {
  if (p.bth().dest_qpn() == wire::kGsiQpn) return true;
  return p.op->has(wire::ExtHeader::kDeth) && p.deth().src_qpn() == wire::kGsiQpn;
}

Result<GsiMad, GsiError> parse_gsi_packet(const wire::RocePacket& p) {
  UROCE_ASSERT(is_gsi_packet(p));
  // QP 1 is a UD QP and a MAD is one datagram without immediate data (IBTA 13.5.1).
  if (p.op->opcode() != wire::Opcode::kUdSendOnly) {
    return Err{GsiError{"bad_gsi_opcode", "QP 1 takes UD SEND Only, not " + sv(p.op->name)}};
  }
  // rxe (rxe_recv.c check_keys) drops a datagram to QP 1 without GSI_QKEY; a datagram from QP 1
  // carries its destination's Q_Key, which the capture does not tell.
  const std::uint32_t qkey = p.deth().qkey();
  if (p.bth().dest_qpn() == wire::kGsiQpn && qkey != wire::kGsiQkey) {
    return Err{GsiError{"bad_gsi_qkey", "Q_Key " + hex(qkey, 8) + " to QP 1 is not GSI_QKEY " +
                                            hex(wire::kGsiQkey, 8)}};
  }
  GsiMad m;
  m.bytes = p.payload;
  if (m.bytes.size() > wire::kMadBytes && is_key_extension(m.bytes.subspan(wire::kMadBytes))) {
    m.key_extension = m.bytes.subspan(wire::kMadBytes);
    m.bytes = m.bytes.first(wire::kMadBytes);
  }
  if (m.bytes.size() != wire::kMadBytes) {
    return Err{GsiError{"bad_cm_mad", sv(cm_parse_error_name(wire::CmParseError::kBadLength)) +
                                          "; got " + std::to_string(m.bytes.size())}};
  }
  m.mgmt_class = load_u8(m.bytes, wire::kMadOffMgmtClass);
  const std::uint8_t base_version = load_u8(m.bytes, wire::kMadOffBaseVersion);
  if (base_version == wire::kMadBaseVersion && m.mgmt_class != wire::kMgmtClassCm) return m;
  auto cm = wire::parse_cm_mad(m.bytes);
  if (cm.ok()) {
    m.cm = std::move(cm).value();
    const wire::CmAttr attr = wire::cm_attr_of(m.cm->message);
    if (!m.key_extension.empty() && attr != wire::CmAttr::kRep && attr != wire::CmAttr::kRtu) {
      return Err{GsiError{"bad_cm_mad", "a key extension after a " + sv(wire::cm_attr_name(attr)) +
                                            " (only a REP or RTU carries one)"}};
    }
    return m;
  }
  std::string got;
  switch (cm.error()) {
    case wire::CmParseError::kBadBaseVersion:
      got = std::to_string(base_version);
      break;
    case wire::CmParseError::kBadClassVersion:
      got = std::to_string(load_u8(m.bytes, wire::kMadOffClassVersion));
      break;
    case wire::CmParseError::kBadMethod:
      got = hex(load_u8(m.bytes, wire::kMadOffMethod), 2);
      break;
    case wire::CmParseError::kUnknownAttribute:
    case wire::CmParseError::kUnsupportedAttribute:
      got = hex(load_be16(m.bytes, wire::kMadOffAttrId), 4);
      break;
    case wire::CmParseError::kBadLength:
    case wire::CmParseError::kNotCm:
    case wire::CmParseError::kBadInfoLength:
      break;
  }
  std::string text = sv(cm_parse_error_name(cm.error()));
  if (!got.empty()) text += "; got " + got;
  return Err{GsiError{"bad_cm_mad", std::move(text)}};
}

namespace {

// Prints `bytes` as rows of 16, up to the last non-zero byte; the zeros after it are counted.
void dump_hex(std::FILE* out, const char* label, ConstBytes bytes) {
  std::size_t used = bytes.size();
  while (used > 0 && bytes[used - 1] == std::byte{0}) --used;
  if (used == 0) {
    std::fprintf(out, "    %s %zu bytes: all zero\n", label, bytes.size());
    return;
  }
  std::fprintf(out, "    %s %zu bytes:\n", label, bytes.size());
  for (std::size_t row = 0; row < used; row += 16) {
    std::fprintf(out, "      %04zx ", row);
    for (std::size_t i = row; i < used && i < row + 16; ++i) {
      std::fprintf(out, " %02x", unsigned{load_u8(bytes, i)});
    }
    std::fprintf(out, "\n");
  }
  if (used < bytes.size()) std::fprintf(out, "      + %zu zero bytes\n", bytes.size() - used);
}

std::string format_addr(ConstBytes addr16, bool v4) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (v4) {
    inet_ntop(AF_INET, addr16.subspan(12).data(), buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, addr16.data(), buf, sizeof buf);
  }
  return buf;
}

// What a field's value means, where the spec names it: port space and port, REJ reason, ...
std::string meaning(CmAttr attr, const CmFieldView& f) {
  std::optional<std::string_view> name;
  if (f.name == "service_id") {
    if (const auto sid = wire::parse_rdma_service_id(f.value)) {
      return sv(rdma_port_space_name(sid->port_space)) + " port " + std::to_string(sid->port);
    }
    return {};
  }
  if (f.name == "path_mtu" && f.value >= 1 && f.value <= 5) {
    return std::to_string(128u << f.value);  // IBTA 9.7.7: 1 = 256 ... 5 = 4096
  }
  if (attr == CmAttr::kRej && f.name == "reason") {
    name = wire::cm_rej_reason_name(static_cast<std::uint16_t>(f.value));
  } else if (f.name == "message_rejected" || f.name == "message_mraed") {
    name = wire::cm_msg_response_name(static_cast<std::uint8_t>(f.value));
  } else if (attr == CmAttr::kSidrRep && f.name == "status") {
    name = wire::sidr_status_name(static_cast<std::uint8_t>(f.value));
  } else {
    return {};
  }
  return name ? sv(*name) : "unknown";
}

// Every field of the message, "name value" pairs wrapped at 100 columns; byte strings other than
// GIDs (ARI, additional information) as hex after them.
void dump_fields(std::FILE* out, const wire::CmMessage& msg) {
  constexpr std::size_t kIndent = 4;
  constexpr std::size_t kColumns = 100;
  const CmAttr attr = wire::cm_attr_of(msg);
  std::string line;
  std::vector<CmFieldView> blobs;
  wire::for_each_cm_field(msg, [&](const CmFieldView& f) {
    std::string item = sv(f.name) + " ";
    if (f.is_bytes() && f.name.ends_with("_gid")) {
      item += format_addr(f.bytes, false);
    } else if (f.is_bytes()) {
      blobs.push_back(f);
      return;
    } else if (f.bits <= 8) {
      item += std::to_string(f.value);
    } else {
      item += hex(f.value, static_cast<int>((f.bits + 3) / 4));
    }
    if (const std::string m = meaning(attr, f); !m.empty()) item += " (" + m + ")";
    if (!line.empty() && kIndent + line.size() + 2 + item.size() > kColumns) {
      std::fprintf(out, "%*s%s\n", static_cast<int>(kIndent), "", line.c_str());
      line.clear();
    }
    line += (line.empty() ? "" : "  ") + item;
  });
  if (!line.empty()) std::fprintf(out, "%*s%s\n", static_cast<int>(kIndent), "", line.c_str());
  for (const CmFieldView& f : blobs) dump_hex(out, sv(f.name).c_str(), f.bytes);
}

// The private data; for a REQ or SIDR_REQ of an rdma_cm service ID, its cma_hdr first.
void dump_private_data(std::FILE* out, const wire::CmMessage& msg) {
  const ConstBytes pd = wire::cm_private_data(msg);
  std::optional<std::uint64_t> service_id;
  if (const auto* req = std::get_if<wire::CmReq>(&msg)) service_id = req->service_id;
  if (const auto* sidr = std::get_if<wire::CmSidrReq>(&msg)) service_id = sidr->service_id;
  if (!service_id || !wire::parse_rdma_service_id(*service_id)) {
    dump_hex(out, "private_data", pd);
    return;
  }
  const auto hdr = wire::parse_cma_header(pd);
  if (!hdr.ok()) {
    // Not invalid: a native IB ID (AF_IB) or a user of the CM other than rdma_cm sends none.
    const auto why = wire::cma_header_error_name(hdr.error());
    std::fprintf(out, "    cma_hdr none (%.*s)\n", static_cast<int>(why.size()), why.data());
    dump_hex(out, "private_data", pd);
    return;
  }
  const bool v4 = hdr->ip_version == 4;
  std::fprintf(out, "    cma_hdr version %u IPv%u port %u src %s dst %s\n",
               unsigned{load_u8(pd, 0)}, unsigned{hdr->ip_version}, unsigned{hdr->src_port},
               format_addr(as_bytes(hdr->src_addr.data(), 16), v4).c_str(),
               format_addr(as_bytes(hdr->dst_addr.data(), 16), v4).c_str());
  dump_hex(out, "user private_data", pd.subspan(wire::kCmaHeaderBytes));
}

}  // namespace

void dump_gsi_mad(std::FILE* out, const GsiMad& m) {
  const ConstBytes b = m.bytes;
  std::fprintf(out,
               "  MAD  base %u class 0x%02x%s version %u method 0x%02x status 0x%04x "
               "class_specific 0x%04x\n",
               unsigned{load_u8(b, wire::kMadOffBaseVersion)}, unsigned{m.mgmt_class},
               m.cm ? " (CM)" : "", unsigned{load_u8(b, wire::kMadOffClassVersion)},
               unsigned{load_u8(b, wire::kMadOffMethod)},
               unsigned{load_be16(b, wire::kMadOffStatus)},
               unsigned{load_be16(b, wire::kMadOffClassSpecific)});
  if (!m.cm) {
    std::fprintf(out,
                 "  MAD  TID 0x%016" PRIx64 " attr 0x%04x attr_mod 0x%08x (not CM: not decoded)\n",
                 load_be64(b, wire::kMadOffTransactionId),
                 unsigned{load_be16(b, wire::kMadOffAttrId)}, load_be32(b, wire::kMadOffAttrMod));
    return;
  }
  const CmAttr attr = wire::cm_attr_of(m.cm->message);
  const auto name = wire::cm_attr_name(attr);
  std::fprintf(out, "  CM   %.*s (0x%04x) TID 0x%016" PRIx64 " attr_mod 0x%08x\n",
               static_cast<int>(name.size()), name.data(),
               unsigned{static_cast<std::uint16_t>(attr)}, m.cm->transaction_id,
               load_be32(b, wire::kMadOffAttrMod));
  dump_fields(out, m.cm->message);
  dump_private_data(out, m.cm->message);
  if (!m.key_extension.empty()) {
    const unsigned version = load_u8(m.key_extension, 4);
    std::fprintf(
        out, "  CM   key extension (uroce) version %u: X25519 public value%s\n", version,
        version == engine::kAuthExtensionVersion ? " and transcript MAC (pre-shared key)" : "");
    dump_hex(out, "extension", m.key_extension);
  }
}

}  // namespace uroce::tools

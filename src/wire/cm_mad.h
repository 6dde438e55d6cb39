// IB Communication Management MADs (IBTA vol. 1, chapter 12) as the kernel's cm.c and cma.c put
// them on the wire over RoCEv2: class 0x07, class version 2, method Send, carried in 256-byte UD
// MADs to and from QP 1. Also the rdma_cm private-data header (struct cma_hdr) and the service
// IDs of rdma_cm's port spaces.
//
// Every message and field is listed once, in cm_mad.def; the structs below, parse_cm_mad() and
// build_cm_mad() are generated from that list. Parsing validates the MAD header and the length
// fields it relies on and returns an error value for anything malformed; it never reads outside
// the given span. Building writes exactly kMadBytes and zeroes every reserved bit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <variant>

#include "base/bytes.h"
#include "base/result.h"
#include "wire/cm_mad.def"

namespace uroce::wire {

// MAD common header (IBTA 13.4.2) and the CM's constants.
inline constexpr std::size_t kMadBytes = 256;
inline constexpr std::size_t kMadHeaderBytes = 24;
inline constexpr std::size_t kCmDataBytes = kMadBytes - kMadHeaderBytes;  // 232
inline constexpr std::uint8_t kMadBaseVersion = 1;
inline constexpr std::uint8_t kMgmtClassCm = 0x07;
inline constexpr std::uint8_t kCmClassVersion = 2;
inline constexpr std::uint8_t kMadMethodSend = 0x03;
// GSI: QP 1 and its well-known Q_Key (IBTA 13.5.1; rxe requires it on QP 1).
inline constexpr std::uint32_t kGsiQpn = 1;
inline constexpr std::uint32_t kGsiQkey = 0x80010000;

// uroce's mark in its node GUID, which the REQ and REP carry as Local CA GUID: how two uroce ends
// find each other to turn selective repeat on (docs/ARCHITECTURE.md, "Selective repeat",
// "Negotiation"). A uroce GUID (big-endian number, byte 0 the MSB) is
//   02 00 a0 75 72 a1 a2 a3      (a0..a3: the IPv4 address, or an IPv6 address folded to 4 bytes)
// Byte 0 = 0x02 makes it a locally administered, individual EUI-64 (U/L bit set, I/G bit clear),
// which no vendor-assigned GUID is, and bytes 3-4 = 'u' 'r' where every GUID made from a MAC
// address (rxe's, the EUI-64 of its netdev's MAC) has ff fe: no rxe GUID can carry the mark.
// Byte 1's low bit is no part of the mark: a REQ's Local CA GUID sets it when its sender's ID
// seals and will send its public value after the RTU (kUroceGuidKeyOffer, docs/SECURITY.md), so
// that a passive side under aead=require can refuse a peer that will not before its REP.
inline constexpr std::uint64_t kUroceGuidMarkMask = 0xfffe'00ff'ff00'0000ull;
inline constexpr std::uint64_t kUroceGuidMark = 0x0200'0075'7200'0000ull;
inline constexpr std::uint64_t kUroceGuidKeyOffer = 0x0001'0000'0000'0000ull;
constexpr bool is_uroce_guid(std::uint64_t guid) {
  return (guid & kUroceGuidMarkMask) == kUroceGuidMark;
}
constexpr bool offers_key(std::uint64_t guid) {
  return is_uroce_guid(guid) && (guid & kUroceGuidKeyOffer) != 0;
}

// MAD header offsets (from the start of the MAD).
inline constexpr std::size_t kMadOffBaseVersion = 0;
inline constexpr std::size_t kMadOffMgmtClass = 1;
inline constexpr std::size_t kMadOffClassVersion = 2;
inline constexpr std::size_t kMadOffMethod = 3;
inline constexpr std::size_t kMadOffStatus = 4;
inline constexpr std::size_t kMadOffClassSpecific = 6;
inline constexpr std::size_t kMadOffTransactionId = 8;
inline constexpr std::size_t kMadOffAttrId = 16;
inline constexpr std::size_t kMadOffAttrMod = 20;

enum class CmAttr : std::uint16_t {
#define UROCE_CM_ENUM(T, id, name, fields, pd_off, pd_bytes) k##T = id,
  UROCE_CM_ATTRS(UROCE_CM_ENUM)
#undef UROCE_CM_ENUM
      kLap = 0x0019,
  kApr = 0x001a,
};

std::string_view cm_attr_name(CmAttr a);

// REJ reasons (IBTA table 109; the kernel's enum ib_cm_rej_reason), from cm_mad.def.
enum class CmRejReason : std::uint16_t {
#define UROCE_CM_REJ_ENUM(e, value, name) k##e = value,
  UROCE_CM_REJ_REASONS(UROCE_CM_REJ_ENUM)
#undef UROCE_CM_REJ_ENUM
};
// "consumer_defined" for 28; nullopt for a value the table does not list.
std::optional<std::string_view> cm_rej_reason_name(std::uint16_t reason);

// The message a REJ or MRA refers to (IBTA tables 107 and 108; cm.c's CM_MSG_RESPONSE_*).
enum class CmMsgResponse : std::uint8_t { kReq = 0, kRep = 1, kOther = 2 };
std::optional<std::string_view> cm_msg_response_name(std::uint8_t what);  // "REQ", "REP", "other"

// SIDR_REP status (IBTA table 120; the kernel's enum ib_cm_sidr_status).
enum class SidrStatus : std::uint8_t {
  kSuccess = 0,
  kUnsupported = 1,
  kReject = 2,
  kNoQp = 3,
  kRedirect = 4,
  kUnsupportedVersion = 5,
};
std::optional<std::string_view> sidr_status_name(std::uint8_t status);  // "success", "no_qp", ...

// Length limits of the REJ's ARI and the SIDR_REP's additional information (IBTA 12.6.7, 12.11.2).
inline constexpr std::size_t kCmAriMaxBytes = 72;

namespace detail {
// The smallest unsigned type that holds `bits` bits.
template <unsigned bits>
using CmFieldType = std::conditional_t<
    (bits <= 8), std::uint8_t,
    std::conditional_t<(bits <= 16), std::uint16_t,
                       std::conditional_t<(bits <= 32), std::uint32_t, std::uint64_t>>>;

struct CmFieldLoc {
  std::size_t byte;
  unsigned bit;
  unsigned bits;
};
}  // namespace detail

// One struct per message: its fields (named as in cm_mad.def) and its private data area, whose
// size is fixed by the attribute (a receiver cannot tell how much of it the sender used).
#define UROCE_CM_MEMBER(m, byte, bit, bits) detail::CmFieldType<bits> m = 0;
#define UROCE_CM_BYTES_MEMBER(m, byte, n) std::array<std::uint8_t, n> m{};
#define UROCE_CM_STRUCT(T, id, name, fields, pd_off, pd_bytes)                       \
  struct Cm##T {                                                                     \
    static constexpr CmAttr kAttr = CmAttr::k##T;                                    \
    static constexpr std::size_t kPrivateDataOffset = pd_off;                        \
    static constexpr std::size_t kPrivateDataBytes = pd_bytes;                       \
    fields(UROCE_CM_MEMBER,                                                          \
           UROCE_CM_BYTES_MEMBER) std::array<std::uint8_t, pd_bytes> private_data{}; \
    bool operator==(const Cm##T&) const = default;                                   \
  };
UROCE_CM_ATTRS(UROCE_CM_STRUCT)
#undef UROCE_CM_STRUCT
#undef UROCE_CM_BYTES_MEMBER
#undef UROCE_CM_MEMBER

using CmMessage =
    std::variant<CmReq, CmMra, CmRej, CmRep, CmRtu, CmDreq, CmDrep, CmSidrReq, CmSidrRep>;

// A CM MAD: the header fields that vary, and the message. build_cm_mad() writes base version 1,
// class 0x07, class version 2 and method Send; status, class-specific and attribute modifier are
// zero for the CM (IBTA 12.6.1).
struct CmMad {
  std::uint64_t transaction_id = 0;
  CmMessage message;
  bool operator==(const CmMad&) const = default;
};

CmAttr cm_attr_of(const CmMessage& m);

enum class CmParseError : std::uint8_t {
  kBadLength,             // not exactly kMadBytes
  kBadBaseVersion,        // base version != 1
  kNotCm,                 // management class != 0x07
  kBadClassVersion,       // class version != 2 (the kernel's CM answers nothing else)
  kBadMethod,             // not Send
  kUnknownAttribute,      // not a CM attribute ID
  kUnsupportedAttribute,  // LAP, APR (path migration)
  kBadInfoLength,         // REJ ARI or SIDR_REP additional information longer than 72 bytes
};
std::string_view cm_parse_error_name(CmParseError e);

Result<CmMad, CmParseError> parse_cm_mad(ConstBytes mad);

// Writes the MAD (kMadBytes) into `out`, which must hold at least kMadBytes. Returns the number of
// bytes written. Asserts on an impossible message (a field value wider than its field).
std::size_t build_cm_mad(const CmMad& mad, MutBytes out);
std::array<std::byte, kMadBytes> build_cm_mad(const CmMad& mad);

// The BTH and DETH of a MAD from QP 1 to QP 1, as every CM MAD travels over RoCEv2: a UD SEND
// Only, P_Key 0xffff, the GSI's Q_Key, PSN `psn`, for a kMadBytes payload. Written to `out`
// (at least 20 bytes); returns their length.
std::size_t write_gsi_mad_headers(MutBytes out, std::uint32_t psn);

// Fills a private data area from the user's bytes (the rest is zero). False when `user` is larger
// than the area: the caller reports that as EINVAL, as rdma_connect(3) does.
template <std::size_t N>
bool set_private_data(std::array<std::uint8_t, N>& area, ConstBytes user) {
  if (user.size() > N) return false;
  area.fill(0);
  for (std::size_t i = 0; i < user.size(); ++i) area[i] = static_cast<std::uint8_t>(user[i]);
  return true;
}

// Field locations, in cm_mad.def order, for tests and tools (offsets from the start of the data).
#define UROCE_CM_LOC(m, byte, bit, bits) detail::CmFieldLoc{byte, bit, bits},
#define UROCE_CM_BYTES_LOC(m, byte, n) detail::CmFieldLoc{byte, 0, (n)*8},
#define UROCE_CM_LOCS(T, id, name, fields, pd_off, pd_bytes) \
  inline constexpr detail::CmFieldLoc kCm##T##Fields[] = {fields(UROCE_CM_LOC, UROCE_CM_BYTES_LOC)};
UROCE_CM_ATTRS(UROCE_CM_LOCS)
#undef UROCE_CM_LOCS
#undef UROCE_CM_BYTES_LOC
#undef UROCE_CM_LOC

// One field of a message as for_each_cm_field() yields it: its cm_mad.def name and location, and
// its value (an integer field, `bytes` empty) or its bytes (a byte string: GIDs, ARI, additional
// information; `bytes` views the message, valid while the message lives).
struct CmFieldView {
  std::string_view name;
  std::size_t byte = 0;  // offset from the start of the data, as in cm_mad.def
  unsigned bit = 0;
  unsigned bits = 0;
  std::uint64_t value = 0;
  ConstBytes bytes;
  bool is_bytes() const { return !bytes.empty(); }
};

// for_each_cm_field(msg, fn) calls fn(const CmFieldView&) for every field of the message, in
// cm_mad.def order; the private data is not a field: cm_private_data(msg) views it. For tools that
// print or compare any message. Both take a message struct (an exact overload each, so that no
// temporary CmMessage is made) or a CmMessage; the views point into the argument.
#define UROCE_CM_VISIT_INT(m, byte, bit, bits) fn(CmFieldView{#m, byte, bit, bits, msg.m, {}});
#define UROCE_CM_VISIT_BYTES(m, byte, n) \
  fn(CmFieldView{#m, byte, 0, (n)*8, 0, as_bytes(msg.m.data(), msg.m.size())});
#define UROCE_CM_VISITOR(T, id, name, fields, pd_off, pd_bytes)        \
  template <typename Fn>                                               \
  void for_each_cm_field(const Cm##T& msg, Fn&& fn) {                  \
    fields(UROCE_CM_VISIT_INT, UROCE_CM_VISIT_BYTES)                   \
  }                                                                    \
  inline ConstBytes cm_private_data(const Cm##T& msg) {                \
    return as_bytes(msg.private_data.data(), msg.private_data.size()); \
  }
UROCE_CM_ATTRS(UROCE_CM_VISITOR)
#undef UROCE_CM_VISITOR
#undef UROCE_CM_VISIT_BYTES
#undef UROCE_CM_VISIT_INT

template <typename Fn>
void for_each_cm_field(const CmMessage& m, Fn&& fn) {
  std::visit([&](const auto& msg) { for_each_cm_field(msg, fn); }, m);
}
inline ConstBytes cm_private_data(const CmMessage& m) {
  return std::visit([](const auto& msg) { return cm_private_data(msg); }, m);
}

namespace detail {
// Fields lie inside the data, before the private data, and do not overlap one another.
template <std::size_t N>
constexpr bool cm_layout_ok(const CmFieldLoc (&locs)[N], std::size_t pd_off, std::size_t pd_bytes) {
  if (pd_off + pd_bytes != kCmDataBytes) return false;
  for (std::size_t i = 0; i < N; ++i) {
    const std::size_t begin = locs[i].byte * 8 + locs[i].bit;
    const std::size_t end = begin + locs[i].bits;
    if (locs[i].bits == 0 || end > pd_off * 8) return false;
    if (locs[i].bits > 64 && (locs[i].bit != 0 || locs[i].bits % 8 != 0)) return false;
    if (locs[i].bits <= 64 && locs[i].bit + locs[i].bits > 64) return false;
    for (std::size_t j = 0; j < i; ++j) {
      const std::size_t b2 = locs[j].byte * 8 + locs[j].bit;
      const std::size_t e2 = b2 + locs[j].bits;
      if (begin < e2 && b2 < end) return false;
    }
  }
  return true;
}
}  // namespace detail

#define UROCE_CM_CHECK_LAYOUT(T, id, name, fields, pd_off, pd_bytes) \
  static_assert(detail::cm_layout_ok(kCm##T##Fields, pd_off, pd_bytes), "bad layout of " name);
UROCE_CM_ATTRS(UROCE_CM_CHECK_LAYOUT)
#undef UROCE_CM_CHECK_LAYOUT
// Pinned to ibta_vol1_c12.h and roce-facts.md (private data sizes of REQ, REP, REJ, SIDR).
static_assert(CmReq::kPrivateDataOffset == 140 && CmReq::kPrivateDataBytes == 92);
static_assert(CmRep::kPrivateDataOffset == 36 && CmRep::kPrivateDataBytes == 196);
static_assert(CmRej::kPrivateDataOffset == 84 && CmRej::kPrivateDataBytes == 148);
static_assert(CmSidrReq::kPrivateDataOffset == 16 && CmSidrReq::kPrivateDataBytes == 216);
static_assert(CmSidrRep::kPrivateDataOffset == 96 && CmSidrRep::kPrivateDataBytes == 136);

// ---- rdma_cm (cma.c) conventions on top of the CM ----

// Port spaces (enum rdma_ucm_port_space) and service IDs: (port space << 16) + port.
enum class RdmaPortSpace : std::uint16_t {
  kIpoib = 0x0002,
  kTcp = 0x0106,
  kUdp = 0x0111,
  kIb = 0x013f
};
constexpr std::uint64_t rdma_service_id(RdmaPortSpace ps, std::uint16_t port) {
  return (std::uint64_t{static_cast<std::uint16_t>(ps)} << 16) + port;
}
// The port space and port of an rdma_cm IP service ID (RDMA_PS_TCP or RDMA_PS_UDP), or nullopt
// for any other service ID (cma.c's RDMA_IB_IP_PS_MASK match).
struct RdmaServiceId {
  RdmaPortSpace port_space;
  std::uint16_t port;
};
std::optional<RdmaServiceId> parse_rdma_ip_service_id(std::uint64_t service_id);
// The port space and port of a service ID in any of rdma_cm's four port spaces (the form
// rdma_get_service_id() gives an IP-addressed ID), or nullopt. The REQ or SIDR_REQ of such an ID
// carries a cma_hdr; a native IB ID (AF_IB) of RDMA_PS_IB may not.
std::optional<RdmaServiceId> parse_rdma_service_id(std::uint64_t service_id);
std::string_view rdma_port_space_name(RdmaPortSpace ps);  // "RDMA_PS_TCP", ...
static_assert(rdma_service_id(RdmaPortSpace::kTcp, 0) == 0x0000000001060000ull);

// struct cma_hdr: the first 36 bytes of the private data of a REQ or SIDR_REQ from rdma_cm.
//   byte 0: cma_version (0x00); byte 1: IP version in bits 7:4 (4 or 6); bytes 2-3: the active
//   side's port; 4-19: source address; 20-35: destination address (IPv4 in the last 4 bytes).
inline constexpr std::size_t kCmaHeaderBytes = 36;
inline constexpr std::uint8_t kCmaVersion = 0x00;
struct CmaHeader {
  std::uint8_t ip_version = 4;  // 4 or 6
  std::uint16_t src_port = 0;
  std::array<std::uint8_t, 16> src_addr{};  // IPv4: bytes 12-15
  std::array<std::uint8_t, 16> dst_addr{};
  bool operator==(const CmaHeader&) const = default;
};
// What a user may put after the header: 56 bytes in a REQ (RDMA_PS_TCP), 180 in a SIDR_REQ.
inline constexpr std::size_t kCmaReqUserPrivateDataBytes =
    CmReq::kPrivateDataBytes - kCmaHeaderBytes;
inline constexpr std::size_t kCmaSidrReqUserPrivateDataBytes =
    CmSidrReq::kPrivateDataBytes - kCmaHeaderBytes;
static_assert(kCmaReqUserPrivateDataBytes == 56 && kCmaSidrReqUserPrivateDataBytes == 180);

enum class CmaHeaderError : std::uint8_t {
  kShort,               // fewer than 36 bytes
  kBadVersion,          // cma_version != 0
  kBadIpVersion,        // neither 4 nor 6
  kPrivateDataTooLong,  // (encode) the user's data does not fit after the header
};
std::string_view cma_header_error_name(CmaHeaderError e);

Result<CmaHeader, CmaHeaderError> parse_cma_header(ConstBytes private_data);
// Writes the header and then the user's bytes into a private data area; the rest is zeroed.
// Returns the bytes used (36 + user).
Result<std::size_t, CmaHeaderError> encode_cma_private_data(const CmaHeader& h, ConstBytes user,
                                                            MutBytes area);

// An IPv4 address as cma_hdr carries it: 12 zero bytes, then the address (cma_ip_addr.ip4).
std::array<std::uint8_t, 16> cma_ipv4_addr(std::uint32_t addr_host_order);
// An IPv4 address as a RoCEv2 GID carries it: ::ffff:a.b.c.d.
std::array<std::uint8_t, 16> ipv4_mapped_gid(std::uint32_t addr_host_order);

}  // namespace uroce::wire

#include "wire/cm_mad.h"

#include "wire/builder.h"

namespace uroce::wire {

namespace {

// A field of `bits` (<= 64) bits at bit `bit` (0 = most significant) of byte `byte` of `data`,
// read as a big-endian integer over the bytes it touches.
std::uint64_t get_field(ConstBytes data, std::size_t byte, unsigned bit, unsigned bits) {
  const std::size_t nbytes = (bit + bits + 7) / 8;
  UROCE_ASSERT(nbytes <= 8 && byte + nbytes <= data.size());
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < nbytes; ++i) v = (v << 8) | load_u8(data, byte + i);
  const unsigned shift = static_cast<unsigned>(nbytes * 8) - bit - bits;
  const std::uint64_t mask = bits == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
  return (v >> shift) & mask;
}

void set_field(MutBytes data, std::size_t byte, unsigned bit, unsigned bits, std::uint64_t value) {
  const std::size_t nbytes = (bit + bits + 7) / 8;
  UROCE_ASSERT(nbytes <= 8 && byte + nbytes <= data.size());
  const std::uint64_t mask = bits == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
  UROCE_CHECK((value & ~mask) == 0);  // a value wider than its field is our bug
  const unsigned shift = static_cast<unsigned>(nbytes * 8) - bit - bits;
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < nbytes; ++i) v = (v << 8) | load_u8(data, byte + i);
  // Shifting a 64-bit mask by 0 is fine; nbytes * 8 <= 64 keeps `shift` in range.
  v = (v & ~(mask << shift)) | (value << shift);
  for (std::size_t i = nbytes; i-- > 0;) {
    store_u8(data, byte + i, static_cast<std::uint8_t>(v));
    v >>= 8;
  }
}

template <std::size_t N>
void get_bytes(ConstBytes data, std::size_t byte, std::array<std::uint8_t, N>& out) {
  UROCE_ASSERT(byte + N <= data.size());
  for (std::size_t i = 0; i < N; ++i) out[i] = load_u8(data, byte + i);
}

template <std::size_t N>
void set_bytes(MutBytes data, std::size_t byte, const std::array<std::uint8_t, N>& in) {
  UROCE_ASSERT(byte + N <= data.size());
  for (std::size_t i = 0; i < N; ++i) store_u8(data, byte + i, in[i]);
}

// Per-message parse and build, generated from cm_mad.def.
#define UROCE_CM_GET(m, byte, bit, bits) \
  msg.m = static_cast<decltype(msg.m)>(get_field(data, byte, bit, bits));
#define UROCE_CM_GET_BYTES(m, byte, n) get_bytes(data, byte, msg.m);
#define UROCE_CM_SET(m, byte, bit, bits) set_field(data, byte, bit, bits, msg.m);
#define UROCE_CM_SET_BYTES(m, byte, n) set_bytes(data, byte, msg.m);
#define UROCE_CM_CODEC(T, id, name, fields, pd_off, pd_bytes) \
  Cm##T parse_##T(ConstBytes data) {                          \
    Cm##T msg;                                                \
    fields(UROCE_CM_GET, UROCE_CM_GET_BYTES);                 \
    get_bytes(data, pd_off, msg.private_data);                \
    return msg;                                               \
  }                                                           \
  void build_##T(const Cm##T& msg, MutBytes data) {           \
    fields(UROCE_CM_SET, UROCE_CM_SET_BYTES);                 \
    set_bytes(data, pd_off, msg.private_data);                \
  }
UROCE_CM_ATTRS(UROCE_CM_CODEC)
#undef UROCE_CM_CODEC
#undef UROCE_CM_SET_BYTES
#undef UROCE_CM_SET
#undef UROCE_CM_GET_BYTES
#undef UROCE_CM_GET

}  // namespace

std::string_view cm_attr_name(CmAttr a) {
  switch (a) {
#define UROCE_CM_NAME(T, id, name, fields, pd_off, pd_bytes) \
  case CmAttr::k##T:                                         \
    return name;
    UROCE_CM_ATTRS(UROCE_CM_NAME)
#undef UROCE_CM_NAME
    case CmAttr::kLap:
      return "LAP";
    case CmAttr::kApr:
      return "APR";
  }
  return "unknown";
}

CmAttr cm_attr_of(const CmMessage& m) {
  return std::visit([](const auto& msg) { return std::decay_t<decltype(msg)>::kAttr; }, m);
}

std::optional<std::string_view> cm_rej_reason_name(std::uint16_t reason) {
  switch (reason) {
#define UROCE_CM_REJ_NAME(e, value, name) \
  case value:                             \
    return name;
    UROCE_CM_REJ_REASONS(UROCE_CM_REJ_NAME)
#undef UROCE_CM_REJ_NAME
  }
  return std::nullopt;
}

std::optional<std::string_view> cm_msg_response_name(std::uint8_t what) {
  switch (static_cast<CmMsgResponse>(what)) {
    case CmMsgResponse::kReq:
      return "REQ";
    case CmMsgResponse::kRep:
      return "REP";
    case CmMsgResponse::kOther:
      return "other";
  }
  return std::nullopt;
}

std::optional<std::string_view> sidr_status_name(std::uint8_t status) {
  switch (static_cast<SidrStatus>(status)) {
    case SidrStatus::kSuccess:
      return "success";
    case SidrStatus::kUnsupported:
      return "unsupported";
    case SidrStatus::kReject:
      return "reject";
    case SidrStatus::kNoQp:
      return "no_qp";
    case SidrStatus::kRedirect:
      return "redirect";
    case SidrStatus::kUnsupportedVersion:
      return "unsupported_version";
  }
  return std::nullopt;
}

std::string_view cm_parse_error_name(CmParseError e) {
  switch (e) {
    case CmParseError::kBadLength:
      return "MAD is not 256 bytes";
    case CmParseError::kBadBaseVersion:
      return "MAD base version is not 1";
    case CmParseError::kNotCm:
      return "management class is not CM (0x07)";
    case CmParseError::kBadClassVersion:
      return "CM class version is not 2";
    case CmParseError::kBadMethod:
      return "method is not Send";
    case CmParseError::kUnknownAttribute:
      return "unknown CM attribute";
    case CmParseError::kUnsupportedAttribute:
      return "unsupported CM attribute (LAP/APR)";
    case CmParseError::kBadInfoLength:
      return "additional information length over 72 bytes";
  }
  return "unknown error";
}

Result<CmMad, CmParseError> parse_cm_mad(ConstBytes mad) {
  if (mad.size() != kMadBytes) return Err{CmParseError::kBadLength};
  if (load_u8(mad, kMadOffBaseVersion) != kMadBaseVersion)
    return Err{CmParseError::kBadBaseVersion};
  if (load_u8(mad, kMadOffMgmtClass) != kMgmtClassCm) return Err{CmParseError::kNotCm};
  if (load_u8(mad, kMadOffClassVersion) != kCmClassVersion) {
    return Err{CmParseError::kBadClassVersion};
  }
  if (load_u8(mad, kMadOffMethod) != kMadMethodSend) return Err{CmParseError::kBadMethod};
  const ConstBytes data = mad.subspan(kMadHeaderBytes);
  CmMad out{load_be64(mad, kMadOffTransactionId), CmReq{}};
  switch (load_be16(mad, kMadOffAttrId)) {
#define UROCE_CM_PARSE(T, id, name, fields, pd_off, pd_bytes) \
  case id:                                                    \
    out.message = parse_##T(data);                            \
    break;
    UROCE_CM_ATTRS(UROCE_CM_PARSE)
#undef UROCE_CM_PARSE
    case static_cast<std::uint16_t>(CmAttr::kLap):
    case static_cast<std::uint16_t>(CmAttr::kApr):
      return Err{CmParseError::kUnsupportedAttribute};
    default:
      return Err{CmParseError::kUnknownAttribute};
  }
  if (const auto* rej = std::get_if<CmRej>(&out.message);
      rej && rej->rejected_info_length > kCmAriMaxBytes) {
    return Err{CmParseError::kBadInfoLength};
  }
  if (const auto* rep = std::get_if<CmSidrRep>(&out.message);
      rep && rep->additional_information_length > kCmAriMaxBytes) {
    return Err{CmParseError::kBadInfoLength};
  }
  return out;
}

std::size_t build_cm_mad(const CmMad& mad, MutBytes out) {
  UROCE_CHECK(out.size() >= kMadBytes);
  const MutBytes m = out.first(kMadBytes);
  for (auto& b : m) b = std::byte{0};
  store_u8(m, kMadOffBaseVersion, kMadBaseVersion);
  store_u8(m, kMadOffMgmtClass, kMgmtClassCm);
  store_u8(m, kMadOffClassVersion, kCmClassVersion);
  store_u8(m, kMadOffMethod, kMadMethodSend);
  store_be64(m, kMadOffTransactionId, mad.transaction_id);
  store_be16(m, kMadOffAttrId, static_cast<std::uint16_t>(cm_attr_of(mad.message)));
  const MutBytes data = m.subspan(kMadHeaderBytes);
  std::visit(
      [&](const auto& msg) {
        using M = std::decay_t<decltype(msg)>;
#define UROCE_CM_BUILD(T, id, name, fields, pd_off, pd_bytes) \
  if constexpr (std::is_same_v<M, Cm##T>) build_##T(msg, data);
        UROCE_CM_ATTRS(UROCE_CM_BUILD)
#undef UROCE_CM_BUILD
      },
      mad.message);
  return kMadBytes;
}

std::array<std::byte, kMadBytes> build_cm_mad(const CmMad& mad) {
  std::array<std::byte, kMadBytes> out{};
  build_cm_mad(mad, out);
  return out;
}

std::size_t write_gsi_mad_headers(MutBytes out, std::uint32_t psn) {
  TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(Opcode::kUdSendOnly);
  h.bth.pkey = 0xffff;
  h.bth.dest_qpn = kGsiQpn;
  h.bth.psn = psn & 0xffffff;
  h.deth.qkey = kGsiQkey;
  h.deth.src_qpn = kGsiQpn;
  return write_headers(out, h, kMadBytes);
}

std::optional<RdmaServiceId> parse_rdma_ip_service_id(std::uint64_t service_id) {
  // cma.c: RDMA_IB_IP_PS_MASK 0xffffffffffff0000 selects the port space part.
  const std::uint64_t ps = service_id >> 16;
  const auto port = static_cast<std::uint16_t>(service_id);
  if (ps == static_cast<std::uint16_t>(RdmaPortSpace::kTcp)) {
    return RdmaServiceId{RdmaPortSpace::kTcp, port};
  }
  if (ps == static_cast<std::uint16_t>(RdmaPortSpace::kUdp)) {
    return RdmaServiceId{RdmaPortSpace::kUdp, port};
  }
  return std::nullopt;
}

std::optional<RdmaServiceId> parse_rdma_service_id(std::uint64_t service_id) {
  if (service_id >> 32 != 0) return std::nullopt;
  const auto ps = static_cast<std::uint16_t>(service_id >> 16);
  const auto port = static_cast<std::uint16_t>(service_id);
  for (const RdmaPortSpace known :
       {RdmaPortSpace::kIpoib, RdmaPortSpace::kTcp, RdmaPortSpace::kUdp, RdmaPortSpace::kIb}) {
    if (ps == static_cast<std::uint16_t>(known)) return RdmaServiceId{known, port};
  }
  return std::nullopt;
}

std::string_view rdma_port_space_name(RdmaPortSpace ps) {
  switch (ps) {
    case RdmaPortSpace::kIpoib:
      return "RDMA_PS_IPOIB";
    case RdmaPortSpace::kTcp:
      return "RDMA_PS_TCP";
    case RdmaPortSpace::kUdp:
      return "RDMA_PS_UDP";
    case RdmaPortSpace::kIb:
      return "RDMA_PS_IB";
  }
  return "unknown";
}

std::string_view cma_header_error_name(CmaHeaderError e) {
  switch (e) {
    case CmaHeaderError::kShort:
      return "private data shorter than the rdma_cm header";
    case CmaHeaderError::kBadVersion:
      return "rdma_cm header version is not 0";
    case CmaHeaderError::kBadIpVersion:
      return "rdma_cm header IP version is neither 4 nor 6";
    case CmaHeaderError::kPrivateDataTooLong:
      return "private data does not fit after the rdma_cm header";
  }
  return "unknown error";
}

namespace {
constexpr std::size_t kCmaOffVersion = 0;
constexpr std::size_t kCmaOffIpVersion = 1;
constexpr std::size_t kCmaOffPort = 2;
constexpr std::size_t kCmaOffSrc = 4;
constexpr std::size_t kCmaOffDst = 20;
static_assert(kCmaOffDst + 16 == kCmaHeaderBytes);
}  // namespace

Result<CmaHeader, CmaHeaderError> parse_cma_header(ConstBytes pd) {
  if (pd.size() < kCmaHeaderBytes) return Err{CmaHeaderError::kShort};
  if (load_u8(pd, kCmaOffVersion) != kCmaVersion) return Err{CmaHeaderError::kBadVersion};
  CmaHeader h;
  h.ip_version = load_bits8(pd, kCmaOffIpVersion, 4, 4);
  if (h.ip_version != 4 && h.ip_version != 6) return Err{CmaHeaderError::kBadIpVersion};
  h.src_port = load_be16(pd, kCmaOffPort);
  for (std::size_t i = 0; i < 16; ++i) {
    h.src_addr[i] = load_u8(pd, kCmaOffSrc + i);
    h.dst_addr[i] = load_u8(pd, kCmaOffDst + i);
  }
  return h;
}

Result<std::size_t, CmaHeaderError> encode_cma_private_data(const CmaHeader& h, ConstBytes user,
                                                            MutBytes area) {
  if (area.size() < kCmaHeaderBytes) return Err{CmaHeaderError::kShort};
  if (user.size() > area.size() - kCmaHeaderBytes) return Err{CmaHeaderError::kPrivateDataTooLong};
  if (h.ip_version != 4 && h.ip_version != 6) return Err{CmaHeaderError::kBadIpVersion};
  for (auto& b : area) b = std::byte{0};
  store_u8(area, kCmaOffVersion, kCmaVersion);
  store_bits8(area, kCmaOffIpVersion, 4, 4, h.ip_version);
  store_be16(area, kCmaOffPort, h.src_port);
  for (std::size_t i = 0; i < 16; ++i) {
    store_u8(area, kCmaOffSrc + i, h.src_addr[i]);
    store_u8(area, kCmaOffDst + i, h.dst_addr[i]);
  }
  for (std::size_t i = 0; i < user.size(); ++i) area[kCmaHeaderBytes + i] = user[i];
  return kCmaHeaderBytes + user.size();
}

std::array<std::uint8_t, 16> cma_ipv4_addr(std::uint32_t addr) {
  std::array<std::uint8_t, 16> out{};
  store_be32(as_mut_bytes(out.data(), out.size()), 12, addr);
  return out;
}

std::array<std::uint8_t, 16> ipv4_mapped_gid(std::uint32_t addr) {
  std::array<std::uint8_t, 16> out = cma_ipv4_addr(addr);
  out[10] = 0xff;
  out[11] = 0xff;
  return out;
}

}  // namespace uroce::wire

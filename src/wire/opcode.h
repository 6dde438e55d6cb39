// The opcode table: every RoCEv2 base transport opcode, its name, transport, extension headers,
// semantic flags and computed header offsets, all derived from opcodes.def (the one list).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace uroce::wire {

enum class Transport : std::uint8_t { kRc, kUc, kUd, kCnp, kXrc };

std::string_view transport_name(Transport t);

enum class Opcode : std::uint8_t {
#define UROCE_OPCODE(e, v, name, tr, hdrs, flags) e = v,
#include "wire/opcodes.def"
#undef UROCE_OPCODE
};

// Extension headers, in the order they appear after the BTH (IBTA 9.2, figure 35; the CNP's 16
// reserved bytes are treated as a header so that a CNP carries no payload). The XRCETH of an XRC
// request follows the BTH (and would follow a DETH, which XRC never carries), before the RETH or
// AtomicETH (IBTA 9.2, figure 35; 9.3.5).
enum class ExtHeader : std::uint8_t {
  kDeth,
  kXrcEth,
  kFeth,  // FLUSH (IBTA 1.5, annex A19): before the RETH
  kReth,
  kAtomicEth,
  kAeth,
  kAtomicAckEth,
  kImmDt,
  kIeth,
  kCnpReserved,
};
inline constexpr std::size_t kExtHeaderCount = 10;

inline constexpr std::size_t kBthBytes = 12;
inline constexpr std::size_t kIcrcBytes = 4;
inline constexpr std::array<std::uint8_t, kExtHeaderCount> kExtHeaderBytes = {
    8,   // DETH
    4,   // XRCETH: 8 reserved bits, the 24-bit XRC SRQ number
    4,   // FETH
    16,  // RETH
    28,  // AtomicETH
    4,   // AETH
    8,   // AtomicAckETH
    4,   // ImmDt
    4,   // IETH
    16,  // CNP reserved
};

std::string_view ext_header_name(ExtHeader h);

// Semantic flags of an opcode.
enum OpcodeFlag : std::uint32_t {
  kFlagRequest = 1u << 0,   // sent by a requester
  kFlagResponse = 1u << 1,  // sent by a responder (ACK, READ response, atomic ACK)
  kFlagSend = 1u << 2,
  kFlagWrite = 1u << 3,
  kFlagRead = 1u << 4,
  kFlagAtomic = 1u << 5,
  kFlagAck = 1u << 6,
  kFlagFirst = 1u << 7,      // first packet of a message (Only = First | Last)
  kFlagMiddle = 1u << 8,     // middle packet of a message
  kFlagLast = 1u << 9,       // last packet of a message
  kFlagPayload = 1u << 10,   // may carry payload
  kFlagRecvWqe = 1u << 11,   // consumes a receive WQE at the responder
  kFlagComplete = 1u << 12,  // completes a receive WQE at the responder
  kFlagImm = 1u << 13,
  kFlagInvalidate = 1u << 14,
  kFlagCnp = 1u << 15,
  // IBTA 1.5 (annex A19; rxe since 6.2): both answered by a zero-length READ Response Only.
  kFlagAtomicWrite = 1u << 16,  // ATOMIC WRITE: 8 bytes placed at once
  kFlagFlush = 1u << 17,        // FLUSH: a placement type and selectivity level in the FETH
  // An interop quirk, not semantics: the kernel's Soft-RoCE (rxe, 6.2 on) computes this
  // opcode's ICRC in a form of its own, because its opcode table (rxe_opcode.c) gives the opcode
  // no RXE_PAYLOAD offset (wire/icrc.h, icrc_rxe_continue). RC FLUSH only. A receiver accepts
  // that form for these opcodes, and for no other.
  kFlagRxeIcrc = 1u << 18,
};

struct OpcodeInfo {
  bool valid = false;
  std::uint8_t value = 0;
  std::string_view name;
  Transport transport = Transport::kRc;
  std::uint16_t ext_headers = 0;  // bit i set: ExtHeader(i) present
  std::uint32_t flags = 0;
  // Byte offset of each present extension header from the start of the BTH (0 when absent).
  std::array<std::uint8_t, kExtHeaderCount> offset{};
  std::uint8_t header_bytes = 0;  // BTH plus all extension headers

  constexpr bool has(ExtHeader h) const { return (ext_headers >> static_cast<unsigned>(h)) & 1u; }
  constexpr std::size_t offset_of(ExtHeader h) const { return offset[static_cast<unsigned>(h)]; }
  constexpr bool is(std::uint32_t flag) const { return (flags & flag) == flag; }
  Opcode opcode() const { return static_cast<Opcode>(value); }
};

namespace detail {

constexpr std::uint16_t ext_bit(ExtHeader h) {
  return static_cast<std::uint16_t>(1u << static_cast<unsigned>(h));
}

constexpr OpcodeInfo make_opcode_info(std::uint8_t value, std::string_view name, Transport t,
                                      std::uint16_t headers, std::uint32_t flags) {
  OpcodeInfo info;
  info.valid = true;
  info.value = value;
  info.name = name;
  info.transport = t;
  info.ext_headers = headers;
  info.flags = flags;
  std::size_t off = kBthBytes;
  for (std::size_t i = 0; i < kExtHeaderCount; ++i) {
    if ((headers >> i) & 1u) {
      info.offset[i] = static_cast<std::uint8_t>(off);
      off += kExtHeaderBytes[i];
    }
  }
  info.header_bytes = static_cast<std::uint8_t>(off);
  return info;
}

constexpr std::array<OpcodeInfo, 256> make_opcode_table() {
  std::array<OpcodeInfo, 256> table{};
  constexpr auto RC = Transport::kRc;
  constexpr auto UC = Transport::kUc;
  constexpr auto UD = Transport::kUd;
  constexpr auto CNP = Transport::kCnp;
  constexpr auto XRC = Transport::kXrc;
  constexpr std::uint16_t H_DETH = ext_bit(ExtHeader::kDeth);
  constexpr std::uint16_t H_XRCETH = ext_bit(ExtHeader::kXrcEth);
  constexpr std::uint16_t H_FETH = ext_bit(ExtHeader::kFeth);
  constexpr std::uint16_t H_RETH = ext_bit(ExtHeader::kReth);
  constexpr std::uint16_t H_ATMETH = ext_bit(ExtHeader::kAtomicEth);
  constexpr std::uint16_t H_AETH = ext_bit(ExtHeader::kAeth);
  constexpr std::uint16_t H_ATMACKETH = ext_bit(ExtHeader::kAtomicAckEth);
  constexpr std::uint16_t H_IMMDT = ext_bit(ExtHeader::kImmDt);
  constexpr std::uint16_t H_IETH = ext_bit(ExtHeader::kIeth);
  constexpr std::uint16_t H_CNPRSVD = ext_bit(ExtHeader::kCnpReserved);
  constexpr std::uint32_t F_REQ = kFlagRequest, F_RESP = kFlagResponse, F_SEND = kFlagSend,
                          F_WRITE = kFlagWrite, F_READ = kFlagRead, F_ATOMIC = kFlagAtomic,
                          F_ACK = kFlagAck, F_FIRST = kFlagFirst, F_MIDDLE = kFlagMiddle,
                          F_LAST = kFlagLast, F_PAYLOAD = kFlagPayload, F_RWR = kFlagRecvWqe,
                          F_COMP = kFlagComplete, F_IMM = kFlagImm, F_INV = kFlagInvalidate,
                          F_CNP = kFlagCnp, F_ATOMIC_WRITE = kFlagAtomicWrite, F_FLUSH = kFlagFlush,
                          F_RXE_ICRC = kFlagRxeIcrc;
#define UROCE_OPCODE(e, v, name, tr, hdrs, flags) \
  table[v] = make_opcode_info(v, name, tr, static_cast<std::uint16_t>(hdrs), flags);
#include "wire/opcodes.def"
#undef UROCE_OPCODE
  return table;
}

}  // namespace detail

inline constexpr std::array<OpcodeInfo, 256> kOpcodeTable = detail::make_opcode_table();

// The table entry for a raw opcode byte, or nullptr when uroce does not know it.
constexpr const OpcodeInfo* opcode_info(std::uint8_t value) {
  const OpcodeInfo& info = kOpcodeTable[value];
  return info.valid ? &info : nullptr;
}
constexpr const OpcodeInfo& opcode_info(Opcode op) {
  return kOpcodeTable[static_cast<std::uint8_t>(op)];
}

// Every known opcode, in table order (for tests and tools that iterate).
inline constexpr std::array<Opcode, 0
#define UROCE_OPCODE(e, v, name, tr, hdrs, flags) +1
#include "wire/opcodes.def"
#undef UROCE_OPCODE
                            >
    kAllOpcodes = {
#define UROCE_OPCODE(e, v, name, tr, hdrs, flags) Opcode::e,
#include "wire/opcodes.def"
#undef UROCE_OPCODE
};

// Layout pinned to the spec (IBTA 9.2; RoCEv2 annex A17.9.3 for the CNP).
static_assert(opcode_info(Opcode::kRcSendOnly).header_bytes == 12);
static_assert(opcode_info(Opcode::kRcRdmaWriteOnlyImm).offset_of(ExtHeader::kReth) == 12);
static_assert(opcode_info(Opcode::kRcRdmaWriteOnlyImm).offset_of(ExtHeader::kImmDt) == 28);
static_assert(opcode_info(Opcode::kRcRdmaWriteOnlyImm).header_bytes == 32);
static_assert(opcode_info(Opcode::kRcRdmaReadRequest).header_bytes == 28);
static_assert(opcode_info(Opcode::kRcRdmaReadResponseFirst).header_bytes == 16);
static_assert(opcode_info(Opcode::kRcRdmaReadResponseMiddle).header_bytes == 12);
static_assert(opcode_info(Opcode::kRcAtomicAcknowledge).offset_of(ExtHeader::kAeth) == 12);
static_assert(opcode_info(Opcode::kRcAtomicAcknowledge).offset_of(ExtHeader::kAtomicAckEth) == 16);
static_assert(opcode_info(Opcode::kRcAtomicAcknowledge).header_bytes == 24);
static_assert(opcode_info(Opcode::kRcCompareSwap).header_bytes == 40);
static_assert(opcode_info(Opcode::kRcSendOnlyInv).offset_of(ExtHeader::kIeth) == 12);
static_assert(opcode_info(Opcode::kUdSendOnlyImm).offset_of(ExtHeader::kDeth) == 12);
static_assert(opcode_info(Opcode::kUdSendOnlyImm).offset_of(ExtHeader::kImmDt) == 20);
static_assert(opcode_info(Opcode::kUdSendOnlyImm).header_bytes == 24);
static_assert(opcode_info(Opcode::kCnp).header_bytes == 28);
static_assert(opcode_info(Opcode::kRcFlush).offset_of(ExtHeader::kFeth) == 12);
static_assert(opcode_info(Opcode::kRcFlush).offset_of(ExtHeader::kReth) == 16);
static_assert(opcode_info(Opcode::kRcFlush).header_bytes == 32);
static_assert(opcode_info(Opcode::kRcAtomicWrite).offset_of(ExtHeader::kReth) == 12);
static_assert(opcode_info(Opcode::kRcAtomicWrite).header_bytes == 28);
static_assert(opcode_info(Opcode::kXrcSendOnly).offset_of(ExtHeader::kXrcEth) == 12);
static_assert(opcode_info(Opcode::kXrcSendOnly).header_bytes == 16);
static_assert(opcode_info(Opcode::kXrcRdmaWriteOnlyImm).offset_of(ExtHeader::kReth) == 16);
static_assert(opcode_info(Opcode::kXrcRdmaWriteOnlyImm).offset_of(ExtHeader::kImmDt) == 32);
static_assert(opcode_info(Opcode::kXrcRdmaWriteOnlyImm).header_bytes == 36);
static_assert(opcode_info(Opcode::kXrcCompareSwap).offset_of(ExtHeader::kAtomicEth) == 16);
static_assert(opcode_info(Opcode::kXrcCompareSwap).header_bytes == 44);
static_assert(opcode_info(Opcode::kXrcAcknowledge).header_bytes == 16);
static_assert(opcode_info(Opcode::kXrcSendOnlyInv).offset_of(ExtHeader::kIeth) == 16);
static_assert(kAllOpcodes.size() == 63);
// rxe's ICRC quirk is RC FLUSH's alone (rxe_opcode.c: every other opcode that rxe knows has its
// RXE_PAYLOAD offset).
static_assert([] {
  for (Opcode op : kAllOpcodes) {
    if (opcode_info(op).is(kFlagRxeIcrc) != (op == Opcode::kRcFlush)) return false;
  }
  return true;
}());

// The XRC opcode of an RC operation (and back): IBTA gives XRC the RC layout under prefix 101b.
inline constexpr std::uint8_t kXrcOpcodeBase = 0xa0;
constexpr Opcode xrc_opcode(Opcode rc) {
  return static_cast<Opcode>(static_cast<std::uint8_t>(rc) | kXrcOpcodeBase);
}
constexpr Opcode rc_opcode(Opcode xrc) {
  return static_cast<Opcode>(static_cast<std::uint8_t>(xrc) & 0x1fu);
}
// The RC opcode of the same operation as `op` for an XRC opcode, `op` itself for any other.
constexpr Opcode rc_operation(Opcode op) {
  const std::uint8_t v = static_cast<std::uint8_t>(op);
  return (v & 0xe0u) == kXrcOpcodeBase ? rc_opcode(op) : op;
}
// Every XRC opcode is its RC operation's, with the XRCETH on requests.
static_assert([] {
  for (Opcode op : kAllOpcodes) {
    const OpcodeInfo& x = opcode_info(op);
    if (x.transport != Transport::kXrc) continue;
    const OpcodeInfo& r = opcode_info(rc_opcode(op));
    if (!r.valid || r.flags != x.flags || xrc_opcode(static_cast<Opcode>(r.value)) != op)
      return false;
    if ((r.ext_headers | (x.is(kFlagRequest) ? detail::ext_bit(ExtHeader::kXrcEth) : 0)) !=
        x.ext_headers) {
      return false;
    }
  }
  return true;
}());

}  // namespace uroce::wire

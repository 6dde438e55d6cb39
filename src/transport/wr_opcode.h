// The work-request table: every send work-request opcode (IBV_WR_*), the QP types that may post
// it, its completion opcode, its request packets and what it carries, all derived from
// wr_opcodes.def (the one list), as wire/opcode.h derives the packets' from wire/opcodes.def.
// The verbs' post_send, the transport's post_send, the requester and the completer take their
// rules by opcode from here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "base/assert.h"
#include "uroce/types.h"
#include "wire/opcode.h"

namespace uroce::transport {

// Packets (and so PSNs) a message of `length` bytes takes at path MTU `mtu`: at least one.
constexpr std::uint32_t packets_for(std::uint64_t length, std::uint32_t mtu) {
  return length == 0 ? 1 : static_cast<std::uint32_t>((length + mtu - 1) / mtu);
}

// What a work request does and carries (W_* in wr_opcodes.def).
enum WrFlag : std::uint32_t {
  // The operation (IBTA vol. 1 9.4): one of these, or none for a local operation.
  kWrSend = 1u << 0,    // SEND: consumes a receive WQE at the responder
  kWrWrite = 1u << 1,   // RDMA WRITE
  kWrRead = 1u << 2,    // RDMA READ
  kWrAtomic = 1u << 3,  // ATOMIC (Compare & Swap, Fetch & Add)
  // Carries Immediate Data (the ImmDt of its last packet): SendWr::imm_data.
  kWrImm = 1u << 4,
  // Carries the R_Key for the responder to invalidate (the IETH of its last packet):
  // SendWr::invalidate_rkey.
  kWrInvalidate = 1u << 5,
  // Names remote memory, a virtual address and an R_Key: SendWr::rdma into the RETH, or for an
  // atomic SendWr::atomic into the AtomicETH.
  kWrRemote = 1u << 6,
  // IBV_SEND_INLINE copies its data at post time (rxe: WR_INLINE_MASK). The others ignore the
  // flag: a READ's and an atomic's local buffer is where the answer goes.
  kWrInline = 1u << 7,
  // IBTA 1.5 (annex A19): ATOMIC WRITE places its 8 bytes at once (SendWr::rdma names them);
  // FLUSH makes what was written to a range or a region visible (SendWr::flush), no local data.
  kWrAtomicWrite = 1u << 8,
  kWrFlush = 1u << 9,
};

// Where a packet sits in its message (IBTA 9.2: First, Middle, Last; Only is First and Last).
enum class PacketPosition : std::uint8_t { kOnly, kFirst, kMiddle, kLast };
inline constexpr std::size_t kPacketPositions = 4;
constexpr PacketPosition packet_position(bool first, bool last) {
  if (first) return last ? PacketPosition::kOnly : PacketPosition::kFirst;
  return last ? PacketPosition::kLast : PacketPosition::kMiddle;
}

// The QP types uroce has (RC, UC, UD), as indices and mask bits.
inline constexpr std::size_t kQpTypes = 3;
constexpr std::size_t qp_type_index(QpType t) {
  return static_cast<std::size_t>(t) - static_cast<std::size_t>(QpType::kRc);
}
constexpr std::uint8_t qp_type_bit(QpType t) {
  return static_cast<std::uint8_t>(1u << qp_type_index(t));
}
inline constexpr std::array<QpType, kQpTypes> kAllQpTypes = {QpType::kRc, QpType::kUc, QpType::kUd};

struct WrOpcodeInfo {
  bool valid = false;
  WrOpcode opcode = WrOpcode::kSend;
  std::string_view name;
  std::uint8_t qp_types = 0;  // bit qp_type_bit(t) set: a QP of type t may post it
  WcOpcode completion = WcOpcode::kSend;
  std::uint8_t operand_bytes = 0;  // wr_opcodes.def: 0, or the one length (atomics: 8)
  std::uint32_t flags = 0;
  // The request packet on an RC QP of a one-packet message (none: a local operation).
  std::optional<wire::Opcode> packet;
  // Derived: the request packet at each position on each QP type that allows it (none where the
  // transport has no such packet: a UD message is one packet, a READ or an atomic one request).
  std::array<std::array<std::optional<wire::Opcode>, kPacketPositions>, kQpTypes> request{};

  constexpr bool allows(QpType t) const { return (qp_types & qp_type_bit(t)) != 0; }
  constexpr bool is(std::uint32_t flag) const { return (flags & flag) == flag; }
  // LOCAL_INV and BIND_MW: no packet; the requester executes them (Qp::run_local_op).
  constexpr bool is_local() const { return !packet.has_value(); }
  // RDMA READ and ATOMIC (rxe: WR_ATOMIC_OR_READ_MASK), and ATOMIC WRITE and FLUSH: answered
  // by READ responses or an Atomic Acknowledge, never by a plain ACK (the IBTA 1.5 two by a
  // zero-length READ Response Only, rxe's send_read_response_ack()); each takes a responder
  // resource, so on RC each outstanding one takes one of the QP's max_rd_atomic (its initiator
  // depth), and a fenced WQE waits for them (IBTA 10.8.3.3).
  constexpr bool is_read_or_atomic() const {
    return (flags & (kWrRead | kWrAtomic | kWrAtomicWrite | kWrFlush)) != 0;
  }
  // ATOMIC WRITE and FLUSH: their answer is a READ Response Only without data.
  constexpr bool answered_empty() const { return (flags & (kWrAtomicWrite | kWrFlush)) != 0; }
  // The PSNs a message of `length` bytes takes at path MTU `mtu`: one per packet of a SEND or an
  // RDMA WRITE (a UD message, at most the MTU, is one), one per response packet of an RDMA READ
  // (its one request takes them all), one for an atomic, an ATOMIC WRITE or a FLUSH.
  constexpr std::uint32_t psns(std::uint64_t length, std::uint32_t mtu) const {
    return operand_bytes != 0 || is(kWrFlush) ? 1 : packets_for(length, mtu);
  }
  // The opcode of the packet at `pos` of this request on a QP of type `t`, which allows it.
  constexpr wire::Opcode request_opcode(QpType t, PacketPosition pos) const {
    const std::optional<wire::Opcode>& op = request[qp_type_index(t)][static_cast<unsigned>(pos)];
    UROCE_ASSERT(op.has_value());
    return *op;
  }
};

namespace detail {

constexpr wire::Transport transport_of(QpType t) {
  switch (t) {
    case QpType::kRc:
      return wire::Transport::kRc;
    case QpType::kUc:
      return wire::Transport::kUc;
    case QpType::kXrcSend:  // never a transport QP's type: XRC runs as RC (QpEnv::xrc)
    case QpType::kXrcRecv:
      return wire::Transport::kXrc;
    case QpType::kUd:
      break;
  }
  return wire::Transport::kUd;
}

constexpr std::uint32_t position_flags(PacketPosition pos) {
  switch (pos) {
    case PacketPosition::kOnly:
      return wire::kFlagFirst | wire::kFlagLast;
    case PacketPosition::kFirst:
      return wire::kFlagFirst;
    case PacketPosition::kMiddle:
      return wire::kFlagMiddle;
    case PacketPosition::kLast:
      break;
  }
  return wire::kFlagLast;
}

// The request packet at `pos` on transport `t` of the operation whose RC Only packet is `only`:
// the one request opcode of that transport in table 38 with the same operation at that position
// and, in a Last or Only packet (the one that carries them), the same ImmDt and IETH. On RC at
// Only it is `only` itself: Compare & Swap and Fetch & Add differ in nothing else.
constexpr std::optional<wire::Opcode> derive_request(wire::Opcode only, QpType t,
                                                     PacketPosition pos) {
  if (t == QpType::kRc && pos == PacketPosition::kOnly) return only;
  constexpr std::uint32_t kOperation = wire::kFlagSend | wire::kFlagWrite | wire::kFlagRead |
                                       wire::kFlagAtomic | wire::kFlagAtomicWrite |
                                       wire::kFlagFlush;
  constexpr std::uint32_t kPosition = wire::kFlagFirst | wire::kFlagMiddle | wire::kFlagLast;
  constexpr std::uint32_t kTail = wire::kFlagImm | wire::kFlagInvalidate;
  const wire::OpcodeInfo& o = wire::opcode_info(only);
  const std::uint32_t want = (o.flags & kOperation) | position_flags(pos) |
                             ((position_flags(pos) & wire::kFlagLast) ? o.flags & kTail : 0);
  std::optional<wire::Opcode> found;
  int matches = 0;
  for (wire::Opcode op : wire::kAllOpcodes) {
    const wire::OpcodeInfo& i = wire::opcode_info(op);
    if (i.transport == transport_of(t) && i.is(wire::kFlagRequest) &&
        (i.flags & (kOperation | kPosition | kTail)) == want) {
      found = op;
      ++matches;
    }
  }
  return matches == 1 ? found : std::nullopt;
}

constexpr WrOpcodeInfo make_wr_opcode_info(WrOpcode opcode, std::string_view name,
                                           std::uint8_t qp_types, WcOpcode completion,
                                           std::optional<wire::Opcode> packet,
                                           std::uint8_t operand_bytes, std::uint32_t flags) {
  WrOpcodeInfo info;
  info.valid = true;
  info.opcode = opcode;
  info.name = name;
  info.qp_types = qp_types;
  info.completion = completion;
  info.operand_bytes = operand_bytes;
  info.flags = flags;
  info.packet = packet;
  if (!packet) return info;
  for (QpType t : kAllQpTypes) {
    if (!info.allows(t)) continue;
    for (std::size_t p = 0; p < kPacketPositions; ++p) {
      info.request[qp_type_index(t)][p] =
          derive_request(*packet, t, static_cast<PacketPosition>(p));
    }
  }
  return info;
}

// Indexed by the IBV_WR_* value (IBV_WR_ATOMIC_WRITE, the highest libibverbs has, is 15).
inline constexpr std::size_t kWrOpcodeSlots = 16;

constexpr std::array<WrOpcodeInfo, kWrOpcodeSlots> make_wr_opcode_table() {
  std::array<WrOpcodeInfo, kWrOpcodeSlots> table{};
  using enum wire::Opcode;
  constexpr std::optional<wire::Opcode> NONE = std::nullopt;
  constexpr std::uint8_t RC = qp_type_bit(QpType::kRc);
  constexpr std::uint8_t UC = qp_type_bit(QpType::kUc);
  constexpr std::uint8_t UD = qp_type_bit(QpType::kUd);
  constexpr std::uint32_t W_SEND = kWrSend, W_WRITE = kWrWrite, W_READ = kWrRead,
                          W_ATOMIC = kWrAtomic, W_IMM = kWrImm, W_INV = kWrInvalidate,
                          W_REMOTE = kWrRemote, W_INLINE = kWrInline,
                          W_ATOMIC_WRITE = kWrAtomicWrite, W_FLUSH = kWrFlush;
#define UROCE_WR_OPCODE(e, name, types, wc, pkt, bytes, flags)                                    \
  table[static_cast<std::uint8_t>(WrOpcode::e)] =                                                 \
      make_wr_opcode_info(WrOpcode::e, name, static_cast<std::uint8_t>(types), WcOpcode::wc, pkt, \
                          bytes, static_cast<std::uint32_t>(flags));
#include "transport/wr_opcodes.def"
#undef UROCE_WR_OPCODE
  return table;
}

}  // namespace detail

inline constexpr std::array<WrOpcodeInfo, detail::kWrOpcodeSlots> kWrOpcodeTable =
    detail::make_wr_opcode_table();

// The table entry of a work-request opcode, or nullptr when uroce does not know it (an
// application may pass any value through the drop-in libibverbs).
constexpr const WrOpcodeInfo* wr_opcode_info(WrOpcode op) {
  const auto v = static_cast<std::size_t>(op);
  if (v >= kWrOpcodeTable.size() || !kWrOpcodeTable[v].valid) return nullptr;
  return &kWrOpcodeTable[v];
}

// Every known work-request opcode, in table order (for tests that iterate).
inline constexpr std::array<WrOpcode, 0
#define UROCE_WR_OPCODE(e, name, types, wc, pkt, bytes, flags) +1
#include "transport/wr_opcodes.def"
#undef UROCE_WR_OPCODE
                            >
    kAllWrOpcodes = {
#define UROCE_WR_OPCODE(e, name, types, wc, pkt, bytes, flags) WrOpcode::e,
#include "transport/wr_opcodes.def"
#undef UROCE_WR_OPCODE
};

static_assert(kAllWrOpcodes.size() == 12);
static_assert(wr_opcode_info(WrOpcode::kSend)->request_opcode(QpType::kUd, PacketPosition::kOnly) ==
              wire::Opcode::kUdSendOnly);

}  // namespace uroce::transport

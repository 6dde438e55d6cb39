// The work-request table (transport/wr_opcodes.def) pinned against the rules it encodes, written
// out here independently of how the table was typed: which QP types may post each opcode (IBTA
// vol. 1 9.2 table 38 has the packets; rxe_wr_opcode_info the same masks, but for SEND with
// Invalidate), what each completes as (rxe_comp.c wr_to_wc_opcode()), what it carries, and the
// request packet the requester builds at each position on each QP type. Every rule is checked by
// one function, check_entry(), that the last test shows failing on planted wrong entries.
#include "transport/wr_opcode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace uroce::transport {
namespace {

using wire::Opcode;
constexpr QpType RC = QpType::kRc;
constexpr QpType UC = QpType::kUc;
constexpr QpType UD = QpType::kUd;

// ---- the rules, written out ----------------------------------------------------------------

struct Rule {
  WrOpcode op;
  std::set<QpType> qp_types;
  WcOpcode completion;
};

// UD carries SEND (with or without immediate) only; UC adds RDMA WRITE; READ, the atomics and
// SEND with Invalidate are RC's alone; the local operations as rxe_wr_opcode_info has them:
// LOCAL_INV on RC, BIND_MW on RC and UC. A send completion reports the operation, not its
// variant.
const std::vector<Rule> kRules = {
    {WrOpcode::kRdmaWrite, {RC, UC}, WcOpcode::kRdmaWrite},
    {WrOpcode::kRdmaWriteWithImm, {RC, UC}, WcOpcode::kRdmaWrite},
    {WrOpcode::kSend, {RC, UC, UD}, WcOpcode::kSend},
    {WrOpcode::kSendWithImm, {RC, UC, UD}, WcOpcode::kSend},
    {WrOpcode::kRdmaRead, {RC}, WcOpcode::kRdmaRead},
    {WrOpcode::kAtomicCmpAndSwp, {RC}, WcOpcode::kCompSwap},
    {WrOpcode::kAtomicFetchAndAdd, {RC}, WcOpcode::kFetchAdd},
    {WrOpcode::kLocalInv, {RC}, WcOpcode::kLocalInv},
    {WrOpcode::kBindMw, {RC, UC}, WcOpcode::kBindMw},
    {WrOpcode::kSendWithInv, {RC}, WcOpcode::kSend},
    // IBTA 1.5 (annex A19): RC only, as rxe's table has them.
    {WrOpcode::kFlush, {RC}, WcOpcode::kFlush},
    {WrOpcode::kAtomicWrite, {RC}, WcOpcode::kAtomicWrite},
};

// The request packets, Only, First, Middle, Last (none: no such packet), of every opcode that a
// QP type allows; the old requester's send_opcode() and write_opcode() as a table.
struct Packets {
  WrOpcode op;
  QpType type;
  std::array<std::optional<Opcode>, kPacketPositions> at;  // PacketPosition order
};
constexpr std::nullopt_t NONE = std::nullopt;
const std::vector<Packets> kPackets = {
    {WrOpcode::kSend,
     RC,
     {Opcode::kRcSendOnly, Opcode::kRcSendFirst, Opcode::kRcSendMiddle, Opcode::kRcSendLast}},
    {WrOpcode::kSendWithImm,
     RC,
     {Opcode::kRcSendOnlyImm, Opcode::kRcSendFirst, Opcode::kRcSendMiddle, Opcode::kRcSendLastImm}},
    {WrOpcode::kSendWithInv,
     RC,
     {Opcode::kRcSendOnlyInv, Opcode::kRcSendFirst, Opcode::kRcSendMiddle, Opcode::kRcSendLastInv}},
    {WrOpcode::kRdmaWrite,
     RC,
     {Opcode::kRcRdmaWriteOnly, Opcode::kRcRdmaWriteFirst, Opcode::kRcRdmaWriteMiddle,
      Opcode::kRcRdmaWriteLast}},
    {WrOpcode::kRdmaWriteWithImm,
     RC,
     {Opcode::kRcRdmaWriteOnlyImm, Opcode::kRcRdmaWriteFirst, Opcode::kRcRdmaWriteMiddle,
      Opcode::kRcRdmaWriteLastImm}},
    {WrOpcode::kRdmaRead, RC, {Opcode::kRcRdmaReadRequest, NONE, NONE, NONE}},
    {WrOpcode::kAtomicCmpAndSwp, RC, {Opcode::kRcCompareSwap, NONE, NONE, NONE}},
    {WrOpcode::kAtomicFetchAndAdd, RC, {Opcode::kRcFetchAdd, NONE, NONE, NONE}},
    {WrOpcode::kFlush, RC, {Opcode::kRcFlush, NONE, NONE, NONE}},
    {WrOpcode::kAtomicWrite, RC, {Opcode::kRcAtomicWrite, NONE, NONE, NONE}},
    {WrOpcode::kSend,
     UC,
     {Opcode::kUcSendOnly, Opcode::kUcSendFirst, Opcode::kUcSendMiddle, Opcode::kUcSendLast}},
    {WrOpcode::kSendWithImm,
     UC,
     {Opcode::kUcSendOnlyImm, Opcode::kUcSendFirst, Opcode::kUcSendMiddle, Opcode::kUcSendLastImm}},
    {WrOpcode::kRdmaWrite,
     UC,
     {Opcode::kUcRdmaWriteOnly, Opcode::kUcRdmaWriteFirst, Opcode::kUcRdmaWriteMiddle,
      Opcode::kUcRdmaWriteLast}},
    {WrOpcode::kRdmaWriteWithImm,
     UC,
     {Opcode::kUcRdmaWriteOnlyImm, Opcode::kUcRdmaWriteFirst, Opcode::kUcRdmaWriteMiddle,
      Opcode::kUcRdmaWriteLastImm}},
    {WrOpcode::kSend, UD, {Opcode::kUdSendOnly, NONE, NONE, NONE}},
    {WrOpcode::kSendWithImm, UD, {Opcode::kUdSendOnlyImm, NONE, NONE, NONE}},
};

std::string type_name(QpType t) {
  return std::string(wire::transport_name(detail::transport_of(t)));
}

std::string show(std::optional<Opcode> op) {
  return op ? std::string(wire::opcode_info(*op).name) : std::string("none");
}

// ---- the check ---------------------------------------------------------------------------------

// The rules `e` breaks, one line each (empty: none): the written-out rules above, and agreement of
// its flags with its operation and with its RC Only packet in wire/opcodes.def.
std::vector<std::string> check_entry(const WrOpcodeInfo& e) {
  std::vector<std::string> bad;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) bad.push_back(std::string(e.name) + ": " + what);
  };
  const auto rule =
      std::find_if(kRules.begin(), kRules.end(), [&](const Rule& r) { return r.op == e.opcode; });
  expect(rule != kRules.end(), "no rule for this opcode");
  if (rule == kRules.end()) return bad;
  for (QpType t : kAllQpTypes) {
    expect(e.allows(t) == (rule->qp_types.count(t) != 0),
           (e.allows(t) ? "allowed on " : "refused on ") + type_name(t));
    const auto p = std::find_if(kPackets.begin(), kPackets.end(),
                                [&](const Packets& k) { return k.op == e.opcode && k.type == t; });
    for (std::size_t pos = 0; pos < kPacketPositions; ++pos) {
      const std::optional<Opcode> want = p != kPackets.end() ? p->at[pos] : std::nullopt;
      const std::optional<Opcode> got = e.request[qp_type_index(t)][pos];
      expect(got == want, type_name(t) + " packet " + std::to_string(pos) + " is " + show(got) +
                              ", not " + show(want));
    }
    // A QP type allows an operation exactly when its transport has the packets (table 38).
    if (e.packet) {
      const bool carried = detail::derive_request(*e.packet, t, PacketPosition::kOnly).has_value();
      expect(e.allows(t) == carried, type_name(t) + ": allowed and carried differ");
    }
  }
  expect(e.completion == rule->completion, "completion opcode");

  const std::uint32_t operation =
      e.flags & (kWrSend | kWrWrite | kWrRead | kWrAtomic | kWrAtomicWrite | kWrFlush);
  const bool one_operation = operation != 0 && (operation & (operation - 1)) == 0;
  expect(one_operation == e.packet.has_value(), "one operation exactly when it has a packet");
  const bool remote =
      e.is(kWrWrite) || e.is(kWrRead) || e.is(kWrAtomic) || e.is(kWrAtomicWrite) || e.is(kWrFlush);
  expect(e.is(kWrRemote) == remote, "a remote address exactly for RDMA, atomics, IBTA 1.5's");
  // ATOMIC WRITE's 8 bytes may be inline: rdma-core's ibv_wr_atomic_write copies them at once.
  expect(e.is(kWrInline) == (e.is(kWrSend) || e.is(kWrWrite) || e.is(kWrAtomicWrite)),
         "inline exactly for SEND, WRITE, ATOMIC WRITE");
  expect(e.operand_bytes == (e.is(kWrAtomic) || e.is(kWrAtomicWrite) ? 8 : 0),
         "8-byte operand exactly for atomics and ATOMIC WRITE");
  expect(e.is_read_or_atomic() ==
             (e.is(kWrRead) || e.is(kWrAtomic) || e.is(kWrAtomicWrite) || e.is(kWrFlush)),
         "READ, atomic or IBTA 1.5 (a responder resource each)");
  const std::string name(e.name);
  expect(e.is(kWrImm) == (name.find("Immediate") != std::string::npos), "Immediate");
  expect(e.is(kWrInvalidate) == (name == "SEND with Invalidate"), "Invalidate");
  if (!e.packet) return bad;
  const wire::OpcodeInfo& w = wire::opcode_info(*e.packet);
  expect(w.transport == wire::Transport::kRc && w.is(wire::kFlagRequest) &&
             w.is(wire::kFlagFirst | wire::kFlagLast),
         "its packet is an RC request Only packet");
  expect(w.is(wire::kFlagSend) == e.is(kWrSend) && w.is(wire::kFlagWrite) == e.is(kWrWrite) &&
             w.is(wire::kFlagRead) == e.is(kWrRead) && w.is(wire::kFlagAtomic) == e.is(kWrAtomic) &&
             w.is(wire::kFlagAtomicWrite) == e.is(kWrAtomicWrite) &&
             w.is(wire::kFlagFlush) == e.is(kWrFlush),
         "its packet's operation");
  expect(w.is(wire::kFlagImm) == e.is(kWrImm), "its packet's ImmDt");
  expect(w.is(wire::kFlagInvalidate) == e.is(kWrInvalidate), "its packet's IETH");
  const bool addressed = w.has(wire::ExtHeader::kReth) || w.has(wire::ExtHeader::kAtomicEth);
  expect(addressed == e.is(kWrRemote), "its packet's RETH or AtomicETH");
  return bad;
}

std::string lines(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& l : v) s += l + "\n";
  return s;
}

// ---- the tests ---------------------------------------------------------------------------------

TEST(WrOpcode, TableHoldsTheIbvOpcodesUroceKnows) {
  std::set<unsigned> listed;
  for (WrOpcode op : kAllWrOpcodes) {
    listed.insert(static_cast<unsigned>(op));
    ASSERT_NE(wr_opcode_info(op), nullptr);
    EXPECT_EQ(wr_opcode_info(op)->opcode, op);
  }
  EXPECT_EQ(listed, (std::set<unsigned>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 14, 15}));
  EXPECT_EQ(kRules.size(), kAllWrOpcodes.size());
  // IBV_WR_TSO (10) and the rest: unknown, as are values past the table.
  for (unsigned v : {10u, 11u, 12u, 13u, 16u, 200u, 255u}) {
    EXPECT_EQ(wr_opcode_info(static_cast<WrOpcode>(v)), nullptr) << v;
  }
}

TEST(WrOpcode, EveryEntryFollowsTheRules) {
  for (WrOpcode op : kAllWrOpcodes) {
    const std::vector<std::string> bad = check_entry(*wr_opcode_info(op));
    EXPECT_TRUE(bad.empty()) << lines(bad);
  }
}

TEST(WrOpcode, UdAllowsOnlySendAndSendWithImmediate) {
  std::set<WrOpcode> ud;
  for (WrOpcode op : kAllWrOpcodes) {
    if (wr_opcode_info(op)->allows(UD)) ud.insert(op);
  }
  EXPECT_EQ(ud, (std::set<WrOpcode>{WrOpcode::kSend, WrOpcode::kSendWithImm}));
}

TEST(WrOpcode, UcRefusesReadAtomicsAndInvalidate) {
  for (WrOpcode op :
       {WrOpcode::kRdmaRead, WrOpcode::kAtomicCmpAndSwp, WrOpcode::kAtomicFetchAndAdd,
        WrOpcode::kSendWithInv, WrOpcode::kLocalInv, WrOpcode::kFlush, WrOpcode::kAtomicWrite}) {
    EXPECT_FALSE(wr_opcode_info(op)->allows(UC)) << wr_opcode_info(op)->name;
  }
  for (WrOpcode op : {WrOpcode::kSend, WrOpcode::kSendWithImm, WrOpcode::kRdmaWrite,
                      WrOpcode::kRdmaWriteWithImm}) {
    EXPECT_TRUE(wr_opcode_info(op)->allows(UC)) << wr_opcode_info(op)->name;
  }
}

TEST(WrOpcode, CompletionOpcodes) {
  auto wc = [](WrOpcode op) { return wr_opcode_info(op)->completion; };
  EXPECT_EQ(wc(WrOpcode::kSend), WcOpcode::kSend);
  EXPECT_EQ(wc(WrOpcode::kSendWithImm), WcOpcode::kSend);
  EXPECT_EQ(wc(WrOpcode::kSendWithInv), WcOpcode::kSend);
  EXPECT_EQ(wc(WrOpcode::kRdmaWrite), WcOpcode::kRdmaWrite);
  EXPECT_EQ(wc(WrOpcode::kRdmaWriteWithImm), WcOpcode::kRdmaWrite);
  EXPECT_EQ(wc(WrOpcode::kRdmaRead), WcOpcode::kRdmaRead);
  EXPECT_EQ(wc(WrOpcode::kAtomicCmpAndSwp), WcOpcode::kCompSwap);
  EXPECT_EQ(wc(WrOpcode::kAtomicFetchAndAdd), WcOpcode::kFetchAdd);
  EXPECT_EQ(wc(WrOpcode::kLocalInv), WcOpcode::kLocalInv);
  EXPECT_EQ(wc(WrOpcode::kBindMw), WcOpcode::kBindMw);
  EXPECT_EQ(wc(WrOpcode::kFlush), WcOpcode::kFlush);              // IBV_WC_FLUSH, 8
  EXPECT_EQ(wc(WrOpcode::kAtomicWrite), WcOpcode::kAtomicWrite);  // IBV_WC_ATOMIC_WRITE, 9
}

TEST(WrOpcode, PsnsOfAMessage) {
  const WrOpcodeInfo& send = *wr_opcode_info(WrOpcode::kSend);
  const WrOpcodeInfo& read = *wr_opcode_info(WrOpcode::kRdmaRead);
  const WrOpcodeInfo& cas = *wr_opcode_info(WrOpcode::kAtomicCmpAndSwp);
  EXPECT_EQ(send.psns(0, 1024), 1u);
  EXPECT_EQ(send.psns(1024, 1024), 1u);
  EXPECT_EQ(send.psns(1025, 1024), 2u);
  EXPECT_EQ(read.psns(4096, 256), 16u);  // one per response packet
  EXPECT_EQ(cas.psns(8, 256), 1u);
  EXPECT_EQ(wr_opcode_info(WrOpcode::kFlush)->psns(0, 256), 1u);  // one request, one response
  EXPECT_EQ(wr_opcode_info(WrOpcode::kAtomicWrite)->psns(8, 256), 1u);
  EXPECT_EQ(packet_position(true, true), PacketPosition::kOnly);
  EXPECT_EQ(packet_position(true, false), PacketPosition::kFirst);
  EXPECT_EQ(packet_position(false, false), PacketPosition::kMiddle);
  EXPECT_EQ(packet_position(false, true), PacketPosition::kLast);
}

// check_entry() is what pins the table: each of these entries, one rule wrong, fails it.
TEST(WrOpcode, PlantedWrongEntriesAreCaught) {
  using detail::make_wr_opcode_info;
  const std::uint8_t rc = qp_type_bit(RC), uc = qp_type_bit(UC), ud = qp_type_bit(UD);
  const std::vector<WrOpcodeInfo> planted = {
      // RDMA WRITE on UD.
      make_wr_opcode_info(WrOpcode::kRdmaWrite, "RDMA WRITE", rc | uc | ud, WcOpcode::kRdmaWrite,
                          Opcode::kRcRdmaWriteOnly, 0, kWrWrite | kWrRemote | kWrInline),
      // RDMA READ on UC.
      make_wr_opcode_info(WrOpcode::kRdmaRead, "RDMA READ", rc | uc, WcOpcode::kRdmaRead,
                          Opcode::kRcRdmaReadRequest, 0, kWrRead | kWrRemote),
      // SEND with Invalidate on UD, as rxe's table has it.
      make_wr_opcode_info(WrOpcode::kSendWithInv, "SEND with Invalidate", rc | uc | ud,
                          WcOpcode::kSend, Opcode::kRcSendOnlyInv, 0,
                          kWrSend | kWrInvalidate | kWrInline),
      // SEND refused on UC.
      make_wr_opcode_info(WrOpcode::kSend, "SEND", rc | ud, WcOpcode::kSend, Opcode::kRcSendOnly, 0,
                          kWrSend | kWrInline),
      // RDMA WRITE with Immediate completing as a SEND.
      make_wr_opcode_info(WrOpcode::kRdmaWriteWithImm, "RDMA WRITE with Immediate", rc | uc,
                          WcOpcode::kSend, Opcode::kRcRdmaWriteOnlyImm, 0,
                          kWrWrite | kWrRemote | kWrImm | kWrInline),
      // Fetch & Add sending Compare & Swap packets.
      make_wr_opcode_info(WrOpcode::kAtomicFetchAndAdd, "Fetch & Add", rc, WcOpcode::kFetchAdd,
                          Opcode::kRcCompareSwap, 8, kWrAtomic | kWrRemote),
      // Compare & Swap with inline data, and without its 8-byte operand.
      make_wr_opcode_info(WrOpcode::kAtomicCmpAndSwp, "Compare & Swap", rc, WcOpcode::kCompSwap,
                          Opcode::kRcCompareSwap, 8, kWrAtomic | kWrRemote | kWrInline),
      make_wr_opcode_info(WrOpcode::kAtomicCmpAndSwp, "Compare & Swap", rc, WcOpcode::kCompSwap,
                          Opcode::kRcCompareSwap, 0, kWrAtomic | kWrRemote),
      // SEND with Immediate without its immediate.
      make_wr_opcode_info(WrOpcode::kSendWithImm, "SEND with Immediate", rc | uc | ud,
                          WcOpcode::kSend, Opcode::kRcSendOnlyImm, 0, kWrSend | kWrInline),
      // LOCAL_INV allowed on UC too (rxe's mask has RC alone).
      make_wr_opcode_info(WrOpcode::kLocalInv, "LOCAL INVALIDATE", rc | uc, WcOpcode::kLocalInv,
                          std::nullopt, 0, 0),
      // BIND_MW completing as a LOCAL_INV.
      make_wr_opcode_info(WrOpcode::kBindMw, "BIND MW", rc | uc, WcOpcode::kLocalInv, std::nullopt,
                          0, 0),
  };
  for (const WrOpcodeInfo& e : planted) {
    EXPECT_FALSE(check_entry(e).empty()) << e.name;
  }
}

}  // namespace
}  // namespace uroce::transport

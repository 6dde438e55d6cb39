// One pass over the payload on receive (issue 14): the engine checks a message continuation's
// ICRC while it copies the payload to where the QP's state says it goes. An intact continuation
// (RC WRITE Middle/Last, READ response Middle/Last) is placed in that one pass; a
// corrupted one, whichever field was hit, is a bad_icrc drop that changes no QP state, sends
// nothing, and writes no byte outside the range its intact self would write; a packet whose own
// headers choose its destination (a First with its RETH) is verified before anything reads it.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>

#include "engine/engine.h"
#include "transport/harness.h"
#include "wire/aeth.h"
#include "wire/icrc.h"
#include "wire/packet.h"

namespace uroce::engine {
namespace {

using test::pattern;
using test::Solo;
using wire::Opcode;

constexpr std::uint32_t kMtu = 256;
constexpr std::size_t kBthOffset = 14 + 20 + 8;  // Ethernet, IPv4, UDP
constexpr std::uint32_t kRqPsn = 0x5000;
constexpr std::uint32_t kSqPsn = 0x1000;

struct CountingDatapath final : datapath::Datapath {
  int sends = 0;
  std::size_t receive(Instant, std::size_t, const RxHandler&) override { return 0; }
  bool send(Instant, const wire::OuterHeaders&, ConstBytes, std::span<const ConstBytes>) override {
    ++sends;
    return true;
  }
};

struct OneQp final : QpDirectory {
  transport::Qp* qp = nullptr;
  transport::Qp* find_qp(std::uint32_t qpn) override {
    return qp != nullptr && qp->qpn() == qpn ? qp : nullptr;
  }
};

// The QP state a dropped packet must not change.
struct QpSnapshot {
  std::uint32_t responder_psn = 0;
  std::uint32_t responder_msn = 0;
  std::uint64_t packets_received = 0;
  std::uint64_t dropped = 0;
  std::uint64_t out_of_sequence = 0;
  std::uint64_t duplicates = 0;
  std::uint32_t outstanding = 0;
  std::size_t send_wcs = 0;
  std::size_t recv_wcs = 0;
  bool operator==(const QpSnapshot&) const = default;
};

// One RC QP behind an engine, fed frames from its peer the way the deferred receive path feeds
// them (datapath/udp with set_deferred_icrc, and the simulator's hosts): a continuation's ICRC is
// left to the engine, every other packet is verified first.
class OnePass : public ::testing::Test {
 protected:
  OnePass() : s_(QpType::kRc, kMtu, kSqPsn, kRqPsn), engine_(dir_, dp_, s_.e.ip) {
    dir_.qp = s_.e.qp.get();
    // Everything starts as a known pattern: any byte written is seen.
    const auto p = pattern(s_.e.buf.size(), 0x5a);
    std::copy(p.begin(), p.end(), s_.e.buf.begin());
    other_ = pattern(4096, 0x33);
    other_key_ = s_.e.memory.add(1, other_.data(), other_.size(),
                                 kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
  }

  std::vector<std::byte> frame(Opcode op, std::uint32_t psn, ConstBytes payload,
                               const std::function<void(wire::TransportHeaders&)>& edit = {}) {
    wire::TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(op);
    h.bth.psn = psn;
    h.bth.ack_req = wire::opcode_info(op).is(wire::kFlagLast);
    h.bth.dest_qpn = s_.e.qp->qpn();
    h.aeth.syndrome = wire::make_ack_syndrome();
    if (edit) edit(h);
    return test::craft(s_.peer, s_.e.ip, h, payload);
  }

  void receive(const std::vector<std::byte>& f) {
    transport::PacketInfo info;
    auto unverified =
        wire::parse_frame(wire::LinkType::kEthernet, f, wire::FrameOptions{.verify_icrc = false});
    if (unverified.ok() && wire::icrc_deferrable(*unverified->roce.op)) {
      wire::PendingIcrc pending(unverified->ip_udp, unverified->roce.bytes,
                                unverified->roce.payload, nullptr);
      info.src = unverified->ipv4.src;
      info.ip_header = unverified->ip_udp.first(20);
      info.pending = &pending;
      engine_.handle_rx(s_.now, unverified->roce, info);
      ASSERT_TRUE(pending.finished());
    } else {
      auto verified = wire::parse_frame(wire::LinkType::kEthernet, f);
      if (!verified.ok()) {
        engine_.count_drop(verified.error());
        return;
      }
      info.src = verified->ipv4.src;
      info.ip_header = verified->ip_udp.first(20);
      engine_.handle_rx(s_.now, verified->roce, info);
    }
  }

  // What the engine sends now.
  int flush() {
    const int before = dp_.sends;
    engine_.flush_tx(s_.now);
    return dp_.sends - before;
  }

  QpSnapshot snapshot() const {
    const transport::Qp& q = *s_.e.qp;
    return {q.responder_psn(),
            q.responder_msn(),
            q.counters().packets_received,
            q.counters().dropped,
            q.counters().out_of_sequence,
            q.counters().duplicate_requests,
            q.outstanding_send_wqes(),
            s_.e.scq.wcs.size(),
            s_.e.rcq.wcs.size()};
  }
  std::uint64_t bad_icrc() const {
    return engine_.counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)];
  }
  std::uint64_t one_pass() const { return engine_.counters().rx_one_pass; }

  // Delivers `bad` (a corrupted copy of a frame) and checks that it was dropped as a bad ICRC:
  // no QP state changed, nothing sent, and of the registered buffer only the bytes for which
  // `may_write(offset)` holds changed (the other region not at all). Returns whether the engine
  // placed it (and rejected it after).
  bool expect_dropped(const std::vector<std::byte>& bad,
                      const std::function<bool(std::size_t)>& may_write, const char* what) {
    const QpSnapshot before = snapshot();
    const std::vector<std::byte> buf = s_.e.buf;
    const std::vector<std::byte> other = other_;
    const std::uint64_t drops = bad_icrc();
    const std::uint64_t placed = one_pass();
    const std::uint64_t rx = engine_.counters().rx_packets;
    receive(bad);
    EXPECT_EQ(bad_icrc(), drops + 1) << what;
    EXPECT_EQ(engine_.counters().rx_packets, rx) << what;
    EXPECT_EQ(snapshot(), before) << what;
    EXPECT_EQ(flush(), 0) << what;
    EXPECT_EQ(other_, other) << what;
    for (std::size_t i = 0; i < buf.size(); ++i) {
      if (buf[i] != s_.e.buf[i] && !may_write(i)) {
        ADD_FAILURE() << what << ": byte " << i << " written";
        break;
      }
    }
    return one_pass() != placed;
  }

  // Corrupted copies of `f`, each with one header or trailer field hit. The PSN variant moves
  // it to `psn_to` (a neighbour's PSN: aimed at the expected one).
  struct Variant {
    const char* what;
    std::vector<std::byte> bytes;
  };
  static std::vector<Variant> corruptions(const std::vector<std::byte>& f, std::uint32_t psn_to) {
    EXPECT_NE(load_be24(f, kBthOffset + 9), psn_to);  // else it would be no corruption
    std::vector<Variant> v;
    const auto flip = [&](const char* what, std::size_t at, std::uint8_t mask) {
      Variant x{what, f};
      x.bytes[at] ^= static_cast<std::byte>(mask);
      v.push_back(std::move(x));
    };
    flip("opcode bit 0", kBthOffset, 0x01);
    flip("opcode bit 2", kBthOffset, 0x04);
    flip("opcode bit 5 (RC to UC)", kBthOffset, 0x20);
    flip("pad count", kBthOffset + 1, 0x10);
    flip("destination QPN", kBthOffset + 7, 0x01);
    flip("PSN low bit", kBthOffset + 11, 0x01);
    Variant psn{"PSN aimed at a neighbour", f};
    psn.bytes[kBthOffset + 9] = static_cast<std::byte>(psn_to >> 16);
    psn.bytes[kBthOffset + 10] = static_cast<std::byte>(psn_to >> 8);
    psn.bytes[kBthOffset + 11] = static_cast<std::byte>(psn_to);
    v.push_back(std::move(psn));
    flip("payload", kBthOffset + 12 + 5, 0x80);
    flip("last payload byte", f.size() - 5, 0x01);
    flip("ICRC", f.size() - 1, 0x40);
    return v;
  }

  Solo s_;
  OneQp dir_;
  CountingDatapath dp_;
  Engine engine_;
  std::vector<std::byte> other_;
  std::uint32_t other_key_ = 0;
};

TEST_F(OnePass, WriteMiddleAndLastArePlacedInOnePassAndCorruptedOnesDropped) {
  constexpr std::size_t kOff = 4096;
  constexpr std::size_t kLen = 2 * kMtu + 188;
  const auto data = pattern(kLen, 7);
  const ConstBytes d(data);
  const auto first =
      frame(Opcode::kRcRdmaWriteFirst, kRqPsn, d.first(kMtu), [&](wire::TransportHeaders& h) {
        h.reth = wire::Reth{s_.va(kOff), s_.e.key, kLen};
      });
  const auto middle = frame(Opcode::kRcRdmaWriteMiddle, kRqPsn + 1, d.subspan(kMtu, kMtu));
  const auto last = frame(Opcode::kRcRdmaWriteLast, kRqPsn + 2, d.subspan(2 * kMtu));

  receive(first);  // verified first: its RETH chooses the target
  EXPECT_EQ(one_pass(), 0u);
  EXPECT_EQ(s_.e.qp->responder_psn(), kRqPsn + 1);

  // The Middle's range is all any corrupted packet may touch now.
  const auto middle_range = [](std::size_t i) { return i >= kOff + kMtu && i < kOff + 2 * kMtu; };
  int placed = 0;
  for (const Variant& v : corruptions(middle, kRqPsn + 2)) {
    placed += expect_dropped(v.bytes, middle_range, v.what) ? 1 : 0;
  }
  // The Last moved onto the expected PSN: its length does not fit a Middle's place.
  for (const Variant& v : corruptions(last, kRqPsn + 1)) {
    placed += expect_dropped(v.bytes, middle_range, v.what) ? 1 : 0;
  }
  // A corrupted payload, pad or ICRC leaves the headers that place it intact: placed, then
  // rejected (twice from the Middle's variants).
  EXPECT_GE(placed, 3);

  receive(middle);
  receive(last);
  EXPECT_EQ(one_pass(), static_cast<std::uint64_t>(placed) + 2);
  EXPECT_EQ(s_.e.qp->responder_psn(), kRqPsn + 3);
  EXPECT_EQ(test::slice(s_.e, kOff, kLen), data);
  EXPECT_EQ(flush(), 1);  // the ACK the Last asked for
  // After the message, no continuation has a place: the next one is verified first (a
  // responder that still trusted the old write_va would write past the message).
  const auto stray = frame(Opcode::kRcRdmaWriteMiddle, kRqPsn + 3, d.subspan(kMtu, kMtu));
  const auto stray_last = frame(Opcode::kRcRdmaWriteLast, kRqPsn + 3, d.subspan(2 * kMtu));
  for (const auto* f : {&stray, &stray_last}) {
    for (const Variant& v : corruptions(*f, kRqPsn + 4)) {
      EXPECT_FALSE(expect_dropped(
          v.bytes, [](std::size_t) { return false; }, v.what));
    }
  }
  // Nothing else in the buffer changed.
  const auto p = pattern(s_.e.buf.size(), 0x5a);
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (i >= kOff && i < kOff + kLen) continue;
    ASSERT_EQ(s_.e.buf[i], p[i]) << i;
  }
}

TEST_F(OnePass, AFirstIsVerifiedBeforeItsRethIsRead) {
  constexpr std::size_t kOff = 8192;
  const auto data = pattern(2 * kMtu, 9);
  const auto first = frame(Opcode::kRcRdmaWriteFirst, kRqPsn, ConstBytes(data).first(kMtu),
                           [&](wire::TransportHeaders& h) {
                             h.reth = wire::Reth{s_.va(kOff), s_.e.key, 2 * kMtu};
                           });
  const std::size_t reth = kBthOffset + 12;
  std::vector<Variant> bad;
  for (const std::size_t at : {reth + 6, reth + 7, reth + 11, reth + 15}) {
    Variant v{"RETH", first};
    v.bytes[at] ^= std::byte{0x10};
    bad.push_back(std::move(v));
  }
  for (Variant& v : corruptions(first, kRqPsn + 1)) bad.push_back(std::move(v));
  for (const Variant& v : bad) {
    // Not a byte anywhere: a First is never placed before its check.
    EXPECT_FALSE(expect_dropped(
        v.bytes, [](std::size_t) { return false; }, v.what))
        << v.what;
  }
  receive(first);
  EXPECT_EQ(one_pass(), 0u);
  EXPECT_EQ(test::slice(s_.e, kOff, kMtu),
            std::vector<std::byte>(data.begin(), data.begin() + kMtu));
  // And the QP itself refuses to name a target for a First, intact or not.
  auto f = wire::parse_frame(wire::LinkType::kEthernet, first);
  ASSERT_TRUE(f.ok());
  std::array<MutBytes, transport::kMaxSge> where;
  transport::PacketInfo info;
  info.src = s_.peer;
  EXPECT_EQ(s_.e.qp->one_pass_target(f->roce, info, where), 0u);
}

TEST_F(OnePass, SendContinuationsAreVerifiedBeforeTheyTouchTheReceiveBuffer) {
  // A SEND's responder learns the message's length only from its Last: a corrupted continuation
  // placed unverified (a Middle's length where the real packet is a shorter Last) could write
  // past the end of the message into bytes nothing writes again. So SEND continuations are
  // checked first, and a corrupted one writes nothing at all.
  // A receive WQE of two SGEs: 300 bytes at 10000, 500 at 20000.
  const std::array<Sge, 2> sges{test::sge(s_.e, 10000, 300), test::sge(s_.e, 20000, 500)};
  ASSERT_EQ(s_.e.qp->post_recv(77, sges), Errc::kOk);
  constexpr std::size_t kLen = 2 * kMtu + 100;
  const auto data = pattern(kLen, 11);
  const ConstBytes d(data);
  receive(frame(Opcode::kRcSendFirst, kRqPsn, d.first(kMtu)));
  const auto middle = frame(Opcode::kRcSendMiddle, kRqPsn + 1, d.subspan(kMtu, kMtu));
  const auto last = frame(Opcode::kRcSendLast, kRqPsn + 2, d.subspan(2 * kMtu));
  const auto nowhere = [](std::size_t) { return false; };
  for (const Variant& v : corruptions(middle, kRqPsn + 2)) {
    EXPECT_FALSE(expect_dropped(v.bytes, nowhere, v.what)) << v.what;
  }
  for (const Variant& v : corruptions(last, kRqPsn + 1)) {
    EXPECT_FALSE(expect_dropped(v.bytes, nowhere, v.what)) << v.what;
  }
  // Nor does the QP name a target for an intact one.
  auto m = wire::parse_frame(wire::LinkType::kEthernet, middle);
  ASSERT_TRUE(m.ok());
  std::array<MutBytes, transport::kMaxSge> where;
  transport::PacketInfo info;
  info.src = s_.peer;
  EXPECT_EQ(s_.e.qp->one_pass_target(m->roce, info, where), 0u);
  receive(middle);
  receive(last);
  EXPECT_EQ(one_pass(), 0u);
  ASSERT_EQ(s_.e.rcq.wcs.size(), 1u);
  EXPECT_EQ(s_.e.rcq.wcs[0].wr_id, 77u);
  EXPECT_EQ(s_.e.rcq.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(s_.e.rcq.wcs[0].byte_len, kLen);
  std::vector<std::byte> got = test::slice(s_.e, 10000, 300);
  const std::vector<std::byte> second = test::slice(s_.e, 20000, kLen - 300);
  got.insert(got.end(), second.begin(), second.end());
  EXPECT_EQ(got, data);
  EXPECT_EQ(flush(), 1);
}

TEST_F(OnePass, ReadResponseMiddleAndLastArePlacedAndCorruptedOnesDropped) {
  constexpr std::size_t kOff = 30000;
  constexpr std::size_t kLen = 2 * kMtu + 50;
  const Sge local = test::sge(s_.e, kOff, kLen);
  transport::SendRequest r = test::request(5, WrOpcode::kRdmaRead, std::span(&local, 1));
  r.remote_addr = 0x7f00'0000'1000;
  r.rkey = 0xabcd;
  ASSERT_EQ(s_.e.qp->post_send(r), Errc::kOk);
  dir_.qp = s_.e.qp.get();
  engine_.doorbell(s_.e.qp->qpn());
  EXPECT_EQ(flush(), 1);  // the READ request
  const auto data = pattern(kLen, 13);
  const ConstBytes d(data);
  receive(frame(Opcode::kRcRdmaReadResponseFirst, kSqPsn, d.first(kMtu)));
  EXPECT_EQ(one_pass(), 0u);
  const auto middle = frame(Opcode::kRcRdmaReadResponseMiddle, kSqPsn + 1, d.subspan(kMtu, kMtu));
  const auto last = frame(Opcode::kRcRdmaReadResponseLast, kSqPsn + 2, d.subspan(2 * kMtu));
  const auto middle_range = [](std::size_t i) { return i >= kOff + kMtu && i < kOff + 2 * kMtu; };
  int placed = 0;
  for (const Variant& v : corruptions(middle, kSqPsn + 2)) {
    placed += expect_dropped(v.bytes, middle_range, v.what) ? 1 : 0;
  }
  for (const Variant& v : corruptions(last, kSqPsn + 1)) {
    placed += expect_dropped(v.bytes, middle_range, v.what) ? 1 : 0;
  }
  EXPECT_GE(placed, 3);
  receive(middle);
  receive(last);
  EXPECT_EQ(one_pass(), static_cast<std::uint64_t>(placed) + 2);
  ASSERT_EQ(s_.e.scq.wcs.size(), 1u);
  EXPECT_EQ(s_.e.scq.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(s_.e.scq.wcs[0].byte_len, kLen);
  EXPECT_EQ(test::slice(s_.e, kOff, kLen), data);
}

// From a third host, an intact continuation with the right QPN and PSN is not placed: the QP
// takes packets from its peer only, and one_pass_target asks the same.
TEST_F(OnePass, AContinuationFromAnotherHostIsNotPlaced) {
  constexpr std::size_t kOff = 40000;
  const auto data = pattern(2 * kMtu, 17);
  const ConstBytes d(data);
  receive(frame(Opcode::kRcRdmaWriteFirst, kRqPsn, d.first(kMtu), [&](wire::TransportHeaders& h) {
    h.reth = wire::Reth{s_.va(kOff), s_.e.key, 2 * kMtu};
  }));
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcRdmaWriteLast);
  h.bth.psn = kRqPsn + 1;
  h.bth.dest_qpn = s_.e.qp->qpn();
  const auto forged = test::craft(wire::IpAddress::v4(0x0a000099), s_.e.ip, h, pattern(kMtu, 0xee));
  const std::vector<std::byte> before = s_.e.buf;
  receive(forged);
  EXPECT_EQ(one_pass(), 0u);
  EXPECT_EQ(s_.e.buf, before);
  EXPECT_EQ(s_.e.qp->counters().src_addr_mismatch, 1u);
  EXPECT_EQ(s_.e.qp->responder_psn(), kRqPsn + 1);
}

}  // namespace
}  // namespace uroce::engine

// The engine and a batching datapath: flush_tx hands the datapath its flush every time, and a
// datapath that still holds packets (backpressure) keeps the engine's transmit work pending.
// And the engine's round (Engine::round), the one every executor runs: what it does in which
// order, and what it reports.
#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "transport/harness.h"
#include "wire/packet.h"

namespace uroce::engine {
namespace {

// Logs what the engine asks of it, in order; receive() hands over the frames in `inbound`.
struct FakeDatapath final : datapath::Datapath {
  int sends = 0;
  int flushes = 0;
  bool queued = false;
  std::vector<std::string> log;
  std::deque<std::vector<std::byte>> inbound;
  std::size_t receive(Instant, std::size_t max, const RxHandler& handler) override {
    log.push_back("receive " + std::to_string(max));
    std::size_t n = 0;
    for (; n < max && !inbound.empty(); ++n) {
      const std::vector<std::byte> f = std::move(inbound.front());
      inbound.pop_front();
      auto parsed = wire::parse_frame(wire::LinkType::kEthernet, f);
      EXPECT_TRUE(parsed.ok());
      datapath::RxMeta meta;
      meta.src = parsed->ipv4.src;
      meta.icrc_verified = true;
      handler(parsed->roce, meta);
    }
    return n;
  }
  bool send(Instant, const wire::OuterHeaders&, ConstBytes, std::span<const ConstBytes>) override {
    ++sends;
    log.push_back("send");
    return true;
  }
  void flush(Instant) override {
    ++flushes;
    log.push_back("flush");
  }
  bool tx_queued() const override { return queued; }
};

struct NoQps final : QpDirectory {
  transport::Qp* find_qp(std::uint32_t) override { return nullptr; }
};

TEST(Engine, FlushTxFlushesTheDatapathEveryTime) {
  NoQps qps;
  FakeDatapath dp;
  Engine e(qps, dp, wire::IpAddress{});
  EXPECT_EQ(e.flush_tx(Instant{}), 0u);
  EXPECT_EQ(dp.flushes, 1);
  e.doorbell(7);  // an unknown QP: nothing to send, but the flush still comes
  e.flush_tx(Instant{}, 0);
  EXPECT_EQ(dp.flushes, 2);
  EXPECT_EQ(dp.sends, 0);
}

TEST(Engine, PacketsQueuedInTheDatapathAreTransmitWork) {
  NoQps qps;
  FakeDatapath dp;
  Engine e(qps, dp, wire::IpAddress{});
  EXPECT_FALSE(e.has_tx_work());
  dp.queued = true;  // the socket was full at the last flush
  EXPECT_TRUE(e.has_tx_work());
  dp.queued = false;
  EXPECT_FALSE(e.has_tx_work());
}

// A frame for a QP this engine does not have: it counts as rx_unknown_qpn, so a test sees that
// the round handed it to the engine.
std::vector<std::byte> frame_for_unknown_qp(std::uint32_t src = 0x0a000002) {
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcSendOnly);
  h.bth.dest_qpn = 0x77;
  h.bth.psn = 1;
  const std::byte payload[8] = {};
  return test::craft(wire::IpAddress::v4(src), wire::IpAddress::v4(0x0a000001), h, payload);
}

// Packets for no QP here (unknown or closed QPNs) cost their source a budget (docs/SECURITY.md),
// time as an input: of a flood from one source at one instant exactly kUnknownQpnBurst are
// looked at and the rest dropped, counted; another source is not limited; a second later the
// first has kUnknownQpnPerSecond more.
TEST(EngineRound, PacketsForNoQpAreLimitedPerSource) {
  NoQps qps;
  FakeDatapath dp;
  Engine e(qps, dp, wire::IpAddress::v4(0x0a000001));
  constexpr std::uint64_t kFlood = 1000;
  const auto flood_at = [&](Instant t) {
    for (std::uint64_t i = 0; i < kFlood; ++i) dp.inbound.push_back(frame_for_unknown_qp());
    while (!dp.inbound.empty()) e.round(t, RoundPlan{}, Engine::RoundKind::kReceive);
  };
  const Instant t0 = Instant::from_ns(5'000'000'000);
  flood_at(t0);
  EXPECT_EQ(e.counters().rx_unknown_qpn, Engine::kUnknownQpnBurst);
  EXPECT_EQ(e.counters().rx_unknown_qpn_src_limited, kFlood - Engine::kUnknownQpnBurst);
  dp.inbound.push_back(frame_for_unknown_qp(0x0a000003));
  e.round(t0, RoundPlan{}, Engine::RoundKind::kReceive);
  EXPECT_EQ(e.counters().rx_unknown_qpn, Engine::kUnknownQpnBurst + 1);
  EXPECT_EQ(e.counters().rx_unknown_qpn_src_limited, kFlood - Engine::kUnknownQpnBurst);
  flood_at(t0 + Duration::s(1));
  EXPECT_EQ(e.counters().rx_unknown_qpn,
            Engine::kUnknownQpnBurst + 1 + Engine::kUnknownQpnPerSecond);
  EXPECT_EQ(e.counters().rx_unknown_qpn_src_limited,
            2 * kFlood - Engine::kUnknownQpnBurst - Engine::kUnknownQpnPerSecond);
  EXPECT_EQ(dp.sends, 0);
}

TEST(EngineRound, AReceivingRoundReadsABurstFiresTimersAndReportsTheEngineState) {
  NoQps qps;
  FakeDatapath dp;
  Engine e(qps, dp, wire::IpAddress::v4(0x0a000001));
  for (int i = 0; i < 3; ++i) dp.inbound.push_back(frame_for_unknown_qp());
  const RoundReport r = e.round(Instant::from_ns(1000), RoundPlan{}, Engine::RoundKind::kReceive);
  EXPECT_EQ(r.received, 3u);
  EXPECT_EQ(r.sent, 0u);
  EXPECT_EQ(e.counters().rx_unknown_qpn, 3u);
  // Nothing was posted, so nothing was sent before the receive or after it.
  EXPECT_EQ(dp.log, std::vector<std::string>{"receive " + std::to_string(Engine::kRxBurst)});
  EXPECT_EQ(r.held_acks, 0u);
  EXPECT_FALSE(r.tx_left);
  EXPECT_TRUE(r.next_timer.is_never());
}

TEST(EngineRound, AReceivingRoundTakesAtMostABurst) {
  NoQps qps;
  FakeDatapath dp;
  Engine e(qps, dp, wire::IpAddress::v4(0x0a000001));
  for (std::size_t i = 0; i < Engine::kRxBurst + 5; ++i)
    dp.inbound.push_back(frame_for_unknown_qp());
  EXPECT_EQ(e.round(Instant::from_ns(1000), RoundPlan{}, Engine::RoundKind::kReceive).received,
            Engine::kRxBurst);
  EXPECT_EQ(dp.inbound.size(), 5u);
  EXPECT_EQ(e.round(Instant::from_ns(1000), RoundPlan{}, Engine::RoundKind::kReceive).received, 5u);
}

TEST(EngineRound, ATransmitRoundFlushesAndNeverReads) {
  NoQps qps;
  FakeDatapath dp;
  Engine e(qps, dp, wire::IpAddress::v4(0x0a000001));
  dp.inbound.push_back(frame_for_unknown_qp());
  const RoundReport r = e.round(Instant::from_ns(1000), RoundPlan{}, Engine::RoundKind::kTransmit);
  EXPECT_EQ(r.received, 0u);
  EXPECT_EQ(dp.log, std::vector<std::string>{"flush"});
  EXPECT_EQ(dp.inbound.size(), 1u);
}

TEST(EngineRound, PacketsWaitingInTheDatapathAreFlushedBeforeTheSocketIsRead) {
  NoQps qps;
  FakeDatapath dp;
  Engine e(qps, dp, wire::IpAddress::v4(0x0a000001));
  dp.queued = true;  // a full socket at the last flush: transmit work
  e.round(Instant::from_ns(1000), RoundPlan{}, Engine::RoundKind::kReceive);
  // Flushed first (work left before the read), and again after it (the work is still there).
  EXPECT_EQ(dp.log, (std::vector<std::string>{
                        "flush", "receive " + std::to_string(Engine::kRxBurst), "flush"}));
}

// A datapath that refuses the first `refuse` packets (a full socket) and keeps the payload of
// each packet it takes, as read when it takes it.
struct RefusingDatapath final : datapath::Datapath {
  int refuse = 0;
  std::vector<std::vector<std::byte>> sent;
  std::size_t receive(Instant, std::size_t, const RxHandler&) override { return 0; }
  bool send(Instant, const wire::OuterHeaders&, ConstBytes,
            std::span<const ConstBytes> payload) override {
    if (refuse > 0) {
      --refuse;
      return false;
    }
    std::vector<std::byte> bytes;
    for (ConstBytes p : payload) bytes.insert(bytes.end(), p.begin(), p.end());
    sent.push_back(std::move(bytes));
    return true;
  }
  void flush(Instant) override {}
  bool tx_queued() const override { return false; }
};

struct OneQp final : QpDirectory {
  transport::Qp* qp = nullptr;
  transport::Qp* find_qp(std::uint32_t qpn) override {
    return qp != nullptr && qp->qpn() == qpn ? qp : nullptr;
  }
};

// A signaled SEND of the bytes `sge` names (it must outlive the post).
transport::SendRequest signaled_send(const Sge& sge) {
  transport::SendRequest wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::kSend;
  wr.send_flags = kSendSignaled;
  wr.sges = std::span(&sge, 1);
  return wr;
}

// A UC SEND completes when it is sent; one the datapath could not take yet waits in the
// engine. The application may reuse the buffer once it has the completion: the packet must
// still carry the bytes of the SEND.
TEST(Engine, PacketWaitingForTheDatapathKeepsItsBytes) {
  test::Solo solo(QpType::kUc);
  test::fill(solo.e, 0, 256, 7);
  const std::vector<std::byte> want = test::slice(solo.e, 0, 256);
  OneQp qps;
  qps.qp = solo.e.qp.get();
  RefusingDatapath dp;
  dp.refuse = 1;
  Engine e(qps, dp, wire::IpAddress{});
  const Sge sge = test::sge(solo.e, 0, 256);
  ASSERT_EQ(solo.e.qp->post_send(signaled_send(sge)), Errc::kOk);
  e.doorbell(solo.e.qp->qpn());
  EXPECT_EQ(e.flush_tx(solo.now), 0u);  // refused: the packet waits in the engine
  EXPECT_TRUE(e.has_tx_work());
  ASSERT_EQ(solo.e.scq.wcs.size(), 1u);  // UC: complete once handed to the engine
  test::fill(solo.e, 0, 256, 99);        // the application reuses its buffer
  EXPECT_EQ(e.flush_tx(solo.now), 1u);
  ASSERT_EQ(dp.sent.size(), 1u);
  EXPECT_EQ(dp.sent[0], want);
}

// A QP's timer that fired is armed again and fires again, round after round: Engine::arm keeps
// the QP's entry of its table at hand (issue 40), and must let go of it when handle_timers
// erases the entry (a pointer kept past that would name freed memory).
TEST(EngineRound, AQpsTimerThatFiredFiresAgainOnceArmedAgain) {
  test::Solo solo(QpType::kRc);
  OneQp qps;
  qps.qp = solo.e.qp.get();
  RefusingDatapath dp;  // refuses nothing: it takes every packet
  Engine e(qps, dp, wire::IpAddress{});
  const std::uint32_t qpn = solo.e.qp->qpn();
  const Sge sge = test::sge(solo.e, 0, 64);
  ASSERT_EQ(solo.e.qp->post_send(signaled_send(sge)), Errc::kOk);
  e.doorbell(qpn);
  ASSERT_EQ(e.flush_tx(solo.now), 1u);
  Instant at = e.armed_at(qpn);  // the ACK timeout: no peer answers
  ASSERT_FALSE(at.is_never());
  for (std::uint64_t fires = 1; fires <= 3; ++fires) {
    e.round(at, RoundPlan{}, Engine::RoundKind::kReceive);
    EXPECT_EQ(e.counters().timer_fires, fires);
    EXPECT_EQ(dp.sent.size(), fires + 1);  // the SEND again, after each timeout
    const Instant next = e.armed_at(qpn);
    EXPECT_TRUE(next > at) << fires;
    at = next;
  }
}

}  // namespace
}  // namespace uroce::engine

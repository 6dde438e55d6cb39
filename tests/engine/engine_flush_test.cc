// The engine and a batching datapath: flush_tx hands the datapath its flush every time, and a
// datapath that still holds packets (backpressure) keeps the engine's transmit work pending.
#include <gtest/gtest.h>

#include "engine/engine.h"

namespace uroce::engine {
namespace {

struct FakeDatapath final : datapath::Datapath {
  int sends = 0;
  int flushes = 0;
  bool queued = false;
  bool send(Instant, const wire::OuterHeaders&, ConstBytes, std::span<const ConstBytes>) override {
    ++sends;
    return true;
  }
  void flush(Instant) override { ++flushes; }
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

}  // namespace
}  // namespace uroce::engine

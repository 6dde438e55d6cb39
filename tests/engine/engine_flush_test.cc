// The engine and a batching datapath: flush_tx hands the datapath its flush every time, and a
// datapath that still holds packets (backpressure) keeps the engine's transmit work pending.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "transport/harness.h"

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

// A datapath that refuses the first `refuse` packets (a full socket) and keeps the payload of
// each packet it takes, as read when it takes it.
struct RefusingDatapath final : datapath::Datapath {
  int refuse = 0;
  std::vector<std::vector<std::byte>> sent;
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
  transport::SendRequest wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::kSend;
  wr.send_flags = kSendSignaled;
  wr.sges = std::span(&sge, 1);
  ASSERT_EQ(solo.e.qp->post_send(wr), Errc::kOk);
  e.doorbell(solo.e.qp->qpn());
  EXPECT_EQ(e.flush_tx(solo.now), 0u);  // refused: the packet waits in the engine
  EXPECT_TRUE(e.has_tx_work());
  ASSERT_EQ(solo.e.scq.wcs.size(), 1u);  // UC: complete once handed to the engine
  test::fill(solo.e, 0, 256, 99);        // the application reuses its buffer
  EXPECT_EQ(e.flush_tx(solo.now), 1u);
  ASSERT_EQ(dp.sent.size(), 1u);
  EXPECT_EQ(dp.sent[0], want);
}

}  // namespace
}  // namespace uroce::engine

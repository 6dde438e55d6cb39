// Completion queues: sizing, polling, overflow and notification.
#include <gtest/gtest.h>

#include <vector>

#include "verbs/device_state.h"
#include "verbs_test_util.h"

namespace uroce {
namespace {

using testing::make_device;

// The CQ as the transport sees it.
transport::CompletionSink& sink(Device& dev, CqHandle cq) {
  auto* c = DeviceTestAccess::state(dev).cqs.get(verbs::detail::to_raw(cq));
  EXPECT_NE(c, nullptr);
  return *c;
}

Wc wc(std::uint64_t id, WcStatus status = WcStatus::kSuccess) {
  Wc w;
  w.wr_id = id;
  w.status = status;
  return w;
}

struct Recorder : CompletionEventHandler {
  void cq_event(CqHandle cq, std::uint64_t channel) override { events.push_back({cq, channel}); }
  std::vector<std::pair<CqHandle, std::uint64_t>> events;
};

TEST(Cq, SizeIsCheckedAndRoundedAsRxeDoes) {
  auto dev = make_device();
  EXPECT_EQ(dev->create_cq(CqInitAttr{0, 0, 0}).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->create_cq(CqInitAttr{32768, 0, 0}).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->create_cq(CqInitAttr{1, 0, 1}).error(), Errc::kInvalidArgument);  // vector 1
  const std::pair<std::uint32_t, std::uint32_t> sizes[] = {
      {1, 1}, {2, 3}, {3, 3}, {4, 7}, {10, 15}, {16, 31}, {1000, 1023}, {32767, 32767}};
  for (auto [asked, got] : sizes) {
    auto cq = dev->create_cq(CqInitAttr{asked, 0, 0});
    ASSERT_TRUE(cq.ok()) << asked;
    EXPECT_EQ(cq->cqe, got) << asked;
  }
}

TEST(Cq, AnyCompletionVectorBelowTheConfiguredNumberIsAccepted) {
  DeviceConfig cfg = testing::test_config();
  cfg.num_comp_vectors = 4;  // the drop-in: one per online CPU
  auto dev = make_device(cfg);
  for (std::uint32_t v = 0; v < 4; ++v) EXPECT_TRUE(dev->create_cq(CqInitAttr{1, 0, v}).ok());
  EXPECT_EQ(dev->create_cq(CqInitAttr{1, 0, 4}).error(), Errc::kInvalidArgument);
  cfg.num_comp_vectors = 0;
  EXPECT_EQ(Device::create(cfg).error(), Errc::kInvalidArgument);
}

TEST(Cq, PollsInOrderUpToTheSpaceGiven) {
  auto dev = make_device();
  CqHandle cq = dev->create_cq(CqInitAttr{7, 0, 0})->handle;
  for (std::uint64_t i = 1; i <= 5; ++i) sink(*dev, cq).push(wc(i), false);
  Wc out[3];
  EXPECT_EQ(*dev->poll_cq(cq, out), 3u);
  EXPECT_EQ(out[0].wr_id, 1u);
  EXPECT_EQ(out[2].wr_id, 3u);
  EXPECT_EQ(*dev->poll_cq(cq, out), 2u);
  EXPECT_EQ(out[1].wr_id, 5u);
  EXPECT_EQ(*dev->poll_cq(cq, out), 0u);
  EXPECT_EQ(*dev->poll_cq(cq, std::span<Wc>()), 0u);
}

TEST(Cq, OverflowPutsTheCqInErrorAndRaisesCqErr) {
  auto dev = make_device();
  auto info = dev->create_cq(CqInitAttr{3, 0, 0});
  CqHandle cq = info->handle;
  for (std::uint64_t i = 0; i < info->cqe; ++i) sink(*dev, cq).push(wc(i), false);
  EXPECT_FALSE(dev->has_async_event());
  sink(*dev, cq).push(wc(99), false);  // one too many: lost
  auto ev = dev->get_async_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->type, AsyncEventType::kCqErr);
  EXPECT_EQ(ev->cq, cq);
  Wc out[8];
  EXPECT_EQ(dev->poll_cq(cq, out).error(), Errc::kNoSpace);
  // Later completions are dropped without another event.
  sink(*dev, cq).push(wc(100), false);
  EXPECT_FALSE(dev->has_async_event());
  EXPECT_EQ(dev->poll_cq(cq, out).error(), Errc::kNoSpace);
  EXPECT_EQ(dev->destroy_cq(cq), Errc::kOk);
}

TEST(Cq, NotificationIsOneShot) {
  auto dev = make_device();
  Recorder rec;
  dev->set_completion_event_handler(&rec);
  CqHandle cq = dev->create_cq(CqInitAttr{15, 42, 0})->handle;
  sink(*dev, cq).push(wc(1), false);
  EXPECT_TRUE(rec.events.empty());  // not armed
  Wc out[1];
  EXPECT_EQ(*dev->poll_cq(cq, out), 1u);
  ASSERT_EQ(dev->req_notify_cq(cq, false), Errc::kOk);
  sink(*dev, cq).push(wc(2), false);
  ASSERT_EQ(rec.events.size(), 1u);
  EXPECT_EQ(rec.events[0].first, cq);
  EXPECT_EQ(rec.events[0].second, 42u);
  sink(*dev, cq).push(wc(3), true);
  EXPECT_EQ(rec.events.size(), 1u);  // disarmed by the first
}

TEST(Cq, SolicitedOnlyArmingWaitsForASolicitedOrFailedCompletion) {
  auto dev = make_device();
  Recorder rec;
  dev->set_completion_event_handler(&rec);
  CqHandle cq = dev->create_cq(CqInitAttr{15, 7, 0})->handle;
  ASSERT_EQ(dev->req_notify_cq(cq, true), Errc::kOk);
  sink(*dev, cq).push(wc(1), false);
  EXPECT_TRUE(rec.events.empty());
  sink(*dev, cq).push(wc(2), true);
  EXPECT_EQ(rec.events.size(), 1u);
  Wc out[2];
  EXPECT_EQ(*dev->poll_cq(cq, out), 2u);
  ASSERT_EQ(dev->req_notify_cq(cq, true), Errc::kOk);
  sink(*dev, cq).push(wc(3, WcStatus::kWrFlushErr), false);
  EXPECT_EQ(rec.events.size(), 2u);
}

// UCX arms an interface's CQ after a poll that found it empty and sleeps until the event
// (issue 43): a completion that came between the poll and the arming must still wake it. An
// arming that finds a completion it asks for already queued fires at once, as ConnectX's does.
TEST(Cq, ArmingACqThatHoldsACompletionFiresAtOnce) {
  auto dev = make_device();
  Recorder rec;
  dev->set_completion_event_handler(&rec);
  CqHandle cq = dev->create_cq(CqInitAttr{15, 9, 0})->handle;
  Wc out[4];
  EXPECT_EQ(*dev->poll_cq(cq, out), 0u);                // polled empty ...
  sink(*dev, cq).push(wc(1), false);                    // ... a completion comes ...
  ASSERT_EQ(dev->req_notify_cq(cq, false), Errc::kOk);  // ... then the arming
  ASSERT_EQ(rec.events.size(), 1u);
  EXPECT_EQ(rec.events[0].first, cq);
  EXPECT_EQ(rec.events[0].second, 9u);
  sink(*dev, cq).push(wc(2), false);
  EXPECT_EQ(rec.events.size(), 1u);  // that was the arming's one event
  // Polled empty, an arming waits for the next completion again.
  EXPECT_EQ(*dev->poll_cq(cq, out), 2u);
  ASSERT_EQ(dev->req_notify_cq(cq, false), Errc::kOk);
  EXPECT_EQ(rec.events.size(), 1u);
  sink(*dev, cq).push(wc(3), false);
  EXPECT_EQ(rec.events.size(), 2u);
}

// A solicited-only arming fires at once only for a queued completion it would have fired for: a
// solicited one or a failed one.
TEST(Cq, SolicitedOnlyArmingFiresAtOnceForAQueuedSolicitedOrFailedCompletion) {
  auto dev = make_device();
  Recorder rec;
  dev->set_completion_event_handler(&rec);
  CqHandle cq = dev->create_cq(CqInitAttr{15, 0, 0})->handle;
  Wc out[4];
  sink(*dev, cq).push(wc(1), false);
  ASSERT_EQ(dev->req_notify_cq(cq, true), Errc::kOk);
  EXPECT_TRUE(rec.events.empty());  // an unsolicited success: still armed
  sink(*dev, cq).push(wc(2), false);
  EXPECT_TRUE(rec.events.empty());
  EXPECT_EQ(*dev->poll_cq(cq, out), 2u);
  ASSERT_EQ(dev->req_notify_cq(cq, false), Errc::kOk);  // widened, nothing queued
  EXPECT_TRUE(rec.events.empty());
  sink(*dev, cq).push(wc(3), false);
  EXPECT_EQ(rec.events.size(), 1u);
  sink(*dev, cq).push(wc(4), true);  // solicited, queued behind 3, while disarmed
  ASSERT_EQ(dev->req_notify_cq(cq, true), Errc::kOk);
  EXPECT_EQ(rec.events.size(), 2u);
  EXPECT_EQ(*dev->poll_cq(cq, out), 2u);
  sink(*dev, cq).push(wc(5, WcStatus::kWrFlushErr), false);  // failed, while disarmed
  ASSERT_EQ(dev->req_notify_cq(cq, true), Errc::kOk);
  EXPECT_EQ(rec.events.size(), 3u);
}

TEST(Cq, ArmingForAnyCompletionIsNotNarrowedBySolicitedOnly) {
  auto dev = make_device();
  Recorder rec;
  dev->set_completion_event_handler(&rec);
  CqHandle cq = dev->create_cq(CqInitAttr{15, 0, 0})->handle;
  ASSERT_EQ(dev->req_notify_cq(cq, false), Errc::kOk);
  ASSERT_EQ(dev->req_notify_cq(cq, true), Errc::kOk);
  sink(*dev, cq).push(wc(1), false);
  EXPECT_EQ(rec.events.size(), 1u);
}

// ibv_resize_cq as rxe: the new size rounded as at creation, the queued completions kept in
// order (here across the old ring's wrap-around), the new capacity in force at once.
TEST(Cq, ResizeGrowsAndShrinksKeepingQueuedCompletionsInOrder) {
  auto dev = make_device();
  Recorder rec;
  dev->set_completion_event_handler(&rec);
  CqHandle cq = dev->create_cq(CqInitAttr{7, 5, 0})->handle;
  for (std::uint64_t i = 1; i <= 6; ++i) sink(*dev, cq).push(wc(i), false);
  Wc out[32];
  ASSERT_EQ(*dev->poll_cq(cq, std::span(out, 4)), 4u);                        // 5, 6 remain ...
  for (std::uint64_t i = 7; i <= 10; ++i) sink(*dev, cq).push(wc(i), false);  // ... wrapped
  ASSERT_EQ(dev->req_notify_cq(cq, true), Errc::kOk);  // none of those is solicited
  EXPECT_TRUE(rec.events.empty());
  EXPECT_EQ(*dev->resize_cq(cq, 20), 31u);
  for (std::uint64_t i = 11; i <= 30; ++i) sink(*dev, cq).push(wc(i), i == 30);
  EXPECT_EQ(rec.events.size(), 1u);  // the arming survived the resize
  ASSERT_EQ(*dev->poll_cq(cq, std::span(out, 3)), 3u);
  EXPECT_EQ(out[0].wr_id, 5u);
  EXPECT_EQ(out[2].wr_id, 7u);
  // 23 queued (8..30): a smaller CQ must still hold them.
  EXPECT_EQ(dev->resize_cq(cq, 22).error(), Errc::kInvalidArgument);
  EXPECT_EQ(*dev->resize_cq(cq, 23), 31u);
  ASSERT_EQ(*dev->poll_cq(cq, std::span(out, 20)), 20u);
  EXPECT_EQ(out[0].wr_id, 8u);
  EXPECT_EQ(out[19].wr_id, 27u);
  EXPECT_EQ(*dev->resize_cq(cq, 3), 3u);  // 28, 29, 30 fill it exactly
  sink(*dev, cq).push(wc(31), false);     // one too many for the new size
  EXPECT_EQ(dev->poll_cq(cq, out).error(), Errc::kNoSpace);
  ASSERT_TRUE(dev->get_async_event().has_value());
}

TEST(Cq, ResizeChecksTheSizeAndTheHandle) {
  auto dev = make_device();
  CqHandle cq = dev->create_cq(CqInitAttr{1, 0, 0})->handle;
  EXPECT_EQ(dev->resize_cq(cq, 0).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->resize_cq(cq, 32768).error(), Errc::kInvalidArgument);
  EXPECT_EQ(*dev->resize_cq(cq, 32767), 32767u);
  ASSERT_EQ(dev->destroy_cq(cq), Errc::kOk);
  EXPECT_EQ(dev->resize_cq(cq, 4).error(), Errc::kInvalidArgument);
}

TEST(Cq, StaleHandlesAreDetected) {
  auto dev = make_device();
  CqHandle cq = dev->create_cq(CqInitAttr{1, 0, 0})->handle;
  ASSERT_EQ(dev->destroy_cq(cq), Errc::kOk);
  Wc out[1];
  EXPECT_EQ(dev->destroy_cq(cq), Errc::kInvalidArgument);
  EXPECT_EQ(dev->poll_cq(cq, out).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->req_notify_cq(cq, false), Errc::kInvalidArgument);
}

}  // namespace
}  // namespace uroce

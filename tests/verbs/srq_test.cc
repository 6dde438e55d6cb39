// Shared receive queues: limits, posting, and the SRQ limit event.
#include <gtest/gtest.h>

#include "verbs/device_state.h"
#include "verbs_test_util.h"

namespace uroce {
namespace {

using testing::make_device;

transport::RecvQueue& queue(Device& dev, SrqHandle srq) {
  auto* s = DeviceTestAccess::state(dev).srqs.get(verbs::detail::to_raw(srq));
  EXPECT_NE(s, nullptr);
  return s->rq;
}

TEST(Srq, CreationChecksLimitsAndRounds) {
  auto dev = make_device();
  PdHandle pd = *dev->alloc_pd();
  EXPECT_EQ(dev->create_srq(pd, SrqAttr{0, 1, 0}).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->create_srq(pd, SrqAttr{0x4001, 1, 0}).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->create_srq(pd, SrqAttr{4, 28, 0}).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->create_srq(PdHandle{}, SrqAttr{4, 1, 0}).error(), Errc::kInvalidArgument);
  auto s = dev->create_srq(pd, SrqAttr{10, 0, 5});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->attr.max_wr, 15u);
  EXPECT_EQ(s->attr.max_sge, 1u);    // raised to 1
  EXPECT_EQ(s->attr.srq_limit, 0u);  // ignored at creation
  auto big = dev->create_srq(pd, SrqAttr{0x4000, 27, 0});
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->attr.max_wr, 0x4000u);  // capped at max_srq_wr
  EXPECT_EQ(dev->query_srq(s->handle)->max_wr, 15u);
}

TEST(Srq, PostReportsTheFirstBadRequest) {
  auto dev = make_device();
  PdHandle pd = *dev->alloc_pd();
  SrqHandle srq = dev->create_srq(pd, SrqAttr{3, 2, 0})->handle;
  Sge sges[3] = {};
  RecvWr wrs[5] = {{1, {sges, 1}}, {2, {sges, 2}}, {3, {sges, 3}}, {4, {sges, 1}}, {5, {}}};
  const RecvWr* bad = nullptr;
  EXPECT_EQ(dev->post_srq_recv(srq, wrs, &bad), Errc::kInvalidArgument);  // 3 SGEs > 2
  EXPECT_EQ(bad, &wrs[2]);
  EXPECT_EQ(queue(*dev, srq).size(), 2u);
  EXPECT_EQ(dev->post_srq_recv(srq, std::span(wrs).subspan(3), &bad), Errc::kNoMemory);  // full
  EXPECT_EQ(bad, &wrs[4]);
  EXPECT_EQ(queue(*dev, srq).size(), 3u);
  EXPECT_EQ(dev->post_srq_recv(srq, {}, &bad), Errc::kOk);
  EXPECT_EQ(bad, nullptr);
}

TEST(Srq, ModifyArmsTheLimitAndRefusesResize) {
  auto dev = make_device();
  PdHandle pd = *dev->alloc_pd();
  SrqHandle srq = dev->create_srq(pd, SrqAttr{7, 1, 0})->handle;
  EXPECT_EQ(dev->modify_srq(srq, SrqAttr{0, 0, 8}, kSrqLimit), Errc::kInvalidArgument);
  EXPECT_EQ(dev->modify_srq(srq, SrqAttr{31, 0, 0}, kSrqMaxWr), Errc::kNotSupported);
  EXPECT_EQ(dev->modify_srq(srq, SrqAttr{}, 4), Errc::kInvalidArgument);
  EXPECT_EQ(dev->modify_srq(srq, SrqAttr{0, 0, 7}, kSrqLimit), Errc::kOk);
  EXPECT_EQ(dev->query_srq(srq)->srq_limit, 7u);
}

TEST(Srq, LimitEventFiresOnceWhenTheQueueDropsBelowIt) {
  auto dev = make_device();
  PdHandle pd = *dev->alloc_pd();
  SrqHandle srq = dev->create_srq(pd, SrqAttr{7, 1, 0})->handle;
  Sge sge{};
  for (std::uint64_t i = 0; i < 4; ++i) {
    RecvWr wr{i, {&sge, 1}};
    ASSERT_EQ(dev->post_srq_recv(srq, {&wr, 1}, nullptr), Errc::kOk);
  }
  ASSERT_EQ(dev->modify_srq(srq, SrqAttr{0, 0, 2}, kSrqLimit), Errc::kOk);
  auto& rq = queue(*dev, srq);
  rq.pop();  // 3 left
  rq.pop();  // 2 left: not below the limit
  EXPECT_FALSE(dev->has_async_event());
  rq.pop();  // 1 left: below
  auto ev = dev->get_async_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->type, AsyncEventType::kSrqLimitReached);
  EXPECT_EQ(ev->srq, srq);
  EXPECT_EQ(dev->query_srq(srq)->srq_limit, 0u);  // disarmed
  rq.pop();
  EXPECT_FALSE(dev->has_async_event());  // one-shot
}

TEST(Srq, DisarmingAndDestroyingStopTheEvent) {
  auto dev = make_device();
  PdHandle pd = *dev->alloc_pd();
  SrqHandle srq = dev->create_srq(pd, SrqAttr{7, 1, 0})->handle;
  Sge sge{};
  RecvWr wr{1, {&sge, 1}};
  ASSERT_EQ(dev->post_srq_recv(srq, {&wr, 1}, nullptr), Errc::kOk);
  ASSERT_EQ(dev->modify_srq(srq, SrqAttr{0, 0, 1}, kSrqLimit), Errc::kOk);
  ASSERT_EQ(dev->modify_srq(srq, SrqAttr{0, 0, 0}, kSrqLimit), Errc::kOk);
  queue(*dev, srq).pop();
  EXPECT_FALSE(dev->has_async_event());
  ASSERT_EQ(dev->modify_srq(srq, SrqAttr{0, 0, 1}, kSrqLimit), Errc::kOk);
  EXPECT_EQ(dev->destroy_srq(srq), Errc::kOk);
  EXPECT_FALSE(dev->has_async_event());
  EXPECT_EQ(dev->destroy_srq(srq), Errc::kInvalidArgument);
  EXPECT_EQ(dev->post_srq_recv(srq, {&wr, 1}, nullptr), Errc::kInvalidArgument);
}

}  // namespace
}  // namespace uroce

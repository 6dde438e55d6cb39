#include "base/handle_table.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

namespace uroce {
namespace {

TEST(HandleTable, InsertGetRemove) {
  HandleTable<int> t(4);
  const RawHandle a = t.insert(std::make_unique<int>(7));
  const RawHandle b = t.insert(std::make_unique<int>(8));
  ASSERT_NE(a.generation, 0u);
  ASSERT_NE(a, b);
  EXPECT_EQ(t.size(), 2u);
  ASSERT_NE(t.get(a), nullptr);
  EXPECT_EQ(*t.get(a), 7);
  EXPECT_EQ(*t.get(b), 8);
  auto removed = t.remove(a);
  ASSERT_NE(removed, nullptr);
  EXPECT_EQ(*removed, 7);
  EXPECT_EQ(t.get(a), nullptr);
  EXPECT_EQ(t.remove(a), nullptr);  // double remove is detected
  EXPECT_EQ(t.size(), 1u);
}

TEST(HandleTable, NullAndForgedHandlesAreRejected) {
  HandleTable<int> t(4);
  EXPECT_EQ(t.get(RawHandle{}), nullptr);
  const RawHandle a = t.insert(std::make_unique<int>(1));
  EXPECT_EQ(t.get(RawHandle{a.index, 0}), nullptr);
  EXPECT_EQ(t.get(RawHandle{a.index, a.generation + 1}), nullptr);
  EXPECT_EQ(t.get(RawHandle{a.index + 100, a.generation}), nullptr);
}

TEST(HandleTable, StaleHandleDoesNotReachTheObjectThatReusedItsSlot) {
  HandleTable<int> t(1);
  const RawHandle a = t.insert(std::make_unique<int>(1));
  ASSERT_NE(t.remove(a), nullptr);
  const RawHandle b = t.insert(std::make_unique<int>(2));
  EXPECT_EQ(b.index, a.index);  // the only slot is reused ...
  EXPECT_NE(b.generation, a.generation);
  EXPECT_EQ(t.get(a), nullptr);  // ... but the old handle does not reach the new object
  EXPECT_EQ(*t.get(b), 2);
}

TEST(HandleTable, FullTableRefusesInsert) {
  HandleTable<int> t(2);
  EXPECT_NE(t.insert(std::make_unique<int>(1)).generation, 0u);
  const RawHandle b = t.insert(std::make_unique<int>(2));
  EXPECT_TRUE(t.full());
  EXPECT_EQ(t.insert(std::make_unique<int>(3)), RawHandle{});
  t.remove(b);
  EXPECT_NE(t.insert(std::make_unique<int>(3)).generation, 0u);
}

TEST(HandleTable, AddressesAreStableAcrossGrowth) {
  HandleTable<int> t(1000);
  const RawHandle first = t.insert(std::make_unique<int>(42));
  int* p = t.get(first);
  for (int i = 0; i < 999; ++i) t.insert(std::make_unique<int>(i));
  EXPECT_EQ(t.get(first), p);
}

TEST(HandleTable, ForEachVisitsLiveObjectsOnly) {
  HandleTable<int> t(8);
  std::vector<RawHandle> hs;
  for (int i = 0; i < 5; ++i) hs.push_back(t.insert(std::make_unique<int>(i)));
  t.remove(hs[1]);
  t.remove(hs[3]);
  std::set<int> seen;
  t.for_each([&](RawHandle h, int& v) {
    EXPECT_EQ(t.get(h), &v);
    seen.insert(v);
  });
  EXPECT_EQ(seen, (std::set<int>{0, 2, 4}));
}

TEST(HandleTable, FreedSlotsAreReusedOldestFirst) {
  HandleTable<int> t(8);
  const RawHandle a = t.insert(std::make_unique<int>(0));
  const RawHandle b = t.insert(std::make_unique<int>(1));
  t.remove(a);
  t.remove(b);
  EXPECT_EQ(t.insert(std::make_unique<int>(2)).index, a.index);
  EXPECT_EQ(t.insert(std::make_unique<int>(3)).index, b.index);
}

}  // namespace
}  // namespace uroce

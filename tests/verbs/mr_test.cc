// Memory regions: access-flag validation, keys, and the resolver the transport uses.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "base/prng.h"
#include "transport/interfaces.h"
#include "verbs/device_state.h"
#include "verbs_test_util.h"

namespace uroce {
namespace {

using testing::make_device;
using testing::test_config;
using transport::AccessError;

class MrTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dev = make_device();
    pd = *dev->alloc_pd();
    pd_id = DeviceTestAccess::state(*dev).pds.get(verbs::detail::to_raw(pd))->id;
  }
  std::unique_ptr<Device> dev;
  PdHandle pd;
  std::uint32_t pd_id = 0;
  std::vector<std::byte> buf = std::vector<std::byte>(4096);
};

TEST_F(MrTest, AccessFlagsAreCheckedAsTheKernelDoes) {
  auto reg = [&](std::uint32_t access) { return dev->reg_mr(pd, buf.data(), buf.size(), access); };
  EXPECT_TRUE(reg(0).ok());  // local read only
  EXPECT_TRUE(reg(kAccessLocalWrite).ok());
  EXPECT_TRUE(reg(kAccessRemoteRead).ok());
  EXPECT_TRUE(reg(kAccessLocalWrite | kAccessRemoteWrite).ok());
  EXPECT_TRUE(reg(kAccessLocalWrite | kAccessRemoteAtomic).ok());
  EXPECT_TRUE(
      reg(kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic).ok());
  // Remote write or atomic without local write: EINVAL (ib_check_mr_access()).
  EXPECT_EQ(reg(kAccessRemoteWrite).error(), Errc::kInvalidArgument);
  EXPECT_EQ(reg(kAccessRemoteAtomic).error(), Errc::kInvalidArgument);
  EXPECT_EQ(reg(kAccessRemoteWrite | kAccessRemoteRead).error(), Errc::kInvalidArgument);
  // What uroce does not have, and what it has beyond plain regions.
  EXPECT_TRUE(reg(kAccessMwBind).ok());  // memory windows may be bound to it
  EXPECT_EQ(reg(kAccessZeroBased).error(), Errc::kNotSupported);
  EXPECT_TRUE(reg(kAccessOnDemand).ok());                    // on-demand paging (MrOdp below)
  EXPECT_EQ(reg(1u << 12).error(), Errc::kInvalidArgument);  // no such flag
  // Hints and the optional range are accepted; the optional range is dropped.
  EXPECT_TRUE(reg(kAccessHugetlb).ok());
  auto relaxed = reg(kAccessLocalWrite | kAccessRelaxedOrdering);
  ASSERT_TRUE(relaxed.ok());
  EXPECT_EQ(relaxed->access, std::uint32_t{kAccessLocalWrite});
}

TEST_F(MrTest, RegionsMustBeNonEmptyAndNotWrap) {
  EXPECT_EQ(dev->reg_mr(pd, buf.data(), 0, 0).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->reg_mr(pd, nullptr, 16, 0).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->reg_mr_iova(pd, buf.data(), 16, UINT64_MAX - 14, 0).error(),
            Errc::kInvalidArgument);
  EXPECT_TRUE(dev->reg_mr_iova(pd, buf.data(), 16, UINT64_MAX - 15, 0).ok());  // ends at 2^64
  EXPECT_EQ(dev->reg_mr(PdHandle{}, buf.data(), 16, 0).error(), Errc::kInvalidArgument);
}

TEST_F(MrTest, QueryAndDeregDetectStaleHandles) {
  auto mr = dev->reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite);
  ASSERT_TRUE(mr.ok());
  auto q = dev->query_mr(mr->handle);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->lkey, mr->lkey);
  EXPECT_EQ(q->iova, reinterpret_cast<std::uintptr_t>(buf.data()));
  EXPECT_EQ(q->length, buf.size());
  EXPECT_EQ(q->pd, pd);
  EXPECT_EQ(dev->dereg_mr(mr->handle), Errc::kOk);
  EXPECT_EQ(dev->dereg_mr(mr->handle), Errc::kInvalidArgument);
  EXPECT_EQ(dev->query_mr(mr->handle).error(), Errc::kInvalidArgument);
}

// ibv_rereg_mr: PD and access changes as rxe (the keys stay), translation changes too; each
// takes effect for the very next resolve.
TEST_F(MrTest, ReregChangesPdAccessAndTranslationAndKeepsTheKeys) {
  auto& res = dev->memory();
  auto mr = dev->reg_mr(pd, buf.data(), 64, kAccessLocalWrite | kAccessRemoteWrite);
  ASSERT_TRUE(mr.ok());
  PdHandle other = *dev->alloc_pd();
  const std::uint32_t other_id =
      DeviceTestAccess::state(*dev).pds.get(verbs::detail::to_raw(other))->id;

  auto r = dev->rereg_mr(mr->handle, kReregPd, other, nullptr, 0, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->lkey, mr->lkey);
  EXPECT_EQ(r->rkey, mr->rkey);
  EXPECT_EQ(r->pd, other);
  EXPECT_EQ(r->access, mr->access);
  EXPECT_EQ(res.resolve(pd_id, 0, mr->rkey, true, mr->iova, 8, kAccessRemoteWrite).error(),
            AccessError::kWrongPd);
  EXPECT_TRUE(res.resolve(other_id, 0, mr->rkey, true, mr->iova, 8, kAccessRemoteWrite).ok());
  // The MR's references moved: the old PD can go, the new one cannot.
  EXPECT_EQ(dev->dealloc_pd(other), Errc::kBusy);
  PdHandle spare = *dev->alloc_pd();
  EXPECT_EQ(dev->dealloc_pd(spare), Errc::kOk);

  r = dev->rereg_mr(mr->handle, kReregAccess, PdHandle{}, nullptr, 0, kAccessRemoteRead);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->access, std::uint32_t{kAccessRemoteRead});
  EXPECT_EQ(res.resolve(other_id, 0, mr->rkey, true, mr->iova, 8, kAccessRemoteWrite).error(),
            AccessError::kNoPermission);
  EXPECT_TRUE(res.resolve(other_id, 0, mr->rkey, true, mr->iova, 8, kAccessRemoteRead).ok());

  std::vector<std::byte> moved(256);
  r = dev->rereg_mr(mr->handle, kReregTranslation | kReregPd | kReregAccess, pd, moved.data(),
                    moved.size(), kAccessLocalWrite | kAccessRemoteAtomic);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->iova, reinterpret_cast<std::uintptr_t>(moved.data()));
  EXPECT_EQ(r->length, moved.size());
  EXPECT_EQ(r->lkey, mr->lkey);
  auto bytes = res.resolve(pd_id, 0, mr->rkey, true, r->iova + 248, 8, kAccessRemoteAtomic);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->data(), moved.data() + 248);
  EXPECT_EQ(res.resolve(pd_id, 0, mr->lkey, false, mr->iova, 8, 0).error(),
            AccessError::kOutOfBounds);  // the old range is gone
  EXPECT_EQ(dev->dealloc_pd(other), Errc::kOk);
  EXPECT_EQ(dev->dereg_mr(mr->handle), Errc::kOk);
  EXPECT_EQ(dev->dealloc_pd(pd), Errc::kOk);
}

TEST_F(MrTest, ReregRefusesWhatRegistrationRefusesAndChangesNothing) {
  auto mr = dev->reg_mr(pd, buf.data(), 64, kAccessLocalWrite);
  ASSERT_TRUE(mr.ok());
  auto rereg = [&](std::uint32_t flags, PdHandle p, void* addr, std::size_t len,
                   std::uint32_t access) {
    return dev->rereg_mr(mr->handle, flags, p, addr, len, access).error();
  };
  EXPECT_EQ(rereg(0, pd, nullptr, 0, 0), Errc::kInvalidArgument);  // nothing to change
  EXPECT_EQ(rereg(8, pd, nullptr, 0, 0), Errc::kInvalidArgument);  // no such flag
  EXPECT_EQ(rereg(kReregPd, PdHandle{}, nullptr, 0, 0), Errc::kInvalidArgument);
  // Remote write or atomic without local write; a PD change in the same call is not made.
  PdHandle other = *dev->alloc_pd();
  EXPECT_EQ(rereg(kReregPd | kReregAccess, other, nullptr, 0, kAccessRemoteWrite),
            Errc::kInvalidArgument);
  EXPECT_EQ(rereg(kReregAccess, pd, nullptr, 0, kAccessRemoteAtomic), Errc::kInvalidArgument);
  EXPECT_EQ(rereg(kReregAccess, pd, nullptr, 0, kAccessZeroBased), Errc::kNotSupported);
  EXPECT_EQ(rereg(kReregTranslation, pd, nullptr, 16, 0), Errc::kInvalidArgument);
  EXPECT_EQ(rereg(kReregTranslation, pd, buf.data(), 0, 0), Errc::kInvalidArgument);
  auto q = dev->query_mr(mr->handle);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->pd, pd);
  EXPECT_EQ(q->access, std::uint32_t{kAccessLocalWrite});
  EXPECT_EQ(q->length, 64u);
  EXPECT_EQ(dev->dealloc_pd(other), Errc::kOk);  // never gained a reference
  EXPECT_EQ(dev->dereg_mr(mr->handle), Errc::kOk);
  EXPECT_EQ(dev->rereg_mr(mr->handle, kReregAccess, pd, nullptr, 0, 0).error(),
            Errc::kInvalidArgument);
}

TEST_F(MrTest, LkeyEqualsRkeyAndConsecutiveKeysShareNothing) {
  auto a = dev->reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite);
  auto b = dev->reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->lkey, a->rkey);  // rxe: one key
  // No index, no counter: rxe's consecutive registrations differ in their top 24 bits by one.
  EXPECT_NE(b->lkey >> 8, (a->lkey >> 8) + 1);
  EXPECT_NE(a->lkey, b->lkey);
}

std::vector<std::uint32_t> key_sequence(std::uint64_t seed, int n) {
  auto dev = make_device(test_config(seed));
  PdHandle pd = *dev->alloc_pd();
  static std::byte region[64];
  std::vector<std::uint32_t> keys;
  for (int i = 0; i < n; ++i) keys.push_back(dev->reg_mr(pd, region, sizeof region, 0)->lkey);
  return keys;
}

TEST(MrKeys, ReproduciblePerSeedAndDifferentAcrossSeeds) {
  const auto k1 = key_sequence(1, 200);
  EXPECT_EQ(k1, key_sequence(1, 200));
  const auto k2 = key_sequence(2, 200);
  EXPECT_NE(k1, k2);
  // Unique within a device.
  EXPECT_EQ(std::set<std::uint32_t>(k1.begin(), k1.end()).size(), k1.size());
  // Every byte of a key is random: 200 draws from 256 values give well over 100 distinct ones.
  for (unsigned shift : {0u, 8u, 16u, 24u}) {
    std::set<std::uint32_t> bytes;
    for (std::uint32_t k : k1) bytes.insert((k >> shift) & 0xff);
    EXPECT_GT(bytes.size(), 100u) << shift;
  }
}

// A random source of 8192 values (13 bits), so that keys would repeat within a few hundred
// registrations (birthday) if nothing kept them apart.
std::function<void(std::span<std::byte>)> narrow_source(std::uint64_t seed) {
  auto prng = std::make_shared<Prng>(seed);
  return [prng](std::span<std::byte> out) {
    const auto v = static_cast<std::uint32_t>(1 + prng->below(8192)) * 0x9e3779b1u;  // never 0
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = static_cast<std::byte>(v >> (8 * (i % 4)));
  };
}

TEST(MrKeys, NoKeyRepeatsWithinTheQuarantine) {
  DeviceConfig cfg = test_config(3);
  cfg.random_bytes = narrow_source(3);
  auto dev = make_device(cfg);
  PdHandle pd = *dev->alloc_pd();
  std::byte region[64];
  // A long-lived MR whose key is never handed out again while it lives.
  auto held = dev->reg_mr(pd, region, sizeof region, 0);
  ASSERT_TRUE(held.ok());
  constexpr std::uint32_t kQ = verbs::detail::kKeyQuarantine;
  std::vector<std::uint32_t> keys;
  for (std::uint32_t i = 0; i < 3 * kQ; ++i) {
    auto mr = dev->reg_mr(pd, region, sizeof region, 0);
    ASSERT_TRUE(mr.ok()) << i;
    keys.push_back(mr->lkey);
    ASSERT_NE(mr->lkey, held->lkey);
    ASSERT_EQ(dev->dereg_mr(mr->handle), Errc::kOk);
  }
  // Each key differs from the kQuarantine keys deregistered before it.
  std::uint32_t repeats_after = 0;
  std::unordered_map<std::uint32_t, std::size_t> last;
  for (std::size_t j = 0; j < keys.size(); ++j) {
    auto [it, first_time] = last.try_emplace(keys[j], j);
    if (first_time) continue;
    EXPECT_GT(j - it->second, kQ) << it->second << " " << j;
    ++repeats_after;
    it->second = j;
  }
  // The narrow source did bring keys back once they had left the quarantine.
  EXPECT_GT(repeats_after, 0u);
  // A stale key resolves to nothing.
  auto& res = dev->memory();
  EXPECT_EQ(res.resolve(0, 0, keys.back(), true, 0, 0, 0).error(), AccessError::kInvalidKey);
}

TEST(MrKeys, ARegistrationThatFindsNoFreeKeyFailsWithNoMemory) {
  DeviceConfig cfg = test_config(4);
  cfg.random_bytes = [](std::span<std::byte> out) {
    for (std::byte& b : out) b = std::byte{0x5a};
  };
  auto dev = make_device(cfg);
  PdHandle pd = *dev->alloc_pd();
  std::byte region[64];
  auto first = dev->reg_mr(pd, region, sizeof region, 0);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->lkey, 0x5a5a5a5au);
  EXPECT_EQ(dev->reg_mr(pd, region, sizeof region, 0).error(), Errc::kNoMemory);
  ASSERT_EQ(dev->dereg_mr(first->handle), Errc::kOk);
  // In quarantine now: still no key.
  EXPECT_EQ(dev->reg_mr(pd, region, sizeof region, 0).error(), Errc::kNoMemory);
}

TEST_F(MrTest, ResolveGivesTheRegisteredBytes) {
  auto mr = dev->reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite | kAccessRemoteRead);
  ASSERT_TRUE(mr.ok());
  const std::uint64_t base = mr->iova;
  auto& res = dev->memory();
  auto r = res.resolve(pd_id, 0, mr->lkey, false, base + 100, 200, kAccessLocalWrite);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->data(), buf.data() + 100);
  EXPECT_EQ(r->size(), 200u);
  auto whole = res.resolve(pd_id, 0, mr->rkey, true, base, buf.size(), kAccessRemoteRead);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->data(), buf.data());
  EXPECT_EQ(whole->size(), buf.size());
}

TEST_F(MrTest, ResolveWithAnIovaOtherThanTheAddress) {
  auto mr = dev->reg_mr_iova(pd, buf.data(), buf.size(), 0x1000, kAccessRemoteRead);
  ASSERT_TRUE(mr.ok());
  auto r = dev->memory().resolve(pd_id, 0, mr->rkey, true, 0x1010, 16, kAccessRemoteRead);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->data(), buf.data() + 0x10);
}

TEST_F(MrTest, ResolveRejectsUnknownAndWrongKeys) {
  auto mr = dev->reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite);
  ASSERT_TRUE(mr.ok());
  auto& res = dev->memory();
  const std::uint64_t base = mr->iova;
  // Right index, wrong key byte.
  EXPECT_EQ(res.resolve(pd_id, 0, mr->lkey ^ 0x01, false, base, 1, 0).error(),
            AccessError::kInvalidKey);
  // An index with no MR, and one far beyond any.
  EXPECT_EQ(res.resolve(pd_id, 0, mr->lkey + 0x100, false, base, 1, 0).error(),
            AccessError::kInvalidKey);
  EXPECT_EQ(res.resolve(pd_id, 0, 0xffffffff, false, base, 1, 0).error(), AccessError::kInvalidKey);
  EXPECT_EQ(res.resolve(pd_id, 0, 0, false, base, 1, 0).error(), AccessError::kInvalidKey);
}

TEST_F(MrTest, ResolveRejectsAnotherPd) {
  auto mr = dev->reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite);
  PdHandle other = *dev->alloc_pd();
  const std::uint32_t other_id =
      DeviceTestAccess::state(*dev).pds.get(verbs::detail::to_raw(other))->id;
  ASSERT_NE(other_id, pd_id);
  EXPECT_EQ(dev->memory().resolve(other_id, 0, mr->lkey, false, mr->iova, 1, 0).error(),
            AccessError::kWrongPd);
}

TEST_F(MrTest, ResolveRequiresEveryRequestedAccessFlag) {
  auto& res = dev->memory();
  auto ro = dev->reg_mr(pd, buf.data(), 64, 0);
  EXPECT_TRUE(res.resolve(pd_id, 0, ro->lkey, false, ro->iova, 8, 0).ok());  // local read: always
  EXPECT_EQ(res.resolve(pd_id, 0, ro->lkey, false, ro->iova, 8, kAccessLocalWrite).error(),
            AccessError::kNoPermission);
  EXPECT_EQ(res.resolve(pd_id, 0, ro->rkey, true, ro->iova, 8, kAccessRemoteRead).error(),
            AccessError::kNoPermission);

  auto rr = dev->reg_mr(pd, buf.data(), 64, kAccessRemoteRead);
  EXPECT_TRUE(res.resolve(pd_id, 0, rr->rkey, true, rr->iova, 8, kAccessRemoteRead).ok());
  EXPECT_EQ(res.resolve(pd_id, 0, rr->rkey, true, rr->iova, 8, kAccessRemoteWrite).error(),
            AccessError::kNoPermission);
  EXPECT_EQ(res.resolve(pd_id, 0, rr->rkey, true, rr->iova, 8, kAccessRemoteAtomic).error(),
            AccessError::kNoPermission);

  auto rw = dev->reg_mr(pd, buf.data(), 64, kAccessLocalWrite | kAccessRemoteWrite);
  EXPECT_TRUE(res.resolve(pd_id, 0, rw->rkey, true, rw->iova, 8, kAccessRemoteWrite).ok());
  EXPECT_EQ(
      res.resolve(pd_id, 0, rw->rkey, true, rw->iova, 8, kAccessRemoteWrite | kAccessRemoteRead)
          .error(),
      AccessError::kNoPermission);
}

TEST_F(MrTest, ResolveChecksBounds) {
  auto mr = dev->reg_mr_iova(pd, buf.data(), 100, 1000, kAccessLocalWrite);
  ASSERT_TRUE(mr.ok());
  auto& res = dev->memory();
  auto at = [&](std::uint64_t addr, std::uint64_t len) {
    return res.resolve(pd_id, 0, mr->lkey, false, addr, len, 0);
  };
  EXPECT_TRUE(at(1000, 100).ok());
  EXPECT_TRUE(at(1099, 1).ok());
  EXPECT_EQ(at(999, 1).error(), AccessError::kOutOfBounds);  // starts below
  EXPECT_EQ(at(999, 2).error(), AccessError::kOutOfBounds);
  EXPECT_EQ(at(1000, 101).error(), AccessError::kOutOfBounds);  // ends beyond
  EXPECT_EQ(at(1099, 2).error(), AccessError::kOutOfBounds);
  EXPECT_EQ(at(1100, 1).error(), AccessError::kOutOfBounds);
  EXPECT_EQ(at(0, 1).error(), AccessError::kOutOfBounds);
  // Lengths and addresses whose sum passes 2^64 must not wrap into the region.
  EXPECT_EQ(at(1050, UINT64_MAX).error(), AccessError::kOutOfBounds);
  EXPECT_EQ(at(1050, UINT64_MAX - 1049).error(), AccessError::kOutOfBounds);  // sum wraps to 0
  EXPECT_EQ(at(UINT64_MAX, 2).error(), AccessError::kOutOfBounds);
  EXPECT_EQ(at(UINT64_MAX, UINT64_MAX).error(), AccessError::kOutOfBounds);
  // Zero length: inside, or exactly at the end (as rxe's range check), but not beyond.
  EXPECT_TRUE(at(1000, 0).ok());
  EXPECT_TRUE(at(1100, 0).ok());
  EXPECT_EQ(at(1101, 0).error(), AccessError::kOutOfBounds);
  EXPECT_EQ(at(999, 0).error(), AccessError::kOutOfBounds);
}

TEST_F(MrTest, ResolveAtTheTopOfTheAddressSpace) {
  // A region whose iova range ends exactly at 2^64.
  auto mr = dev->reg_mr_iova(pd, buf.data(), 4096, UINT64_MAX - 4095, kAccessRemoteRead);
  ASSERT_TRUE(mr.ok());
  auto& res = dev->memory();
  auto top = res.resolve(pd_id, 0, mr->rkey, true, UINT64_MAX, 1, kAccessRemoteRead);
  ASSERT_TRUE(top.ok());
  EXPECT_EQ(top->data(), buf.data() + 4095);
  EXPECT_TRUE(
      res.resolve(pd_id, 0, mr->rkey, true, UINT64_MAX - 4095, 4096, kAccessRemoteRead).ok());
  EXPECT_EQ(res.resolve(pd_id, 0, mr->rkey, true, UINT64_MAX, 2, kAccessRemoteRead).error(),
            AccessError::kOutOfBounds);
  EXPECT_EQ(
      res.resolve(pd_id, 0, mr->rkey, true, UINT64_MAX - 4095, 4097, kAccessRemoteRead).error(),
      AccessError::kOutOfBounds);
  EXPECT_EQ(res.resolve(pd_id, 0, mr->rkey, true, 0, 1, kAccessRemoteRead).error(),
            AccessError::kOutOfBounds);
}

TEST_F(MrTest, DeregisteredRegionsAreNeverReached) {
  auto mr = dev->reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite);
  const std::uint32_t key = mr->lkey;
  ASSERT_EQ(dev->dereg_mr(mr->handle), Errc::kOk);
  EXPECT_EQ(dev->memory().resolve(pd_id, 0, key, false, mr->iova, 1, 0).error(),
            AccessError::kInvalidKey);
  EXPECT_EQ(dev->memory().invalidate(pd_id, 0, key, true).error(), AccessError::kInvalidKey);
}

// Only fast-register MRs and memory windows can be invalidated (IBTA o10-37, rxe_invalidate_mr());
// uroce has neither: an ordinary MR refuses, after the key and PD checks, and stays valid.
TEST_F(MrTest, InvalidatingAnOrdinaryMrIsRefusedAndTheMrStaysValid) {
  auto mr = dev->reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite | kAccessRemoteWrite);
  auto& res = dev->memory();
  EXPECT_EQ(res.invalidate(pd_id, 0, mr->rkey ^ 0x80, true).error(), AccessError::kInvalidKey);
  EXPECT_EQ(res.invalidate(pd_id + 1, 0, mr->rkey, true).error(), AccessError::kWrongPd);
  EXPECT_EQ(res.invalidate(pd_id, 0, mr->rkey, true).error(), AccessError::kNotInvalidatable);
  EXPECT_EQ(res.invalidate(pd_id, 0, mr->rkey, true).error(),
            AccessError::kNotInvalidatable);  // again
  EXPECT_TRUE(res.resolve(pd_id, 0, mr->rkey, true, mr->iova, 8, kAccessRemoteWrite).ok());
  EXPECT_TRUE(res.resolve(pd_id, 0, mr->lkey, false, mr->iova, 8, 0).ok());
  EXPECT_EQ(dev->dereg_mr(mr->handle), Errc::kOk);
}

}  // namespace
}  // namespace uroce

namespace uroce {
namespace {

// On-demand paging (uroce/verbs.h, kAccessOnDemand): the device's fault_in is a model here, a
// set of mapped pages (writable or read-only) of a fake address space, and it records each call.
class MrOdp : public ::testing::Test {
 protected:
  static constexpr std::uintptr_t kPage = 4096;
  void SetUp() override {
    DeviceConfig c = testing::test_config();
    c.fault_in = [this](std::byte* addr, std::size_t length, bool write) {
      calls.push_back({reinterpret_cast<std::uintptr_t>(addr), length, write});
      const auto a = reinterpret_cast<std::uintptr_t>(addr);
      for (std::uintptr_t p = a / kPage; p <= (a + length - 1) / kPage; ++p) {
        auto it = pages.find(p);
        if (it == pages.end() || (write && !it->second)) return false;
      }
      return true;
    };
    dev = testing::make_device(c);
    pd = *dev->alloc_pd();
    pd_id = DeviceTestAccess::state(*dev).pds.get(verbs::detail::to_raw(pd))->id;
  }
  void map(std::uintptr_t addr, std::size_t length, bool writable) {
    for (std::uintptr_t p = addr / kPage; p < (addr + length) / kPage; ++p) pages[p] = writable;
  }
  struct Call {
    std::uintptr_t addr;
    std::size_t length;
    bool write;
  };
  std::unique_ptr<Device> dev;
  PdHandle pd;
  std::uint32_t pd_id = 0;
  std::unordered_map<std::uintptr_t, bool> pages;  // page number -> writable
  std::vector<Call> calls;
};

constexpr std::uint32_t kAll =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

// ODP for every transport; the implicit region works (below) but is not advertised (device.cc
// says why).
TEST_F(MrOdp, TheDeviceReportsOdpForEveryTransport) {
  const OdpCaps& odp = dev->query_device().odp;
  EXPECT_EQ(odp.general_caps, kOdpSupport);
  EXPECT_EQ(odp.rc_odp_caps, kOdpSend | kOdpRecv | kOdpWrite | kOdpRead | kOdpAtomic | kOdpSrqRecv);
  EXPECT_NE(odp.uc_odp_caps & kOdpWrite, 0u);
  EXPECT_NE(odp.ud_odp_caps & kOdpSend, 0u);
  EXPECT_EQ(odp.xrc_odp_caps, kOdpSend | kOdpWrite | kOdpRead | kOdpAtomic | kOdpSrqRecv);
}

TEST_F(MrOdp, AnAccessFaultsThePagesInWithTheAccessItNeeds) {
  auto* base = reinterpret_cast<std::byte*>(0x7f0000000000);
  map(0x7f0000000000, 4 * kPage, true);
  auto mr = dev->reg_mr(pd, base, 4 * kPage, kAll | kAccessOnDemand);
  ASSERT_TRUE(mr.ok());
  EXPECT_TRUE(calls.empty());  // nothing is touched at registration
  auto w =
      dev->memory().resolve(pd_id, 0, mr->rkey, true, mr->iova + 100, 5000, kAccessRemoteWrite);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->data(), base + 100);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].addr, 0x7f0000000000u + 100);
  EXPECT_EQ(calls[0].length, 5000u);
  EXPECT_TRUE(calls[0].write);
  ASSERT_TRUE(dev->memory().resolve(pd_id, 0, mr->rkey, true, mr->iova, 8, kAccessRemoteRead).ok());
  EXPECT_FALSE(calls.back().write);
  ASSERT_TRUE(dev->memory().resolve(pd_id, 0, mr->lkey, false, mr->iova, 8, 0).ok());  // a SEND's
  EXPECT_FALSE(calls.back().write);
  ASSERT_TRUE(
      dev->memory().resolve(pd_id, 0, mr->lkey, false, mr->iova, 8, kAccessLocalWrite).ok());
  EXPECT_TRUE(calls.back().write);  // a receive's scatter
}

TEST_F(MrOdp, PagesThatAreNotMappedOrNotWritableFailTheAccessAsNotMapped) {
  const std::uintptr_t a = 0x7f0000000000;
  map(a, kPage, true);           // page 0 writable
  map(a + kPage, kPage, false);  // page 1 read-only; pages 2 and 3 not mapped
  auto mr = dev->reg_mr(pd, reinterpret_cast<std::byte*>(a), 4 * kPage, kAll | kAccessOnDemand);
  ASSERT_TRUE(mr.ok());
  auto& res = dev->memory();
  EXPECT_TRUE(res.resolve(pd_id, 0, mr->rkey, true, a, kPage, kAccessRemoteWrite).ok());
  EXPECT_EQ(res.resolve(pd_id, 0, mr->rkey, true, a, kPage + 1, kAccessRemoteWrite).error(),
            AccessError::kNotMapped);
  EXPECT_TRUE(res.resolve(pd_id, 0, mr->rkey, true, a, 2 * kPage, kAccessRemoteRead).ok());
  EXPECT_EQ(res.resolve(pd_id, 0, mr->rkey, true, a + 2 * kPage, 8, kAccessRemoteAtomic).error(),
            AccessError::kNotMapped);
  EXPECT_EQ(res.resolve(pd_id, 0, mr->lkey, false, a + 3 * kPage, 1, 0).error(),
            AccessError::kNotMapped);
  // The ordinary checks come first: out of bounds is still out of bounds, and asks nothing.
  const std::size_t before = calls.size();
  EXPECT_EQ(res.resolve(pd_id, 0, mr->rkey, true, a + 4 * kPage, 1, kAccessRemoteRead).error(),
            AccessError::kOutOfBounds);
  EXPECT_EQ(calls.size(), before);
}

TEST_F(MrOdp, AnOrdinaryRegionNeverAsks) {
  std::vector<std::byte> buf(64);
  auto mr = dev->reg_mr(pd, buf.data(), buf.size(), kAll);
  ASSERT_TRUE(mr.ok());
  EXPECT_TRUE(
      dev->memory().resolve(pd_id, 0, mr->rkey, true, mr->iova, 64, kAccessRemoteWrite).ok());
  EXPECT_TRUE(calls.empty());
}

TEST_F(MrOdp, TheImplicitRegionCoversTheAddressSpaceAndEveryAccessIsFaultedIn) {
  auto mr = dev->reg_mr(pd, nullptr, SIZE_MAX, kAll | kAccessOnDemand);
  ASSERT_TRUE(mr.ok());
  EXPECT_EQ(mr->iova, 0u);
  EXPECT_EQ(mr->length, SIZE_MAX);
  map(0x5000, kPage, true);
  auto r = dev->memory().resolve(pd_id, 0, mr->rkey, true, 0x5010, 16, kAccessRemoteWrite);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r->data()), 0x5010u);
  EXPECT_EQ(dev->memory().resolve(pd_id, 0, mr->rkey, true, 0, 8, kAccessRemoteRead).error(),
            AccessError::kNotMapped);
  // [0, 2^64 - 1): the last byte is at 2^64 - 2.
  EXPECT_EQ(
      dev->memory().resolve(pd_id, 0, mr->rkey, true, UINT64_MAX - 8, 8, kAccessRemoteRead).error(),
      AccessError::kNotMapped);
  EXPECT_EQ(
      dev->memory().resolve(pd_id, 0, mr->rkey, true, UINT64_MAX - 7, 8, kAccessRemoteRead).error(),
      AccessError::kOutOfBounds);
  // Only on demand, and only at iova 0 (rxe_odp_mr_init_user()); without ON_DEMAND a null
  // address is refused as before.
  EXPECT_EQ(dev->reg_mr_iova(pd, nullptr, SIZE_MAX, 0x1000, kAccessOnDemand).error(),
            Errc::kInvalidArgument);
  EXPECT_EQ(dev->reg_mr(pd, nullptr, SIZE_MAX, kAccessLocalWrite).error(), Errc::kInvalidArgument);
  // It cannot stop being on demand while it covers everything.
  EXPECT_EQ(
      dev->rereg_mr(mr->handle, kReregAccess, PdHandle{}, nullptr, 0, kAccessLocalWrite).error(),
      Errc::kInvalidArgument);
  EXPECT_EQ(dev->dereg_mr(mr->handle), Errc::kOk);
}

TEST_F(MrOdp, AdviseMrPrefetchesOdpRangesAndChecksEverySgeFirst) {
  const std::uintptr_t a = 0x7f0000000000;
  map(a, 2 * kPage, true);
  auto mr = dev->reg_mr(pd, reinterpret_cast<std::byte*>(a), 4 * kPage,
                        kAccessLocalWrite | kAccessOnDemand);
  ASSERT_TRUE(mr.ok());
  auto ro = dev->reg_mr(pd, reinterpret_cast<std::byte*>(a), kPage, kAccessOnDemand);
  ASSERT_TRUE(ro.ok());
  std::vector<std::byte> buf(64);
  auto plain = dev->reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite);
  ASSERT_TRUE(plain.ok());
  const Sge first{a, 2 * kPage, mr->lkey};
  const Sge rest{a + 2 * kPage, 2 * kPage, mr->lkey};  // not mapped
  const Sge sges[] = {first};

  EXPECT_EQ(dev->advise_mr(pd, AdviseMr::kPrefetchWrite, kAdviseMrFlagFlush, sges), Errc::kOk);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_TRUE(calls[0].write);
  EXPECT_EQ(calls[0].length, 2 * kPage);
  EXPECT_EQ(dev->advise_mr(pd, AdviseMr::kPrefetch, kAdviseMrFlagFlush, sges), Errc::kOk);
  EXPECT_FALSE(calls.back().write);
  // Synchronous (FLUSH): a range that cannot be faulted in fails; without FLUSH, best effort.
  const Sge both[] = {first, rest};
  EXPECT_EQ(dev->advise_mr(pd, AdviseMr::kPrefetch, kAdviseMrFlagFlush, both), Errc::kBadAddress);
  EXPECT_EQ(dev->advise_mr(pd, AdviseMr::kPrefetch, 0, both), Errc::kOk);
  // No fault: nothing to do.
  calls.clear();
  EXPECT_EQ(dev->advise_mr(pd, AdviseMr::kPrefetchNoFault, 0, both), Errc::kOk);
  EXPECT_TRUE(calls.empty());

  // Refusals, each before anything is faulted in.
  const Sge bad_key[] = {first, Sge{a, 8, mr->lkey ^ 0x100}};
  EXPECT_EQ(dev->advise_mr(pd, AdviseMr::kPrefetch, 0, bad_key), Errc::kInvalidArgument);
  const Sge not_odp[] = {Sge{reinterpret_cast<std::uintptr_t>(buf.data()), 8, plain->lkey}};
  EXPECT_EQ(dev->advise_mr(pd, AdviseMr::kPrefetch, 0, not_odp), Errc::kInvalidArgument);
  const Sge outside[] = {Sge{a + 3 * kPage, kPage + 1, mr->lkey}};
  EXPECT_EQ(dev->advise_mr(pd, AdviseMr::kPrefetch, 0, outside), Errc::kInvalidArgument);
  const Sge read_only[] = {Sge{a, 8, ro->lkey}};
  EXPECT_EQ(dev->advise_mr(pd, AdviseMr::kPrefetchWrite, 0, read_only), Errc::kPermission);
  PdHandle other = *dev->alloc_pd();
  EXPECT_EQ(dev->advise_mr(other, AdviseMr::kPrefetch, 0, sges), Errc::kInvalidArgument);
  EXPECT_EQ(dev->advise_mr(pd, static_cast<AdviseMr>(3), 0, sges), Errc::kNotSupported);
  EXPECT_EQ(dev->advise_mr(pd, AdviseMr::kPrefetch, 2, sges), Errc::kInvalidArgument);
  EXPECT_EQ(dev->advise_mr(pd, AdviseMr::kPrefetch, 0, {}), Errc::kInvalidArgument);
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(dev->advise_mr(pd, AdviseMr::kPrefetch, 0, read_only), Errc::kOk);  // a read may
  EXPECT_EQ(calls.size(), 1u);
}

}  // namespace
}  // namespace uroce

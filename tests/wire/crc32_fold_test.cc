// The CRC-32 folding kernels (wire/crc32_fold.h: 512-, 256- and 128-bit) and the public CRC entry
// points built on them (wire/icrc.h), each kernel selected in turn and cross-checked against
// ISA-L's table-driven CRC-32, ISA-L's dispatched crc32_gzip_refl and a bitwise one.
#include "wire/crc32_fold.h"

#include <gtest/gtest.h>
#include <isa-l/crc.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "crc32_kernel_fixture.h"
#include "wire/icrc.h"

namespace uroce::wire {
namespace {

// CRC-32 one bit at a time, the masked bytes ORed in first.
std::uint32_t bitwise_crc32(std::uint32_t crc, const std::byte* p, std::size_t n,
                            const std::byte* or_mask = nullptr) {
  std::uint32_t r = ~crc;
  for (std::size_t i = 0; i < n; ++i) {
    std::byte b = p[i];
    if (or_mask != nullptr && i < 64) b |= or_mask[i];
    r ^= static_cast<std::uint32_t>(b);
    for (int k = 0; k < 8; ++k) r = (r >> 1) ^ (0xedb88320u & (0u - (r & 1u)));
  }
  return ~r;
}

// ISA-L's byte-table CRC-32 (no carry-less multiplication): a reference independent of folding.
std::uint32_t table_crc32(std::uint32_t crc, const std::byte* p, std::size_t n) {
  return crc32_gzip_refl_base(crc, reinterpret_cast<unsigned char*>(const_cast<std::byte*>(p)), n);
}

std::vector<std::byte> random_bytes(std::mt19937& rng, std::size_t n) {
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

using Crc32Fold = test::WithCrc32Kernel;
using test::kernel_test_name;

// The constants are derived from the polynomial at compile time; these are the published values
// (Intel's PCLMULQDQ CRC paper, zlib's crc32_simd.c, ISA-L's crc32_gzip_refl_by8).
TEST(Crc32FoldConstants, MatchThePublishedOnes) {
  static_assert(crc32_fold::fold_constant(4 * 128 + 32) == 0x154442bd4u);  // fold by 512 bits
  static_assert(crc32_fold::fold_constant(4 * 128 - 32) == 0x1c6e41596u);
  static_assert(crc32_fold::fold_constant(128 + 32) == 0x1751997d0u);  // fold by 128 bits
  static_assert(crc32_fold::fold_constant(128 - 32) == 0x0ccaa009eu);
  static_assert(crc32_fold::fold_constant(64) == 0x163cd6124u);
  static_assert(crc32_fold::barrett_mu() == 0x1f7011641u);
  static_assert(crc32_fold::kPolyReflected33 == 0x1db710641u);
  SUCCEED();
}

TEST_P(Crc32Fold, EveryLengthUpTo8KiBAtRandomAlignmentsMatchesTheTableCrc) {
  std::mt19937 rng(20261129);
  const std::vector<std::byte> buf = random_bytes(rng, 8192 + 128);
  for (std::size_t len = 0; len <= 8192; ++len) {
    const std::size_t align = rng() % 64;
    const auto crc = static_cast<std::uint32_t>(rng());
    const std::byte* p = buf.data() + align;
    ASSERT_EQ(crc32_fold::crc32(crc, p, len, nullptr), table_crc32(crc, p, len))
        << "length " << len << ", alignment " << align;
  }
}

// Lengths up to 70000 (past every loop and head/tail combination many times over), each at a
// random alignment with a random starting CRC, against the table CRC and ISA-L's own dispatched
// crc32_gzip_refl; every 16th also against the bitwise CRC.
TEST_P(Crc32Fold, RandomLengthsUpTo70000MatchTableIsalAndBitwiseCrc) {
  std::mt19937 rng(20261201);
  constexpr std::size_t kMaxLen = 70000;
  const std::vector<std::byte> buf = random_bytes(rng, kMaxLen + 64);
  for (int iter = 0; iter < 600; ++iter) {
    const std::size_t len = rng() % (kMaxLen + 1);
    const std::size_t align = rng() % 64;
    const auto crc = static_cast<std::uint32_t>(rng());
    const std::byte* p = buf.data() + align;
    const std::uint32_t got = crc32_fold::crc32(crc, p, len, nullptr);
    ASSERT_EQ(got, table_crc32(crc, p, len)) << "length " << len << ", alignment " << align;
    ASSERT_EQ(got, crc32_gzip_refl(crc, reinterpret_cast<const unsigned char*>(p), len))
        << "length " << len << ", alignment " << align;
    if (iter % 16 == 0) {
      ASSERT_EQ(got, bitwise_crc32(crc, p, len)) << "length " << len;
    }
  }
}

TEST_P(Crc32Fold, MatchesBitwiseCrcAndStandardValue) {
  const char* s = "123456789";
  EXPECT_EQ(crc32_fold::crc32(0, reinterpret_cast<const std::byte*>(s), 9, nullptr), 0xcbf43926u);
  std::mt19937 rng(7);
  const std::vector<std::byte> buf = random_bytes(rng, 2048 + 64);
  for (std::size_t len = 0; len <= 2048; len += 1 + len / 16) {
    const std::byte* p = buf.data() + rng() % 64;
    const auto crc = static_cast<std::uint32_t>(rng());
    ASSERT_EQ(crc32_fold::crc32(crc, p, len, nullptr), bitwise_crc32(crc, p, len)) << len;
  }
}

TEST_P(Crc32Fold, OrMaskAppliesToTheFirst64BytesOnly) {
  std::mt19937 rng(11);
  const std::vector<std::byte> buf = random_bytes(rng, 4096 + 64);
  for (int iter = 0; iter < 3000; ++iter) {
    const std::size_t len = iter < 200 ? static_cast<std::size_t>(iter) : rng() % 4097;
    std::array<std::byte, 64> mask{};
    for (auto& b : mask) b = rng() % 4 == 0 ? static_cast<std::byte>(rng()) : std::byte{0};
    const std::byte* p = buf.data() + rng() % 64;
    const auto crc = static_cast<std::uint32_t>(rng());
    ASSERT_EQ(crc32_fold::crc32(crc, p, len, mask.data()), bitwise_crc32(crc, p, len, mask.data()))
        << "length " << len;
  }
}

TEST_P(Crc32Fold, CopyCopiesExactlyAndReturnsTheCrc) {
  std::mt19937 rng(13);
  constexpr std::size_t kMaxLen = 70000;
  const std::vector<std::byte> src = random_bytes(rng, kMaxLen + 64);
  std::vector<std::byte> dst(kMaxLen + 256);
  // Every length up to 600, then steps of up to 60 to 8 KiB, then random ones to 70000.
  for (std::size_t len = 0; len <= kMaxLen;
       len = len < 8192 ? len + 1 + (len > 600 ? rng() % 61 : 0) : len + 1 + rng() % 4000) {
    const std::size_t s_off = rng() % 64;
    const std::size_t d_off = 64 + rng() % 64;
    std::fill(dst.begin(), dst.end(), std::byte{0xa5});
    const auto crc = static_cast<std::uint32_t>(rng());
    ASSERT_EQ(crc32_fold::copy_crc32(crc, dst.data() + d_off, src.data() + s_off, len),
              table_crc32(crc, src.data() + s_off, len))
        << "length " << len;
    ASSERT_TRUE(std::equal(src.begin() + static_cast<std::ptrdiff_t>(s_off),
                           src.begin() + static_cast<std::ptrdiff_t>(s_off + len),
                           dst.begin() + static_cast<std::ptrdiff_t>(d_off)))
        << "length " << len;
    // Nothing outside the destination range is written.
    ASSERT_TRUE(std::all_of(dst.begin(), dst.begin() + static_cast<std::ptrdiff_t>(d_off),
                            [](std::byte b) { return b == std::byte{0xa5}; }));
    ASSERT_TRUE(std::all_of(dst.begin() + static_cast<std::ptrdiff_t>(d_off + len), dst.end(),
                            [](std::byte b) { return b == std::byte{0xa5}; }))
        << "length " << len;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, Crc32Fold, test::kFoldKernels, kernel_test_name);

// The public functions, on each kernel and on the ISA-L fallback (kNone).
using Crc32Api = test::WithCrc32Kernel;

TEST_P(Crc32Api, Crc32AndCopyAndCrc32AgreeWithTheTableCrcInPieces) {
  std::mt19937 rng(17);
  const std::vector<std::byte> src = random_bytes(rng, 9000);
  std::vector<std::byte> dst(9000);
  for (int iter = 0; iter < 300; ++iter) {
    const std::size_t len = rng() % 9000;
    const std::size_t cut = len == 0 ? 0 : rng() % len;
    const ConstBytes s = ConstBytes(src).first(len);
    const std::uint32_t want = table_crc32(0, s.data(), len);
    EXPECT_EQ(crc32(crc32(0, s.first(cut)), s.subspan(cut)), want);
    std::fill(dst.begin(), dst.end(), std::byte{0});
    const std::uint32_t c1 = copy_and_crc32(0, dst, s.first(cut));
    EXPECT_EQ(copy_and_crc32(c1, MutBytes(dst).subspan(cut), s.subspan(cut)), want);
    EXPECT_TRUE(std::equal(s.begin(), s.end(), dst.begin()));
  }
}

// A READ response's payload is the responder's memory, which its application may rewrite while
// the datapath snapshots it: the CRC must be that of the bytes the copy holds, whatever the
// source holds by then (each byte read once). A writer thread rewrites the source throughout;
// a kernel or fallback that read the source twice (copy, then CRC) would disagree with the
// copy's own CRC in some of the calls.
TEST_P(Crc32Api, CopyAndCrc32CoversTheCopyWhileTheSourceChanges) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "races on the source on purpose";
#else
  constexpr std::size_t kWords = 4096 / 8;
  std::vector<std::uint64_t> src(kWords);
  std::vector<std::byte> dst(kWords * 8);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (std::uint64_t v = 1; !stop.load(std::memory_order_relaxed); ++v)
      for (std::uint64_t& w : src)
        std::atomic_ref<std::uint64_t>(w).store(v * 0x9e3779b97f4a7c15ull,
                                                std::memory_order_relaxed);
  });
  int wrong = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const auto* p = reinterpret_cast<const std::byte*>(src.data());
    const std::uint32_t got = copy_and_crc32(0, dst, ConstBytes(p, dst.size()));
    wrong += got != table_crc32(0, dst.data(), dst.size()) ? 1 : 0;
  }
  stop = true;
  writer.join();
  EXPECT_EQ(wrong, 0);
#endif
}

INSTANTIATE_TEST_SUITE_P(KernelsAndIsal, Crc32Api, ::testing::ValuesIn(crc32_fold::kKernels),
                         kernel_test_name);

}  // namespace
}  // namespace uroce::wire

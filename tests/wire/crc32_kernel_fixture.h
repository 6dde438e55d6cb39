// A parameterised fixture that runs each test once per CRC-32 kernel of wire/crc32_fold.h, that
// kernel selected for the test's duration (skipped where the CPU cannot run it). Kernel::kNone
// runs the public functions on their ISA-L fallback.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "wire/crc32_fold.h"

namespace uroce::test {

namespace crc32_fold = wire::crc32_fold;

class WithCrc32Kernel : public ::testing::TestWithParam<crc32_fold::Kernel> {
 protected:
  void SetUp() override {
    if (!crc32_fold::supported(GetParam())) {
      GTEST_SKIP() << "this CPU cannot run " << crc32_fold::kernel_name(GetParam());
    }
    crc32_fold::select_for_testing(GetParam());
  }
  void TearDown() override { crc32_fold::select_for_testing(before_); }

 private:
  const crc32_fold::Kernel before_ = crc32_fold::selected();
};

inline std::string kernel_test_name(const ::testing::TestParamInfo<crc32_fold::Kernel>& info) {
  return crc32_fold::kernel_name(info.param);
}

// The three kernels, without kNone.
inline const auto kFoldKernels =
    ::testing::Values(crc32_fold::Kernel::kPclmul128, crc32_fold::Kernel::kVpclmul256,
                      crc32_fold::Kernel::kVpclmul512);

}  // namespace uroce::test

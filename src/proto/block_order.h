// The order in which a context hands out the QPNs of a block it holds (devd_protocol.h): a
// permutation of the block's kBlockSize numbers drawn from `seed` (Fisher-Yates), so that one
// QPN does not tell the next one (issue 44; the coordinator's blocks are random too,
// devd/block_allocator.h). The context seeds it from the kernel's CSPRNG.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

#include "base/prng.h"
#include "proto/devd_protocol.h"

namespace uroce::engine::devd {

inline std::array<std::uint8_t, kBlockSize> block_order(std::uint64_t seed) {
  static_assert(kBlockSize == 256);  // every number fits a byte
  std::array<std::uint8_t, kBlockSize> order{};
  for (std::uint32_t i = 0; i < kBlockSize; ++i) order[i] = static_cast<std::uint8_t>(i);
  Prng prng(seed);
  for (std::uint32_t i = kBlockSize - 1; i > 0; --i) {
    const auto j = static_cast<std::uint32_t>(prng.below(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace uroce::engine::devd

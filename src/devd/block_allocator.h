// The coordinator's choice of QPN blocks (devd_protocol.h): random among the free ones, so that
// an off-path attacker who saw one connection's QPN cannot tell another's (issue 44; a context
// then hands out a block's numbers in a random order too, devd::block_order). A released block
// waits in quarantine until kBlockQuarantine more blocks have been released after it: a peer of
// a destroyed QP may still be sending to its number, which must not reach a new QP soon (rxe
// delays reuse likewise). Deterministic under its seed; the coordinator seeds it from the
// kernel's CSPRNG (CoordinatorOptions::seed 0).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/prng.h"
#include "base/ring.h"
#include "proto/devd_protocol.h"

namespace uroce::engine {

class BlockAllocator {
 public:
  // A quarter of the space: a random draw still finds a free block three times in four with the
  // most blocks a steering program holds (about 4000) in use.
  static constexpr std::uint32_t kBlockQuarantine = 16384;
  // Random draws before a scan from a random block on takes the first free one.
  static constexpr int kMaxDraws = 64;

  explicit BlockAllocator(std::uint64_t seed);

  // A free block, not in quarantine while any other is free; nullopt when every block is used.
  std::optional<std::uint32_t> allocate();
  // `b` (allocated) is free again, in quarantine.
  void release(std::uint32_t b);
  // `b` (just allocated) is free again at once, as if it had never been handed out.
  void undo(std::uint32_t b);
  bool used(std::uint32_t b) const { return used_[b]; }
  // Blocks allocated and not released (`uroce stats`: qpn_blocks_used).
  std::uint32_t in_use() const { return in_use_; }

 private:
  bool usable(std::uint32_t b, bool quarantine_too) const {
    return !used_[b] && (!quarantine_too || !quarantined_[b]);
  }
  Prng prng_;
  std::vector<bool> used_;         // by block
  std::vector<bool> quarantined_;  // by block
  BoundedRing<std::uint32_t> quarantine_{kBlockQuarantine};
  std::uint32_t in_use_ = 0;
};

}  // namespace uroce::engine

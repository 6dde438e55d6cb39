#include "devd/block_allocator.h"

#include "base/assert.h"

namespace uroce::engine {

BlockAllocator::BlockAllocator(std::uint64_t seed)
    : prng_(seed), used_(devd::kLastBlock + 1, false), quarantined_(devd::kLastBlock + 1, false) {}

std::optional<std::uint32_t> BlockAllocator::allocate() {
  constexpr std::uint32_t kBlocks = devd::kLastBlock - devd::kFirstBlock + 1;
  std::optional<std::uint32_t> got;
  for (int i = 0; i < kMaxDraws && !got; ++i) {
    const auto b = static_cast<std::uint32_t>(prng_.range(devd::kFirstBlock, devd::kLastBlock));
    if (usable(b, true)) got = b;
  }
  // Nearly everything used or in quarantine: the first free block from a random one on, out of
  // quarantine if there is one.
  for (const bool quarantine_too : {true, false}) {
    if (got) break;
    const auto start = static_cast<std::uint32_t>(prng_.below(kBlocks));
    for (std::uint32_t k = 0; k < kBlocks && !got; ++k) {
      const std::uint32_t b = devd::kFirstBlock + (start + k) % kBlocks;
      if (usable(b, quarantine_too)) got = b;
    }
  }
  if (got) {
    used_[*got] = true;
    ++in_use_;
  }
  return got;
}

void BlockAllocator::release(std::uint32_t b) {
  UROCE_ASSERT(b >= devd::kFirstBlock && b <= devd::kLastBlock && used_[b]);
  used_[b] = false;
  --in_use_;
  if (quarantined_[b]) return;  // taken out of quarantine when nothing else was free
  if (quarantine_.full()) {
    quarantined_[quarantine_.front()] = false;
    quarantine_.pop_front();
  }
  quarantine_.push_back(b);
  quarantined_[b] = true;
}

void BlockAllocator::undo(std::uint32_t b) {
  UROCE_ASSERT(b >= devd::kFirstBlock && b <= devd::kLastBlock && used_[b]);
  used_[b] = false;
  --in_use_;
}

}  // namespace uroce::engine

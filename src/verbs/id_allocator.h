// Numbers in [min, max] handed out cyclically, as rxe's pools do (xa_alloc_cyclic): the next
// number after the last one handed out that is free, wrapping to min. A released number is
// therefore not reused until the others have been tried, so a stale QPN or MR key index names
// nothing for as long as possible.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/assert.h"

namespace uroce::verbs {

class CyclicIdAllocator {
 public:
  // Hands out at most `max_live` numbers at once (<= max - min + 1).
  CyclicIdAllocator(std::uint32_t min, std::uint32_t max, std::uint32_t max_live,
                    std::uint32_t first)
      : min_(min), max_(max), max_live_(max_live), next_(first) {
    UROCE_ASSERT(min <= max && first >= min && first <= max);
    UROCE_ASSERT(max_live <= max - min + 1);
  }

  // nullopt when max_live numbers are in use.
  std::optional<std::uint32_t> allocate() {
    if (live_ >= max_live_) return std::nullopt;
    for (std::uint64_t tries = 0; tries <= std::uint64_t{max_} - min_; ++tries) {
      const std::uint32_t id = next_;
      next_ = next_ == max_ ? min_ : next_ + 1;
      if (!in_use(id)) {
        mark(id, true);
        ++live_;
        return id;
      }
    }
    return std::nullopt;  // unreachable while live_ < max_live_ <= range
  }

  // Takes `id` itself: false when it is out of range or in use, or max_live numbers are.
  bool take(std::uint32_t id) {
    if (live_ >= max_live_ || id < min_ || id > max_ || in_use(id)) return false;
    mark(id, true);
    ++live_;
    return true;
  }

  std::uint32_t min() const { return min_; }
  std::uint32_t max() const { return max_; }

  void release(std::uint32_t id) {
    UROCE_ASSERT(in_use(id));
    mark(id, false);
    --live_;
  }

  bool in_use(std::uint32_t id) const {
    if (id < min_ || id > max_) return false;
    const std::size_t i = id - min_;
    return i < used_.size() && used_[i];
  }
  std::uint32_t live() const { return live_; }

 private:
  void mark(std::uint32_t id, bool v) {
    const std::size_t i = id - min_;
    if (i >= used_.size()) used_.resize(i + 1, false);
    used_[i] = v;
  }

  std::uint32_t min_;
  std::uint32_t max_;
  std::uint32_t max_live_;
  std::uint32_t next_;
  std::uint32_t live_ = 0;
  std::vector<bool> used_;  // grows up to the highest number handed out
};

}  // namespace uroce::verbs

#include "transport/recv_queue.h"

#include <algorithm>

#include "base/assert.h"

namespace uroce::transport {

RecvQueue::RecvQueue(std::uint32_t max_wr, std::uint32_t max_sge)
    : max_sge_(max_sge),
      wr_id_(max_wr),
      num_sge_(max_wr),
      sge_pool_(static_cast<std::size_t>(max_wr) * max_sge) {}

Errc RecvQueue::post(std::uint64_t wr_id, std::span<const Sge> sges) {
  if (sges.size() > max_sge_) return Errc::kInvalidArgument;
  if (count_ == capacity()) return Errc::kNoMemory;
  const std::uint32_t slot = (head_ + count_) % capacity();
  wr_id_[slot] = wr_id;
  num_sge_[slot] = static_cast<std::uint32_t>(sges.size());
  std::copy(sges.begin(), sges.end(), sge_pool_.begin() + std::ptrdiff_t{slot} * max_sge_);
  ++count_;
  return Errc::kOk;
}

RecvWqe RecvQueue::at(std::uint32_t i) const {
  UROCE_CHECK(i < count_);
  const std::uint32_t slot = (head_ + i) % capacity();
  return RecvWqe{wr_id_[slot], std::span<const Sge>(sge_pool_).subspan(std::size_t{slot} * max_sge_,
                                                                       num_sge_[slot])};
}

bool RecvQueue::pop() {
  UROCE_CHECK(count_ > 0);
  head_ = (head_ + 1) % capacity();
  --count_;
  if (limit_ != 0 && count_ < limit_) {
    limit_ = 0;
    return true;
  }
  return false;
}

}  // namespace uroce::transport

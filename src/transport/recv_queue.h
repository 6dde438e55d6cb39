// A receive queue: a QP's own RQ or a shared receive queue (SRQ). Bounded ring of receive WQEs
// whose scatter lists live in one preallocated pool; posting never allocates.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "uroce/types.h"

namespace uroce::transport {

struct RecvWqe {
  std::uint64_t wr_id = 0;
  std::span<const Sge> sges;
};

class RecvQueue {
 public:
  // `max_wr` and `max_sge` are the created capacities (verbs checked them against the device).
  RecvQueue(std::uint32_t max_wr, std::uint32_t max_sge);

  // Errc::kNoMemory when full (libibverbs returns ENOMEM), kInvalidArgument for too many SGEs.
  Errc post(std::uint64_t wr_id, std::span<const Sge> sges);
  bool empty() const { return count_ == 0; }
  std::uint32_t size() const { return count_; }
  std::uint32_t capacity() const { return static_cast<std::uint32_t>(wr_id_.size()); }
  std::uint32_t max_sge() const { return max_sge_; }

  // The oldest WQE; valid until pop(). Requires !empty().
  RecvWqe front() const { return at(0); }
  // The WQE `i` places after the oldest (the one the i+1-th pop() removes). Requires i < size().
  RecvWqe at(std::uint32_t i) const;
  // Removes the oldest WQE. Returns true when this crossed an armed SRQ limit (the limit is then
  // disarmed, as ibv_modify_srq's IBV_SRQ_LIMIT is one-shot).
  bool pop();

  // SRQ limit (srq_limit): 0 disarms.
  void arm_limit(std::uint32_t limit) { limit_ = limit; }
  std::uint32_t limit() const { return limit_; }

 private:
  std::uint32_t max_sge_;
  std::vector<std::uint64_t> wr_id_;
  std::vector<std::uint32_t> num_sge_;
  std::vector<Sge> sge_pool_;  // capacity * max_sge
  std::uint32_t head_ = 0;     // oldest
  std::uint32_t count_ = 0;
  std::uint32_t limit_ = 0;
};

}  // namespace uroce::transport

// How a simulation names its first failure: the seed and the simulated time, so that the line
// alone replays it.
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>

#include "base/time.h"

namespace uroce::sim {

// "seed S at t=T ns: what", T counted from the run's start.
inline std::string failure_text(std::uint64_t seed, Duration since_start, const std::string& what) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "seed %" PRIu64 " at t=%" PRId64 " ns: ", seed,
                since_start.count_ns());
  return buf + what;
}

}  // namespace uroce::sim

#include "transport/sgl.h"

#include <algorithm>
#include <cstring>

namespace uroce::transport {

ScatterResult scatter(MemoryResolver& memory, std::uint32_t pd, std::span<const Sge> sges,
                      std::uint64_t offset, ConstBytes data) {
  std::uint64_t total = 0;
  for (const Sge& s : sges) total += s.length;
  if (offset > total || data.size() > total - offset) return ScatterResult::kTooLong;
  std::uint64_t skip = offset;
  std::size_t done = 0;
  for (const Sge& s : sges) {
    if (done == data.size()) break;
    if (skip >= s.length) {
      skip -= s.length;
      continue;
    }
    const std::size_t n = std::min<std::uint64_t>(s.length - skip, data.size() - done);
    auto mem = memory.resolve(pd, s.lkey, false, s.addr + skip, n, kAccessLocalWrite);
    if (!mem.ok()) return ScatterResult::kAccessError;
    std::memcpy(mem.value().data(), data.data() + done, n);
    done += n;
    skip = 0;
  }
  return ScatterResult::kOk;
}

}  // namespace uroce::transport

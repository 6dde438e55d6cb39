#include "transport/sgl.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "transport/qp.h"

namespace uroce::transport {

ScatterResult scatter_targets(MemoryResolver& memory, std::uint32_t pd, std::span<const Sge> sges,
                              std::uint64_t offset, std::uint64_t length, std::span<MutBytes> out,
                              std::size_t& pieces) {
  UROCE_CHECK(out.size() >= sges.size());
  pieces = 0;
  std::uint64_t total = 0;
  for (const Sge& s : sges) total += s.length;
  if (offset > total || length > total - offset) return ScatterResult::kTooLong;
  std::uint64_t skip = offset;
  std::uint64_t done = 0;
  for (const Sge& s : sges) {
    if (done == length) break;
    if (skip >= s.length) {
      skip -= s.length;
      continue;
    }
    const std::uint64_t n = std::min<std::uint64_t>(s.length - skip, length - done);
    auto mem = memory.resolve(pd, 0, s.lkey, false, s.addr + skip, n, kAccessLocalWrite);
    if (!mem.ok()) return ScatterResult::kAccessError;
    UROCE_ASSERT(mem.value().size() == n);
    out[pieces++] = mem.value();
    done += n;
    skip = 0;
  }
  UROCE_ASSERT(done == length);  // the SGEs held it (checked against their total above)
  return ScatterResult::kOk;
}

ScatterResult scatter(MemoryResolver& memory, std::uint32_t pd, std::span<const Sge> sges,
                      std::uint64_t offset, ConstBytes data) {
  std::array<MutBytes, kMaxSge> pieces;
  std::size_t n = 0;
  const ScatterResult r = scatter_targets(memory, pd, sges, offset, data.size(), pieces, n);
  if (r != ScatterResult::kOk) return r;
  std::size_t done = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::memcpy(pieces[i].data(), data.data() + done, pieces[i].size());
    done += pieces[i].size();
  }
  UROCE_ASSERT(done == data.size());
  return ScatterResult::kOk;
}

}  // namespace uroce::transport

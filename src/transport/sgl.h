// Scatter lists: placing bytes at an offset of a list of SGEs, through the MemoryResolver (so
// every piece is checked against its lkey, PD, access rights and bounds at the time of the
// write).
#pragma once

#include <cstdint>
#include <span>

#include "base/bytes.h"
#include "transport/interfaces.h"
#include "uroce/types.h"

namespace uroce::transport {

enum class ScatterResult : std::uint8_t {
  kOk,
  kTooLong,      // offset + data runs past the end of the list: nothing was written
  kAccessError,  // an SGE's lkey did not resolve (pieces before it may have been written)
};

// Where scatter() would write `length` bytes at byte `offset` of `sges`: each piece resolved with
// local write access, in order, into `out` (at least sges.size() long); `pieces` says how many.
// kOk only when every piece resolved (then their sizes add up to `length`).
ScatterResult scatter_targets(MemoryResolver& memory, std::uint32_t pd, std::span<const Sge> sges,
                              std::uint64_t offset, std::uint64_t length, std::span<MutBytes> out,
                              std::size_t& pieces);

// Writes `data` at byte `offset` of the concatenation of `sges`, with local write access: the
// pieces scatter_targets() gives, after all of them resolved (nothing is written otherwise).
ScatterResult scatter(MemoryResolver& memory, std::uint32_t pd, std::span<const Sge> sges,
                      std::uint64_t offset, ConstBytes data);

}  // namespace uroce::transport

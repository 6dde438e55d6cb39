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

// Writes `data` at byte `offset` of the concatenation of `sges`, with local write access.
ScatterResult scatter(MemoryResolver& memory, std::uint32_t pd, std::span<const Sge> sges,
                      std::uint64_t offset, ConstBytes data);

}  // namespace uroce::transport

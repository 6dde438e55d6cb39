// Unpredictable bits from the kernel's CSPRNG (getrandom(2)), for what an off-path attacker must
// not guess: MR keys, initial PSNs, QPN blocks (issue 44). Only the edges call these (devices,
// the coordinator, tools, the drop-ins): the protocol core takes randomness as an input
// (DeviceConfig::random_bytes, seeds), so that one seed replays a simulation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace uroce {

// Fills `out`. getrandom blocks only until the kernel's pool is initialized at boot; interrupted
// calls are resumed. A kernel without getrandom (before 3.17) aborts: nothing weaker is
// substituted.
void kernel_random_bytes(std::span<std::byte> out);
std::uint64_t kernel_random_u64();

}  // namespace uroce

// What a simulated host's socket does for its engine, the same in every harness that runs hosts
// over a Network (sim/progress_sim.cc, sim/scenario_host.cc): frames out with the network's MAC
// addresses, frames in as datapath/udp hands packets to its handler.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <span>
#include <vector>

#include "base/bytes.h"
#include "base/time.h"
#include "datapath/datapath.h"
#include "sim/network.h"
#include "wire/builder.h"

namespace uroce::sim {

// Builds the Ethernet frame of an engine's packet in `frame` (source and destination MACs the
// network's) and sends it from `from` at `now`.
void send_frame(Network& net, HostId from, Instant now, const wire::OuterHeaders& o,
                ConstBytes transport_headers, std::span<const ConstBytes> payload,
                std::vector<std::byte>& frame);

// Hands up to `max` frames of `inbox` (oldest first) to `handler`, as datapath/udp with deferred
// checks does (issue 14): a message continuation's ICRC is left to the handler (RxMeta::pending),
// anything else's is checked first. A frame that does not parse or whose ICRC fails is not
// handed on: `invalid` is called instead (these networks corrupt nothing, so the caller fails
// its run). Returns how many frames were taken.
std::size_t receive_frames(std::deque<std::vector<std::byte>>& inbox, std::size_t max,
                           const datapath::Datapath::RxHandler& handler,
                           const std::function<void()>& invalid);

}  // namespace uroce::sim

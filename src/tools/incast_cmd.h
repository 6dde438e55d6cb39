// `uroce sim incast`: N senders into one receiver through a switch port with ECN marking, in the
// simulator (sim/incast.h), with the congestion control chosen (--cc; by default a device's,
// dcqcn-aimd). Prints the port's utilisation, the flows' goodput share and Jain's index, the drops
// before and after convergence, the p99 queue against Kmax and the CNPs; with --trace-us, the
// queue and every sender's rate over time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "sim/incast.h"

namespace CLI {
class App;
}

namespace uroce::tools {

struct IncastCommand {
  sim::IncastOptions incast;
  // congestion_control_from_name; a device's default (DeviceConfig::congestion_control).
  std::string cc_name = congestion_control_name(sim::IncastOptions{}.cc);
  bool no_cc = false;  // --cc none
  std::int64_t trace_us = 0;
  std::uint32_t trace_flows = 4;  // senders shown in the trace
};

void add_incast_options(CLI::App& sub, IncastCommand& c);

// 0 when the run's oracles held, 1 otherwise.
int incast_run(IncastCommand c, std::FILE* out);

}  // namespace uroce::tools

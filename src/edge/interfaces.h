#pragma once
// The edge (issue 42): the host's interface list, read with getifaddrs(3), for the default
// device list (engine::interface_devices, device/device_config.h, which decides from it).

#include <vector>

#include "device/device_config.h"

namespace uroce::edge {

// Every entry of getifaddrs(3) that has an IPv4 or IPv6 address, and one address-less entry
// per interface (its AF_PACKET entry), with the interface's flags; empty if getifaddrs fails.
std::vector<engine::InterfaceAddress> host_interfaces();

}  // namespace uroce::edge

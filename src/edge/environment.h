#pragma once
// The edge (issue 40): the one place that reads the environment into the options of a device.
// Only src/tools and src/compat include it (scripts/check-rooms); nothing below them reads the
// environment (scripts/check-edge). Each reader takes the environment as a NAME=VALUE array
// (environ's shape), so that tests can hand it one.

#include <string>

#include "base/result.h"
#include "device/device_options.h"

namespace uroce::edge {

// The process's environment (environ).
const char* const* process_environment();

// Where the device list comes from (UROCE_DEVICES, UROCE_CONFIG; device/device_config.h), with
// the host's interfaces (host_interfaces(), edge/interfaces.h) unless UROCE_DEVICES names the
// devices.
engine::DeviceSource device_source(const char* const* env = process_environment());

// What a shared device's coordinator started from this process is told, from `env`
// (proto/devd_options.h), or why a variable's value is invalid.
Result<engine::devd::DevdOptions, std::string> devd_options(
    const char* const* env = process_environment());

// DeviceOptions from `env` (see device/device_options.h for each variable), or why a variable's
// value is invalid (UROCE_UDP_GSO=yes, UROCE_CC=cubic, ...).
Result<engine::DeviceOptions, std::string> device_options(
    const char* const* env = process_environment());

}  // namespace uroce::edge

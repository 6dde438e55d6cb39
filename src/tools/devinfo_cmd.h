// `uroce devices` and `uroce devinfo`: the configured devices and their attributes, in the
// formats of rdma-core's ibv_devices and ibv_devinfo, so that output from uroce and from a
// kernel rxe device reads the same.
//
// devinfo creates the verbs Device without its UDP socket (Device::create with the
// interface's MTU), so it works while another process serves the address on port 4791.
#pragma once

#include <cstdio>
#include <string>

namespace uroce::tools {

struct DevinfoOptions {
  std::string ib_dev;    // -d: only this device (empty: all configured devices)
  std::string address;   // -a: the device at this address (as `uroce ping -a`)
  int ib_port = 0;       // -i: only this port (0: all)
  bool list = false;     // -l: only the names
  bool verbose = false;  // -v: every attribute and the limits
};

// ibv_devices: "    device          \t   node GUID" and one line per configured device.
int devices_run(std::FILE* out, std::FILE* err);
// ibv_devinfo. Returns 0, or 1 with a message on `err` (unknown device, address not local).
int devinfo_run(const DevinfoOptions& opt, std::FILE* out, std::FILE* err);

}  // namespace uroce::tools

// `uroce faults -d DEV [-p PID] show | set SPEC | clear`: a running device's fault spec
// (fault/fault.h), read or changed live through its stats endpoint (device/udp_device.h), so that
// a test can open a partition mid-run and heal it. Every process that has DEV open is asked
// (or only PID's); each answers with the spec it now applies:
//
//   uroce0 pid 4242: loss=1%,seed=7
//
// A malformed spec is refused here, before any device sees it, with the message that names the
// bad item.
#pragma once

#include <cstdio>
#include <string>

#include "base/time.h"

namespace uroce::tools {

inline constexpr int kFaultsExitOk = 0;
inline constexpr int kFaultsExitNoDevice = 1;  // no running device of that name (and pid)
inline constexpr int kFaultsExitFailed = 2;    // a device did not answer, or refused
inline constexpr int kFaultsExitUsage = 3;     // a malformed spec or action

struct FaultsCommand {
  std::string device;  // required
  int pid = 0;         // 0: every process
  std::string action;  // show, set, clear
  std::string spec;    // for set
  Duration timeout = Duration::s(2);
  std::string proc_net_unix = "/proc/net/unix";
};

int faults_run(const FaultsCommand& cmd, std::FILE* out, std::FILE* err);

}  // namespace uroce::tools

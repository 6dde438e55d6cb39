#pragma once
// What the context that starts a shared device's coordinator (device/shared_port.cc) tells it,
// and how: uroce-devd takes all of it on its command line, none from the environment it
// inherits. The edge (src/edge) fills it from the starting process's environment.
//
//   uroce-devd --ip ADDRESS --port PORT [--linger-ms N] [--any-user] [--capture FILE]
//              [--faults SPEC] [--cm-listen-grace-ms N]

#include <cstdint>
#include <optional>
#include <string>

namespace uroce::engine::devd {

struct DevdOptions {
  // The coordinator program (UROCE_DEVD); empty: the uroce-devd built with the library.
  std::string path;
  // How long the coordinator stays after the last context left (UROCE_DEVD_LINGER_MS).
  long long linger_ms = 2000;
  // Every user's processes may join (UROCE_SHARE=all); by default only the starting user's.
  bool any_user = false;
  // The coordinator's standard error, appended to (UROCE_DEVD_LOG); empty: /dev/null.
  std::string log_path;
  // A pcap file of what the coordinator's own socket sends and receives (UROCE_DEVD_PCAP).
  std::string capture_path;
  // The fault spec of the coordinator's socket (UROCE_FAULTS); empty: none.
  std::string faults;
  // How long a connection request for a port nobody listens on waits for a listen
  // (UROCE_CM_LISTEN_GRACE_MS, 0 to kMaxCmListenGraceMs); unset: the coordinator's default.
  std::optional<long long> cm_listen_grace_ms;
  static constexpr long long kMaxCmListenGraceMs = 3'600'000;
};

}  // namespace uroce::engine::devd

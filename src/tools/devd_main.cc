// uroce-devd: the coordinator of one shared device (devd/coordinator.h). Started by the
// library (device/shared_port.cc) with the coordinator's listening socket as fd 3 and the
// group's first UDP socket as fd 4; not meant to be run by hand.
//
//   uroce-devd --ip ADDRESS --port PORT [--linger-ms N] [--any-user]
//
// UROCE_DEVD_PCAP=FILE (inherited from the process that started it): capture what the
// coordinator's own socket sends and receives (QP 1's CM MADs) to FILE.
#include <arpa/inet.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "devd/coordinator.h"

int main(int argc, char** argv) {
  uroce::engine::CoordinatorOptions o;
  bool have_ip = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--ip" && v != nullptr) {
      if (::inet_pton(AF_INET, v, o.ip.bytes.data()) == 1) {
        o.ip.v6 = false;
      } else if (::inet_pton(AF_INET6, v, o.ip.bytes.data()) == 1) {
        o.ip.v6 = true;
      } else {
        std::fprintf(stderr, "uroce-devd: '%s' is not an IP address\n", v);
        return 2;
      }
      have_ip = true;
      ++i;
    } else if (a == "--port" && v != nullptr) {
      o.port = static_cast<std::uint16_t>(std::strtoul(v, nullptr, 10));
      ++i;
    } else if (a == "--linger-ms" && v != nullptr) {
      o.linger_ms = std::strtoll(v, nullptr, 10);
      ++i;
    } else if (a == "--any-user") {
      o.any_user = true;
    } else {
      std::fprintf(stderr, "uroce-devd: unknown argument '%s' (started by the uroce library)\n",
                   a.c_str());
      return 2;
    }
  }
  if (const char* p = std::getenv("UROCE_DEVD_PCAP"); p != nullptr) o.capture_path = p;
  if (const char* f = std::getenv("UROCE_FAULTS"); f != nullptr) o.faults = f;
  if (const char* g = std::getenv("UROCE_CM_LISTEN_GRACE_MS"); g != nullptr && *g != '\0') {
    char* end = nullptr;
    const long long ms = std::strtoll(g, &end, 10);
    if (*end != '\0' || ms < 0 || ms > 3'600'000) {
      std::fprintf(stderr, "uroce-devd: UROCE_CM_LISTEN_GRACE_MS='%s' is not 0..3600000\n", g);
      return 2;
    }
    o.cm_listen_grace_ms = ms;
  }
  if (!have_ip || o.port == 0) {
    std::fprintf(stderr, "uroce-devd: --ip and --port are required\n");
    return 2;
  }
  // Detach: the starter waits for this process, which exits as soon as the coordinator runs
  // in its own child (reparented to init or the nearest subreaper).
  const pid_t pid = ::fork();
  if (pid < 0) return 1;
  if (pid > 0) ::_exit(0);
  // The coordinator serves every context of the device, not the one that happened to start
  // it: it must not keep that process's CPU affinity (an MPI rank bound to its core, a
  // benchmark pinned with taskset), or the device's connection setup and steering would wait
  // for a turn on a core an application busy-polls. Every CPU; the kernel keeps those the
  // cgroup's cpuset allows, and on failure the coordinator runs where it was started.
  cpu_set_t every;
  CPU_ZERO(&every);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) CPU_SET(cpu, &every);
  (void)::sched_setaffinity(0, sizeof every, &every);
  if (::chdir("/") != 0) {
    // Harmless: it only keeps the starter's working directory busy.
  }
  return uroce::engine::run_coordinator(3, 4, o);
}

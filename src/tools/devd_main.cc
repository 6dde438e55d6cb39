// uroce-devd: the coordinator of one shared device (devd/coordinator.h). Started by the
// library (device/shared_port.cc) with the coordinator's listening socket as fd 3 and the
// group's first UDP socket as fd 4; not meant to be run by hand.
//
//   uroce-devd --ip ADDRESS --port PORT [--linger-ms N] [--any-user] [--capture FILE]
//              [--faults SPEC] [--cm-listen-grace-ms N]
//
// Everything comes on the command line from the context that starts it (proto/devd_options.h),
// none from the environment it inherits. --capture FILE (UROCE_DEVD_PCAP of the starting
// process): capture what the coordinator's own socket sends and receives (QP 1's CM MADs) to
// FILE; --faults SPEC (its UROCE_FAULTS): faults on that socket; --cm-listen-grace-ms N (its
// UROCE_CM_LISTEN_GRACE_MS): how long a request for a port nobody listens on waits.
#include <arpa/inet.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "devd/coordinator.h"
#include "proto/devd_options.h"

// Long: uroce-devd's command-line parser, one option per branch.
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
    } else if (a == "--capture" && v != nullptr) {
      o.capture_path = v;
      ++i;
    } else if (a == "--faults" && v != nullptr) {
      o.faults = v;
      ++i;
    } else if (a == "--cm-listen-grace-ms" && v != nullptr) {
      char* end = nullptr;
      const long long ms = std::strtoll(v, &end, 10);
      if (*v == '\0' || *end != '\0' || ms < 0 ||
          ms > uroce::engine::devd::DevdOptions::kMaxCmListenGraceMs) {
        std::fprintf(stderr, "uroce-devd: --cm-listen-grace-ms '%s' is not 0..%lld\n", v,
                     uroce::engine::devd::DevdOptions::kMaxCmListenGraceMs);
        return 2;
      }
      o.cm_listen_grace_ms = ms;
      ++i;
    } else {
      std::fprintf(stderr, "uroce-devd: unknown argument '%s' (started by the uroce library)\n",
                   a.c_str());
      return 2;
    }
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
  // Three files per context (its connection, its socket, a pidfd): the soft RLIMIT_NOFILE it
  // inherits (often 1024) would stop it near 340 contexts, so it takes the hard limit. At the
  // limit it refuses the next context with EMFILE and says why (coordinator.cc).
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &files);
  }
  if (::chdir("/") != 0) {
    // Harmless: it only keeps the starter's working directory busy.
  }
  return uroce::engine::run_coordinator(3, 4, o);
}

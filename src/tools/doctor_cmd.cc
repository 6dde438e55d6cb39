#include "tools/doctor_cmd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "datapath/udp.h"
#include "device/device_config.h"
#include "edge/environment.h"
#include "proto/devd_protocol.h"
#include "tools/run_cmd.h"

namespace uroce::tools {

void add_doctor_options(CLI::App& doctor, DoctorOptions& o) {
  // For the tests: other places to read the host's settings from.
  doctor.add_option("--sysctl-dir", o.sysctl_dir)
      ->group("")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  doctor.add_option("--ib-dir", o.ib_dir)
      ->group("")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  doctor.add_option("--proc-net-unix", o.proc_net_unix)
      ->group("")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

std::optional<std::string> rmem_problem(std::uint64_t rmem_max, bool privileged) {
  const std::uint64_t want = datapath::UdpOptions{}.rcvbuf_bytes;
  if (rmem_max >= want || privileged) return std::nullopt;
  return "net.core.rmem_max is " + std::to_string(rmem_max) + ", below the " +
         std::to_string(want) +
         " bytes a device's socket asks for: bursts beyond it are dropped by the kernel and "
         "retransmitted; fix: sysctl -w net.core.rmem_max=" +
         std::to_string(want);
}

namespace {

struct Report {
  std::FILE* out;
  int problems = 0;
  void ok(const std::string& s) { std::fprintf(out, "ok: %s\n", s.c_str()); }
  void problem(const std::string& s) {
    std::fprintf(out, "problem: %s\n", s.c_str());
    ++problems;
  }
  void note(const std::string& s) { std::fprintf(out, "note: %s\n", s.c_str()); }
};

std::string exe_dir() {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string d(exe, n > 0 ? static_cast<std::size_t>(n) : 0);
  const std::size_t slash = d.rfind('/');
  return slash == std::string::npos ? "." : d.substr(0, slash);
}

void check_programs(Report& r) {
  const std::string dir = exe_dir();
  if (auto d = dropin_dir(dir)) {
    r.ok("the drop-ins are in " + *d + " (uroce run puts them first on LD_LIBRARY_PATH)");
  } else {
    r.problem("no drop-in libibverbs.so.1 in " + dir + "/" + UROCE_DROPIN_FROM_BINDIR + " or " +
              dir + "/" + UROCE_DROPIN_FROM_BUILD_BIN +
              ": uroce run cannot work; fix: reinstall uroce (or build uroce_ibverbs)");
  }
  const char* env = std::getenv("UROCE_DEVD");
  std::string devd = env != nullptr && *env != '\0' ? env : dir + "/uroce-devd";
  if (env == nullptr && ::access(devd.c_str(), X_OK) != 0) devd = UROCE_DOCTOR_BUILD_DEVD;
  if (::access(devd.c_str(), X_OK) == 0) {
    r.ok("the coordinator is " + devd);
  } else {
    r.problem(std::string("no executable coordinator ") + devd +
              (env != nullptr ? " (UROCE_DEVD)" : "") +
              ": a shared device cannot start; fix: reinstall uroce, or set UROCE_DEVD");
  }
}

bool coordinator_listens(const std::string& proc_net_unix, const std::string& name) {
  std::ifstream f(proc_net_unix);
  std::string line;
  while (std::getline(f, line)) {
    const std::size_t at = line.rfind(" @");
    if (at != std::string::npos && line.compare(at + 2, std::string::npos, name) == 0) return true;
  }
  return false;
}

// Binds UDP PORT on the device's address alone: errno, 0 when it was free.
int try_bind(const wire::IpAddress& ip, std::uint16_t port) {
  const std::string text = engine::ip_to_string(ip);
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = AF_INET;
  if (text.find(':') != std::string::npos) {
    family = AF_INET6;
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    ::inet_pton(AF_INET6, text.c_str(), &a->sin6_addr);
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    ::inet_pton(AF_INET, text.c_str(), &a->sin_addr);
    len = sizeof *a;
  }
  const int fd = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0 ? 0 : errno;
  ::close(fd);
  return rc;
}

void check_devices(Report& r, const DoctorOptions& o) {
  auto devices = engine::configured_devices(edge::device_source());
  if (!devices.ok()) {
    r.problem("the device configuration: " + devices.error() +
              "; fix: UROCE_DEVICES or the config file (docs/CONFIGURATION.md)");
    return;
  }
  std::size_t index = 0;
  for (const engine::DeviceSpec& d : devices.value()) {
    const std::string where = d.name + " on " + engine::ip_to_string(d.ip);
    const int e = try_bind(d.ip, wire::kRoceV2Port);
    if (e == 0) {
      r.ok(where + ": UDP port 4791 is free (bound when a program opens the device)");
    } else if (e == EADDRNOTAVAIL) {
      r.problem(where +
                ": not an address of this host; fix: add it to an interface, or "
                "configure this host's address (UROCE_DEVICES, /etc/uroce/devices.conf)");
    } else if (e == EADDRINUSE &&
               coordinator_listens(o.proc_net_unix, engine::devd::socket_name(d.ip, 4791))) {
      r.ok(where + ": UDP port 4791 is held by the device's coordinator (uroce-devd): in use");
    } else if (e == EADDRINUSE) {
      r.problem(where +
                ": UDP port 4791 is taken by a program other than uroce (the kernel's "
                "rdma_rxe takes it on every address); fix: `rdma link delete` its "
                "devices or `modprobe -r rdma_rxe`, or stop that program (ss -ulpn)");
    } else {
      r.problem(where + ": cannot bind UDP port 4791: " + std::strerror(e));
    }
    struct stat st {};
    const std::string node = o.ib_dir + "/uverbs" + std::to_string(index++);
    if (::stat(node.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) {
      r.note(where + ": UCX will not use it (no character device " + node +
             "); fix, for UCX only: sudo uroce setup");
    }
  }
}

std::uint64_t read_number(const std::string& path) {
  std::ifstream f(path);
  std::uint64_t v = 0;
  f >> v;
  return v;
}

// CAP_NET_ADMIN (bit 12) in this process's effective capabilities (/proc/self/status).
bool net_admin() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      return (std::strtoull(line.c_str() + 7, nullptr, 16) >> 12 & 1) != 0;
    }
  }
  return false;
}

}  // namespace

int doctor_run(const DoctorOptions& o, std::FILE* out) {
  Report r{out};
  check_programs(r);
  check_devices(r, o);
  const std::uint64_t rmem = read_number(o.sysctl_dir + "/rmem_max");
  const bool privileged = net_admin();
  if (auto why = rmem_problem(rmem, privileged)) {
    r.problem(*why);
  } else {
    r.ok("net.core.rmem_max is " + std::to_string(rmem) +
         (privileged ? " (this process has CAP_NET_ADMIN: its devices force their buffer size)"
                     : ""));
  }
  std::fprintf(out, "%s\n",
               r.problems == 0 ? "all well" : (std::to_string(r.problems) + " problem(s)").c_str());
  return r.problems == 0 ? 0 : 1;
}

}  // namespace uroce::tools

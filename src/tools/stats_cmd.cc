#include "tools/stats_cmd.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <fstream>

#include "device/device_config.h"
#include "device/shared_port.h"

namespace uroce::tools {

namespace {

constexpr std::string_view kPrefix = "@uroce/";

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// "uroce/<pid>/<device>" or "uroce/<pid>/<device>~<n>" (a second device of that name in the
// same process).
bool parse_endpoint(std::string_view path, StatsEndpoint& out) {
  if (!path.starts_with(kPrefix)) return false;
  const std::string_view rest = path.substr(kPrefix.size());
  const std::size_t slash = rest.find('/');
  if (slash == std::string_view::npos || slash == 0) return false;
  int pid = 0;
  for (char c : rest.substr(0, slash)) {
    if (c < '0' || c > '9' || pid > 100'000'000) return false;
    pid = pid * 10 + (c - '0');
  }
  std::string_view device = rest.substr(slash + 1);
  if (const std::size_t tilde = device.rfind('~'); tilde != std::string_view::npos) {
    device = device.substr(0, tilde);
  }
  if (device.empty()) return false;
  out.socket_name = std::string(path.substr(1));
  out.pid = pid;
  out.device = std::string(device);
  return true;
}

// The socket paths listed in `proc_net_unix`: the last column ("Num RefCount Protocol Flags
// Type St Inode Path"); the names uroce binds hold no spaces.
std::vector<std::string> unix_socket_paths(const std::string& proc_net_unix) {
  std::vector<std::string> paths;
  std::ifstream in(proc_net_unix);
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t sp = line.find_last_of(' ');
    paths.push_back(sp == std::string::npos ? line : line.substr(sp + 1));
  }
  return paths;
}

}  // namespace

std::vector<StatsEndpoint> find_stats_endpoints(const std::string& proc_net_unix) {
  std::vector<StatsEndpoint> found;
  for (const std::string& path : unix_socket_paths(proc_net_unix)) {
    StatsEndpoint e;
    if (parse_endpoint(path, e)) found.push_back(std::move(e));
  }
  std::sort(found.begin(), found.end(), [](const StatsEndpoint& a, const StatsEndpoint& b) {
    return a.pid != b.pid ? a.pid < b.pid : a.socket_name < b.socket_name;
  });
  found.erase(std::unique(found.begin(), found.end(),
                          [](const StatsEndpoint& a, const StatsEndpoint& b) {
                            return a.socket_name == b.socket_name;
                          }),
              found.end());
  return found;
}

Result<std::string, std::string> query_stats_endpoint(const std::string& socket_name,
                                                      const std::string& request,
                                                      Duration timeout) {
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Err{std::string("socket: ") + std::strerror(errno)};
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  // Autobind: the kernel gives this socket an abstract address the device can answer to.
  sockaddr_un self{};
  self.sun_family = AF_UNIX;
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&self), sizeof(sa_family_t)) != 0) {
    return Err{std::string("bind: ") + std::strerror(errno)};
  }
  sockaddr_un to{};
  to.sun_family = AF_UNIX;
  if (socket_name.size() + 1 > sizeof to.sun_path) return Err{std::string("name too long")};
  std::memcpy(to.sun_path + 1, socket_name.data(), socket_name.size());
  const auto to_len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + socket_name.size());
  if (::sendto(fd, request.data(), request.size(), 0, reinterpret_cast<const sockaddr*>(&to),
               to_len) < 0) {
    return Err{std::string("cannot reach the device: ") + std::strerror(errno)};
  }
  const std::int64_t give_up = now_ns() + timeout.count_ns();
  std::string answer;
  std::vector<char> buf(256 * 1024);
  for (;;) {
    const std::int64_t left = give_up - now_ns();
    if (left <= 0) {
      return Err{answer.empty() ? std::string("no answer (is its application progressing?)")
                                : std::string("incomplete answer")};
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>((left + 999'999) / 1'000'000)) <= 0) continue;
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n <= 0) continue;
    answer.append(buf.data() + 1, static_cast<std::size_t>(n) - 1);
    if (buf[0] == '.') return answer;
    if (buf[0] != '+') return Err{std::string("malformed answer")};
  }
}

int stats_run(const StatsCommand& cmd, std::FILE* out, std::FILE* err) {
  std::vector<StatsEndpoint> eps = find_stats_endpoints(cmd.proc_net_unix);
  if (!cmd.device.empty()) {
    std::erase_if(eps, [&](const StatsEndpoint& e) { return e.device != cmd.device; });
  }
  if (eps.empty()) {
    // A coordinator that lingers after its last program (2 s, and while its CM retransmits) has
    // no device endpoint, but its CM's counters are still there to read, and its last MADs
    // often come after the last program exited (a DREQ answered or ended then).
    if (cmd.device.empty() && !cmd.json && print_shared_devices(cmd, out) > 0) {
      return kStatsExitOk;
    }
    if (cmd.device.empty()) {
      std::fprintf(err, "uroce stats: no running uroce device (no process has one open)\n");
    } else {
      std::fprintf(err, "uroce stats: no running uroce device named %s\n", cmd.device.c_str());
    }
    return kStatsExitNoDevice;
  }
  const std::string request = std::string(cmd.json ? "json" : "text") + (cmd.qp ? " qp" : "");
  int status = kStatsExitOk;
  bool first = true;
  if (cmd.json) std::fputs("[", out);
  for (const StatsEndpoint& e : eps) {
    auto answer = query_stats_endpoint(e.socket_name, request, cmd.timeout);
    if (!answer.ok()) {
      std::fprintf(err, "uroce stats: %s (pid %d): %s\n", e.device.c_str(), e.pid,
                   answer.error().c_str());
      status = kStatsExitNoAnswer;
      continue;
    }
    if (answer.value().starts_with("error:")) {
      std::fprintf(err, "uroce stats: %s (pid %d): %s", e.device.c_str(), e.pid,
                   answer.value().c_str());
      status = kStatsExitNoAnswer;
      continue;
    }
    if (cmd.json && !first) std::fputs(",", out);
    first = false;
    std::fputs(answer.value().c_str(), out);
  }
  if (cmd.json) std::fputs("]\n", out);
  if (!cmd.json) print_shared_devices(cmd, out);
  return status;
}

std::vector<std::pair<std::string, std::uint16_t>> find_shared_devices(
    const std::string& proc_net_unix) {
  std::vector<std::pair<std::string, std::uint16_t>> found;
  constexpr std::string_view kDevd = "@uroce-devd/";
  for (const std::string& path : unix_socket_paths(proc_net_unix)) {
    if (!path.starts_with(kDevd)) continue;
    const std::string rest = path.substr(kDevd.size());
    const std::size_t slash = rest.rfind('/');
    if (slash == std::string::npos) continue;
    const unsigned long port = std::strtoul(rest.c_str() + slash + 1, nullptr, 10);
    if (port == 0 || port > 65535) continue;
    std::pair<std::string, std::uint16_t> dev{rest.substr(0, slash),
                                              static_cast<std::uint16_t>(port)};
    if (std::find(found.begin(), found.end(), dev) == found.end()) found.push_back(dev);
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::size_t print_shared_devices(const StatsCommand& cmd, std::FILE* out) {
  std::size_t answered = 0;
  for (const auto& [ip_text, port] : find_shared_devices(cmd.proc_net_unix)) {
    auto ip = engine::parse_ip(ip_text);
    if (!ip.ok()) continue;
    auto info = engine::SharedPort::query(ip.value(), port);
    if (!info.ok()) continue;  // exiting as we asked
    ++answered;
    std::size_t shown = 0;
    for (const engine::SharedMember& m : info->members) {
      if (!cmd.device.empty() && m.device != cmd.device) continue;
      std::fprintf(out, "member %s:%u pid %d comm %s device %s index %u qpn_blocks %u%s%s\n",
                   ip_text.c_str(), port, static_cast<int>(m.pid), m.comm.c_str(), m.device.c_str(),
                   m.index, m.blocks, m.qp1 ? " qp1" : "", m.exiting ? " exiting" : "");
      ++shown;
    }
    // rdma_cm's IDs (as `rdma resource show cm_id` lists them) and the CM's counters: the
    // coordinator's, whatever device name its contexts gave.
    for (const engine::SharedCmId& id : info->cm_ids) {
      const char* ps = id.port_space == 0x0106   ? "tcp"
                       : id.port_space == 0x0111 ? "udp"
                       : id.port_space == 0x013f ? "ib"
                                                 : "ipoib";
      std::fprintf(out, "cm_id %s:%u pid %d ps %s port %u state %s\n", ip_text.c_str(), port,
                   static_cast<int>(id.pid), ps, id.port, id.state.c_str());
    }
    if (cmd.device.empty() || shown != 0 || !info->cm_ids.empty()) {
      std::fprintf(out,
                   "shared %s:%u contexts %zu unsteered_pkts %llu qpn_blocks_used %u closed_qps "
                   "%u\n",
                   ip_text.c_str(), port, info->members.size(),
                   static_cast<unsigned long long>(info->unsteered), info->blocks_used,
                   info->closed_qps);
      if (!info->cm_counters.empty()) {
        std::fprintf(out, "cm %s:%u %s\n", ip_text.c_str(), port, info->cm_counters.c_str());
      }
    }
  }
  return answered;
}

}  // namespace uroce::tools

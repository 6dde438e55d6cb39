#include "tools/doctor_cmd.h"

#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "datapath/udp.h"
#include "device/device_config.h"
#include "edge/environment.h"
#include "proto/devd_protocol.h"
#include "tools/doctor_probe.h"
#include "tools/run_cmd.h"
#include "verbs/address.h"
#include "wire/cm_mad.h"
#include "wire/icrc.h"

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
  doctor.add_option("peer", o.peer,
                    "A RoCEv2 peer's address (a uroce device or rxe): measure a round trip to it "
                    "on UDP port 4791, and the path MTU");
}

std::optional<std::string> roce_mtu_problem(std::uint32_t netdev_mtu, const std::string& ifname) {
  const auto mtu = verbs::port_mtu_for_netdev(netdev_mtu);
  if (mtu && mtu_bytes(*mtu) >= 1024) return std::nullopt;
  return "interface " + ifname + " has MTU " + std::to_string(netdev_mtu) + ", which gives " +
         (mtu ? "RoCE MTU " + std::to_string(mtu_bytes(*mtu)) : std::string("no RoCE MTU")) +
         " (the largest of 256..4096 within the MTU less 80 bytes of headers): programs that "
         "ask for path MTU 1024, as rdma_cm, perftest and ibv_rc_pingpong do by default, fail "
         "to connect; fix: ip link set " +
         ifname + " mtu 1500 (1104 at least)";
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
  sockaddr_storage ss{};
  socklen_t len = 0;
  datapath::to_sockaddr(ip, port, ss, len);
  const int fd = ::socket(ip.v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0 ? 0 : errno;
  ::close(fd);
  return rc;
}

std::string user_name(uid_t uid) {
  const passwd* pw = ::getpwuid(uid);
  return "uid " + std::to_string(uid) +
         (pw != nullptr ? std::string(" (") + pw->pw_name + ")" : "");
}

// Port 4791 on the device's address is held by a coordinator: whose.
void check_coordinator(Report& r, const std::string& where, const std::string& name,
                       const wire::IpAddress& ip) {
  const auto owner = coordinator_owner(name, engine::ip_to_string(ip));
  const std::string pid = owner && owner->pid != 0 ? std::to_string(owner->pid) : "";
  if (owner && owner->uid != ::getuid() && !owner->any_user) {
    r.problem(where + ": UDP port 4791 is held by the device's coordinator (uroce-devd" +
              (pid.empty() ? "" : ", pid " + pid) + ") of " + user_name(owner->uid) +
              ", another user: it serves that user's programs only, so this user's cannot open "
              "the device; fix: that user restarts it with UROCE_SHARE=all, or stop it" +
              (pid.empty() ? "" : " (kill " + pid + ")") +
              ", or use another address for this user's device");
    return;
  }
  std::string whose;
  if (owner) {
    whose = (pid.empty() ? "" : ", pid " + pid) + ", " + user_name(owner->uid) +
            (owner->any_user ? ", shared with every user" : "");
  }
  r.ok(where + ": UDP port 4791 is held by the device's coordinator (uroce-devd" + whose +
       "): in use");
}

// The rules of the host's firewall that drop RoCEv2 (nft), for the firewall checks.
struct Firewall {
  std::optional<std::vector<NftRule>> rules;  // nullopt: nft cannot be run
  bool reported = false;                      // a device's problem named them
  std::string named() const {
    std::string s;
    for (const NftRule& rule : *rules) s += (s.empty() ? "" : "; ") + rule.delete_command;
    return s;
  }
};

// A datagram from this host to the device's port arrives there (the port is free).
void check_delivery(Report& r, const std::string& where, const wire::IpAddress& ip, Firewall& fw) {
  const Delivery d = loopback_delivery(ip);
  if (d.arrived) {
    r.ok(where +
         ": a datagram sent to UDP port 4791 from this host arrives (no firewall rule "
         "of this host drops it on the way in)");
  } else if (!d.error.empty()) {
    r.note(where + ": cannot check the firewall with a datagram: " + d.error);
  } else if (fw.rules && !fw.rules->empty()) {
    fw.reported = true;
    r.problem(where +
              ": a datagram sent to UDP port 4791 from this host did not arrive: the "
              "host firewall drops RoCEv2 (" +
              (*fw.rules)[0].text + "); fix: " + fw.named());
  } else {
    r.problem(where +
              ": a datagram sent to UDP port 4791 from this host did not arrive: a "
              "firewall rule drops UDP 4791 (or all UDP); fix: allow it, e.g. nft insert "
              "rule inet filter input udp dport 4791 accept, or iptables -I INPUT -p udp "
              "--dport 4791 -j ACCEPT");
  }
}

void check_port(Report& r, const DoctorOptions& o, const std::string& where,
                const engine::DeviceSpec& d, Firewall& fw) {
  const int e = try_bind(d.ip, wire::kRoceV2Port);
  const std::string coordinator = engine::devd::socket_name(d.ip, wire::kRoceV2Port);
  if (e == 0) {
    r.ok(where + ": UDP port 4791 is free (bound when a program opens the device)");
    check_delivery(r, where, d.ip, fw);
  } else if (e == EADDRNOTAVAIL) {
    r.problem(where +
              ": not an address of this host; fix: add it to an interface, or "
              "configure this host's address (UROCE_DEVICES, /etc/uroce/devices.conf)");
  } else if (e == EADDRINUSE && coordinator_listens(o.proc_net_unix, coordinator)) {
    check_coordinator(r, where, coordinator, d.ip);
  } else if (e == EADDRINUSE) {
    r.problem(where +
              ": UDP port 4791 is taken by a program other than uroce (the kernel's "
              "rdma_rxe takes it on every address); fix: `rdma link delete` its "
              "devices or `modprobe -r rdma_rxe`, or stop that program (ss -ulpn)");
  } else {
    r.problem(where + ": cannot bind UDP port 4791: " + std::strerror(e));
  }
}

// The interface that holds the address, its MTU and the RoCE MTU it gives.
void check_mtu(Report& r, const std::string& where, const wire::IpAddress& ip) {
  auto name = datapath::interface_name(ip);
  auto mtu = datapath::interface_mtu(ip);
  if (!name.ok() || !mtu.ok()) return;  // not a local address: said above
  if (auto why = roce_mtu_problem(mtu.value(), name.value())) {
    r.problem(where + ": " + *why);
    return;
  }
  r.note(where + ": interface " + name.value() + ", MTU " + std::to_string(mtu.value()) +
         ": RoCE MTU " + std::to_string(mtu_bytes(*verbs::port_mtu_for_netdev(mtu.value()))));
}

// The device's congestion control and the ECN codepoint its packets leave with.
void note_ecn(Report& r, const std::string& where, const engine::DeviceSpec& d,
              const std::optional<DeviceConfig::CongestionControl>& from_env) {
  const DeviceConfig::CongestionControl cc =
      from_env ? *from_env : d.congestion_control.value_or(DeviceConfig{}.congestion_control);
  const std::string name = congestion_control_name(cc);
  const std::string source = from_env ? "UROCE_CC" : d.congestion_control ? "cc=" : "default";
  if (congestion_control_ecn(cc) == wire::kEcnEct0) {
    r.note(where + ": congestion control " + name + " (" + source +
           "): its packets carry ECT(0), so a switch that marks ECN marks them CE instead of "
           "dropping them, and the receiver answers the marks with CNPs");
  } else {
    r.note(where + ": congestion control " + name + " (" + source +
           "): its packets are not ECN-capable (Not-ECT): a congested switch drops them; for "
           "ECN marking: UROCE_CC=dcqcn-aimd (or cc=dcqcn-aimd in the config file)");
  }
}

void check_devices(Report& r, const DoctorOptions& o, Firewall& fw) {
  auto devices = engine::configured_devices(edge::device_source());
  auto options = edge::device_options();
  if (!devices.ok() || !options.ok()) {
    r.problem("the device configuration: " + (devices.ok() ? options.error() : devices.error()) +
              "; fix: UROCE_DEVICES or the config file (docs/CONFIGURATION.md)");
    return;
  }
  std::size_t index = 0;
  for (const engine::DeviceSpec& d : devices.value()) {
    const std::string where = d.name + " on " + engine::ip_to_string(d.ip);
    check_port(r, o, where, d, fw);
    check_mtu(r, where, d.ip);
    note_ecn(r, where, d, options.value().congestion_control);
    struct stat st {};
    const std::string node = o.ib_dir + "/uverbs" + std::to_string(index++);
    if (::stat(node.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) {
      r.note(where + ": UCX will not use it (no character device " + node +
             "); fix, for UCX only: sudo uroce setup");
    }
  }
}

// The firewall's rules that drop RoCEv2, where no device's check named them already (a rule for
// traffic from other hosts only, iifname eth0 ..., lets this host's own datagram through).
void check_firewall_rules(Report& r, const Firewall& fw) {
  if (!fw.rules) {
    r.note(
        "cannot read the firewall's rules: no nft (the datagram checks above still show a "
        "rule that drops UDP 4791 on the way in)");
  } else if (fw.rules->empty()) {
    r.ok("no nftables rule drops or rejects UDP port 4791");
  } else if (!fw.reported) {
    for (const NftRule& rule : *fw.rules) {
      r.problem("the firewall rule `" + rule.text +
                "` drops RoCEv2 (UDP port 4791) from other hosts; fix: " + rule.delete_command);
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

void check_buffers(Report& r, const DoctorOptions& o) {
  const std::uint64_t rmem = read_number(o.sysctl_dir + "/rmem_max");
  const bool privileged = net_admin();
  if (auto why = rmem_problem(rmem, privileged)) {
    r.problem(*why);
  } else {
    r.ok("net.core.rmem_max is " + std::to_string(rmem) +
         (privileged ? " (this process has CAP_NET_ADMIN: its devices force their buffer size)"
                     : ""));
  }
  // The datapath never sets SO_SNDBUF: a full send buffer holds packets back (EAGAIN, sent at
  // the next flush), it loses none; rmem is where a window's burst must fit.
  r.ok("net.core.wmem_max is " + std::to_string(read_number(o.sysctl_dir + "/wmem_max")) +
       ": a device keeps the kernel's default send buffer (net.core.wmem_default, " +
       std::to_string(read_number(o.sysctl_dir + "/wmem_default")) +
       "); when it is full, sends wait, nothing is lost");
}

void check_peer(Report& r, const std::string& text) {
  auto peer = engine::parse_ip(text);
  if (!peer.ok()) {
    r.problem("peer " + text + ": not an IP address (" + peer.error() + ")");
    return;
  }
  constexpr int kTries = 3;
  constexpr int kWaitMs = 300;
  const PeerProbe p = probe_peer(peer.value(), kTries, Duration::ms(kWaitMs));
  const std::string where = "peer " + text;
  if (!p.error.empty()) {
    r.problem(where + ": cannot measure a round trip: " + p.error +
              "; fix: a route to it (ip route), and UDP port 4791 on this host's address free "
              "while doctor runs (no program using that device, no rxe on it)");
    return;
  }
  const std::string mtu =
      p.path_mtu
          ? "path MTU " + std::to_string(*p.path_mtu) +
                (verbs::port_mtu_for_netdev(*p.path_mtu)
                     ? " (RoCE MTU " +
                           std::to_string(mtu_bytes(*verbs::port_mtu_for_netdev(*p.path_mtu))) + ")"
                     : " (too small for RoCE)")
          : std::string("path MTU unknown");
  if (!p.rtt) {
    r.problem(where + ": no answer on UDP port 4791 from " + engine::ip_to_string(*p.local) +
              " (a CM REQ, " + std::to_string(kTries) + " tries of " + std::to_string(kWaitMs) +
              " ms; " + mtu +
              "): no host there, no RoCE device (uroce or rxe) on that address, or a firewall "
              "on the way drops UDP 4791; fix: check that `ping " +
              text +
              "` answers, open a device on it (uroce: run a program on it; rxe: rdma link "
              "add), and allow UDP 4791 through its firewall");
    return;
  }
  char rtt[32];
  std::snprintf(rtt, sizeof rtt, "%.3f", static_cast<double>(p.rtt->count_ns()) / 1e6);
  const auto reason = wire::cm_rej_reason_name(p.rej_reason);
  r.ok(where + ": answered on UDP port 4791 from " + engine::ip_to_string(*p.local) + ": RTT " +
       rtt + " ms (a CM REQ to QP 1, try " + std::to_string(p.tries) + ", REJ " +
       (reason ? std::string(*reason) : std::to_string(p.rej_reason)) + "), " + mtu);
}

}  // namespace

int doctor_run(const DoctorOptions& o, std::FILE* out) {
  Report r{out};
  check_programs(r);
  Firewall fw{nft_rules_dropping_4791()};
  check_devices(r, o, fw);
  check_firewall_rules(r, fw);
  check_buffers(r, o);
  r.note(std::string("CRC-32 (ICRC) kernel of this CPU: ") + wire::crc32_implementation());
  if (!o.peer.empty()) check_peer(r, o.peer);
  std::fprintf(out, "%s\n",
               r.problems == 0 ? "all well" : (std::to_string(r.problems) + " problem(s)").c_str());
  return r.problems == 0 ? 0 : 1;
}

}  // namespace uroce::tools

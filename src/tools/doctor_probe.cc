#include "tools/doctor_probe.h"

#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "datapath/udp.h"
#include "device/device_config.h"
#include "device/shared_port.h"
#include "verbs/address.h"
#include "wire/cm_mad.h"

namespace uroce::tools {

namespace {

Instant clock_now() {
  return Instant::from_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now().time_since_epoch())
                              .count());
}

int wait_ms(Instant until) {
  const std::int64_t left = (until - clock_now()).count_ns();
  return left <= 0 ? 0 : static_cast<int>((left + 999'999) / 1'000'000);
}

// A UDP socket of `ip`'s family, or -1.
int udp_socket(const wire::IpAddress& ip) {
  return ::socket(ip.v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
}

}  // namespace

Delivery loopback_delivery(const wire::IpAddress& ip, Duration wait) {
  Delivery d;
  sockaddr_storage ss{};
  socklen_t len = 0;
  datapath::to_sockaddr(ip, wire::kRoceV2Port, ss, len);
  const int rx = udp_socket(ip);
  const int tx = udp_socket(ip);
  if (rx < 0 || tx < 0 || ::bind(rx, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    d.error = std::strerror(errno);
  } else {
    const std::array<char, 16> token{'u', 'r', 'o', 'c', 'e', '-', 'd', 'o', 'c', 't', 'o', 'r'};
    if (::sendto(tx, token.data(), token.size(), 0, reinterpret_cast<sockaddr*>(&ss), len) < 0) {
      d.error = std::string("sending to it failed: ") + std::strerror(errno);
    }
    const Instant until = clock_now() + wait;
    pollfd p{rx, POLLIN, 0};
    while (d.error.empty() && !d.arrived && ::poll(&p, 1, wait_ms(until)) > 0) {
      std::array<char, 16> got{};
      const ssize_t n = ::recv(rx, got.data(), got.size(), MSG_DONTWAIT);
      d.arrived = n == static_cast<ssize_t>(token.size()) && got == token;
    }
  }
  if (rx >= 0) ::close(rx);
  if (tx >= 0) ::close(tx);
  return d;
}

std::vector<NftRule> nft_rules_dropping_4791(const std::string& ruleset) {
  std::vector<NftRule> out;
  std::istringstream in(ruleset);
  std::string line;
  std::string table;  // "FAMILY NAME"
  std::string chain;
  auto has = [](const std::string& s, const char* word) {
    return s.find(word) != std::string::npos;
  };
  while (std::getline(in, line)) {
    const std::size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos) continue;
    line.erase(0, b);
    std::istringstream words(line);
    std::string w1, w2, w3;
    words >> w1 >> w2 >> w3;
    if (w1 == "table") {
      table = w2 + " " + w3;
      continue;
    }
    if (w1 == "chain") {
      chain = w2;
      continue;
    }
    const std::size_t h = line.find(" # handle ");
    if (h == std::string::npos || w1 == "type") continue;
    const std::string rule = line.substr(0, h);
    const bool drops = has(" " + rule + " ", " drop ") || has(rule, "reject");
    const bool port = has(rule, "dport") && has(rule, "4791");
    const bool all_udp = !has(rule, "dport") && !has(rule, "sport") &&
                         (has(rule, "l4proto udp") || has(rule, "protocol udp"));
    if (!drops || !(port || all_udp)) continue;
    out.push_back({rule, "nft delete rule " + table + " " + chain + " handle " +
                             line.substr(h + std::strlen(" # handle "))});
  }
  return out;
}

std::optional<std::vector<NftRule>> nft_rules_dropping_4791() {
  std::FILE* p = ::popen("nft -a list ruleset 2>/dev/null", "r");
  if (p == nullptr) return std::nullopt;
  std::string text;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) text.append(buf.data(), n);
  const int status = ::pclose(p);
  if (status != 0) return std::nullopt;  // no nft (127), or it could not read the ruleset
  return nft_rules_dropping_4791(text);
}

namespace {

std::vector<std::string> command_line(const std::string& pid) {
  std::vector<std::string> args;
  std::ifstream f("/proc/" + pid + "/cmdline");
  std::string arg;
  while (std::getline(f, arg, '\0')) args.push_back(arg);
  return args;
}

std::string net_namespace(const std::string& pid) {
  std::array<char, 64> link{};
  const std::string path = "/proc/" + pid + "/ns/net";
  const ssize_t n = ::readlink(path.c_str(), link.data(), link.size() - 1);
  return n > 0 ? std::string(link.data(), static_cast<std::size_t>(n)) : std::string();
}

// The coordinator process of ip:4791 in this network namespace, found by its command line
// (shared_port.cc starts it with --ip IP --port 4791 --linger-ms N), which every user may read.
void find_coordinator_process(const std::string& ip_text, SocketOwner& o) {
  const std::string mine = net_namespace("self");
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return;
  while (const dirent* e = ::readdir(proc)) {
    const std::string pid = e->d_name;
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::vector<std::string> args = command_line(pid);
    auto after = [&](const char* opt) {
      for (std::size_t k = 1; k + 1 < args.size(); ++k) {
        if (args[k] == opt) return args[k + 1];
      }
      return std::string();
    };
    if (after("--ip") != ip_text || after("--port") != "4791" || after("--linger-ms").empty()) {
      continue;
    }
    const std::string theirs = net_namespace(pid);
    if (!theirs.empty() && !mine.empty() && theirs != mine) continue;
    struct stat st {};
    if (::stat(("/proc/" + pid).c_str(), &st) != 0 || st.st_uid != o.uid) continue;
    o.pid = static_cast<pid_t>(std::stol(pid));
    for (const std::string& a : args) o.any_user = o.any_user || a == "--any-user";
    break;
  }
  ::closedir(proc);
}

}  // namespace

std::optional<SocketOwner> coordinator_owner(const std::string& name, const std::string& ip_text) {
  const int fd = engine::connect_coordinator(name);
  if (fd < 0) return std::nullopt;
  // The listening socket's credentials: those of the process that made it, the program that
  // started the coordinator, of the same user.
  ucred cred{};
  socklen_t len = sizeof cred;
  const bool ok = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0;
  ::close(fd);
  if (!ok) return std::nullopt;
  SocketOwner o;
  o.uid = cred.uid;
  find_coordinator_process(ip_text, o);
  return o;
}

namespace {

// The local address of the route to `peer` and its path MTU: a UDP socket connected to it.
void route_to(const wire::IpAddress& peer, PeerProbe& r) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  datapath::to_sockaddr(peer, wire::kRoceV2Port, ss, len);
  const int fd = udp_socket(peer);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    r.error = std::string("no route to it: ") + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return;
  }
  const int level = peer.v6 ? IPPROTO_IPV6 : IPPROTO_IP;
  const int probe = peer.v6 ? IPV6_PMTUDISC_DO : IP_PMTUDISC_DO;
  ::setsockopt(fd, level, peer.v6 ? IPV6_MTU_DISCOVER : IP_MTU_DISCOVER, &probe, sizeof probe);
  int mtu = 0;
  socklen_t mlen = sizeof mtu;
  if (::getsockopt(fd, level, peer.v6 ? IPV6_MTU : IP_MTU, &mtu, &mlen) == 0 && mtu > 0) {
    r.path_mtu = static_cast<std::uint32_t>(mtu);
  }
  sockaddr_storage me{};
  socklen_t mel = sizeof me;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &mel) == 0) {
    wire::IpAddress a;
    a.v6 = peer.v6;
    if (peer.v6) {
      std::memcpy(a.bytes.data(), &reinterpret_cast<sockaddr_in6*>(&me)->sin6_addr, 16);
    } else {
      std::memcpy(a.bytes.data(), &reinterpret_cast<sockaddr_in*>(&me)->sin_addr, 4);
    }
    r.local = a;
  }
  ::close(fd);
}

// The REQ: an RC connection request from a QP that does not exist, for kDoctorServiceId.
wire::CmMad doctor_req(const wire::IpAddress& local, const wire::IpAddress& peer,
                       std::uint32_t comm_id) {
  wire::CmReq req;
  req.local_comm_id = comm_id;
  req.service_id = kDoctorServiceId;
  req.local_ca_guid = verbs::node_guid_from_ip(local);
  req.local_qpn = comm_id & 0xffffff;
  req.starting_psn = comm_id >> 8;
  req.remote_cm_response_timeout = 20;
  req.local_cm_response_timeout = 20;
  req.retry_count = 7;
  req.rnr_retry_count = 7;
  req.max_cm_retries = 15;
  req.partition_key = 0xffff;
  req.path_mtu = static_cast<std::uint8_t>(Mtu::k1024);
  req.primary_local_lid = 0xffff;  // permissive, as cma.c sends over RoCE
  req.primary_remote_lid = 0xffff;
  const Gid lg = verbs::gid_from_ip(local);
  const Gid pg = verbs::gid_from_ip(peer);
  std::memcpy(req.primary_local_gid.data(), lg.raw.data(), 16);
  std::memcpy(req.primary_remote_gid.data(), pg.raw.data(), 16);
  req.primary_hop_limit = 64;
  req.primary_subnet_local = 1;
  req.primary_local_ack_timeout = 18;
  wire::CmMad mad;
  mad.transaction_id = (std::uint64_t{comm_id} << 32) | 0x646f63;  // "doc"
  mad.message = req;
  return mad;
}

}  // namespace

PeerProbe probe_peer(const wire::IpAddress& peer, int tries, Duration wait) {
  PeerProbe r;
  route_to(peer, r);
  if (!r.error.empty() || !r.local) return r;
  datapath::UdpOptions opt(*r.local, wire::kRoceV2Port);
  opt.gso = false;
  opt.gro = false;
  opt.rcvbuf_bytes = 0;
  auto dp = datapath::UdpDatapath::open(opt);
  if (!dp.ok()) {
    r.error = "UDP port 4791 on " + engine::ip_to_string(*r.local) +
              " is needed to hear the answer: " + dp.error().text;
    return r;
  }
  const std::uint32_t comm_id = std::random_device{}() | 1u;
  const auto mad = wire::build_cm_mad(doctor_req(*r.local, peer, comm_id));
  wire::OuterHeaders o;
  o.src = *r.local;
  o.dst = peer;
  o.src_port = verbs::rxe_default_udp_sport(wire::kGsiQpn);
  o.ethernet = false;
  const ConstBytes payload[1] = {ConstBytes(mad)};
  std::array<std::byte, 32> hdr{};
  for (int t = 1; t <= tries && !r.rtt; ++t) {
    r.tries = t;
    const std::size_t hn = wire::write_gsi_mad_headers(MutBytes(hdr), comm_id + t);
    const Instant sent = clock_now();
    dp.value()->send(sent, o, ConstBytes(hdr).first(hn), payload);
    dp.value()->flush(sent);
    const Instant until = sent + wait;
    pollfd p{dp.value()->fd(), POLLIN, 0};
    while (!r.rtt && ::poll(&p, 1, wait_ms(until)) > 0) {
      dp.value()->receive(
          clock_now(), 16, [&](const wire::RocePacket& pkt, const datapath::RxMeta& meta) {
            if (!meta.icrc_verified || meta.src != peer || pkt.bth().dest_qpn() != wire::kGsiQpn ||
                pkt.payload.size() != wire::kMadBytes) {
              return;
            }
            auto got = wire::parse_cm_mad(pkt.payload);
            if (!got.ok()) return;
            const auto* rej = std::get_if<wire::CmRej>(&got.value().message);
            if (rej == nullptr || rej->remote_comm_id != comm_id) return;
            r.rtt = clock_now() - sent;
            r.rej_reason = rej->reason;
          });
    }
  }
  return r;
}

}  // namespace uroce::tools

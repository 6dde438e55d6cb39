// Many RC QPs in one process (issue 43): two devices on loopback addresses, N QPs on each,
// connected in pairs (QP i of the first to QP i of the second) through INIT, RTR and RTS; then
// rounds of one 64-byte RDMA WRITE on every pair, each to its own slot with its own bytes, all
// checked; then every QP destroyed. Reports creation, connection and destruction rates, the
// traffic's completion rate, and the resident memory (RSS, /proc/self/statm) per QP and per MR.
//
//   many_qps [--qps N] [--mrs M] [--rounds R] [--a IP] [--b IP] [--exclusive 1]
//
// The devices are shared ones (a coordinator each, as the drop-in opens them) unless
// --exclusive 1 (UROCE_SHARED=0: no coordinator, QPNs from the device itself).
// The figures are wall-clock rates of one thread driving both devices: lower bounds when the
// machine is shared (docs/PERFORMANCE.md says how they were taken).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device/udp_device.h"
#include "verbs/address.h"

namespace {

using namespace uroce;
using namespace uroce::engine;
using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kAccess =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
constexpr std::size_t kSlot = 64;

long rss_bytes() {
  long pages = 0;
  long resident = 0;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return resident * ::sysconf(_SC_PAGESIZE);
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Host {
  std::string ip;
  std::unique_ptr<UdpDevice> dev;
  PdHandle pd;
  std::vector<std::byte> buf;  // slot i belongs to pair i
  MrInfo mr;
  std::vector<CqHandle> cqs;  // one per kQpsPerCq QPs
  std::vector<QpHandle> qps;
  std::vector<std::uint32_t> qpns;
};
constexpr std::uint32_t kQpsPerCq = 8192;

bool open_host(Host& h, const std::string& ip, std::uint32_t n, bool exclusive) {
  DeviceConfig cfg;
  cfg.name = "uroce_" + ip;
  auto parsed = parse_ip(ip);
  if (!parsed.ok()) return false;
  cfg.ip = parsed.value();
  h.ip = ip;
  auto d =
      UdpDevice::open(cfg, wire::kRoceV2Port, "",
                      exclusive ? UdpDevice::Sharing::kExclusive : UdpDevice::Sharing::kShared);
  if (!d.ok()) {
    std::fprintf(stderr, "open %s: %s\n", ip.c_str(), d.error().text.c_str());
    return false;
  }
  h.dev = std::move(d.value());
  h.pd = h.dev->device().alloc_pd().value();
  h.buf.assign(std::size_t{n} * kSlot, std::byte{0});
  auto mr = h.dev->device().reg_mr(h.pd, h.buf.data(), h.buf.size(), kAccess);
  if (!mr.ok()) return false;
  h.mr = mr.value();
  for (std::uint32_t i = 0; i < n; i += kQpsPerCq) {
    auto cq = h.dev->device().create_cq(CqInitAttr{kQpsPerCq, 0, 0});
    if (!cq.ok()) return false;
    h.cqs.push_back(cq->handle);
  }
  return true;
}

bool create_qps(Host& h, std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; ++i) {
    QpInitAttr init;
    init.send_cq = h.cqs[i / kQpsPerCq];
    init.recv_cq = h.cqs[i / kQpsPerCq];
    init.cap = QpCap{4, 1, 1, 1, 0};
    auto qp = h.dev->device().create_qp(h.pd, init);
    if (!qp.ok()) {
      std::fprintf(stderr, "create_qp %u on %s failed\n", i, h.ip.c_str());
      return false;
    }
    h.qps.push_back(qp->handle);
    h.qpns.push_back(qp->qp_num);
  }
  return true;
}

bool connect_qp(Host& h, std::uint32_t i, const Host& peer) {
  Device& dev = h.dev->device();
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.port_num = 1;
  a.qp_access_flags = kAccess;
  if (dev.modify_qp(h.qps[i], a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != Errc::kOk) {
    return false;
  }
  a.qp_state = QpState::kRtr;
  a.ah_attr.dgid = verbs::gid_from_ip(parse_ip(peer.ip).value());
  a.ah_attr.is_global = true;
  a.path_mtu = Mtu::k1024;
  a.dest_qp_num = peer.qpns[i];
  a.rq_psn = 0x100;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  if (dev.modify_qp(h.qps[i], a,
                    kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                        kQpMinRnrTimer) != Errc::kOk) {
    return false;
  }
  a.qp_state = QpState::kRts;
  a.sq_psn = 0x100;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return dev.modify_qp(h.qps[i], a,
                       kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry |
                           kQpMaxQpRdAtomic) == Errc::kOk;
}

std::byte pattern(std::uint32_t pair, std::uint32_t round, std::size_t k) {
  return static_cast<std::byte>((pair * 131u + round * 29u + k * 7u) & 0xff);
}

// One WRITE per pair from a's slot to b's slot; true when every one completed successfully and
// b holds every slot's bytes.
bool traffic_round(Host& a, Host& b, std::uint32_t n, std::uint32_t round) {
  for (std::uint32_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < kSlot; ++k) a.buf[i * kSlot + k] = pattern(i, round, k);
  }
  std::uint32_t posted = 0;
  std::uint32_t done = 0;
  const auto give_up = Clock::now() + std::chrono::seconds(120);
  while (done < n && Clock::now() < give_up) {
    // Post in slices so that the CQs never overflow.
    while (posted < n && posted - done < kQpsPerCq / 2) {
      const std::uint32_t i = posted;
      const Sge sge{reinterpret_cast<std::uint64_t>(a.buf.data()) + i * kSlot, kSlot, a.mr.lkey};
      SendWr w;
      w.wr_id = i;
      w.opcode = WrOpcode::kRdmaWrite;
      w.sg_list = std::span(&sge, 1);
      w.rdma = {reinterpret_cast<std::uint64_t>(b.buf.data()) + i * kSlot, b.mr.rkey};
      w.send_flags = kSendSignaled;
      if (a.dev->device().post_send(a.qps[i], std::span(&w, 1), nullptr) != Errc::kOk) {
        std::fprintf(stderr, "post_send on pair %u failed\n", i);
        return false;
      }
      ++posted;
    }
    a.dev->progress();
    b.dev->progress();
    for (CqHandle cq : a.cqs) {
      Wc wcs[64];
      auto k = a.dev->device().poll_cq(cq, wcs);
      if (!k.ok()) return false;
      for (std::size_t j = 0; j < k.value(); ++j) {
        if (wcs[j].status != WcStatus::kSuccess) {
          std::fprintf(stderr, "pair %llu: status %d\n",
                       static_cast<unsigned long long>(wcs[j].wr_id),
                       static_cast<int>(wcs[j].status));
          return false;
        }
      }
      done += static_cast<std::uint32_t>(k.value());
    }
  }
  if (done < n) {
    std::fprintf(stderr, "round %u: %u of %u WRITEs completed\n", round, done, n);
    return false;
  }
  for (std::uint32_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < kSlot; ++k) {
      if (b.buf[i * kSlot + k] != pattern(i, round, k)) {
        std::fprintf(stderr, "round %u: pair %u's bytes differ at %zu\n", round, i, k);
        return false;
      }
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint32_t n = 5000;  // per device: 2n QPs in the process
  std::uint32_t mrs = 10000;
  std::uint32_t rounds = 3;
  std::string ip_a = "127.81.0.1";
  std::string ip_b = "127.81.0.2";
  bool exclusive = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--qps") {
      n = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10)) / 2;
    } else if (k == "--mrs") {
      mrs = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (k == "--rounds") {
      rounds = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (k == "--a") {
      ip_a = v;
    } else if (k == "--b") {
      ip_b = v;
    } else if (k == "--exclusive") {
      exclusive = std::strcmp(v, "0") != 0;
    } else {
      std::fprintf(stderr,
                   "usage: many_qps [--qps N] [--mrs M] [--rounds R] [--a IP] [--b IP] "
                   "[--exclusive 1]\n");
      return 2;
    }
  }
  Host a;
  Host b;
  if (!open_host(a, ip_a, n, exclusive) || !open_host(b, ip_b, n, exclusive)) return 1;

  // Memory per MR: registrations over pages already resident.
  std::vector<std::byte> region(std::size_t{mrs} * 4096, std::byte{1});
  const long rss_mr0 = rss_bytes();
  std::vector<MrInfo> mr_list;
  mr_list.reserve(mrs);
  for (std::uint32_t i = 0; i < mrs; ++i) {
    auto mr = a.dev->device().reg_mr(a.pd, region.data() + std::size_t{i} * 4096, 4096, kAccess);
    if (!mr.ok()) {
      std::fprintf(stderr, "reg_mr %u failed\n", i);
      return 1;
    }
    mr_list.push_back(mr.value());
  }
  const long rss_mr1 = rss_bytes();

  const long rss0 = rss_bytes();
  auto t = Clock::now();
  if (!create_qps(a, n) || !create_qps(b, n)) return 1;
  const double create_s = seconds_since(t);
  const long rss1 = rss_bytes();

  t = Clock::now();
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!connect_qp(a, i, b) || !connect_qp(b, i, a)) {
      std::fprintf(stderr, "connecting pair %u failed\n", i);
      return 1;
    }
  }
  const double connect_s = seconds_since(t);

  t = Clock::now();
  for (std::uint32_t r = 0; r < rounds; ++r) {
    if (!traffic_round(a, b, n, r)) return 1;
  }
  const double traffic_s = seconds_since(t);
  const long rss2 = rss_bytes();

  t = Clock::now();
  for (Host* h : {&a, &b}) {
    for (QpHandle q : h->qps) {
      if (h->dev->device().destroy_qp(q) != Errc::kOk) {
        std::fprintf(stderr, "destroy_qp failed\n");
        return 1;
      }
    }
  }
  const double destroy_s = seconds_since(t);
  for (const MrInfo& mr : mr_list) (void)a.dev->device().dereg_mr(mr.handle);

  const double qps = 2.0 * n;
  std::printf(
      "{\"qps\": %.0f, \"create_per_s\": %.0f, \"connect_per_s\": %.0f, "
      "\"writes_checked\": %.0f, \"writes_per_s\": %.0f, \"destroy_per_s\": %.0f, "
      "\"rss_per_qp_bytes\": %.0f, \"rss_per_qp_after_traffic_bytes\": %.0f, "
      "\"mrs\": %u, \"rss_per_mr_bytes\": %.0f}\n",
      qps, qps / create_s, qps / connect_s, double(n) * rounds, double(n) * rounds / traffic_s,
      qps / destroy_s, double(rss1 - rss0) / qps, double(rss2 - rss0) / qps, mrs,
      double(rss_mr1 - rss_mr0) / mrs);
  return 0;
}

// The cost of the background progress thread against application polling, over loopback UDP:
// the round trip of a signaled 8-byte RDMA WRITE (post to completion) and the throughput of
// 64 KiB WRITEs, between two UdpDevices of this process.
//
//   progress_modes [--iters N] [--mode poll|thread|spin]
//
// poll:   each side has an application thread that calls progress() in a loop (busy polling);
// thread: both sides run the progress thread (spin 0: it sleeps in ppoll when idle) and the
//         initiator's application polls its CQ through the lock;
// spin:   as thread, with a 50 us busy-poll before sleeping.
// Prints one JSON object per mode on stdout.
#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "device/udp_device.h"
#include "edge/environment.h"
#include "verbs/address.h"

namespace {

using namespace uroce;
using engine::UdpDevice;

wire::IpAddress v4(const char* s) {
  wire::IpAddress a;
  ::inet_pton(AF_INET, s, a.bytes.data());
  return a;
}

struct Side {
  std::vector<std::byte> buf = std::vector<std::byte>(16 << 20);
  std::unique_ptr<UdpDevice> dev;
  MrInfo mr;
  CqHandle cq;
  QpHandle qp;
  std::uint32_t qpn = 0;
};

bool make(Side& s, const char* ip) {
  DeviceConfig cfg;
  cfg.ip = v4(ip);
  cfg.netdev_mtu = 0;
  auto options = edge::device_options();  // UROCE_* from the environment, as the tools
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", options.error().c_str());
    return false;
  }
  auto d =
      UdpDevice::open(cfg, wire::kRoceV2Port, "", UdpDevice::Sharing::kDefault, options.value());
  if (!d.ok()) {
    std::fprintf(stderr, "%s\n", d.error().text.c_str());
    return false;
  }
  s.dev = std::move(d.value());
  Device& dev = s.dev->device();
  const PdHandle pd = dev.alloc_pd().value();
  s.mr = dev.reg_mr(pd, s.buf.data(), s.buf.size(), kAccessLocalWrite | kAccessRemoteWrite).value();
  s.cq = dev.create_cq(CqInitAttr{4096, 0, 0})->handle;
  QpInitAttr init;
  init.send_cq = s.cq;
  init.recv_cq = s.cq;
  init.cap = QpCap{256, 16, 1, 1, 64};
  auto qp = dev.create_qp(pd, init);
  s.qp = qp->handle;
  s.qpn = qp->qp_num;
  return true;
}

void connect(Side& s, const Side& peer, const char* peer_ip) {
  Device& dev = s.dev->device();
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.port_num = 1;
  a.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite;
  (void)dev.modify_qp(s.qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags);
  a.qp_state = QpState::kRtr;
  a.ah_attr.dgid = verbs::gid_from_ip(v4(peer_ip));
  a.ah_attr.is_global = true;
  a.path_mtu = Mtu::k4096;
  a.dest_qp_num = peer.qpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  (void)dev.modify_qp(
      s.qp, a,
      kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer);
  a.qp_state = QpState::kRts;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  (void)dev.modify_qp(
      s.qp, a, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic);
}

double seconds_since(Instant t0) {
  return static_cast<double>((UdpDevice::now() - t0).count_ns()) / 1e9;
}

void run(const std::string& mode, int iters) {
  Side a, b;
  if (!make(a, "127.0.3.1") || !make(b, "127.0.3.2")) return;
  connect(a, b, "127.0.3.2");
  connect(b, a, "127.0.3.1");
  const bool threaded = mode != "poll";
  std::atomic<bool> stop{false};
  std::thread target_app;
  if (threaded) {
    engine::ProgressThreadOptions o;
    if (mode == "spin") o.spin = Duration::us(50);
    a.dev->start_progress_thread(o);
    b.dev->start_progress_thread(o);
  } else {
    target_app = std::thread([&] {
      while (!stop.load(std::memory_order_relaxed)) b.dev->progress();
    });
  }
  // Posts `n` WRITEs of `len` bytes (at most `depth` outstanding) and waits for them all.
  auto writes = [&](int n, std::uint32_t len, int depth, std::vector<double>* rtts) {
    int posted = 0, done = 0;
    Instant started = UdpDevice::now();
    while (done < n) {
      while (posted < n && posted - done < depth) {
        const Sge sge{reinterpret_cast<std::uint64_t>(a.buf.data()), len, a.mr.lkey};
        SendWr w;
        w.wr_id = static_cast<std::uint64_t>(posted);
        w.opcode = WrOpcode::kRdmaWrite;
        w.sg_list = std::span(&sge, 1);
        w.rdma = {reinterpret_cast<std::uint64_t>(b.buf.data()), b.mr.rkey};
        w.send_flags = kSendSignaled;
        started = UdpDevice::now();
        auto d = a.dev->lock();
        if (d->post_send(a.qp, std::span(&w, 1), nullptr) != Errc::kOk) return;
        ++posted;
      }
      if (!threaded) a.dev->progress();
      Wc wc[32];
      auto k = a.dev->lock()->poll_cq(a.cq, wc);
      if (!k.ok()) return;
      for (std::size_t i = 0; i < k.value(); ++i) {
        if (wc[i].status != WcStatus::kSuccess) return;
      }
      if (rtts != nullptr && k.value() > 0) rtts->push_back(seconds_since(started) * 1e6);
      done += static_cast<int>(k.value());
    }
  };
  writes(100, 8, 1, nullptr);  // warm up
  std::vector<double> rtts;
  writes(iters, 8, 1, &rtts);
  std::sort(rtts.begin(), rtts.end());
  const int big = std::max(iters / 4, 100);
  const Instant t0 = UdpDevice::now();
  writes(big, 65536, 64, nullptr);
  const double secs = seconds_since(t0);
  stop.store(true);
  if (target_app.joinable()) target_app.join();
  const engine::DeviceStats st = a.dev->stats();
  const std::uint64_t retransmitted = st.qps.empty() ? 0 : st.qps[0].counters.retransmitted_packets;
  std::printf(
      "{\"mode\":\"%s\",\"write8_rtt_us_p50\":%.1f,\"write8_rtt_us_p99\":%.1f,"
      "\"write64k_gbit_per_s\":%.2f,\"retransmitted_pkts\":%llu,\"iters\":%d}\n",
      mode.c_str(), rtts.empty() ? 0.0 : rtts[rtts.size() / 2],
      rtts.empty() ? 0.0 : rtts[rtts.size() * 99 / 100], big * 65536.0 * 8 / secs / 1e9,
      static_cast<unsigned long long>(retransmitted), iters);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 2000;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--iters") {
      iters = std::max(1, std::atoi(argv[i + 1]));
    } else if (k == "--mode") {
      only = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: progress_modes [--iters N] [--mode poll|thread|spin]\n");
      return 2;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "usage: progress_modes [--iters N] [--mode poll|thread|spin]\n");
    return 2;
  }
  for (const char* m : {"poll", "thread", "spin"}) {
    if (only.empty() || only == m) run(m, iters);
  }
  return 0;
}

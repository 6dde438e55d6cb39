// Selective repeat (issue 39) against go-back-N on one lossy flow: two hosts running the real
// device round, verbs and transport over sim::Network, one RC QP streaming 64 KiB RDMA WRITEs (or
// SENDs) at MTU 1024 over a 10 Gbit/s link with random loss both ways. Time is simulated and
// the loss seeded, so the goodput figures are exact for a seed; the oracles (every message
// completes once, in order, successfully; the receiver's memory holds the last message) hold in
// every run.
//
// The figures (goodput against the loss-free run's, for 0.1%, 1% and 5% loss) are printed by
//   build-release/tests/sim/sim_selective_repeat_test --gtest_also_run_disabled_tests
//       --gtest_filter='*GoodputTable*'
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "sim/scenario_host.h"
#include "transport/qp.h"
#include "verbs/connect.h"

namespace uroce::sim {
namespace {

struct FlowOptions {
  std::uint64_t seed = 1;
  fault::Ratio loss;  // on every link, both ways
  bool selective_repeat = false;
  bool send = false;  // SENDs into receive WQEs, else RDMA WRITEs
  std::uint32_t message_bytes = 65536;
  std::uint32_t window = 8;  // messages outstanding
  std::int64_t duration_ns = 5'000'000;
};

struct FlowResult {
  bool ok = true;
  std::string failure;
  std::uint64_t completed = 0;  // messages completed by duration_ns
  double goodput_gbps = 0;
  transport::QpCounters sender, receiver;
};

struct Flow final : ScenarioApp {
  explicit Flow(const FlowOptions& o) : opt(o), sc(o.seed, Instant::from_ns(1'000'000)) {}
  FlowOptions opt;
  Scenario sc;
  ScenarioHost* tx = nullptr;
  ScenarioHost* rx = nullptr;
  std::uint64_t posted = 0, completed = 0, received = 0;
  bool measured = false;
  FlowResult result;

  Instant now() const { return sc.now(); }
  Instant stop() const { return sc.start() + Duration::ns(opt.duration_ns); }
  void fail(const std::string& what) {
    if (!result.ok) return;
    result.ok = false;
    result.failure = "seed " + std::to_string(opt.seed) + ": " + what;
  }
  void step() override;
  Instant next_time() const override { return measured ? Instant::never() : stop(); }
  void clock_moved() override {
    if (measured || now() < stop()) return;
    measured = true;
    result.completed = completed;
  }
};

// A host (no deferred ACKs, as this harness has always run), its memory and its RC QP.
ScenarioHost* make_host(Flow& f, std::uint8_t index, std::size_t mem_bytes) {
  DeviceConfig cfg;
  cfg.name = "srflow" + std::to_string(index);
  cfg.ip = wire::IpAddress::v4(0x0a660000u + 1 + index);
  cfg.netdev_mtu = 9000;
  cfg.seed = f.opt.seed * 10 + index;
  cfg.congestion_control = DeviceConfig::CongestionControl::kNone;
  ScenarioHostOptions opt;
  opt.acks.defer = false;
  ScenarioHost* h = f.sc.add_host(cfg, MacAddress{0x02, 0, 0, 0, 3, index}, opt,
                                  [&f](const std::string&) { f.fail("invalid frame"); });
  if (h == nullptr || !h->open_memory(mem_bytes) ||
      !h->create_rc_qp(QpCap{f.opt.window, 2 * f.opt.window, 1, 1, 0})) {
    return nullptr;
  }
  return h;
}

// What message `m` carries: its number, then a pattern of it.
void fill_message(std::span<std::byte> b, std::uint64_t m) {
  std::memset(b.data(), static_cast<int>((m * 7 + 1) & 0xff), b.size());
  std::memcpy(b.data(), &m, std::min<std::size_t>(8, b.size()));
}

// Receive WQE `n` takes slot n % (2 * window) of the receiver's memory.
bool post_recv(Flow& f, std::uint64_t n) {
  const std::size_t msg = f.opt.message_bytes;
  const std::size_t slot = (n % (2 * f.opt.window)) * msg;
  const Sge sge{f.rx->va(slot), static_cast<std::uint32_t>(msg), f.rx->mr().lkey};
  RecvWr wr;
  wr.wr_id = n;
  wr.sg_list = std::span(&sge, 1);
  return f.rx->dev().post_recv(f.rx->qps()[0], std::span(&wr, 1), nullptr) == Errc::kOk;
}

bool setup(Flow& f) {
  const std::size_t msg = f.opt.message_bytes;
  f.tx = make_host(f, 1, msg * f.opt.window);
  f.rx = make_host(f, 2, msg * 2 * f.opt.window);
  if (f.tx == nullptr || f.rx == nullptr) return false;
  LinkConfig link;
  link.delay_ns = 2'000;
  link.bandwidth_bps = 10'000'000'000;
  link.queue_limit_packets = 0;
  link.loss = f.opt.loss;
  if (!f.sc.net().configure_default(f.now(), link).ok()) return false;
  verbs::RcConnection c;
  c.path_mtu = Mtu::k1024;
  c.timeout = 12;  // 16.8 ms
  c.access = kAccessLocalWrite | kAccessRemoteWrite;
  c.peer_ip = f.rx->ip();
  c.peer_qpn = f.rx->qpns()[0];
  c.sq_psn = 0xfff000;  // the PSNs wrap during the run
  c.rq_psn = 0x1000;
  if (verbs::connect_rc_qp(f.tx->dev(), f.tx->qps()[0], c) != Errc::kOk) return false;
  c.peer_ip = f.tx->ip();
  c.peer_qpn = f.tx->qpns()[0];
  std::swap(c.sq_psn, c.rq_psn);
  if (verbs::connect_rc_qp(f.rx->dev(), f.rx->qps()[0], c) != Errc::kOk) return false;
  f.tx->dev().find_qp(f.tx->qpns()[0])->set_selective_repeat(f.opt.selective_repeat);
  f.rx->dev().find_qp(f.rx->qpns()[0])->set_selective_repeat(f.opt.selective_repeat);
  if (f.opt.send) {
    for (std::uint32_t i = 0; i < 2 * f.opt.window; ++i) {
      if (!post_recv(f, i)) return false;
    }
  }
  return true;
}

void post_messages(Flow& f) {
  const std::size_t msg = f.opt.message_bytes;
  while (f.now() < f.stop() && f.posted - f.completed < f.opt.window) {
    const std::size_t slot = (f.posted % f.opt.window) * msg;
    fill_message(f.tx->mem().subspan(slot, msg), f.posted);
    const WrOpcode op = f.opt.send ? WrOpcode::kSend : WrOpcode::kRdmaWrite;
    if (f.tx->post_one(0, op, f.posted, slot, static_cast<std::uint32_t>(msg), *f.rx, 0) !=
        Errc::kOk) {
      f.fail("post_send failed");
      return;
    }
    ++f.posted;
  }
}

void poll(Flow& f) {
  Wc wcs[32];
  for (;;) {
    auto n = f.tx->dev().poll_cq(f.tx->cq(), wcs);
    if (!n.ok() || n.value() == 0) break;
    for (std::size_t i = 0; i < n.value(); ++i) {
      if (wcs[i].status != WcStatus::kSuccess || wcs[i].wr_id != f.completed) {
        f.fail("completion of message " + std::to_string(wcs[i].wr_id) + " status " +
               wc_status_name(wcs[i].status) + ", expected " + std::to_string(f.completed));
        return;
      }
      ++f.completed;
    }
  }
  if (!f.opt.send) return;
  const std::size_t msg = f.opt.message_bytes;
  std::vector<std::byte> want(msg);
  for (;;) {
    auto n = f.rx->dev().poll_cq(f.rx->cq(), wcs);
    if (!n.ok() || n.value() == 0) break;
    for (std::size_t i = 0; i < n.value(); ++i) {
      const std::size_t slot = (f.received % (2 * f.opt.window)) * msg;
      fill_message(want, f.received);
      if (wcs[i].status != WcStatus::kSuccess || wcs[i].wr_id != f.received ||
          wcs[i].byte_len != msg || std::memcmp(f.rx->mem().data() + slot, want.data(), msg) != 0) {
        f.fail("receive of message " + std::to_string(f.received) + " wrong");
        return;
      }
      if (!post_recv(f, f.received + 2 * f.opt.window)) f.fail("post_recv failed");
      ++f.received;
    }
  }
}

void Flow::step() {
  poll(*this);
  post_messages(*this);
}

FlowResult run_flow(const FlowOptions& o) {
  Flow f(o);
  if (!setup(f)) {
    f.fail("setup failed");
    return f.result;
  }
  post_messages(f);
  f.tx->round(f.now(), engine::Engine::RoundKind::kTransmit);
  const auto done = [&f] {
    return !f.result.ok || (f.now() >= f.stop() && f.completed == f.posted);
  };
  if (f.sc.run_until(done, f.stop() + Duration::s(2), f) != Scenario::End::kDone) {
    f.fail("messages unfinished");
  }
  if (f.result.ok && !f.opt.send && f.posted > 0) {
    std::vector<std::byte> want(o.message_bytes);
    fill_message(want, f.posted - 1);
    if (std::memcmp(f.rx->mem().data(), want.data(), want.size()) != 0) {
      f.fail("the receiver's memory does not hold the last WRITE");
    }
  }
  f.result.goodput_gbps = static_cast<double>(f.result.completed) * o.message_bytes * 8 /
                          static_cast<double>(o.duration_ns);
  f.result.sender = f.tx->dev().find_qp(f.tx->qpns()[0])->counters();
  f.result.receiver = f.rx->dev().find_qp(f.rx->qpns()[0])->counters();
  return f.result;
}

FlowResult checked(const FlowOptions& o) {
  FlowResult r = run_flow(o);
  EXPECT_TRUE(r.ok) << r.failure;
  return r;
}

// The same flow with `loss`, with selective repeat and with go-back-N.
struct Compared {
  FlowResult sr, gbn;
};
Compared compare(FlowOptions o, fault::Ratio loss) {
  o.loss = loss;
  o.selective_repeat = true;
  Compared c{checked(o), {}};
  o.selective_repeat = false;
  c.gbn = checked(o);
  return c;
}

// Issue 39's acceptance: at 1% random loss, selective repeat keeps at least 0.7 of the loss-free
// goodput, and more than go-back-N.
TEST(SelectiveRepeatGoodput, OnePercentLossKeepsSevenTenthsOfTheLossFreeGoodput) {
  for (const bool send : {false, true}) {
    SCOPED_TRACE(send ? "SEND" : "WRITE");
    FlowOptions o;
    o.send = send;
    const FlowResult clean = checked(o);
    const Compared c = compare(o, fault::Ratio{1, 100});
    std::printf("%s: no loss %.2f Gb/s; 1%% loss: selective repeat %.2f, go-back-N %.2f\n",
                send ? "SEND" : "WRITE", clean.goodput_gbps, c.sr.goodput_gbps, c.gbn.goodput_gbps);
    EXPECT_GE(c.sr.goodput_gbps, 0.7 * clean.goodput_gbps);
    EXPECT_GT(c.sr.goodput_gbps, c.gbn.goodput_gbps);
    EXPECT_GT(c.sr.sender.selective_retransmits, 0u);
    EXPECT_GT(c.sr.receiver.out_of_order_kept, 0u);
    EXPECT_EQ(c.gbn.sender.selective_retransmits, 0u);
    EXPECT_EQ(c.gbn.receiver.out_of_order_kept, 0u);
  }
}

// The whole table, for docs and the report (not in CI: a few seconds in Release).
TEST(SelectiveRepeatGoodput, DISABLED_GoodputTable) {
  for (const bool send : {false, true}) {
    FlowOptions o;
    o.send = send;
    o.duration_ns = 20'000'000;
    const FlowResult clean = checked(o);
    std::printf("%s, 64 KiB messages, MTU 1024, 10 Gb/s, 2 us one way, 20 ms: no loss %.2f Gb/s\n",
                send ? "SEND" : "WRITE", clean.goodput_gbps);
    for (const std::uint32_t tenths_of_percent : {1u, 10u, 50u}) {
      const Compared c = compare(o, fault::Ratio{tenths_of_percent, 1000});
      for (const FlowResult* r : {&c.sr, &c.gbn}) {
        std::printf(
            "  loss %.1f%% %s: %.2f Gb/s (%.3f of no loss; %llu resent alone, %llu "
            "retransmitted, %llu timeouts)\n",
            tenths_of_percent / 10.0, r == &c.sr ? "selective repeat" : "go-back-N",
            r->goodput_gbps, r->goodput_gbps / clean.goodput_gbps,
            static_cast<unsigned long long>(r->sender.selective_retransmits),
            static_cast<unsigned long long>(r->sender.retransmitted_packets),
            static_cast<unsigned long long>(r->sender.timeouts));
      }
    }
  }
}

}  // namespace
}  // namespace uroce::sim

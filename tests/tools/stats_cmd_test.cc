// `uroce stats`: discovery in /proc/net/unix, the query protocol, and the command's output and
// exit codes, against real devices of this process (and through the `uroce` binary, another
// process).
#include "tools/stats_cmd.h"
#include "support/ip_text.h"
#include "support/test_net.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "device/udp_device.h"
#include "verbs/address.h"

namespace uroce::tools {
namespace {

using test::v4;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("uroce_stats_cmd_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// Runs stats_run and returns {exit code, stdout, stderr}.
struct CmdRun {
  int status = -1;
  std::string out, err;
};
CmdRun run(const StatsCommand& cmd) {
  CmdRun r;
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  r.status = stats_run(cmd, out, err);
  for (auto [f, s] : {std::pair{out, &r.out}, std::pair{err, &r.err}}) {
    std::rewind(f);
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s->append(buf, n);
    std::fclose(f);
  }
  return r;
}

TEST(StatsCmd, FindsEndpointsInProcNetUnix) {
  const std::string path = temp_path("unix");
  {
    std::ofstream f(path);
    f << "Num       RefCount Protocol Flags    Type St Inode Path\n"
         "0000000000000000: 00000002 00000000 00000000 0002 01 123 @uroce/42/uroce1\n"
         "0000000000000000: 00000002 00000000 00000000 0002 01 124 @uroce/7/uroce0~2\n"
         "0000000000000000: 00000002 00000000 00000000 0002 01 125 @uroce/7/uroce0\n"
         "0000000000000000: 00000002 00000000 00000000 0002 01 126 @uroce/x/bad\n"
         "0000000000000000: 00000002 00000000 00000000 0002 01 127 @uroce/9/\n"
         "0000000000000000: 00000002 00000000 00000000 0002 01 128 /run/other.sock\n"
         "0000000000000000: 00000002 00000000 00000000 0002 01 129\n"
         "garbage\n";
  }
  const auto eps = find_stats_endpoints(path);
  ASSERT_EQ(eps.size(), 3u);
  EXPECT_EQ(eps[0].socket_name, "uroce/7/uroce0");
  EXPECT_EQ(eps[0].device, "uroce0");
  EXPECT_EQ(eps[1].socket_name, "uroce/7/uroce0~2");
  EXPECT_EQ(eps[1].device, "uroce0");
  EXPECT_EQ(eps[2].pid, 42);
  EXPECT_EQ(eps[2].device, "uroce1");
  EXPECT_TRUE(find_stats_endpoints("/nonexistent/unix").empty());
  std::filesystem::remove(path);
}

TEST(StatsCmd, NoRunningDeviceIsAClearMessageAndExit1) {
  StatsCommand cmd;
  cmd.proc_net_unix = "/nonexistent/unix";
  CmdRun r = run(cmd);
  EXPECT_EQ(r.status, kStatsExitNoDevice);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("no running uroce device"), std::string::npos) << r.err;
  cmd = StatsCommand{};
  cmd.device = "no_such_uroce_device";
  r = run(cmd);
  EXPECT_EQ(r.status, kStatsExitNoDevice);
  EXPECT_NE(r.err.find("no running uroce device named no_such_uroce_device"), std::string::npos);
}

// Two connected devices in thread mode, with known traffic: 5 WRITEs of 2 KiB at MTU 1024.
struct Traffic {
  std::vector<std::byte> buf_a = std::vector<std::byte>(1 << 16);
  std::vector<std::byte> buf_b = std::vector<std::byte>(1 << 16);
  std::unique_ptr<engine::UdpDevice> a, b;
  std::uint32_t qpn_a = 0;

  void setup(const char* name_a, const char* ip_a, const char* name_b, const char* ip_b) {
    QpHandle qa, qb;
    CqHandle cqa;
    MrInfo ma, mb;
    std::uint32_t qpn_b = 0;
    for (int i = 0; i < 2; ++i) {
      DeviceConfig cfg;
      cfg.name = i == 0 ? name_a : name_b;
      cfg.ip = v4(i == 0 ? ip_a : ip_b);
      auto d = engine::UdpDevice::open(cfg);
      ASSERT_TRUE(d.ok()) << d.error();
      Device& dev = d.value()->device();
      auto& buf = i == 0 ? buf_a : buf_b;
      const PdHandle pd = dev.alloc_pd().value();
      (i == 0 ? ma : mb) =
          dev.reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite | kAccessRemoteWrite).value();
      const CqHandle cq = dev.create_cq(CqInitAttr{64, 0, 0})->handle;
      QpInitAttr init;
      init.send_cq = cq;
      init.recv_cq = cq;
      init.cap = QpCap{16, 16, 1, 1, 0};
      auto qp = dev.create_qp(pd, init);
      ASSERT_TRUE(qp.ok());
      (i == 0 ? qa : qb) = qp->handle;
      (i == 0 ? qpn_a : qpn_b) = qp->qp_num;
      if (i == 0) cqa = cq;
      (i == 0 ? a : b) = std::move(d.value());
    }
    for (int i = 0; i < 2; ++i) {
      Device& dev = (i == 0 ? a : b)->device();
      const QpHandle qp = i == 0 ? qa : qb;
      QpAttr at;
      at.qp_state = QpState::kInit;
      at.port_num = 1;
      at.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite;
      ASSERT_EQ(dev.modify_qp(qp, at, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags),
                Errc::kOk);
      at.qp_state = QpState::kRtr;
      at.ah_attr.dgid = verbs::gid_from_ip(v4(i == 0 ? ip_b : ip_a));
      at.ah_attr.is_global = true;
      at.path_mtu = Mtu::k1024;
      at.dest_qp_num = i == 0 ? qpn_b : qpn_a;
      at.max_dest_rd_atomic = 1;
      at.min_rnr_timer = 12;
      ASSERT_EQ(dev.modify_qp(qp, at,
                              kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                  kQpMaxDestRdAtomic | kQpMinRnrTimer),
                Errc::kOk);
      at.qp_state = QpState::kRts;
      at.timeout = 20;  // about 4 s: no retransmission to blur the counts
      at.retry_cnt = 7;
      at.rnr_retry = 7;
      at.max_rd_atomic = 1;
      ASSERT_EQ(dev.modify_qp(qp, at,
                              kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry |
                                  kQpMaxQpRdAtomic),
                Errc::kOk);
    }
    ASSERT_EQ(a->start_progress_thread(), "");
    ASSERT_EQ(b->start_progress_thread(), "");
    const Sge sge{reinterpret_cast<std::uint64_t>(buf_a.data()), 2048, ma.lkey};
    std::vector<SendWr> wrs(5);
    for (std::size_t i = 0; i < wrs.size(); ++i) {
      wrs[i].wr_id = i;
      wrs[i].opcode = WrOpcode::kRdmaWrite;
      wrs[i].sg_list = std::span(&sge, 1);
      wrs[i].rdma = {reinterpret_cast<std::uint64_t>(buf_b.data()) + i * 2048, mb.rkey};
      wrs[i].send_flags = kSendSignaled;
    }
    ASSERT_EQ(a->lock()->post_send(qa, wrs, nullptr), Errc::kOk);
    std::size_t done = 0;
    const Instant give_up = engine::UdpDevice::now() + Duration::s(20);
    while (done < wrs.size() && engine::UdpDevice::now() < give_up) {
      Wc wc[8];
      auto k = a->lock()->poll_cq(cqa, wc);
      ASSERT_TRUE(k.ok());
      for (std::size_t i = 0; i < k.value(); ++i) ASSERT_EQ(wc[i].status, WcStatus::kSuccess);
      done += k.value();
    }
    ASSERT_EQ(done, wrs.size());
  }
};

TEST(StatsCmd, ShowsTheCountersOfADeviceOfThisProcess) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Traffic t;
  ASSERT_NO_FATAL_FAILURE(t.setup("tool_a", a_ip, "tool_b", b_ip));
  const std::string pid = std::to_string(::getpid());
  StatsCommand cmd;
  cmd.device = "tool_a";
  cmd.timeout = Duration::s(20);  // hang guard only
  CmdRun r = run(cmd);
  EXPECT_EQ(r.status, kStatsExitOk) << r.err;
  EXPECT_EQ(r.out.rfind("link tool_a/1 pid " + pid + " sent_pkts 10 rcvd_pkts ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(" retry_exceeded_err 0 "), std::string::npos);
  EXPECT_EQ(r.out.find("\nqp "), std::string::npos);  // no QP lines without --qp

  cmd.qp = true;
  r = run(cmd);
  EXPECT_EQ(r.status, kStatsExitOk) << r.err;
  EXPECT_NE(r.out.find("\nqp tool_a/1 pid " + pid + " lqpn " + std::to_string(t.qpn_a) +
                       " type RC state RTS sent_pkts 10 sent_payload_bytes 10240 "),
            std::string::npos)
      << r.out;
  // Everything sent was acknowledged: no timer, and the oldest unacknowledged PSN is the next.
  EXPECT_NE(r.out.find(" timer_in_us -1 armed_in_us "), std::string::npos) << r.out;
  const auto field = [&](const std::string& name) {
    const std::size_t at = r.out.find(" " + name + " ", r.out.find("\nqp "));
    return at == std::string::npos ? std::string() : r.out.substr(at + name.size() + 2, 8);
  };
  EXPECT_FALSE(field("sq_psn").empty()) << r.out;
  EXPECT_EQ(field("sq_psn").substr(0, field("sq_psn").find(' ')),
            field("unacked_psn").substr(0, field("unacked_psn").find(' ')));

  cmd.json = true;
  r = run(cmd);
  EXPECT_EQ(r.status, kStatsExitOk) << r.err;
  EXPECT_EQ(
      r.out.rfind("[{\"ifname\":\"tool_a\",\"port\":1,\"pid\":" + pid + ",\"sent_pkts\":10,", 0),
      0u)
      << r.out;
  EXPECT_NE(r.out.find("\"qps\":[{\"lqpn\":" + std::to_string(t.qpn_a) +
                       ",\"type\":\"RC\",\"state\":\"RTS\",\"sent_pkts\":10,"),
            std::string::npos);
  EXPECT_EQ(r.out.substr(r.out.size() - 3), "}]\n");

  // The receiving side counted the same packets.
  cmd = StatsCommand{};
  cmd.device = "tool_b";
  cmd.timeout = Duration::s(20);
  r = run(cmd);
  EXPECT_EQ(r.status, kStatsExitOk) << r.err;
  EXPECT_NE(r.out.find(" rcvd_pkts 10 "), std::string::npos) << r.out;
}

// A polling-mode device whose application never progresses cannot answer: exit 2, and why.
TEST(StatsCmd, ADeviceThatDoesNotProgressIsReported) {
  const char* const dev_ip = test::unique_ip();
  DeviceConfig cfg;
  cfg.name = "tool_idle";
  cfg.ip = v4(dev_ip);
  auto d = engine::UdpDevice::open(cfg);
  ASSERT_TRUE(d.ok()) << d.error();
  StatsCommand cmd;
  cmd.device = "tool_idle";
  cmd.timeout = Duration::ms(100);
  const CmdRun r = run(cmd);
  EXPECT_EQ(r.status, kStatsExitNoAnswer);
  EXPECT_NE(r.err.find("tool_idle (pid " + std::to_string(::getpid()) + "): no answer"),
            std::string::npos)
      << r.err;
}

// A polling-mode device answers from its application's wait()/progress() calls.
TEST(StatsCmd, APollingDeviceAnswersWhileItsApplicationWaits) {
  const char* const dev_ip = test::unique_ip();
  DeviceConfig cfg;
  cfg.name = "tool_poll";
  cfg.ip = v4(dev_ip);
  auto d = engine::UdpDevice::open(cfg);
  ASSERT_TRUE(d.ok()) << d.error();
  engine::UdpDevice& dev = *d.value();
  std::atomic<bool> done{false};
  Result<std::string, std::string> answer = Err{std::string("not asked")};
  std::thread client([&] {
    answer = query_stats_endpoint(dev.stats_socket_name(), "json", Duration::s(20));
    done.store(true);
  });
  const Instant give_up = engine::UdpDevice::now() + Duration::s(30);  // hang guard only
  while (!done.load() && engine::UdpDevice::now() < give_up) dev.wait(Duration::ms(10));
  client.join();
  ASSERT_TRUE(answer.ok()) << answer.error();
  EXPECT_EQ(answer.value().rfind("{\"ifname\":\"tool_poll\",\"port\":1,", 0), 0u) << answer.value();
  EXPECT_EQ(dev.stats().stats_requests, 1u);
  auto bad = query_stats_endpoint("uroce/0/nobody", "text", Duration::ms(10));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("cannot reach the device"), std::string::npos) << bad.error();
}

// The `uroce` binary, another process, reads this process's device.
TEST(StatsCmd, UroceStatsCommandFromAnotherProcess) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Traffic t;
  ASSERT_NO_FATAL_FAILURE(t.setup("tool_c", a_ip, "tool_d", b_ip));
  const std::string command = std::string(UROCE_BIN) + " stats -d tool_c --qp 2>&1";
  std::FILE* p = ::popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_EQ(out.rfind("link tool_c/1 pid " + std::to_string(::getpid()) + " sent_pkts 10 ", 0), 0u)
      << out;
  EXPECT_NE(out.find("\nqp tool_c/1 "), std::string::npos) << out;
}

}  // namespace
}  // namespace uroce::tools

// The UdpDevice's background progress thread, completion channels, async event fd, draining
// close() and counters, over real UDP sockets on loopback. Waits are bounded by generous
// deadlines only as hang guards; nothing here depends on timing.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <csignal>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "device/stats.h"
#include "device/two_devices.h"
#include "device/udp_device.h"

namespace uroce::engine {
namespace {

using test::connect;
using test::kAllAccess;
using test::make_side;
using test::named_counter;
using test::pair_up;
using test::Side;
using test::SideOptions;
using test::v4;
using test::write_wr;

// Room for the deep queues these tests run: 256 WRs in flight, 4 MiB of registered memory.
SideOptions deep() {
  SideOptions o;
  o.cqe = 1024;
  o.max_send_wr = 256;
  o.buf_bytes = 4 << 20;
  return o;
}

// Thread mode: polls `s`'s CQ through the lock until `n` completions arrived (or 20 s pass).
std::vector<Wc> collect(Side& s, std::size_t n) {
  std::vector<Wc> got;
  const Instant give_up = UdpDevice::now() + Duration::s(20);
  while (got.size() < n && UdpDevice::now() < give_up) {
    Wc wcs[32];
    Result<std::size_t, Errc> k = Err{Errc::kInvalidArgument};
    {
      auto d = s.dev->lock();
      k = d->poll_cq(s.cq, wcs);
    }
    if (!k.ok()) break;
    if (k.value() == 0) {
      std::this_thread::yield();
      continue;
    }
    got.insert(got.end(), wcs, wcs + k.value());
  }
  return got;
}

void fill(Side& s, std::size_t off, std::size_t len, unsigned seed) {
  for (std::size_t i = 0; i < len; ++i) s.buf[off + i] = static_cast<std::byte>(i * seed + 1);
}

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

// The target's owner opens its device, starts the thread and then never touches it again: the
// initiator's WRITE, READ and atomic complete anyway.
TEST(UdpDeviceThread, OneSidedOperationsCompleteWhileTheTargetDoesNothing) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  make_side(a, a_ip, deep());
  make_side(b, b_ip, deep());
  pair_up(a, b);
  fill(a, 0, 20000, 7);
  fill(b, 500000, 20000, 3);
  std::uint64_t counter = 100;
  std::memcpy(b.buf.data() + 900000, &counter, 8);
  ASSERT_EQ(b.dev->start_progress_thread(), "");
  ASSERT_EQ(a.dev->start_progress_thread(), "");

  const Sge wsge{a.va(0), 20000, a.mr.lkey};
  const Sge rsge{a.va(100000), 20000, a.mr.lkey};
  const Sge asge{a.va(300000), 8, a.mr.lkey};
  std::vector<SendWr> wrs;
  wrs.push_back(write_wr(1, wsge, b, 400000));
  SendWr rd = write_wr(2, rsge, b, 500000);
  rd.opcode = WrOpcode::kRdmaRead;
  wrs.push_back(rd);
  SendWr at;
  at.wr_id = 3;
  at.opcode = WrOpcode::kAtomicFetchAndAdd;
  at.sg_list = std::span(&asge, 1);
  at.atomic.remote_addr = b.va(900000);
  at.atomic.rkey = b.mr.rkey;
  at.atomic.compare_add = 5;
  at.send_flags = kSendSignaled;
  wrs.push_back(at);
  {
    auto d = a.dev->lock();
    ASSERT_EQ(d->post_send(a.qp, wrs, nullptr), Errc::kOk);
  }
  const auto wcs = collect(a, 3);
  ASSERT_EQ(wcs.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wcs[i].wr_id, i + 1);
    EXPECT_EQ(wcs[i].status, WcStatus::kSuccess) << wc_status_name(wcs[i].status);
  }
  auto peer_guard = b.dev->lock();  // orders these reads after b's progress thread's writes
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data() + 400000, 20000), 0);
  EXPECT_EQ(std::memcmp(a.buf.data() + 100000, b.buf.data() + 500000, 20000), 0);
  std::uint64_t orig = 0;
  std::memcpy(&orig, a.buf.data() + 300000, 8);
  EXPECT_EQ(orig, 100u);
  std::memcpy(&counter, b.buf.data() + 900000, 8);
  EXPECT_EQ(counter, 105u);
}

// The target is another process that opens its device, starts the progress thread and then
// blocks in read() until the initiator is done: its WRITE lands and its READ returns the
// target's bytes without the target's application running at all.
TEST(UdpDeviceThread, TargetProcessThatOnlyKeepsTheDeviceOpen) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a;
  make_side(a, a_ip, deep());
  int to_parent[2], to_child[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  ASSERT_EQ(::pipe(to_child), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The target. Exit codes: 0 the WRITE's data arrived, 2 setup failed, 3 wrong data.
    ::close(to_parent[0]);
    ::close(to_child[1]);
    Side b;
    make_side(b, b_ip, deep());
    if (::testing::Test::HasFatalFailure() || !b.dev) ::_exit(2);
    fill(b, 0, 50000, 11);
    connect(b, a, a_ip);
    if (::testing::Test::HasFatalFailure()) ::_exit(2);
    if (!b.dev->start_progress_thread().empty()) ::_exit(2);
    const std::uint64_t info[3] = {b.qpn, b.mr.rkey, b.va(0)};
    if (::write(to_parent[1], info, sizeof info) != sizeof info) ::_exit(2);
    char done = 0;
    if (::read(to_child[0], &done, 1) != 1) ::_exit(2);  // the application does nothing
    std::vector<std::byte> expect(30000);
    for (std::size_t i = 0; i < expect.size(); ++i) expect[i] = static_cast<std::byte>(i * 7 + 1);
    bool ok = false;
    {
      // The lock orders this read after the progress thread's write of the data (the pipe
      // tells when, but it is not a synchronization the thread's memory model can see).
      auto d = b.dev->lock();
      ok = std::memcmp(b.buf.data() + 100000, expect.data(), expect.size()) == 0;
    }
    b.dev.reset();
    ::_exit(ok ? 0 : 3);
  }
  ::close(to_parent[1]);
  ::close(to_child[0]);
  std::uint64_t info[3] = {};
  ASSERT_EQ(::read(to_parent[0], info, sizeof info), static_cast<ssize_t>(sizeof info));
  Side peer;  // what the initiator knows of the target
  peer.qpn = static_cast<std::uint32_t>(info[0]);
  connect(a, peer, b_ip);
  ASSERT_EQ(a.dev->start_progress_thread(), "");
  fill(a, 0, 30000, 7);
  const Sge wsge{a.va(0), 30000, a.mr.lkey};
  const Sge rsge{a.va(200000), 50000, a.mr.lkey};
  SendWr w;
  w.wr_id = 1;
  w.opcode = WrOpcode::kRdmaWrite;
  w.sg_list = std::span(&wsge, 1);
  w.rdma = {info[2] + 100000, static_cast<std::uint32_t>(info[1])};
  w.send_flags = kSendSignaled;
  SendWr r = w;
  r.wr_id = 2;
  r.opcode = WrOpcode::kRdmaRead;
  r.sg_list = std::span(&rsge, 1);
  r.rdma = {info[2], static_cast<std::uint32_t>(info[1])};
  const SendWr wrs[2] = {w, r};
  ASSERT_EQ(a.dev->lock()->post_send(a.qp, wrs, nullptr), Errc::kOk);
  const auto wcs = collect(a, 2);
  const char done = 1;
  EXPECT_EQ(::write(to_child[1], &done, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[1].status, WcStatus::kSuccess);
  std::vector<std::byte> expect(50000);
  for (std::size_t i = 0; i < expect.size(); ++i) expect[i] = static_cast<std::byte>(i * 11 + 1);
  EXPECT_EQ(std::memcmp(a.buf.data() + 200000, expect.data(), expect.size()), 0);
  ::close(to_parent[0]);
  ::close(to_child[1]);
}

// A polling-mode initiator against a thread-mode target: the two modes interoperate.
TEST(UdpDeviceThread, PollingInitiatorAgainstThreadTarget) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  make_side(a, a_ip, deep());
  make_side(b, b_ip, deep());
  pair_up(a, b);
  fill(a, 0, 8000, 5);
  ASSERT_EQ(b.dev->start_progress_thread(), "");
  const Sge sge{a.va(0), 8000, a.mr.lkey};
  const SendWr w = write_wr(11, sge, b, 1000);
  ASSERT_EQ(a.dev->device().post_send(a.qp, std::span(&w, 1), nullptr), Errc::kOk);
  std::vector<Wc> got;
  const Instant give_up = UdpDevice::now() + Duration::s(20);
  while (got.empty() && UdpDevice::now() < give_up) {
    a.dev->wait(Duration::ms(10));
    Wc wc[4];
    auto k = a.dev->device().poll_cq(a.cq, wc);
    ASSERT_TRUE(k.ok());
    got.insert(got.end(), wc, wc + k.value());
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, WcStatus::kSuccess);
  // The progress counters (`uroce stats`) say who ran the rounds: a's application (polling
  // mode: no thread), and b's thread, which received the WRITE.
  const DeviceStats sa = a.dev->stats();
  const DeviceStats sb = b.dev->stats();
  EXPECT_GT(sa.sched.app_rounds, 0u);
  EXPECT_EQ(sa.sched.thread_rounds, 0u);
  EXPECT_EQ(sa.sched.lease_expiries, 0u);
  EXPECT_GT(sb.sched.thread_rounds, 0u);
  EXPECT_GT(sb.thread_rx_pkts, 0u);
  EXPECT_EQ(named_counter(sa.device_counters(), "app_rounds"), sa.sched.app_rounds);
  EXPECT_EQ(named_counter(sb.device_counters(), "thread_rounds"), sb.sched.thread_rounds);
  auto peer_guard = b.dev->lock();  // orders these reads after b's progress thread's writes
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data() + 1000, 8000), 0);
}

// A WR posted while the QP is in SQD goes when the QP returns to RTS: modify_qp() rings the
// doorbell, or an engine that only sends for QPs it was told about (and a progress thread that
// sleeps until told) would never send it. The initiator polls, so the order is exact.
TEST(UdpDeviceThread, WrPostedInSqdGoesAfterResume) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  make_side(a, a_ip, deep());
  make_side(b, b_ip, deep());
  pair_up(a, b);
  fill(a, 0, 1000, 3);
  ASSERT_EQ(b.dev->start_progress_thread(), "");
  Device& dev = a.dev->device();
  QpAttr attr;
  attr.qp_state = QpState::kSqd;
  ASSERT_EQ(dev.modify_qp(a.qp, attr, kQpState), Errc::kOk);
  const Sge sge{a.va(0), 1000, a.mr.lkey};
  const SendWr w = write_wr(31, sge, b, 0);
  ASSERT_EQ(dev.post_send(a.qp, std::span(&w, 1), nullptr), Errc::kOk);
  EXPECT_FALSE(a.dev->progress());  // SQD: nothing may start
  attr.qp_state = QpState::kRts;
  ASSERT_EQ(dev.modify_qp(a.qp, attr, kQpState), Errc::kOk);
  std::vector<Wc> got;
  const Instant give_up = UdpDevice::now() + Duration::s(20);
  while (got.empty() && UdpDevice::now() < give_up) {
    a.dev->wait(Duration::ms(10));
    Wc wc[2];
    auto k = dev.poll_cq(a.cq, wc);
    ASSERT_TRUE(k.ok());
    got.insert(got.end(), wc, wc + k.value());
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, WcStatus::kSuccess);
  auto peer_guard = b.dev->lock();
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data(), 1000), 0);
}

TEST(UdpDeviceThread, StartTwiceOrAfterCloseIsAClearError) {
  const char* const a_ip = test::unique_ip();
  Side a;
  make_side(a, a_ip, deep());
  ASSERT_EQ(a.dev->start_progress_thread(), "");
  EXPECT_NE(a.dev->start_progress_thread(), "");
  a.dev->stop_progress_thread();
  EXPECT_FALSE(a.dev->has_progress_thread());
  a.dev->close();
  EXPECT_EQ(a.dev->start_progress_thread(), "the device is closed");
  EXPECT_FALSE(a.dev->progress());
}

// The channel's fd turns readable after the armed CQ gets a completion; get_cq_event() names
// that CQ; the fd is quiet again once the event is taken.
void check_completion_channel(bool thread_mode) {
  Side a, b;
  SideOptions oa = deep();
  oa.make_channel = true;
  make_side(a, test::unique_ip(), oa);
  make_side(b, test::unique_ip(), deep());
  pair_up(a, b);
  ASSERT_EQ(b.dev->start_progress_thread(), "");
  if (thread_mode) {
    ASSERT_EQ(a.dev->start_progress_thread(), "");
  }
  const std::uint64_t channel = 1;  // the first channel of the device
  const int fd = a.dev->comp_channel_fd(channel);
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(readable(fd, 0));
  auto none = a.dev->get_cq_event(channel, Duration::zero());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none.value().has_value());

  const Sge sge{a.va(0), 3000, a.mr.lkey};
  const SendWr w = write_wr(21, sge, b, 0);
  {
    auto d = a.dev->lock();
    ASSERT_EQ(d->req_notify_cq(a.cq, false), Errc::kOk);
    ASSERT_EQ(d->post_send(a.qp, std::span(&w, 1), nullptr), Errc::kOk);
  }
  if (thread_mode) {
    EXPECT_TRUE(readable(fd, 20000));  // hang guard only
  } else {
    const Instant give_up = UdpDevice::now() + Duration::s(20);
    while (!readable(fd, 0) && UdpDevice::now() < give_up) a.dev->wait(Duration::ms(10));
    EXPECT_TRUE(readable(fd, 0));
  }
  auto ev = a.dev->get_cq_event(channel, Duration::s(20));
  ASSERT_TRUE(ev.ok());
  ASSERT_TRUE(ev.value().has_value());
  EXPECT_EQ(*ev.value(), a.cq);
  EXPECT_FALSE(readable(fd, 0));
  EXPECT_EQ(a.dev->unacked_cq_events(channel, a.cq), 1u);
  EXPECT_EQ(a.dev->destroy_comp_channel(channel), Errc::kBusy);
  EXPECT_EQ(a.dev->ack_cq_events(channel, a.cq, 2), Errc::kInvalidArgument);
  EXPECT_EQ(a.dev->ack_cq_events(channel, a.cq, 1), Errc::kOk);
  EXPECT_EQ(a.dev->unacked_cq_events(channel, a.cq), 0u);
  Wc wc[2];
  auto k = a.dev->lock()->poll_cq(a.cq, wc);
  ASSERT_TRUE(k.ok());
  ASSERT_EQ(k.value(), 1u);
  EXPECT_EQ(wc[0].wr_id, 21u);

  // Not re-armed: the next completion raises no event; re-armed, it does (blocking get).
  const SendWr w2 = write_wr(22, sge, b, 8192);
  ASSERT_EQ(a.dev->lock()->post_send(a.qp, std::span(&w2, 1), nullptr), Errc::kOk);
  std::vector<Wc> got;
  const Instant give_up = UdpDevice::now() + Duration::s(20);
  while (got.empty() && UdpDevice::now() < give_up) {
    if (!thread_mode) a.dev->wait(Duration::ms(10));
    auto n = a.dev->lock()->poll_cq(a.cq, wc);
    ASSERT_TRUE(n.ok());
    got.insert(got.end(), wc, wc + n.value());
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(readable(fd, 0));
  const SendWr w3 = write_wr(23, sge, b, 16384);
  {
    auto d = a.dev->lock();
    ASSERT_EQ(d->req_notify_cq(a.cq, false), Errc::kOk);
    ASSERT_EQ(d->post_send(a.qp, std::span(&w3, 1), nullptr), Errc::kOk);
  }
  auto ev3 = a.dev->get_cq_event(channel, Duration::s(20));  // drives progress in polling mode
  ASSERT_TRUE(ev3.ok());
  ASSERT_TRUE(ev3.value().has_value());
  EXPECT_EQ(*ev3.value(), a.cq);
  EXPECT_EQ(a.dev->ack_cq_events(channel, a.cq, 1), Errc::kOk);
  EXPECT_EQ(a.dev->destroy_comp_channel(channel), Errc::kOk);
  EXPECT_EQ(a.dev->comp_channel_fd(channel), -1);
  EXPECT_FALSE(a.dev->get_cq_event(channel, Duration::zero()).ok());
}

// A process-directed signal ends a blocked get_cq_event() with kInterrupted (EINTR from the
// drop-in), as it ends libibverbs' read() of the channel's fd: programs stop timed loops that
// way (qperf's SIGALRM). The progress thread takes no signal, so the application's thread does.
void on_alarm(int) {}
TEST(UdpDeviceThread, ASignalEndsABlockedCqEventWait) {
  const char* const a_ip = test::unique_ip();
  Side a;
  SideOptions oa = deep();
  oa.make_channel = true;
  make_side(a, a_ip, oa);
  ASSERT_EQ(a.dev->start_progress_thread(), "");
  struct sigaction sa {};
  sa.sa_handler = on_alarm;  // no SA_RESTART
  struct sigaction old {};
  ASSERT_EQ(::sigaction(SIGUSR1, &sa, &old), 0);
  std::atomic<bool> done{false};
  // Signals the waiting thread until it has returned (a signal that lands before the wait
  // begins is simply sent again).
  std::thread kicker([&] {
    sigset_t mine;
    sigemptyset(&mine);
    sigaddset(&mine, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &mine, nullptr);  // not for this thread: the process's other two
    while (!done.load()) {
      ::kill(::getpid(), SIGUSR1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  auto r = a.dev->get_cq_event(1, Duration::s(30));
  done = true;
  kicker.join();
  ::sigaction(SIGUSR1, &old, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), Errc::kInterrupted);
}

TEST(UdpDeviceThread, CompletionChannelInThreadMode) { check_completion_channel(true); }
TEST(UdpDeviceThread, CompletionChannelInPollingMode) { check_completion_channel(false); }

// rping's pattern, through the engine: a CQ thread of the application waits for completion
// events on a blocking channel fd (the drop-in makes it blocking, as libibverbs' is) and polls
// the CQ after each, while the progress thread completes the work the main thread posts. The
// progress thread signals each event after its round has let go of the device's mutex; a CQ
// thread that takes the event before that signal must cancel it, not read the fd (a read of
// an fd nobody wrote blocks, holding the channel's mutex the signaller needs: a deadlock that
// stopped the whole device). A watchdog turns a hang into a failure.
TEST(UdpDeviceThread, ACqThreadOnABlockingChannelGetsEveryEventWhileTheThreadCompletesWork) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  SideOptions oa = deep();
  oa.make_channel = true;
  make_side(a, a_ip, oa);
  make_side(b, b_ip, deep());
  pair_up(a, b);
  ASSERT_EQ(b.dev->start_progress_thread(), "");
  ASSERT_EQ(a.dev->start_progress_thread(), "");
  const std::uint64_t channel = 1;  // the first channel of the device
  const int fd = a.dev->comp_channel_fd(channel);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK), 0);
  ASSERT_EQ(a.dev->lock()->req_notify_cq(a.cq, false), Errc::kOk);

  constexpr std::uint64_t kWrites = 20000;
  constexpr std::uint64_t kWindow = 8;
  std::atomic<std::uint64_t> completed{0};
  std::atomic<bool> failed{false};
  std::atomic<bool> done{false};
  std::thread cq_thread([&] {
    while (completed.load() < kWrites && !failed.load()) {
      auto ev = a.dev->get_cq_event(channel, Duration::s(20));
      if (!ev.ok() || !ev.value().has_value()) {
        failed = true;
        break;
      }
      a.dev->ack_cq_events(channel, *ev.value(), 1);
      auto d = a.dev->lock();
      if (d->req_notify_cq(a.cq, false) != Errc::kOk) failed = true;
      Wc wcs[16];
      for (;;) {
        auto k = d->poll_cq(a.cq, wcs);
        if (!k.ok()) failed = true;
        if (!k.ok() || k.value() == 0) break;
        for (std::size_t i = 0; i < k.value(); ++i) {
          if (wcs[i].status != WcStatus::kSuccess) failed = true;
        }
        completed += k.value();
      }
    }
    done = true;
  });
  std::thread watchdog([&] {
    const Instant give_up = UdpDevice::now() + Duration::s(60);
    while (!done.load() && UdpDevice::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!done.load()) {
      std::fprintf(stderr, "the CQ thread hangs after %llu of %llu completions\n",
                   static_cast<unsigned long long>(completed.load()),
                   static_cast<unsigned long long>(kWrites));
      std::abort();
    }
  });
  const Sge sge{a.va(0), 64, a.mr.lkey};
  for (std::uint64_t i = 0; i < kWrites && !failed.load(); ++i) {
    while (i - completed.load() >= kWindow && !failed.load() && !done.load()) {
      std::this_thread::yield();
    }
    const SendWr w = write_wr(i, sge, b, 0);
    // Not ASSERT: returning here would destroy the joinable threads (std::terminate).
    const Errc e = a.dev->lock()->post_send(a.qp, std::span(&w, 1), nullptr);
    EXPECT_EQ(e, Errc::kOk) << "write " << i;
    if (e != Errc::kOk) {
      failed = true;
      break;
    }
  }
  cq_thread.join();
  watchdog.join();
  EXPECT_FALSE(failed.load());
  EXPECT_EQ(completed.load(), kWrites);
}

// A CQ of one entry overflows: the async event fd turns readable and get_async_event() gives
// the CQ error for that CQ.
TEST(UdpDeviceThread, AsyncEventFdReportsCqOverflow) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  SideOptions oa = deep();
  oa.cqe = 1;
  make_side(a, a_ip, oa);
  make_side(b, b_ip, deep());
  pair_up(a, b);
  ASSERT_EQ(b.dev->start_progress_thread(), "");
  ASSERT_EQ(a.dev->start_progress_thread(), "");
  const int fd = a.dev->async_event_fd();
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(readable(fd, 0));
  EXPECT_FALSE(a.dev->get_async_event().has_value());
  const Sge sge{a.va(0), 64, a.mr.lkey};
  std::vector<SendWr> wrs;
  for (std::uint64_t i = 0; i < 3; ++i) wrs.push_back(write_wr(i, sge, b, i * 64));
  ASSERT_EQ(a.dev->lock()->post_send(a.qp, wrs, nullptr), Errc::kOk);
  EXPECT_TRUE(readable(fd, 20000));  // hang guard only
  auto ev = a.dev->get_async_event(Duration::s(20));
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->type, AsyncEventType::kCqErr);
  EXPECT_EQ(ev->cq, a.cq);
  EXPECT_FALSE(readable(fd, 0));
  Wc wc[4];
  EXPECT_FALSE(a.dev->lock()->poll_cq(a.cq, wc).ok());  // the CQ is in error
}

// A WRITE with a bad rkey: the target's QP raises an access error (rxe:
// IB_EVENT_QP_ACCESS_ERR) that its application, only waiting on the async fd, receives.
TEST(UdpDeviceThread, AsyncEventFdReportsAQpAccessError) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  make_side(a, a_ip, deep());
  make_side(b, b_ip, deep());
  pair_up(a, b);
  ASSERT_EQ(b.dev->start_progress_thread(), "");
  ASSERT_EQ(a.dev->start_progress_thread(), "");
  const Sge sge{a.va(0), 64, a.mr.lkey};
  SendWr w = write_wr(41, sge, b, 0);
  w.rdma.rkey = b.mr.rkey ^ 0x80;  // no such key
  ASSERT_EQ(a.dev->lock()->post_send(a.qp, std::span(&w, 1), nullptr), Errc::kOk);
  EXPECT_TRUE(readable(b.dev->async_event_fd(), 20000));  // hang guard only
  auto ev = b.dev->get_async_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->type, AsyncEventType::kQpAccessErr);
  EXPECT_EQ(ev->qp, b.qp);
  EXPECT_EQ(ev->qp_num, b.qpn);
  const auto wcs = collect(a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
  const DeviceStats sa = a.dev->stats();
  const DeviceStats sb = b.dev->stats();
  EXPECT_EQ(sb.qps[0].counters.other_naks_sent, 1u);
  EXPECT_EQ(sa.qps[0].counters.other_naks_received, 1u);
}

// A pair whose side `a` has a CQ of one entry and no progress thread (it polls), `b` its
// progress thread.
void one_entry_cq_pair(Side& a, Side& b) {
  SideOptions oa = deep();
  oa.cqe = 1;
  make_side(a, test::unique_ip(), oa);
  make_side(b, test::unique_ip(), deep());
  pair_up(a, b);
  ASSERT_EQ(b.dev->start_progress_thread(), "");
}

// Three WRITEs overflow a's one-entry CQ; a's progress runs until its async fd is readable.
void overflow_until_async_fd_readable(Side& a, Side& b) {
  const Sge sge{a.va(0), 64, a.mr.lkey};
  std::vector<SendWr> wrs;
  for (std::uint64_t i = 0; i < 3; ++i) wrs.push_back(write_wr(i, sge, b, i * 64));
  ASSERT_EQ(a.dev->device().post_send(a.qp, wrs, nullptr), Errc::kOk);
  const int fd = a.dev->async_event_fd();
  const Instant give_up = UdpDevice::now() + Duration::s(20);
  while (!readable(fd, 0) && UdpDevice::now() < give_up) a.dev->wait(Duration::ms(10));
  ASSERT_TRUE(readable(fd, 0));
}

// Polling mode: the async fd becomes readable during progress().
TEST(UdpDeviceThread, AsyncEventFdInPollingMode) {
  Side a, b;
  ASSERT_NO_FATAL_FAILURE(one_entry_cq_pair(a, b));
  ASSERT_NO_FATAL_FAILURE(overflow_until_async_fd_readable(a, b));
  const int fd = a.dev->async_event_fd();
  auto ev = a.dev->get_async_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->type, AsyncEventType::kCqErr);
  EXPECT_FALSE(readable(fd, 0));
}

// The async fd as the drop-in hands it out: the application's own file, blocking. An
// application that reads it itself (not through get_async_event) empties it; taking the event
// afterwards must still return, not block the device in read() with its mutex held.
TEST(UdpDeviceThread, AnAsyncFdTheApplicationEmptiedDoesNotBlockTheDevice) {
  Side a, b;
  ASSERT_NO_FATAL_FAILURE(one_entry_cq_pair(a, b));
  const int fd = a.dev->async_event_fd();
  const int flags = ::fcntl(fd, F_GETFL);
  ASSERT_GE(flags, 0);
  ASSERT_EQ(::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK), 0);
  ASSERT_NO_FATAL_FAILURE(overflow_until_async_fd_readable(a, b));
  std::uint64_t v = 0;
  ASSERT_EQ(::read(fd, &v, sizeof v), static_cast<ssize_t>(sizeof v));  // the application's read
  auto taken = std::async(std::launch::async, [&] { return a.dev->get_async_event(); });
  ASSERT_EQ(taken.wait_for(std::chrono::seconds(20)), std::future_status::ready);  // hang guard
  const auto ev = taken.get();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->type, AsyncEventType::kCqErr);
  EXPECT_FALSE(readable(fd, 0));
}

// close() right after posting many WRs: every WR completes before the socket closes, the peer
// has every byte, and the completions can be polled after close().
TEST(UdpDeviceThread, CloseFlushesEveryPostedWr) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  SideOptions oa = deep();
  oa.capture = (std::filesystem::temp_directory_path() /
                ("uroce_thread_test_" + std::to_string(::getpid()) + ".pcap"))
                   .string();
  make_side(a, a_ip, oa);
  make_side(b, b_ip, deep());
  pair_up(a, b);
  constexpr std::size_t kWrs = 200, kLen = 4096;
  fill(a, 0, kWrs * kLen, 13);
  ASSERT_EQ(b.dev->start_progress_thread(), "");
  ASSERT_EQ(a.dev->start_progress_thread(), "");
  std::vector<Sge> sges(kWrs);
  std::vector<SendWr> wrs;
  for (std::size_t i = 0; i < kWrs; ++i) {
    sges[i] = Sge{a.va(i * kLen), static_cast<std::uint32_t>(kLen), a.mr.lkey};
    wrs.push_back(write_wr(i, sges[i], b, i * kLen));
  }
  ASSERT_EQ(a.dev->lock()->post_send(a.qp, wrs, nullptr), Errc::kOk);
  const CloseResult r = a.dev->close(Duration::s(20));
  EXPECT_TRUE(r.drained);
  EXPECT_EQ(r.outstanding_send_wqes, 0u);
  EXPECT_FALSE(r.tx_pending);
  EXPECT_TRUE(a.dev->is_closed());
  std::vector<Wc> got(kWrs + 1);
  auto k = a.dev->device().poll_cq(a.cq, got);
  ASSERT_TRUE(k.ok());
  ASSERT_EQ(k.value(), kWrs);
  for (std::size_t i = 0; i < kWrs; ++i) {
    EXPECT_EQ(got[i].wr_id, i);
    EXPECT_EQ(got[i].status, WcStatus::kSuccess);
  }
  auto peer_guard = b.dev->lock();  // orders these reads after b's progress thread's writes
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data(), kWrs * kLen), 0);
  // After close: counters stay readable, nothing more is sent.
  const DeviceStats s = a.dev->stats();
  EXPECT_GE(s.datapath.tx_packets, kWrs * 4);
  EXPECT_EQ(a.dev->close().drained, true);  // idempotent
  // The capture was flushed and closed: it holds every packet sent and received.
  auto scan = capture::for_each_record(oa.capture, [](const capture::PcapRecord&) {});
  ASSERT_TRUE(scan.ok()) << scan.error();
  EXPECT_EQ(scan->records, s.datapath.tx_packets + s.datapath.rx_packets);
  std::filesystem::remove(oa.capture);
}

// A WR that cannot be delivered ends within its retry budget: close() waits for that failure.
TEST(UdpDeviceThread, CloseWaitsForRetryExceeded) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  const char* const nobody_ip = test::unique_ip();
  Side a, b;
  make_side(a, a_ip, deep());
  make_side(b, b_ip, deep());
  // Nobody at nobody_ip; ACK timeout about 1 ms, 2 retries.
  connect(a, b, nobody_ip, 8, 2);
  ASSERT_EQ(a.dev->start_progress_thread(), "");
  const Sge sge{a.va(0), 100, a.mr.lkey};
  const SendWr w = write_wr(5, sge, b, 0);
  ASSERT_EQ(a.dev->lock()->post_send(a.qp, std::span(&w, 1), nullptr), Errc::kOk);
  const CloseResult r = a.dev->close(Duration::s(20));
  EXPECT_TRUE(r.drained);
  Wc wc[2];
  auto k = a.dev->device().poll_cq(a.cq, wc);
  ASSERT_TRUE(k.ok());
  ASSERT_EQ(k.value(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kRetryExcErr);
  const DeviceStats s = a.dev->stats();
  ASSERT_EQ(s.qps.size(), 1u);
  EXPECT_EQ(s.qps[0].counters.retry_exceeded, 1u);
  EXPECT_EQ(s.qps[0].counters.timeouts, 3u);  // the first send and 2 retries timed out
}

// A deadline shorter than the retry budget: close() gives up and says so.
TEST(UdpDeviceThread, CloseDeadlineIsBounded) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  const char* const nobody_ip = test::unique_ip();
  Side a, b;
  make_side(a, a_ip, deep());
  make_side(b, b_ip, deep());
  // ACK timeout 4.096 us * 2^20 (about 4 s), 7 retries: far beyond the deadline below.
  connect(a, b, nobody_ip, 20, 7);
  const Sge sge{a.va(0), 100, a.mr.lkey};
  const SendWr w = write_wr(6, sge, b, 0);
  ASSERT_EQ(a.dev->device().post_send(a.qp, std::span(&w, 1), nullptr), Errc::kOk);
  const CloseResult r = a.dev->close(Duration::ms(50));
  EXPECT_FALSE(r.drained);
  EXPECT_EQ(r.outstanding_send_wqes, 1u);
}

// RDMA READs of memory that the target's application rewrites all the time (legal: a NIC
// sends whatever it reads at that moment, with a CRC over those bytes). Every READ response
// must leave with the bytes its ICRC covers, or the initiator drops it (bad ICRC) and the READ
// only completes once a retry happens to go out unchanged, or fails when the retries run out.
// Before the datapath read each READ response's payload once (a copy, then the ICRC over the
// copy), sendmmsg sent bytes newer than the ICRC: here 142 of about 700 responses were dropped
// for their ICRC, and with retry_cnt 3 the first READ failed with RETRY_EXC_ERR.
TEST(UdpDeviceThread, ReadsOfMemoryTheTargetKeepsRewritingComplete) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  make_side(a, a_ip, deep());
  make_side(b, b_ip, deep());
  pair_up(a, b, 12);  // ACK timeout about 17 ms: recovers quickly from a spurious loss
  constexpr std::size_t kBytes = 65536;
  auto* words = reinterpret_cast<std::uint64_t*>(b.buf.data());
  ASSERT_EQ(b.dev->start_progress_thread(), "");
  ASSERT_EQ(a.dev->start_progress_thread(), "");
  // The target's application: rewrites the READ's source all the time (word stores, so that
  // the rewriting itself is well defined).
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (std::uint64_t v = 1; !stop.load(std::memory_order_relaxed); ++v) {
      for (std::size_t i = 0; i < kBytes / 8; ++i) {
        std::atomic_ref<std::uint64_t>(words[i]).store(v, std::memory_order_relaxed);
      }
    }
  });
  constexpr int kReads = 40;
  std::vector<Sge> sges;
  sges.reserve(kReads);
  std::vector<SendWr> wrs;
  for (int i = 0; i < kReads; ++i) {
    sges.push_back(Sge{a.va(static_cast<std::size_t>(i) * kBytes), kBytes, a.mr.lkey});
    SendWr rd = write_wr(static_cast<std::uint64_t>(i), sges.back(), b, 0);
    rd.opcode = WrOpcode::kRdmaRead;
    wrs.push_back(rd);
  }
  ASSERT_EQ(a.dev->lock()->post_send(a.qp, wrs, nullptr), Errc::kOk);
  const auto wcs = collect(a, kReads);
  stop = true;
  writer.join();
  ASSERT_EQ(wcs.size(), static_cast<std::size_t>(kReads));
  for (std::size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].wr_id, i);
    EXPECT_EQ(wcs[i].status, WcStatus::kSuccess) << wc_status_name(wcs[i].status);
  }
  const DeviceStats sa = a.dev->stats();
  const DeviceStats sb = b.dev->stats();
  EXPECT_EQ(sa.datapath.rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)], 0u);
  EXPECT_GE(sb.datapath.tx_snapshots, kReads * (kBytes / 4096));  // every response, any MTU
}

// The counters of a snapshot match the traffic: WRITEs of known size, one packet per MTU.
TEST(UdpDeviceThread, StatsMatchTraffic) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  SideOptions oa, ob;
  oa.name = "stats_a";
  ob.name = "stats_b";
  make_side(a, a_ip, oa);
  make_side(b, b_ip, ob);
  pair_up(a, b, 20);  // ACK timeout about 4 s: no retransmission to blur the counts
  ASSERT_EQ(b.dev->start_progress_thread(), "");
  ASSERT_EQ(a.dev->start_progress_thread(), "");
  // 10 WRITEs of 3 KiB at MTU 1024: 3 packets each, each WRITE acknowledged (AckReq on Last).
  const Sge sge{a.va(0), 3072, a.mr.lkey};
  std::vector<SendWr> wrs;
  for (std::uint64_t i = 0; i < 10; ++i) wrs.push_back(write_wr(i, sge, b, i * 4096));
  ASSERT_EQ(a.dev->lock()->post_send(a.qp, wrs, nullptr), Errc::kOk);
  ASSERT_EQ(collect(a, 10).size(), 10u);
  const DeviceStats sa = a.dev->stats();
  const DeviceStats sb = b.dev->stats();
  ASSERT_EQ(sa.qps.size(), 1u);
  EXPECT_EQ(sa.qps[0].counters.packets_sent, 30u);
  EXPECT_EQ(sa.qps[0].counters.bytes_sent, 30720u);
  EXPECT_EQ(sb.qps[0].counters.packets_received, 30u);
  EXPECT_EQ(sb.qps[0].counters.bytes_received, 30720u);
  EXPECT_EQ(sa.datapath.tx_packets, 30u);
  EXPECT_EQ(sb.engine.rx_packets, 30u);
  EXPECT_EQ(sb.datapath.tx_packets, sa.engine.rx_packets);  // every ACK arrived
  const NamedCounters da = sa.device_counters();
  EXPECT_EQ(named_counter(da, "sent_pkts"), 30u);
  EXPECT_EQ(named_counter(da, "rcvd_pkts"), sa.engine.rx_packets);
  EXPECT_EQ(named_counter(da, "retry_exceeded_err"), 0u);
  EXPECT_EQ(named_counter(da, "icrc_err"), 0u);
  EXPECT_EQ(named_counter(da, "qps"), 1u);
  EXPECT_EQ(named_counter(sb.device_counters(), "rcvd_pkts"), 30u);

  // The same counters through the stats endpoint, as another process would ask.
  ASSERT_EQ(a.dev->stats_socket_name(), "uroce/" + std::to_string(::getpid()) + "/stats_a");
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un self{};
  self.sun_family = AF_UNIX;
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&self), sizeof(sa_family_t)), 0);
  sockaddr_un to{};
  to.sun_family = AF_UNIX;
  const std::string& name = a.dev->stats_socket_name();
  std::memcpy(to.sun_path + 1, name.data(), name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  const std::string req = "text qp";
  ASSERT_EQ(::sendto(fd, req.data(), req.size(), 0, reinterpret_cast<const sockaddr*>(&to), len),
            static_cast<ssize_t>(req.size()));
  ASSERT_TRUE(readable(fd, 20000));
  char buf[65536];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  ::close(fd);
  ASSERT_GT(n, 1);
  EXPECT_EQ(buf[0], '.');
  const std::string text(buf + 1, static_cast<std::size_t>(n) - 1);
  EXPECT_NE(text.find("link stats_a/1 pid " + std::to_string(::getpid()) + " sent_pkts 30 "),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("qp stats_a/1 pid " + std::to_string(::getpid()) + " lqpn " +
                std::to_string(a.qpn) + " type RC state RTS sent_pkts 30 sent_payload_bytes 30720"),
      std::string::npos)
      << text;
  EXPECT_EQ(a.dev->stats().stats_requests, 1u);
}

// Two devices of one name in one process get distinct endpoints.
TEST(UdpDeviceThread, StatsEndpointNamesAreUnique) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  SideOptions o = deep();
  o.name = "twin";
  make_side(a, a_ip, o);
  make_side(b, b_ip, o);
  const std::string base = "uroce/" + std::to_string(::getpid()) + "/twin";
  EXPECT_EQ(a.dev->stats_socket_name(), base);
  EXPECT_EQ(b.dev->stats_socket_name(), base + "~2");
}

// An application thread posting and another polling, through the lock, while both progress
// threads run: every WR completes once, in order, and the data is right. (Run under
// ThreadSanitizer too: see the report of the engine-threads branch.)
TEST(UdpDeviceThread, StressPostAndPollAgainstTheProgressThread) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  SideOptions o = deep();
  o.max_send_wr = 64;
  o.cqe = 4096;
  make_side(a, a_ip, o);
  make_side(b, b_ip, o);
  pair_up(a, b);
  constexpr std::uint64_t kTotal = 5000;
  constexpr std::uint32_t kLen = 256;
  fill(a, 0, 64 * kLen, 17);
  ASSERT_EQ(b.dev->start_progress_thread(), "");
  ProgressThreadOptions po;
  po.spin = Duration::us(50);  // exercise the busy-poll path too
  po.tx_budget = 8;            // many short rounds: more lock hand-overs
  ASSERT_EQ(a.dev->start_progress_thread(po), "");

  std::atomic<std::uint64_t> completed{0};
  std::atomic<bool> failed{false};
  std::thread poster([&] {
    std::uint64_t posted = 0;
    const Instant give_up = UdpDevice::now() + Duration::s(60);
    while (posted < kTotal && !failed.load() && UdpDevice::now() < give_up) {
      if (posted - completed.load() >= 64) {
        std::this_thread::yield();
        continue;
      }
      const std::size_t slot = posted % 64;
      const Sge sge{a.va(slot * kLen), kLen, a.mr.lkey};
      const SendWr w = write_wr(posted, sge, b, 1'000'000 + slot * kLen);
      if (a.dev->lock()->post_send(a.qp, std::span(&w, 1), nullptr) != Errc::kOk) {
        failed.store(true);
        break;
      }
      ++posted;
    }
  });
  std::uint64_t expect = 0;
  const Instant give_up = UdpDevice::now() + Duration::s(60);
  while (expect < kTotal && !failed.load() && UdpDevice::now() < give_up) {
    Wc wc[16];
    auto k = a.dev->lock()->poll_cq(a.cq, wc);
    if (!k.ok()) {
      failed.store(true);
      break;
    }
    for (std::size_t i = 0; i < k.value(); ++i) {
      if (wc[i].wr_id != expect || wc[i].status != WcStatus::kSuccess) failed.store(true);
      ++expect;
    }
    completed.store(expect);
  }
  poster.join();
  EXPECT_FALSE(failed.load());
  EXPECT_EQ(expect, kTotal);
  auto peer_guard = b.dev->lock();  // orders these reads after b's progress thread's writes
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data() + 1'000'000, 64 * kLen), 0);
  const CloseResult r = a.dev->close();
  EXPECT_TRUE(r.drained);
}

}  // namespace
}  // namespace uroce::engine

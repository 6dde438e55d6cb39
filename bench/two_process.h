// A sender and a receiver in two processes on loopback, for the UDP benchmarks (udp_baseline,
// datapath_bench). The parent forks the receiver, waits until it is bound, forks the sender, and
// collects both sides' results from shared memory.
//
// The measurement window opens when the receiver gets its first data and closes --seconds later
// (receiver's clock); each side reports the CPU time (getrusage: user + system) it used inside
// the window, so that the sender's start-up and the receiver's idle wait are not counted.
#pragma once

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

namespace uroce::bench {

enum Phase : int { kSetup = 0, kReceiverReady = 1, kWindowOpen = 2, kWindowClosed = 3 };

struct Shared {
  std::atomic<int> phase{kSetup};
  std::atomic<int> failed{0};
  char error[256] = {};
  std::uint16_t rx_port = 0;  // the receiver's UDP port (bound to port 0: the kernel's pick)
  // Flow control: what the receiver has taken so far (bytes or packets, as the benchmark
  // counts), for the sender's credit window.
  std::atomic<std::uint64_t> rx_progress{0};
  std::uint64_t tx_stalls = 0;  // windows given up on (data lost on the way)
  // Receiver, over the window.
  std::uint64_t rx_bytes = 0;
  std::uint64_t rx_packets = 0;
  std::uint64_t rx_calls = 0;
  double rx_seconds = 0;
  double rx_cpu_s = 0;
  // Sender, over the window.
  std::uint64_t tx_bytes = 0;
  std::uint64_t tx_packets = 0;
  std::uint64_t tx_calls = 0;
  double tx_cpu_s = 0;
  // Free-form extras (latency percentiles, counters), filled by whichever side knows them.
  double extra[16] = {};
};

inline double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline void fail(Shared& s, const std::string& what) {
  std::snprintf(s.error, sizeof s.error, "%s", what.c_str());
  s.failed.store(1);
  s.phase.store(kWindowClosed);
}

// Tracks the window on the sender's side: call tick() once per send round; it notes the CPU
// time when the window opens and closes, and returns false once it has closed.
class SenderWindow {
 public:
  explicit SenderWindow(Shared& s) : s_(s) {}
  bool tick() {
    const int p = s_.phase.load(std::memory_order_relaxed);
    if (p >= kWindowOpen && !open_) {
      open_ = true;
      cpu0_ = cpu_seconds();
    }
    if (p >= kWindowClosed) {
      s_.tx_cpu_s = open_ ? cpu_seconds() - cpu0_ : 0;
      return false;
    }
    return true;
  }
  bool open() const { return open_; }

 private:
  Shared& s_;
  bool open_ = false;
  double cpu0_ = 0;
};

// Tracks the window on the receiver's side: start() at the first data, done() once --seconds
// have passed (then the totals are written).
class ReceiverWindow {
 public:
  ReceiverWindow(Shared& s, double seconds) : s_(s), seconds_(seconds) {}
  void start() {
    if (started_) return;
    started_ = true;
    t0_ = now_seconds();
    cpu0_ = cpu_seconds();
    s_.phase.store(kWindowOpen);
  }
  bool started() const { return started_; }
  bool done() {
    if (!started_) return false;
    const double t = now_seconds();
    if (t - t0_ < seconds_) return false;
    s_.rx_seconds = t - t0_;
    s_.rx_cpu_s = cpu_seconds() - cpu0_;
    s_.phase.store(kWindowClosed);
    return true;
  }

 private:
  Shared& s_;
  double seconds_;
  bool started_ = false;
  double t0_ = 0;
  double cpu0_ = 0;
};

// The sender's credit window: at most `window` units (bytes or packets) sent and not yet taken
// by the receiver, as a reliable transport keeps a bounded window in flight. Without it a
// loopback sender outruns the receive path and the kernel drops the excess (netdev backlog,
// socket buffer), which measures the drop path rather than the throughput. While the window is
// full the sender sleeps 10 us (not counted as its CPU time, and leaving the CPU to the
// kernel's receive processing, which loopback runs on the sending CPU). A window that makes no
// progress for 100 ms is given up (the data in it was lost).
class CreditWindow {
 public:
  CreditWindow(Shared& s, std::uint64_t window) : s_(s), window_(window) {}
  bool full(std::uint64_t sent_total) const {
    return sent_total - base_ > s_.rx_progress.load(std::memory_order_acquire) + window_;
  }
  void wait(std::uint64_t sent_total) {
    if (!full(sent_total)) return;
    const double t0 = now_seconds();
    while (sent_total - base_ > s_.rx_progress.load(std::memory_order_acquire) + window_) {
      if (s_.phase.load(std::memory_order_relaxed) >= kWindowClosed) return;
      if (now_seconds() - t0 > 0.1) {
        base_ = sent_total - s_.rx_progress.load(std::memory_order_acquire);
        ++s_.tx_stalls;
        return;
      }
      timespec ts{0, 10'000};
      ::nanosleep(&ts, nullptr);
    }
  }

 private:
  Shared& s_;
  std::uint64_t window_;
  std::uint64_t base_ = 0;  // units written off as lost
};

inline void pin_to_cpu(int cpu) {
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ::sched_setaffinity(0, sizeof set, &set);
}

// Runs `receiver` and `sender` in two child processes (pinned to CPUs 1 and 0 where there are
// two) and returns the shared results, or nullptr after printing an error. `deadline_s` bounds
// the whole run (a hang guard).
inline Shared* run_pair(const std::function<void(Shared&)>& receiver,
                        const std::function<void(Shared&)>& sender, double deadline_s) {
  void* mem =
      ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("mmap");
    return nullptr;
  }
  auto* s = new (mem) Shared();
  const pid_t rx = ::fork();
  if (rx == 0) {
    pin_to_cpu(1);
    receiver(*s);
    std::_Exit(0);
  }
  const double t0 = now_seconds();
  while (s->phase.load() < kReceiverReady && now_seconds() - t0 < deadline_s) ::usleep(1000);
  pid_t tx = -1;
  if (s->phase.load() == kReceiverReady) {
    tx = ::fork();
    if (tx == 0) {
      pin_to_cpu(0);
      sender(*s);
      std::_Exit(0);
    }
  }
  // Wait for both, killing them at the deadline.
  int alive = tx > 0 ? 2 : 1;
  while (alive > 0) {
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      --alive;
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && s->failed.load() == 0) {
        fail(*s, "a benchmark process died");
      }
      if (done == rx) s->phase.store(kWindowClosed);  // the sender stops too
      continue;
    }
    if (now_seconds() - t0 > deadline_s) {
      fail(*s, "timed out (no traffic?)");
      ::kill(rx, SIGKILL);
      if (tx > 0) ::kill(tx, SIGKILL);
    }
    ::usleep(1000);
  }
  if (s->failed.load() != 0 || tx <= 0) {
    std::printf("{\"error\":\"%s\"}\n", s->error[0] != 0 ? s->error : "receiver did not start");
    return nullptr;
  }
  return s;
}

}  // namespace uroce::bench

#include "tools/demo_cmd.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "device/device_config.h"
#include "tools/perf_cmd.h"

namespace uroce::tools {
namespace {

struct Step {
  const char* label;
  const char* test;
  std::uint64_t size;
  std::uint64_t iters;
  const char* atomic_type;
  const char* what;  // what the verification proved
};

std::string self_exe() {
  char b[4096];
  const ssize_t n = ::readlink("/proc/self/exe", b, sizeof b - 1);
  if (n <= 0) return "uroce";
  return std::string(b, static_cast<std::size_t>(n));
}

// Starts `uroce perf TEST --ip SERVER -p PORT ...` as a child; its table goes to /dev/null
// (the client reports), its error messages to our stderr.
pid_t spawn_server(const std::string& exe, const DemoOptions& o, const Step& st) {
  std::vector<std::string> args = {
      exe,         "perf", st.test, "--ip",        o.server_ip, "-p", std::to_string(o.port),
      "--timeout", "30",   "-A",    st.atomic_type};
  const pid_t pid = ::fork();
  if (pid != 0) return pid;  // parent (or -1)
  const int null = ::open("/dev/null", O_WRONLY);
  if (null >= 0) ::dup2(null, 1);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(exe.c_str(), argv.data());
  ::_exit(127);
}

// Waits for the child to exit, at most `seconds`; then kills it. Returns its exit status
// (-1 when it had to be killed or died of a signal).
int reap(pid_t pid, int seconds) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() > give_up) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    ::poll(nullptr, 0, 10);  // a bounded wait for the child's exit
  }
}

std::string size_text(std::uint64_t b) {
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b / 1024) + " KiB";
  return std::to_string(b) + " B";
}

// Runs one test as both sides; returns the client's results (empty on failure).
bool run_step(const std::string& exe, const DemoOptions& o, const Step& st, std::FILE* err,
              std::vector<PerfResult>& results) {
  const pid_t pid = spawn_server(exe, o, st);
  if (pid < 0) {
    std::fprintf(err, "uroce demo: cannot start the server process\n");
    return false;
  }
  PerfOptions c;
  c.test = st.test;
  c.server = o.server_ip;
  c.ip = o.client_ip;
  c.port = o.port;
  c.size = st.size;
  c.iters = st.iters;
  c.atomic_type = st.atomic_type;
  c.timeout_s = 30;
  c.connect_timeout_s = 10;  // the server process is starting
  c.quiet = true;
  const int rc = perf_run(c, stdout, err, &results);
  if (rc != 0) ::kill(pid, SIGTERM);
  const int server_rc = reap(pid, 30);
  if (rc == 0 && server_rc != 0) {
    std::fprintf(err, "uroce demo: the server process of %s failed (status %d)\n", st.test,
                 server_rc);
    return false;
  }
  return rc == 0 && !results.empty() && results.back().verified;
}

}  // namespace

void add_demo_options(CLI::App& sub, DemoOptions& o) {
  sub.add_option("--server-ip", o.server_ip, "Loopback address of the server process")
      ->capture_default_str();
  sub.add_option("--client-ip", o.client_ip, "Loopback address of this (client) process")
      ->capture_default_str();
  sub.add_option("-p,--port", o.port, "TCP port of the QP exchange")->capture_default_str();
  sub.add_option("--bw-iters", o.bw_iters, "Iterations of the bandwidth run")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{5}, std::uint64_t{100'000'000}));
  sub.add_option("--lat-iters", o.lat_iters, "Iterations of the latency run")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{5}, std::uint64_t{100'000'000}));
}

// The demo is a loopback demo: it never sends to another host.
bool is_loopback(const std::string& text) {
  auto ip = engine::parse_ip(text);
  if (!ip.ok()) return false;
  const wire::IpAddress& a = ip.value();
  if (!a.v6) return a.bytes[0] == 127;
  for (std::size_t i = 0; i < 15; ++i)
    if (a.bytes[i] != 0) return false;
  return a.bytes[15] == 1;
}

int demo_run(const DemoOptions& o, std::FILE* out, std::FILE* err) {
  for (const std::string* a : {&o.server_ip, &o.client_ip}) {
    if (!is_loopback(*a)) {
      std::fprintf(err, "uroce demo: '%s' is not a loopback address (127.x.y.z or ::1)\n",
                   a->c_str());
      return 2;
    }
  }
  if (o.server_ip == o.client_ip) {
    std::fprintf(err, "uroce demo: the server and the client need two different addresses\n");
    return 2;
  }
  const std::string exe = self_exe();
  std::fprintf(out,
               "uroce demo: two uroce processes over UDP on loopback: server %s (a child "
               "process), client %s (this one)\n",
               o.server_ip.c_str(), o.client_ip.c_str());
  const Step checks[] = {
      {"SEND", "send_bw", 4096, 200, "FETCH_AND_ADD",
       "every message received with the sender's bytes"},
      {"RDMA WRITE", "write_bw", 65536, 200, "FETCH_AND_ADD",
       "the server's memory holds the client's bytes"},
      {"RDMA READ", "read_bw", 65536, 200, "FETCH_AND_ADD",
       "the client's memory holds the server's bytes"},
      {"Fetch&Add", "atomic_bw", 8, 1000, "FETCH_AND_ADD",
       "counter = operations, each old value as expected"},
      {"Compare&Swap", "atomic_bw", 8, 1000, "CMP_AND_SWAP",
       "counter = operations, every swap in order"},
  };
  for (const Step& st : checks) {
    std::vector<PerfResult> r;
    if (!run_step(exe, o, st, err, r)) {
      std::fprintf(out, "  FAIL %-13s\n", st.label);
      std::fprintf(err, "uroce demo: %s failed\n", st.label);
      return 1;
    }
    std::fprintf(out, "  ok   %-13s %5llu x %-7s %s\n", st.label,
                 static_cast<unsigned long long>(r.back().iterations), size_text(st.size).c_str(),
                 st.what);
    std::fflush(out);
  }
  const Step bw{"bandwidth", "write_bw", 65536, o.bw_iters, "FETCH_AND_ADD", ""};
  std::vector<PerfResult> r;
  if (!run_step(exe, o, bw, err, r)) {
    std::fprintf(err, "uroce demo: the bandwidth run failed\n");
    return 1;
  }
  const PerfResult& b = r.back();
  std::fprintf(out,
               "bandwidth: RDMA WRITE 64 KiB x %llu: %.1f MB/s (%.2f Gb/s), %.4f Mpps, data "
               "verified\n",
               static_cast<unsigned long long>(b.iterations), b.bw_avg_mbs,
               b.bw_avg_mbs * 1048576.0 * 8 / 1e9, b.msg_rate_mpps);
  std::fflush(out);
  const Step lat{"latency", "write_lat", 8, o.lat_iters, "FETCH_AND_ADD", ""};
  r.clear();
  if (!run_step(exe, o, lat, err, r)) {
    std::fprintf(err, "uroce demo: the latency run failed\n");
    return 1;
  }
  const PerfResult& l = r.back();
  std::fprintf(out,
               "latency:   RDMA WRITE 8 B ping-pong x %llu: typical %.2f us, average %.2f us, "
               "99%% %.2f us (half round trip, as ib_write_lat)\n",
               static_cast<unsigned long long>(l.iterations), l.t_typical, l.t_avg, l.t_p99);
  std::fprintf(out, "uroce demo: all checks passed\n");
  return 0;
}

}  // namespace uroce::tools

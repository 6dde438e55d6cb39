// `uroce perf`: RDMA benchmarks run as perftest's ib_write_bw, ib_write_lat, ib_read_bw,
// ib_read_lat, ib_send_bw, ib_send_lat, ib_atomic_bw and ib_atomic_lat run them, between two
// processes over uroce UDP devices (`uroce perf TEST` as server, `uroce perf TEST ADDRESS` as
// client). The two sides exchange QP data (QPN, PSN, GID, rkey, address, length) over TCP, as
// perftest's default (non rdma_cm) mode does, and every run checks its data (written and read
// patterns, received bytes, final atomic counter).
//
// Progress is application polling: the benchmark loops call UdpDevice::progress() themselves,
// also while a side waits on TCP, so that the peer's packets are always answered.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace uroce::tools {

inline constexpr std::uint16_t kPerfDefaultPort = 18515;  // perftest's DEF_PORT

struct PerfOptions {
  std::string test;         // write_bw, write_lat, read_bw, read_lat, send_bw, send_lat, atomic_*
  std::string server;       // empty: this side is the server
  std::uint64_t size = 0;   // 0: the test's default (65536 bw, 2 lat, 8 atomic)
  std::uint64_t iters = 0;  // 0: 5000 for bw, 1000 for lat (perftest's DEF_ITERS_WB/ITERS)
  std::uint32_t duration = 0;                 // seconds; 0: run by iterations
  bool all = false;                           // every size 2..2^23
  std::uint32_t qps = 1;                      // -q
  std::uint32_t tx_depth = 0;                 // 0: 128 for bw, 1 for lat
  std::uint32_t mtu = 0;                      // 0: the port's active MTU
  std::uint16_t port = kPerfDefaultPort;      // TCP port of the QP exchange
  std::string device;                         // -d: device by name (engine::open_device)
  std::string ip;                             // --ip: device by local address
  std::string atomic_type = "FETCH_AND_ADD";  // or CMP_AND_SWAP
  bool report_gbits = false;
  bool cpu_util = false;
  bool json = false;
  bool ignored_flag = false;            // -F (perftest's "do not fail on CPU frequency"), ignored
  std::uint32_t timeout_s = 60;         // bound on every wait for the peer (connect, messages, CQ)
  std::uint32_t connect_timeout_s = 0;  // client: retry a refused connect for this long
  // Local ACK timeout 4.096 us * 2^n (perftest's -u). perftest uses 14 (67 ms); uroce's default
  // is 17 (0.54 s): the peer's ACKs come from a process, and on a loaded host a process can be
  // off the CPU for most of a second, which a NIC never is.
  std::uint32_t qp_timeout = 17;
  // Retries after a timeout (0..7; 7 is 7 retries in uroce, as IBTA and hardware, where rxe
  // retries forever): an unreachable peer ends in RETRY_EXC_ERR after 1 + retry_count ACK
  // timeouts (about 3.8 s at the defaults).
  std::uint32_t retry_count = 6;
  bool counters = false;  // print engine/datapath counters at the end
  bool quiet = false;     // no table (the demo prints its own lines)
};

// One result line, as printed (both sides print one per size).
struct PerfResult {
  std::string test;
  std::string side;  // "client" or "server"
  bool bw = true;
  std::uint64_t bytes = 0;                                    // message size
  std::uint64_t iterations = 0;                               // operations measured (all QPs)
  double bw_peak_mbs = 0, bw_avg_mbs = 0, msg_rate_mpps = 0;  // MB = 2^20 bytes, as perftest
  double t_min = 0, t_max = 0, t_typical = 0, t_avg = 0, t_stdev = 0, t_p99 = 0, t_p999 = 0;
  double cpu_s = 0, wall_s = 0;            // this side, measured phase
  double peer_cpu_s = 0, peer_wall_s = 0;  // the other side's
  bool verified = false;
};

// Adds perftest's options to the `perf` subcommand.
void add_perf_options(CLI::App& sub, PerfOptions& o);

// Runs one side. Returns 0 on success, 1 when the run failed (a one-line message on `err`),
// 2 for invalid options. `results`, if given, receives each result line.
int perf_run(const PerfOptions& o, std::FILE* out, std::FILE* err,
             std::vector<PerfResult>* results = nullptr);

}  // namespace uroce::tools

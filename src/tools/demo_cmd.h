// `uroce demo`: the two-process loopback demo. It starts a second uroce process as the server
// (`uroce perf TEST --ip <server address>`), runs the client side itself on another loopback
// address, and checks SEND, RDMA WRITE, RDMA READ, Fetch&Add and Compare&Swap end to end with
// their data verified, then measures bandwidth (64 KiB RDMA WRITE) and latency (8-byte RDMA
// WRITE ping-pong) with the perf code. No configuration: loopback addresses only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace CLI {
class App;
}

namespace uroce::tools {

struct DemoOptions {
  std::string server_ip = "127.0.0.1";
  std::string client_ip = "127.0.0.2";
  std::uint16_t port = 18515;
  std::uint64_t bw_iters = 5000;
  std::uint64_t lat_iters = 1000;
};

void add_demo_options(CLI::App& sub, DemoOptions& o);

// 0 when every step passed; 1 otherwise (the failing step is named on `err`).
int demo_run(const DemoOptions& o, std::FILE* out, std::FILE* err);

}  // namespace uroce::tools

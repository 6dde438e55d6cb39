// Test support: loopback addresses and ports that no other test process can hold at the same
// time, for tests that bind sockets (RoCEv2's UDP port 4791 above all). ctest runs several test
// processes at once; addresses picked by hand collided whenever two tests chose the same one.
//
// The space is cut into kNetBlocks blocks. Block i is the 254 addresses 127.B.C.1-254 (B = 100 +
// i / 256, C = i % 256: 127.100.0.0-127.101.255.255, which no test names by hand) and the
// kPortsPerBlock ports from kFirstBlockPort + kPortsPerBlock * i (24576-32767, below Linux's
// ephemeral range), for IPv6 loopback (::1 is one address: its tests need ports of their own)
// and for TCP listeners.
//
// A process claims a block by binding the abstract unix socket name "uroce-test-net/<i>": the
// kernel refuses a second binder whoever it runs as (root and nobody see each other's claims)
// and frees the name when the last holder of the socket closes it, a crash included. A block
// is taken only while no socket in /proc/net/{udp,tcp,udp6,tcp6} is bound to one of its
// addresses or ports: a previous holder's uroce-devd lingers 2 s after the holder's last device
// closes, still bound to the device's address.
//
// Abstract names and /proc/net belong to the network namespace: a test in a namespace of its
// own has nothing to collide with there. The shell and Python tests claim a block with the
// uroce_test_net program (test_net_main.cc).
//
// Still named by hand, and why that is safe:
// - tests/compat and tests/interop run unmodified programs on devices their CMakeLists.txt
//   configure: each test that may run beside others on a 127.77.N.0/24 of its own (compat.abi,
//   rdmacm_abi, devinfo, ucx.info, rdmacm.RdmacmExtras), the rest (the default device on
//   127.0.0.1, ::1, the fixed TCP ports of perftest and rdma_cm programs) RUN_SERIAL.
// - Addresses that nothing binds: parsers (device_config_test), interface lookups
//   (interface_mtu), the other-family and unreachable peers a message names.
// - bench.smoke.*: 127.0.0.1 and .2 with ports the kernel picks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "wire/ip.h"

namespace uroce::test {

inline constexpr int kNetBlocks = 512;
inline constexpr int kPortsPerBlock = 16;
inline constexpr std::uint16_t kFirstBlockPort = 24576;
inline constexpr int kHostsPerBlock = 254;  // .1 to .254

class NetBlock {
 public:
  // The first free block from `first` on (modulo kNetBlocks); nullopt when none is free.
  static std::optional<NetBlock> claim(int first);
  // Block `index` if it is free (no other claim, nothing bound to it); nullopt otherwise.
  static std::optional<NetBlock> claim_exactly(int index);
  // Where a process starts looking: its pid, spread over the blocks.
  static int first_for_pid(int pid);

  NetBlock(NetBlock&& o) noexcept : index_(o.index_), fd_(o.fd_) { o.fd_ = -1; }
  NetBlock& operator=(NetBlock&& o) noexcept;
  NetBlock(const NetBlock&) = delete;
  NetBlock& operator=(const NetBlock&) = delete;
  ~NetBlock();

  int index() const { return index_; }
  std::string prefix() const;       // "127.B.C"
  std::string ip(int host) const;   // "127.B.C.host", host 1..kHostsPerBlock
  std::uint16_t port(int i) const;  // i 0..kPortsPerBlock-1
  // The claim's socket (close-on-exec); release_fd() hands it over (the block stays claimed
  // while any process holds the socket).
  int fd() const { return fd_; }
  int release_fd() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  NetBlock(int index, int fd) : index_(index), fd_(fd) {}
  int index_ = 0;
  int fd_ = -1;
};

// A claim on one fixed endpoint that no block holds, such as "[::1]:4791" (a device always sends
// to port 4791, and IPv6 loopback has one address), for the tests that must bind it: taken by
// binding the abstract name "uroce-test-net/fixed/<name>", waiting while another process holds
// it. Released when destroyed or when its holder exits.
class FixedClaim {
 public:
  // Waits up to `timeout_ms` for the claim; nullopt if it stayed taken.
  static std::optional<FixedClaim> wait(const std::string& name, int timeout_ms = 120'000);
  FixedClaim(FixedClaim&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FixedClaim& operator=(FixedClaim&&) = delete;
  FixedClaim(const FixedClaim&) = delete;
  ~FixedClaim();
  int fd() const { return fd_; }
  int release_fd() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  explicit FixedClaim(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Whether a socket is bound to one of block `index`'s addresses or ports (from /proc/net).
bool net_block_bound(int index);

// This process's addresses and ports, from blocks it claims on first use and whenever a block
// runs out; never the same one twice in a process (a forked child claims blocks of its own).
// Aborts the test program if no block is free.
const char* unique_ip();  // "127.B.C.H", valid until the program ends
wire::IpAddress unique_v4();
std::uint16_t unique_port();

}  // namespace uroce::test

#include "support/test_net.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <vector>

namespace uroce::test {
namespace {

// Binds the abstract name "uroce-test-net/<name>"; the socket, or -1 if another process holds
// it.
int bind_claim(const std::string& name) {
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    std::fprintf(stderr, "test_net: socket: %s\n", std::strerror(errno));
    std::abort();
  }
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  // An abstract name: a leading NUL, then the name, no terminating NUL (the length ends it).
  const std::string full = "uroce-test-net/" + name;
  const std::size_t n = std::min(full.size(), sizeof a.sun_path - 1);
  std::memcpy(a.sun_path + 1, full.data(), n);
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), len) != 0) {
    const int e = errno;
    ::close(fd);
    if (e != EADDRINUSE) {
      std::fprintf(stderr, "test_net: bind %s: %s\n", full.c_str(), std::strerror(e));
      std::abort();
    }
    return -1;
  }
  return fd;
}

int second_octet(int index) { return 100 + index / 256; }
int third_octet(int index) { return index % 256; }

// One local address of a /proc/net/{udp,tcp}[6] line: "0100007F:12B7" (each 32-bit word in
// hex as the kernel stores it, network order in memory) into 16 bytes, IPv4 in the last 4.
bool parse_local(const std::string& line, std::array<std::uint8_t, 16>& addr, unsigned& port) {
  char hex[33] = {};
  if (std::sscanf(line.c_str(), " %*u: %32[0-9A-Fa-f]:%x", hex, &port) != 2) return false;
  const std::size_t words = std::strlen(hex) / 8;
  if (words != 1 && words != 4) return false;
  addr.fill(0);
  for (std::size_t w = 0; w < words; ++w) {
    const std::string word(hex + 8 * w, 8);
    const auto v = static_cast<std::uint32_t>(std::strtoul(word.c_str(), nullptr, 16));
    std::memcpy(addr.data() + 16 - 4 * words + 4 * w, &v, 4);
  }
  if (words == 4) {
    // Only an IPv4-mapped address (::ffff:a.b.c.d) can be one of a block's addresses.
    static constexpr std::array<std::uint8_t, 12> kMapped = {0, 0, 0, 0, 0,    0,
                                                             0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(addr.data(), kMapped.data(), 12) != 0) addr[12] = 0;
  }
  return true;
}

struct Process {
  std::mutex mu;
  int owner = -1;  // the pid that claimed `blocks`
  std::vector<NetBlock> blocks;
  int next_host = 1;  // of blocks.back()
  int next_port = 0;  // of blocks.back()
  int next_first = 0;
  std::deque<std::string> names;  // the texts handed out, alive until the program ends

  // The block to take an address (or a port) from: blocks.back(), or a new one when this
  // process has none yet or that one is used up.
  NetBlock& block(bool for_port) {
    const int pid = static_cast<int>(::getpid());
    if (owner != pid) {
      // None yet, or a forked child: the parent's claims stay the parent's (closing the
      // child's copies of their sockets does not release them while the parent holds them).
      owner = pid;
      blocks.clear();
      next_first = NetBlock::first_for_pid(pid);
    }
    if (blocks.empty() || (for_port ? next_port >= kPortsPerBlock : next_host > kHostsPerBlock)) {
      auto b = NetBlock::claim(next_first);
      if (!b) {
        std::fprintf(stderr, "test_net: no free block of test addresses (all %d claimed)\n",
                     kNetBlocks);
        std::abort();
      }
      next_first = (b->index() + 1) % kNetBlocks;
      std::fprintf(stderr, "test_net: pid %d claimed %s.0/24 and ports %u-%u\n", pid,
                   b->prefix().c_str(), b->port(0), b->port(kPortsPerBlock - 1));
      blocks.push_back(std::move(*b));
      next_host = 1;
      next_port = 0;
    }
    return blocks.back();
  }
};

Process& process() {
  static Process* p = new Process;  // never destroyed: the texts outlive static destructors
  return *p;
}

}  // namespace

NetBlock& NetBlock::operator=(NetBlock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    index_ = o.index_;
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

NetBlock::~NetBlock() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<NetBlock> NetBlock::claim_exactly(int index) {
  if (index < 0 || index >= kNetBlocks) return std::nullopt;
  const int fd = bind_claim(std::to_string(index));
  if (fd < 0) return std::nullopt;
  // Checked once claimed, so that no other claimer can bind to it from here on.
  if (net_block_bound(index)) {
    ::close(fd);
    return std::nullopt;
  }
  return NetBlock(index, fd);
}

std::optional<NetBlock> NetBlock::claim(int first) {
  first = ((first % kNetBlocks) + kNetBlocks) % kNetBlocks;
  for (int i = 0; i < kNetBlocks; ++i) {
    if (auto b = claim_exactly((first + i) % kNetBlocks)) return b;
  }
  return std::nullopt;
}

int NetBlock::first_for_pid(int pid) {
  // Fibonacci hashing: consecutive pids (ctest starts tests one after another) land far apart.
  return static_cast<int>((static_cast<std::uint32_t>(pid) * 2654435761u) >> 23) % kNetBlocks;
}

std::string NetBlock::prefix() const {
  return "127." + std::to_string(second_octet(index_)) + "." + std::to_string(third_octet(index_));
}

std::string NetBlock::ip(int host) const { return prefix() + "." + std::to_string(host); }

std::uint16_t NetBlock::port(int i) const {
  return static_cast<std::uint16_t>(kFirstBlockPort + kPortsPerBlock * index_ + i);
}

std::optional<FixedClaim> FixedClaim::wait(const std::string& name, int timeout_ms) {
  for (int waited = 0;; waited += 10) {
    const int fd = bind_claim("fixed/" + name);
    if (fd >= 0) return FixedClaim(fd);
    if (waited >= timeout_ms) return std::nullopt;
    ::usleep(10'000);
  }
}

FixedClaim::~FixedClaim() {
  if (fd_ >= 0) ::close(fd_);
}

bool net_block_bound(int index) {
  const auto first_port = static_cast<unsigned>(kFirstBlockPort + kPortsPerBlock * index);
  for (const char* path : {"/proc/net/udp", "/proc/net/tcp", "/proc/net/udp6", "/proc/net/tcp6"}) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);  // the column names
    while (std::getline(in, line)) {
      std::array<std::uint8_t, 16> a{};
      unsigned port = 0;
      if (!parse_local(line, a, port)) continue;
      if (port >= first_port && port < first_port + kPortsPerBlock) return true;
      if (a[12] == 127 && a[13] == second_octet(index) && a[14] == third_octet(index)) return true;
    }
  }
  return false;
}

const char* unique_ip() {
  Process& p = process();
  std::lock_guard lock(p.mu);
  const NetBlock& b = p.block(false);
  p.names.push_back(b.ip(p.next_host++));
  return p.names.back().c_str();
}

wire::IpAddress unique_v4() {
  const char* text = unique_ip();
  unsigned o[4] = {};
  std::sscanf(text, "%u.%u.%u.%u", &o[0], &o[1], &o[2], &o[3]);
  return wire::IpAddress::v4((o[0] << 24) | (o[1] << 16) | (o[2] << 8) | o[3]);
}

std::uint16_t unique_port() {
  Process& p = process();
  std::lock_guard lock(p.mu);
  const NetBlock& b = p.block(true);
  return b.port(p.next_port++);
}

}  // namespace uroce::test

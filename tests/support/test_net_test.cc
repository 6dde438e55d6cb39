// The test address allocator (support/test_net.h): a block is never held by two claimers, a
// claim goes with its holder, a block some socket is still bound to is not handed out, root's
// claims hold against another user, and a fixed endpoint has one holder at a time.
#include "support/test_net.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <string>

namespace uroce::test {
namespace {

// A child process that claims block `index` (or the first free one from it when !exactly),
// reports the index it got (or -1) on a pipe and holds the block until killed.
struct Holder {
  pid_t pid = -1;
  int got = -1;
  Holder(int index, bool exactly) {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      auto b = exactly ? NetBlock::claim_exactly(index) : NetBlock::claim(index);
      const int i = b ? b->index() : -1;
      if (::write(p[1], &i, sizeof i) != sizeof i) ::_exit(1);
      for (;;) ::pause();
    }
    ::close(p[1]);
    EXPECT_EQ(::read(p[0], &got, sizeof got), static_cast<ssize_t>(sizeof got));
    ::close(p[0]);
  }
  void kill() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
  }
  ~Holder() { kill(); }
};

// A block nobody holds now, for the tests that claim one by its number.
int free_block() {
  auto b = NetBlock::claim(NetBlock::first_for_pid(static_cast<int>(::getpid())) + 17);
  EXPECT_TRUE(b.has_value());
  return b ? b->index() : 0;  // released again here
}

TEST(TestNet, TwoClaimersNeverGetTheSameBlock) {
  const int start = free_block();
  auto a = NetBlock::claim(start);
  ASSERT_TRUE(a);
  auto b = NetBlock::claim(start);  // the same start, in the same process
  ASSERT_TRUE(b);
  EXPECT_NE(a->index(), b->index());
  EXPECT_FALSE(NetBlock::claim_exactly(a->index()));
  Holder other(start, false);  // and in another process
  ASSERT_GE(other.got, 0);
  EXPECT_NE(other.got, a->index());
  EXPECT_NE(other.got, b->index());
  EXPECT_NE(a->prefix(), b->prefix());
  EXPECT_NE(a->port(0), b->port(0));
}

TEST(TestNet, AClaimIsReleasedWhenItsHolderExits) {
  Holder h(free_block(), false);
  const int k = h.got;
  ASSERT_GE(k, 0);
  EXPECT_FALSE(NetBlock::claim_exactly(k));
  h.kill();  // SIGKILL: no destructor ran, the kernel closed the socket
  EXPECT_TRUE(NetBlock::claim_exactly(k));
}

TEST(TestNet, ABlockASocketIsStillBoundToIsNotHandedOut) {
  int k = 0;
  std::string ip;
  std::uint16_t port = 0;
  {
    auto b = NetBlock::claim(free_block());
    ASSERT_TRUE(b);
    k = b->index();
    ip = b->ip(200);
    port = b->port(3);
  }
  // As a lingering uroce-devd of the block's last holder: bound to one of its addresses.
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(4791);
  ASSERT_EQ(::inet_pton(AF_INET, ip.c_str(), &a.sin_addr), 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  EXPECT_TRUE(net_block_bound(k));
  EXPECT_FALSE(NetBlock::claim_exactly(k));
  auto next = NetBlock::claim(k);
  ASSERT_TRUE(next);
  EXPECT_NE(next->index(), k);
  next.reset();
  ::close(fd);
  EXPECT_FALSE(net_block_bound(k));
  // Or to one of its ports, on ::1 (skipped where the host has no IPv6 loopback).
  const int fd6 = ::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in6 a6{};
  a6.sin6_family = AF_INET6;
  a6.sin6_port = htons(port);
  a6.sin6_addr = in6addr_loopback;
  if (fd6 >= 0 && ::bind(fd6, reinterpret_cast<sockaddr*>(&a6), sizeof a6) == 0) {
    EXPECT_TRUE(net_block_bound(k));
    EXPECT_FALSE(NetBlock::claim_exactly(k));
  }
  if (fd6 >= 0) ::close(fd6);
  EXPECT_TRUE(NetBlock::claim_exactly(k));
}

// SharedDevice.unprivileged runs a test program as nobody beside root's: each must see the
// other's claims.
TEST(TestNet, AnotherUserSeesTheClaim) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (to become nobody)";
  auto mine = NetBlock::claim(free_block());
  ASSERT_TRUE(mine);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) {
      ::_exit(2);
    }
    if (NetBlock::claim_exactly(mine->index())) ::_exit(3);  // root's claim not seen
    auto other = NetBlock::claim(mine->index());
    ::_exit(other && other->index() != mine->index() ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(TestNet, AProcessNeverGetsTheSameAddressOrPortTwice) {
  std::set<std::string> ips;
  std::set<std::uint16_t> ports;
  for (int i = 0; i < 600; ++i) {  // more than two blocks' worth
    const std::string ip = unique_ip();
    EXPECT_TRUE(ips.insert(ip).second) << ip;
    EXPECT_EQ(ip.rfind("127.10", 0), 0u) << ip;
    EXPECT_NE(ip.substr(ip.rfind('.')), ".0") << ip;
    EXPECT_NE(ip.substr(ip.rfind('.')), ".255") << ip;
  }
  for (int i = 0; i < 20; ++i) {
    const std::uint16_t port = unique_port();
    EXPECT_TRUE(ports.insert(port).second) << port;
    EXPECT_GE(port, kFirstBlockPort);
  }
  // The text and the address agree.
  const wire::IpAddress a = unique_v4();
  EXPECT_EQ(a.bytes[0], 127);
  EXPECT_GE(a.bytes[1], 100);
}

TEST(TestNet, AForkedChildGetsAddressesOfItsOwn) {
  const std::string mine = unique_ip();
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string theirs = unique_ip();
    char buf[32] = {};
    std::strncpy(buf, theirs.c_str(), sizeof buf - 1);
    if (::write(p[1], buf, sizeof buf) != sizeof buf) ::_exit(1);
    ::_exit(0);
  }
  ::close(p[1]);
  char buf[32] = {};
  ASSERT_EQ(::read(p[0], buf, sizeof buf), static_cast<ssize_t>(sizeof buf));
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string theirs = buf;
  const std::string next = unique_ip();
  // Another block than the parent's: neither the parent's last nor its next address.
  EXPECT_NE(theirs.substr(0, theirs.rfind('.')), mine.substr(0, mine.rfind('.'))) << theirs;
  EXPECT_NE(theirs, next);
}

TEST(TestNet, AFixedEndpointHasOneHolderAtATime) {
  const std::string name = "test-" + std::to_string(::getpid());
  auto first = FixedClaim::wait(name, 0);
  ASSERT_TRUE(first);
  EXPECT_FALSE(FixedClaim::wait(name, 50));  // waited 50 ms, still held
  // Released while the next one waits: it gets its turn. (The waiter is a forked child, which
  // shares the claim's socket until it closes its copy: a claim lasts while any copy is open.)
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(first->release_fd());
    ::_exit(FixedClaim::wait(name, 10'000) ? 0 : 1);
  }
  ::usleep(100'000);
  first.reset();
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace uroce::test

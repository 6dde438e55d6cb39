// One device, many contexts and processes (device/shared_port.h, devd/coordinator.h): the
// steering program on the real kernel, traffic between contexts sharing an address, QPN
// allocation, members leaving (gracefully, killed, forked) and other users.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>

#include "datapath/udp.h"
#include "devd/coordinator.h"
#include "devd/steering.h"
#include "device/shared_port.h"
#include "device/two_devices.h"
#include "proto/devd_protocol.h"

namespace uroce::engine {
namespace {

using test::kAllAccess;
using test::Side;
using test::v4;

// ---- the steering program on the kernel's reuseport group ----

struct Group {
  wire::IpAddress ip = test::unique_v4();
  std::uint16_t port = 0;
  std::vector<int> socks;  // in the kernel's order: socks[i] is index i
  ~Group() {
    for (int fd : socks) ::close(fd);
  }
};

// A datagram whose BTH says DestQP `qpn` (bytes 5..7), tagged with `tag` after the BTH.
void send_to(const Group& g, std::uint32_t qpn, std::uint32_t tag, std::size_t bytes = 16) {
  std::uint8_t d[16] = {};
  d[5] = static_cast<std::uint8_t>(qpn >> 16);
  d[6] = static_cast<std::uint8_t>(qpn >> 8);
  d[7] = static_cast<std::uint8_t>(qpn);
  std::memcpy(d + 12, &tag, 4);
  const int s = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_storage ss;
  socklen_t len = 0;
  datapath::to_sockaddr(g.ip, g.port, ss, len);
  ASSERT_EQ(::sendto(s, d, bytes, 0, reinterpret_cast<sockaddr*>(&ss), len),
            static_cast<ssize_t>(bytes));
  ::close(s);
}

// The tag of the next datagram on `fd` (waits for it, 10 s at most: a hang guard).
std::optional<std::uint32_t> next_tag(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 10'000) != 1) return std::nullopt;
  std::uint8_t d[64] = {};
  const ssize_t n = ::recv(fd, d, sizeof d, 0);
  if (n < 16) return n >= 0 ? std::optional<std::uint32_t>(0) : std::nullopt;
  std::uint32_t tag = 0;
  std::memcpy(&tag, d + 12, 4);
  return tag;
}

bool nothing_waiting(int fd) {
  std::uint8_t d[64];
  return ::recv(fd, d, sizeof d, MSG_DONTWAIT) < 0 && errno == EAGAIN;
}

TEST(SteeringProgram, SendsEachBlockToItsSocketAndFollowsTheKernelWhenAMemberLeaves) {
  Group g;
  for (int i = 0; i < 4; ++i) {
    const int fd = datapath::make_group_socket(g.ip, g.port);
    ASSERT_GE(fd, 0) << std::strerror(-fd);
    if (g.port == 0) {
      sockaddr_in a{};
      socklen_t len = sizeof a;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
      g.port = ntohs(a.sin_port);
    }
    g.socks.push_back(fd);
  }
  // Index 1 holds block 5; 2 holds 7 and 9 and gets QP1; 3 holds 300 blocks (runs of 200).
  std::vector<std::uint32_t> b1{5}, b2{7, 9}, b3;
  for (std::uint32_t b = 1000; b < 1300; ++b) b3.push_back(b);
  std::vector<SteeringEntry> e{{1, b1}, {2, b2}, {3, b3}};
  ASSERT_EQ(attach_steering_program(g.socks[0], steering_program(e, 2)), 0);
  // 6 + 1 + (2 + 2) + (300 + 2 * 2): a run of at most 200 blocks each.
  EXPECT_EQ(steering_program(e, 2).size(), 6u + 3u + 4u + 304u);

  send_to(g, 5 << 8 | 0x11, 1);
  send_to(g, 9 << 8 | 0xff, 2);
  send_to(g, 1, 3);               // QP1
  send_to(g, 1299u << 8, 4);      // the last block of index 3, in its second run
  send_to(g, 1000u << 8 | 7, 5);  // its first block
  send_to(g, 6 << 8, 6);          // nobody's block: index 0
  send_to(g, 5 << 8, 7, 4);       // too short for a BTH: index 0
  EXPECT_EQ(next_tag(g.socks[1]), 1u);
  EXPECT_EQ(next_tag(g.socks[2]), 2u);
  EXPECT_EQ(next_tag(g.socks[2]), 3u);
  EXPECT_EQ(next_tag(g.socks[3]), 4u);
  EXPECT_EQ(next_tag(g.socks[3]), 5u);
  EXPECT_EQ(next_tag(g.socks[0]), 6u);
  EXPECT_EQ(next_tag(g.socks[0]), 0u);  // the short one (no tag)
  for (int fd : g.socks) EXPECT_TRUE(nothing_waiting(fd));

  // Index 1 leaves: the kernel moves the last socket (index 3) into its place, which is what
  // the coordinator's bookkeeping assumes.
  ::close(g.socks[1]);
  g.socks[1] = g.socks[3];
  g.socks.pop_back();
  std::vector<SteeringEntry> e2{{1, b3}, {2, b2}};
  ASSERT_EQ(attach_steering_program(g.socks[0], steering_program(e2, 0)), 0);
  send_to(g, 1100u << 8, 10);
  send_to(g, 7 << 8, 11);
  send_to(g, 5 << 8, 12);  // the departed member's block: index 0
  send_to(g, 1, 13);       // QP1 unclaimed: index 0
  EXPECT_EQ(next_tag(g.socks[1]), 10u);
  EXPECT_EQ(next_tag(g.socks[2]), 11u);
  EXPECT_EQ(next_tag(g.socks[0]), 12u);
  EXPECT_EQ(next_tag(g.socks[0]), 13u);
  for (int fd : g.socks) EXPECT_TRUE(nothing_waiting(fd));
}

TEST(SteeringProgram, ALargerProgramThanTheKernelTakesIsRefused) {
  std::vector<std::uint32_t> many(5000);
  for (std::uint32_t i = 0; i < many.size(); ++i) many[i] = i + 1;
  std::vector<SteeringEntry> e{{1, many}};
  EXPECT_GT(steering_program(e, 0).size(), std::size_t{BPF_MAXINSNS});
  const int fd = datapath::make_group_socket(test::unique_v4(), 0);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(attach_steering_program(fd, steering_program(e, 0)), E2BIG);
  ::close(fd);
}

// ---- contexts sharing one address ----

// Writes `n` bytes of a pattern from a to b over their connected QPs and checks them.
void write_and_check(Side& a, Side& b, std::size_t n, std::uint8_t seed) {
  for (std::size_t i = 0; i < n; ++i) a.buf[i] = std::byte(static_cast<std::uint8_t>(i * 7 + seed));
  Sge sge{a.va(0), static_cast<std::uint32_t>(n), a.mr.lkey};
  SendWr w = test::write_wr(seed, sge, b, 0);
  const SendWr* bad = nullptr;
  ASSERT_EQ(a.dev->device().post_send(a.qp, std::span(&w, 1), &bad), Errc::kOk);
  auto wcs = test::run_until(a, b, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data(), n), 0);
}

TEST(SharedDevice, TwoContextsOnOneAddressRunRcTrafficAndHaveDistinctQpns) {
  const char* const dev_ip = test::unique_ip();
  Side a, b;
  test::make_side(a, dev_ip);
  test::make_side(b, dev_ip);
  ASSERT_NE(a.dev->shared_port(), nullptr);
  EXPECT_NE(a.qpn, b.qpn);
  EXPECT_NE(devd::block_of(a.qpn), devd::block_of(b.qpn));
  test::pair_up(a, b);
  write_and_check(a, b, 200'000, 1);
  write_and_check(b, a, 3000, 2);

  auto info = SharedPort::query(v4(dev_ip), wire::kRoceV2Port);
  ASSERT_TRUE(info.ok()) << info.error();
  ASSERT_EQ(info->members.size(), 2u);
  for (const SharedMember& m : info->members) {
    EXPECT_EQ(m.pid, ::getpid());
    EXPECT_EQ(m.device, "uroce0");
    EXPECT_EQ(m.blocks, 1u);
  }
}

TEST(SharedDevice, QpNumbersAreUniqueAndNotReusedWhileOthersAreFree) {
  const char* const dev_ip = test::unique_ip();
  Side a;
  test::make_side(a, dev_ip);
  Device& dev = a.dev->device();
  std::set<std::uint32_t> seen{a.qpn};
  QpInitAttr init;
  init.send_cq = a.cq;
  init.recv_cq = a.cq;
  init.cap = QpCap{4, 4, 1, 1, 0};
  // Created and destroyed one by one: rxe would hand out new numbers each time; so do we,
  // across several blocks.
  for (int i = 0; i < 700; ++i) {
    auto qp = dev.create_qp(a.pd, init);
    ASSERT_TRUE(qp.ok());
    EXPECT_TRUE(seen.insert(qp->qp_num).second) << std::hex << qp->qp_num;
    EXPECT_GT(qp->qp_num, 1u);
    EXPECT_LT(qp->qp_num, 0xffffffu);
    ASSERT_EQ(dev.destroy_qp(qp->handle), Errc::kOk);
  }
  auto info = SharedPort::query(v4(dev_ip), wire::kRoceV2Port);
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->members.size(), 1u);
  // The first block stays (a's QP lives in it) and the current one; the used-up ones went back.
  EXPECT_EQ(info->members[0].blocks, 2u);
  EXPECT_EQ(info->blocks_used, 2u);
}

// The group's indices of the live contexts, as the coordinator lists them (pid order aside).
std::multiset<std::uint32_t> member_indices(const char* dev_ip) {
  auto info = SharedPort::query(v4(dev_ip), wire::kRoceV2Port);
  EXPECT_TRUE(info.ok());
  std::multiset<std::uint32_t> idx;
  if (info.ok()) {
    for (const SharedMember& m : info->members) idx.insert(m.index);
  }
  return idx;
}

// Waits until the coordinator lists exactly `want` (a context's kBye reaches it after close()
// returns); the last listing. 10 s at most: a hang guard.
std::multiset<std::uint32_t> wait_for_indices(const char* dev_ip, const Side& waiter,
                                              const std::multiset<std::uint32_t>& want) {
  const Instant give_up = UdpDevice::now() + Duration::s(10);
  std::multiset<std::uint32_t> got = member_indices(dev_ip);
  while (got != want && UdpDevice::now() < give_up) {
    waiter.dev->wait(Duration::ms(1));
    got = member_indices(dev_ip);
  }
  return got;
}

TEST(SharedDevice, AContextThatLeavesDoesNotDisturbTheOthers) {
  const char* const dev_ip = test::unique_ip();
  // a, b, c join in that order (indices 1, 2, 3). b leaving frees index 2 and moves nobody: c
  // keeps index 3 (had the kernel moved c into b's index, c's datagrams would reach the wrong
  // socket until the next steering program); a and c must keep talking.
  Side a, b, c;
  test::make_side(a, dev_ip);
  test::make_side(b, dev_ip);
  test::make_side(c, dev_ip);
  test::pair_up(a, c);
  write_and_check(a, c, 50'000, 3);
  b.dev->close();
  b.dev.reset();
  EXPECT_EQ(wait_for_indices(dev_ip, a, {1, 3}), (std::multiset<std::uint32_t>{1, 3}));
  write_and_check(a, c, 50'000, 4);
  write_and_check(c, a, 50'000, 5);
  // The first newcomer gets b's freed socket (index 2), the next a new one (index 4); both work.
  Side d, e;
  test::make_side(d, dev_ip);
  test::make_side(e, dev_ip);
  EXPECT_EQ(d.dev->shared_port()->group_index(), 2u);
  EXPECT_EQ(e.dev->shared_port()->group_index(), 4u);
  EXPECT_EQ(member_indices(dev_ip), (std::multiset<std::uint32_t>{1, 2, 3, 4}));
  test::pair_up(d, e);
  write_and_check(d, e, 10'000, 6);
  write_and_check(a, c, 10'000, 7);
  // The last index leaving closes its socket (nobody can move); then the freed middle one, and
  // the group shrinks to what is left.
  e.dev->close();
  e.dev.reset();
  EXPECT_EQ(wait_for_indices(dev_ip, a, {1, 2, 3}), (std::multiset<std::uint32_t>{1, 2, 3}));
  d.dev->close();
  d.dev.reset();
  c.dev->close();
  c.dev.reset();
  EXPECT_EQ(wait_for_indices(dev_ip, a, {1}), (std::multiset<std::uint32_t>{1}));
  Side f;
  test::make_side(f, dev_ip);
  EXPECT_EQ(f.dev->shared_port()->group_index(), 2u);
}

TEST(SharedDevice, APortHeldByAnotherProgramGivesAClearError) {
  const wire::IpAddress ip = test::unique_v4();
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_storage ss;
  socklen_t len = 0;
  datapath::to_sockaddr(ip, wire::kRoceV2Port, ss, len);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&ss), len), 0);
  DeviceConfig cfg;
  cfg.name = "uroce0";
  cfg.ip = ip;
  auto d = UdpDevice::open(cfg);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, EADDRINUSE);
  EXPECT_NE(d.error().text.find("port in use"), std::string::npos) << d.error();
  ::close(fd);
  // Free again: the device opens.
  auto d2 = UdpDevice::open(cfg);
  EXPECT_TRUE(d2.ok()) << d2.error();
}

TEST(SharedDevice, ANonLocalAddressGivesAClearError) {
  DeviceConfig cfg;
  cfg.name = "uroce0";
  cfg.ip = v4("192.0.2.1");  // TEST-NET-1: never local here
  cfg.netdev_mtu = 1500;
  auto d = UdpDevice::open(cfg);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, EADDRNOTAVAIL);
  EXPECT_NE(d.error().text.find("not a local address"), std::string::npos) << d.error();
}

// Runs `body` in a forked child; returns its exit status (0: passed).
template <typename F>
int in_child(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(SharedDevice, AnotherUserIsRefusedWithAMessageThatSaysWhy) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to become another user";
  const char* const dev_ip = test::unique_ip();
  Side a;
  test::make_side(a, dev_ip);
  const int rc = in_child([dev_ip] {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return 3;
    auto sp = SharedPort::join(v4(dev_ip), wire::kRoceV2Port, "uroce0");
    if (sp.ok()) return 1;
    return sp.error().code == EACCES && sp.error().text.find("uid 0") != std::string::npos &&
                   sp.error().text.find("UROCE_SHARE=all") != std::string::npos
               ? 0
               : 2;
  });
  EXPECT_EQ(rc, 0);
}

TEST(SharedDevice, AForkedChildOpensTheDeviceAndWritesToItsParent) {
  const char* const dev_ip = test::unique_ip();
  Side a;
  test::make_side(a, dev_ip);
  int to_child[2], to_parent[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(to_parent), 0);
  struct Addr {
    std::uint32_t qpn;
    std::uint64_t va;
    std::uint32_t rkey;
  };
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child: its own context on the same device; the parent's are not its.
    Side c;
    test::make_side(c, dev_ip);
    if (::testing::Test::HasFatalFailure()) ::_exit(10);
    Addr mine{c.qpn, c.va(0), c.mr.rkey}, parent{};
    if (::write(to_parent[1], &mine, sizeof mine) != sizeof mine) ::_exit(11);
    if (::read(to_child[0], &parent, sizeof parent) != sizeof parent) ::_exit(12);
    Side p;  // the parent as the child sees it: its QPN and memory
    p.qpn = parent.qpn;
    p.ip = dev_ip;
    test::connect(c, p, dev_ip);
    for (std::size_t i = 0; i < 4096; ++i)
      c.buf[i] = std::byte(static_cast<std::uint8_t>(i ^ 0x5a));
    Sge sge{c.va(0), 4096, c.mr.lkey};
    SendWr w;
    w.wr_id = 1;
    w.opcode = WrOpcode::kRdmaWrite;
    w.sg_list = std::span(&sge, 1);
    w.rdma = {parent.va, parent.rkey};
    w.send_flags = kSendSignaled;
    const SendWr* bad = nullptr;
    if (c.dev->device().post_send(c.qp, std::span(&w, 1), &bad) != Errc::kOk) ::_exit(13);
    Side none;
    auto wcs = test::run_until(c, none, 1);
    if (wcs.size() != 1 || wcs[0].status != WcStatus::kSuccess) ::_exit(14);
    c.dev->close();
    ::_exit(::testing::Test::HasFailure() ? 15 : 0);
  }
  Addr child{};
  ASSERT_EQ(::read(to_parent[0], &child, sizeof child), static_cast<ssize_t>(sizeof child));
  EXPECT_NE(child.qpn, a.qpn);
  Side c;
  c.qpn = child.qpn;
  test::connect(a, c, dev_ip);
  Addr mine{a.qpn, a.va(0), a.mr.rkey};
  ASSERT_EQ(::write(to_child[1], &mine, sizeof mine), static_cast<ssize_t>(sizeof mine));
  // Progress (the child's WRITE lands here) until the child is done.
  int status = 0;
  const Instant give_up = UdpDevice::now() + Duration::s(30);
  while (::waitpid(pid, &status, WNOHANG) == 0 && UdpDevice::now() < give_up) {
    a.dev->wait(Duration::ms(1));
  }
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (std::size_t i = 0; i < 4096; ++i) {
    ASSERT_EQ(a.buf[i], std::byte(static_cast<std::uint8_t>(i ^ 0x5a))) << i;
  }
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) ::close(fd);
}

TEST(SharedDevice, AKilledMemberNeverDisturbsTheOthers) {
  const char* const dev_ip = test::unique_ip();
  Side a, b;
  test::make_side(a, dev_ip);
  test::make_side(b, dev_ip);
  test::pair_up(a, b);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  // Two children join after a and b (indices 3 and 4), take QP blocks, and are killed.
  std::vector<pid_t> kids;
  for (int k = 0; k < 2; ++k) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      Side c;
      test::make_side(c, dev_ip);
      const char one = 1;
      [[maybe_unused]] const ssize_t n = ::write(ready[1], &one, 1);
      for (;;) c.dev->wait(Duration::ms(100));
    }
    kids.push_back(pid);
  }
  for (std::size_t k = 0; k < kids.size(); ++k) {
    char one;
    ASSERT_EQ(::read(ready[0], &one, 1), 1);
  }
  write_and_check(a, b, 100'000, 7);
  // The first child (index 3) dies first; the second keeps index 4.
  for (pid_t pid : kids) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    write_and_check(a, b, 100'000, 8);
    write_and_check(b, a, 100'000, 9);
  }
  // The coordinator notices both deaths (their process exits), and a newcomer takes index 3.
  const Instant give_up = UdpDevice::now() + Duration::s(10);
  std::size_t members = 0;
  while (UdpDevice::now() < give_up) {
    auto info = SharedPort::query(v4(dev_ip), wire::kRoceV2Port);
    ASSERT_TRUE(info.ok());
    members = info->members.size();
    if (members == 2) break;
    a.dev->wait(Duration::ms(1));
  }
  EXPECT_EQ(members, 2u);
  // The killed children's QPN blocks are free again: a's and b's are the only ones in use.
  auto info = SharedPort::query(v4(dev_ip), wire::kRoceV2Port);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->blocks_used, 2u);
  Side d, e;
  test::make_side(d, dev_ip);
  test::make_side(e, dev_ip);
  EXPECT_EQ(d.dev->shared_port()->group_index(), 3u);
  test::pair_up(d, e);
  write_and_check(e, d, 10'000, 10);
  write_and_check(a, b, 10'000, 11);
  ::close(ready[0]);
  ::close(ready[1]);
}

// A coordinator out of file descriptors (it inherits RLIMIT_NOFILE from the process that started
// it; each context costs it three: connection, socket, pidfd) refuses the next context at once
// with EMFILE and a reason, and takes one again when another has left. Before, an accept() that
// failed with EMFILE left the connection in the backlog: the listening socket stayed readable, the
// coordinator spun on it, and the joiner waited for a welcome that never came (10 s per attempt,
// 2000 attempts). Three limits in a row, so that the limit is met by the accept, the socket and
// the pidfd in turn.
TEST(SharedDevice, ACoordinatorOutOfFilesRefusesTheNextContextAndRecovers) {
  for (int extra = 0; extra < 3; ++extra) {
    SCOPED_TRACE(extra);
    const char* const dev_ip = test::unique_ip();
    int started[2];
    int done[2];
    ASSERT_EQ(::pipe(started), 0);
    ASSERT_EQ(::pipe(done), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      // This child starts the coordinator, which keeps the child's limit: what the child has
      // open now, plus room for the device and about ten contexts in the coordinator.
      ::close(done[1]);
      int open_fds = 0;
      for (int fd = 0; fd < 4096; ++fd) open_fds += ::fcntl(fd, F_GETFD) >= 0 ? 1 : 0;
      const rlim_t limit = static_cast<rlim_t>(std::max(open_fds + 24, 48) + extra);
      const rlimit r{limit, limit};
      if (::setrlimit(RLIMIT_NOFILE, &r) != 0) std::_Exit(1);
      Side c;
      test::make_side(c, dev_ip);
      const char one = 1;
      if (::write(started[1], &one, 1) != 1) std::_Exit(1);
      char x;
      [[maybe_unused]] const ssize_t n = ::read(done[0], &x, 1);  // until the parent is done
      std::_Exit(0);
    }
    ::close(started[1]);
    ::close(done[0]);
    char one;
    ASSERT_EQ(::read(started[0], &one, 1), 1);
    DeviceConfig cfg;
    cfg.name = "uroce0";
    cfg.ip = v4(dev_ip);
    std::vector<std::unique_ptr<UdpDevice>> devs;
    std::optional<Error> refused;
    for (int i = 0; i < 200 && !refused; ++i) {
      auto d = UdpDevice::open(cfg, wire::kRoceV2Port, "", UdpDevice::Sharing::kShared);
      if (d.ok()) {
        devs.push_back(std::move(d.value()));
      } else {
        refused = d.error();
      }
    }
    ASSERT_TRUE(refused.has_value());
    EXPECT_EQ(refused->code, EMFILE) << refused->text;
    EXPECT_FALSE(devs.empty());
    // One leaves (kBye, served before the next connection): the next joins.
    devs.pop_back();
    auto again = UdpDevice::open(cfg, wire::kRoceV2Port, "", UdpDevice::Sharing::kShared);
    EXPECT_TRUE(again.ok()) << again.error().text;
    auto info = SharedPort::query(v4(dev_ip), wire::kRoceV2Port);
    if (again.ok()) {
      // The listing needs a file too: after `again` took the last one, it may be refused.
      again.value().reset();
      info = SharedPort::query(v4(dev_ip), wire::kRoceV2Port);
    }
    ASSERT_TRUE(info.ok()) << info.error().text;
    EXPECT_EQ(info->members.size(), devs.size() + 1);
    devs.clear();
    ::close(done[1]);
    ::close(started[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
}

TEST(SharedDevice, TheCoordinatorGoesAwayWhenNoContextUsesTheDevice) {
  const char* const dev_ip = test::unique_ip();
  const wire::IpAddress ip = v4(dev_ip);
  {
    Side a;
    test::SideOptions o;
    o.device.devd.linger_ms = 0;  // UROCE_DEVD_LINGER_MS=0: told on its command line
    test::make_side(a, dev_ip, o);
    EXPECT_TRUE(SharedPort::query(ip, wire::kRoceV2Port).ok());
  }
  // Bounded: the coordinator exits as soon as it sees the last context leave.
  const Instant give_up = UdpDevice::now() + Duration::s(10);
  bool gone = false;
  while (!gone && UdpDevice::now() < give_up) {
    gone = !SharedPort::query(ip, wire::kRoceV2Port).ok();
    if (!gone) ::usleep(1000);
  }
  EXPECT_TRUE(gone);
  // And the next one starts a new coordinator.
  Side b;
  test::make_side(b, dev_ip);
  EXPECT_TRUE(SharedPort::query(ip, wire::kRoceV2Port).ok());
}

// The process running the coordinator of the device at `ip`: the uroce-devd whose command line
// says `--ip ip`; 0 when there is none.
pid_t coordinator_pid(const std::string& ip) {
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return 0;
  pid_t found = 0;
  while (dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline", std::ios::binary);
    // Arguments end in NULs: the program's name, then "--ip" and `ip` side by side.
    const std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::string program = cmd.substr(0, cmd.find('\0'));
    if (program.find("uroce-devd") != std::string::npos &&
        cmd.find(std::string("\0--ip\0", 6) + ip + '\0') != std::string::npos) {
      found = static_cast<pid_t>(pid);
      break;
    }
  }
  ::closedir(proc);
  return found;
}

TEST(SharedDevice, TheCoordinatorRunsOnEveryCpuNotOnlyOnItsStarters) {
  const char* const dev_ip = test::unique_ip();
  // An MPI rank bound to its core, or a benchmark pinned with taskset, starts the coordinator;
  // the coordinator serves every context of the device and must not stay on that one core.
  cpu_set_t mine;
  ASSERT_EQ(::sched_getaffinity(0, sizeof mine, &mine), 0);
  if (CPU_COUNT(&mine) < 2) GTEST_SKIP() << "one CPU allowed: no other CPU to run on";
  int first = 0;
  while (!CPU_ISSET(first, &mine)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  struct Restore {
    cpu_set_t* to;
    ~Restore() { ::sched_setaffinity(0, sizeof *to, to); }
  } restore{&mine};
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  Side a;
  test::SideOptions o;
  o.device.devd.linger_ms = 0;
  test::make_side(a, dev_ip, o);
  const pid_t devd = coordinator_pid(dev_ip);
  ASSERT_NE(devd, 0) << "no uroce-devd --ip " << dev_ip;
  cpu_set_t theirs;
  ASSERT_EQ(::sched_getaffinity(devd, sizeof theirs, &theirs), 0);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mine)) {
      EXPECT_TRUE(CPU_ISSET(cpu, &theirs)) << "CPU " << cpu;
    }
  }
}

TEST(SharedDevice, AnExclusiveDeviceStillRefusesASecondOpener) {
  const char* const dev_ip = test::unique_ip();
  DeviceConfig cfg;
  cfg.name = "uroce0";
  cfg.ip = v4(dev_ip);
  auto a = UdpDevice::open(cfg, wire::kRoceV2Port, "", UdpDevice::Sharing::kExclusive);
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_EQ(a.value()->shared_port(), nullptr);
  auto b = UdpDevice::open(cfg);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code, EADDRINUSE) << b.error();
}

TEST(SharedDevice, QpOneGoesToTheContextThatClaimsIt) {
  const char* const dev_ip = test::unique_ip();
  Side a, b;
  test::make_side(a, dev_ip);
  test::make_side(b, dev_ip);
  Group g;  // to send raw datagrams to the device
  g.ip = v4(dev_ip);
  g.port = wire::kRoceV2Port;
  ASSERT_EQ(b.dev->shared_port()->claim_qp1(true), Errc::kOk);
  EXPECT_EQ(a.dev->shared_port()->claim_qp1(true), Errc::kBusy);  // one listener at a time
  auto info = SharedPort::query(g.ip, wire::kRoceV2Port);
  ASSERT_TRUE(info.ok());
  for (const SharedMember& m : info->members) EXPECT_EQ(m.qp1, m.index == 2) << m.index;
  // A datagram for QP1 reaches b's socket (whose engine has no QP1 yet and counts it), not a's.
  send_to(g, 1, 99);
  const Instant give_up = UdpDevice::now() + Duration::s(10);
  while (b.dev->datapath().counters().rx_datagrams == 0 && UdpDevice::now() < give_up) {
    b.dev->wait(Duration::ms(1));
  }
  a.dev->progress();
  EXPECT_EQ(b.dev->datapath().counters().rx_datagrams, 1u);
  EXPECT_EQ(a.dev->datapath().counters().rx_datagrams, 0u);
  // Given back, and claimed by a.
  ASSERT_EQ(b.dev->shared_port()->claim_qp1(false), Errc::kOk);
  EXPECT_EQ(a.dev->shared_port()->claim_qp1(true), Errc::kOk);
}

TEST(SharedDevice, AKeyOfOneContextIsNeverAcceptedForAnothersQp) {
  const char* const dev_ip = test::unique_ip();
  // a, b and c share the address; c is connected to b. c aims a WRITE at a's memory with a's
  // rkey, through b's QP: b checks the key against its own MRs only, and refuses it.
  Side a, b, c;
  test::make_side(a, dev_ip);
  test::make_side(b, dev_ip);
  test::make_side(c, dev_ip);
  test::pair_up(b, c);
  for (std::size_t i = 0; i < 4096; ++i) c.buf[i] = std::byte{0xee};
  Sge sge{c.va(0), 4096, c.mr.lkey};
  SendWr w = test::write_wr(1, sge, a, 0);  // a's address and rkey
  const SendWr* bad = nullptr;
  ASSERT_EQ(c.dev->device().post_send(c.qp, std::span(&w, 1), &bad), Errc::kOk);
  auto wcs = test::run_until(c, b, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr) << wc_status_name(wcs[0].status);
  a.dev->progress();
  for (std::size_t i = 0; i < 4096; ++i) ASSERT_EQ(a.buf[i], std::byte{0}) << i;
}

}  // namespace
}  // namespace uroce::engine

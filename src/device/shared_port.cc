#include "device/shared_port.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "base/assert.h"
#include "base/entropy.h"
#include "datapath/udp.h"
#include "device/device_config.h"
#include "proto/block_order.h"

extern char** environ;

namespace uroce::engine {

namespace {

// ---- the fork guard: fds a forked child must not keep ----

constexpr int kGuardSlots = 512;
std::atomic<int> g_guarded[kGuardSlots];
std::once_flag g_atfork_once;

void atfork_child() {
  // Async-signal-safe only: socket() and dup2() put an inert socket in place of each file, so
  // the numbers stay taken (the parent's objects in the child may still close them) but the
  // child holds no reference to the parent's connections and group sockets.
  const int inert = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  for (std::atomic<int>& slot : g_guarded) {
    const int fd = slot.load(std::memory_order_relaxed);
    if (fd < 0) continue;
    if (inert >= 0) {
      ::dup3(inert, fd, O_CLOEXEC);
    } else {
      ::close(fd);
    }
    slot.store(-1, std::memory_order_relaxed);
  }
  if (inert >= 0) ::close(inert);
}

void guard_fd(int fd) {
  UROCE_ASSERT(fd >= 0);  // -1 marks a free slot
  std::call_once(g_atfork_once, [] {
    for (std::atomic<int>& slot : g_guarded) slot.store(-1);
    ::pthread_atfork(nullptr, nullptr, atfork_child);
  });
  for (std::atomic<int>& slot : g_guarded) {
    int expected = -1;
    if (slot.compare_exchange_strong(expected, fd)) return;
  }
  // Full: a child would keep this one; it cannot disturb anything but the steering's bookkeeping.
}

void unguard_fd(int fd) {
  if (fd < 0) return;
  for (std::atomic<int>& slot : g_guarded) {
    int expected = fd;
    if (slot.compare_exchange_strong(expected, -1)) return;
  }
}

// ---- messages ----

bool send_msg(int fd, const devd::Msg& m) {
  return ::send(fd, &m, sizeof m, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof m);
}

// Waits up to `timeout_ms` for one message; a passed fd lands in *fd_out (close-on-exec).
bool recv_msg(int fd, devd::Msg& m, int timeout_ms, int* fd_out = nullptr) {
  pollfd p{fd, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  if (r != 1) return false;
  iovec iov{&m, sizeof m};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  h.msg_control = control;
  h.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(fd, &h, MSG_CMSG_CLOEXEC);
  int passed = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int))) {
      std::memcpy(&passed, CMSG_DATA(c), sizeof passed);
    }
  }
  if (fd_out != nullptr) {
    *fd_out = passed;
  } else if (passed >= 0) {
    ::close(passed);
  }
  if (n != static_cast<ssize_t>(sizeof m)) {
    if (fd_out != nullptr && passed >= 0) ::close(passed);
    if (fd_out != nullptr) *fd_out = -1;
    return false;
  }
  return true;
}

sockaddr_un abstract_address(const std::string& name, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::size_t n = std::min(name.size(), sizeof a.sun_path - 1);
  std::memcpy(a.sun_path + 1, name.data(), n);
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  UROCE_ASSERT(len <= sizeof a);  // the name was cut to fit
  return a;
}

}  // namespace

int connect_coordinator(const std::string& name) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  socklen_t len = 0;
  const sockaddr_un a = abstract_address(name, len);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), len) != 0) {
    const int e = errno;
    ::close(fd);
    return -e;
  }
  return fd;
}

namespace {

void sleep_ms(int ms) {
  UROCE_ASSERT(ms >= 0 && ms < 1000);  // tv_nsec below one second
  timespec ts{0, ms * 1'000'000L};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// The uroce-devd next to the object this code was linked into (dladdr), by the installed layout:
// beside it (the uroce program in bin/), from the library directory (liburoce.so) or from the
// drop-ins' private directory below it (libibverbs.so.1 in lib/<triplet>/uroce/); the build
// tree's when the object is in the build tree, or when nothing else is found. UROCE_DEVD
// (options.path) wins over all.
std::string coordinator_path(const devd::DevdOptions& options) {
  if (!options.path.empty()) return options.path;
  Dl_info info{};
  link_map* map = nullptr;
  if (::dladdr1(reinterpret_cast<void*>(&coordinator_path), &info, reinterpret_cast<void**>(&map),
                RTLD_DL_LINKMAP) != 0 &&
      map != nullptr) {
    // The main program's link map has no name: its file is /proc/self/exe.
    std::string dir = map->l_name;
    if (dir.empty()) {
      char exe[4096];
      const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
      dir.assign(exe, n > 0 ? static_cast<std::size_t>(n) : 0);
    }
    const std::size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? std::string(".") : dir.substr(0, slash);
    // Linked in the build tree: its own coordinator, whatever is installed.
    char real[PATH_MAX];
    if (::realpath(dir.c_str(), real) != nullptr &&
        std::string_view(real).starts_with(UROCE_BUILD_TREE "/")) {
      return UROCE_DEVD_PATH;
    }
    for (const char* rel : {"", "/" UROCE_DEVD_FROM_LIBDIR, "/../" UROCE_DEVD_FROM_LIBDIR}) {
      const std::string candidate = dir + rel + "/uroce-devd";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return UROCE_DEVD_PATH;
}

std::string this_comm() {
  char name[17] = {};
  ::prctl(PR_GET_NAME, name, 0, 0, 0);
  return name;
}

enum class Start { kStarted, kRace };

// Claims the coordinator's name, binds the group's first socket and starts uroce-devd with
// both. kRace: another process claimed the name first (connect again).
// Long: the sockets, argv and posix_spawn attributes of one spawn, in order.
Result<Start, Error> start_coordinator(const wire::IpAddress& ip, std::uint16_t port,
                                       const std::string& name, const devd::DevdOptions& options) {
  int listen_fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (listen_fd < 0) return Err{Error::system(errno, "socket")};
  socklen_t len = 0;
  const sockaddr_un a = abstract_address(name, len);
  if (::bind(listen_fd, reinterpret_cast<const sockaddr*>(&a), len) != 0) {
    const int e = errno;
    ::close(listen_fd);
    if (e == EADDRINUSE) return Start::kRace;
    return Err{Error::system(e, "cannot claim the device coordinator's name")};
  }
  if (::listen(listen_fd, 128) != 0) {
    const int e = errno;
    ::close(listen_fd);
    return Err{Error::system(e, "listen")};
  }
  const int sink = datapath::make_group_socket(ip, port);
  if (sink < 0) {
    ::close(listen_fd);
    const std::string where = ip_to_string(ip) + " port " + std::to_string(port);
    if (-sink == EADDRINUSE) {
      return Err{Error(EADDRINUSE,
                       "cannot bind " + where +
                           ": port in use by a program that does not share it (another RDMA "
                           "stack, a uroce device opened with UROCE_SHARED=0, or another user's "
                           "uroce device)")};
    }
    if (-sink == EADDRNOTAVAIL) {
      return Err{Error(EADDRNOTAVAIL, "cannot bind " + where + ": not a local address (" +
                                          std::strerror(-sink) + ")")};
    }
    return Err{Error::system(-sink, "cannot bind " + where)};
  }
  // Above 3 and 4, so that the child's dup2 onto them always clears close-on-exec.
  const int l_hi = ::fcntl(listen_fd, F_DUPFD_CLOEXEC, 10);
  const int s_hi = ::fcntl(sink, F_DUPFD_CLOEXEC, 10);
  ::close(listen_fd);
  ::close(sink);
  if (l_hi < 0 || s_hi < 0) {
    if (l_hi >= 0) ::close(l_hi);
    if (s_hi >= 0) ::close(s_hi);
    return Err{Error::system(errno, "fcntl")};
  }
  UROCE_ASSERT(l_hi >= 10 && s_hi >= 10);  // the dup2s below never land on each other
  // Everything the coordinator is told comes on its command line (proto/devd_options.h).
  const std::string path = coordinator_path(options);
  const std::string ip_text = ip_to_string(ip);
  const std::string port_text = std::to_string(port);
  const std::string linger_text = std::to_string(options.linger_ms);
  const std::string grace_text =
      options.cm_listen_grace_ms ? std::to_string(*options.cm_listen_grace_ms) : "";
  std::vector<const char*> argv = {path.c_str(),      "--ip",        ip_text.c_str(),    "--port",
                                   port_text.c_str(), "--linger-ms", linger_text.c_str()};
  if (options.any_user) argv.push_back("--any-user");
  if (!options.capture_path.empty()) {
    argv.push_back("--capture");
    argv.push_back(options.capture_path.c_str());
  }
  if (!options.faults.empty()) {
    argv.push_back("--faults");
    argv.push_back(options.faults.c_str());
  }
  if (options.cm_listen_grace_ms) {
    argv.push_back("--cm-listen-grace-ms");
    argv.push_back(grace_text.c_str());
  }
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  if (!options.log_path.empty()) {
    posix_spawn_file_actions_addopen(&fa, 2, options.log_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0600);
  } else {
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&fa, l_hi, 3);
  posix_spawn_file_actions_adddup2(&fa, s_hi, 4);
  posix_spawn_file_actions_addclosefrom_np(&fa, 5);
  sigset_t none;
  sigset_t all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  const int rc =
      ::posix_spawn(&pid, path.c_str(), &fa, &attr, const_cast<char**>(argv.data()), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(l_hi);
  ::close(s_hi);
  if (rc != 0) {
    return Err{Error(rc, "cannot start the device coordinator " + path + ": " + std::strerror(rc) +
                             " (UROCE_DEVD names another one)")};
  }
  // It forks the coordinator and exits at once: reap it (an application that reaps every
  // child itself may have done so already).
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return Start::kStarted;
}

}  // namespace

namespace {

struct Connected {
  int conn = -1;
  int udp = -1;  // the socket passed with kWelcome, if any
  devd::Msg welcome;
};

// Connects to the device's coordinator (starting one when none runs) and says `hello`; the
// connection once the coordinator has answered kWelcome.
Result<Connected, Error> connect_and_greet(const wire::IpAddress& ip, std::uint16_t port,
                                           const std::string& device, const devd::Msg& hello,
                                           bool want_socket, const devd::DevdOptions& options) {
  const std::string name = devd::socket_name(ip, port);
  // A coordinator that is exiting, or one just being started by another process, keeps us
  // waiting a little: retry for up to 10 s.
  for (int attempt = 0; attempt < 2000; ++attempt) {
    const int conn = connect_coordinator(name);
    if (conn == -ECONNREFUSED) {
      auto st = start_coordinator(ip, port, name, options);
      if (!st.ok()) return Err{st.error()};
      if (st.value() == Start::kRace) sleep_ms(5);
      continue;
    }
    if (conn < 0) {
      if (conn == -EAGAIN) {  // its backlog is full
        sleep_ms(5);
        continue;
      }
      return Err{Error::system(-conn, "cannot reach the device coordinator")};
    }
    Connected c;
    if (send_msg(conn, hello) && recv_msg(conn, c.welcome, 10'000, &c.udp)) {
      if (c.welcome.type == devd::MsgType::kError) {
        ::close(conn);
        if (c.udp >= 0) ::close(c.udp);
        const int code = c.welcome.status != 0 ? c.welcome.status : EIO;
        return Err{Error(code, "device " + device + " (" + ip_to_string(ip) +
                                   "): " + devd::get_text(c.welcome.text))};
      }
      if (c.welcome.type == devd::MsgType::kWelcome && (c.udp >= 0 || !want_socket)) {
        c.conn = conn;
        return c;
      }
    }
    // The coordinator closed the connection (it is exiting) or said something else: again.
    if (c.udp >= 0) ::close(c.udp);
    ::close(conn);
    sleep_ms(5);
  }
  return Err{Error(ETIMEDOUT, "the device coordinator for " + ip_to_string(ip) + " port " +
                                  std::to_string(port) + " did not answer")};
}

}  // namespace

Result<std::unique_ptr<SharedPort>, Error> SharedPort::join(const wire::IpAddress& ip,
                                                            std::uint16_t port,
                                                            const std::string& device,
                                                            const devd::DevdOptions& options) {
  devd::Msg hello;
  hello.type = devd::MsgType::kHello;
  devd::set_text(hello.device, device);
  devd::set_text(hello.comm, this_comm());
  auto c = connect_and_greet(ip, port, device, hello, true, options);
  if (!c.ok()) return Err{c.error()};
  std::unique_ptr<SharedPort> sp(new SharedPort());
  sp->conn_ = c.value().conn;
  sp->udp_ = c.value().udp;
  sp->udp_number_ = c.value().udp;
  sp->owner_ = ::getpid();
  sp->index_ = c.value().welcome.index;
  UROCE_ASSERT(sp->conn_ >= 0 && sp->udp_ >= 0);  // a kHello is welcomed with the socket
  guard_fd(sp->conn_);
  guard_fd(sp->udp_);
  return sp;
}

Result<int, Error> SharedPort::connect_cm(const wire::IpAddress& ip, std::uint16_t port,
                                          const std::string& device,
                                          const devd::DevdOptions& options) {
  devd::Msg hello;
  hello.type = devd::MsgType::kCmHello;
  devd::set_text(hello.device, device);
  devd::set_text(hello.comm, this_comm());
  auto c = connect_and_greet(ip, port, device, hello, false, options);
  if (!c.ok()) return Err{c.error()};
  if (c.value().udp >= 0) ::close(c.value().udp);
  return c.value().conn;
}

Result<SharedDeviceInfo, Error> SharedPort::query(const wire::IpAddress& ip, std::uint16_t port) {
  const int conn = connect_coordinator(devd::socket_name(ip, port));
  if (conn < 0) return Err{Error::system(-conn, "no coordinator")};
  devd::Msg req;
  req.type = devd::MsgType::kList;
  SharedDeviceInfo info;
  bool ended = false;
  if (send_msg(conn, req)) {
    devd::Msg m;
    while (recv_msg(conn, m, 2000)) {
      if (m.type == devd::MsgType::kListEnd) {
        info.unsteered = m.value;
        info.blocks_used = m.blocks;
        info.closed_qps = m.index;
        ended = true;
        break;
      }
      if (m.type == devd::MsgType::kCmId) {
        SharedCmId id;
        id.pid = m.pid;
        id.port_space = m.index;
        id.port = static_cast<std::uint16_t>(m.value);
        id.state = devd::get_text(m.text);
        info.cm_ids.push_back(std::move(id));
        continue;
      }
      if (m.type == devd::MsgType::kCmStats) {
        // One or more (a message holds 255 bytes of text): "name value" pairs, joined.
        if (!info.cm_counters.empty()) info.cm_counters += ' ';
        info.cm_counters += devd::get_text(m.text);
        continue;
      }
      if (m.type != devd::MsgType::kMember) break;
      SharedMember s;
      s.pid = m.pid;
      s.uid = m.uid;
      s.comm = devd::get_text(m.comm);
      s.device = devd::get_text(m.device);
      s.index = m.index;
      s.blocks = m.blocks;
      s.qp1 = m.qp1 != 0;
      s.exiting = m.value != 0;
      info.members.push_back(std::move(s));
    }
  }
  ::close(conn);
  if (!ended) return Err{Error(ETIMEDOUT, "the coordinator did not answer")};
  return info;
}

SharedPort::~SharedPort() {
  leave();
  if (udp_ >= 0 && owner_ == ::getpid()) {
    unguard_fd(udp_);
    ::close(udp_);
  }
}

int SharedPort::take_socket() {
  std::lock_guard lk(mu_);
  UROCE_ASSERT(owner_ == ::getpid());  // by the process that joined, not a forked child
  const int fd = udp_;
  UROCE_ASSERT(fd >= 0);  // taken once, from the socket kWelcome passed (join)
  udp_ = -1;
  return fd;
}

void SharedPort::forget_socket() {
  std::lock_guard lk(mu_);
  UROCE_ASSERT(udp_ < 0);  // taken by the datapath (take_socket) before it lets it go
  unguard_fd(udp_number_);
  udp_number_ = -1;
}

void SharedPort::leave() {
  std::lock_guard lk(mu_);
  if (conn_ < 0) return;
  // In a forked child this object is the parent's: its fds are placeholders; touch nothing
  // the parent's coordinator could see.
  if (owner_ == ::getpid()) {
    devd::Msg bye;
    bye.type = devd::MsgType::kBye;
    send_msg(conn_, bye);
    unguard_fd(conn_);
  }
  ::close(conn_);
  conn_ = -1;
}

bool SharedPort::call(const devd::Msg& req, devd::Msg& answer) {
  mu_.assert_held();
  if (conn_ < 0 || owner_ != ::getpid()) return false;
  return send_msg(conn_, req) && recv_msg(conn_, answer, 10'000);
}

std::optional<std::uint32_t> SharedPort::allocate_qpn() {
  std::lock_guard lk(mu_);
  if (!current_ || next_in_block_ == devd::kBlockSize) {
    // The old block has handed out every number: let it go once its QPs are gone.
    if (current_) {
      const std::uint32_t old = *current_;
      current_.reset();
      if (live_[old] == 0) give_back(old);
    }
    devd::Msg req;
    req.type = devd::MsgType::kAllocBlock;
    devd::Msg ans;
    if (!call(req, ans) || ans.type != devd::MsgType::kBlock || ans.status != 0 ||
        ans.value < devd::kFirstBlock || ans.value > devd::kLastBlock || live_.count(ans.value)) {
      return std::nullopt;
    }
    current_ = ans.value;
    next_in_block_ = 0;
    order_ = devd::block_order(kernel_random_u64());  // unpredictable QPNs (issue 44)
    live_[ans.value] = 0;
  }
  UROCE_ASSERT(current_ && next_in_block_ < devd::kBlockSize);
  const std::uint32_t qpn = (*current_ << devd::kBlockBits) | order_[next_in_block_++];
  UROCE_ASSERT(devd::block_of(qpn) == *current_);
  ++live_[*current_];
  // The block's live QPs are among the numbers it handed out.
  UROCE_ASSERT(live_[*current_] <= next_in_block_);
  return qpn;
}

void SharedPort::release_qpn(std::uint32_t qpn) {
  std::lock_guard lk(mu_);
  const std::uint32_t b = devd::block_of(qpn);
  auto it = live_.find(b);
  if (it == live_.end() || it->second == 0) return;
  if (--it->second != 0 || (current_ && *current_ == b)) return;
  give_back(b);
}

void SharedPort::give_back(std::uint32_t block) {
  mu_.assert_held();
  UROCE_ASSERT(!current_ || *current_ != block);  // never the block numbers are taken from
  live_.erase(block);
  devd::Msg rel;
  rel.type = devd::MsgType::kReleaseBlock;
  rel.value = block;
  devd::Msg ans;
  call(rel, ans);
}

void SharedPort::keep_closed_qp(const transport::ClosedQp& q, Duration life) {
  std::lock_guard lk(mu_);
  // Not answered: no round trip per destroyed QP. A coordinator that has gone leaves the closed
  // QP to this context's engine.
  if (conn_ >= 0 && owner_ == ::getpid()) (void)send_msg(conn_, devd::closed_qp_msg(q, life));
}

Errc SharedPort::claim_qp1(bool on) {
  std::lock_guard lk(mu_);
  devd::Msg req;
  req.type = devd::MsgType::kClaimQp1;
  req.value = on ? 1 : 0;
  devd::Msg ans;
  if (!call(req, ans) || ans.type != devd::MsgType::kQp1) return Errc::kNoEntry;
  if (ans.status == EBUSY) return Errc::kBusy;
  return ans.status == 0 ? Errc::kOk : Errc::kInvalidArgument;
}

namespace devd {
std::string socket_name(const wire::IpAddress& ip, std::uint16_t port) {
  return "uroce-devd/" + ip_to_string(ip) + "/" + std::to_string(port);
}
}  // namespace devd

}  // namespace uroce::engine

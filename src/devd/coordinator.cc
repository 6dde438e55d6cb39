#include "devd/coordinator.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/entropy.h"
#include "datapath/udp.h"
#include "devd/block_allocator.h"
#include "devd/cm_server.h"
#include "devd/steering.h"
#include "proto/devd_protocol.h"

namespace uroce::engine {

namespace {

std::int64_t monotonic_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1'000'000;
}

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// One slot of the group: a context's, or free (its socket kept for the next context).
struct Member {
  bool free = false;  // no context: the socket waits for the next one (nothing steered to it)
  int conn = -1;      // -1 once the connection closed (the process is dying: see pidfd)
  int udp = -1;       // the coordinator's reference to the slot's socket
  int pidfd = -1;     // the process, to learn when it has exited
  pid_t pid = 0;
  uid_t uid = 0;
  std::string device;
  std::string comm;
  std::vector<std::uint32_t> blocks;
  bool qp1 = false;
};

class Coordinator {
 public:
  Coordinator(int listen_fd, std::unique_ptr<CmServer> cm, const CoordinatorOptions& o)
      : listen_(listen_fd),
        sink_(cm->sink_fd()),
        cm_(std::move(cm)),
        opt_(o),
        blocks_(o.seed != 0 ? o.seed : kernel_random_u64()),
        spare_(open_spare()) {}
  ~Coordinator() {
    if (spare_ >= 0) ::close(spare_);
  }

  int run() {
    std::int64_t idle_since = monotonic_ms();  // -1 while a context uses the device
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      fds.push_back({listen_, POLLIN, 0});
      fds.push_back({sink_, POLLIN, 0});
      fds.push_back({cm_->mad_fd(), POLLIN, 0});  // its errors too (POLLERR)
      for (const Member& m : members_) {
        // A connection, or, once it closed, the process's exit.
        if (m.free) continue;
        if (m.conn >= 0) {
          fds.push_back({m.conn, POLLIN, 0});
        } else {
          fds.push_back({m.pidfd, POLLIN, 0});
        }
      }
      cm_->add_pollfds(fds);
      int timeout = -1;
      if (idle()) {
        const std::int64_t left = idle_since + opt_.linger_ms - monotonic_ms();
        if (left <= 0) {
          // Nobody came in time. A connection already waiting still gets served.
          pollfd p{listen_, POLLIN, 0};
          if (::poll(&p, 1, 0) <= 0) break;
        }
        timeout = static_cast<int>(left > 0 ? left : 0);
      }
      const Instant due = cm_->next_deadline();
      if (due != Instant::never()) {
        // Rounded up: a timer is never served early.
        const std::int64_t ms = (due.ns() - now().ns() + 999'999) / 1'000'000;
        const int t = static_cast<int>(ms < 0 ? 0 : (ms > 60'000 ? 60'000 : ms));
        if (timeout < 0 || t < timeout) timeout = t;
      }
      const int n = ::poll(fds.data(), fds.size(), timeout);
      if (n < 0) {
        if (errno == EINTR) continue;
        return 1;
      }
      if (fds[1].revents != 0) cm_->on_sink_readable(now());
      if (fds[2].revents != 0) cm_->on_mad_socket(now());
      // Members and CM clients first (by fd: the vectors change as they leave), then new
      // connections.
      std::vector<int> ready;
      for (std::size_t i = 3; i < fds.size(); ++i) {
        if (fds[i].revents != 0) ready.push_back(fds[i].fd);
      }
      for (int fd : ready) {
        if (cm_->owns(fd)) {
          cm_->on_client_readable(now(), fd);
        } else {
          serve_member_fd(fd);
        }
      }
      if (due != Instant::never() && now() >= due) cm_->on_timeout(now());
      if (fds[0].revents != 0) accept_one();
      if (!idle()) {
        idle_since = -1;
      } else if (idle_since < 0) {
        idle_since = monotonic_ms();
      }
    }
    // The sink first: once the name is free a successor may bind a new group at once.
    cm_.reset();
    ::close(listen_);
    return 0;
  }

 private:
  // Nobody uses the device: no context, no event channel, and the CM retransmits nothing (a
  // process that disconnected and exited leaves its DREQ to the CM, which must see it answered
  // or given up, as the kernel's does: exiting earlier lost the DREQ's retransmissions, and the
  // peer then retried its own DREQ for a minute against a closed port), and no closed QP is
  // still answered for (transport/closed_qps.h: the peer of a QP whose process exited right
  // after its last message may still retransmit that message for an ACK that was lost).
  bool idle() {
    // Free slots at the end are closed as they free up (remove()), so no slot means no context.
    return members_.empty() && !cm_->has_clients() && !cm_->retransmitting() &&
           !cm_->keeps_closed_qps(now());
  }

  static Instant now() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return Instant::from_ns(std::int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec);
  }

  static bool send_msg(int fd, const devd::Msg& m, int pass_fd = -1) {
    iovec iov{const_cast<devd::Msg*>(&m), sizeof m};
    msghdr h{};
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (pass_fd >= 0) {
      h.msg_control = control;
      h.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&h);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &pass_fd, sizeof pass_fd);
    }
    // Never wait for a client: one that does not read its answers is dropped.
    return ::sendmsg(fd, &h, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof m);
  }

  static void send_error(int fd, int err, const std::string& text) {
    devd::Msg m;
    m.type = devd::MsgType::kError;
    m.status = err;
    devd::set_text(m.text, text);
    send_msg(fd, m);
  }

  // A file kept open to be given up when the coordinator has no other: see refuse_out_of_files().
  static int open_spare() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

  static std::string out_of_files_text() {
    rlimit r{};
    ::getrlimit(RLIMIT_NOFILE, &r);
    return "the device's coordinator has no file descriptor left for another context (its "
           "RLIMIT_NOFILE, " +
           std::to_string(r.rlim_cur) +
           ", is the hard limit of the process that started it; each context takes three): "
           "close another context, or start the device from a process with a higher limit";
  }

  // accept() failed with EMFILE or ENFILE: the connection stays in the backlog and the listening
  // socket readable, so that poll() would return at once forever while the client waits for an
  // answer. Give up the spare file, take the connection, tell it why, close it, and take the
  // spare again.
  void refuse_out_of_files() {
    if (spare_ < 0) return;
    ::close(spare_);
    spare_ = -1;
    const int c = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c >= 0) {
      pollfd p{c, POLLIN, 0};
      devd::Msg m;
      if (::poll(&p, 1, 200) == 1 && ::recv(c, &m, sizeof m, 0) == sizeof m) {
        send_error(c, EMFILE, out_of_files_text());
      }
      ::close(c);
    }
    spare_ = open_spare();
  }

  // Long: one connection's first message, dispatched by its kind, a few lines each.
  void accept_one() {
    const int c = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EMFILE || errno == ENFILE) refuse_out_of_files();
      return;
    }
    // The first message says what the connection is for. A client sends it right after
    // connecting; wait a little for it rather than keep half-open connections around.
    pollfd p{c, POLLIN, 0};
    devd::Msg m;
    if (::poll(&p, 1, 200) != 1 || ::recv(c, &m, sizeof m, 0) != sizeof m ||
        m.version != devd::kVersion) {
      ::close(c);
      return;
    }
    if (m.type == devd::MsgType::kList) {
      list(c);
      ::close(c);
      return;
    }
    if (m.type != devd::MsgType::kHello && m.type != devd::MsgType::kCmHello) {
      ::close(c);
      return;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      ::close(c);
      return;
    }
    if (cred.uid != ::getuid() && !opt_.any_user) {
      send_error(c, EACCES,
                 "the device's address is shared by the processes of uid " +
                     std::to_string(::getuid()) +
                     " only; that user can start it with UROCE_SHARE=all to share it with "
                     "every user");
      ::close(c);
      return;
    }
    if (m.type == devd::MsgType::kCmHello) {
      devd::Msg w;
      w.type = devd::MsgType::kWelcome;
      if (send_msg(c, w)) {
        cm_->add_client(c, cred.pid);
      } else {
        ::close(c);
      }
      return;
    }
    const std::size_t slot = free_slot();
    const int udp = slot < members_.size() ? members_[slot].udp
                                           : datapath::make_group_socket(opt_.ip, opt_.port);
    if (udp == -EMFILE || udp == -ENFILE) {
      send_error(c, EMFILE, out_of_files_text());
      ::close(c);
      return;
    }
    if (udp < 0) {
      send_error(c, -udp, std::string("cannot add a socket to the device: ") + std::strerror(-udp));
      ::close(c);
      return;
    }
    // Without a pidfd a dead member's socket would leave the group before its process has gone
    // (the order may be off): refuse rather than take one without when the files ran out.
    const int pidfd = pidfd_open(cred.pid);
    if (pidfd < 0 && (errno == EMFILE || errno == ENFILE)) {
      if (slot == members_.size()) ::close(udp);
      send_error(c, EMFILE, out_of_files_text());
      ::close(c);
      return;
    }
    Member mem;
    mem.conn = c;
    mem.udp = udp;
    mem.pid = cred.pid;
    mem.uid = cred.uid;
    mem.pidfd = pidfd;
    mem.device = devd::get_text(m.device);
    mem.comm = devd::get_text(m.comm);
    if (slot < members_.size()) {
      // What reached the socket for its last owner is not the newcomer's.
      drain(udp);
      members_[slot] = std::move(mem);
    } else {
      // The kernel appended the socket at bind: its index is the group's size minus one.
      members_.push_back(std::move(mem));
    }
    devd::Msg w;
    w.type = devd::MsgType::kWelcome;
    w.index = static_cast<std::uint32_t>(slot + 1);
    if (!send_msg(c, w, udp)) connection_closed(slot);
  }

  // The first free slot, or members_.size() for none.
  std::size_t free_slot() const {
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (members_[i].free) return i;
    }
    return members_.size();
  }

  // Reads and drops what waits on a slot's socket (datagrams steered to its last owner before
  // the program changed), counted with the unsteered ones, and its pending errors.
  void drain(int udp) {
    std::byte buf[64];
    while (::recv(udp, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC) >= 0) ++drained_;
    while (::recv(udp, buf, sizeof buf, MSG_DONTWAIT | MSG_ERRQUEUE) >= 0) {
    }
  }

  // A list (`uroce stats`) is longer than the socket holds once there are a few hundred rdma_cm
  // IDs: wait for its reader, a little, rather than leave the list without its end.
  static bool send_listed(int fd, const devd::Msg& m) {
    for (;;) {
      if (send_msg(fd, m)) return true;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 200) != 1) return false;
    }
  }

  void list(int c) {
    for (std::size_t i = 0; i < members_.size(); ++i) {
      const Member& mem = members_[i];
      if (mem.free) continue;
      devd::Msg m;
      m.type = devd::MsgType::kMember;
      m.pid = mem.pid;
      m.uid = mem.uid;
      m.blocks = static_cast<std::uint32_t>(mem.blocks.size());
      m.index = static_cast<std::uint32_t>(i + 1);
      m.qp1 = mem.qp1 ? 1 : 0;
      m.value = mem.conn >= 0 ? 0 : 1;  // 1: exiting
      devd::set_text(m.device, mem.device);
      devd::set_text(m.comm, mem.comm);
      if (!send_listed(c, m)) return;
    }
    bool ok = true;
    cm_->list([&](const devd::Msg& m) { ok = ok && send_listed(c, m); });
    if (!ok) return;
    devd::Msg end;
    end.type = devd::MsgType::kListEnd;
    const std::uint64_t unsteered = cm_->dropped() + drained_;
    end.value = static_cast<std::uint32_t>(unsteered > 0xffffffffu ? 0xffffffffu : unsteered);
    end.blocks = blocks_.in_use();
    const std::size_t closed = cm_->closed_qps(now());
    end.index = static_cast<std::uint32_t>(closed > 0xffffffffu ? 0xffffffffu : closed);
    send_listed(c, end);
  }

  std::size_t find_by_fd(int fd) const {
    for (std::size_t i = 0; i < members_.size(); ++i) {
      const Member& m = members_[i];
      if (!m.free && (m.conn == fd || (m.conn < 0 && m.pidfd == fd))) return i;
    }
    return members_.size();
  }

  void serve_member_fd(int fd) {
    const std::size_t i = find_by_fd(fd);
    if (i == members_.size()) return;
    Member& mem = members_[i];
    if (mem.conn < 0) {
      remove(i);  // the process has exited: the kernel closed its reference
      return;
    }
    devd::Msg m;
    const ssize_t n = ::recv(mem.conn, &m, sizeof m, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n != static_cast<ssize_t>(sizeof m)) {
      connection_closed(i);
      return;
    }
    devd::Msg r;
    switch (m.type) {
      case devd::MsgType::kAllocBlock: {
        r.type = devd::MsgType::kBlock;
        const int err = allocate_block(i, &r.value);
        r.status = err;
        break;
      }
      case devd::MsgType::kReleaseBlock: {
        r.type = devd::MsgType::kReleased;
        r.status = release_block(i, m.value) ? 0 : EINVAL;
        break;
      }
      case devd::MsgType::kClaimQp1: {
        r.type = devd::MsgType::kQp1;
        r.status = claim_qp1(i, m.value != 0);
        break;
      }
      case devd::MsgType::kClosedQp:
        // Not answered (protocol 4): a context destroying thousands of QPs does not wait.
        cm_->keep_closed_qp(devd::closed_qp_from(m, now()));
        return;
      case devd::MsgType::kBye:
        // Its own reference is closed: ours is the last one.
        remove(i);
        return;
      default:
        connection_closed(i);
        return;
    }
    if (!send_msg(mem.conn, r)) connection_closed(i);
  }

  int allocate_block(std::size_t i, std::uint32_t* out) {
    const std::optional<std::uint32_t> b = blocks_.allocate();
    if (!b) return ENOMEM;
    members_[i].blocks.push_back(*b);
    if (!reprogram()) {
      members_[i].blocks.pop_back();
      blocks_.undo(*b);
      reprogram();
      return ENOMEM;  // the program would not fit
    }
    *out = *b;
    return 0;
  }

  bool release_block(std::size_t i, std::uint32_t b) {
    std::vector<std::uint32_t>& bl = members_[i].blocks;
    for (std::size_t k = 0; k < bl.size(); ++k) {
      if (bl[k] == b) {
        bl[k] = bl.back();
        bl.pop_back();
        blocks_.release(b);
        reprogram();
        return true;
      }
    }
    return false;
  }

  int claim_qp1(std::size_t i, bool on) {
    for (std::size_t k = 0; k < members_.size(); ++k) {
      if (k != i && members_[k].qp1 && on) return EBUSY;
    }
    members_[i].qp1 = on;
    reprogram();
    return 0;
  }

  // The connection is gone without kBye: the process may still hold its reference (it is
  // exiting, or it closed the connection by mistake). Stop steering to it at once; leave the
  // group once the process has exited.
  void connection_closed(std::size_t i) {
    Member& mem = members_[i];
    ::close(mem.conn);
    mem.conn = -1;
    if (mem.pidfd < 0) {
      // No pidfd: the process may still hold its reference, so the socket is not given to
      // another context; it leaves the group now (the order may be off briefly).
      close_slot(i);
      return;
    }
    release_all(mem);
    reprogram();
  }

  void release_all(Member& mem) {
    for (std::uint32_t b : mem.blocks) blocks_.release(b);
    mem.blocks.clear();
    mem.qp1 = false;
  }

  // Closes what a slot's context held (its connection, its pidfd) and frees its blocks and QP1.
  void end_context(Member& mem) {
    if (mem.conn >= 0) ::close(mem.conn);
    if (mem.pidfd >= 0) ::close(mem.pidfd);
    release_all(mem);
  }

  // The context has gone and ours is its socket's last reference: the slot becomes free (see
  // coordinator.h), and free slots at the group's end leave it.
  void remove(std::size_t i) {
    Member& mem = members_[i];
    end_context(mem);
    const int udp = mem.udp;
    mem = Member{};
    mem.free = true;
    mem.udp = udp;
    reprogram();
    drain(udp);
    while (!members_.empty() && members_.back().free) {
      // The last index: the kernel moves no other socket.
      ::close(members_.back().udp);
      members_.pop_back();
    }
  }

  // Closes the slot's reference at once: the kernel moves the group's last socket into this
  // index, and so does the coordinator's copy.
  void close_slot(std::size_t i) {
    Member& mem = members_[i];
    end_context(mem);
    ::close(mem.udp);
    if (i + 1 != members_.size()) members_[i] = std::move(members_.back());
    members_.pop_back();
    reprogram();
  }

  bool reprogram() {
    std::vector<SteeringEntry> entries;
    std::uint32_t qp1 = 0;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      const Member& mem = members_[i];
      if (mem.qp1) qp1 = static_cast<std::uint32_t>(i + 1);
      if (!mem.blocks.empty()) entries.push_back({static_cast<std::uint32_t>(i + 1), mem.blocks});
    }
    return attach_steering_program(sink_, steering_program(entries, qp1)) == 0;
  }

  int listen_;
  int sink_;  // cm_'s (it owns it)
  std::unique_ptr<CmServer> cm_;
  CoordinatorOptions opt_;
  std::vector<Member> members_;  // members_[k] is the group's index k + 1 (a context or free)
  std::uint64_t drained_ = 0;    // datagrams drained from freed slots (drain())
  BlockAllocator blocks_;        // random blocks (issue 44)
  int spare_ = -1;               // /dev/null, given up to refuse a connection with EMFILE
};

}  // namespace

int run_coordinator(int listen_fd, int sink_fd, const CoordinatorOptions& options) {
  // The group steers nothing to a context until its blocks are in a program: start with one
  // that sends everything to the sink.
  if (attach_steering_program(sink_fd, steering_program({}, 0)) != 0) {
    ::close(sink_fd);
    ::close(listen_fd);
    return 1;
  }
  // The CM's communication IDs and transaction IDs: unpredictable too.
  const std::uint64_t seed = kernel_random_u64();
  auto cm = CmServer::open(options.ip, options.port, sink_fd, seed, options.capture_path,
                           Duration::ms(options.cm_listen_grace_ms));
  if (!cm.ok()) {
    ::close(listen_fd);
    return 1;
  }
  if (!options.faults.empty()) {
    timespec mono{};
    ::clock_gettime(CLOCK_MONOTONIC, &mono);
    auto f = cm.value()->set_faults(
        options.faults, Instant::from_ns(std::int64_t(mono.tv_sec) * 1'000'000'000 + mono.tv_nsec));
    if (!f.ok()) {
      std::fprintf(stderr, "uroce-devd: UROCE_FAULTS: %s\n", f.error().c_str());
      ::close(listen_fd);
      return 1;
    }
  }
  return Coordinator(listen_fd, std::move(cm.value()), options).run();
}

}  // namespace uroce::engine

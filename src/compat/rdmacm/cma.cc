// The drop-in librdmacm's connection manager (rdmacm.h): rdma_cm IDs and event channels over the
// CM that runs in each device's coordinator (proto/devd_cm_protocol.h), with rdma-core 44's
// behaviour where the application can see it:
//
// - An event channel's fd is an epoll instance: it is readable when one of its connections to a
//   coordinator has a message or when events wait in the channel's queue (an eventfd), so an
//   application may poll() it, set O_NONBLOCK on it (rdma_get_cm_event then fails with EAGAIN)
//   or block in rdma_get_cm_event.
// - An ID without a channel is synchronous: each call waits for its event (ucma_complete), which
//   is kept in id->event until the next call.
// - As librdmacm does in user space, the library moves an ID's QP through its states: INIT at
//   rdma_create_qp, RTR and RTS at rdma_accept (passive) or when the REP comes (active: it sends
//   the RTU and reports ESTABLISHED in place of CONNECT_RESPONSE), ERR at rdma_disconnect and on
//   a REJ. With no QP on the ID the application does that itself (rdma_init_qp_attr,
//   rdma_establish).
// - A wildcard listener (INADDR_ANY / in6addr_any) listens on every configured device with the
//   same port.
//
// Locks: one global mutex for the ID table and the devices; one per channel, held while reading
// its connections (a command waits for its reply under it, queueing the events that come first).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <poll.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/entropy.h"
#include "compat/connection_key.h"
#include "compat/rdmacm/rdmacm.h"
#include "device/device_config.h"
#include "device/shared_port.h"
#include "edge/environment.h"
#include "proto/devd_cm_protocol.h"

namespace uroce::rdmacm {

namespace {

using engine::devd::CmAddr;
using engine::devd::CmMsg;
using engine::devd::CmMsgType;

int fail(int e) {
  errno = e;
  return -1;
}

// ---- devices ----

struct Device {
  std::string name;
  wire::IpAddress ip;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;  // the device's default PD (rdma_create_qp with none)
  std::uint8_t max_resp_res = 0;
  std::uint8_t max_init_depth = 0;
  bool opened = false;
  // The config file's aead= (seal::Mode): what the coordinator's CM negotiates keys for.
  std::uint8_t seal_mode = 0;
  // Its psk= (16 or 32 bytes; 0: none): authenticates the CM's key exchange.
  std::uint8_t psk_bytes = 0;
  std::array<std::uint8_t, 32> psk{};
};

std::mutex g_mu;
// An event was acknowledged (under g_mu). Never destroyed, as g_ids.
std::condition_variable& g_acked = *new std::condition_variable();
std::vector<Device>* g_devices = nullptr;
std::vector<ibv_context*>* g_context_list = nullptr;

std::vector<Device>& devices() {
  // Under g_mu. Built once: the configured devices that the verbs library lists.
  if (g_devices == nullptr) {
    g_devices = new std::vector<Device>();
    auto specs = engine::configured_devices(edge::device_source());  // the edge
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (specs.ok() && list != nullptr) {
      for (int i = 0; i < n; ++i) {
        for (const engine::DeviceSpec& s : specs.value()) {
          if (s.name != ibv_get_device_name(list[i])) continue;
          Device d;
          d.name = s.name;
          d.ip = s.ip;
          d.seal_mode = s.seal ? static_cast<std::uint8_t>(s.seal->mode) : 0;
          if (s.seal && s.seal->key.size <= d.psk.size()) {
            d.psk_bytes = static_cast<std::uint8_t>(s.seal->key.size);
            std::memcpy(d.psk.data(), s.seal->key.bytes.data(), s.seal->key.size);
          }
          d.ctx = ibv_open_device(list[i]);
          if (d.ctx != nullptr) {
            ibv_device_attr a{};
            if (ibv_query_device(d.ctx, &a) == 0) {
              d.max_resp_res = static_cast<std::uint8_t>(std::min(a.max_qp_rd_atom, 255));
              d.max_init_depth = static_cast<std::uint8_t>(std::min(a.max_qp_init_rd_atom, 255));
            }
            d.pd = ibv_alloc_pd(d.ctx);
          }
          d.opened = d.ctx != nullptr;
          g_devices->push_back(d);
        }
      }
    }
    if (list != nullptr) ibv_free_device_list(list);
  }
  return *g_devices;
}

bool same_ip(const wire::IpAddress& a, const wire::IpAddress& b) { return wire::same_host(a, b); }

std::optional<wire::IpAddress> ip_of(const sockaddr* sa) {
  if (sa == nullptr) return std::nullopt;
  wire::IpAddress ip;
  if (sa->sa_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(sa);
    std::memcpy(ip.bytes.data(), &s->sin_addr, 4);
    return ip;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(sa);
    ip.v6 = true;
    std::memcpy(ip.bytes.data(), &s->sin6_addr, 16);
    // An IPv4-mapped address is the IPv4 host.
    static constexpr std::uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(ip.bytes.data(), kMapped, 12) == 0) {
      wire::IpAddress v4;
      std::memcpy(v4.bytes.data(), ip.bytes.data() + 12, 4);
      return v4;
    }
    return ip;
  }
  return std::nullopt;
}

bool is_any(const wire::IpAddress& ip) {
  for (std::size_t i = 0; i < (ip.v6 ? 16u : 4u); ++i) {
    if (ip.bytes[i] != 0) return false;
  }
  return true;
}

// 127.0.0.0/8 or ::1 (an IPv4-mapped loopback address is IPv4 here: ip_of).
bool is_loopback(const wire::IpAddress& ip) {
  if (!ip.v6) return ip.bytes[0] == 127;
  for (std::size_t i = 0; i < 15; ++i) {
    if (ip.bytes[i] != 0) return false;
  }
  return ip.bytes[15] == 1;
}

std::uint16_t port_of(const sockaddr* sa) {
  if (sa == nullptr) return 0;
  if (sa->sa_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(sa)->sin_port);
  if (sa->sa_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port);
  }
  return 0;
}

CmAddr to_cm(const sockaddr* sa) {
  CmAddr a;
  auto ip = ip_of(sa);
  if (!ip) return a;
  a.family = ip->v6 ? 6 : 4;
  std::memcpy(a.bytes, ip->bytes.data(), 16);
  a.port = port_of(sa);
  return a;
}

// `a` as a sockaddr of the family the application used (`v6`: sockaddr_in6, IPv4 mapped).
void to_sockaddr(const CmAddr& a, bool v6, sockaddr_storage* out) {
  std::memset(out, 0, sizeof *out);
  if (!v6 && a.family != 6) {
    auto* s = reinterpret_cast<sockaddr_in*>(out);
    s->sin_family = AF_INET;
    s->sin_port = htons(a.port);
    std::memcpy(&s->sin_addr, a.bytes, 4);
    return;
  }
  auto* s = reinterpret_cast<sockaddr_in6*>(out);
  s->sin6_family = AF_INET6;
  s->sin6_port = htons(a.port);
  if (a.family == 6) {
    std::memcpy(&s->sin6_addr, a.bytes, 16);
  } else if (a.family == 4) {
    s->sin6_addr.s6_addr[10] = 0xff;
    s->sin6_addr.s6_addr[11] = 0xff;
    std::memcpy(&s->sin6_addr.s6_addr[12], a.bytes, 4);
  }
}

void gid_of(const CmAddr& a, ibv_gid* g) {
  std::memset(g, 0, sizeof *g);
  if (a.family == 6) {
    std::memcpy(g->raw, a.bytes, 16);
  } else {
    g->raw[10] = 0xff;
    g->raw[11] = 0xff;
    std::memcpy(g->raw + 12, a.bytes, 4);
  }
}

// The device that serves `dst` from `src` (either may be null or a wildcard), or -1.
int pick_device(const std::vector<Device>& devs, const sockaddr* src, const sockaddr* dst) {
  auto s = ip_of(src);
  if (s && !is_any(*s)) {
    for (std::size_t i = 0; i < devs.size(); ++i) {
      if (devs[i].opened && same_ip(devs[i].ip, *s)) return static_cast<int>(i);
    }
    return -1;
  }
  auto d = ip_of(dst);
  if (!d) return -1;
  for (std::size_t i = 0; i < devs.size(); ++i) {
    if (devs[i].opened && same_ip(devs[i].ip, *d)) return static_cast<int>(i);
  }
  // The kernel's choice of source address for the destination.
  const int fd = ::socket(d->v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    sockaddr_storage ss{};
    socklen_t len = d->v6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    std::memcpy(&ss, dst, len);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) {
      sockaddr_storage me{};
      socklen_t ml = sizeof me;
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &ml) == 0) {
        auto mine = ip_of(reinterpret_cast<sockaddr*>(&me));
        for (std::size_t i = 0; mine && i < devs.size(); ++i) {
          if (devs[i].opened && same_ip(devs[i].ip, *mine)) {
            ::close(fd);
            return static_cast<int>(i);
          }
        }
      }
    }
    ::close(fd);
  }
  // A loopback destination, or a single device of the family: that one.
  int only = -1;
  int count = 0;
  for (std::size_t i = 0; i < devs.size(); ++i) {
    if (devs[i].opened && devs[i].ip.v6 == d->v6) {
      only = static_cast<int>(i);
      ++count;
    }
  }
  return count == 1 ? only : -1;
}

// ---- channels ----

struct Queued {
  int dev = -1;
  CmMsg msg;
};

struct Channel {
  rdma_event_channel pub{};  // first: the application's pointer
  int efd = -1;              // readable while `queue` has events
  std::mutex mu;
  std::deque<Queued> queue;
  std::map<int, int> conns;      // device -> connection
  bool dead = false;             // destroyed (its memory stays: see rdma_destroy_event_channel)
  int waiters = 0;               // threads in epoll_wait on it
  bool was_nonblocking = false;  // its fd was O_NONBLOCK when it was destroyed
};

// Destroyed application channels: a thread may still be blocked in rdma_get_cm_event on one
// (rping's event thread is when its main thread destroys the channel), as a thread blocked in
// read() on the stock library's fd is; it must find the channel's memory when it wakes.
std::mutex g_graveyard_mu;
std::vector<Channel*>* g_graveyard = nullptr;

void install_connection_key(int dev, const CmMsg& m);

void queue_push(Channel* ch, Queued q) {
  if (q.msg.type == CmMsgType::kEvent && q.msg.event == RDMA_CM_EVENT_ESTABLISHED &&
      q.msg.qp.seal_key_bytes != 0) {
    // The passive side's per-connection key (it comes with the RTU): into the QP as soon as it
    // is here, whether or not the application reads the event before it uses the QP.
    install_connection_key(q.dev, q.msg);
    q.msg.qp.seal_key.fill(0);
    q.msg.qp.seal_key_bytes = 0;
  }
  ch->queue.push_back(q);
  const std::uint64_t one = 1;
  (void)!::write(ch->efd, &one, sizeof one);
}

void queue_drained(Channel* ch) {
  if (!ch->queue.empty()) return;
  std::uint64_t v = 0;
  (void)!::read(ch->efd, &v, sizeof v);
}

// The channel's connection to device `dev`'s coordinator (made on first use). Under ch->mu.
int conn_of(Channel* ch, int dev) {
  auto it = ch->conns.find(dev);
  if (it != ch->conns.end()) return it->second;
  Device d;
  {
    std::lock_guard lk(g_mu);
    d = devices()[static_cast<std::size_t>(dev)];
  }
  // The environment, read here (the edge): what a coordinator this starts is told.
  auto options = edge::devd_options();
  if (!options.ok()) {
    std::fprintf(stderr, "librdmacm (uroce): %s\n", options.error().c_str());
    return -1;
  }
  auto c = engine::SharedPort::connect_cm(d.ip, wire::kRoceV2Port, d.name, options.value());
  if (!c.ok()) {
    std::fprintf(stderr, "librdmacm (uroce): %s\n", c.error().text.c_str());
    return -1;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = c.value();
  ::epoll_ctl(ch->pub.fd, EPOLL_CTL_ADD, c.value(), &ev);
  ch->conns[dev] = c.value();
  return c.value();
}

// Reads what waits on the channel's connections into its queue. Under ch->mu.
void pump(Channel* ch) {
  for (const auto& [dev, fd] : ch->conns) {
    for (;;) {
      CmMsg m;
      const ssize_t n = ::recv(fd, &m, sizeof m, MSG_DONTWAIT);
      if (n != static_cast<ssize_t>(sizeof m)) break;
      if (m.type == CmMsgType::kEvent) queue_push(ch, Queued{dev, m});
    }
  }
}

// One command, its reply. Under ch->mu. false (errno set) when the coordinator is gone.
bool call(Channel* ch, int dev, const CmMsg& req, CmMsg& reply) {
  const int fd = conn_of(ch, dev);
  if (fd < 0) {
    errno = ENODEV;
    return false;
  }
  if (::send(fd, &req, sizeof req, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof req)) {
    errno = ENODEV;
    return false;
  }
  for (;;) {
    CmMsg m;
    const ssize_t n = ::recv(fd, &m, sizeof m, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof m)) {
      errno = ENODEV;
      return false;
    }
    if (m.type == CmMsgType::kEvent) {
      queue_push(ch, Queued{dev, m});
      continue;
    }
    reply = m;
    return true;
  }
}

// A command under the channel's lock, its reply's status as errno: false when the coordinator
// is gone or refused it.
bool request(Channel* ch, int dev, const CmMsg& req, CmMsg& reply) {
  std::lock_guard lk(ch->mu);
  if (!call(ch, dev, req, reply)) return false;
  if (reply.status != 0) {
    errno = reply.status;
    return false;
  }
  return true;
}

Channel* new_channel() {
  auto* ch = new Channel();
  ch->pub.fd = ::epoll_create1(EPOLL_CLOEXEC);
  ch->efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (ch->pub.fd < 0 || ch->efd < 0) {
    if (ch->pub.fd >= 0) ::close(ch->pub.fd);
    if (ch->efd >= 0) ::close(ch->efd);
    delete ch;
    return nullptr;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = ch->efd;
  ::epoll_ctl(ch->pub.fd, EPOLL_CTL_ADD, ch->efd, &ev);
  return ch;
}

void free_channel(Channel* ch) {
  for (const auto& [dev, fd] : ch->conns) ::close(fd);
  ::close(ch->efd);
  ::close(ch->pub.fd);
  delete ch;
}

Channel* chan(rdma_event_channel* c) { return reinterpret_cast<Channel*>(c); }

// ---- IDs ----

struct Sub {
  int dev = -1;
  std::uint32_t number = 0;
};

struct Id {
  rdma_cm_id pub{};  // first: the application's pointer
  EpDefaults ep;
  bool sync = false;  // no channel of the application's: pub.channel is private
  bool v6 = false;    // the application's address family (its sockaddrs are sockaddr_in6)
  bool bound_any = false;
  std::uint16_t any_port = 0;
  std::vector<Sub> subs;  // one, or one per device for a wildcard listener
  Id* listener = nullptr;
  ibv_sa_path_rec path{};
  engine::devd::CmConnParam remote{};  // what the peer's REQ or REP offered
  cm::QpAttributes qp_attr{};          // what the CM negotiated
  bool have_qp_attr = false;
  std::uint32_t psn = 0;
  std::uint8_t responder_resources = 0;  // ours, negotiated
  std::uint8_t initiator_depth = 0;
  std::uint8_t tos = 0;
  bool tos_set = false;
  std::uint8_t ack_timeout = 0;
  bool ack_timeout_set = false;
  bool established = false;
  int events_out = 0;  // handed to the application, not yet acknowledged
  bool destroyed = false;
  std::uint32_t ud_qkey = RDMA_UDP_QKEY;
};

// Under g_mu. Never destroyed: a thread of the application may still use the library while
// another runs the process's exit handlers (rping's event thread does).
std::map<std::pair<int, std::uint32_t>, Id*>& g_ids =
    *new std::map<std::pair<int, std::uint32_t>, Id*>();

Id* id_of(rdma_cm_id* id) { return reinterpret_cast<Id*>(id); }

struct Event {
  rdma_cm_event pub{};  // first
  Id* id = nullptr;
  Id* counted = nullptr;  // the ID whose events_out counts it (rdma_destroy_id waits for it)
  std::uint8_t private_data[224] = {};
};

// A connection's initial PSN, which an off-path attacker must not guess (issue 44): from the
// kernel's CSPRNG (a Mersenne twister's next outputs follow from 624 earlier ones).
std::uint32_t random_psn() { return static_cast<std::uint32_t>(kernel_random_u64()) & 0xffffff; }

bool is_ud(const Id* id) { return id->pub.qp_type == IBV_QPT_UD; }

int primary_dev(const Id* id) { return id->subs.empty() ? -1 : id->subs.front().dev; }

// The sealing mode and pre-shared key of the ID's device, for the coordinator (devd/cm_keys.h):
// a connection is keyed only when this library moves its QP (`own_qp`), since it installs the
// key as it does.
void set_seal_of(const Id* id, bool own_qp, CmMsg& m) {
  const int dev = primary_dev(id);
  if (dev < 0 || !own_qp) return;
  std::lock_guard lk(g_mu);
  const Device& d = devices()[static_cast<std::size_t>(dev)];
  m.seal_mode = d.seal_mode;
  if (d.seal_mode == 0) return;
  m.psk_bytes = d.psk_bytes;
  std::memcpy(m.psk, d.psk.data(), d.psk_bytes);
}

// The per-connection key the CM agreed (`q`), with `a` and `mask` (compat/connection_key.h).
int modify_with_key(ibv_qp* qp, const cm::QpAttributes& q, const ibv_qp_attr& a, int mask) {
  compat::QpAttrWithKey k;
  k.attr = a;
  if (q.seal_key_bytes != 0 && q.seal_key_bytes <= sizeof k.key) {
    mask |= static_cast<int>(compat::kQpConnectionKey);
    k.remote_qpn = q.remote_qpn;
    std::memcpy(k.peer_gid, q.remote_gid.data(), sizeof k.peer_gid);
    k.key_bytes = q.seal_key_bytes;
    std::memcpy(k.key, q.seal_key.data(), q.seal_key_bytes);
  }
  if (mask == 0) return 0;
  const int e = ibv_modify_qp(qp, &k.attr, mask);
  std::memset(k.key, 0, sizeof k.key);
  return e;
}

void install_connection_key(int dev, const CmMsg& m) {
  std::lock_guard lk(g_mu);
  auto it = g_ids.find({dev, m.id});
  if (it == g_ids.end() || it->second->destroyed || it->second->pub.qp == nullptr) return;
  (void)modify_with_key(it->second->pub.qp, m.qp, ibv_qp_attr{}, 0);
}

// Passive, a connection the CM keys: waits (bounded) until the ESTABLISHED that brings its key,
// or another event of the ID, is here, so that the QP has its key before the active side's first
// packets even when the application sends before it reads the event (perftest's server does).
// `ch` and `s`: the ID's, read before the accept (the ID may be gone by now).
void await_connection_event(Channel* ch, const Sub s) {
  std::lock_guard lk(ch->mu);
  const int fd = conn_of(ch, s.dev);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (fd >= 0) {
    for (const Queued& q : ch->queue) {
      if (q.dev == s.dev && q.msg.id == s.number) return;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    pollfd pf{fd, POLLIN, 0};
    (void)::poll(&pf, 1, static_cast<int>(left.count()));
    pump(ch);
  }
}

void set_device(Id* id, int dev) {
  std::lock_guard lk(g_mu);
  Device& d = devices()[static_cast<std::size_t>(dev)];
  // As librdmacm's ucma_get_device: an ID bound to a device carries the device's default PD
  // (programs make their own QP on id->pd and CQs on id->verbs before connecting), unless the
  // program gave one of its own for this device (rdma_create_ep's passive side).
  if (id->pub.pd == nullptr || id->pub.verbs != d.ctx) id->pub.pd = d.pd;
  id->pub.verbs = d.ctx;
  id->pub.port_num = 1;
}

// The ID's number on `dev`'s coordinator (created on first use).
bool ensure_sub(Id* id, int dev) {
  for (const Sub& s : id->subs) {
    if (s.dev == dev) return true;
  }
  Channel* ch = chan(id->pub.channel);
  CmMsg req;
  req.type = CmMsgType::kCreateId;
  req.ps = id->pub.ps;
  req.qp_type = id->pub.qp_type;
  CmMsg r;
  if (!request(ch, dev, req, r)) return false;
  id->subs.push_back(Sub{dev, r.id});
  std::lock_guard lk(g_mu);
  g_ids[{dev, r.id}] = id;
  return true;
}

// A command for the ID's primary sub.
bool command(Id* id, CmMsg req, CmMsg& r) {
  const int dev = primary_dev(id);
  if (dev < 0) {
    errno = EINVAL;
    return false;
  }
  req.id = id->subs.front().number;
  return request(chan(id->pub.channel), dev, req, r);
}

void fill_route(Id* id, const CmAddr& src, const CmAddr& dst) {
  sockaddr_storage s{};
  sockaddr_storage d{};
  to_sockaddr(src, id->v6, &s);
  std::memcpy(&id->pub.route.addr.src_storage, &s, sizeof s);
  if (dst.family != 0) {
    to_sockaddr(dst, id->v6, &d);
    std::memcpy(&id->pub.route.addr.dst_storage, &d, sizeof d);
  }
  ibv_gid sg{};
  ibv_gid dg{};
  gid_of(src, &sg);
  gid_of(dst, &dg);
  id->pub.route.addr.addr.ibaddr.sgid = sg;
  id->pub.route.addr.addr.ibaddr.dgid = dg;
  id->pub.route.addr.addr.ibaddr.pkey = htons(0xffff);
}

void fill_path(Id* id) {
  ibv_sa_path_rec& p = id->path;
  std::memset(&p, 0, sizeof p);
  p.sgid = id->pub.route.addr.addr.ibaddr.sgid;
  p.dgid = id->pub.route.addr.addr.ibaddr.dgid;
  p.pkey = htons(0xffff);
  p.reversible = 1;
  p.numb_path = 1;
  p.hop_limit = 64;
  p.traffic_class = id->tos;
  p.mtu_selector = 2;  // exactly
  p.rate_selector = 2;
  p.rate = 3;  // 10 Gb/s (what rxe's path records say over most netdevs)
  p.packet_life_time_selector = 2;
  p.packet_life_time = 18;
  ibv_port_attr pa{};
  if (id->pub.verbs != nullptr && ibv_query_port(id->pub.verbs, 1, &pa) == 0) {
    p.mtu = pa.active_mtu;
  } else {
    p.mtu = IBV_MTU_1024;
  }
  id->pub.route.path_rec = &id->path;
  id->pub.route.num_paths = 1;
}

Id* alloc_id(Channel* ch, bool sync, void* context, rdma_port_space ps, ibv_qp_type qpt) {
  auto* id = new Id();
  id->pub.channel = &ch->pub;
  id->pub.context = context;
  id->pub.ps = ps;
  id->pub.qp_type = qpt;
  id->sync = sync;
  id->psn = random_psn();
  return id;
}

void release_id(Id* id) {
  // Under g_mu. Freed once destroyed and every event handed out is acknowledged.
  if (id->destroyed && id->events_out == 0) {
    if (id->sync) free_channel(chan(id->pub.channel));
    delete id;
  }
}

// ---- the QP's states (ucma_init_conn_qp, ucma_modify_qp_rtr / rts / err) ----

int modify(Id* id, ibv_qp_state state, int* err_out = nullptr) {
  ibv_qp_attr a{};
  int mask = 0;
  a.qp_state = state;
  if (rdma_init_qp_attr(&id->pub, &a, &mask) != 0) return -1;
  const int e = ibv_modify_qp(id->pub.qp, &a, mask);
  if (err_out != nullptr) *err_out = e;
  if (e != 0) return fail(e);
  return 0;
}

int modify_rtr(Id* id, std::uint8_t resp_res) {
  // The INIT state again first: the access flags now follow the negotiated resources.
  if (modify(id, IBV_QPS_INIT) != 0) return -1;
  ibv_qp_attr a{};
  int mask = 0;
  a.qp_state = IBV_QPS_RTR;
  if (rdma_init_qp_attr(&id->pub, &a, &mask) != 0) return -1;
  if (resp_res != RDMA_MAX_RESP_RES) a.max_dest_rd_atomic = resp_res;
  // Both ends are uroce (the CM saw uroce's mark in the peer's GUID): the drop-in libibverbs
  // takes uroce's own mask bit, and its device's configuration decides (UROCE_SR). Only here:
  // rdma_init_qp_attr gives applications what the stock library gives them.
  if (id->qp_attr.selective_repeat && id->pub.qp->qp_type == IBV_QPT_RC) {
    mask |= static_cast<int>(uroce::kQpSelectiveRepeat);
  }
  const int e = modify_with_key(id->pub.qp, id->qp_attr, a, mask);  // the active side's key
  return e == 0 ? 0 : fail(e);
}

int modify_rts(Id* id, std::uint8_t init_depth) {
  ibv_qp_attr a{};
  int mask = 0;
  a.qp_state = IBV_QPS_RTS;
  if (rdma_init_qp_attr(&id->pub, &a, &mask) != 0) return -1;
  if (init_depth != RDMA_MAX_INIT_DEPTH) a.max_rd_atomic = init_depth;
  const int e = ibv_modify_qp(id->pub.qp, &a, mask);
  return e == 0 ? 0 : fail(e);
}

void modify_err(Id* id) {
  if (id->pub.qp == nullptr) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  (void)ibv_modify_qp(id->pub.qp, &a, IBV_QP_STATE);
}

// ---- events ----

// The synchronous ID's wait for its next event (ucma_complete).
// `sync`: the ID's, read before the command that the event answers (an asynchronous ID may be
// destroyed by another thread as soon as that command is sent).
int complete(Id* id, bool sync);

void copy_conn(Event* e, const CmMsg& m) {
  std::memcpy(e->private_data, m.conn.private_data, sizeof e->private_data);
  rdma_conn_param& c = e->pub.param.conn;
  c.private_data = m.conn.private_data_len != 0 ? e->private_data : nullptr;
  c.private_data_len = m.conn.private_data_len;
  c.responder_resources = m.conn.responder_resources;
  c.initiator_depth = m.conn.initiator_depth;
  c.flow_control = m.conn.flow_control;
  c.retry_count = m.conn.retry_count;
  c.rnr_retry_count = m.conn.rnr_retry_count;
  c.srq = m.conn.srq;
  c.qp_num = m.conn.qp_num;
}

void copy_ud(Event* e, Id* id, const CmMsg& m) {
  std::memcpy(e->private_data, m.conn.private_data, sizeof e->private_data);
  rdma_ud_param& u = e->pub.param.ud;
  u.private_data = m.conn.private_data_len != 0 ? e->private_data : nullptr;
  u.private_data_len = m.conn.private_data_len;
  u.qp_num = m.conn.qp_num;
  u.qkey = m.conn.qkey;
  ibv_ah_attr& ah = u.ah_attr;
  std::memset(&ah, 0, sizeof ah);
  ah.is_global = 1;
  ah.port_num = 1;
  ah.grh.dgid = id->pub.route.addr.addr.ibaddr.dgid;
  ah.grh.sgid_index = 0;
  ah.grh.hop_limit = 64;
  ah.grh.traffic_class = id->tos;
}

// The event's parameters as the application reads them: a UD ID's (with the address handle's
// attributes) or a connected one's.
void copy_params(Event* e, Id* id, const CmMsg& m) {
  if (is_ud(id)) {
    copy_ud(e, id, m);
  } else {
    copy_conn(e, m);
  }
}

// Whom a coordinator event is for: an ID, or for a CONNECT_REQUEST its listener.
struct EventTarget {
  Id* id = nullptr;
  Id* listen = nullptr;
};

// Finds the event's ID (or listener) and counts the event against it from here on
// (events_out), so that rdma_destroy_id on another thread waits for it; a listener, for as long
// as its new ID is being made. nullopt when it is gone.
std::optional<EventTarget> claim_target(const Queued& q) {
  const CmMsg& m = q.msg;
  std::lock_guard lk(g_mu);
  const bool request = m.event == RDMA_CM_EVENT_CONNECT_REQUEST;
  auto it = g_ids.find({q.dev, request ? m.listen_id : m.id});
  if (it == g_ids.end() || it->second->destroyed) return std::nullopt;
  ++it->second->events_out;
  EventTarget t;
  (request ? t.listen : t.id) = it->second;
  return t;
}

// A new ID for a CONNECT_REQUEST's connection, on the listener's channel (a synchronous
// listener's get their own, as rdma_migrate_id(id, NULL) gives them).
Id* new_passive_id(Channel* ch, const Queued& q, Id* listen) {
  const CmMsg& m = q.msg;
  Id* id = alloc_id(ch, false, listen->pub.context, listen->pub.ps, listen->pub.qp_type);
  id->v6 = listen->v6;
  id->listener = listen;
  id->subs.push_back(Sub{q.dev, m.id});
  {
    std::lock_guard lk(g_mu);
    g_ids[{q.dev, m.id}] = id;
  }
  set_device(id, q.dev);
  fill_route(id, m.src, m.dst);
  fill_path(id);
  id->remote = m.conn;
  id->qp_attr = m.qp;
  // What rdma_init_qp_attr says before rdma_accept, for an application that drives its own
  // QP to RTR first: the PSN our REP will carry, and the resources the REQ offers (the
  // accept clamps to the same).
  id->qp_attr.rq_psn = id->psn;
  id->qp_attr.max_dest_rd_atomic = m.conn.initiator_depth;
  id->qp_attr.max_rd_atomic = m.conn.responder_resources;
  id->have_qp_attr = true;
  if (listen->sync) {
    Channel* own = new_channel();
    if (own != nullptr) {
      id->pub.channel = &own->pub;
      id->sync = true;
      CmMsg req;
      req.type = CmMsgType::kMigrate;
      req.id = m.id;
      CmMsg r;
      std::lock_guard lk(own->mu);
      (void)call(own, q.dev, req, r);
    }
  }
  return id;
}

// A REP for an active ID. With its QP attached, what ucma_process_conn_resp does: RTR, RTS, the
// RTU, and the application sees ESTABLISHED (or CONNECT_ERROR, after a REJ, when a step fails).
void on_connect_response(Id* id, const CmMsg& m, Event* e) {
  id->remote = m.conn;
  id->qp_attr = m.qp;
  id->have_qp_attr = true;
  copy_conn(e, m);
  if (id->pub.qp == nullptr) return;
  int ok = modify_rtr(id, RDMA_MAX_RESP_RES);
  id->qp_attr.seal_key.fill(0);  // in the device now (when agreed)
  id->qp_attr.seal_key_bytes = 0;
  if (ok == 0) ok = modify_rts(id, RDMA_MAX_INIT_DEPTH);
  CmMsg req;
  req.type = CmMsgType::kAccept;
  CmMsg r;
  if (ok == 0 && command(id, req, r)) {
    e->pub.event = RDMA_CM_EVENT_ESTABLISHED;
    id->established = true;
  } else {
    const int err = errno;
    modify_err(id);
    CmMsg rej;
    rej.type = CmMsgType::kReject;
    (void)command(id, rej, r);
    e->pub.event = RDMA_CM_EVENT_CONNECT_ERROR;
    e->pub.status = -err;
  }
}

// An event for an existing ID: what librdmacm does on its way to the application.
void on_id_event(Id* id, const CmMsg& m, Event* e) {
  switch (m.event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      fill_route(id, m.src, m.dst);
      if (m.event == RDMA_CM_EVENT_ROUTE_RESOLVED) fill_path(id);
      break;
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
      on_connect_response(id, m, e);
      break;
    case RDMA_CM_EVENT_ESTABLISHED:
      id->established = true;
      copy_params(e, id, m);
      break;
    case RDMA_CM_EVENT_REJECTED:
      copy_conn(e, m);
      modify_err(id);
      break;
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
      copy_params(e, id, m);
      break;
    case RDMA_CM_EVENT_DISCONNECTED:
      copy_conn(e, m);
      break;
    default:
      break;
  }
}

// Turns a coordinator event into the application's, doing what librdmacm does on the way.
// nullptr when the event is consumed here (its ID is gone). Called without locks held.
Event* convert(Channel* ch, const Queued& q) {
  const CmMsg& m = q.msg;
  const std::optional<EventTarget> t = claim_target(q);
  if (!t) return nullptr;
  auto* e = new Event();
  e->pub.event = static_cast<rdma_cm_event_type>(m.event);
  e->pub.status = m.status;
  Id* id = t->id;
  if (t->listen != nullptr) {
    id = new_passive_id(ch, q, t->listen);
    e->pub.listen_id = &t->listen->pub;
    copy_params(e, id, m);
  } else {
    on_id_event(id, m, e);
  }
  e->id = id;
  e->pub.id = &id->pub;
  // A CONNECT_REQUEST counts against its listener, as rdma-core's does: an application may
  // destroy the new ID (a refused request) before acknowledging the event.
  e->counted = t->listen != nullptr ? t->listen : id;
  return e;
}

// A call on a destroyed channel. With the stock library the fd is closed: a thread that was
// about to read it when another destroyed the channel (rping's event thread, between two
// events) would more often have been inside read() already, blocked for good, than after it.
// So a blocking channel blocks the caller for good; a non-blocking one fails with EBADF.
[[noreturn]] void wait_forever() {
  for (;;) ::pause();
}

int get_event(Channel* ch, rdma_cm_event** out) {
  for (;;) {
    Queued q;
    bool have = false;
    {
      std::unique_lock lk(ch->mu);
      if (ch->dead) {
        if (ch->was_nonblocking) return fail(EBADF);
        lk.unlock();
        wait_forever();
      }
      if (ch->queue.empty()) pump(ch);
      if (!ch->queue.empty()) {
        q = ch->queue.front();
        ch->queue.pop_front();
        queue_drained(ch);
        have = true;
      }
    }
    if (have) {
      Event* e = convert(ch, q);
      if (e == nullptr) continue;
      *out = &e->pub;
      return 0;
    }
    int epfd;
    {
      std::unique_lock lk(ch->mu);
      if (ch->dead) {
        if (ch->was_nonblocking) return fail(EBADF);
        lk.unlock();
        wait_forever();
      }
      epfd = ch->pub.fd;
      ++ch->waiters;
    }
    const int flags = ::fcntl(epfd, F_GETFL);
    epoll_event ev[8];
    const int n = flags >= 0 && (flags & O_NONBLOCK) != 0 ? 0 : ::epoll_wait(epfd, ev, 8, -1);
    const int wait_errno = errno;
    std::unique_lock lk(ch->mu);
    --ch->waiters;
    if (ch->dead) {
      // Destroyed while this thread waited in it (rping destroys its channel while its event
      // thread waits): as a read() on the stock library's closed fd, it waits on for events that
      // no longer come, and the thread ends with the process. The last waiter out closes the
      // fds the destroy left open for it.
      if (ch->waiters == 0) {
        ::close(ch->efd);
        ::close(ch->pub.fd);
      }
      lk.unlock();
      wait_forever();
    }
    if (flags >= 0 && (flags & O_NONBLOCK) != 0) return fail(EAGAIN);
    if (n < 0 && wait_errno != EINTR) return fail(wait_errno);
    // A connection that closed (its coordinator died) stays readable: the next pump reads its
    // end and finds nothing; do not spin on it.
    for (int i = 0; i < n; ++i) {
      if ((ev[i].events & (EPOLLHUP | EPOLLERR)) != 0 && ev[i].data.fd != ch->efd) {
        ::epoll_ctl(ch->pub.fd, EPOLL_CTL_DEL, ev[i].data.fd, nullptr);
      }
    }
  }
  wait_forever();
}

int complete(Id* id, bool sync) {
  if (!sync) return 0;
  if (id->pub.event != nullptr) {
    rdma_ack_cm_event(id->pub.event);
    id->pub.event = nullptr;
  }
  if (get_event(chan(id->pub.channel), &id->pub.event) != 0) return -1;
  rdma_cm_event* e = id->pub.event;
  if (e->status != 0) {
    if (e->event == RDMA_CM_EVENT_REJECTED) return fail(ECONNREFUSED);
    return fail(e->status < 0 ? -e->status : e->status);
  }
  return 0;
}

void ack_sync_event(Id* id) {
  if (id->sync && id->pub.event != nullptr) {
    rdma_ack_cm_event(id->pub.event);
    id->pub.event = nullptr;
  }
}

// A wildcard bind (INADDR_ANY, in6addr_any): the port on every device (of the family; an IPv6
// wildcard takes the IPv4 devices too, as without AFONLY), chosen now as the kernel chooses it at
// bind, so that rdma_get_src_port() tells it before rdma_listen. A later rdma_resolve_addr keeps
// the device it picks; rdma_listen listens on all of them. `shown`, when given, is the address
// the ID reports as its source (a loopback address bound as the wildcard: see rdma_bind_addr).
bool bind_any(Id* p, std::uint16_t port, const sockaddr* shown = nullptr) {
  std::vector<int> devs;
  {
    std::lock_guard lk(g_mu);
    std::vector<Device>& all = devices();
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (all[i].opened && (p->v6 || !all[i].ip.v6)) devs.push_back(static_cast<int>(i));
    }
  }
  if (devs.empty()) {
    errno = ENODEV;
    return false;
  }
  Channel* ch = chan(p->pub.channel);
  for (int dev : devs) {
    if (!ensure_sub(p, dev)) return false;
    CmMsg req;
    req.type = CmMsgType::kBind;
    req.id = p->subs.back().number;
    req.src.port = port;
    CmMsg r;
    if (!request(ch, dev, req, r)) return false;
    port = r.src.port;  // the first device picks an ephemeral port; the others take the same
  }
  p->bound_any = true;
  p->any_port = port;
  sockaddr_storage& ss = p->pub.route.addr.src_storage;
  std::memset(&ss, 0, sizeof ss);
  if (p->v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
  }
  if (shown != nullptr) {
    // The kernel keeps a loopback bind's address as given, with no device attached.
    if (shown->sa_family == AF_INET6) {
      std::memcpy(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr,
                  &reinterpret_cast<const sockaddr_in6*>(shown)->sin6_addr, sizeof(in6_addr));
    } else {
      std::memcpy(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr,
                  &reinterpret_cast<const sockaddr_in*>(shown)->sin_addr, sizeof(in_addr));
    }
    return true;
  }
  if (devs.size() == 1) set_device(p, devs.front());
  return true;
}

// Destroys an ID's number on a device's coordinator; its events still queued go nowhere
// (convert finds no ID).
void destroy_sub(Channel* ch, const Sub& s) {
  CmMsg req;
  req.type = CmMsgType::kDestroyId;
  req.id = s.number;
  CmMsg r;
  {
    std::lock_guard lk(ch->mu);
    (void)call(ch, s.dev, req, r);
  }
  std::lock_guard lk(g_mu);
  g_ids.erase({s.dev, s.number});
}

// Keeps only the sub on `dev` (a wildcard-bound ID resolving to one device).
void keep_only(Id* p, int dev) {
  Channel* ch = chan(p->pub.channel);
  std::vector<Sub> keep;
  for (const Sub& s : p->subs) {
    if (s.dev == dev) {
      keep.push_back(s);
    } else {
      destroy_sub(ch, s);
    }
  }
  p->subs.swap(keep);
}

}  // namespace

EpDefaults& ep_defaults(rdma_cm_id* id) { return id_of(id)->ep; }

ibv_context** device_contexts(int* count) {
  std::lock_guard lk(g_mu);
  if (g_context_list == nullptr) {
    g_context_list = new std::vector<ibv_context*>();
    for (const Device& d : devices()) {
      if (d.ctx != nullptr) g_context_list->push_back(d.ctx);
    }
    g_context_list->push_back(nullptr);
  }
  if (count != nullptr) *count = static_cast<int>(g_context_list->size() - 1);
  return g_context_list->data();
}

}  // namespace uroce::rdmacm

using namespace uroce::rdmacm;  // NOLINT(google-build-using-namespace)

// ---- event channels ----

UROCE_EXPORT rdma_event_channel* rdma_create_event_channel(void) {
  Channel* ch = new_channel();
  if (ch == nullptr) return nullptr;
  return &ch->pub;
}

UROCE_EXPORT void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (channel == nullptr) return;
  Channel* ch = chan(channel);
  {
    std::lock_guard lk(ch->mu);
    for (const auto& [dev, fd] : ch->conns) ::close(fd);
    ch->conns.clear();
    ch->queue.clear();
    const int flags = ::fcntl(ch->pub.fd, F_GETFL);
    ch->was_nonblocking = flags >= 0 && (flags & O_NONBLOCK) != 0;
    ch->dead = true;
    if (ch->waiters == 0) {
      ::close(ch->efd);
      ::close(ch->pub.fd);
    } else {
      // Threads wait in epoll_wait on it: wake them, and the last one closes (get_event).
      const std::uint64_t one = 1;
      (void)!::write(ch->efd, &one, sizeof one);
    }
  }
  std::lock_guard lk(g_graveyard_mu);
  if (g_graveyard == nullptr) g_graveyard = new std::vector<Channel*>();
  g_graveyard->push_back(ch);
}

UROCE_EXPORT int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (channel == nullptr || event == nullptr) return fail(EINVAL);
  return get_event(chan(channel), event);
}

UROCE_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) {
  if (event == nullptr) return fail(EINVAL);
  auto* e = reinterpret_cast<Event*>(event);
  {
    std::lock_guard lk(g_mu);
    --e->counted->events_out;
    release_id(e->counted);
  }
  g_acked.notify_all();
  delete e;
  return 0;
}

// ---- IDs ----

UROCE_EXPORT int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                                rdma_port_space ps) {
  if (id == nullptr) return fail(EINVAL);
  ibv_qp_type qpt;
  switch (ps) {
    case RDMA_PS_TCP:
    case RDMA_PS_IB:
      qpt = IBV_QPT_RC;
      break;
    case RDMA_PS_UDP:
    case RDMA_PS_IPOIB:
      qpt = IBV_QPT_UD;
      break;
    default:
      return fail(EINVAL);
  }
  const bool sync = channel == nullptr;
  Channel* ch = sync ? new_channel() : chan(channel);
  if (ch == nullptr) return fail(ENOMEM);
  Id* n = alloc_id(ch, sync, context, ps, qpt);
  *id = &n->pub;
  return 0;
}

UROCE_EXPORT int rdma_destroy_id(rdma_cm_id* id) {
  if (id == nullptr) return fail(EINVAL);
  Id* p = id_of(id);
  ack_sync_event(p);
  Channel* ch = chan(id->channel);
  for (const Sub& s : p->subs) destroy_sub(ch, s);
  p->subs.clear();
  // As rdma-core's: wait until the application has acknowledged every event it was given for
  // the ID (an event thread that still holds one is done with it by then).
  std::unique_lock lk(g_mu);
  g_acked.wait(lk, [&] { return p->events_out == 0; });
  p->destroyed = true;
  release_id(p);
  return 0;
}

UROCE_EXPORT int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  if (id == nullptr || addr == nullptr) return fail(EINVAL);
  if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) return fail(EAFNOSUPPORT);
  Id* p = id_of(id);
  if (!p->subs.empty() || p->bound_any) return fail(EINVAL);
  p->v6 = addr->sa_family == AF_INET6;
  auto ip = ip_of(addr);
  if (ip && is_any(*ip)) return bind_any(p, port_of(addr)) ? 0 : -1;
  int dev;
  {
    std::lock_guard lk(g_mu);
    dev = pick_device(devices(), addr, nullptr);
  }
  // A loopback address no device has: the kernel binds it as the wildcard (its cma_any_addr
  // counts loopback addresses), attaches no device (id->verbs stays NULL), and a listen on it
  // listens on every device. libfabric's verbs provider binds "localhost" so to learn that no
  // device owns it, and then offers the devices' own addresses.
  if (dev < 0 && ip && is_loopback(*ip)) return bind_any(p, port_of(addr), addr) ? 0 : -1;
  if (dev < 0) return fail(EADDRNOTAVAIL);
  if (!ensure_sub(p, dev)) return -1;
  set_device(p, dev);
  CmMsg req;
  req.type = CmMsgType::kBind;
  req.src = to_cm(addr);
  CmMsg r;
  if (!command(p, req, r)) return -1;
  fill_route(p, r.src, CmAddr{});
  return 0;
}

UROCE_EXPORT int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr,
                                   int timeout_ms) {
  (void)timeout_ms;
  if (id == nullptr || dst_addr == nullptr) return fail(EINVAL);
  if (dst_addr->sa_family != AF_INET && dst_addr->sa_family != AF_INET6) {
    return fail(EAFNOSUPPORT);
  }
  Id* p = id_of(id);
  const bool sync = p->sync;
  ack_sync_event(p);
  if (p->subs.empty()) p->v6 = dst_addr->sa_family == AF_INET6;
  int dev = p->bound_any ? -1 : primary_dev(p);
  if (dev < 0) {
    std::lock_guard lk(g_mu);
    dev = pick_device(devices(), src_addr, dst_addr);
  }
  if (dev >= 0 && p->bound_any) {
    keep_only(p, dev);
    p->bound_any = false;
  }
  if (dev < 0) {
    // No uroce device reaches it: ADDR_ERROR, as the kernel reports a destination it has no
    // RDMA device for.
    if (p->sync) return fail(ENODEV);
    Channel* ch = chan(id->channel);
    if (!ensure_sub(p, 0)) return fail(ENODEV);
    CmMsg m;
    m.type = CmMsgType::kEvent;
    m.id = p->subs.front().number;
    m.event = RDMA_CM_EVENT_ADDR_ERROR;
    m.status = -ENODEV;
    std::lock_guard lk(ch->mu);
    queue_push(ch, Queued{0, m});
    return 0;
  }
  if (!ensure_sub(p, dev)) return -1;
  set_device(p, dev);
  CmMsg req;
  req.type = CmMsgType::kResolveAddr;
  req.src = to_cm(src_addr);
  req.src.port = p->bound_any ? p->any_port : port_of(src_addr);
  req.dst = to_cm(dst_addr);
  CmMsg r;
  if (!command(p, req, r)) return -1;
  // The route is the ADDR_RESOLVED event's to fill in (rdma-core's ucma_query_addr), on whatever
  // thread reads it: an event thread may be doing so already.
  return complete(p, sync);
}

UROCE_EXPORT int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) {
  (void)timeout_ms;
  if (id == nullptr) return fail(EINVAL);
  Id* p = id_of(id);
  const bool sync = p->sync;
  ack_sync_event(p);
  CmMsg req;
  req.type = CmMsgType::kResolveRoute;
  CmMsg r;
  if (!command(p, req, r)) return -1;
  return complete(p, sync);
}

UROCE_EXPORT int rdma_listen(rdma_cm_id* id, int backlog) {
  if (id == nullptr) return fail(EINVAL);
  Id* p = id_of(id);
  // Not bound: the wildcard address and an ephemeral port, as the kernel does.
  if (p->subs.empty() && !bind_any(p, 0)) return -1;
  Channel* ch = chan(id->channel);
  for (const Sub& s : p->subs) {
    CmMsg req;
    req.type = CmMsgType::kListen;
    req.id = s.number;
    req.backlog = backlog;
    set_seal_of(p, true, req);  // `require` refuses REQs from peers that will not key
    CmMsg r;
    if (!request(ch, s.dev, req, r)) return -1;
    if (!p->bound_any) fill_route(p, r.src, CmAddr{});
  }
  return 0;
}

// Long: one case per target state, each filling what librdmacm sets for it.
UROCE_EXPORT int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  if (id == nullptr || qp_attr == nullptr || qp_attr_mask == nullptr) return fail(EINVAL);
  Id* p = id_of(id);
  const ibv_qp_state want = qp_attr->qp_state;
  std::memset(qp_attr, 0, sizeof *qp_attr);
  qp_attr->qp_state = want;
  const uroce::cm::QpAttributes& q = p->qp_attr;
  switch (want) {
    case IBV_QPS_INIT:
      qp_attr->pkey_index = 0;
      qp_attr->port_num = 1;
      *qp_attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (is_ud(p)) {
        qp_attr->qkey = p->ud_qkey;
        *qp_attr_mask |= IBV_QP_QKEY;
      } else {
        // cm.c's cm_init_qp_init_attr once a connection exists: REMOTE_WRITE, and READ and
        // ATOMIC when it has responder resources; none before.
        qp_attr->qp_access_flags = 0;
        if (p->have_qp_attr) {
          qp_attr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
          if (q.max_dest_rd_atomic != 0) {
            qp_attr->qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
          }
        }
        *qp_attr_mask |= IBV_QP_ACCESS_FLAGS;
      }
      return 0;
    case IBV_QPS_RTR: {
      if (is_ud(p)) {
        *qp_attr_mask = IBV_QP_STATE;
        return 0;
      }
      if (!p->have_qp_attr) return fail(EINVAL);
      qp_attr->path_mtu = static_cast<ibv_mtu>(q.path_mtu);
      qp_attr->dest_qp_num = q.remote_qpn;
      qp_attr->rq_psn = q.rq_psn;
      qp_attr->max_dest_rd_atomic = q.max_dest_rd_atomic;
      qp_attr->min_rnr_timer = 0;
      ibv_ah_attr& ah = qp_attr->ah_attr;
      ah.is_global = 1;
      ah.port_num = 1;
      std::memcpy(ah.grh.dgid.raw, q.remote_gid.data(), 16);
      ah.grh.flow_label = q.flow_label;
      ah.grh.hop_limit = q.hop_limit != 0 ? q.hop_limit : 64;
      ah.grh.traffic_class = p->tos_set ? p->tos : q.traffic_class;
      ah.grh.sgid_index = 0;
      ah.sl = q.sl;
      *qp_attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      return 0;
    }
    case IBV_QPS_RTS:
      if (is_ud(p)) {
        qp_attr->sq_psn = p->psn;
        *qp_attr_mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
        return 0;
      }
      if (!p->have_qp_attr) return fail(EINVAL);
      qp_attr->sq_psn = q.sq_psn;
      qp_attr->timeout = p->ack_timeout_set ? p->ack_timeout : q.ack_timeout;
      qp_attr->retry_cnt = q.retry_count;
      qp_attr->rnr_retry = q.rnr_retry;
      qp_attr->max_rd_atomic = q.max_rd_atomic;
      *qp_attr_mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
      return 0;
    default:
      return fail(EINVAL);
  }
}

// Long: librdmacm's defaults and checks for a QP, then its creation and INIT.
UROCE_EXPORT int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
  if (id == nullptr || attr == nullptr) return fail(EINVAL);
  Id* p = id_of(id);
  if (id->qp != nullptr) return fail(EINVAL);
  if (id->verbs == nullptr) return fail(EINVAL);
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_PD) == 0 || attr->pd == nullptr) {
    attr->pd = id->pd;  // the device's default PD (set_device), as librdmacm
    attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
  }
  if (attr->pd == nullptr || attr->pd->context != id->verbs) return fail(EINVAL);
  // No CQs given: one per direction, each with its own completion channel (ucma_create_cqs).
  bool made_send = false;
  bool made_recv = false;
  if (attr->recv_cq == nullptr && attr->srq == nullptr) {
    id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
    if (id->recv_cq_channel == nullptr) return -1;
    id->recv_cq = ibv_create_cq(id->verbs, std::max<int>(1, attr->cap.max_recv_wr), id,
                                id->recv_cq_channel, 0);
    if (id->recv_cq == nullptr) return -1;
    attr->recv_cq = id->recv_cq;
    made_recv = true;
  }
  if (attr->send_cq == nullptr) {
    id->send_cq_channel = ibv_create_comp_channel(id->verbs);
    if (id->send_cq_channel == nullptr) return -1;
    id->send_cq = ibv_create_cq(id->verbs, std::max<int>(1, attr->cap.max_send_wr), id,
                                id->send_cq_channel, 0);
    if (id->send_cq == nullptr) return -1;
    attr->send_cq = id->send_cq;
    made_send = true;
  }
  if (attr->recv_cq == nullptr && attr->srq != nullptr) attr->recv_cq = attr->send_cq;
  attr->qp_type = id->qp_type;
  ibv_qp* qp = ibv_create_qp_ex(id->verbs, attr);
  if (qp == nullptr) {
    const int e = errno;
    if (made_send) {
      ibv_destroy_cq(id->send_cq);
      ibv_destroy_comp_channel(id->send_cq_channel);
      id->send_cq = nullptr;
      id->send_cq_channel = nullptr;
    }
    if (made_recv) {
      ibv_destroy_cq(id->recv_cq);
      ibv_destroy_comp_channel(id->recv_cq_channel);
      id->recv_cq = nullptr;
      id->recv_cq_channel = nullptr;
    }
    return fail(e != 0 ? e : ENOMEM);
  }
  id->qp = qp;
  int rc;
  if (is_ud(p)) {
    rc = modify(p, IBV_QPS_INIT);
    if (rc == 0) rc = modify(p, IBV_QPS_RTR);
    if (rc == 0) rc = modify(p, IBV_QPS_RTS);
  } else {
    rc = modify(p, IBV_QPS_INIT);
  }
  if (rc != 0) {
    const int e = errno;
    ibv_destroy_qp(qp);
    id->qp = nullptr;
    return fail(e);
  }
  return 0;
}

UROCE_EXPORT int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || qp_init_attr == nullptr) return fail(EINVAL);
  ibv_qp_init_attr_ex a{};
  std::memcpy(&a, qp_init_attr, sizeof *qp_init_attr);
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.pd = pd;
  if (pd == nullptr) a.comp_mask = 0;
  const int rc = rdma_create_qp_ex(id, &a);
  if (rc == 0) {
    std::memcpy(qp_init_attr, &a, sizeof *qp_init_attr);
  }
  return rc;
}

UROCE_EXPORT void rdma_destroy_qp(rdma_cm_id* id) {
  if (id == nullptr || id->qp == nullptr) return;
  ibv_destroy_qp(id->qp);
  id->qp = nullptr;
  if (id->send_cq != nullptr) {
    ibv_destroy_cq(id->send_cq);
    id->send_cq = nullptr;
  }
  if (id->send_cq_channel != nullptr) {
    ibv_destroy_comp_channel(id->send_cq_channel);
    id->send_cq_channel = nullptr;
  }
  if (id->recv_cq != nullptr && id->recv_cq != id->send_cq) {
    ibv_destroy_cq(id->recv_cq);
  }
  id->recv_cq = nullptr;
  if (id->recv_cq_channel != nullptr) {
    ibv_destroy_comp_channel(id->recv_cq_channel);
    id->recv_cq_channel = nullptr;
  }
}

namespace {

// rdma_connect's and rdma_accept's parameters: `max_rr` / `max_id` are the device's limits.
void conn_to_msg(Id* p, const rdma_conn_param* c, CmMsg& req) {
  std::uint8_t max_rr = 0;
  std::uint8_t max_id = 0;
  {
    std::lock_guard lk(g_mu);
    const int dev = primary_dev(p);
    if (dev >= 0) {
      max_rr = devices()[static_cast<std::size_t>(dev)].max_resp_res;
      max_id = devices()[static_cast<std::size_t>(dev)].max_init_depth;
    }
  }
  req.conn.retry_count = 7;
  req.conn.rnr_retry_count = 7;
  if (c != nullptr) {
    req.conn.responder_resources = std::min(c->responder_resources, max_rr);
    req.conn.initiator_depth = std::min(c->initiator_depth, max_id);
    req.conn.flow_control = c->flow_control;
    req.conn.retry_count = c->retry_count;
    req.conn.rnr_retry_count = c->rnr_retry_count;
    if (c->private_data != nullptr && c->private_data_len != 0) {
      const std::size_t n =
          std::min<std::size_t>(c->private_data_len, sizeof req.conn.private_data);
      std::memcpy(req.conn.private_data, c->private_data, n);
      req.conn.private_data_len = static_cast<std::uint8_t>(n);
    }
  }
  if (p->pub.qp != nullptr) {
    req.conn.qp_num = p->pub.qp->qp_num;
    req.conn.srq = p->pub.qp->srq != nullptr ? 1 : 0;
  } else if (c != nullptr) {
    req.conn.qp_num = c->qp_num;
    req.conn.srq = c->srq;
  }
  req.conn.starting_psn = p->psn;
  req.conn.qkey = p->ud_qkey;
  if (p->pub.verbs != nullptr) {
    ibv_port_attr pa{};
    if (ibv_query_port(p->pub.verbs, 1, &pa) == 0) {
      req.conn.path_mtu = static_cast<std::uint8_t>(pa.active_mtu);
    }
  }
}

}  // namespace

UROCE_EXPORT int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  if (id == nullptr) return fail(EINVAL);
  Id* p = id_of(id);
  const bool sync = p->sync;
  ack_sync_event(p);
  if (conn_param != nullptr && conn_param->private_data_len != 0 &&
      conn_param->private_data == nullptr) {
    return fail(EINVAL);
  }
  const std::size_t max_pd = is_ud(p) ? 180 : 56;
  if (conn_param != nullptr && conn_param->private_data_len > max_pd) return fail(EINVAL);
  CmMsg req;
  req.type = CmMsgType::kConnect;
  conn_to_msg(p, conn_param, req);
  set_seal_of(p, id->qp != nullptr, req);
  if (!is_ud(p) && req.conn.qp_num == 0) return fail(EINVAL);
  p->responder_resources = req.conn.responder_resources;
  p->initiator_depth = req.conn.initiator_depth;
  CmMsg r;
  if (!command(p, req, r)) return -1;
  return complete(p, sync);
}

UROCE_EXPORT int rdma_establish(rdma_cm_id* id) {
  if (id == nullptr) return fail(EINVAL);
  Id* p = id_of(id);
  if (id->qp != nullptr) return fail(EINVAL);  // the library did it already
  CmMsg req;
  req.type = CmMsgType::kAccept;
  CmMsg r;
  if (!command(p, req, r)) return -1;
  p->established = true;
  return 0;
}

UROCE_EXPORT int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  if (id == nullptr) return fail(EINVAL);
  Id* p = id_of(id);
  const bool sync = p->sync;
  if (id->qp == nullptr && conn_param == nullptr) return fail(EINVAL);
  if (conn_param != nullptr && conn_param->private_data_len > (is_ud(p) ? 136 : 196)) {
    return fail(EINVAL);
  }
  CmMsg req;
  req.type = CmMsgType::kAccept;
  conn_to_msg(p, conn_param, req);
  set_seal_of(p, id->qp != nullptr, req);
  // What the REQ offers bounds ours (rdma_accept's clamps): our responder resources by its
  // initiator depth, our initiator depth by its responder resources.
  std::uint8_t rr =
      conn_param != nullptr ? req.conn.responder_resources : p->remote.initiator_depth;
  std::uint8_t idp =
      conn_param != nullptr ? req.conn.initiator_depth : p->remote.responder_resources;
  rr = std::min(rr, p->remote.initiator_depth);
  idp = std::min(idp, p->remote.responder_resources);
  req.conn.responder_resources = rr;
  req.conn.initiator_depth = idp;
  if (!is_ud(p)) {
    if (id->qp != nullptr) {
      // The QP goes to RTR and RTS before the REP leaves, with what the REP will carry.
      p->qp_attr.local_qpn = id->qp->qp_num;
      p->qp_attr.rq_psn = p->psn;  // the REP's Starting PSN (cm.h: what we receive)
      p->qp_attr.max_dest_rd_atomic = rr;
      p->qp_attr.max_rd_atomic = idp;
      p->qp_attr.rnr_retry = req.conn.rnr_retry_count;  // the REP's (cm.c keeps it for RTS)
      p->have_qp_attr = true;
      if (modify_rtr(p, rr) != 0 || modify_rts(p, idp) != 0) {
        const int e = errno;
        modify_err(p);
        return fail(e);
      }
    }
  }
  // What the REP carries, for rdma_init_qp_attr: set before it leaves (the ID is not touched
  // after it: an event thread may destroy it once the connection is up).
  const bool ud = is_ud(p);
  if (!ud) {
    p->qp_attr.local_qpn = req.conn.qp_num;
    p->qp_attr.rq_psn = p->psn;
    p->qp_attr.max_dest_rd_atomic = rr;
    p->qp_attr.max_rd_atomic = idp;
    p->qp_attr.rnr_retry = req.conn.rnr_retry_count;
    p->have_qp_attr = true;
  }
  Channel* const ch = chan(p->pub.channel);
  const Sub sub = p->subs.empty() ? Sub{} : p->subs.front();
  CmMsg r;
  if (!command(p, req, r)) {
    const int e = errno;
    modify_err(p);
    return fail(e);
  }
  if (ud) return 0;  // SIDR: nothing more comes
  if (req.seal_mode != 0 && r.qp.peer_uroce) await_connection_event(ch, sub);
  return complete(p, sync);
}

UROCE_EXPORT int rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  if (id == nullptr) return fail(EINVAL);
  Id* p = id_of(id);
  CmMsg req;
  req.type = CmMsgType::kReject;
  if (private_data != nullptr && private_data_len != 0) {
    if (private_data_len > 148) return fail(EINVAL);
    std::memcpy(req.conn.private_data, private_data, private_data_len);
    req.conn.private_data_len = private_data_len;
  }
  CmMsg r;
  return command(p, req, r) ? 0 : -1;
}

UROCE_EXPORT int rdma_disconnect(rdma_cm_id* id) {
  if (id == nullptr) return fail(EINVAL);
  Id* p = id_of(id);
  modify_err(p);
  CmMsg req;
  req.type = CmMsgType::kDisconnect;
  CmMsg r;
  return command(p, req, r) ? 0 : -1;
}

UROCE_EXPORT int rdma_notify(rdma_cm_id* id, ibv_event_type event) {
  if (id == nullptr) return fail(EINVAL);
  if (event != IBV_EVENT_COMM_EST) return fail(EINVAL);
  CmMsg req;
  req.type = CmMsgType::kNotify;
  CmMsg r;
  return command(id_of(id), req, r) ? 0 : -1;
}

UROCE_EXPORT int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval,
                                 size_t optlen) {
  if (id == nullptr || optval == nullptr) return fail(EINVAL);
  Id* p = id_of(id);
  if (level == RDMA_OPTION_ID) {
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
        if (optlen != sizeof(std::uint8_t)) return fail(EINVAL);
        p->tos = *static_cast<std::uint8_t*>(optval);
        p->tos_set = true;
        return 0;
      case RDMA_OPTION_ID_REUSEADDR:
      case RDMA_OPTION_ID_AFONLY:
        if (optlen != sizeof(int)) return fail(EINVAL);
        return 0;
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (optlen != sizeof(std::uint8_t)) return fail(EINVAL);
        p->ack_timeout = *static_cast<std::uint8_t*>(optval);
        p->ack_timeout_set = true;
        return 0;
      default:
        return fail(ENOSYS);
    }
  }
  if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) return fail(ENOSYS);
  return fail(ENOSYS);
}

UROCE_EXPORT int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  if (id == nullptr) return fail(EINVAL);
  Id* p = id_of(id);
  const bool sync = channel == nullptr;
  // To the channel it is on already: nothing moves (the kernel's ucma_migrate_id answers so;
  // libfabric's verbs provider does it for every connection it accepts).
  if (!sync && channel == id->channel) return 0;
  Channel* to = sync ? new_channel() : chan(channel);
  if (to == nullptr) return fail(ENOMEM);
  Channel* from = chan(id->channel);
  for (const Sub& s : p->subs) {
    CmMsg req;
    req.type = CmMsgType::kMigrate;
    req.id = s.number;
    CmMsg r;
    if (!request(to, s.dev, req, r)) {
      const int e = errno;
      if (sync) free_channel(to);
      return fail(e);
    }
  }
  // What the old channel already holds for the ID moves with it.
  {
    std::scoped_lock lk(from->mu, to->mu);
    pump(from);
    std::deque<Queued> keep;
    for (const Queued& q : from->queue) {
      bool mine = false;
      for (const Sub& s : p->subs) {
        mine = mine || (q.dev == s.dev && (q.msg.id == s.number));
      }
      if (mine) {
        queue_push(to, q);
      } else {
        keep.push_back(q);
      }
    }
    from->queue.swap(keep);
    queue_drained(from);
  }
  if (p->sync) {
    // The last event of its synchronous calls is acknowledged as its channel goes (as
    // rdma-core's rdma_migrate_id does), or rdma_destroy_id would wait for it forever.
    ack_sync_event(p);
    free_channel(from);
  }
  id->channel = &to->pub;
  p->sync = sync;
  return 0;
}

UROCE_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  if (listen == nullptr || id == nullptr) return fail(EINVAL);
  Id* l = id_of(listen);
  if (!l->sync) return fail(EINVAL);
  ack_sync_event(l);
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(listen->channel, &e) != 0) return -1;
  if (e->status != 0) {
    const int err = e->status < 0 ? -e->status : e->status;
    rdma_ack_cm_event(e);
    return fail(err);
  }
  if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    rdma_ack_cm_event(e);
    return fail(EINVAL);
  }
  if (l->ep.has_qp_init) {
    ibv_qp_init_attr a = l->ep.qp_init;
    if (listen->srq != nullptr && a.srq == nullptr) a.srq = listen->srq;
    if (rdma_create_qp(e->id, l->ep.pd, &a) != 0) {
      const int err = errno;
      rdma_ack_cm_event(e);
      return fail(err);
    }
  }
  *id = e->id;
  (*id)->event = e;
  return 0;
}

// The drop-in libibverbs.so.1: devices, contexts and the verbs objects over uroce (see compat.h).
#include <endian.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "compat/connection_key.h"
#include "compat/ibverbs/compat.h"
#include "datapath/udp.h"
#include "edge/environment.h"
#include "verbs/address.h"

// The header turns these into inline wrappers; the library exports the functions themselves.
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

namespace uroce::compat {

namespace {

// ---- the device list ----

struct DeviceList {
  std::vector<CompatDevice*> devices;  // never freed: applications may keep the pointers
  std::string error;
};

DeviceList& device_list() {
  static DeviceList* list = [] {
    auto* l = new DeviceList();
    auto specs = engine::configured_devices(edge::device_source());  // the edge
    if (!specs.ok()) {
      l->error = specs.error();
      return l;
    }
    int index = 0;
    for (const engine::DeviceSpec& s : specs.value()) {
      auto* d = new CompatDevice();
      std::memset(&d->dev, 0, sizeof d->dev);
      d->spec = s;
      d->index = index;
      // As the kernel's Soft-RoCE shows itself: an IB CA, IB transport (RoCE), with the sysfs
      // paths libibverbs would have found (they do not exist: readers fall back gracefully).
      d->dev.node_type = IBV_NODE_CA;
      d->dev.transport_type = IBV_TRANSPORT_IB;
      std::snprintf(d->dev.name, sizeof d->dev.name, "%s", s.name.c_str());
      std::snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "uverbs%d", index);
      std::snprintf(d->dev.dev_path, sizeof d->dev.dev_path, "/sys/class/infiniband_verbs/uverbs%d",
                    index);
      std::snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "/sys/class/infiniband/%s",
                    s.name.c_str());
      l->devices.push_back(d);
      ++index;
    }
    return l;
  }();
  return *list;
}

CompatDevice* find_device(ibv_device* device) {
  for (CompatDevice* d : device_list().devices) {
    if (&d->dev == device) return d;
  }
  return nullptr;
}

// The index of the interface that holds `ip` (as rxe reports its netdev's in the GID entry),
// 0 when none does. 127.0.0.0/8 is all loopback though lo lists only 127.0.0.1.
std::uint32_t interface_index(const wire::IpAddress& ip) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return 0;
  std::uint32_t index = 0;
  for (ifaddrs* i = list; i != nullptr && index == 0; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    bool match = false;
    if (!ip.v6 && i->ifa_addr->sa_family == AF_INET) {
      const auto* sa = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      match = std::memcmp(&sa->sin_addr, ip.bytes.data(), 4) == 0;
    } else if (ip.v6 && i->ifa_addr->sa_family == AF_INET6) {
      const auto* sa = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      match = std::memcmp(&sa->sin6_addr, ip.bytes.data(), 16) == 0;
    }
    if (match) index = ::if_nametoindex(i->ifa_name);
  }
  ::freeifaddrs(list);
  if (index == 0 && !ip.v6 && ip.bytes[0] == 127) index = ::if_nametoindex("lo");
  return index;
}

// libibverbs' event fds block until the application makes them non-blocking (then the get
// calls return EAGAIN when nothing is waiting). uroce's are eventfds created non-blocking by
// the UdpDevice, which reads them only while they are readable, so the flag is the
// application's to choose: it starts cleared.
void make_blocking(int fd) {
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}
bool is_nonblocking(int fd) {
  const int fl = ::fcntl(fd, F_GETFL);
  return fl >= 0 && (fl & O_NONBLOCK) != 0;
}

// ---- conversions (the numeric values are libibverbs': casts) ----

void to_ibv_device_attr(const DeviceAttr& a, ibv_device_attr* o) {
  std::memset(o, 0, sizeof *o);
  std::snprintf(o->fw_ver, sizeof o->fw_ver, "%s", a.fw_ver.c_str());
  o->node_guid = htobe64(a.node_guid);
  o->sys_image_guid = htobe64(a.sys_image_guid);
  o->max_mr_size = a.max_mr_size;
  o->page_size_cap = a.page_size_cap;
  o->vendor_id = a.vendor_id;
  o->vendor_part_id = a.vendor_part_id;
  o->hw_ver = a.hw_ver;
  o->max_qp = static_cast<int>(a.max_qp);
  o->max_qp_wr = static_cast<int>(a.max_qp_wr);
  o->device_cap_flags = a.device_cap_flags;
  o->max_sge = static_cast<int>(a.max_sge);
  o->max_sge_rd = static_cast<int>(a.max_sge_rd);
  o->max_cq = static_cast<int>(a.max_cq);
  o->max_cqe = static_cast<int>(a.max_cqe);
  o->max_mr = static_cast<int>(a.max_mr);
  o->max_pd = static_cast<int>(a.max_pd);
  o->max_qp_rd_atom = static_cast<int>(a.max_qp_rd_atom);
  o->max_ee_rd_atom = static_cast<int>(a.max_ee_rd_atom);
  o->max_res_rd_atom = static_cast<int>(a.max_res_rd_atom);
  o->max_qp_init_rd_atom = static_cast<int>(a.max_qp_init_rd_atom);
  o->max_ee_init_rd_atom = static_cast<int>(a.max_ee_init_rd_atom);
  o->atomic_cap = static_cast<ibv_atomic_cap>(a.atomic_cap);
  o->max_ee = static_cast<int>(a.max_ee);
  o->max_rdd = static_cast<int>(a.max_rdd);
  o->max_mw = static_cast<int>(a.max_mw);
  o->max_raw_ipv6_qp = static_cast<int>(a.max_raw_ipv6_qp);
  o->max_raw_ethy_qp = static_cast<int>(a.max_raw_ethy_qp);
  o->max_mcast_grp = static_cast<int>(a.max_mcast_grp);
  o->max_mcast_qp_attach = static_cast<int>(a.max_mcast_qp_attach);
  o->max_total_mcast_qp_attach = static_cast<int>(a.max_total_mcast_qp_attach);
  o->max_ah = static_cast<int>(a.max_ah);
  o->max_fmr = static_cast<int>(a.max_fmr);
  o->max_map_per_fmr = static_cast<int>(a.max_map_per_fmr);
  o->max_srq = static_cast<int>(a.max_srq);
  o->max_srq_wr = static_cast<int>(a.max_srq_wr);
  o->max_srq_sge = static_cast<int>(a.max_srq_sge);
  o->max_pkeys = a.max_pkeys;
  o->local_ca_ack_delay = a.local_ca_ack_delay;
  o->phys_port_cnt = a.phys_port_cnt;
}

void to_ibv_port_attr(const PortAttr& a, ibv_port_attr* o) {
  std::memset(o, 0, sizeof *o);
  o->state = static_cast<ibv_port_state>(a.state);
  o->max_mtu = static_cast<ibv_mtu>(a.max_mtu);
  o->active_mtu = static_cast<ibv_mtu>(a.active_mtu);
  o->gid_tbl_len = static_cast<int>(a.gid_tbl_len);
  o->port_cap_flags = a.port_cap_flags;
  o->max_msg_sz = a.max_msg_sz;
  o->bad_pkey_cntr = a.bad_pkey_cntr;
  o->qkey_viol_cntr = a.qkey_viol_cntr;
  o->pkey_tbl_len = a.pkey_tbl_len;
  o->lid = a.lid;
  o->sm_lid = a.sm_lid;
  o->lmc = a.lmc;
  o->max_vl_num = a.max_vl_num;
  o->sm_sl = a.sm_sl;
  o->subnet_timeout = a.subnet_timeout;
  o->init_type_reply = a.init_type_reply;
  o->active_width = a.active_width;
  o->active_speed = a.active_speed;
  o->phys_state = a.phys_state;
  o->link_layer = static_cast<std::uint8_t>(a.link_layer);
}

}  // namespace

// An address that no interface holds cannot carry traffic (opening the device will fail):
// its port reads as down, as rxe's does when its netdev has no carrier.
void mark_down_if_not_local(Context* ctx, ibv_port_attr* a) {
  if (ctx->address_local) return;
  a->state = IBV_PORT_DOWN;
  a->phys_state = 3;  // Disabled
}

namespace {

Gid to_gid(const ibv_gid& g) {
  Gid r;
  std::memcpy(r.raw.data(), g.raw, 16);
  return r;
}

void to_ibv_gid(const Gid& g, ibv_gid* o) { std::memcpy(o->raw, g.raw.data(), 16); }

AhAttr to_ah_attr(const ibv_ah_attr& a) {
  AhAttr r;
  r.dgid = to_gid(a.grh.dgid);
  r.flow_label = a.grh.flow_label;
  r.sgid_index = a.grh.sgid_index;
  r.hop_limit = a.grh.hop_limit;
  r.traffic_class = a.grh.traffic_class;
  r.sl = a.sl;
  r.port_num = a.port_num;
  r.is_global = a.is_global != 0;
  return r;
}

void to_ibv_ah_attr(const AhAttr& a, ibv_ah_attr* o) {
  std::memset(o, 0, sizeof *o);
  to_ibv_gid(a.dgid, &o->grh.dgid);
  o->grh.flow_label = a.flow_label;
  o->grh.sgid_index = a.sgid_index;
  o->grh.hop_limit = a.hop_limit;
  o->grh.traffic_class = a.traffic_class;
  o->sl = a.sl;
  o->port_num = a.port_num;
  o->is_global = a.is_global ? 1 : 0;
}

QpCap to_cap(const ibv_qp_cap& c) {
  return QpCap{c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data};
}

void to_ibv_cap(const QpCap& c, ibv_qp_cap* o) {
  o->max_send_wr = c.max_send_wr;
  o->max_recv_wr = c.max_recv_wr;
  o->max_send_sge = c.max_send_sge;
  o->max_recv_sge = c.max_recv_sge;
  o->max_inline_data = c.max_inline_data;
}

// An enum field of a struct the application filled, as the integer it holds: the fields that
// the attribute mask does not name may hold anything (rdma-core's ibv_xsrq_pingpong leaves them
// uninitialized), which is no value of the enum.
template <class E>
std::uint8_t raw_enum(const E& e) {
  static_assert(sizeof(E) == sizeof(std::uint32_t));
  std::uint32_t v = 0;
  std::memcpy(&v, &e, sizeof v);
  return static_cast<std::uint8_t>(v);
}

QpAttr to_qp_attr(const ibv_qp_attr& a) {
  QpAttr r;
  r.qp_state = static_cast<QpState>(raw_enum(a.qp_state));
  r.cur_qp_state = static_cast<QpState>(raw_enum(a.cur_qp_state));
  r.path_mtu = static_cast<Mtu>(raw_enum(a.path_mtu));
  r.qkey = a.qkey;
  r.rq_psn = a.rq_psn;
  r.sq_psn = a.sq_psn;
  r.dest_qp_num = a.dest_qp_num;
  r.qp_access_flags = a.qp_access_flags;
  r.cap = to_cap(a.cap);
  r.ah_attr = to_ah_attr(a.ah_attr);
  r.pkey_index = a.pkey_index;
  r.en_sqd_async_notify = a.en_sqd_async_notify != 0;
  r.sq_draining = a.sq_draining != 0;
  r.max_rd_atomic = a.max_rd_atomic;
  r.max_dest_rd_atomic = a.max_dest_rd_atomic;
  r.min_rnr_timer = a.min_rnr_timer;
  r.port_num = a.port_num;
  r.timeout = a.timeout;
  r.retry_cnt = a.retry_cnt;
  r.rnr_retry = a.rnr_retry;
  return r;
}

void to_ibv_qp_attr(const QpAttr& a, ibv_qp_attr* o) {
  std::memset(o, 0, sizeof *o);
  o->qp_state = static_cast<ibv_qp_state>(a.qp_state);
  o->cur_qp_state = static_cast<ibv_qp_state>(a.cur_qp_state);
  o->path_mtu = static_cast<ibv_mtu>(a.path_mtu);
  o->path_mig_state = IBV_MIG_MIGRATED;
  o->qkey = a.qkey;
  o->rq_psn = a.rq_psn;
  o->sq_psn = a.sq_psn;
  o->dest_qp_num = a.dest_qp_num;
  o->qp_access_flags = a.qp_access_flags;
  to_ibv_cap(a.cap, &o->cap);
  to_ibv_ah_attr(a.ah_attr, &o->ah_attr);
  o->pkey_index = a.pkey_index;
  o->en_sqd_async_notify = a.en_sqd_async_notify ? 1 : 0;
  o->sq_draining = a.sq_draining ? 1 : 0;
  o->max_rd_atomic = a.max_rd_atomic;
  o->max_dest_rd_atomic = a.max_dest_rd_atomic;
  o->min_rnr_timer = a.min_rnr_timer;
  o->port_num = a.port_num;
  o->timeout = a.timeout;
  o->retry_cnt = a.retry_cnt;
  o->rnr_retry = a.rnr_retry;
}

static_assert(sizeof(ibv_sge) == sizeof(Sge));
// The IBTA 1.5 values uroce shares with libibverbs (FLUSH's are rdma-core 45's: 14, 8, 1 << 8).
static_assert(IBV_WR_ATOMIC_WRITE == static_cast<int>(WrOpcode::kAtomicWrite) &&
              IBV_WC_ATOMIC_WRITE == static_cast<int>(WcOpcode::kAtomicWrite));
static_assert(offsetof(ibv_sge, addr) == offsetof(Sge, addr));
static_assert(offsetof(ibv_sge, length) == offsetof(Sge, length));
static_assert(offsetof(ibv_sge, lkey) == offsetof(Sge, lkey));

// An ibv_sge array read as uroce SGEs (same layout): no copy on the data path.
std::span<const Sge> sges_of(const ibv_sge* s, int n) {
  if (n <= 0 || s == nullptr) return {};
  return {reinterpret_cast<const Sge*>(s), static_cast<std::size_t>(n)};
}

}  // namespace

void init_sync(pthread_mutex_t* m, pthread_cond_t* c) {
  pthread_mutex_init(m, nullptr);
  pthread_cond_init(c, nullptr);
}

namespace {

// Counts one more event handed out for an object (under its mutex).
void note_reported(pthread_mutex_t* m, std::uint32_t* reported) {
  pthread_mutex_lock(m);
  ++*reported;
  pthread_mutex_unlock(m);
}

// rdma-core's destroy verbs return only once every event handed out for the object was
// acknowledged (ibv_ack_cq_events, ibv_ack_async_event signal the condition). Called once the
// object is out of the context's maps, so `reported` no longer grows.
void wait_acked(pthread_mutex_t* m, pthread_cond_t* c, const std::uint32_t* reported,
                const std::uint32_t* completed) {
  pthread_mutex_lock(m);
  while (*completed != *reported) pthread_cond_wait(c, m);
  pthread_mutex_unlock(m);
}

void destroy_sync(pthread_mutex_t* m, pthread_cond_t* c) {
  pthread_mutex_destroy(m);
  pthread_cond_destroy(c);
}

// ---- context ops (the inline verbs call these) ----

int poll_locked(engine::UdpDevice* u, Cq* cq, int n, ibv_wc* wc) {
  constexpr int kChunk = 32;
  // Built once per thread: 32 Wc take 1.5 KiB to initialise, and an application that polls in
  // a loop (perftest, UCX) calls this on every turn, mostly to find the CQ empty.
  thread_local std::array<Wc, kChunk> buf;
  int total = 0;
  auto d = u->lock();
  while (total < n) {
    const int want = std::min(n - total, kChunk);
    auto r = d->poll_cq(cq->h, std::span<Wc>(buf.data(), static_cast<std::size_t>(want)));
    if (!r.ok()) return total > 0 ? total : -1;
    const int got = static_cast<int>(r.value());
    for (int i = 0; i < got; ++i) to_ibv_wc(buf[i], &wc[total + i]);
    total += got;
    if (got < want) break;
  }
  return total;
}

int op_poll_cq(ibv_cq* icq, int n, ibv_wc* wc) {
  Cq* cq = cq_of(icq);
  engine::UdpDevice* u = cq->ctx->s->udp.load(std::memory_order_acquire);
  if (n <= 0 || u == nullptr) return 0;
  const int got = poll_locked(u, cq, n, wc);
  if (got != 0) return got;
  // An empty CQ: an application that polls in a loop runs a round of progress itself (receive,
  // timers, transmit; never blocking), so that its completions do not wait for the progress
  // thread to be scheduled. The thread still serves applications that do not poll.
  if (!u->progress()) return 0;
  return poll_locked(u, cq, n, wc);
}

int op_req_notify_cq(ibv_cq* icq, int solicited_only) {
  Cq* cq = cq_of(icq);
  engine::UdpDevice* u = cq->ctx->s->udp.load(std::memory_order_acquire);
  if (u == nullptr) return EINVAL;
  const Errc e = u->lock()->req_notify_cq(cq->h, solicited_only != 0);
  // Arming a CQ means the application is about to wait for an event (in ibv_get_cq_event, or
  // in poll() on the channel's fd): the progress thread must watch the socket again.
  u->application_waits();
  return err(e);
}

thread_local std::vector<RecvWr> t_recv;
thread_local std::vector<SendWr> t_send;

// Converts the list up to the first request that cannot be expressed (returned, or nullptr).
template <class W>
W* convert_recv(W* wr) {
  t_recv.clear();
  for (W* w = wr; w != nullptr; w = w->next) {
    if (w->num_sge < 0 || (w->num_sge > 0 && w->sg_list == nullptr)) return w;
    t_recv.push_back(RecvWr{w->wr_id, sges_of(w->sg_list, w->num_sge)});
  }
  return nullptr;
}

template <class W>
W* nth(W* wr, std::size_t n) {
  while (n-- > 0 && wr != nullptr) wr = wr->next;
  return wr;
}

template <class Post>
int post_recv_list(engine::UdpDevice* u, ibv_recv_wr* wr, ibv_recv_wr** bad_wr,
                   Post post) noexcept {
  ibv_recv_wr* unconvertible = nullptr;
  try {
    unconvertible = convert_recv(wr);
  } catch (...) {  // growing the thread-local vector failed: nothing was posted
    if (bad_wr != nullptr) *bad_wr = wr;
    return ENOMEM;
  }
  const RecvWr* bad = nullptr;
  Errc e = Errc::kOk;
  if (!t_recv.empty()) e = post(*u->lock(), &bad);
  if (e != Errc::kOk) {
    if (bad_wr != nullptr) *bad_wr = nth(wr, static_cast<std::size_t>(bad - t_recv.data()));
    return err(e);
  }
  if (unconvertible != nullptr) {
    if (bad_wr != nullptr) *bad_wr = unconvertible;
    return EINVAL;
  }
  return 0;
}

int op_post_recv(ibv_qp* iqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Qp* qp = qp_of(iqp);
  engine::UdpDevice* u = ctx_of(iqp->context)->s->udp.load(std::memory_order_acquire);
  if (u == nullptr) return EINVAL;
  return post_recv_list(u, wr, bad_wr, [qp](Device& d, const RecvWr** bad) {
    return d.post_recv(qp->h, t_recv, bad);
  });
}

int op_post_srq_recv(ibv_srq* isrq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Srq* srq = srq_of(isrq);
  engine::UdpDevice* u = ctx_of(isrq->context)->s->udp.load(std::memory_order_acquire);
  if (u == nullptr) return EINVAL;
  return post_recv_list(u, wr, bad_wr, [srq](Device& d, const RecvWr** bad) {
    return d.post_srq_recv(srq->h, t_recv, bad);
  });
}

// Memory windows: ibv_alloc_mw, ibv_dealloc_mw and ibv_bind_mw are libibverbs' inline
// functions over these context ops (ibv_bind_mw checks the type 1 window, the range without a
// region and the region's PD before it calls op_bind_mw, as Device::bind_mw does again).
ibv_mw* op_alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  return guarded<ibv_mw*>(nullptr, [&]() -> ibv_mw* {
    engine::UdpDevice* u = ctx_of(pd->context)->s->udp.load();
    auto r = u->lock()->alloc_mw(pd_of(pd)->h, static_cast<MwType>(type));
    if (!r.ok()) {
      errno = err(r.error());
      return nullptr;
    }
    auto* m = new Mw();
    m->ibv.context = pd->context;
    m->ibv.pd = pd;
    m->ibv.rkey = r.value().rkey;
    m->ibv.handle = r.value().handle.index;
    m->ibv.type = type;
    m->h = r.value().handle;
    return &m->ibv;
  });
}

// ibv_advise_mr (verbs_context.advise_mr; libibverbs' inline returns what this returns, an
// errno value): prefetch of ODP regions (uroce/verbs.h Device::advise_mr).
int vop_advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, std::uint32_t flags, ibv_sge* sg_list,
                  std::uint32_t num_sge) {
  return guarded<int>(ENOMEM, [&]() -> int {
    if (pd == nullptr || (sg_list == nullptr && num_sge != 0)) return EINVAL;
    std::vector<Sge> sges(num_sge);
    for (std::uint32_t i = 0; i < num_sge; ++i) {
      sges[i] = Sge{sg_list[i].addr, sg_list[i].length, sg_list[i].lkey};
    }
    // Copied out as the integer C passed: advice outside the enum (an application's or a newer
    // rdma-core's value) is EOPNOTSUPP, not a load of an invalid enum value.
    std::uint32_t raw = 0;
    static_assert(sizeof raw == sizeof advice);
    std::memcpy(&raw, &advice, sizeof raw);
    engine::UdpDevice* u = ctx_of(pd->context)->s->udp.load();
    return err(u->lock()->advise_mr(pd_of(pd)->h, static_cast<AdviseMr>(raw), flags, sges));
  });
}

int op_dealloc_mw(ibv_mw* mw) {
  engine::UdpDevice* u = ctx_of(mw->context)->s->udp.load();
  const Errc e = u->lock()->dealloc_mw(mw_of(mw)->h);
  if (e != Errc::kOk) return err(e);
  delete mw_of(mw);
  return 0;
}

// rdma-core's rxe: a BIND_MW work request with the key byte incremented; mw->rkey is the new key
// once it is posted ("user has to undo this if he gets an error wc").
int op_bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  engine::UdpDevice* u = ctx_of(qp->context)->s->udp.load(std::memory_order_acquire);
  if (u == nullptr || bind == nullptr) return EINVAL;
  const ibv_mw_bind_info& b = bind->bind_info;
  const MwBindInfo info{b.mr != nullptr ? mr_of(b.mr)->h : MrHandle{}, b.addr, b.length,
                        b.mw_access_flags};
  std::uint32_t rkey = 0;
  const Errc e = post_then_transmit(u, [&](Device& d) {
    auto r = d.bind_mw(qp_of(qp)->h, mw_of(mw)->h, bind->wr_id, bind->send_flags, info);
    if (!r.ok()) return r.error();
    rkey = r.value();
    return Errc::kOk;
  });
  if (e != Errc::kOk) {
    errno = err(e);
    return errno;
  }
  mw->rkey = rkey;
  return 0;
}

bool supported_opcode(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_LOCAL_INV:
    case IBV_WR_BIND_MW:
    case IBV_WR_SEND_WITH_INV:
      return true;
    default:  // TSO, DRIVER1, ATOMIC_WRITE, FLUSH: rxe 44 rejects them too (EINVAL)
      return false;
  }
}

int post_send_impl(ibv_qp* iqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Qp* qp = qp_of(iqp);
  engine::UdpDevice* u = ctx_of(iqp->context)->s->udp.load(std::memory_order_acquire);
  if (u == nullptr) return EINVAL;
  t_send.clear();
  ibv_send_wr* unconvertible = nullptr;
  for (ibv_send_wr* w = wr; w != nullptr; w = w->next) {
    if (w->num_sge < 0 || (w->num_sge > 0 && w->sg_list == nullptr) ||
        !supported_opcode(w->opcode)) {
      unconvertible = w;
      break;
    }
    SendWr s;
    s.wr_id = w->wr_id;
    s.sg_list = sges_of(w->sg_list, w->num_sge);
    s.opcode = static_cast<WrOpcode>(static_cast<std::uint8_t>(w->opcode));
    s.send_flags = w->send_flags;
    if (w->opcode == IBV_WR_SEND_WITH_INV || w->opcode == IBV_WR_LOCAL_INV) {
      s.invalidate_rkey = w->invalidate_rkey;
    } else {
      s.imm_data = be32toh(w->imm_data);  // uroce holds the value ImmDt carries big-endian
    }
    if (w->opcode == IBV_WR_BIND_MW) {
      // A type 2 window (rxe's post_send takes type 1 too); its key travels in bind_mw.rkey.
      if (w->bind_mw.mw == nullptr) {
        unconvertible = w;
        break;
      }
      const ibv_mw_bind_info& b = w->bind_mw.bind_info;
      s.bind_mw.mw = mw_of(w->bind_mw.mw)->h;
      s.bind_mw.rkey = w->bind_mw.rkey;
      s.bind_mw.bind_info = MwBindInfo{b.mr != nullptr ? mr_of(b.mr)->h : MrHandle{}, b.addr,
                                       b.length, b.mw_access_flags};
    } else if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      s.atomic.remote_addr = w->wr.atomic.remote_addr;
      s.atomic.compare_add = w->wr.atomic.compare_add;
      s.atomic.swap = w->wr.atomic.swap;
      s.atomic.rkey = w->wr.atomic.rkey;
    } else if (qp->type == QpType::kUd) {
      if (w->wr.ud.ah == nullptr) {
        unconvertible = w;
        break;
      }
      s.ud.ah = ah_of(w->wr.ud.ah)->h;
      s.ud.remote_qpn = w->wr.ud.remote_qpn;
      s.ud.remote_qkey = w->wr.ud.remote_qkey;
    } else {
      s.rdma.remote_addr = w->wr.rdma.remote_addr;
      s.rdma.rkey = w->wr.rdma.rkey;
    }
    if (qp->type == QpType::kXrcSend) s.xrc.remote_srqn = w->qp_type.xrc.remote_srqn;
    t_send.push_back(s);
  }
  const SendWr* bad = nullptr;
  Errc e = Errc::kOk;
  if (!t_send.empty()) {
    e = post_then_transmit(u, [&](Device& d) { return d.post_send(qp->h, t_send, &bad); });
  }
  if (e != Errc::kOk) {
    if (bad_wr != nullptr) *bad_wr = nth(wr, static_cast<std::size_t>(bad - t_send.data()));
    return err(e);
  }
  if (unconvertible != nullptr) {
    if (bad_wr != nullptr) *bad_wr = unconvertible;
    return EINVAL;
  }
  return 0;
}

// The conversion grows thread-local vectors: an allocation failure is ENOMEM, not an
// exception unwinding into C.
int op_post_send(ibv_qp* iqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) noexcept {
  try {
    return post_send_impl(iqp, wr, bad_wr);
  } catch (...) {
    if (bad_wr != nullptr) *bad_wr = wr;
    return ENOMEM;
  }
}

// ---- verbs_context ops ----

int vop_query_port(ibv_context* c, std::uint8_t port_num, ibv_port_attr* attr, size_t len);
int vop_query_device_ex(ibv_context* c, const ibv_query_device_ex_input* input,
                        ibv_device_attr_ex* attr, size_t attr_size);

}  // namespace

// RoCE has no service level on the wire (a VLAN's PCP is the closest thing, and uroce sends
// none), so ibv_wc.sl carries nothing for RoCE v2 ... except on mlx5, whose CQE puts a received
// datagram's L3 type where IB puts the SL: 2 for RoCE v2 over IPv4, 1 over IPv6, 0 for a GRH
// (RoCE v1 or IB). Applications rely on it: UCX's UD transport (uct_ud_iface_check_grh,
// UCX_UD_VERBS_ETH_DGID_CHECK, on by default on RoCE) takes the type from `wc.sl & 7` to find
// the destination address in the GRH area, and with 0 it compares 16 bytes where an IPv4
// datagram's area holds padding and the IPv4 header, and drops every datagram. The mapping is
// made here, where the ibv_wc is made, not in the transport: uroce's own completion says what
// the kernel's ib_wc says (network_hdr, as rxe sets network_hdr_type), and the SL-as-L3-type
// convention is how a provider presents it through ibv_wc. Only successful UD receives carry
// a network header type; every other completion keeps the transport's sl (0).
std::uint8_t wc_sl(const Wc& w) {
  if (w.status != WcStatus::kSuccess || (w.wc_flags & kWcGrh) == 0) return w.sl;
  switch (w.network_hdr) {
    case NetworkHdr::kIpv4:
      return 2;
    case NetworkHdr::kIpv6:
      return 1;
    case NetworkHdr::kNone:
      break;
  }
  return w.sl;
}

void to_ibv_wc(const Wc& w, ibv_wc* o) {
  o->wr_id = w.wr_id;
  o->status = static_cast<ibv_wc_status>(w.status);
  o->opcode = static_cast<ibv_wc_opcode>(w.opcode);
  o->vendor_err = w.vendor_err;
  o->byte_len = w.byte_len;
  if ((w.wc_flags & kWcWithInv) != 0) {
    o->invalidated_rkey = w.imm_data;
  } else {
    o->imm_data = htobe32(w.imm_data);
  }
  o->qp_num = w.qp_num;
  o->src_qp = w.src_qp;
  o->wc_flags = w.wc_flags;
  o->pkey_index = w.pkey_index;
  o->slid = w.slid;
  o->sl = wc_sl(w);
  o->dlid_path_bits = w.dlid_path_bits;
}

bool transmit_on_post() {
  static const bool on = std::getenv("UROCE_NO_TX_ON_POST") == nullptr;
  return on;
}

engine::UdpDevice* net(Context* ctx) {
  if (engine::UdpDevice* u = ctx->s->udp.load(std::memory_order_acquire)) return u;
  std::lock_guard lk(ctx->s->mu);
  if (engine::UdpDevice* u = ctx->s->udp.load(std::memory_order_acquire)) return u;
  DeviceConfig cfg = ctx->config;
  cfg.netdev_mtu = 0;  // the interface's, as the query device saw it
  cfg.seed = 0;        // MR keys from the kernel's CSPRNG (UdpDevice::open)
  // The environment, read here (the edge) and passed down: an invalid variable opens nothing.
  auto options = edge::device_options();
  if (!options.ok()) {
    std::fprintf(stderr, "uroce libibverbs: cannot open device %s (%s): %s\n", cfg.name.c_str(),
                 engine::ip_to_string(cfg.ip).c_str(), options.error().c_str());
    errno = ENODEV;
    return nullptr;
  }
  auto r = engine::UdpDevice::open(cfg, wire::kRoceV2Port, "", engine::UdpDevice::Sharing::kDefault,
                                   options.value());
  if (!r.ok()) {
    std::fprintf(stderr, "uroce libibverbs: cannot open device %s (%s): %s\n", cfg.name.c_str(),
                 engine::ip_to_string(cfg.ip).c_str(), r.error().text.c_str());
    // What ibv_open_device's caller can act on: the port held by another program, or no device.
    errno = r.error().code == EADDRINUSE ? EADDRINUSE : ENODEV;
    return nullptr;
  }
  // context->async_fd must stay the file the application got from ibv_open_device: UCX, for
  // one, makes it non-blocking and adds it to an epoll set right away, and an epoll set
  // watches the open file, not the number (replacing the file behind the number, as dup3 onto
  // it would, silently drops it from the set). So the device signals the application's file:
  // its own async fd number is made to name that file, before the progress thread can signal
  // it. The device queues no async event before its first QP, so nothing is lost in between.
  if (::dup3(ctx->async_placeholder, r.value()->async_event_fd(), O_CLOEXEC) < 0) {
    const int e = errno;
    std::fprintf(stderr, "uroce libibverbs: %s: async fd: %s\n", cfg.name.c_str(),
                 std::strerror(e));
    errno = e;
    return nullptr;
  }
  engine::ProgressThreadOptions opts;
  if (const char* spin = std::getenv("UROCE_PROGRESS_SPIN_US")) {
    opts.spin = Duration::us(std::strtoll(spin, nullptr, 10));
  }
  const std::string started = r.value()->start_progress_thread(opts);
  if (!started.empty()) {
    std::fprintf(stderr, "uroce libibverbs: %s: %s\n", cfg.name.c_str(), started.c_str());
    errno = ENOMEM;
    return nullptr;
  }
  ctx->s->owner = std::move(r.value());
  ctx->s->udp.store(ctx->s->owner.get(), std::memory_order_release);
  return ctx->s->owner.get();
}

ibv_cq* create_cq_common(Context* ctx, int cqe, void* cq_context, ibv_comp_channel* channel,
                         int comp_vector, bool ex) {
  if (cqe <= 0 || comp_vector < 0 || comp_vector >= ctx->vctx.context.num_comp_vectors) {
    errno = EINVAL;
    return nullptr;
  }
  engine::UdpDevice* u = net(ctx);
  if (u == nullptr) return nullptr;
  Channel* ch = reinterpret_cast<Channel*>(channel);
  CqInitAttr a;
  a.cqe = static_cast<std::uint32_t>(cqe);
  a.channel = ch != nullptr ? ch->tag : 0;
  a.comp_vector = static_cast<std::uint32_t>(comp_vector);
  auto r = u->lock()->create_cq(a);
  if (!r.ok()) {
    errno = err(r.error());
    return nullptr;
  }
  auto* cq = new Cq();
  std::memset(&cq->ibv, 0, sizeof cq->ibv);
  cq->ibv.context = &ctx->vctx.context;
  cq->ibv.channel = channel;
  cq->ibv.cq_context = cq_context;
  cq->ibv.handle = r.value().handle.index;
  cq->ibv.cqe = static_cast<int>(r.value().cqe);
  init_sync(&cq->ibv.mutex, &cq->ibv.cond);
  cq->h = r.value().handle;
  cq->ctx = ctx;
  cq->channel = ch;
  if (ex) init_cq_ex_ops(cq);
  std::lock_guard lk(ctx->s->mu);
  if (ch != nullptr) ++ch->ibv.refcnt;
  ctx->s->cqs[key(cq->h)] = cq;
  return ibv_cq_ex_to_cq(&cq->ibv);
}

ibv_qp* create_qp_common(Context* ctx, ibv_pd* pd, const ibv_qp_init_attr& attr, bool ex,
                         std::uint64_t send_ops, ibv_qp_cap* cap_out, ibv_xrcd* xrcd) {
  // An XRC target has only its domain (no PD, CQs or SRQ); an initiator no receive side.
  const bool target = attr.qp_type == IBV_QPT_XRC_RECV;
  const bool initiator = attr.qp_type == IBV_QPT_XRC_SEND;
  if (target
          ? xrcd == nullptr
          : pd == nullptr || attr.send_cq == nullptr || (attr.recv_cq == nullptr && !initiator)) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr.qp_type != IBV_QPT_RC && attr.qp_type != IBV_QPT_UC && attr.qp_type != IBV_QPT_UD &&
      !target && !initiator) {
    errno = EOPNOTSUPP;  // raw packet, driver QPs
    return nullptr;
  }
  engine::UdpDevice* u = net(ctx);
  if (u == nullptr) return nullptr;
  QpInitAttr i;
  i.qp_type = static_cast<QpType>(static_cast<std::uint8_t>(attr.qp_type));
  if (attr.send_cq != nullptr && !target) i.send_cq = cq_of(attr.send_cq)->h;
  if (attr.recv_cq != nullptr && !target && !initiator) i.recv_cq = cq_of(attr.recv_cq)->h;
  if (attr.srq != nullptr && !target && !initiator) i.srq = srq_of(attr.srq)->h;
  if (target) i.xrcd = xrcd_handle(xrcd);
  i.cap = target ? QpCap{} : to_cap(attr.cap);
  i.sq_sig_all = attr.sq_sig_all != 0;
  auto r = u->lock()->create_qp(target ? PdHandle{} : pd_of(pd)->h, i);
  if (!r.ok()) {
    errno = err(r.error());
    return nullptr;
  }
  if (cap_out != nullptr) to_ibv_cap(r.value().cap, cap_out);
  ibv_qp b{};
  b.context = &ctx->vctx.context;
  b.qp_context = attr.qp_context;
  b.pd = target ? nullptr : pd;
  b.send_cq = target ? nullptr : attr.send_cq;
  b.recv_cq = target || initiator ? nullptr : attr.recv_cq;
  b.srq = target || initiator ? nullptr : attr.srq;
  b.qp_num = r.value().qp_num;
  b.state = IBV_QPS_RESET;
  b.qp_type = attr.qp_type;
  return &new_qp(ctx, b, r.value().handle, ex, send_ops)->ibv.qp_base;
}

Qp* new_qp(Context* ctx, const ibv_qp& base, QpHandle h, bool ex, std::uint64_t send_ops) {
  auto* qp = new Qp();
  std::memset(&qp->ibv, 0, sizeof qp->ibv);
  ibv_qp& b = qp->ibv.qp_base;
  b = base;
  b.handle = h.index;
  init_sync(&b.mutex, &b.cond);
  qp->h = h;
  qp->type = static_cast<QpType>(static_cast<std::uint8_t>(base.qp_type));
  qp->ex = ex;
  qp->send_ops = send_ops;
  if (ex) init_qp_ex_ops(qp);
  std::lock_guard lk(ctx->s->mu);
  ctx->s->qps[key(qp->h)] = qp;
  return qp;
}

namespace {

int vop_query_port(ibv_context* c, std::uint8_t port_num, ibv_port_attr* attr, size_t len) {
  auto r = ctx_of(c)->query_dev->query_port(port_num);
  if (!r.ok()) return err(r.error());
  ibv_port_attr full;
  to_ibv_port_attr(r.value(), &full);
  mark_down_if_not_local(ctx_of(c), &full);
  std::memcpy(attr, &full, std::min(len, sizeof full));
  return 0;
}

int vop_query_device_ex(ibv_context* c, const ibv_query_device_ex_input* input,
                        ibv_device_attr_ex* attr, size_t attr_size) {
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
  ibv_device_attr_ex full;
  std::memset(&full, 0, sizeof full);
  const DeviceAttr& a = ctx_of(c)->query_dev->query_device();
  to_ibv_device_attr(a, &full.orig_attr);
  full.device_cap_flags_ex = a.device_cap_flags | a.device_cap_flags_ex;
  full.odp_caps.general_caps = a.odp.general_caps;
  full.odp_caps.per_transport_caps.rc_odp_caps = a.odp.rc_odp_caps;
  full.odp_caps.per_transport_caps.uc_odp_caps = a.odp.uc_odp_caps;
  full.odp_caps.per_transport_caps.ud_odp_caps = a.odp.ud_odp_caps;
  full.xrc_odp_caps = a.odp.xrc_odp_caps;
  full.phys_port_cnt_ex = a.phys_port_cnt;
  std::memcpy(attr, &full, std::min(attr_size, sizeof full));
  return 0;
}

// ---- async events ----

bool fill_async_event(Context* ctx, const AsyncEvent& e, ibv_async_event* out) {
  out->event_type = static_cast<ibv_event_type>(e.type);
  std::lock_guard lk(ctx->s->mu);
  switch (e.type) {
    case AsyncEventType::kCqErr: {
      auto it = ctx->s->cqs.find(key(e.cq));
      if (it == ctx->s->cqs.end()) return false;
      out->element.cq = ibv_cq_ex_to_cq(&it->second->ibv);
      note_reported(&it->second->ibv.mutex, &it->second->async_events_reported);
      return true;
    }
    case AsyncEventType::kSrqErr:
    case AsyncEventType::kSrqLimitReached: {
      auto it = ctx->s->srqs.find(key(e.srq));
      if (it == ctx->s->srqs.end()) return false;
      out->element.srq = &it->second->ibv;
      note_reported(&it->second->ibv.mutex, &it->second->events_reported);
      return true;
    }
    case AsyncEventType::kQpFatal:
    case AsyncEventType::kQpReqErr:
    case AsyncEventType::kQpAccessErr:
    case AsyncEventType::kCommEst:
    case AsyncEventType::kSqDrained:
    case AsyncEventType::kPathMig:
    case AsyncEventType::kPathMigErr:
    case AsyncEventType::kQpLastWqeReached: {
      auto it = ctx->s->qps.find(key(e.qp));
      if (it == ctx->s->qps.end()) return false;
      out->element.qp = &it->second->ibv.qp_base;
      note_reported(&it->second->ibv.qp_base.mutex, &it->second->events_reported);
      return true;
    }
    case AsyncEventType::kDeviceFatal:
      out->element.port_num = 0;
      return true;
    default:
      out->element.port_num = e.port;
      return true;
  }
}

}  // namespace
}  // namespace uroce::compat

using namespace uroce;
using namespace uroce::compat;

// ===================================================================== devices

UROCE_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
  return guarded<ibv_device**>(nullptr, [&]() -> ibv_device** {
    DeviceList& l = device_list();
    if (!l.error.empty()) {
      std::fprintf(stderr, "uroce libibverbs: %s\n", l.error.c_str());
      if (num_devices != nullptr) *num_devices = 0;
      errno = EINVAL;
      return nullptr;
    }
    auto** arr = static_cast<ibv_device**>(std::calloc(l.devices.size() + 1, sizeof(ibv_device*)));
    if (arr == nullptr) {
      errno = ENOMEM;
      return nullptr;
    }
    for (std::size_t i = 0; i < l.devices.size(); ++i) arr[i] = &l.devices[i]->dev;
    if (num_devices != nullptr) *num_devices = static_cast<int>(l.devices.size());
    return arr;
  });
}

UROCE_EXPORT void ibv_free_device_list(ibv_device** list) { std::free(list); }

UROCE_EXPORT const char* ibv_get_device_name(ibv_device* device) {
  return device != nullptr ? device->name : nullptr;
}

UROCE_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
  CompatDevice* d = find_device(device);
  if (d == nullptr) return 0;
  return htobe64(verbs::node_guid_from_ip(d->spec.ip));
}

UROCE_EXPORT int ibv_get_device_index(ibv_device* device) {
  CompatDevice* d = find_device(device);
  return d != nullptr ? d->index : -1;
}

namespace uroce::compat {
namespace {

// ---- command files (context->cmd_fd) and what they name ----

// Each ibv_open_device makes a command file, a memfd that holds this marker and the pid, and
// registers its identity (device and inode numbers, which every dup of the file shares) with
// the state the context shares. ibv_import_device finds the state from any dup.
constexpr char kCmdMarker[] = "uroce-cmd ";

struct CmdFiles {
  std::mutex mu;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::weak_ptr<SharedState>> by_id;
};
CmdFiles& cmd_files() {
  static auto* f = new CmdFiles();  // never freed: contexts may close during exit
  return *f;
}

int make_cmd_file() {
  const int fd = ::memfd_create("uroce-cmd", MFD_CLOEXEC);
  if (fd < 0) return -1;
  char text[64];
  const int n =
      std::snprintf(text, sizeof text, "%s%d\n", kCmdMarker, static_cast<int>(::getpid()));
  if (::write(fd, text, static_cast<std::size_t>(n)) != n) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

bool is_cmd_file(int fd) {
  char head[sizeof kCmdMarker - 1];
  return ::pread(fd, head, sizeof head, 0) == static_cast<ssize_t>(sizeof head) &&
         std::memcmp(head, kCmdMarker, sizeof head) == 0;
}

// A context of device `d` without its shared state and files: the part every context has.
std::unique_ptr<Context> make_context(CompatDevice* d, ibv_device* device) {
  auto ctx = std::make_unique<Context>();
  std::memset(&ctx->vctx, 0, sizeof ctx->vctx);
  ctx->dev = d;
  ctx->config.name = d->spec.name;
  ctx->config.ip = d->spec.ip;
  // The port MTU follows the interface's, as the networked device will see it; an address
  // that is on no interface (yet) reads as Ethernet's 1500 until then.
  auto mtu = datapath::interface_mtu(d->spec.ip);
  ctx->config.netdev_mtu = seal::roce_share_of_mtu(
      mtu.ok() ? mtu.value() : 1500, d->spec.seal ? d->spec.seal->mode : seal::Mode::kOff);
  ctx->address_local = mtu.ok();
  ctx->config.link_speed_mbps = datapath::interface_speed_mbps(d->spec.ip);
  // Applications pass their CPU as comp_vector (UCX does); uroce accepts any below this.
  ctx->config.num_comp_vectors = engine::host_num_comp_vectors();
  ctx->config.seed = 0;  // (its keys are the networked device's)
  ctx->ifindex = interface_index(d->spec.ip);
  auto qd = Device::create(ctx->config);
  if (!qd.ok()) {
    std::fprintf(stderr, "uroce libibverbs: device %s: invalid configuration (%s)\n",
                 d->spec.name.c_str(), errc_name(qd.error()));
    errno = EINVAL;
    return nullptr;
  }
  ctx->query_dev = std::move(qd.value());

  verbs_context& v = ctx->vctx;
  v.sz = sizeof(verbs_context);
  v.query_port = vop_query_port;
  v.query_device_ex = vop_query_device_ex;
  v.create_cq_ex = create_cq_ex;
  v.create_qp_ex = create_qp_ex;
  v.open_xrcd = vop_open_xrcd;
  v.close_xrcd = vop_close_xrcd;
  v.create_srq_ex = vop_create_srq_ex;
  v.get_srq_num = vop_get_srq_num;
  v.open_qp = vop_open_qp;
  v.advise_mr = vop_advise_mr;
  ibv_context& c = v.context;
  c.device = device;
  c.cmd_fd = -1;
  c.async_fd = -1;
  c.num_comp_vectors = static_cast<int>(ctx->config.num_comp_vectors);
  pthread_mutex_init(&c.mutex, nullptr);
  c.abi_compat = __VERBS_ABI_IS_EXTENDED;
  c.ops.poll_cq = op_poll_cq;
  c.ops.req_notify_cq = op_req_notify_cq;
  c.ops.post_send = op_post_send;
  c.ops.post_recv = op_post_recv;
  c.ops.post_srq_recv = op_post_srq_recv;
  c.ops.alloc_mw = op_alloc_mw;
  c.ops.bind_mw = op_bind_mw;
  c.ops.dealloc_mw = op_dealloc_mw;
  return ctx;
}

void free_context(Context* ctx) {
  ibv_context& c = ctx->vctx.context;
  ctx->s.reset();  // the last context sharing the state closes the networked device
  if (c.cmd_fd >= 0) ::close(c.cmd_fd);
  if (ctx->async_placeholder >= 0) ::close(ctx->async_placeholder);
  pthread_mutex_destroy(&c.mutex);
  delete ctx;
}

}  // namespace

SharedState::~SharedState() {
  if (owner) {
    owner->close();
    owner.reset();
  }
  if (async_file >= 0) ::close(async_file);
  CmdFiles& f = cmd_files();
  std::lock_guard lk(f.mu);
  auto it = f.by_id.find({file_dev, file_ino});
  if (it != f.by_id.end() && it->second.expired()) f.by_id.erase(it);
}

}  // namespace uroce::compat

UROCE_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  return guarded<ibv_context*>(nullptr, [&]() -> ibv_context* {
    CompatDevice* d = find_device(device);
    if (d == nullptr) {
      errno = ENODEV;
      return nullptr;
    }
    std::unique_ptr<Context> ctx = make_context(d, device);
    if (ctx == nullptr) return nullptr;
    ibv_context& c = ctx->vctx.context;
    auto s = std::make_shared<SharedState>();
    s->dev = d;
    s->pid = static_cast<int>(::getpid());
    s->async_file = ::eventfd(0, EFD_CLOEXEC);
    if (s->async_file >= 0) {
      ctx->async_placeholder = ::fcntl(s->async_file, F_DUPFD_CLOEXEC, 0);
    }
    c.cmd_fd = ctx->async_placeholder >= 0 ? make_cmd_file() : -1;
    struct stat st {};
    if (c.cmd_fd < 0 || ::fstat(c.cmd_fd, &st) != 0) {
      const int e = errno;
      ctx->s = std::move(s);
      free_context(ctx.release());
      errno = e;
      return nullptr;
    }
    s->file_dev = st.st_dev;
    s->file_ino = st.st_ino;
    {
      CmdFiles& f = cmd_files();
      std::lock_guard lk(f.mu);
      f.by_id[{s->file_dev, s->file_ino}] = s;
    }
    ctx->s = std::move(s);
    c.async_fd = ctx->async_placeholder;
    return &ctx.release()->vctx.context;
  });
}

// rdma-core's ibv_import_device: a context on the command file `cmd_fd` (a dup of a context's
// cmd_fd) that shares that context's objects; it owns cmd_fd (ibv_close_device closes it).
// uroce's objects live in the process: a command file of another process (SCM_RIGHTS, or a
// context that fork copied) is EOPNOTSUPP, as is one whose contexts were all closed; a file
// that is no command file is EINVAL, as rdma-core answers for what is no uverbs device.
UROCE_EXPORT ibv_context* ibv_import_device(int cmd_fd) {
  return guarded<ibv_context*>(nullptr, [&]() -> ibv_context* {
    struct stat st {};
    if (::fstat(cmd_fd, &st) != 0) {
      errno = EINVAL;
      return nullptr;
    }
    std::shared_ptr<SharedState> s;
    {
      CmdFiles& f = cmd_files();
      std::lock_guard lk(f.mu);
      auto it = f.by_id.find({st.st_dev, st.st_ino});
      if (it != f.by_id.end()) s = it->second.lock();
    }
    if (s == nullptr || s->pid != static_cast<int>(::getpid())) {
      errno = is_cmd_file(cmd_fd) ? EOPNOTSUPP : EINVAL;
      return nullptr;
    }
    std::unique_ptr<Context> ctx = make_context(s->dev, &s->dev->dev);
    if (ctx == nullptr) return nullptr;
    ctx->async_placeholder = ::fcntl(s->async_file, F_DUPFD_CLOEXEC, 0);
    if (ctx->async_placeholder < 0) {
      const int e = errno;
      free_context(ctx.release());
      errno = e;
      return nullptr;
    }
    ctx->s = std::move(s);
    ibv_context& c = ctx->vctx.context;
    c.async_fd = ctx->async_placeholder;
    c.cmd_fd = cmd_fd;
    return &ctx.release()->vctx.context;
  });
}

UROCE_EXPORT int ibv_close_device(ibv_context* context) {
  if (context == nullptr) return EINVAL;
  free_context(ctx_of(context));
  return 0;
}

// ===================================================================== queries

UROCE_EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  to_ibv_device_attr(ctx_of(context)->query_dev->query_device(), attr);
  return 0;
}

// The exported ibv_query_port takes the pre-1.4 struct (fields up to `flags`); the header's
// inline ibv_query_port calls verbs_context::query_port instead.
UROCE_EXPORT int ibv_query_port(ibv_context* context, uint8_t port_num,
                                struct _compat_ibv_port_attr* port_attr) {
  auto r = ctx_of(context)->query_dev->query_port(port_num);
  if (!r.ok()) {
    errno = err(r.error());
    return err(r.error());
  }
  ibv_port_attr full;
  to_ibv_port_attr(r.value(), &full);
  mark_down_if_not_local(ctx_of(context), &full);
  std::memcpy(static_cast<void*>(port_attr), &full, offsetof(ibv_port_attr, port_cap_flags2));
  return 0;
}

UROCE_EXPORT int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  if (index < 0) {
    errno = EINVAL;
    return -1;
  }
  auto r = ctx_of(context)->query_dev->query_gid(port_num, static_cast<std::uint32_t>(index));
  if (!r.ok()) {
    errno = err(r.error());
    return -1;
  }
  to_ibv_gid(r.value(), gid);
  return 0;
}

UROCE_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                                   ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  if (flags != 0 || port_num > 255) return EINVAL;
  if (entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  auto r =
      ctx_of(context)->query_dev->query_gid_entry(static_cast<std::uint8_t>(port_num), gid_index);
  if (!r.ok()) return r.error() == Errc::kNoEntry ? ENODATA : err(r.error());
  std::memset(entry, 0, sizeof *entry);
  to_ibv_gid(r.value().gid, &entry->gid);
  entry->gid_index = gid_index;
  entry->port_num = port_num;
  entry->gid_type = static_cast<std::uint32_t>(r.value().type);
  entry->ndev_ifindex = ctx_of(context)->ifindex;
  return 0;
}

UROCE_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries,
                                          size_t max_entries, uint32_t flags, size_t entry_size) {
  if (flags != 0 || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  Device& d = *ctx_of(context)->query_dev;
  std::size_t n = 0;
  for (std::uint8_t port = 1; port <= d.query_device().phys_port_cnt; ++port) {
    auto pa = d.query_port(port);
    if (!pa.ok()) continue;
    for (std::uint32_t i = 0; i < pa.value().gid_tbl_len; ++i) {
      auto r = d.query_gid_entry(port, i);
      if (!r.ok()) continue;
      if (n == max_entries) return -EINVAL;  // the table does not fit
      auto* e = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<char*>(entries) + n * entry_size);
      std::memset(e, 0, entry_size);
      to_ibv_gid(r.value().gid, &e->gid);
      e->gid_index = i;
      e->port_num = port;
      e->gid_type = static_cast<std::uint32_t>(r.value().type);
      e->ndev_ifindex = ctx_of(context)->ifindex;
      ++n;
    }
  }
  return static_cast<ssize_t>(n);
}

// IBVERBS_PRIVATE_34 (ibv_devinfo): enum ibv_gid_type_sysfs { IB_ROCE_V1 = 0, ROCE_V2 = 1 }.
UROCE_EXPORT int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index,
                                    int* type) {
  auto r = ctx_of(context)->query_dev->query_gid_entry(port_num, index);
  if (!r.ok()) {
    errno = r.error() == Errc::kNoEntry ? ENODATA : err(r.error());
    return -1;
  }
  *type = r.value().type == GidType::kRoceV2 ? 1 : 0;
  return 0;
}

UROCE_EXPORT int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  if (index < 0) {
    errno = EINVAL;
    return -1;
  }
  auto r = ctx_of(context)->query_dev->query_pkey(port_num, static_cast<std::uint32_t>(index));
  if (!r.ok()) {
    errno = err(r.error());
    return -1;
  }
  *pkey = htobe16(r.value());
  return 0;
}

UROCE_EXPORT int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
  Device& d = *ctx_of(context)->query_dev;
  auto pa = d.query_port(port_num);
  if (!pa.ok()) {
    errno = err(pa.error());
    return -1;
  }
  for (std::uint32_t i = 0; i < pa.value().pkey_tbl_len; ++i) {
    auto r = d.query_pkey(port_num, i);
    if (r.ok() && htobe16(r.value()) == pkey) return static_cast<int>(i);
  }
  errno = ENOENT;
  return -1;
}

// ===================================================================== PD, MR

UROCE_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
  return guarded<ibv_pd*>(nullptr, [&]() -> ibv_pd* {
    engine::UdpDevice* u = net(ctx_of(context));
    if (u == nullptr) return nullptr;
    auto r = u->lock()->alloc_pd();
    if (!r.ok()) {
      errno = err(r.error());
      return nullptr;
    }
    auto* p = new Pd();
    p->ibv.context = context;
    p->ibv.handle = r.value().index;
    p->h = r.value();
    SharedState& s = *ctx_of(context)->s;
    std::lock_guard lk(s.mu);
    s.pds[p->h.index] = p->h;
    return &p->ibv;
  });
}

UROCE_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  SharedState& s = *ctx_of(pd->context)->s;
  const Errc e = s.udp.load()->lock()->dealloc_pd(pd_of(pd)->h);
  if (e != Errc::kOk) return err(e);
  {
    std::lock_guard lk(s.mu);
    auto it = s.pds.find(pd_of(pd)->h.index);
    if (it != s.pds.end() && it->second == pd_of(pd)->h) s.pds.erase(it);
  }
  delete pd_of(pd);
  return 0;
}

// rdma-core's ibv_import_pd: the PD whose ibv_pd.handle is `pd_handle`, allocated through any
// context sharing `context`'s objects. ENOENT for a handle that names no live PD, as the
// kernel's object lookup. ibv_dealloc_pd of an imported PD destroys the PD for every holder;
// ibv_unimport_pd frees only this process's object.
UROCE_EXPORT ibv_pd* ibv_import_pd(ibv_context* context, uint32_t pd_handle) {
  return guarded<ibv_pd*>(nullptr, [&]() -> ibv_pd* {
    if (context == nullptr) {
      errno = EINVAL;
      return nullptr;
    }
    SharedState& s = *ctx_of(context)->s;
    PdHandle h;
    {
      std::lock_guard lk(s.mu);
      auto it = s.pds.find(pd_handle);
      if (it == s.pds.end()) {
        errno = ENOENT;
        return nullptr;
      }
      h = it->second;
    }
    auto* p = new Pd();
    p->ibv.context = context;
    p->ibv.handle = pd_handle;
    p->h = h;
    return &p->ibv;
  });
}

UROCE_EXPORT void ibv_unimport_pd(ibv_pd* pd) { delete pd_of(pd); }

namespace {

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, std::optional<std::uint64_t> iova,
               unsigned access) {
  return guarded<ibv_mr*>(nullptr, [&]() -> ibv_mr* {
    if (pd == nullptr) {
      errno = EINVAL;
      return nullptr;
    }
    engine::UdpDevice* u = ctx_of(pd->context)->s->udp.load();
    auto r = iova ? u->lock()->reg_mr_iova(pd_of(pd)->h, addr, length, *iova, access)
                  : u->lock()->reg_mr(pd_of(pd)->h, addr, length, access);
    if (!r.ok()) {
      errno = err(r.error());
      return nullptr;
    }
    auto* m = new Mr();
    m->ibv.context = pd->context;
    m->ibv.pd = pd;
    m->ibv.addr = addr;
    m->ibv.length = length;
    m->ibv.handle = r.value().handle.index;
    m->ibv.lkey = r.value().lkey;
    m->ibv.rkey = r.value().rkey;
    m->h = r.value().handle;
    SharedState& s = *ctx_of(pd->context)->s;
    std::lock_guard lk(s.mu);
    s.mrs[m->h.index] = SharedState::MrEntry{m->h, m->ibv.lkey, m->ibv.rkey, length};
    return &m->ibv;
  });
}

// Forgets MR `h` (deregistered) in ibv_import_mr's table.
void forget_mr(SharedState& s, MrHandle h) {
  std::lock_guard lk(s.mu);
  auto it = s.mrs.find(h.index);
  if (it != s.mrs.end() && it->second.h == h) s.mrs.erase(it);
}

}  // namespace

UROCE_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return reg_mr(pd, addr, length, std::nullopt, static_cast<unsigned>(access));
}

UROCE_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                     int access) {
  return reg_mr(pd, addr, length, iova, static_cast<unsigned>(access));
}

UROCE_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                      unsigned int access) {
  if (iova == reinterpret_cast<std::uintptr_t>(addr)) {
    return reg_mr(pd, addr, length, std::nullopt, access);
  }
  return reg_mr(pd, addr, length, iova, access);
}

UROCE_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  SharedState& s = *ctx_of(mr->context)->s;
  const Errc e = s.udp.load()->lock()->dereg_mr(mr_of(mr)->h);
  if (e != Errc::kOk) return err(e);
  forget_mr(s, mr_of(mr)->h);
  delete mr_of(mr);
  return 0;
}

// rdma-core's ibv_import_mr: the MR whose ibv_mr.handle is `mr_handle`, registered through any
// context sharing `pd`'s context's objects, with its keys and length and a null addr (as
// rdma-core's: the address is the registering process's business). ENOENT for a handle that
// names no live MR. ibv_dereg_mr deregisters it for every holder, ibv_unimport_mr frees only
// this object.
UROCE_EXPORT ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t mr_handle) {
  return guarded<ibv_mr*>(nullptr, [&]() -> ibv_mr* {
    if (pd == nullptr) {
      errno = EINVAL;
      return nullptr;
    }
    SharedState& s = *ctx_of(pd->context)->s;
    SharedState::MrEntry e;
    {
      std::lock_guard lk(s.mu);
      auto it = s.mrs.find(mr_handle);
      if (it == s.mrs.end()) {
        errno = ENOENT;
        return nullptr;
      }
      e = it->second;
    }
    auto* m = new Mr();
    m->ibv.context = pd->context;
    m->ibv.pd = pd;
    m->ibv.addr = nullptr;
    m->ibv.length = e.length;
    m->ibv.handle = mr_handle;
    m->ibv.lkey = e.lkey;
    m->ibv.rkey = e.rkey;
    m->h = e.h;
    return &m->ibv;
  });
}

UROCE_EXPORT void ibv_unimport_mr(ibv_mr* mr) { delete mr_of(mr); }

// rdma-core's ibv_rereg_mr: its own input checks (ERR_INPUT), then the provider's command
// (ERR_CMD with errno); on success it updates pd, addr and length, the provider the keys.
static_assert(IBV_REREG_MR_CHANGE_TRANSLATION == kReregTranslation &&
              IBV_REREG_MR_CHANGE_PD == kReregPd && IBV_REREG_MR_CHANGE_ACCESS == kReregAccess);
UROCE_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length,
                              int access) {
  if (mr == nullptr || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) != 0 ||
      ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0 && (length == 0 || addr == nullptr)) ||
      (access != 0 && (flags & IBV_REREG_MR_CHANGE_ACCESS) == 0)) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  return guarded<int>(IBV_REREG_MR_ERR_CMD, [&]() -> int {
    const bool new_pd = (flags & IBV_REREG_MR_CHANGE_PD) != 0;
    if (new_pd && (pd == nullptr || ctx_of(pd->context)->s != ctx_of(mr->context)->s)) {
      errno = EINVAL;
      return IBV_REREG_MR_ERR_CMD;
    }
    engine::UdpDevice* u = ctx_of(mr->context)->s->udp.load();
    auto r = u->lock()->rereg_mr(mr_of(mr)->h, static_cast<std::uint32_t>(flags),
                                 new_pd ? pd_of(pd)->h : PdHandle{}, addr, length,
                                 static_cast<std::uint32_t>(access));
    if (!r.ok()) {
      errno = err(r.error());
      return IBV_REREG_MR_ERR_CMD;
    }
    if (new_pd) mr->pd = pd;
    if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0) {
      mr->addr = addr;
      mr->length = length;
    }
    mr->lkey = r.value().lkey;
    mr->rkey = r.value().rkey;
    SharedState& s = *ctx_of(mr->context)->s;
    std::lock_guard lk(s.mu);
    auto it = s.mrs.find(mr_of(mr)->h.index);
    if (it != s.mrs.end() && it->second.h == mr_of(mr)->h) {
      it->second.lkey = mr->lkey;
      it->second.rkey = mr->rkey;
      it->second.length = mr->length;
    }
    return 0;
  });
}

// ===================================================================== completion channels, CQs

UROCE_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  return guarded<ibv_comp_channel*>(nullptr, [&]() -> ibv_comp_channel* {
    Context* ctx = ctx_of(context);
    engine::UdpDevice* u = net(ctx);
    if (u == nullptr) return nullptr;
    auto r = u->create_comp_channel();
    if (!r.ok()) {
      errno = err(r.error());
      return nullptr;
    }
    auto* ch = new Channel();
    ch->ibv.context = context;
    ch->ibv.fd = u->comp_channel_fd(r.value());
    make_blocking(ch->ibv.fd);
    ch->ibv.refcnt = 0;
    ch->tag = r.value();
    ch->ctx = ctx;
    return &ch->ibv;
  });
}

UROCE_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  auto* ch = reinterpret_cast<Channel*>(channel);
  {
    std::lock_guard lk(ch->ctx->s->mu);
    if (ch->ibv.refcnt != 0) return EBUSY;
  }
  const Errc e = ch->ctx->s->udp.load()->destroy_comp_channel(ch->tag);
  if (e != Errc::kOk) return err(e);
  delete ch;
  return 0;
}

UROCE_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                                   ibv_comp_channel* channel, int comp_vector) {
  return guarded<ibv_cq*>(nullptr, [&] {
    return create_cq_common(ctx_of(context), cqe, cq_context, channel, comp_vector, false);
  });
}

// rdma-core's ibv_resize_cq returns the provider's errno and leaves cq->cqe at the new size.
UROCE_EXPORT int ibv_resize_cq(ibv_cq* icq, int cqe) {
  if (icq == nullptr || cqe <= 0) return EINVAL;
  Cq* cq = cq_of(icq);
  auto r = cq->ctx->s->udp.load()->lock()->resize_cq(cq->h, static_cast<std::uint32_t>(cqe));
  if (!r.ok()) return err(r.error());
  icq->cqe = static_cast<int>(r.value());
  return 0;
}

UROCE_EXPORT int ibv_destroy_cq(ibv_cq* icq) {
  Cq* cq = cq_of(icq);
  Context* ctx = cq->ctx;
  const Errc e = ctx->s->udp.load()->lock()->destroy_cq(cq->h);
  if (e != Errc::kOk) return err(e);
  {
    std::lock_guard lk(ctx->s->mu);
    ctx->s->cqs.erase(key(cq->h));
    if (cq->channel != nullptr) --cq->channel->ibv.refcnt;
  }
  wait_acked(&cq->ibv.mutex, &cq->ibv.cond, &cq->comp_events_reported,
             &cq->ibv.comp_events_completed);
  wait_acked(&cq->ibv.mutex, &cq->ibv.cond, &cq->async_events_reported,
             &cq->ibv.async_events_completed);
  destroy_sync(&cq->ibv.mutex, &cq->ibv.cond);
  delete cq;
  return 0;
}

UROCE_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  auto* ch = reinterpret_cast<Channel*>(channel);
  engine::UdpDevice* u = ch->ctx->s->udp.load();
  for (;;) {
    const bool nonblocking = is_nonblocking(ch->ibv.fd);
    auto r = u->get_cq_event(ch->tag, nonblocking ? Duration::zero() : Duration::infinite());
    if (!r.ok()) {
      errno = err(r.error());
      return -1;
    }
    if (!r.value()) {  // nothing waiting on a non-blocking channel, or the device closed
      errno = nonblocking ? EAGAIN : EIO;
      return -1;
    }
    std::lock_guard lk(ch->ctx->s->mu);
    auto it = ch->ctx->s->cqs.find(key(*r.value()));
    if (it == ch->ctx->s->cqs.end()) {
      u->ack_cq_events(ch->tag, *r.value(), 1);  // a CQ destroyed since: nobody to tell
      continue;
    }
    *cq = ibv_cq_ex_to_cq(&it->second->ibv);
    if (cq_context != nullptr) *cq_context = it->second->ibv.cq_context;
    note_reported(&it->second->ibv.mutex, &it->second->comp_events_reported);
    return 0;
  }
}

UROCE_EXPORT void ibv_ack_cq_events(ibv_cq* icq, unsigned int nevents) {
  Cq* cq = cq_of(icq);
  if (cq->channel == nullptr || nevents == 0) return;
  cq->ctx->s->udp.load()->ack_cq_events(cq->channel->tag, cq->h, nevents);
  pthread_mutex_lock(&cq->ibv.mutex);
  cq->ibv.comp_events_completed += nevents;
  pthread_cond_broadcast(&cq->ibv.cond);
  pthread_mutex_unlock(&cq->ibv.mutex);
}

// ===================================================================== async events

UROCE_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  Context* ctx = ctx_of(context);
  for (;;) {
    const bool nonblocking = is_nonblocking(ctx->async_placeholder);
    engine::UdpDevice* u = ctx->s->udp.load(std::memory_order_acquire);
    if (u == nullptr) {
      if (nonblocking) {
        errno = EAGAIN;
        return -1;
      }
      // Nothing can happen before the first resource: wait for the device to appear.
      pollfd p{ctx->async_placeholder, POLLIN, 0};
      ::poll(&p, 1, 100);
      continue;
    }
    std::optional<AsyncEvent> e =
        u->get_async_event(nonblocking ? Duration::zero() : Duration::infinite());
    if (!e) {  // nothing waiting on a non-blocking fd, or the device closed
      errno = nonblocking ? EAGAIN : EIO;
      return -1;
    }
    if (fill_async_event(ctx, *e, event)) return 0;
  }
}

UROCE_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
  pthread_mutex_t* m = nullptr;
  pthread_cond_t* c = nullptr;
  std::uint32_t* counter = nullptr;
  switch (event->event_type) {
    case IBV_EVENT_CQ_ERR: {
      ibv_cq* cq = event->element.cq;
      m = &cq->mutex;
      c = &cq->cond;
      counter = &cq->async_events_completed;
      break;
    }
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: {
      ibv_qp* qp = event->element.qp;
      m = &qp->mutex;
      c = &qp->cond;
      counter = &qp->events_completed;
      break;
    }
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: {
      ibv_srq* srq = event->element.srq;
      m = &srq->mutex;
      c = &srq->cond;
      counter = &srq->events_completed;
      break;
    }
    default:
      return;
  }
  pthread_mutex_lock(m);
  ++*counter;
  pthread_cond_broadcast(c);
  pthread_mutex_unlock(m);
}

// ===================================================================== SRQ

UROCE_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  return guarded<ibv_srq*>(nullptr, [&]() -> ibv_srq* {
    if (pd == nullptr || attr == nullptr) {
      errno = EINVAL;
      return nullptr;
    }
    Context* ctx = ctx_of(pd->context);
    engine::UdpDevice* u = ctx->s->udp.load();
    SrqAttr a{attr->attr.max_wr, attr->attr.max_sge, attr->attr.srq_limit};
    auto r = u->lock()->create_srq(pd_of(pd)->h, a);
    if (!r.ok()) {
      errno = err(r.error());
      return nullptr;
    }
    attr->attr.max_wr = r.value().attr.max_wr;
    attr->attr.max_sge = r.value().attr.max_sge;
    return new_srq(ctx, pd, attr->srq_context, r.value());
  });
}

ibv_srq* uroce::compat::new_srq(Context* ctx, ibv_pd* pd, void* srq_context, const SrqInfo& info) {
  auto* s = new Srq();
  std::memset(&s->ibv, 0, sizeof s->ibv);
  s->ibv.context = pd->context;
  s->ibv.srq_context = srq_context;
  s->ibv.pd = pd;
  s->ibv.handle = info.handle.index;
  init_sync(&s->ibv.mutex, &s->ibv.cond);
  s->h = info.handle;
  s->srq_num = info.srq_num;
  std::lock_guard lk(ctx->s->mu);
  ctx->s->srqs[key(s->h)] = s;
  return &s->ibv;
}

UROCE_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  SrqAttr a{attr->max_wr, attr->max_sge, attr->srq_limit};
  return err(ctx_of(srq->context)
                 ->s->udp.load()
                 ->lock()
                 ->modify_srq(srq_of(srq)->h, a, static_cast<std::uint32_t>(mask)));
}

UROCE_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  auto r = ctx_of(srq->context)->s->udp.load()->lock()->query_srq(srq_of(srq)->h);
  if (!r.ok()) return err(r.error());
  attr->max_wr = r.value().max_wr;
  attr->max_sge = r.value().max_sge;
  attr->srq_limit = r.value().srq_limit;
  return 0;
}

namespace {

// The end of ibv_destroy_srq and ibv_destroy_qp, `e` the device's answer: once destroyed, the
// object leaves the context's table, every event reported of it is acknowledged (libibverbs
// waits so too) and it is freed. `ibv`: its ibv_srq or ibv_qp (mutex, cond, events_completed).
template <typename Obj, typename Ibv>
int release_destroyed(Errc e, Context* ctx, std::unordered_map<std::uint64_t, Obj*>& table,
                      Obj* obj, Ibv* ibv) {
  if (e != Errc::kOk) return err(e);
  {
    std::lock_guard lk(ctx->s->mu);
    table.erase(key(obj->h));
  }
  wait_acked(&ibv->mutex, &ibv->cond, &obj->events_reported, &ibv->events_completed);
  destroy_sync(&ibv->mutex, &ibv->cond);
  delete obj;
  return 0;
}

}  // namespace

UROCE_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  Context* ctx = ctx_of(srq->context);
  const Errc e = ctx->s->udp.load()->lock()->destroy_srq(srq_of(srq)->h);
  return release_destroyed(e, ctx, ctx->s->srqs, srq_of(srq), srq);
}

// ===================================================================== AH

UROCE_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  return guarded<ibv_ah*>(nullptr, [&]() -> ibv_ah* {
    if (pd == nullptr || attr == nullptr) {
      errno = EINVAL;
      return nullptr;
    }
    auto r = ctx_of(pd->context)->s->udp.load()->lock()->create_ah(pd_of(pd)->h, to_ah_attr(*attr));
    if (!r.ok()) {
      errno = err(r.error());
      return nullptr;
    }
    auto* a = new Ah();
    a->ibv.context = pd->context;
    a->ibv.pd = pd;
    a->ibv.handle = r.value().index;
    a->h = r.value();
    return &a->ibv;
  });
}

UROCE_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  const Errc e = ctx_of(ah->context)->s->udp.load()->lock()->destroy_ah(ah_of(ah)->h);
  if (e != Errc::kOk) return err(e);
  delete ah_of(ah);
  return 0;
}

// The address to answer a received UD message: the GRH area holds, for RoCE v2 over IPv4,
// 20 bytes of padding and the IPv4 header; for IPv6, the IPv6 header (as rxe fills it).
UROCE_EXPORT int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc,
                                     ibv_grh* grh, ibv_ah_attr* ah_attr) {
  if ((wc->wc_flags & IBV_WC_GRH) == 0 || grh == nullptr) {
    errno = EINVAL;  // RoCE needs the GRH
    return -1;
  }
  std::memset(ah_attr, 0, sizeof *ah_attr);
  const auto* raw = reinterpret_cast<const std::uint8_t*>(grh);
  ibv_gid sgid{};
  ibv_gid dgid{};
  std::uint8_t tclass = 0;
  std::uint32_t flow = 0;
  if ((raw[20] >> 4) == 4) {
    // IPv4 header at offset 20: source address at +12, destination at +16, TOS at +1.
    sgid.raw[10] = sgid.raw[11] = 0xff;
    std::memcpy(&sgid.raw[12], raw + 20 + 12, 4);
    dgid.raw[10] = dgid.raw[11] = 0xff;
    std::memcpy(&dgid.raw[12], raw + 20 + 16, 4);
    tclass = raw[21];
  } else {
    sgid = grh->sgid;
    dgid = grh->dgid;
    const std::uint32_t vtf = be32toh(grh->version_tclass_flow);
    tclass = static_cast<std::uint8_t>((vtf >> 20) & 0xff);
    flow = vtf & 0xfffff;
  }
  // sgid_index: the local GID the message was sent to.
  Device& d = *ctx_of(context)->query_dev;
  auto pa = d.query_port(port_num);
  if (!pa.ok()) {
    errno = err(pa.error());
    return -1;
  }
  int index = -1;
  for (std::uint32_t i = 0; i < pa.value().gid_tbl_len && index < 0; ++i) {
    auto g = d.query_gid_entry(port_num, i);
    if (g.ok() && std::memcmp(g.value().gid.raw.data(), dgid.raw, 16) == 0) {
      index = static_cast<int>(i);
    }
  }
  if (index < 0) {
    errno = ENOENT;
    return -1;
  }
  ah_attr->is_global = 1;
  ah_attr->grh.dgid = sgid;
  ah_attr->grh.sgid_index = static_cast<std::uint8_t>(index);
  ah_attr->grh.flow_label = flow;
  ah_attr->grh.hop_limit = 0xff;
  ah_attr->grh.traffic_class = tclass;
  // Not wc->sl: on RoCE that is the datagram's L3 type (wc_sl), not a service level to answer
  // with. rdma-core copies it over, which on mlx5 gives an IPv4 peer's AH sl 2 (a priority on a
  // VLAN); uroce sends no VLAN tag, and 0 is what an application building the AH itself uses.
  ah_attr->sl = 0;
  ah_attr->port_num = port_num;
  return 0;
}

UROCE_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  ibv_ah_attr attr;
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) return nullptr;
  return ibv_create_ah(pd, &attr);
}

// ===================================================================== QP

UROCE_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  return guarded<ibv_qp*>(nullptr, [&]() -> ibv_qp* {
    if (pd == nullptr || attr == nullptr) {
      errno = EINVAL;
      return nullptr;
    }
    return create_qp_common(ctx_of(pd->context), pd, *attr, false, 0, &attr->cap);
  });
}

UROCE_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  Qp* q = qp_of(qp);
  return q->ex ? &q->ibv : nullptr;
}

// The per-connection key of kQpConnectionKey (compat/connection_key.h); a move to RTR without
// it clears the QP's key (the device clears it on a move to RESET, and a destroyed QP's goes
// with it: UdpDevice). False when the key does not go in (the device does not seal).
static bool apply_connection_key(ibv_qp* qp, const ibv_qp_attr* attr, std::uint32_t m) {
  engine::UdpDevice* dev = ctx_of(qp->context)->s->udp.load();
  if ((m & kQpConnectionKey) == 0) {
    if ((m & IBV_QP_STATE) != 0 && attr->qp_state == IBV_QPS_RTR && dev != nullptr) {
      dev->clear_connection_key(qp->qp_num);
    }
    return true;
  }
  const auto* k = reinterpret_cast<const QpAttrWithKey*>(attr);
  Gid g;
  std::memcpy(g.raw.data(), k->peer_gid, 16);
  const auto peer = verbs::ip_from_gid(g);
  return dev != nullptr && peer &&
         dev->set_connection_key(qp->qp_num, *peer, k->remote_qpn,
                                 as_bytes(k->key, k->key_bytes <= 32 ? k->key_bytes : 0));
}

UROCE_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  auto m = static_cast<std::uint32_t>(mask);
  if (!apply_connection_key(qp, attr, m)) return err(Errc::kInvalidArgument);
  m &= ~kQpConnectionKey;
  if (m == 0) return 0;  // the key alone
  QpAttr a = to_qp_attr(*attr);
  // uroce's own bit (no IBV_QP_* one, the kernel refuses it): the drop-in librdmacm's RTR for a
  // peer whose GUID carries uroce's mark (cma.cc's modify_rtr).
  a.selective_repeat = (m & kQpSelectiveRepeat) != 0;
  const Errc e = ctx_of(qp->context)->s->udp.load()->lock()->modify_qp(qp_of(qp)->h, a, m);
  if (e != Errc::kOk) return err(e);
  if ((m & IBV_QP_STATE) != 0) qp->state = attr->qp_state;
  return 0;
}

UROCE_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init_attr) {
  auto r = ctx_of(qp->context)->s->udp.load()->lock()->query_qp(qp_of(qp)->h);
  if (!r.ok()) return err(r.error());
  to_ibv_qp_attr(r.value().attr, attr);
  if (init_attr != nullptr) {
    std::memset(init_attr, 0, sizeof *init_attr);
    init_attr->qp_context = qp->qp_context;
    init_attr->send_cq = qp->send_cq;
    init_attr->recv_cq = qp->recv_cq;
    init_attr->srq = qp->srq;
    to_ibv_cap(r.value().init_attr.cap, &init_attr->cap);
    init_attr->qp_type = qp->qp_type;
    init_attr->sq_sig_all = r.value().init_attr.sq_sig_all ? 1 : 0;
  }
  qp->state = attr->qp_state;
  return 0;
}

UROCE_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  Context* ctx = ctx_of(qp->context);
  const Errc e = ctx->s->udp.load()->lock()->destroy_qp(qp_of(qp)->h);
  return release_destroyed(e, ctx, ctx->s->qps, qp_of(qp), qp);
}

// The drop-in libibverbs.so.1: the objects it hands to applications and what they carry.
//
// Every object an application sees is the libibverbs struct of Debian's rdma-core 44 headers
// (so the static inline verbs in <infiniband/verbs.h> find what they expect at the offsets they
// expect), followed by uroce's state. The struct is the first member, so a pointer to it is a
// pointer to the whole object.
//
// Devices: one per configured address (engine::configured_devices()). A context answers
// queries from a plain uroce::Device built from the same configuration; the networked
// engine::UdpDevice (which binds UDP port 4791 and runs the progress thread) is created when
// the first resource that needs it is created, so that `ibv_devinfo` works while another
// process serves the device. Every Device call of a networked context goes through
// UdpDevice::lock() (the progress thread runs concurrently).
#pragma once

#include <limits>  // verbs.h's __VERBS_ABI_IS_EXTENDED uses std::numeric_limits in C++

#pragma GCC visibility push(default)
#include <infiniband/verbs.h>
#pragma GCC visibility pop

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "device/device_config.h"
#include "device/udp_device.h"
#include "uroce/verbs.h"

#define UROCE_EXPORT extern "C" __attribute__((visibility("default")))

namespace uroce::compat {

// What libibverbs allocates for a device: struct verbs_device (libibverbs/driver.h, not
// installed) starts with struct ibv_device and continues with the provider's ops pointer, a
// refcount, a list node, the sysfs entry and core_support. Provider libraries loaded next to
// us (libmlx5's mlx5dv_is_supported()) read that ops pointer: it is null here, so they see a
// device that is not theirs.
struct CompatDevice {
  ibv_device dev;
  const void* verbs_ops = nullptr;
  unsigned char verbs_device_rest[64] = {};
  // uroce's part.
  engine::DeviceSpec spec;
  int index = 0;
};

struct Context;

struct Pd {
  ibv_pd ibv;
  PdHandle h;
};

struct Mr {
  ibv_mr ibv;
  MrHandle h;
};

struct Mw {
  ibv_mw ibv;
  MwHandle h;
};

struct Channel {
  ibv_comp_channel ibv;
  std::uint64_t tag = 0;
  Context* ctx = nullptr;
};

struct Cq {
  ibv_cq_ex ibv;  // an ibv_cq prefix (ibv_cq_ex_to_cq casts)
  CqHandle h;
  Context* ctx = nullptr;
  Channel* channel = nullptr;
  // Extended polling (ibv_start_poll / ibv_next_poll): the completion being read.
  Wc cur;
  // Events handed out (ibv_get_cq_event, ibv_get_async_event), under ibv.mutex: ibv_destroy_cq
  // waits until the application acknowledged as many (ibv.comp_events_completed,
  // ibv.async_events_completed), as rdma-core's does.
  std::uint32_t comp_events_reported = 0;
  std::uint32_t async_events_reported = 0;
};

struct Srq {
  ibv_srq ibv;
  SrqHandle h;
  std::uint32_t srq_num = 0;          // an XRC SRQ's (ibv_get_srq_num); 0 for a basic one
  std::uint32_t events_reported = 0;  // as Cq's, against ibv.events_completed
};

struct Ah {
  ibv_ah ibv;
  AhHandle h;
};

// rdma-core 45 appended wr_flush to struct ibv_qp_ex (after wr_atomic_write, the last member of
// the distribution's rdma-core 44 headers this library is built with), with IBV_WR_FLUSH 14,
// IBV_QP_EX_WITH_FLUSH and the IBV_ACCESS_FLUSH_* flags: an application built with newer headers
// finds the function right after the struct. The same values here.
using WrFlushFn = void (*)(ibv_qp_ex*, std::uint32_t rkey, std::uint64_t remote_addr,
                           std::size_t len, std::uint8_t type, std::uint8_t level);
inline constexpr std::uint64_t kQpExWithFlush = 1u << 11;  // IBV_QP_EX_WITH_FLUSH
struct QpExWithFlush {                                     // the layout of rdma-core 45's
  ibv_qp_ex ex;
  WrFlushFn wr_flush;
};
static_assert(offsetof(QpExWithFlush, wr_flush) == sizeof(ibv_qp_ex));

// Built with rdma-core 45+ headers, ibv_qp_ex has wr_flush itself: set it there too (a template,
// so that with 44's headers, which lack the member, the assignment is never instantiated).
template <class QpEx>
inline constexpr bool kHasWrFlush = requires(QpEx& x) {
  x.wr_flush;
};
template <class QpEx>
constexpr void set_wr_flush_member(QpEx& x, WrFlushFn f) {
  if constexpr (kHasWrFlush<QpEx>) x.wr_flush = f;
}

struct Qp {
  ibv_qp_ex ibv;                 // an ibv_qp prefix (qp_base)
  WrFlushFn wr_flush = nullptr;  // rdma-core 45's ibv_qp_ex.wr_flush (QpExWithFlush)
  QpHandle h;
  std::uint32_t events_reported = 0;  // as Cq's, against qp_base.events_completed
  QpType type = QpType::kRc;
  bool ex = false;  // created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: ibv_qp_to_qp_ex() answers
  std::uint64_t send_ops = 0;
  // The ibv_wr_* batch between wr_start and wr_complete. SGE lists and inline data are stored
  // as offsets into pools until wr_complete, since the pools may grow.
  struct PendingWr {
    SendWr wr;
    std::size_t sge_first = 0;
    std::size_t sge_count = 0;
    bool inline_data = false;
  };
  std::vector<PendingWr> batch;
  std::vector<Sge> sge_pool;
  std::vector<std::byte> inline_pool;
  std::vector<std::pair<std::size_t, std::size_t>> inline_pieces;  // offset, length
  int batch_error = 0;  // the first error of this batch (wr_complete returns it)
};

// What a context shares with the contexts imported from its command file (ibv_import_device on
// a dup of context->cmd_fd), as the kernel's contexts on one uverbs file share its objects: the
// networked device and what names its objects. The last context sharing it closes the device.
struct SharedState {
  std::mutex mu;  // guards the lazy open and the maps below (never held with the device lock)
  std::unique_ptr<engine::UdpDevice> owner;
  std::atomic<engine::UdpDevice*> udp{nullptr};
  std::unordered_map<std::uint64_t, Cq*> cqs;
  std::unordered_map<std::uint64_t, Qp*> qps;
  std::unordered_map<std::uint64_t, Srq*> srqs;
  // What ibv_import_pd and ibv_import_mr find by ibv_pd.handle / ibv_mr.handle (the handle's
  // index): the live PDs and MRs allocated through any of the sharing contexts.
  struct MrEntry {
    MrHandle h;
    std::uint32_t lkey = 0;
    std::uint32_t rkey = 0;
    std::size_t length = 0;
  };
  std::unordered_map<std::uint32_t, PdHandle> pds;
  std::unordered_map<std::uint32_t, MrEntry> mrs;
  // The command file (a memfd) by identity, and the process that made it: ibv_import_device
  // finds the state from a dup of the file, in this process only.
  std::uint64_t file_dev = 0;
  std::uint64_t file_ino = 0;
  int pid = 0;
  CompatDevice* dev = nullptr;
  // The file the device signals async events on (an eventfd): every sharing context's async_fd
  // is a dup of it, so an event reaches whichever context reads it.
  int async_file = -1;
  ~SharedState();
};

struct Context {
  verbs_context vctx;  // vctx.context is the ibv_context applications hold
  CompatDevice* dev = nullptr;
  DeviceConfig config;
  std::unique_ptr<Device> query_dev;  // attributes, ports and GIDs before (and after) the network
  int async_placeholder = -1;         // context.async_fd: the UdpDevice signals this file
  std::uint32_t ifindex = 0;          // the interface holding the address (GID entries)
  bool address_local = true;          // an interface holds the address (else the port is down)
  std::shared_ptr<SharedState> s;     // shared with the contexts imported from this one
};

inline Context* ctx_of(ibv_context* c) {
  return reinterpret_cast<Context*>(reinterpret_cast<unsigned char*>(c) -
                                    offsetof(verbs_context, context));
}
inline Pd* pd_of(ibv_pd* p) { return reinterpret_cast<Pd*>(p); }
inline Mr* mr_of(ibv_mr* m) { return reinterpret_cast<Mr*>(m); }
inline Mw* mw_of(ibv_mw* m) { return reinterpret_cast<Mw*>(m); }
inline Cq* cq_of(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }
inline Cq* cq_of(ibv_cq_ex* c) { return reinterpret_cast<Cq*>(c); }
inline Srq* srq_of(ibv_srq* s) { return reinterpret_cast<Srq*>(s); }
inline Ah* ah_of(ibv_ah* a) { return reinterpret_cast<Ah*>(a); }
inline Qp* qp_of(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }
inline Qp* qp_of(ibv_qp_ex* q) { return reinterpret_cast<Qp*>(q); }

template <class Tag>
std::uint64_t key(Handle<Tag> h) {
  return (std::uint64_t{h.index} << 32) | h.generation;
}

// The networked device, opening it on first use. nullptr with errno set (and a message on
// stderr) when it cannot be opened.
engine::UdpDevice* net(Context* ctx);

// Whether ibv_post_send / ibv_wr_complete run a progress round in the posting thread (unless
// UROCE_NO_TX_ON_POST is set).
bool transmit_on_post();

// Runs `post(Device&)` under the device lock, then, if transmit_on_post(), transmits from this
// thread: the packets leave at once, as a NIC starts on its doorbell, and the doorbell does not
// wake the progress thread for work this thread does itself. (No receive: ibv_poll_cq runs
// full rounds.)
template <class F>
Errc post_then_transmit(engine::UdpDevice* u, F&& post) {
  if (!transmit_on_post()) return post(*u->lock());
  Errc e;
  {
    engine::UdpDevice::QuietDoorbells quiet;
    e = post(*u->lock());
  }
  u->transmit();
  return e;
}

void mark_down_if_not_local(Context* ctx, ibv_port_attr* a);

// Errc values are errno values.
inline int err(Errc e) { return static_cast<int>(e); }

// Runs `f`, turning an escaping C++ exception (allocation failure) into `fail` with errno
// ENOMEM: nothing may unwind into C callers.
template <class R, class F>
R guarded(R fail, F&& f) noexcept {
  try {
    return f();
  } catch (...) {
    errno = ENOMEM;
    return fail;
  }
}

// Extended CQ / QP function tables (extended.cc).
void init_cq_ex_ops(Cq* cq);
void init_qp_ex_ops(Qp* qp);
ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr);
ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr);

// Conversions shared by the ordinary and the extended paths (ibverbs.cc).
void to_ibv_wc(const Wc& w, ibv_wc* o);
// ibv_wc.sl (and ibv_wc_read_sl) of a completion: the L3 type of a UD receive, as mlx5 reports
// it (ibverbs.cc says why).
std::uint8_t wc_sl(const Wc& w);
ibv_cq* create_cq_common(Context* ctx, int cqe, void* cq_context, ibv_comp_channel* channel,
                         int comp_vector, bool ex);
// Writes the actual capacities to *cap_out (as the kernel writes them back). `xrcd`: an XRC
// target's domain (its `pd` and CQs are ignored).
ibv_qp* create_qp_common(Context* ctx, ibv_pd* pd, const ibv_qp_init_attr& attr, bool ex,
                         std::uint64_t send_ops, ibv_qp_cap* cap_out, ibv_xrcd* xrcd = nullptr);
// A new Qp for the device's QP handle `h`, its ibv_qp fields those of `base` (its handle, mutex
// and condition variable set here), in the context's table (ibverbs.cc).
Qp* new_qp(Context* ctx, const ibv_qp& base, QpHandle h, bool ex, std::uint64_t send_ops);

// The mutex and condition variable of an object's events (ibverbs.cc).
void init_sync(pthread_mutex_t* m, pthread_cond_t* c);
// A new Srq for the device's SRQ `info` on `pd` (an XRC one's number kept), in the context's
// table (ibverbs.cc).
ibv_srq* new_srq(Context* ctx, ibv_pd* pd, void* srq_context, const SrqInfo& info);

// XRC (xrc.cc): the verbs_context operations, and the domain an ibv_xrcd names.
ibv_xrcd* vop_open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr);
int vop_close_xrcd(ibv_xrcd* xrcd);
ibv_srq* vop_create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr);
int vop_get_srq_num(ibv_srq* srq, std::uint32_t* srq_num);
ibv_qp* vop_open_qp(ibv_context* context, ibv_qp_open_attr* attr);
XrcdHandle xrcd_handle(ibv_xrcd* xrcd);

}  // namespace uroce::compat

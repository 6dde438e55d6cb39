// The drop-in librdmacm's calls built on the connection manager, or without it (rdmacm.h).
//
// Everything librdmacm.map exports that cma.cc does not. Each call answers as rdma-core 44's
// librdmacm does (librdmacm/cma.c, addrinfo.c and rsocket.c of v44.0; the functions named in
// the comments are theirs), built only from the public rdma_* calls of cma.cc and the public
// ibv_* calls of libibverbs:
//
//   rdma_getaddrinfo, rdma_freeaddrinfo   addrinfo.c: getaddrinfo(3) and nothing else. The stock
//                                         library then asks ibacm for a route and connect data;
//                                         without an ibacm daemon (as on any RoCE host that does
//                                         not run one) it keeps getaddrinfo's answer, so does this.
//   rdma_create_ep, rdma_destroy_ep       cma.c: a synchronous ID (null channel), bound (passive)
//                                         or resolved with 2000 ms timeouts (active), a QP made
//                                         now (active) or kept for rdma_get_request (passive).
//   rdma_create_srq(_ex), rdma_destroy_srq  cma.c, with ucma_create_cqs for an XRC SRQ's CQ.
//   rdma_get_devices, rdma_free_devices   over device_contexts(): opened once, kept open.
//   rdma_event_str, rdma_get_src_port, rdma_get_dst_port   pure.
//   multicast   a uroce device joins no multicast group: the checks the library and the kernel
//               make, then ENOSYS, the kernel's answer for a device that cannot join.
//   ECE         a uroce device has no ECE (its ibv_query_ece says EOPNOTSUPP) and its CM
//               carries none: the library's checks, then nothing to keep or report;
//               rdma_reject_ece is rdma_reject (without the reason code the stock one sends).
//   rsockets    uroce offers no rsockets yet: rsocket() fails as the stock library's does when no
//               RDMA device is usable (ENODEV), so no descriptor is ever an rsocket and every
//               call on one fails as the stock library fails for a descriptor that is not one
//               (-1 and EBADF; rclose returns EBADF itself); rpoll and rselect, which the
//               stock library also runs over ordinary descriptors, work on those.
#include <endian.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "compat/rdmacm/rdmacm.h"

#pragma GCC visibility push(default)
#include <infiniband/ib.h>    // sockaddr_ib, AF_IB
#include <rdma/rdma_verbs.h>  // rdma_create_srq(_ex), rdma_destroy_srq
#include <rdma/rsocket.h>
#pragma GCC visibility pop

using uroce::rdmacm::device_contexts;
using uroce::rdmacm::ep_defaults;

namespace {

// cma.h's ERR(): errno and -1.
int fail(int err) {
  errno = err;
  return -1;
}

// rdma_create_ep's timeouts for rdma_resolve_addr and rdma_resolve_route (cma.c).
constexpr int kEpResolveTimeoutMs = 2000;

// ===================================================================== rdma_getaddrinfo

// ucma_init()'s sync_devices_list(): no verbs device, ENODEV. Listing the devices opens none.
bool have_verbs_device() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return false;
  ibv_free_device_list(list);
  return n > 0;
}

// ucma_convert_to_ai: the getaddrinfo(3) hints that rdma_addrinfo hints stand for. (The stock
// library also copies the hints' addresses into ai_addr, which getaddrinfo(3) ignores.)
addrinfo to_ai_hints(const rdma_addrinfo& h) {
  addrinfo ai{};
  if ((h.ai_flags & RAI_PASSIVE) != 0) ai.ai_flags = AI_PASSIVE;
  if ((h.ai_flags & RAI_NUMERICHOST) != 0) ai.ai_flags |= AI_NUMERICHOST;
  if (h.ai_family != AF_IB) ai.ai_family = h.ai_family;
  switch (h.ai_qp_type) {
    case IBV_QPT_RC:
    case IBV_QPT_UC:
    case IBV_QPT_XRC_SEND:
    case IBV_QPT_XRC_RECV:
      ai.ai_socktype = SOCK_STREAM;
      break;
    case IBV_QPT_UD:
      ai.ai_socktype = SOCK_DGRAM;
      break;
    default:
      break;
  }
  switch (h.ai_port_space) {
    case RDMA_PS_TCP:
      ai.ai_protocol = IPPROTO_TCP;
      break;
    case RDMA_PS_IPOIB:
    case RDMA_PS_UDP:
      ai.ai_protocol = IPPROTO_UDP;
      break;
    case RDMA_PS_IB:
      if (ai.ai_socktype == SOCK_STREAM) ai.ai_protocol = IPPROTO_TCP;
      if (ai.ai_socktype == SOCK_DGRAM) ai.ai_protocol = IPPROTO_UDP;
      break;
    default:
      break;
  }
  return ai;
}

// ucma_copy_addr: a malloc'd copy (rdma_freeaddrinfo frees it).
int copy_addr(sockaddr** dst, socklen_t* dst_len, const sockaddr* src, socklen_t src_len) {
  if (src == nullptr) return fail(EINVAL);  // the stock library would read through it
  *dst = static_cast<sockaddr*>(std::malloc(src_len));
  if (*dst == nullptr) return fail(ENOMEM);
  std::memcpy(*dst, src, src_len);
  *dst_len = src_len;
  return 0;
}

// ucma_convert_in6 (with ucma_set_sid): the AF_IB address of an IP address, for RAI_FAMILY with
// AF_IB and RAI_NUMERICHOST. The GID is the IPv6 address; the service ID is the port space and
// port. The stock library reads an IPv4 answer as if it were a sockaddr_in6 (past its end); an
// IPv4 address becomes its IPv4-mapped GID (::ffff:a.b.c.d) here, as RoCE maps it.
int to_sockaddr_ib(int ps, sockaddr** dst, socklen_t* dst_len, const addrinfo& ai) {
  auto* sib = static_cast<sockaddr_ib*>(std::calloc(1, sizeof(sockaddr_ib)));
  if (sib == nullptr) return fail(ENOMEM);
  sib->sib_family = AF_IB;
  sib->sib_pkey = htobe16(0xffff);
  std::uint16_t port_be = 0;
  if (ai.ai_family == AF_INET6 && ai.ai_addrlen >= sizeof(sockaddr_in6)) {
    sockaddr_in6 in6;
    std::memcpy(&in6, ai.ai_addr, sizeof in6);
    sib->sib_flowinfo = in6.sin6_flowinfo;
    std::memcpy(&sib->sib_addr, &in6.sin6_addr, 16);
    sib->sib_scope_id = in6.sin6_scope_id;
    port_be = in6.sin6_port;
  } else if (ai.ai_family == AF_INET && ai.ai_addrlen >= sizeof(sockaddr_in)) {
    sockaddr_in in;
    std::memcpy(&in, ai.ai_addr, sizeof in);
    std::uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    std::memcpy(gid + 12, &in.sin_addr, 4);
    std::memcpy(&sib->sib_addr, gid, 16);
    port_be = in.sin_port;
  }
  const std::uint64_t port = be16toh(port_be);
  sib->sib_sid = htobe64((static_cast<std::uint64_t>(ps) << 16) + port);
  if (ps != 0) sib->sib_sid_mask = htobe64(RDMA_IB_IP_PS_MASK);
  if (port != 0) sib->sib_sid_mask |= htobe64(RDMA_IB_IP_PORT_MASK);
  *dst = reinterpret_cast<sockaddr*>(sib);
  *dst_len = sizeof(sockaddr_ib);
  return 0;
}

// ucma_convert_to_rai: the first getaddrinfo(3) answer as an rdma_addrinfo. Unless the hints
// say, the QP type follows the socket type (stream: RC, datagram: UD) and the port space the
// protocol (TCP: RDMA_PS_TCP, UDP: RDMA_PS_UDP). The address is the source of a passive answer
// and the destination of an active one; ai_flags is RAI_PASSIVE or nothing.
int to_rai(rdma_addrinfo* rai, const rdma_addrinfo& h, const addrinfo& ai) {
  if (h.ai_qp_type != 0) {
    rai->ai_qp_type = h.ai_qp_type;
  } else if (ai.ai_socktype == SOCK_STREAM) {
    rai->ai_qp_type = IBV_QPT_RC;
  } else if (ai.ai_socktype == SOCK_DGRAM) {
    rai->ai_qp_type = IBV_QPT_UD;
  }
  if (h.ai_port_space != 0) {
    rai->ai_port_space = h.ai_port_space;
  } else if (ai.ai_protocol == IPPROTO_TCP) {
    rai->ai_port_space = RDMA_PS_TCP;
  } else if (ai.ai_protocol == IPPROTO_UDP) {
    rai->ai_port_space = RDMA_PS_UDP;
  }
  const bool passive = (ai.ai_flags & AI_PASSIVE) != 0;
  if (passive) rai->ai_flags = RAI_PASSIVE;
  // Only with AI_CANONNAME, which the stock library never asks for; as it does, a failed strdup
  // leaves the name out.
  if (ai.ai_canonname != nullptr) {
    (passive ? rai->ai_src_canonname : rai->ai_dst_canonname) = strdup(ai.ai_canonname);
  }
  sockaddr** addr = passive ? &rai->ai_src_addr : &rai->ai_dst_addr;
  socklen_t* len = passive ? &rai->ai_src_len : &rai->ai_dst_len;
  if ((h.ai_flags & RAI_FAMILY) != 0 && h.ai_family == AF_IB &&
      (h.ai_flags & RAI_NUMERICHOST) != 0) {
    rai->ai_family = AF_IB;
    return to_sockaddr_ib(rai->ai_port_space, addr, len, ai);
  }
  rai->ai_family = ai.ai_family;
  return copy_addr(addr, len, ai.ai_addr, ai.ai_addrlen);
}

// ucma_get_port: the port, in network byte order, of the ID's address; for AF_IB the low 16 bits
// of the service ID. 0 for an address of no family (not bound, not resolved).
__be16 port_of_addr(const sockaddr_storage& storage) {
  switch (storage.ss_family) {
    case AF_INET: {
      sockaddr_in in;
      std::memcpy(&in, &storage, sizeof in);
      return in.sin_port;
    }
    case AF_INET6: {
      sockaddr_in6 in6;
      std::memcpy(&in6, &storage, sizeof in6);
      return in6.sin6_port;
    }
    case AF_IB: {
      sockaddr_ib ib;
      std::memcpy(&ib, &storage, sizeof ib);
      return htobe16(static_cast<std::uint16_t>(be64toh(ib.sib_sid)));
    }
    default:
      return 0;
  }
}

// ===================================================================== endpoints

// ucma_passive_ep: bound to the answer's source address; the PD (when given) becomes the ID's,
// and the QP attributes (with the answer's QP type) are kept for rdma_get_request, which makes
// each new connection's QP from them on the listener's PD. Their srq, if any, goes along as it
// is: the stock library gives the new connections no other SRQ either.
int passive_ep(rdma_cm_id* id, const rdma_addrinfo& res, ibv_pd* pd,
               const ibv_qp_init_attr* qp_init_attr) {
  int ret = rdma_bind_addr(id, res.ai_src_addr);
  if (ret != 0) return ret;
  uroce::rdmacm::EpDefaults& defaults = ep_defaults(id);
  if (pd != nullptr) {
    id->pd = pd;
    defaults.pd = pd;
  }
  if (qp_init_attr != nullptr) {
    defaults.qp_init = *qp_init_attr;
    defaults.qp_init.qp_type = static_cast<ibv_qp_type>(res.ai_qp_type);
    defaults.has_qp_init = true;
  }
  return 0;
}

// rdma_create_ep's active side: address and route resolved (each blocks: the ID is synchronous),
// then the QP on the given PD (or the ID's default one), of the answer's QP type (written into
// the caller's attributes, as the stock library writes it). ai_route (IB path records, from
// ibacm) and ai_connect (ibacm's connect data): rdma_getaddrinfo here never fills them, and on
// RoCE the route is what rdma_resolve_route finds; a hand-made rdma_addrinfo's are not used.
int active_ep(rdma_cm_id* id, const rdma_addrinfo& res, ibv_pd* pd,
              ibv_qp_init_attr* qp_init_attr) {
  int ret = rdma_resolve_addr(id, res.ai_src_addr, res.ai_dst_addr, kEpResolveTimeoutMs);
  if (ret != 0) return ret;
  ret = rdma_resolve_route(id, kEpResolveTimeoutMs);
  if (ret != 0) return ret;
  if (qp_init_attr != nullptr) {
    qp_init_attr->qp_type = static_cast<ibv_qp_type>(res.ai_qp_type);
    ret = rdma_create_qp(id, pd, qp_init_attr);
  }
  return ret;
}

// ===================================================================== SRQs, CQs

// ucma_destroy_cqs: the CQs and completion channels that this library made for the ID (the
// fields hold nothing else: a caller's CQs go into the QP's attributes, never into the ID),
// unless an XRC receive ID's SRQ still uses them.
void destroy_cqs(rdma_cm_id* id) {
  if (id->qp_type == IBV_QPT_XRC_RECV && id->srq != nullptr) return;
  if (id->recv_cq != nullptr) {
    ibv_destroy_cq(id->recv_cq);
    if (id->send_cq != nullptr && id->send_cq != id->recv_cq) {
      ibv_destroy_cq(id->send_cq);
      id->send_cq = nullptr;
    }
    id->recv_cq = nullptr;
  }
  if (id->recv_cq_channel != nullptr) {
    ibv_destroy_comp_channel(id->recv_cq_channel);
    if (id->send_cq_channel != nullptr && id->send_cq_channel != id->recv_cq_channel) {
      ibv_destroy_comp_channel(id->send_cq_channel);
      id->send_cq_channel = nullptr;
    }
    id->recv_cq_channel = nullptr;
  }
}

// ucma_create_cqs with a receive side only (all that an SRQ needs): a completion channel and a
// CQ of recv_size entries on it, the ID as the CQ's context; nothing for a size of 0. The stock
// library makes a new one even when the ID already has a receive CQ (losing it); that one is
// used here. Sets *made when it made one (for undo_recv_cq).
int create_recv_cq(rdma_cm_id* id, std::uint32_t recv_size, bool* made) {
  *made = false;
  if (recv_size == 0 || id->recv_cq != nullptr) return 0;
  ibv_comp_channel* channel = ibv_create_comp_channel(id->verbs);
  if (channel == nullptr) return -1;
  ibv_cq* cq = ibv_create_cq(id->verbs, static_cast<int>(recv_size), id, channel, 0);
  if (cq == nullptr) {
    const int saved = errno;
    ibv_destroy_comp_channel(channel);
    return fail(saved);
  }
  id->recv_cq_channel = channel;
  id->recv_cq = cq;
  *made = true;
  return 0;
}

// Undoes create_recv_cq. (On a failed SRQ the stock library destroys all of the ID's CQs, a QP's
// too, which then fail with EBUSY and are lost: only what this call made goes here.)
void undo_recv_cq(rdma_cm_id* id) {
  ibv_destroy_cq(id->recv_cq);
  id->recv_cq = nullptr;
  ibv_destroy_comp_channel(id->recv_cq_channel);
  id->recv_cq_channel = nullptr;
}

// ucma_get_xrcd: one XRC domain per device, opened when first needed and kept (the stock
// library closes it when the device's last ID goes; the devices here stay open).
ibv_xrcd* device_xrcd(ibv_context* ctx) {
  struct Entry {
    ibv_context* ctx = nullptr;
    ibv_xrcd* xrcd = nullptr;
  };
  static std::mutex mu;
  static std::array<Entry, 64> entries;
  std::lock_guard lock(mu);
  for (Entry& e : entries) {
    if (e.ctx == ctx) return e.xrcd;
  }
  ibv_xrcd_init_attr attr{};
  attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  attr.fd = -1;
  attr.oflags = O_CREAT;
  ibv_xrcd* xrcd = ibv_open_xrcd(ctx, &attr);
  if (xrcd == nullptr) return nullptr;
  for (Entry& e : entries) {
    if (e.ctx == nullptr) {
      e = Entry{ctx, xrcd};
      break;
    }
  }
  return xrcd;
}

// ===================================================================== multicast

// ucma_addrlen: 0 (EINVAL) for anything but AF_INET and AF_INET6. AF_IB counts only when the
// kernel takes AF_IB addresses (af_ib_support), which uroce's CM does not.
socklen_t mc_addr_len(const sockaddr* addr) {
  if (addr == nullptr) return 0;
  if (addr->sa_family == AF_INET) return sizeof(sockaddr_in);
  if (addr->sa_family == AF_INET6) return sizeof(sockaddr_in6);
  return 0;
}

// The kernel's answer to a join (ucma_process_join, then rdma_join_multicast): EINVAL for an ID
// not bound to a device; then, for a device that is neither RoCE nor an IB device with multicast
// (rdma_protocol_roce, rdma_cap_ib_mcast), ENOSYS. A uroce device does not join groups (no
// IGMP, no multicast steering, and its ibv_attach_mcast says EOPNOTSUPP): it answers as that
// device does, which applications already treat as "no multicast here".
int join_unsupported(const rdma_cm_id* id) {
  if (id->verbs == nullptr) return fail(EINVAL);
  return fail(ENOSYS);
}

// ===================================================================== rsockets

// rsocket.c's lookups (idm_lookup, idm_at) for a descriptor that is not an rsocket.
int not_an_rsocket() { return fail(EBADF); }

// rselect's conversions (rs_select_to_poll, rs_poll_to_select): each descriptor in any set is
// polled for POLLIN (read set) and POLLOUT (write set); the except set gets whatever else poll
// reports (POLLERR, POLLHUP, POLLNVAL, POLLPRI). The stock library skips descriptor 0 (it marks
// "in a set" by a non-zero fd); it is polled here like the others.
int select_via_poll(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds,
                    timeval* timeout) {
  if (nfds < 0) return fail(EINVAL);
  if (nfds > FD_SETSIZE) nfds = FD_SETSIZE;
  std::array<pollfd, FD_SETSIZE> fds{};
  nfds_t n = 0;
  for (int fd = 0; fd < nfds; ++fd) {
    short events = 0;
    bool in_set = false;
    if (readfds != nullptr && FD_ISSET(fd, readfds)) {
      events |= POLLIN;
      in_set = true;
    }
    if (writefds != nullptr && FD_ISSET(fd, writefds)) {
      events |= POLLOUT;
      in_set = true;
    }
    if (exceptfds != nullptr && FD_ISSET(fd, exceptfds)) in_set = true;
    if (in_set) fds[n++] = pollfd{fd, events, 0};
  }
  // rs_convert_timeout: milliseconds, none for a null timeout.
  const int timeout_ms =
      timeout == nullptr ? -1 : static_cast<int>(timeout->tv_sec * 1000 + timeout->tv_usec / 1000);
  int ret = rpoll(fds.data(), n, timeout_ms);
  if (readfds != nullptr) FD_ZERO(readfds);
  if (writefds != nullptr) FD_ZERO(writefds);
  if (exceptfds != nullptr) FD_ZERO(exceptfds);
  if (ret <= 0) return ret;
  int count = 0;
  for (nfds_t i = 0; i < n; ++i) {
    const short r = fds[i].revents;
    if (readfds != nullptr && (r & (POLLIN | POLLHUP)) != 0) {
      FD_SET(fds[i].fd, readfds);
      ++count;
    }
    if (writefds != nullptr && (r & POLLOUT) != 0) {
      FD_SET(fds[i].fd, writefds);
      ++count;
    }
    if (exceptfds != nullptr && (r & ~(POLLIN | POLLOUT)) != 0) {
      FD_SET(fds[i].fd, exceptfds);
      ++count;
    }
  }
  return count;
}

}  // namespace

// ===================================================================== addresses

UROCE_EXPORT int rdma_getaddrinfo(const char* node, const char* service,
                                  const struct rdma_addrinfo* hints, struct rdma_addrinfo** res) {
  if (node == nullptr && service == nullptr && hints == nullptr) return fail(EINVAL);
  if (!have_verbs_device()) return fail(ENODEV);
  auto* rai = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  if (rai == nullptr) return fail(ENOMEM);
  static const rdma_addrinfo kNoHints{};
  const rdma_addrinfo& h = hints != nullptr ? *hints : kNoHints;

  int ret = 0;
  if (node != nullptr || service != nullptr) {
    // getaddrinfo(3)'s own defaults (AI_V4MAPPED | AI_ADDRCONFIG, every socket type) without
    // hints, as the stock library passes none then. Its EAI_* error is returned as it is
    // (rdma_getaddrinfo(3): "or one of the following nonzero error codes").
    addrinfo* ai = nullptr;
    if (hints != nullptr) {
      const addrinfo ai_hints = to_ai_hints(*hints);
      ret = getaddrinfo(node, service, &ai_hints, &ai);
    } else {
      ret = getaddrinfo(node, service, nullptr, &ai);
    }
    if (ret == 0) {
      ret = to_rai(rai, h, *ai);  // the first answer only: a list of one, as the stock one
      freeaddrinfo(ai);
    }
  } else {
    // Nothing to look up: the hints are the answer.
    rai->ai_flags = h.ai_flags;
    rai->ai_family = h.ai_family;
    rai->ai_qp_type = h.ai_qp_type;
    rai->ai_port_space = h.ai_port_space;
    if (h.ai_dst_len != 0)
      ret = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, h.ai_dst_addr, h.ai_dst_len);
  }
  if (ret == 0 && rai->ai_src_len == 0 && h.ai_src_len != 0) {
    ret = copy_addr(&rai->ai_src_addr, &rai->ai_src_len, h.ai_src_addr, h.ai_src_len);
  }
  if (ret != 0) {
    const int saved = errno;
    rdma_freeaddrinfo(rai);
    errno = saved;
    return ret;
  }
  *res = rai;
  return 0;
}

UROCE_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo* res) {
  while (res != nullptr) {
    rdma_addrinfo* next = res->ai_next;
    std::free(res->ai_connect);
    std::free(res->ai_route);
    std::free(res->ai_src_canonname);
    std::free(res->ai_dst_canonname);
    std::free(res->ai_src_addr);
    std::free(res->ai_dst_addr);
    std::free(res);
    res = next;
  }
}

UROCE_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id* id) {
  return port_of_addr(id->route.addr.src_storage);
}

UROCE_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id* id) {
  return port_of_addr(id->route.addr.dst_storage);
}

UROCE_EXPORT const char* rdma_event_str(enum rdma_cm_event_type event) {
  switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR:
      return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
      return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE:
      return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED:
      return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED:
      return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED:
      return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN:
      return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR:
      return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE:
      return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
    default:
      return "UNKNOWN EVENT";
  }
}

// ===================================================================== endpoints

UROCE_EXPORT int rdma_create_ep(struct rdma_cm_id** id, struct rdma_addrinfo* res,
                                struct ibv_pd* pd, struct ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || res == nullptr) return fail(EINVAL);
  rdma_cm_id* cm_id = nullptr;
  int ret =
      rdma_create_id(nullptr, &cm_id, nullptr, static_cast<rdma_port_space>(res->ai_port_space));
  if (ret != 0) return ret;
  // The stock library creates the ID with the answer's QP type (rdma_create_id2); the kernel
  // derives its own from the port space for RDMA_PS_TCP and RDMA_PS_UDP (ucma_get_qp_type), as
  // rdma_create_id did here, and the library's QP calls follow id->qp_type.
  cm_id->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
  if ((res->ai_flags & RAI_PASSIVE) != 0) {
    ret = passive_ep(cm_id, *res, pd, qp_init_attr);
  } else {
    ret = active_ep(cm_id, *res, pd, qp_init_attr);
  }
  if (ret != 0) {
    const int saved = errno;
    rdma_destroy_ep(cm_id);
    errno = saved;
    return ret;
  }
  *id = cm_id;
  return 0;
}

// The QP (and the CQs the library made for it), the SRQ (and its CQ), the kept defaults, then
// the ID: rdma_destroy_qp, rdma_destroy_srq, rdma_destroy_id, as the stock library.
UROCE_EXPORT void rdma_destroy_ep(struct rdma_cm_id* id) {
  if (id == nullptr) return;
  if (id->qp != nullptr) rdma_destroy_qp(id);
  if (id->srq != nullptr) rdma_destroy_srq(id);
  ep_defaults(id) = uroce::rdmacm::EpDefaults{};
  rdma_destroy_id(id);
}

// ===================================================================== SRQs

// The SRQ on the given PD, else the ID's (its device's default PD once bound). An XRC SRQ gets
// the device's XRC domain and, without a CQ of the caller's, a CQ (and completion channel) of
// max_wr entries made for the ID, as id->recv_cq.
UROCE_EXPORT int rdma_create_srq_ex(struct rdma_cm_id* id, struct ibv_srq_init_attr_ex* attr) {
  if (id == nullptr || attr == nullptr) return fail(EINVAL);
  if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) == 0) return fail(EINVAL);
  if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) == 0 || attr->pd == nullptr) {
    attr->pd = id->pd;
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
  }
  // Neither a PD nor a device (an ID not bound yet): the stock library would dereference null.
  if (attr->pd == nullptr) return fail(EINVAL);
  bool made_cq = false;
  if (attr->srq_type == IBV_SRQT_XRC) {
    if (id->verbs == nullptr) return fail(EINVAL);
    if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) == 0 || attr->xrcd == nullptr) {
      attr->xrcd = device_xrcd(id->verbs);
      if (attr->xrcd == nullptr) return -1;
    }
    if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) == 0 || attr->cq == nullptr) {
      if (create_recv_cq(id, attr->attr.max_wr, &made_cq) != 0) return -1;
      attr->cq = id->recv_cq;
    }
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  }
  ibv_context* ctx = id->verbs != nullptr ? id->verbs : attr->pd->context;
  ibv_srq* srq = ibv_create_srq_ex(ctx, attr);  // basic: ibv_create_srq (verbs.h)
  if (srq == nullptr) {
    const int saved = errno;
    if (made_cq) undo_recv_cq(id);
    return fail(saved);
  }
  if (id->pd == nullptr) id->pd = attr->pd;
  id->srq = srq;
  return 0;
}

// A basic SRQ, or an XRC one on an XRC receive ID; the actual capacities written back to attr.
UROCE_EXPORT int rdma_create_srq(struct rdma_cm_id* id, struct ibv_pd* pd,
                                 struct ibv_srq_init_attr* attr) {
  if (id == nullptr || attr == nullptr) return fail(EINVAL);
  ibv_srq_init_attr_ex attr_ex{};
  std::memcpy(&attr_ex, attr, sizeof *attr);
  attr_ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
  attr_ex.srq_type = id->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
  attr_ex.pd = pd;
  const int ret = rdma_create_srq_ex(id, &attr_ex);
  std::memcpy(attr, &attr_ex, sizeof *attr);
  return ret;
}

// The SRQ, then the ID's library-made CQs and channels (ucma_destroy_cqs), as the stock library
// does: rdma_destroy_ep destroys the QP first, whose rdma_destroy_qp leaves an XRC receive ID's
// CQ to this. While the ID still has a QP its CQs stay for rdma_destroy_qp (the stock library
// tries them here too: ibv_destroy_cq fails with EBUSY and the CQ is lost).
UROCE_EXPORT void rdma_destroy_srq(struct rdma_cm_id* id) {
  if (id == nullptr) return;
  if (id->srq != nullptr) ibv_destroy_srq(id->srq);
  id->srq = nullptr;
  if (id->qp == nullptr) destroy_cqs(id);
}

// ===================================================================== devices

// The opened devices, in a malloc'd null-terminated copy; null (errno ENODEV) when no device is
// configured, an empty list when none opened (the stock library skips the devices it could not
// open). The contexts stay open (rdma_get_devices(3): "while the librdmacm is loaded").
UROCE_EXPORT struct ibv_context** rdma_get_devices(int* num_devices) {
  int count = 0;
  ibv_context** all = device_contexts(&count);
  if (num_devices != nullptr) *num_devices = 0;
  if (all == nullptr || count <= 0) {
    errno = ENODEV;
    return nullptr;
  }
  auto** list = static_cast<ibv_context**>(
      std::malloc(sizeof(ibv_context*) * (static_cast<std::size_t>(count) + 1)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  int n = 0;
  for (int i = 0; i < count; ++i) {
    if (all[i] != nullptr) list[n++] = all[i];
  }
  list[n] = nullptr;
  if (num_devices != nullptr) *num_devices = n;
  return list;
}

UROCE_EXPORT void rdma_free_devices(struct ibv_context** list) { std::free(list); }

// ===================================================================== multicast

UROCE_EXPORT int rdma_join_multicast(struct rdma_cm_id* id, struct sockaddr* addr, void* context) {
  (void)context;
  if (id == nullptr || mc_addr_len(addr) == 0) return fail(EINVAL);
  return join_unsupported(id);
}

UROCE_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id* id,
                                        struct rdma_cm_join_mc_attr_ex* mc_join_attr,
                                        void* context) {
  (void)context;
  if (id == nullptr || mc_join_attr == nullptr) return fail(EINVAL);
  if (mc_join_attr->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED) return fail(ENOTSUP);
  if ((mc_join_attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) == 0) return fail(EINVAL);
  if ((mc_join_attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) == 0 ||
      mc_join_attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED) {
    return fail(EINVAL);
  }
  if (mc_addr_len(mc_join_attr->addr) == 0) return fail(EINVAL);
  return join_unsupported(id);
}

// No join ever succeeds, so no group is ever found to leave: EADDRNOTAVAIL, as the stock library
// answers for an address the ID has not joined.
UROCE_EXPORT int rdma_leave_multicast(struct rdma_cm_id* id, struct sockaddr* addr) {
  (void)id;
  if (mc_addr_len(addr) == 0) return fail(EINVAL);
  return fail(EADDRNOTAVAIL);
}

// ===================================================================== ECE

// The stock library keeps these options for the REQ or REP that the ID sends without a QP of its
// own (with a QP, rdma_create_qp replaces them by the provider's, which ibv_query_ece gives
// none of on a device without ECE). uroce's CM sends no ECE: the checks are the library's, and
// nothing is kept because nothing would read it.
UROCE_EXPORT int rdma_set_local_ece(struct rdma_cm_id* id, struct ibv_ece* ece) {
  if (id == nullptr || id->qp != nullptr || ece == nullptr || ece->vendor_id == 0 ||
      ece->comp_mask != 0) {
    return fail(EINVAL);
  }
  return 0;
}

// What the peer's REQ or REP offered: nothing that uroce's CM reads, so no vendor and no options,
// as the stock library reports a peer that offered none.
UROCE_EXPORT int rdma_get_remote_ece(struct rdma_cm_id* id, struct ibv_ece* ece) {
  if (id == nullptr || id->qp != nullptr || ece == nullptr) return fail(EINVAL);
  ece->vendor_id = 0;
  ece->options = 0;
  ece->comp_mask = 0;
  return 0;
}

// The stock library rejects with reason 35 (IBTA's "vendor option not supported"); rdma_reject
// offers no reason, so the peer sees the kernel's default for a consumer's reject (28,
// consumer-defined) until the CM takes one.
UROCE_EXPORT int rdma_reject_ece(struct rdma_cm_id* id, const void* private_data,
                                 uint8_t private_data_len) {
  return rdma_reject(id, private_data, private_data_len);
}

// ===================================================================== rsockets

UROCE_EXPORT int rsocket(int domain, int type, int protocol) {
  // rsocket.c's argument check first (ENOTSUP), then what rs_alloc's rdma_create_id gets from
  // ucma_init without a usable device (ENODEV). For SOCK_DGRAM the stock library opens its UDP
  // socket before it needs a device and fails at rbind/rsendto instead; no rsocket exists here.
  if ((domain != AF_INET && domain != AF_INET6 && domain != AF_IB) ||
      (type != SOCK_STREAM && type != SOCK_DGRAM) ||
      (type == SOCK_STREAM && protocol != 0 && protocol != IPPROTO_TCP) ||
      (type == SOCK_DGRAM && protocol != 0 && protocol != IPPROTO_UDP)) {
    return fail(ENOTSUP);
  }
  return fail(ENODEV);
}

UROCE_EXPORT int rbind(int, const struct sockaddr*, socklen_t) { return not_an_rsocket(); }
UROCE_EXPORT int rlisten(int, int) { return not_an_rsocket(); }
UROCE_EXPORT int raccept(int, struct sockaddr*, socklen_t*) { return not_an_rsocket(); }
UROCE_EXPORT int rconnect(int, const struct sockaddr*, socklen_t) { return not_an_rsocket(); }
UROCE_EXPORT int rshutdown(int, int) { return not_an_rsocket(); }
// rclose returns EBADF itself (not -1) for a descriptor that is not an rsocket, errno untouched.
UROCE_EXPORT int rclose(int) { return EBADF; }

UROCE_EXPORT ssize_t rrecv(int, void*, size_t, int) { return not_an_rsocket(); }
UROCE_EXPORT ssize_t rrecvfrom(int, void*, size_t, int, struct sockaddr*, socklen_t*) {
  return not_an_rsocket();
}
// Control messages are refused (ENOTSUP) before the descriptor is looked at.
UROCE_EXPORT ssize_t rrecvmsg(int, struct msghdr* msg, int) {
  if (msg != nullptr && msg->msg_control != nullptr && msg->msg_controllen != 0) {
    return fail(ENOTSUP);
  }
  return not_an_rsocket();
}
UROCE_EXPORT ssize_t rsend(int, const void*, size_t, int) { return not_an_rsocket(); }
UROCE_EXPORT ssize_t rsendto(int, const void*, size_t, int, const struct sockaddr*, socklen_t) {
  return not_an_rsocket();
}
UROCE_EXPORT ssize_t rsendmsg(int, const struct msghdr* msg, int) {
  if (msg != nullptr && msg->msg_control != nullptr && msg->msg_controllen != 0) {
    return fail(ENOTSUP);
  }
  return not_an_rsocket();
}
UROCE_EXPORT ssize_t rread(int, void*, size_t) { return not_an_rsocket(); }
UROCE_EXPORT ssize_t rreadv(int, const struct iovec*, int) { return not_an_rsocket(); }
UROCE_EXPORT ssize_t rwrite(int, const void*, size_t) { return not_an_rsocket(); }
UROCE_EXPORT ssize_t rwritev(int, const struct iovec*, int) { return not_an_rsocket(); }

// With no rsocket among them, the stock rpoll polls the descriptors as poll(2) does (it spins a
// little first, then sleeps in poll with its own wake-up descriptor added).
UROCE_EXPORT int rpoll(struct pollfd* fds, nfds_t nfds, int timeout) {
  return poll(fds, nfds, timeout);
}

UROCE_EXPORT int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds,
                         struct timeval* timeout) {
  return select_via_poll(nfds, readfds, writefds, exceptfds, timeout);
}

UROCE_EXPORT int rgetpeername(int, struct sockaddr*, socklen_t*) { return not_an_rsocket(); }
UROCE_EXPORT int rgetsockname(int, struct sockaddr*, socklen_t*) { return not_an_rsocket(); }
UROCE_EXPORT int rsetsockopt(int, int, int, const void*, socklen_t) { return not_an_rsocket(); }
UROCE_EXPORT int rgetsockopt(int, int, int, void*, socklen_t*) { return not_an_rsocket(); }
UROCE_EXPORT int rfcntl(int, int, ...) { return not_an_rsocket(); }

UROCE_EXPORT off_t riomap(int, void*, size_t, int, int, off_t) { return not_an_rsocket(); }
UROCE_EXPORT int riounmap(int, void*, size_t) { return not_an_rsocket(); }
// size_t, so the stock library's -1 is SIZE_MAX.
UROCE_EXPORT size_t riowrite(int, const void*, size_t, off_t, int) {
  return static_cast<size_t>(not_an_rsocket());
}

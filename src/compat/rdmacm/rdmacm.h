// The drop-in librdmacm.so.1: what its two files share.
//
// cma.cc is the connection manager proper: event channels, IDs, addresses, connect / accept /
// disconnect, QPs on IDs, synchronous IDs (a null channel), all driven through the CM that runs
// in each device's coordinator (proto/devd_cm_protocol.h). extras.cc is what is built from
// those calls or does not need the CM: rdma_getaddrinfo, rdma_create_ep, SRQs on IDs, the device
// list, the rsocket calls and multicast (which a uroce device does not offer: they fail as the
// stock library fails without a usable device), ECE, rdma_event_str.
#pragma once

#pragma GCC visibility push(default)
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#pragma GCC visibility pop

#define UROCE_EXPORT extern "C" __attribute__((visibility("default")))

namespace uroce::rdmacm {

// What rdma_create_ep keeps on an ID for rdma_get_request (a passive endpoint's new
// connections get a QP, and the SRQ, from it) and rdma_destroy_ep.
struct EpDefaults {
  ibv_pd* pd = nullptr;
  bool has_qp_init = false;
  ibv_qp_init_attr qp_init{};
};
// The ID's endpoint defaults (every ID has them, zeroed at creation).
EpDefaults& ep_defaults(rdma_cm_id* id);

// The verbs contexts of the configured devices, opened once (rdma_get_devices); null entries for
// devices that did not open. The array ends with a null pointer.
ibv_context** device_contexts(int* count);

}  // namespace uroce::rdmacm

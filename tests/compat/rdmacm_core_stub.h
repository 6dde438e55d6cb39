// A stand-in for the drop-in librdmacm's core (src/compat/rdmacm/cma.cc), for the tests of
// extras.cc only: the core calls that extras.cc makes (rdma_create_id, rdma_bind_addr,
// rdma_resolve_addr, rdma_resolve_route, rdma_create_qp, rdma_destroy_qp, rdma_destroy_id,
// rdma_reject) and rdmacm.h's ep_defaults() and device_contexts(), each recording the call and
// doing what the test set up. Nothing here talks to a CM: so extras.cc is tested on its own,
// whatever state the core is in.
#pragma once

#include <string>
#include <vector>

#include "compat/rdmacm/rdmacm.h"

namespace uroce::rdmacm::stub {

struct State {
  // What the calls did, in order: "create_id ps=262", "bind AF_INET:7471",
  // "resolve_addr timeout=2000", "resolve_route timeout=2000", "create_qp pd=set qp_type=2",
  // "destroy_qp", "destroy_id srq=none", "reject len=3".
  std::vector<std::string> calls;
  // The call (by its first word) that fails, and its errno.
  std::string fail_call;
  int fail_errno = 0;
  // What an ID gets when it is bound or its address resolved: its device and default PD.
  ibv_context* verbs = nullptr;
  ibv_pd* default_pd = nullptr;
  // What the last rdma_create_qp got.
  ibv_pd* qp_pd = nullptr;
  ibv_qp_init_attr qp_attr{};
  // device_contexts(): the array (ending with a null pointer) and its count.
  std::vector<ibv_context*> contexts;
  int contexts_count = 0;
  // IDs created and not yet destroyed.
  int live_ids = 0;
};

// The state (reset() before each test).
State& state();
void reset();

}  // namespace uroce::rdmacm::stub

// The test-only core of rdmacm_core_stub.h.
#include "compat/rdmacm_core_stub.h"

#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace uroce::rdmacm::stub {

namespace {

// An ID as the stub makes it: the public struct first (extras.cc sees only that), then what
// rdmacm.h says every ID has.
struct StubId {
  rdma_cm_id id{};
  EpDefaults defaults;
};

// A QP that is never used through verbs: only its address is seen.
ibv_qp fake_qp{};

bool fails(const char* call) {
  State& s = state();
  if (s.fail_call != call) return false;
  errno = s.fail_errno;
  return true;
}

std::string describe(const sockaddr* addr) {
  if (addr == nullptr) return "none";
  if (addr->sa_family == AF_INET) {
    sockaddr_in in;
    std::memcpy(&in, addr, sizeof in);
    return "AF_INET:" + std::to_string(ntohs(in.sin_port));
  }
  if (addr->sa_family == AF_INET6) {
    sockaddr_in6 in6;
    std::memcpy(&in6, addr, sizeof in6);
    return "AF_INET6:" + std::to_string(ntohs(in6.sin6_port));
  }
  return "family " + std::to_string(addr->sa_family);
}

socklen_t addr_len(const sockaddr* addr) {
  return addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

void take_device(rdma_cm_id* id) {
  id->verbs = state().verbs;
  id->pd = state().default_pd;
}

}  // namespace

State& state() {
  static State s;
  return s;
}

void reset() { state() = State{}; }

}  // namespace uroce::rdmacm::stub

namespace uroce::rdmacm {

EpDefaults& ep_defaults(rdma_cm_id* id) { return reinterpret_cast<stub::StubId*>(id)->defaults; }

ibv_context** device_contexts(int* count) {
  stub::State& s = stub::state();
  *count = s.contexts_count;
  return s.contexts.empty() ? nullptr : s.contexts.data();
}

}  // namespace uroce::rdmacm

using namespace uroce::rdmacm::stub;  // NOLINT: the stub's helpers, for the C entry points

extern "C" {

int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                   rdma_port_space ps) {
  state().calls.push_back("create_id ps=" + std::to_string(ps) +
                          (channel == nullptr ? "" : " channel"));
  if (fails("create_id")) return -1;
  auto* s = new StubId;
  s->id.context = context;
  s->id.ps = ps;
  // rdma-core's rdma_create_id: UD for the UDP and IPoIB port spaces, else RC.
  s->id.qp_type = (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB) ? IBV_QPT_UD : IBV_QPT_RC;
  ++state().live_ids;
  *id = &s->id;
  return 0;
}

int rdma_destroy_id(rdma_cm_id* id) {
  state().calls.push_back(std::string("destroy_id") + (id->srq != nullptr ? " srq=set" : "") +
                          (id->qp != nullptr ? " qp=set" : ""));
  --state().live_ids;
  delete reinterpret_cast<StubId*>(id);
  return 0;
}

int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  state().calls.push_back("bind " + describe(addr));
  if (fails("bind")) return -1;
  if (addr != nullptr) std::memcpy(&id->route.addr.src_storage, addr, addr_len(addr));
  take_device(id);
  return 0;
}

int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr, int timeout_ms) {
  state().calls.push_back("resolve_addr src=" + describe(src_addr) + " dst=" + describe(dst_addr) +
                          " timeout=" + std::to_string(timeout_ms));
  if (fails("resolve_addr")) return -1;
  if (dst_addr != nullptr) std::memcpy(&id->route.addr.dst_storage, dst_addr, addr_len(dst_addr));
  take_device(id);
  return 0;
}

int rdma_resolve_route(rdma_cm_id*, int timeout_ms) {
  state().calls.push_back("resolve_route timeout=" + std::to_string(timeout_ms));
  if (fails("resolve_route")) return -1;
  return 0;
}

int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  state().calls.push_back(std::string("create_qp pd=") + (pd != nullptr ? "set" : "null") +
                          " qp_type=" + std::to_string(qp_init_attr->qp_type));
  if (fails("create_qp")) return -1;
  state().qp_pd = pd;
  state().qp_attr = *qp_init_attr;
  id->qp = &fake_qp;
  return 0;
}

void rdma_destroy_qp(rdma_cm_id* id) {
  state().calls.push_back("destroy_qp");
  id->qp = nullptr;
}

int rdma_reject(rdma_cm_id*, const void*, uint8_t private_data_len) {
  state().calls.push_back("reject len=" + std::to_string(private_data_len));
  return 0;
}

}  // extern "C"

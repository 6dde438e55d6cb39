// The rest of libibverbs' exports: strings and rate conversions, fork support, sysfs helpers,
// what uroce does not offer (returning what libibverbs returns for a provider without it), the
// provider interface (IBVERBS_PRIVATE_34) and the IBVERBS_1.0 compatibility entry points.
#include <endian.h>
#include <fcntl.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "compat/ibverbs/compat.h"

using namespace uroce;
using namespace uroce::compat;

// ===================================================================== strings

namespace {

// libibverbs' names are tables indexed by the enum's value; "unknown" beyond them.
template <typename E, std::size_t N>
const char* name_in(const char* const (&names)[N], E value) {
  const auto i = static_cast<unsigned>(value);
  return i < N ? names[i] : "unknown";
}

}  // namespace

UROCE_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const kNames[] = {
      "success",
      "local length error",
      "local QP operation error",
      "local EE context operation error",
      "local protection error",
      "Work Request Flushed Error",
      "memory management operation error",
      "bad response error",
      "local access error",
      "remote invalid request error",
      "remote access error",
      "remote operation error",
      "transport retry counter exceeded",
      "RNR retry counter exceeded",
      "local RDD violation error",
      "remote invalid RD request",
      "aborted error",
      "invalid EE context number",
      "invalid EE context state",
      "fatal error",
      "response timeout error",
      "general error",
      "TM error",
      "TM software rendezvous",
  };
  return name_in(kNames, status);
}

UROCE_EXPORT const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const kNames[] = {
      "CQ error",
      "local work queue catastrophic error",
      "invalid request local work queue error",
      "local access violation work queue error",
      "communication established",
      "send queue drained",
      "path migrated",
      "path migration request error",
      "local catastrophic error",
      "port active",
      "port error",
      "LID change",
      "P_Key change",
      "SM change",
      "SRQ catastrophic error",
      "SRQ limit reached",
      "last WQE reached",
      "client reregistration",
      "GID table change",
      "WQ fatal",
  };
  return name_in(kNames, event);
}

UROCE_EXPORT const char* ibv_node_type_str(ibv_node_type node_type) {
  static const char* const kNames[] = {
      "unknown",           "InfiniBand channel adapter",
      "InfiniBand switch", "InfiniBand router",
      "iWARP NIC",         "usNIC",
      "usNIC UDP",         "unspecified",
  };
  return name_in(kNames, node_type);
}

UROCE_EXPORT const char* ibv_port_state_str(ibv_port_state port_state) {
  static const char* const kNames[] = {
      "no state change (NOP)", "down", "init", "armed", "active", "active defer",
  };
  return name_in(kNames, port_state);
}

// ===================================================================== rates

namespace {

// IBTA static rates: enum value, multiple of 2.5 Gb/s (0: none, as libibverbs answers for the
// 25/100/200/300 Gb/s rates), Mb/s.
struct RateRow {
  ibv_rate rate;
  int mult;
  int mbps;
};
constexpr RateRow kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},       {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},       {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},      {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},      {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},    {IBV_RATE_14_GBPS, 0, 14062},
    {IBV_RATE_56_GBPS, 0, 56250},       {IBV_RATE_112_GBPS, 0, 112500},
    {IBV_RATE_168_GBPS, 0, 168750},     {IBV_RATE_25_GBPS, 0, 25781},
    {IBV_RATE_100_GBPS, 0, 103125},     {IBV_RATE_200_GBPS, 0, 206250},
    {IBV_RATE_300_GBPS, 0, 309375},     {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},      {IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},   {IBV_RATE_800_GBPS, 320, 850000},
    {IBV_RATE_1200_GBPS, 480, 1275000},
};

}  // namespace

UROCE_EXPORT int ibv_rate_to_mult(ibv_rate rate) {
  for (const RateRow& r : kRates) {
    if (r.rate == rate) return r.mult != 0 ? r.mult : -1;
  }
  return -1;
}

UROCE_EXPORT ibv_rate mult_to_ibv_rate(int mult) {
  for (const RateRow& r : kRates) {
    if (r.mult != 0 && r.mult == mult) return r.rate;
  }
  return IBV_RATE_MAX;
}

UROCE_EXPORT int ibv_rate_to_mbps(ibv_rate rate) {
  for (const RateRow& r : kRates) {
    if (r.rate == rate) return r.mbps;
  }
  return -1;
}

UROCE_EXPORT ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const RateRow& r : kRates) {
    if (r.mbps == mbps) return r.rate;
  }
  return IBV_RATE_MAX;
}

// ===================================================================== fork support

// uroce pins nothing and maps no device memory: a forked child cannot corrupt a transfer
// (the parent's memory is read and written by the parent's progress thread only).
UROCE_EXPORT int ibv_fork_init(void) { return 0; }
UROCE_EXPORT ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
UROCE_EXPORT int ibv_dontfork_range(void*, size_t) { return 0; }
UROCE_EXPORT int ibv_dofork_range(void*, size_t) { return 0; }

// ===================================================================== sysfs helpers

UROCE_EXPORT const char* ibv_get_sysfs_path(void) {
  const char* env = std::getenv("SYSFS_PATH");
  return env != nullptr && *env != '\0' ? env : "/sys";
}

UROCE_EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  char path[4096];
  if (std::snprintf(path, sizeof path, "%s/%s", dir, file) >= static_cast<int>(sizeof path)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t n = ::read(fd, buf, size);
  ::close(fd);
  if (n <= 0) return -1;
  std::size_t len = static_cast<std::size_t>(n);
  if (len == size) --len;
  if (len > 0 && buf[len - 1] == '\n') --len;
  buf[len] = '\0';
  return static_cast<int>(len);
}

// ===================================================================== not offered by uroce

UROCE_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) {
  errno = EOPNOTSUPP;
  return nullptr;
}

UROCE_EXPORT int ibv_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }
UROCE_EXPORT int ibv_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }

UROCE_EXPORT ibv_dm* ibv_import_dm(ibv_context*, uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}
UROCE_EXPORT void ibv_unimport_dm(ibv_dm*) {}

UROCE_EXPORT int ibv_set_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }
UROCE_EXPORT int ibv_query_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }

// 0: no guarantee that data lands in order (what libibverbs answers for a provider without the
// query).
UROCE_EXPORT int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t) { return 0; }

// No neighbour table: uroce sends over a UDP socket and never needs the peer's MAC.
UROCE_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t[6], uint16_t*) {
  errno = EOPNOTSUPP;
  return -1;
}

// ===================================================================== kernel ABI marshalling

UROCE_EXPORT void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src) {
  std::memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof dst->grh.dgid);
  dst->grh.flow_label = src->grh.flow_label;
  dst->grh.sgid_index = src->grh.sgid_index;
  dst->grh.hop_limit = src->grh.hop_limit;
  dst->grh.traffic_class = src->grh.traffic_class;
  dst->dlid = src->dlid;
  dst->sl = src->sl;
  dst->src_path_bits = src->src_path_bits;
  dst->static_rate = src->static_rate;
  dst->is_global = src->is_global;
  dst->port_num = src->port_num;
}

UROCE_EXPORT void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src) {
  dst->cur_qp_state = static_cast<ibv_qp_state>(src->cur_qp_state);
  dst->path_mtu = static_cast<ibv_mtu>(src->path_mtu);
  dst->path_mig_state = static_cast<ibv_mig_state>(src->path_mig_state);
  dst->qkey = src->qkey;
  dst->rq_psn = src->rq_psn;
  dst->sq_psn = src->sq_psn;
  dst->dest_qp_num = src->dest_qp_num;
  dst->qp_access_flags = src->qp_access_flags;
  dst->cap.max_send_wr = src->max_send_wr;
  dst->cap.max_recv_wr = src->max_recv_wr;
  dst->cap.max_send_sge = src->max_send_sge;
  dst->cap.max_recv_sge = src->max_recv_sge;
  dst->cap.max_inline_data = src->max_inline_data;
  ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
  ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
  dst->pkey_index = src->pkey_index;
  dst->alt_pkey_index = src->alt_pkey_index;
  dst->en_sqd_async_notify = src->en_sqd_async_notify;
  dst->sq_draining = src->sq_draining;
  dst->max_rd_atomic = src->max_rd_atomic;
  dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
  dst->min_rnr_timer = src->min_rnr_timer;
  dst->port_num = src->port_num;
  dst->timeout = src->timeout;
  dst->retry_cnt = src->retry_cnt;
  dst->rnr_retry = src->rnr_retry;
  dst->alt_port_num = src->alt_port_num;
  dst->alt_timeout = src->alt_timeout;
}

// struct ibv_sa_path_rec (infiniband/sa.h) <-> the kernel's ib_user_path_rec.
#include <infiniband/sa.h>

namespace {
// The fields both path-record layouts share under the same names.
template <class To, class From>
void copy_path_rec_fields(To* dst, const From* src) {
  dst->dlid = src->dlid;
  dst->slid = src->slid;
  dst->raw_traffic = src->raw_traffic;
  dst->flow_label = src->flow_label;
  dst->hop_limit = src->hop_limit;
  dst->traffic_class = src->traffic_class;
  dst->reversible = src->reversible;
  dst->numb_path = src->numb_path;
  dst->pkey = src->pkey;
  dst->sl = src->sl;
  dst->mtu_selector = src->mtu_selector;
  dst->mtu = src->mtu;
  dst->rate_selector = src->rate_selector;
  dst->rate = src->rate;
  dst->packet_life_time = src->packet_life_time;
  dst->preference = src->preference;
  dst->packet_life_time_selector = src->packet_life_time_selector;
}
}  // namespace

UROCE_EXPORT void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src) {
  std::memcpy(dst->dgid.raw, src->dgid, sizeof dst->dgid);
  std::memcpy(dst->sgid.raw, src->sgid, sizeof dst->sgid);
  copy_path_rec_fields(dst, src);
}

UROCE_EXPORT void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src) {
  std::memcpy(dst->dgid, src->dgid.raw, sizeof src->dgid);
  std::memcpy(dst->sgid, src->sgid.raw, sizeof src->sgid);
  copy_path_rec_fields(dst, src);
}

// ===================================================================== IBVERBS_PRIVATE_34

// Provider libraries (libmlx5, libefa, ...) that an application links register themselves from
// an ELF constructor. uroce serves its own devices only: the registration is accepted and
// ignored, so that these libraries load.
UROCE_EXPORT void verbs_register_driver_34(const void*) {}
// IBVERBS_1.1 (non-default): the pre-rdma-core provider registration, ignored likewise.
UROCE_EXPORT void uroce_compat_ibv_register_driver(const char*, void*)
    __attribute__((symver("ibv_register_driver@IBVERBS_1.1")));
void uroce_compat_ibv_register_driver(const char*, void*) {}

UROCE_EXPORT void verbs_set_ops(ibv_context*, const void*) {}
UROCE_EXPORT void verbs_uninit_context(void*) {}
UROCE_EXPORT void verbs_init_cq(ibv_cq*, ibv_context*, ibv_comp_channel*, void*) {}
UROCE_EXPORT bool verbs_allow_disassociate_destroy(int) { return false; }
UROCE_EXPORT void* _verbs_init_and_alloc_context(ibv_device*, int, size_t, void*, uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}
UROCE_EXPORT ibv_context* verbs_open_device(ibv_device*, void*) {
  errno = EOPNOTSUPP;
  return nullptr;
}
UROCE_EXPORT unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void*) {
  return num_attrs;
}
UROCE_EXPORT int execute_ioctl(ibv_context*, void*) { return EOPNOTSUPP; }
UROCE_EXPORT void __verbs_log(void*, int, const char*, ...) {}
UROCE_EXPORT int ibv_read_ibdev_sysfs_file(char*, size_t, void*, const char*, ...) {
  errno = ENOENT;
  return -1;
}

// The provider command helpers talk to the kernel's uverbs device, which uroce does not use.
#define UROCE_CMD(name) \
  UROCE_EXPORT int name() { return EOPNOTSUPP; }
UROCE_CMD(ibv_cmd_advise_mr)
UROCE_CMD(ibv_cmd_alloc_dm)
UROCE_CMD(ibv_cmd_alloc_mw)
UROCE_CMD(ibv_cmd_alloc_pd)
UROCE_CMD(ibv_cmd_attach_mcast)
UROCE_CMD(ibv_cmd_close_xrcd)
UROCE_CMD(ibv_cmd_create_ah)
UROCE_CMD(ibv_cmd_create_counters)
UROCE_CMD(ibv_cmd_create_cq)
UROCE_CMD(ibv_cmd_create_cq_ex)
UROCE_CMD(ibv_cmd_create_flow)
UROCE_CMD(ibv_cmd_create_flow_action_esp)
UROCE_CMD(ibv_cmd_create_qp)
UROCE_CMD(ibv_cmd_create_qp_ex)
UROCE_CMD(ibv_cmd_create_qp_ex2)
UROCE_CMD(ibv_cmd_create_rwq_ind_table)
UROCE_CMD(ibv_cmd_create_srq)
UROCE_CMD(ibv_cmd_create_srq_ex)
UROCE_CMD(ibv_cmd_create_wq)
UROCE_CMD(ibv_cmd_dealloc_mw)
UROCE_CMD(ibv_cmd_dealloc_pd)
UROCE_CMD(ibv_cmd_dereg_mr)
UROCE_CMD(ibv_cmd_destroy_ah)
UROCE_CMD(ibv_cmd_destroy_counters)
UROCE_CMD(ibv_cmd_destroy_cq)
UROCE_CMD(ibv_cmd_destroy_flow)
UROCE_CMD(ibv_cmd_destroy_flow_action)
UROCE_CMD(ibv_cmd_destroy_qp)
UROCE_CMD(ibv_cmd_destroy_rwq_ind_table)
UROCE_CMD(ibv_cmd_destroy_srq)
UROCE_CMD(ibv_cmd_destroy_wq)
UROCE_CMD(ibv_cmd_detach_mcast)
UROCE_CMD(ibv_cmd_free_dm)
UROCE_CMD(ibv_cmd_get_context)
UROCE_CMD(ibv_cmd_modify_cq)
UROCE_CMD(ibv_cmd_modify_flow_action_esp)
UROCE_CMD(ibv_cmd_modify_qp)
UROCE_CMD(ibv_cmd_modify_qp_ex)
UROCE_CMD(ibv_cmd_modify_srq)
UROCE_CMD(ibv_cmd_modify_wq)
UROCE_CMD(ibv_cmd_open_qp)
UROCE_CMD(ibv_cmd_open_xrcd)
UROCE_CMD(ibv_cmd_poll_cq)
UROCE_CMD(ibv_cmd_post_recv)
UROCE_CMD(ibv_cmd_post_send)
UROCE_CMD(ibv_cmd_post_srq_recv)
UROCE_CMD(ibv_cmd_query_context)
UROCE_CMD(ibv_cmd_query_device_any)
UROCE_CMD(ibv_cmd_query_mr)
UROCE_CMD(ibv_cmd_query_port)
UROCE_CMD(ibv_cmd_query_qp)
UROCE_CMD(ibv_cmd_query_srq)
UROCE_CMD(ibv_cmd_read_counters)
UROCE_CMD(ibv_cmd_reg_dm_mr)
UROCE_CMD(ibv_cmd_reg_dmabuf_mr)
UROCE_CMD(ibv_cmd_reg_mr)
UROCE_CMD(ibv_cmd_req_notify_cq)
UROCE_CMD(ibv_cmd_rereg_mr)
UROCE_CMD(ibv_cmd_resize_cq)
#undef UROCE_CMD

// ===================================================================== IBVERBS_1.0 compatibility

// The 1.0 entry points take the pre-2006 struct layouts (libibverbs' compat-1_0.c translates
// them for a real provider). uroce does not translate: each one fails cleanly, as libibverbs'
// own 1.0 layer fails for a device it cannot wrap.
#define UROCE_COMPAT_PTR(name)                                                                \
  UROCE_EXPORT void* uroce_compat_1_0_##name() __attribute__((symver(#name "@IBVERBS_1.0"))); \
  void* uroce_compat_1_0_##name() {                                                           \
    errno = EOPNOTSUPP;                                                                       \
    return nullptr;                                                                           \
  }
#define UROCE_COMPAT_INT(name)                                                              \
  UROCE_EXPORT int uroce_compat_1_0_##name() __attribute__((symver(#name "@IBVERBS_1.0"))); \
  int uroce_compat_1_0_##name() {                                                           \
    errno = EOPNOTSUPP;                                                                     \
    return EOPNOTSUPP;                                                                      \
  }
#define UROCE_COMPAT_VOID(name)                                                              \
  UROCE_EXPORT void uroce_compat_1_0_##name() __attribute__((symver(#name "@IBVERBS_1.0"))); \
  void uroce_compat_1_0_##name() {}

UROCE_COMPAT_VOID(ibv_ack_async_event)
UROCE_COMPAT_VOID(ibv_ack_cq_events)
UROCE_COMPAT_PTR(ibv_alloc_pd)
UROCE_COMPAT_INT(ibv_attach_mcast)
UROCE_COMPAT_INT(ibv_close_device)
UROCE_COMPAT_PTR(ibv_create_ah)
UROCE_COMPAT_PTR(ibv_create_cq)
UROCE_COMPAT_PTR(ibv_create_qp)
UROCE_COMPAT_PTR(ibv_create_srq)
UROCE_COMPAT_INT(ibv_dealloc_pd)
UROCE_COMPAT_INT(ibv_dereg_mr)
UROCE_COMPAT_INT(ibv_destroy_ah)
UROCE_COMPAT_INT(ibv_destroy_cq)
UROCE_COMPAT_INT(ibv_destroy_qp)
UROCE_COMPAT_INT(ibv_destroy_srq)
UROCE_COMPAT_INT(ibv_detach_mcast)
UROCE_COMPAT_VOID(ibv_free_device_list)
UROCE_COMPAT_INT(ibv_get_async_event)
UROCE_COMPAT_INT(ibv_get_cq_event)
UROCE_COMPAT_INT(ibv_get_device_guid)
UROCE_COMPAT_PTR(ibv_get_device_list)
UROCE_COMPAT_PTR(ibv_get_device_name)
UROCE_COMPAT_INT(ibv_modify_qp)
UROCE_COMPAT_INT(ibv_modify_srq)
UROCE_COMPAT_PTR(ibv_open_device)
UROCE_COMPAT_INT(ibv_query_device)
UROCE_COMPAT_INT(ibv_query_gid)
UROCE_COMPAT_INT(ibv_query_pkey)
UROCE_COMPAT_INT(ibv_query_port)
UROCE_COMPAT_INT(ibv_query_qp)
UROCE_COMPAT_INT(ibv_query_srq)
UROCE_COMPAT_PTR(ibv_reg_mr)
UROCE_COMPAT_INT(ibv_resize_cq)

/* ABI-level checks of the drop-in libibverbs.so.1, written against the distribution's
 * <infiniband/verbs.h> as any libibverbs application is: the inline verbs, the extended CQ and
 * QP interfaces (ibv_start_poll, ibv_wr_*), completion channels, async events, and the errors
 * of what uroce does not offer. One process, one device, an RC pair connected to itself (and a
 * second pair for the error cases). Run with UROCE_DEVICES=<one loopback address>.
 * Every wait is bounded (alarm). Exit status 0 when every check passed. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/ib_user_sa.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "compat_test.h"

/* Exported by libibverbs (IBVERBS_1.0) for the kernel's SA path records; rdma-core declares them
 * in a header Debian does not ship (infiniband/marshall.h). */
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec* dst, struct ib_user_path_rec* src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec* dst, struct ibv_sa_path_rec* src);

/* Destroys two QPs and then their CQ from another thread (see the teardown). */
struct destroy_job {
  struct ibv_qp* qp1;
  struct ibv_qp* qp2;
  struct ibv_cq* cq;
  int done;
  int result;
};

static void* destroy_qps_and_cq(void* arg) {
  struct destroy_job* j = arg;
  int r = ibv_destroy_qp(j->qp1);
  if (r == 0) r = ibv_destroy_qp(j->qp2);
  if (r == 0) r = ibv_destroy_cq(j->cq);
  j->result = r;
  __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

enum { kBuf = 4096 };

struct side {
  struct ibv_qp* qp;
  struct ibv_qp_ex* qpx;
  struct ibv_cq_ex* cq;
  struct ibv_mr* mr;
  uint8_t* buf;
};

/* IBTA 1.5 FLUSH as rdma-core 45 has it (the distribution's rdma-core 44 headers lack it): it
 * appended wr_flush to struct ibv_qp_ex, and these values. An application built with its
 * headers calls the function right after the struct this test was compiled with. */
struct qp_ex_v45 {
  struct ibv_qp_ex ex;
  void (*wr_flush)(struct ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr, size_t len,
                   uint8_t type, uint8_t level);
};
enum {
  kQpExWithFlush = 1 << 11,    /* IBV_QP_EX_WITH_FLUSH */
  kAccessFlushGlobal = 1 << 8, /* IBV_ACCESS_FLUSH_GLOBAL */
  kWcFlush = 8,                /* IBV_WC_FLUSH */
  kFlushGlobal = 1,            /* IBV_FLUSH_GLOBAL (placement type) */
  kFlushRange = 0,             /* IBV_FLUSH_RANGE (selectivity level) */
};
#define kDeviceFlushGlobal (1ULL << 38)     /* IB_UVERBS_DEVICE_FLUSH_GLOBAL */
#define kDeviceFlushPersistent (1ULL << 39) /* IB_UVERBS_DEVICE_FLUSH_PERSISTENT */
#define kDeviceAtomicWrite (1ULL << 40)     /* IB_UVERBS_DEVICE_ATOMIC_WRITE */

static void connect_qp(struct ibv_qp* qp, uint32_t dest_qpn, const union ibv_gid* gid) {
  rc_connect(qp, dest_qpn, gid,
             IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                 IBV_ACCESS_LOCAL_WRITE | kAccessFlushGlobal,
             100, 4);
  CHECK(qp->state == IBV_QPS_RTS);
}

/* Polls `cq` with the extended interface until `want` completions came; records them. */
struct seen {
  uint64_t wr_id;
  enum ibv_wc_status status;
  enum ibv_wc_opcode opcode;
  uint32_t byte_len;
  unsigned int wc_flags;
  uint32_t qp_num;
  __be32 imm;
};

static int poll_ex(struct ibv_cq_ex* cq, struct seen* out, int want) {
  int got = 0;
  while (got < want) {
    struct ibv_poll_cq_attr attr = {0};
    int ret = ibv_start_poll(cq, &attr);
    if (ret == ENOENT) continue; /* alarm() bounds this loop */
    REQUIRE(ret == 0);
    do {
      struct seen* s = &out[got++];
      s->wr_id = cq->wr_id;
      s->status = cq->status;
      s->opcode = ibv_wc_read_opcode(cq);
      s->byte_len = ibv_wc_read_byte_len(cq);
      s->wc_flags = ibv_wc_read_wc_flags(cq);
      s->qp_num = ibv_wc_read_qp_num(cq);
      s->imm = ibv_wc_read_imm_data(cq);
      if (got == want) break;
      ret = ibv_next_poll(cq);
    } while (ret == 0);
    ibv_end_poll(cq);
  }
  return got;
}

static struct seen* find(struct seen* s, int n, uint64_t wr_id) {
  for (int i = 0; i < n; ++i) {
    if (s[i].wr_id == wr_id) return &s[i];
  }
  return NULL;
}

/* A path record survives the trip to the kernel's layout and back, every field. */
static void check_path_rec_round_trip(void) {
  struct ibv_sa_path_rec a, b;
  struct ib_user_path_rec k;
  memset(&a, 0, sizeof a);
  memset(&b, 0xa5, sizeof b);
  for (int i = 0; i < 16; ++i) {
    a.dgid.raw[i] = (uint8_t)(i + 1);
    a.sgid.raw[i] = (uint8_t)(0x40 + i);
  }
  a.dlid = htons(0x1234);
  a.slid = htons(0x4321);
  a.raw_traffic = 1;
  a.flow_label = htonl(0xabcde);
  a.hop_limit = 7;
  a.traffic_class = 9;
  a.reversible = 1;
  a.numb_path = 3;
  a.pkey = htons(0xffff);
  a.sl = 2;
  a.mtu_selector = 1;
  a.mtu = 3;
  a.rate_selector = 2;
  a.rate = 6;
  a.packet_life_time_selector = 1;
  a.packet_life_time = 18;
  a.preference = 4;
  ibv_copy_path_rec_to_kern(&k, &a);
  CHECK(memcmp(k.dgid, a.dgid.raw, 16) == 0);
  CHECK(k.dlid == a.dlid && k.packet_life_time == 18 && k.preference == 4);
  ibv_copy_path_rec_from_kern(&b, &k);
  CHECK(memcmp(b.dgid.raw, a.dgid.raw, 16) == 0 && memcmp(b.sgid.raw, a.sgid.raw, 16) == 0);
  CHECK(b.dlid == a.dlid && b.slid == a.slid && b.raw_traffic == a.raw_traffic);
  CHECK(b.flow_label == a.flow_label && b.hop_limit == a.hop_limit);
  CHECK(b.traffic_class == a.traffic_class && b.reversible == a.reversible);
  CHECK(b.numb_path == a.numb_path && b.pkey == a.pkey && b.sl == a.sl);
  CHECK(b.mtu_selector == a.mtu_selector && b.mtu == a.mtu && b.rate_selector == a.rate_selector);
  CHECK(b.rate == a.rate && b.packet_life_time_selector == a.packet_life_time_selector);
  CHECK(b.packet_life_time == a.packet_life_time && b.preference == a.preference);
}

/* A UD QP of `cq` (receives) and `scq` (sends) in RTS with Q_Key 0x11. */
static struct ibv_qp* ud_qp(struct ibv_pd* pd, struct ibv_cq* scq, struct ibv_cq* cq) {
  struct ibv_qp_init_attr qa;
  memset(&qa, 0, sizeof qa);
  qa.send_cq = scq;
  qa.recv_cq = cq;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.qp_type = IBV_QPT_UD;
  struct ibv_qp* qp = ibv_create_qp(pd, &qa);
  REQUIRE(qp != NULL);
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = 0x11;
  REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0);
  a.qp_state = IBV_QPS_RTR;
  REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0);
  a.qp_state = IBV_QPS_RTS;
  REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
  return qp;
}

/* UD datagrams from the device to itself over IPv4: a receive completion's sl is 2, where
 * mlx5 reports the L3 type of a RoCE v2 datagram (2 IPv4, 1 IPv6) and UCX's UD transport reads
 * it (`wc.sl & 7`) to find the destination address in the GRH area; the same through
 * ibv_wc_read_sl of an extended CQ. Send completions keep 0, and an AH made from the receive
 * completion gets sl 0, not the L3 type. */
static void check_ud_sl(struct ibv_context* ctx, struct ibv_pd* pd, const union ibv_gid* gid) {
  struct ibv_cq* scq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
  struct ibv_cq* rcq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
  struct ibv_cq_init_attr_ex xa;
  memset(&xa, 0, sizeof xa);
  xa.cqe = 8;
  xa.wc_flags = IBV_WC_STANDARD_FLAGS;
  struct ibv_cq_ex* xcq = ibv_create_cq_ex(ctx, &xa);
  REQUIRE(scq != NULL && rcq != NULL && xcq != NULL);
  struct ibv_qp* qa = ud_qp(pd, scq, rcq);
  struct ibv_qp* qb = ud_qp(pd, scq, ibv_cq_ex_to_cq(xcq));
  static char buf[3][256];
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(mr != NULL);
  struct ibv_sge rs[2] = {{(uintptr_t)buf[1], 256, mr->lkey}, {(uintptr_t)buf[2], 256, mr->lkey}};
  struct ibv_recv_wr rwr[2];
  memset(rwr, 0, sizeof rwr);
  struct ibv_recv_wr* bad_rwr = NULL;
  for (int i = 0; i < 2; ++i) {
    rwr[i].wr_id = 100 + i;
    rwr[i].sg_list = &rs[i];
    rwr[i].num_sge = 1;
  }
  REQUIRE(ibv_post_recv(qa, &rwr[0], &bad_rwr) == 0);
  REQUIRE(ibv_post_recv(qb, &rwr[1], &bad_rwr) == 0);
  struct ibv_ah_attr aa;
  memset(&aa, 0, sizeof aa);
  aa.is_global = 1;
  aa.grh.dgid = *gid;
  aa.grh.hop_limit = 64;
  aa.port_num = 1;
  struct ibv_ah* ah = ibv_create_ah(pd, &aa);
  REQUIRE(ah != NULL);
  memcpy(buf[0], "datagram", 8);
  struct ibv_sge ss = {(uintptr_t)buf[0], 16, mr->lkey};
  struct ibv_send_wr swr;
  memset(&swr, 0, sizeof swr);
  swr.sg_list = &ss;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  swr.wr.ud.ah = ah;
  swr.wr.ud.remote_qkey = 0x11;
  struct ibv_send_wr* bad_swr = NULL;
  for (int i = 0; i < 2; ++i) {
    swr.wr_id = 200 + i;
    swr.wr.ud.remote_qpn = i == 0 ? qa->qp_num : qb->qp_num;
    REQUIRE(ibv_post_send(qa, &swr, &bad_swr) == 0);
  }
  struct ibv_wc wc;
  for (int i = 0; i < 2; ++i) {
    int got;
    do {
      got = ibv_poll_cq(scq, 1, &wc);
    } while (got == 0);
    CHECK(got == 1 && wc.status == IBV_WC_SUCCESS && wc.sl == 0);
  }
  int got;
  do {
    got = ibv_poll_cq(rcq, 1, &wc);
  } while (got == 0);
  REQUIRE(got == 1);
  CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 100 && (wc.wc_flags & IBV_WC_GRH) != 0);
  CHECK(wc.sl == 2);
  struct ibv_ah_attr back;
  REQUIRE(ibv_init_ah_from_wc(ctx, 1, &wc, (struct ibv_grh*)buf[1], &back) == 0);
  CHECK(back.sl == 0 && back.is_global == 1 && memcmp(back.grh.dgid.raw, gid->raw, 16) == 0);
  struct ibv_poll_cq_attr pa = {0};
  int rc;
  do {
    rc = ibv_start_poll(xcq, &pa);
  } while (rc == ENOENT);
  REQUIRE(rc == 0);
  CHECK(xcq->status == IBV_WC_SUCCESS && xcq->wr_id == 101);
  CHECK((ibv_wc_read_wc_flags(xcq) & IBV_WC_GRH) != 0);
  CHECK(ibv_wc_read_sl(xcq) == 2);
  ibv_end_poll(xcq);
  CHECK(memcmp(buf[2] + 40, "datagram", 8) == 0);
  CHECK(ibv_destroy_ah(ah) == 0);
  CHECK(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0);
  CHECK(ibv_dereg_mr(mr) == 0);
  CHECK(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0);
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(xcq)) == 0);
}

int main(void) {
  alarm(60); /* a hang is a failure */
  check_path_rec_round_trip();

  /* ---- device list and context ---- */
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  REQUIRE(list != NULL && n >= 1);
  CHECK(list[n] == NULL);
  CHECK(ibv_get_device_name(list[0]) != NULL);
  CHECK(ibv_get_device_guid(list[0]) != 0);
  CHECK(ibv_get_device_index(list[0]) == 0);
  CHECK(list[0]->node_type == IBV_NODE_CA);
  struct ibv_context* ctx = ibv_open_device(list[0]);
  REQUIRE(ctx != NULL);
  CHECK(verbs_get_ctx(ctx) != NULL);
  /* One completion vector per online CPU, as rxe (UCX asks for its CPU's). */
  CHECK(ctx->num_comp_vectors == (int)sysconf(_SC_NPROCESSORS_ONLN));
  CHECK(ctx->async_fd >= 0);
  /* The async fd as the application first sees it, in an epoll set (as UCX puts it right
   * after ibv_open_device): it must stay that file for the context's life, and the set must
   * report the async event below (after ibv_alloc_pd has brought the device up). */
  const int async_fd0 = ctx->async_fd;
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  REQUIRE(ep >= 0);
  struct epoll_event epe = {.events = EPOLLIN, .data = {.u64 = 0xa5}};
  REQUIRE(epoll_ctl(ep, EPOLL_CTL_ADD, ctx->async_fd, &epe) == 0);

  /* ---- queries ---- */
  struct ibv_device_attr_ex dx;
  REQUIRE(ibv_query_device_ex(ctx, NULL, &dx) == 0);
  CHECK(dx.orig_attr.vendor_id == 0xffffff); /* as rxe: perftest's generic paths */
  CHECK(dx.orig_attr.phys_port_cnt == 1);
  CHECK(dx.orig_attr.atomic_cap == IBV_ATOMIC_HCA);
  CHECK(dx.orig_attr.node_guid == ibv_get_device_guid(list[0]));
  struct ibv_device_attr da;
  REQUIRE(ibv_query_device(ctx, &da) == 0);
  CHECK(da.max_qp_wr == dx.orig_attr.max_qp_wr);
  /* Memory windows of type 1 and 2B, as rxe; no fast-register MRs (rxe has them). */
  const unsigned int mw_caps = IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  const unsigned int no_mem_mgt = IBV_DEVICE_MEM_MGT_EXTENSIONS | IBV_DEVICE_MEM_WINDOW_TYPE_2A;
  CHECK((da.device_cap_flags & mw_caps) == mw_caps);
  CHECK((dx.device_cap_flags_ex & mw_caps) == mw_caps);
  CHECK((da.device_cap_flags & no_mem_mgt) == 0);
  CHECK((dx.device_cap_flags_ex & no_mem_mgt) == 0);
  CHECK(da.max_mw == 256 * 1024 && da.max_fmr == 0);
  /* IBTA 1.5: ATOMIC WRITE and FLUSH to global visibility, as rxe; no persistent memory. */
  CHECK((dx.device_cap_flags_ex & (kDeviceFlushGlobal | kDeviceAtomicWrite)) ==
        (kDeviceFlushGlobal | kDeviceAtomicWrite));
  CHECK((dx.device_cap_flags_ex & kDeviceFlushPersistent) == 0);
  struct ibv_port_attr pa;
  REQUIRE(ibv_query_port(ctx, 1, &pa) == 0);
  CHECK(pa.state == IBV_PORT_ACTIVE);
  CHECK(pa.link_layer == IBV_LINK_LAYER_ETHERNET);
  CHECK(pa.gid_tbl_len >= 1);
  CHECK(ibv_query_port(ctx, 2, &pa) != 0);
  /* A loopback address: lo has no speed, and uroce reads it as 25 Gb/s (1X EDR), about what
   * it moves there (not the kernel's 1X SDR for an unknown speed). */
  CHECK(pa.active_width == 1 && pa.active_speed == 32);
  union ibv_gid gid;
  REQUIRE(ibv_query_gid(ctx, 1, 0, &gid) == 0);
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  CHECK(memcmp(gid.raw, mapped, 12) == 0); /* IPv4-mapped, as rxe shows an IPv4 netdev */
  struct ibv_gid_entry ge;
  REQUIRE(ibv_query_gid_ex(ctx, 1, 0, &ge, 0) == 0);
  CHECK(ge.gid_type == IBV_GID_TYPE_ROCE_V2);
  CHECK(ge.ndev_ifindex == if_nametoindex("lo")); /* a loopback address: lo's index */
  CHECK(memcmp(ge.gid.raw, gid.raw, 16) == 0);
  CHECK(ibv_query_gid_ex(ctx, 1, 1, &ge, 0) == ENODATA); /* an empty entry */
  struct ibv_gid_entry table[4];
  CHECK(ibv_query_gid_table(ctx, table, 4, 0) == 1);
  __be16 pkey;
  CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == htons(0xffff));
  CHECK(ibv_get_pkey_index(ctx, 1, htons(0xffff)) == 0);

  /* ---- strings and rates ---- */
  CHECK(strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success") == 0);
  CHECK(strcmp(ibv_port_state_str(IBV_PORT_ACTIVE), "active") == 0);
  CHECK(ibv_rate_to_mbps(IBV_RATE_100_GBPS) == 103125);
  CHECK(mult_to_ibv_rate(4) == IBV_RATE_10_GBPS);
  CHECK(ibv_fork_init() == 0);

  /* ---- resources ---- */
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  REQUIRE(pd != NULL);
  {
    /* The same number, and the same open file: the epoll set still holds it (a set drops a
     * file when it is closed, as dup3 onto its number would; then ADD would succeed). Every
     * eventfd has the same inode, so fstat cannot tell. */
    CHECK(ctx->async_fd == async_fd0);
    errno = 0;
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, ctx->async_fd, &epe) == -1 && errno == EEXIST);
    const int last = ctx->num_comp_vectors - 1;
    struct ibv_cq* vcq = ibv_create_cq(ctx, 4, NULL, NULL, last);
    CHECK(vcq != NULL && ibv_destroy_cq(vcq) == 0);
    errno = 0;
    CHECK(ibv_create_cq(ctx, 4, NULL, NULL, last + 1) == NULL && errno == EINVAL);
  }
  check_ud_sl(ctx, pd, &gid);
  struct side s[2];
  memset(s, 0, sizeof s);
  struct ibv_cq_init_attr_ex cqa;
  memset(&cqa, 0, sizeof cqa);
  cqa.cqe = 64;
  cqa.wc_flags = IBV_WC_STANDARD_FLAGS;
  for (int i = 0; i < 2; ++i) {
    s[i].buf = aligned_alloc(4096, kBuf);
    REQUIRE(s[i].buf != NULL);
    memset(s[i].buf, 0, kBuf);
    s[i].mr = ibv_reg_mr(pd, s[i].buf, kBuf,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                             IBV_ACCESS_REMOTE_ATOMIC | kAccessFlushGlobal);
    REQUIRE(s[i].mr != NULL);
    CHECK(s[i].mr->addr == s[i].buf && s[i].mr->length == kBuf);
    s[i].cq = ibv_create_cq_ex(ctx, &cqa);
    REQUIRE(s[i].cq != NULL);
    CHECK(ibv_cq_ex_to_cq(s[i].cq)->cqe >= 64);
    struct ibv_qp_init_attr_ex qa;
    memset(&qa, 0, sizeof qa);
    qa.send_cq = ibv_cq_ex_to_cq(s[i].cq);
    qa.recv_cq = ibv_cq_ex_to_cq(s[i].cq);
    qa.cap.max_send_wr = 32;
    qa.cap.max_recv_wr = 32;
    qa.cap.max_send_sge = 2;
    qa.cap.max_recv_sge = 2;
    qa.cap.max_inline_data = 64;
    qa.qp_type = IBV_QPT_RC;
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    qa.pd = pd;
    qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                        IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                        IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_ATOMIC_WRITE |
                        kQpExWithFlush | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
    s[i].qp = ibv_create_qp_ex(ctx, &qa);
    REQUIRE(s[i].qp != NULL);
    CHECK(qa.cap.max_inline_data >= 64);
    s[i].qpx = ibv_qp_to_qp_ex(s[i].qp);
    REQUIRE(s[i].qpx != NULL);
  }
  CHECK(ibv_dealloc_pd(pd) == EBUSY); /* still has MRs and QPs */
  connect_qp(s[0].qp, s[1].qp->qp_num, &gid);
  connect_qp(s[1].qp, s[0].qp->qp_num, &gid);

  struct ibv_qp_attr qattr;
  struct ibv_qp_init_attr qinit;
  REQUIRE(ibv_query_qp(s[0].qp, &qattr, IBV_QP_STATE, &qinit) == 0);
  CHECK(qattr.qp_state == IBV_QPS_RTS && qattr.dest_qp_num == s[1].qp->qp_num);
  CHECK(qinit.send_cq == ibv_cq_ex_to_cq(s[0].cq));

  /* ---- the ibv_wr_* API: write, inline send, read, atomics in one batch ---- */
  uint8_t *a = s[0].buf, *b = s[1].buf;
  for (int i = 0; i < 256; ++i) a[i] = (uint8_t)i; /* WRITE source */
  memcpy(b + 1024, "read me, please", 16);         /* READ source */
  uint64_t counter = 40, cas_word = 7;
  memcpy(b + 2048, &counter, 8);
  memcpy(b + 2056, &cas_word, 8);

  struct ibv_sge rsge = {(uintptr_t)(b + 512), 64, s[1].mr->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 900, .sg_list = &rsge, .num_sge = 1};
  struct ibv_recv_wr* bad_rwr = NULL;
  REQUIRE(ibv_post_recv(s[1].qp, &rwr, &bad_rwr) == 0);

  struct ibv_qp_ex* x = s[0].qpx;
  char inline_msg[32] = "inline hello";
  ibv_wr_start(x);
  x->wr_id = 1;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(x, s[1].mr->rkey, (uintptr_t)b);
  ibv_wr_set_sge(x, s[0].mr->lkey, (uintptr_t)a, 256);
  x->wr_id = 2;
  ibv_wr_send_imm(x, htonl(0xabcdef01));
  ibv_wr_set_inline_data(x, inline_msg, 13);
  x->wr_id = 3;
  ibv_wr_rdma_read(x, s[1].mr->rkey, (uintptr_t)(b + 1024));
  ibv_wr_set_sge(x, s[0].mr->lkey, (uintptr_t)(a + 1024), 16);
  x->wr_id = 4;
  ibv_wr_atomic_fetch_add(x, s[1].mr->rkey, (uintptr_t)(b + 2048), 2);
  ibv_wr_set_sge(x, s[0].mr->lkey, (uintptr_t)(a + 2048), 8);
  x->wr_id = 5;
  ibv_wr_atomic_cmp_swp(x, s[1].mr->rkey, (uintptr_t)(b + 2056), 7, 99);
  ibv_wr_set_sge(x, s[0].mr->lkey, (uintptr_t)(a + 2056), 8);
  memset(inline_msg, 'X', sizeof inline_msg); /* inline data was copied at set time */
  REQUIRE(ibv_wr_complete(x) == 0);

  struct seen done[8];
  poll_ex(s[0].cq, done, 5);
  for (uint64_t id = 1; id <= 5; ++id) {
    struct seen* d = find(done, 5, id);
    CHECK(d != NULL && d->status == IBV_WC_SUCCESS && d->qp_num == s[0].qp->qp_num);
  }
  CHECK(find(done, 5, 1)->opcode == IBV_WC_RDMA_WRITE);
  CHECK(find(done, 5, 2)->opcode == IBV_WC_SEND);
  CHECK(find(done, 5, 3)->opcode == IBV_WC_RDMA_READ && find(done, 5, 3)->byte_len == 16);
  CHECK(find(done, 5, 4)->opcode == IBV_WC_FETCH_ADD);
  CHECK(find(done, 5, 5)->opcode == IBV_WC_COMP_SWAP);
  poll_ex(s[1].cq, done, 1);
  CHECK(done[0].wr_id == 900 && done[0].status == IBV_WC_SUCCESS);
  CHECK(done[0].opcode == IBV_WC_RECV && done[0].byte_len == 13);
  CHECK((done[0].wc_flags & IBV_WC_WITH_IMM) != 0 && done[0].imm == htonl(0xabcdef01));
  CHECK(memcmp(b + 512, "inline hello", 13) == 0);
  for (int i = 0; i < 256; ++i) {
    if (b[i] != (uint8_t)i) {
      CHECK(!"RDMA WRITE data");
      break;
    }
  }
  CHECK(memcmp(a + 1024, "read me, please", 16) == 0);
  uint64_t v;
  memcpy(&v, a + 2048, 8);
  CHECK(v == 40); /* fetch-add returns the old value */
  memcpy(&v, b + 2048, 8);
  CHECK(v == 42);
  memcpy(&v, a + 2056, 8);
  CHECK(v == 7);
  memcpy(&v, b + 2056, 8);
  CHECK(v == 99);

  /* ---- IBTA 1.5: ibv_wr_atomic_write, and ibv_wr_flush as rdma-core 45 calls it ---- */
  {
    uint64_t word = 0x1122334455667788ull;
    ibv_wr_start(x);
    x->wr_id = 30;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_atomic_write(x, s[1].mr->rkey, (uintptr_t)(b + 2064), &word);
    word = 0; /* the 8 bytes were copied at the call */
    x->wr_id = 31;
    ((struct qp_ex_v45*)x)
        ->wr_flush(x, s[1].mr->rkey, (uintptr_t)b, 4096, kFlushGlobal, kFlushRange);
    REQUIRE(ibv_wr_complete(x) == 0);
    struct seen fw[2];
    poll_ex(s[0].cq, fw, 2);
    CHECK(fw[0].wr_id == 30 && fw[0].status == IBV_WC_SUCCESS &&
          fw[0].opcode == IBV_WC_ATOMIC_WRITE);
    CHECK(fw[1].wr_id == 31 && fw[1].status == IBV_WC_SUCCESS && (int)fw[1].opcode == kWcFlush);
    memcpy(&v, b + 2064, 8);
    CHECK(v == 0x1122334455667788ull);
  }

  /* wr_abort posts nothing; a setter before any WR fails the batch. */
  ibv_wr_start(x);
  x->wr_id = 6;
  ibv_wr_rdma_write(x, s[1].mr->rkey, (uintptr_t)b);
  ibv_wr_set_sge(x, s[0].mr->lkey, (uintptr_t)a, 8);
  ibv_wr_abort(x);
  ibv_wr_start(x);
  ibv_wr_set_sge(x, s[0].mr->lkey, (uintptr_t)a, 8);
  CHECK(ibv_wr_complete(x) == EINVAL);

  /* ---- ordinary verbs: ibv_post_send (WRITE with immediate), ibv_poll_cq ---- */
  REQUIRE(ibv_post_recv(s[1].qp, &rwr, &bad_rwr) == 0);
  struct ibv_sge ssge = {(uintptr_t)a, 32, s[0].mr->lkey};
  struct ibv_send_wr swr;
  memset(&swr, 0, sizeof swr);
  swr.wr_id = 7;
  swr.sg_list = &ssge;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  swr.send_flags = IBV_SEND_SIGNALED;
  swr.imm_data = htonl(0x01020304);
  swr.wr.rdma.remote_addr = (uintptr_t)(b + 3072);
  swr.wr.rdma.rkey = s[1].mr->rkey;
  struct ibv_send_wr* bad_swr = NULL;
  REQUIRE(ibv_post_send(s[0].qp, &swr, &bad_swr) == 0);
  struct ibv_wc wc;
  int got;
  do {
    got = ibv_poll_cq(ibv_cq_ex_to_cq(s[1].cq), 1, &wc);
  } while (got == 0);
  CHECK(got == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
  CHECK((wc.wc_flags & IBV_WC_WITH_IMM) != 0 && wc.imm_data == htonl(0x01020304));
  CHECK(wc.byte_len == 32 && memcmp(b + 3072, a, 32) == 0);
  do {
    got = ibv_poll_cq(ibv_cq_ex_to_cq(s[0].cq), 1, &wc);
  } while (got == 0);
  CHECK(got == 1 && wc.wr_id == 7 && wc.opcode == IBV_WC_RDMA_WRITE);

  /* ---- ATOMIC WRITE and FLUSH through ibv_post_send: rdma-core offers them only through
   * ibv_qp_ex (struct ibv_send_wr has no FLUSH fields, and rxe's post_send carries no rkey for
   * either), so the drop-in refuses them there: EINVAL at the WR, the WRs before it posted. */
  {
    uint64_t word = 0x0102030405060708ull, before;
    memcpy(&before, b + 2064, 8);
    struct ibv_sge asge = {(uintptr_t)&word, 8, 0};
    struct ibv_send_wr aw[2];
    memset(aw, 0, sizeof aw);
    aw[0] = swr; /* a WRITE with immediate, valid, signaled */
    aw[0].wr_id = 40;
    aw[0].opcode = IBV_WR_RDMA_WRITE;
    aw[0].next = &aw[1];
    aw[1].wr_id = 41;
    aw[1].sg_list = &asge;
    aw[1].num_sge = 1;
    aw[1].opcode = IBV_WR_ATOMIC_WRITE;
    aw[1].send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    aw[1].wr.rdma.remote_addr = (uintptr_t)(b + 2064);
    aw[1].wr.rdma.rkey = s[1].mr->rkey;
    bad_swr = NULL;
    CHECK(ibv_post_send(s[0].qp, &aw[0], &bad_swr) == EINVAL && bad_swr == &aw[1]);
    do {
      got = ibv_poll_cq(ibv_cq_ex_to_cq(s[0].cq), 1, &wc);
    } while (got == 0);
    CHECK(got == 1 && wc.wr_id == 40 && wc.status == IBV_WC_SUCCESS);
    aw[1].opcode = (enum ibv_wr_opcode)14; /* rdma-core 45's IBV_WR_FLUSH */
    aw[1].sg_list = NULL;
    aw[1].num_sge = 0;
    aw[1].send_flags = IBV_SEND_SIGNALED;
    bad_swr = NULL;
    CHECK(ibv_post_send(s[0].qp, &aw[1], &bad_swr) == EINVAL && bad_swr == &aw[1]);
    CHECK(ibv_poll_cq(ibv_cq_ex_to_cq(s[0].cq), 1, &wc) == 0);
    memcpy(&v, b + 2064, 8);
    CHECK(v == before); /* nothing written */
  }

  /* ---- ibv_resize_cq with completions queued ---- */
  /* Three WRITEs with immediate: once the requester has their three completions, the responder
   * queued its three receive completions before it acknowledged them. */
  struct ibv_cq* rcq = ibv_cq_ex_to_cq(s[1].cq);
  for (uint64_t i = 0; i < 3; ++i) {
    rwr.wr_id = 901 + i;
    REQUIRE(ibv_post_recv(s[1].qp, &rwr, &bad_rwr) == 0);
  }
  rwr.wr_id = 900;
  for (uint64_t i = 0; i < 3; ++i) {
    swr.wr_id = 11 + i;
    REQUIRE(ibv_post_send(s[0].qp, &swr, &bad_swr) == 0);
  }
  for (int n = 0; n < 3; n += got) {
    got = ibv_poll_cq(ibv_cq_ex_to_cq(s[0].cq), 1, &wc);
    CHECK(got >= 0 && (got == 0 || wc.status == IBV_WC_SUCCESS));
    if (got < 0) break;
  }
  CHECK(ibv_resize_cq(rcq, 2) == EINVAL); /* fewer than are queued: rxe's rule */
  CHECK(ibv_resize_cq(rcq, 0) == EINVAL);
  CHECK(ibv_resize_cq(rcq, 3) == 0 && rcq->cqe == 3);
  CHECK(ibv_resize_cq(rcq, 200) == 0 && rcq->cqe == 255);
  struct ibv_wc rwc[4];
  CHECK(ibv_poll_cq(rcq, 4, rwc) == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(rwc[i].wr_id == 901 + (uint64_t)i && rwc[i].status == IBV_WC_SUCCESS &&
          rwc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM);
  }

  /* Inline data through ibv_post_send: copied at post time, the buffer may change at once. */
  REQUIRE(ibv_post_recv(s[1].qp, &rwr, &bad_rwr) == 0);
  char msg[16] = "posted inline";
  struct ibv_sge isge = {(uintptr_t)msg, 14, 0}; /* no lkey needed for inline data */
  memset(&swr, 0, sizeof swr);
  swr.wr_id = 10;
  swr.sg_list = &isge;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  REQUIRE(ibv_post_send(s[0].qp, &swr, &bad_swr) == 0);
  memset(msg, 'Z', sizeof msg);
  do {
    got = ibv_poll_cq(ibv_cq_ex_to_cq(s[1].cq), 1, &wc);
  } while (got == 0);
  CHECK(got == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == 14);
  CHECK(memcmp(b + 512, "posted inline", 14) == 0);
  do {
    got = ibv_poll_cq(ibv_cq_ex_to_cq(s[0].cq), 1, &wc);
  } while (got == 0);
  CHECK(got == 1 && wc.wr_id == 10 && wc.opcode == IBV_WC_SEND);

  /* An opcode uroce does not have: EINVAL, bad_wr names it. */
  swr.opcode = IBV_WR_TSO;
  CHECK(ibv_post_send(s[0].qp, &swr, &bad_swr) == EINVAL && bad_swr == &swr);
  /* BIND_MW without a window: EINVAL at post time, the QP unchanged. */
  swr.opcode = IBV_WR_BIND_MW;
  CHECK(ibv_post_send(s[0].qp, &swr, &bad_swr) == EINVAL && bad_swr == &swr);
  REQUIRE(ibv_query_qp(s[0].qp, &qattr, IBV_QP_STATE, &qinit) == 0);
  CHECK(qattr.qp_state == IBV_QPS_RTS);

  /* ---- memory windows: type 1 by ibv_bind_mw, type 2 by a BIND_MW work request (ordinary
   * and extended), WRITEs through them, SEND with Invalidate and LOCAL_INV of type 2 ---- */
  {
    struct ibv_mr* wmr = ibv_reg_mr(
        pd, b + 3584, 512, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
    REQUIRE(wmr != NULL);
    struct ibv_mw* mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
    struct ibv_mw* mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    REQUIRE(mw1 != NULL && mw2 != NULL);
    CHECK(mw1->type == IBV_MW_TYPE_1 && mw2->type == IBV_MW_TYPE_2 && mw1->pd == pd);
    const uint32_t old1 = mw1->rkey;
    struct ibv_mw_bind mb;
    memset(&mb, 0, sizeof mb);
    mb.wr_id = 40;
    mb.send_flags = IBV_SEND_SIGNALED;
    mb.bind_info.mr = wmr;
    mb.bind_info.addr = (uintptr_t)(b + 3584);
    mb.bind_info.length = 128;
    mb.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    CHECK(ibv_bind_mw(s[1].qp, mw2, &mb) == EINVAL); /* type 1 only */
    CHECK(ibv_bind_mw(s[1].qp, mw1, &mb) == 0);
    CHECK(mw1->rkey == ibv_inc_rkey(old1));
    do {
      got = ibv_poll_cq(ibv_cq_ex_to_cq(s[1].cq), 1, &wc);
    } while (got == 0);
    CHECK(got == 1 && wc.wr_id == 40 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW);
    CHECK(ibv_dereg_mr(wmr) == EINVAL); /* windows are bound to it (rxe) */

    /* A WRITE through the type 1 window (one past its end, a remote access error that breaks the
     * QP, is MemoryWindow.* in verbs_test). */
    struct ibv_sge msge = {(uintptr_t)a, 16, s[0].mr->lkey};
    struct ibv_send_wr mwr;
    memset(&mwr, 0, sizeof mwr);
    mwr.wr_id = 41;
    mwr.sg_list = &msge;
    mwr.num_sge = 1;
    mwr.opcode = IBV_WR_RDMA_WRITE;
    mwr.send_flags = IBV_SEND_SIGNALED;
    mwr.wr.rdma.remote_addr = (uintptr_t)(b + 3584 + 112);
    mwr.wr.rdma.rkey = mw1->rkey;
    memcpy(a, "through window 1", 16);
    REQUIRE(ibv_post_send(s[0].qp, &mwr, &bad_swr) == 0);
    do {
      got = ibv_poll_cq(ibv_cq_ex_to_cq(s[0].cq), 1, &wc);
    } while (got == 0);
    CHECK(got == 1 && wc.wr_id == 41 && wc.status == IBV_WC_SUCCESS);
    CHECK(memcmp(b + 3584 + 112, "through window 1", 16) == 0);

    /* Type 2 by an ordinary BIND_MW work request. */
    struct ibv_send_wr bw;
    memset(&bw, 0, sizeof bw);
    bw.wr_id = 42;
    bw.opcode = IBV_WR_BIND_MW;
    bw.send_flags = IBV_SEND_SIGNALED;
    bw.bind_mw.mw = mw2;
    bw.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
    bw.bind_mw.bind_info.mr = wmr;
    bw.bind_mw.bind_info.addr = (uintptr_t)(b + 3712);
    bw.bind_mw.bind_info.length = 128;
    bw.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    REQUIRE(ibv_post_send(s[1].qp, &bw, &bad_swr) == 0);
    do {
      got = ibv_poll_cq(ibv_cq_ex_to_cq(s[1].cq), 1, &wc);
    } while (got == 0);
    CHECK(got == 1 && wc.wr_id == 42 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW);
    mw2->rkey = bw.bind_mw.rkey;

    /* SEND with Invalidate of its key: the receive says so and names the key. */
    struct ibv_sge isge = {(uintptr_t)(b + 512), 64, s[1].mr->lkey};
    struct ibv_recv_wr irwr = {.wr_id = 44, .sg_list = &isge, .num_sge = 1};
    REQUIRE(ibv_post_recv(s[1].qp, &irwr, &bad_rwr) == 0);
    mwr.wr_id = 43;
    mwr.opcode = IBV_WR_SEND_WITH_INV;
    mwr.invalidate_rkey = mw2->rkey;
    REQUIRE(ibv_post_send(s[0].qp, &mwr, &bad_swr) == 0);
    do {
      got = ibv_poll_cq(ibv_cq_ex_to_cq(s[1].cq), 1, &wc);
    } while (got == 0);
    CHECK(got == 1 && wc.wr_id == 44 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV);
    CHECK((wc.wc_flags & IBV_WC_WITH_INV) != 0 && wc.invalidated_rkey == mw2->rkey);
    do {
      got = ibv_poll_cq(ibv_cq_ex_to_cq(s[0].cq), 1, &wc);
    } while (got == 0);
    CHECK(got == 1 && wc.wr_id == 43 && wc.status == IBV_WC_SUCCESS);

    /* Bound again through ibv_wr_bind_mw, then invalidated by ibv_wr_local_inv. */
    const uint32_t key2 = ibv_inc_rkey(mw2->rkey);
    struct ibv_qp_ex* bx = s[1].qpx;
    ibv_wr_start(bx);
    bx->wr_id = 45;
    bx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_bind_mw(bx, mw2, key2, &bw.bind_mw.bind_info);
    bx->wr_id = 46;
    ibv_wr_local_inv(bx, key2);
    CHECK(ibv_wr_complete(bx) == 0);
    struct seen lw[2];
    poll_ex(s[1].cq, lw, 2);
    CHECK(lw[0].wr_id == 45 && lw[0].status == IBV_WC_SUCCESS && lw[0].opcode == IBV_WC_BIND_MW);
    CHECK(lw[1].wr_id == 46 && lw[1].status == IBV_WC_SUCCESS && lw[1].opcode == IBV_WC_LOCAL_INV);

    CHECK(ibv_dealloc_mw(mw1) == 0); /* unbinds it */
    CHECK(ibv_dealloc_mw(mw2) == 0);
    CHECK(ibv_dereg_mr(wmr) == 0);
  }

  /* ---- ibv_rereg_mr: libibverbs' input checks, the provider's, then what a change does ---- */
  {
    struct ibv_mr* m = s[0].mr;
    const uint32_t key = m->rkey;
    errno = 0;
    CHECK(ibv_rereg_mr(m, 1 << 5, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL);
    errno = 0; /* access without CHANGE_ACCESS */
    CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE) ==
              IBV_REREG_MR_ERR_INPUT &&
          errno == EINVAL);
    errno = 0;
    CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0) ==
              IBV_REREG_MR_ERR_INPUT &&
          errno == EINVAL);
    errno = 0; /* remote write without local write: the kernel's ib_check_mr_access */
    CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE) ==
              IBV_REREG_MR_ERR_CMD &&
          errno == EINVAL);
    /* A new translation: a WRITE from the peer lands in the new buffer, same rkey. */
    uint8_t* moved = aligned_alloc(4096, 4096);
    REQUIRE(moved != NULL);
    memset(moved, 0, 4096);
    CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, moved, 4096, 0) == 0);
    CHECK(m->addr == moved && m->length == 4096 && m->rkey == key && m->pd == pd);
    struct ibv_sge wsge = {(uintptr_t)b, 16, s[1].mr->lkey};
    memcpy(b, "to the new place", 16);
    struct ibv_send_wr w;
    memset(&w, 0, sizeof w);
    w.wr_id = 20;
    w.sg_list = &wsge;
    w.num_sge = 1;
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_SIGNALED;
    w.wr.rdma.remote_addr = (uintptr_t)(moved + 64);
    w.wr.rdma.rkey = m->rkey;
    REQUIRE(ibv_post_send(s[1].qp, &w, &bad_swr) == 0);
    do {
      got = ibv_poll_cq(rcq, 1, &wc);
    } while (got == 0);
    CHECK(got == 1 && wc.wr_id == 20 && wc.status == IBV_WC_SUCCESS);
    CHECK(memcmp(moved + 64, "to the new place", 16) == 0);
    /* Another PD: the peer's QP (of the first PD) is refused with a remote access error. */
    struct ibv_pd* pd2 = ibv_alloc_pd(ctx);
    REQUIRE(pd2 != NULL);
    CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_TRANSLATION, pd2, a, kBuf,
                       0) == 0);
    CHECK(m->pd == pd2 && m->addr == a && m->rkey == key);
    CHECK(ibv_dealloc_pd(pd2) == EBUSY);
    w.wr_id = 21;
    w.wr.rdma.remote_addr = (uintptr_t)a;
    REQUIRE(ibv_post_send(s[1].qp, &w, &bad_swr) == 0);
    do {
      got = ibv_poll_cq(rcq, 1, &wc);
    } while (got == 0);
    CHECK(got == 1 && wc.wr_id == 21 && wc.status == IBV_WC_REM_ACCESS_ERR);
    struct ibv_async_event rae; /* the responder's QP reported it before it NAKed */
    REQUIRE(ibv_get_async_event(ctx, &rae) == 0);
    CHECK(rae.event_type == IBV_EVENT_QP_ACCESS_ERR && rae.element.qp == s[0].qp);
    ibv_ack_async_event(&rae);
    CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, pd, NULL, 0,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC) == 0);
    CHECK(ibv_dealloc_pd(pd2) == 0);
    free(moved);
  }

  /* ---- completion channel: blocking ibv_get_cq_event ---- */
  struct ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  REQUIRE(ch != NULL && ch->fd >= 0);
  struct ibv_cq* ecq = ibv_create_cq(ctx, 16, (void*)0x1234, ch, 0);
  REQUIRE(ecq != NULL);
  CHECK(ibv_destroy_comp_channel(ch) == EBUSY); /* a CQ uses it */
  struct ibv_qp_init_attr eqa;
  memset(&eqa, 0, sizeof eqa);
  eqa.send_cq = ecq;
  eqa.recv_cq = ecq;
  eqa.cap.max_send_wr = 4;
  eqa.cap.max_recv_wr = 4;
  eqa.cap.max_send_sge = 1;
  eqa.cap.max_recv_sge = 1;
  eqa.qp_type = IBV_QPT_RC;
  struct ibv_qp* eqp = ibv_create_qp(pd, &eqa);
  REQUIRE(eqp != NULL);
  CHECK(ibv_qp_to_qp_ex(eqp) == NULL); /* not created with send_ops_flags */
  struct ibv_cq_init_attr_ex peer_cqa = cqa;
  struct ibv_cq_ex* pcq = ibv_create_cq_ex(ctx, &peer_cqa);
  REQUIRE(pcq != NULL);
  eqa.send_cq = eqa.recv_cq = ibv_cq_ex_to_cq(pcq);
  struct ibv_qp* pqp = ibv_create_qp(pd, &eqa);
  REQUIRE(pqp != NULL);
  connect_qp(eqp, pqp->qp_num, &gid);
  connect_qp(pqp, eqp->qp_num, &gid);
  REQUIRE(ibv_req_notify_cq(ecq, 0) == 0);
  memset(&swr, 0, sizeof swr);
  swr.sg_list = &ssge;
  swr.num_sge = 1;
  swr.send_flags = IBV_SEND_SIGNALED;
  swr.wr.rdma.remote_addr = (uintptr_t)(b + 3072);
  swr.wr.rdma.rkey = s[1].mr->rkey;
  swr.opcode = IBV_WR_RDMA_WRITE;
  swr.wr_id = 8;
  REQUIRE(ibv_post_send(eqp, &swr, &bad_swr) == 0);
  struct ibv_cq* ev_cq = NULL;
  void* ev_ctx = NULL;
  REQUIRE(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0);
  CHECK(ev_cq == ecq && ev_ctx == (void*)0x1234);
  ibv_ack_cq_events(ev_cq, 1);
  /* The channel fd blocks by default, as libibverbs'; made non-blocking, an empty channel
   * answers EAGAIN. */
  CHECK((fcntl(ch->fd, F_GETFL) & O_NONBLOCK) == 0);
  REQUIRE(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0);
  errno = 0;
  CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN);
  CHECK(ecq->comp_events_completed == 1);
  CHECK(ibv_poll_cq(ecq, 1, &wc) == 1 && wc.wr_id == 8 && wc.status == IBV_WC_SUCCESS);

  /* ---- async event: an RDMA WRITE with a bad R_Key breaks the responder's QP ---- */
  swr.wr_id = 9;
  swr.wr.rdma.rkey = s[1].mr->rkey ^ 0x5a5a00;
  REQUIRE(ibv_post_send(eqp, &swr, &bad_swr) == 0);
  do {
    got = ibv_poll_cq(ecq, 1, &wc);
  } while (got == 0);
  CHECK(got == 1 && wc.wr_id == 9 && wc.status == IBV_WC_REM_ACCESS_ERR);
  struct pollfd pfd = {ctx->async_fd, POLLIN, 0};
  CHECK(poll(&pfd, 1, 10000) == 1);
  struct epoll_event got_ev;
  CHECK(epoll_wait(ep, &got_ev, 1, 10000) == 1 && got_ev.data.u64 == 0xa5 &&
        (got_ev.events & EPOLLIN) != 0);
  struct ibv_async_event ae;
  REQUIRE(ibv_get_async_event(ctx, &ae) == 0);
  CHECK(ae.event_type == IBV_EVENT_QP_ACCESS_ERR && ae.element.qp == pqp);
  ibv_ack_async_event(&ae);
  CHECK((fcntl(ctx->async_fd, F_GETFL) & O_NONBLOCK) == 0);
  REQUIRE(fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK) == 0);
  errno = 0;
  CHECK(ibv_get_async_event(ctx, &ae) == -1 && errno == EAGAIN);
  CHECK(pqp->events_completed == 1);

  /* ---- XRC (issue 41): a domain, an XRC SRQ and its number, through the inline verbs ---- */
  CHECK((da.device_cap_flags & IBV_DEVICE_XRC) != 0);
  struct ibv_xrcd_init_attr xa = {
      .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1, .oflags = O_CREAT};
  struct ibv_xrcd* xrcd = ibv_open_xrcd(ctx, &xa);
  REQUIRE(xrcd != NULL);
  struct ibv_srq_init_attr_ex xsa;
  memset(&xsa, 0, sizeof xsa);
  xsa.attr.max_wr = 4;
  xsa.attr.max_sge = 1;
  xsa.comp_mask =
      IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
  xsa.srq_type = IBV_SRQT_XRC;
  xsa.xrcd = xrcd;
  xsa.cq = ecq;
  xsa.pd = pd;
  struct ibv_srq* xsrq = ibv_create_srq_ex(ctx, &xsa);
  REQUIRE(xsrq != NULL);
  uint32_t srq_num = 0;
  CHECK(ibv_get_srq_num(xsrq, &srq_num) == 0 && srq_num != 0 && srq_num <= 0xffffff);
  struct ibv_qp_init_attr_ex xqa;
  memset(&xqa, 0, sizeof xqa);
  xqa.qp_type = IBV_QPT_XRC_RECV;
  xqa.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  xqa.xrcd = xrcd;
  struct ibv_qp* xqp = ibv_create_qp_ex(ctx, &xqa);
  REQUIRE(xqp != NULL);
  CHECK(xqp->qp_type == IBV_QPT_XRC_RECV && xqp->pd == NULL && xqp->send_cq == NULL);
  CHECK(ibv_close_xrcd(xrcd) == EBUSY);  /* the SRQ and the QP are in it */
  xqa.xrcd = NULL;
  errno = 0;
  CHECK(ibv_create_qp_ex(ctx, &xqa) == NULL && errno == EINVAL);
  CHECK(ibv_destroy_qp(xqp) == 0);
  CHECK(ibv_destroy_srq(xsrq) == 0);
  CHECK(ibv_close_xrcd(xrcd) == 0);

  /* ---- what uroce does not offer: the errors libibverbs gives for such a provider ---- */
  struct ibv_cq_init_attr_ex tsa = cqa;
  tsa.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  errno = 0;
  CHECK(ibv_create_cq_ex(ctx, &tsa) == NULL && errno == EOPNOTSUPP);
  struct ibv_qp_init_attr_ex mwa;
  memset(&mwa, 0, sizeof mwa);
  mwa.send_cq = mwa.recv_cq = ecq;
  mwa.cap.max_send_wr = mwa.cap.max_recv_wr = 1;
  mwa.cap.max_send_sge = mwa.cap.max_recv_sge = 1;
  mwa.qp_type = IBV_QPT_RC;
  mwa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  mwa.pd = pd;
  mwa.qp_type = IBV_QPT_UC;
  mwa.send_ops_flags = IBV_QP_EX_WITH_LOCAL_INV; /* RC's alone (rxe) */
  errno = 0;
  CHECK(ibv_create_qp_ex(ctx, &mwa) == NULL && errno == EOPNOTSUPP);
  mwa.send_ops_flags = IBV_QP_EX_WITH_SEND_WITH_INV; /* an RC opcode only */
  errno = 0;
  CHECK(ibv_create_qp_ex(ctx, &mwa) == NULL && errno == EOPNOTSUPP);
  mwa.qp_type = IBV_QPT_RC; /* SEND with Invalidate stays: the peer may have what it names */
  struct ibv_qp* invq = ibv_create_qp_ex(ctx, &mwa);
  CHECK(invq != NULL);
  if (invq != NULL) CHECK(ibv_destroy_qp(invq) == 0);
  mwa.comp_mask = IBV_QP_INIT_ATTR_PD;
  mwa.qp_type = IBV_QPT_RAW_PACKET;
  errno = 0;
  CHECK(ibv_create_qp_ex(ctx, &mwa) == NULL && errno == EOPNOTSUPP);
  errno = 0;
  CHECK(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE) == NULL &&
        errno == EOPNOTSUPP);
  union ibv_gid mgid;
  memset(&mgid, 0, sizeof mgid);
  CHECK(ibv_attach_mcast(s[0].qp, &mgid, 0) == EOPNOTSUPP);
  struct ibv_td_init_attr tda = {0};
  errno = 0;
  CHECK(ibv_alloc_td(ctx, &tda) == NULL && errno == EOPNOTSUPP);
  struct ibv_modify_cq_attr mca = {0};
  CHECK(ibv_modify_cq(ecq, &mca) == EOPNOTSUPP);
  struct ibv_values_ex vals = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
  CHECK(ibv_query_rt_values_ex(ctx, &vals) == EOPNOTSUPP);

  /* ---- arming a CQ that holds a completion: the event comes at once (issue 43) ----
   * UCX polls an idle interface's CQ empty, arms it and sleeps until the event; a completion
   * that came in between must wake it, as ConnectX's arming (at the consumer index) does.
   * eqp is in the error state: a WR posted now completes flushed, at once. */
  swr.wr_id = 11;
  REQUIRE(ibv_post_send(eqp, &swr, &bad_swr) == 0);
  struct pollfd afd = {ch->fd, POLLIN, 0};
  CHECK(poll(&afd, 1, 0) == 0); /* not armed: no event */
  REQUIRE(ibv_req_notify_cq(ecq, 0) == 0);
  CHECK(poll(&afd, 1, 0) == 1);
  REQUIRE(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == ecq);
  ibv_ack_cq_events(ev_cq, 1);
  CHECK(ibv_poll_cq(ecq, 1, &wc) == 1 && wc.wr_id == 11 && wc.status == IBV_WC_WR_FLUSH_ERR);
  CHECK(ibv_poll_cq(ecq, 1, &wc) == 0);

  /* ---- teardown ---- */
  /* rdma-core's ibv_destroy_cq returns only once every completion event it handed out for the
   * CQ was acknowledged. An event taken and not acknowledged: the destroying thread waits until
   * ibv_ack_cq_events. (eqp is in the error state: a posted WR completes flushed.) */
  REQUIRE(ibv_req_notify_cq(ecq, 0) == 0);
  swr.wr_id = 10;
  REQUIRE(ibv_post_send(eqp, &swr, &bad_swr) == 0);
  struct pollfd cfd = {ch->fd, POLLIN, 0};
  CHECK(poll(&cfd, 1, 10000) == 1);
  REQUIRE(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == ecq);
  CHECK(ibv_poll_cq(ecq, 1, &wc) == 1 && wc.wr_id == 10 && wc.status == IBV_WC_WR_FLUSH_ERR);
  struct destroy_job job = {eqp, pqp, ecq, 0, -1};
  pthread_t destroyer;
  REQUIRE(pthread_create(&destroyer, NULL, destroy_qps_and_cq, &job) == 0);
  /* The QPs go; the CQ's destroy waits for the acknowledgement (a wrong implementation returns
   * at once: this wait only gives it the time to). */
  for (int i = 0; i < 30 && !__atomic_load_n(&job.done, __ATOMIC_ACQUIRE); ++i) usleep(10000);
  CHECK(!__atomic_load_n(&job.done, __ATOMIC_ACQUIRE));
  ibv_ack_cq_events(ecq, 1);
  REQUIRE(pthread_join(destroyer, NULL) == 0);
  CHECK(job.done && job.result == 0);
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(pcq)) == 0);
  CHECK(ibv_destroy_comp_channel(ch) == 0);
  for (int i = 0; i < 2; ++i) {
    CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(s[i].cq)) == EBUSY); /* a QP uses it */
    CHECK(ibv_destroy_qp(s[i].qp) == 0);
    CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(s[i].cq)) == 0);
    CHECK(ibv_dereg_mr(s[i].mr) == 0);
    free(s[i].buf);
  }
  CHECK(ibv_dealloc_pd(pd) == 0);
  /* What UCX does at cleanup; it failed (ENOENT) while the drop-in replaced the file. */
  CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, ctx->async_fd, NULL) == 0);
  close(ep);
  CHECK(ibv_close_device(ctx) == 0);
  ibv_free_device_list(list);
  if (failures == 0) printf("abi_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}

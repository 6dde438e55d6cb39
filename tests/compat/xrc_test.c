/* XRC through the drop-in libibverbs.so.1, written against <infiniband/verbs.h> as any
 * application is (issue 41): ibv_open_qp on a target QP (its handle, its errors, its lifetime),
 * and the ibv_wr_* builder on an XRC_SEND QP with ibv_wr_set_xrc_srqn (SEND, SEND with
 * immediate, WRITE, READ and Fetch & Add into an XRC SRQ through a target QP opened by number).
 * One process, one device, the initiator connected to the target on the same device. Run with
 * UROCE_DEVICES=<one loopback address>. Exit status 0 when every check passed. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compat_test.h"

enum { kBuf = 8192 };

static struct ibv_context* ctx;

static struct ibv_xrcd* open_domain(void) {
  struct ibv_xrcd_init_attr xa = {
      .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1, .oflags = O_CREAT};
  struct ibv_xrcd* x = ibv_open_xrcd(ctx, &xa);
  REQUIRE(x != NULL);
  return x;
}

static struct ibv_qp* create_target(struct ibv_xrcd* xrcd) {
  struct ibv_qp_init_attr_ex qa;
  memset(&qa, 0, sizeof qa);
  qa.qp_type = IBV_QPT_XRC_RECV;
  qa.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  qa.xrcd = xrcd;
  struct ibv_qp* qp = ibv_create_qp_ex(ctx, &qa);
  REQUIRE(qp != NULL);
  return qp;
}

static struct ibv_qp* open_target(struct ibv_xrcd* xrcd, uint32_t qp_num, uint32_t comp_mask,
                                  enum ibv_qp_type type, void* qp_context) {
  struct ibv_qp_open_attr oa;
  memset(&oa, 0, sizeof oa);
  oa.comp_mask = comp_mask;
  oa.qp_num = qp_num;
  oa.xrcd = xrcd;
  oa.qp_context = qp_context;
  oa.qp_type = type;
  errno = 0;
  return ibv_open_qp(ctx, &oa);
}

enum {
  kOpenAll = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE |
             IBV_QP_OPEN_ATTR_CONTEXT,
};

/* rdma-core's ibv_cmd_open_qp() and the kernel's ib_open_qp(): each refusal's errno. */
static void check_open_errors(struct ibv_xrcd* xrcd, struct ibv_qp* target,
                              struct ibv_qp* initiator) {
  struct ibv_xrcd* other = open_domain();
  const uint32_t n = target->qp_num;
  CHECK(open_target(other, n, kOpenAll, IBV_QPT_XRC_RECV, NULL) == NULL && errno == EINVAL);
  CHECK(open_target(xrcd, n ^ 0x5000, kOpenAll, IBV_QPT_XRC_RECV, NULL) == NULL && errno == EINVAL);
  CHECK(open_target(xrcd, initiator->qp_num, kOpenAll, IBV_QPT_XRC_RECV, NULL) == NULL &&
        errno == EINVAL);
  CHECK(open_target(xrcd, n, kOpenAll, IBV_QPT_RC, NULL) == NULL && errno == EINVAL);
  CHECK(open_target(xrcd, n, kOpenAll, IBV_QPT_XRC_SEND, NULL) == NULL && errno == EINVAL);
  CHECK(open_target(xrcd, n, IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD, IBV_QPT_XRC_RECV,
                    NULL) == NULL &&
        errno == EINVAL);
  CHECK(open_target(xrcd, n, kOpenAll | IBV_QP_OPEN_ATTR_RESERVED, IBV_QPT_XRC_RECV, NULL) ==
            NULL &&
        errno == EOPNOTSUPP);
  CHECK(ibv_close_xrcd(other) == 0);
}

/* Through INIT, RTR and RTS to `dest`, with the attributes each half's state table asks for
 * (the kernel's IB_QPT_XRC_INI and IB_QPT_XRC_TGT rows). */
static void connect_xrc(struct ibv_qp* qp, int target, uint32_t dest, const union ibv_gid* gid) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  REQUIRE(ibv_modify_qp(qp, &a,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest;
  a.rq_psn = 0x123;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = *gid;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  REQUIRE(ibv_modify_qp(qp, &a,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN |
                            (target ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0)) == 0);
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0x123;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  REQUIRE(ibv_modify_qp(
              qp, &a,
              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN |
                  (target ? 0 : IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)) ==
          0);
}

static int poll_some(struct ibv_cq* cq, struct ibv_wc* wc, int want) {
  int got = 0;
  while (got < want) { /* alarm() bounds this loop */
    int n = ibv_poll_cq(cq, want - got, wc + got);
    REQUIRE(n >= 0);
    got += n;
  }
  return got;
}

int main(void) {
  alarm(60); /* a hang is a failure */
  struct ibv_device** list = ibv_get_device_list(NULL);
  REQUIRE(list != NULL && list[0] != NULL);
  ctx = ibv_open_device(list[0]);
  REQUIRE(ctx != NULL);
  union ibv_gid gid;
  REQUIRE(ibv_query_gid(ctx, 1, 0, &gid) == 0);
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  REQUIRE(pd != NULL);
  uint8_t* buf = calloc(1, kBuf);
  REQUIRE(buf != NULL);
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, kBuf,
                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  REQUIRE(mr != NULL);
  struct ibv_cq* cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
  struct ibv_cq* srq_cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
  REQUIRE(cq != NULL && srq_cq != NULL);
  struct ibv_xrcd* xrcd = open_domain();
  struct ibv_srq_init_attr_ex sa;
  memset(&sa, 0, sizeof sa);
  sa.attr.max_wr = 8;
  sa.attr.max_sge = 1;
  sa.comp_mask =
      IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
  sa.srq_type = IBV_SRQT_XRC;
  sa.xrcd = xrcd;
  sa.cq = srq_cq;
  sa.pd = pd;
  struct ibv_srq* srq = ibv_create_srq_ex(ctx, &sa);
  REQUIRE(srq != NULL);
  uint32_t srqn = 0;
  REQUIRE(ibv_get_srq_num(srq, &srqn) == 0);

  /* The initiator, with the ibv_wr_* builder: RC's operations, without ATOMIC WRITE or FLUSH. */
  struct ibv_qp_init_attr_ex ia;
  memset(&ia, 0, sizeof ia);
  ia.qp_type = IBV_QPT_XRC_SEND;
  ia.send_cq = cq;
  ia.cap.max_send_wr = 16;
  ia.cap.max_send_sge = 1;
  ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  ia.pd = pd;
  ia.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                      IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
                      IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
  struct ibv_qp_init_attr_ex bad = ia;
  bad.send_ops_flags |= IBV_QP_EX_WITH_ATOMIC_WRITE;
  errno = 0;
  CHECK(ibv_create_qp_ex(ctx, &bad) == NULL && errno == EOPNOTSUPP);
  struct ibv_qp* ini = ibv_create_qp_ex(ctx, &ia);
  REQUIRE(ini != NULL);
  struct ibv_qp_ex* x = ibv_qp_to_qp_ex(ini);
  REQUIRE(x != NULL);

  /* ---- ibv_open_qp ---- */
  struct ibv_qp* tgt = create_target(xrcd);
  check_open_errors(xrcd, tgt, ini);
  struct ibv_qp* opened = open_target(xrcd, tgt->qp_num, kOpenAll, IBV_QPT_XRC_RECV, &ctx);
  REQUIRE(opened != NULL);
  CHECK(opened != tgt && opened->qp_num == tgt->qp_num && opened->qp_type == IBV_QPT_XRC_RECV);
  CHECK(opened->pd == NULL && opened->send_cq == NULL && opened->srq == NULL);
  CHECK(opened->qp_context == &ctx && opened->state == IBV_QPS_UNKNOWN);
  /* The creator's handle goes first: the QP stays for the opened one, which sets it up. */
  CHECK(ibv_destroy_qp(tgt) == 0);
  connect_xrc(opened, 1, ini->qp_num, &gid);
  connect_xrc(ini, 0, opened->qp_num, &gid);
  struct ibv_qp_attr qa;
  struct ibv_qp_init_attr qi;
  REQUIRE(ibv_query_qp(opened, &qa, IBV_QP_STATE, &qi) == 0);
  CHECK(qa.qp_state == IBV_QPS_RTS && qi.qp_type == IBV_QPT_XRC_RECV);

  /* ---- ibv_wr_* with ibv_wr_set_xrc_srqn ---- */
  for (int i = 0; i < 256; ++i) buf[i] = (uint8_t)i;
  memcpy(buf + 4096, "read me over XRC", 16);
  uint64_t counter = 40;
  memcpy(buf + 6144, &counter, 8);
  for (int i = 0; i < 2; ++i) {
    struct ibv_sge rs = {(uintptr_t)(buf + 1024 + 256 * i), 256, mr->lkey};
    struct ibv_recv_wr rw = {.wr_id = 100 + (uint64_t)i, .sg_list = &rs, .num_sge = 1};
    struct ibv_recv_wr* bad_rw = NULL;
    REQUIRE(ibv_post_srq_recv(srq, &rw, &bad_rw) == 0);
  }
  ibv_wr_start(x);
  x->wr_id = 1;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(x);
  ibv_wr_set_xrc_srqn(x, srqn);
  ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf, 100);
  x->wr_id = 2;
  ibv_wr_send_imm(x, htobe32(0xfeedf00d));
  ibv_wr_set_xrc_srqn(x, srqn);
  ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf + 100, 20);
  x->wr_id = 3;
  ibv_wr_rdma_write(x, mr->rkey, (uintptr_t)(buf + 2048));
  ibv_wr_set_xrc_srqn(x, srqn);
  ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf, 256);
  x->wr_id = 4;
  ibv_wr_rdma_read(x, mr->rkey, (uintptr_t)(buf + 4096));
  ibv_wr_set_xrc_srqn(x, srqn);
  ibv_wr_set_sge(x, mr->lkey, (uintptr_t)(buf + 5120), 16);
  x->wr_id = 5;
  ibv_wr_atomic_fetch_add(x, mr->rkey, (uintptr_t)(buf + 6144), 2);
  ibv_wr_set_xrc_srqn(x, srqn);
  ibv_wr_set_sge(x, mr->lkey, (uintptr_t)(buf + 6152), 8);
  REQUIRE(ibv_wr_complete(x) == 0);
  struct ibv_wc wc[8];
  poll_some(cq, wc, 5);
  for (int i = 0; i < 5; ++i) CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == 1u + i);
  poll_some(srq_cq, wc, 2);
  CHECK(wc[0].wr_id == 100 && wc[0].status == IBV_WC_SUCCESS && wc[0].byte_len == 100);
  CHECK(wc[0].qp_num == opened->qp_num && wc[0].opcode == IBV_WC_RECV);
  CHECK(wc[1].wr_id == 101 && wc[1].byte_len == 20 && (wc[1].wc_flags & IBV_WC_WITH_IMM) != 0 &&
        wc[1].imm_data == htobe32(0xfeedf00d));
  CHECK(memcmp(buf + 1024, buf, 100) == 0 && memcmp(buf + 1280, buf + 100, 20) == 0);
  CHECK(memcmp(buf + 2048, buf, 256) == 0);
  CHECK(memcmp(buf + 5120, "read me over XRC", 16) == 0);
  uint64_t v;
  memcpy(&v, buf + 6152, 8);
  CHECK(v == 40);
  memcpy(&v, buf + 6144, 8);
  CHECK(v == 42);

  /* ---- teardown: the opened handle holds the domain; the QP goes with it ---- */
  CHECK(ibv_destroy_srq(srq) == 0);
  CHECK(ibv_close_xrcd(xrcd) == EBUSY);
  CHECK(ibv_destroy_qp(opened) == 0);
  CHECK(ibv_close_xrcd(xrcd) == 0);
  CHECK(ibv_destroy_qp(ini) == 0);
  CHECK(ibv_destroy_cq(srq_cq) == 0 && ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0);
  CHECK(ibv_close_device(ctx) == 0);
  ibv_free_device_list(list);
  free(buf);
  if (failures != 0) {
    fprintf(stderr, "xrc_test: %d check(s) failed\n", failures);
    return 1;
  }
  printf("xrc_test: PASS\n");
  return 0;
}

/* What the C compat tests share: CHECK (counts a failure in `failures`), REQUIRE (exits), and
 * rc_connect. */
#pragma once
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      fprintf(stderr, "%s:%d: CHECK failed: %s (errno %d: %s)\n", __FILE__, __LINE__, #cond, \
              errno, strerror(errno));                                                       \
      ++failures;                                                                            \
    }                                                                                        \
  } while (0)

#define REQUIRE(cond)                                                                          \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: REQUIRE failed: %s (errno %d: %s)\n", __FILE__, __LINE__, #cond, \
              errno, strerror(errno));                                                         \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

/* An RC QP through INIT, RTR and RTS to `dest_qpn` at `gid` (GID index 0, port 1, both PSNs
 * `psn`, `rd_atomic` reads/atomics each way). Exits on failure. */

static inline void rc_connect_step(struct ibv_qp* qp, struct ibv_qp_attr* a, int mask) {
  if (ibv_modify_qp(qp, a, mask) != 0) {
    fprintf(stderr, "rc_connect: ibv_modify_qp to state %d failed\n", (int)a->qp_state);
    exit(1);
  }
}

static inline void rc_connect(struct ibv_qp* qp, uint32_t dest_qpn, const union ibv_gid* gid,
                              unsigned int access, uint32_t psn, uint8_t rd_atomic) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = access;
  rc_connect_step(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = psn;
  a.max_dest_rd_atomic = rd_atomic;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = *gid;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  rc_connect_step(qp, &a,
                  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = psn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = rd_atomic;
  rc_connect_step(qp, &a,
                  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* On-demand paging through the drop-in libibverbs.so.1 (issue 41): the device's odp_caps, an
 * explicit ODP region over pages that are never touched, inaccessible or read-only, the implicit
 * region (the whole address space, with addresses nothing maps), and ibv_advise_mr. Every access to
 * memory that is not mapped with the access it needs must fail as the protection error rdma-core
 * users expect (IBV_WC_REM_ACCESS_ERR for a peer's WRITE or READ, a local error for the QP's own
 * SGE), and the process must live. One process, one device, QP pairs on it. Run with
 * UROCE_DEVICES=<one loopback address>. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "compat_test.h"

enum {
  kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
         IBV_ACCESS_REMOTE_ATOMIC,
  kPages = 4,
};

static struct ibv_context* ctx;
static struct ibv_pd* pd;
static long page;

struct pair {
  struct ibv_cq* cq[2];
  struct ibv_qp* qp[2];
};

/* Two RC QPs of the device connected to each other; each failure case takes a fresh pair, as
 * an access error leaves both QPs in the error state. */
static struct pair make_pair(void) {
  struct pair p;
  for (int i = 0; i < 2; ++i) {
    p.cq[i] = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    REQUIRE(p.cq[i] != NULL);
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof qa);
    qa.send_cq = p.cq[i];
    qa.recv_cq = p.cq[i];
    qa.cap.max_send_wr = 8;
    qa.cap.max_recv_wr = 8;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.qp_type = IBV_QPT_RC;
    p.qp[i] = ibv_create_qp(pd, &qa);
    REQUIRE(p.qp[i] != NULL);
  }
  union ibv_gid gid;
  REQUIRE(ibv_query_gid(ctx, 1, 0, &gid) == 0);
  rc_connect(p.qp[0], p.qp[1]->qp_num, &gid, kAll, 11, 4);
  rc_connect(p.qp[1], p.qp[0]->qp_num, &gid, kAll, 11, 4);
  return p;
}

static void free_pair(struct pair* p) {
  for (int i = 0; i < 2; ++i) {
    REQUIRE(ibv_destroy_qp(p->qp[i]) == 0);
    REQUIRE(ibv_destroy_cq(p->cq[i]) == 0);
  }
}

static struct ibv_wc wait_one(struct ibv_cq* cq) {
  struct ibv_wc wc;
  int got;
  do {
    got = ibv_poll_cq(cq, 1, &wc);
  } while (got == 0);
  REQUIRE(got == 1);
  return wc;
}

/* One signaled RDMA operation from qp[0] (`op`: WRITE, READ), waited for: its status. */
static enum ibv_wc_status rdma(struct pair* p, enum ibv_wr_opcode op, void* local, uint32_t lkey,
                               uint64_t remote, uint32_t rkey, uint32_t len) {
  struct ibv_sge sge = {(uintptr_t)local, len, lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = 42;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  REQUIRE(ibv_post_send(p->qp[0], &wr, &bad) == 0);
  const struct ibv_wc wc = wait_one(p->cq[0]);
  CHECK(wc.wr_id == 42);
  return wc.status;
}

/* Whether each page of [addr, addr + pages) is resident (mincore(2)). */
static int resident(void* addr, int pages) {
  unsigned char v[kPages];
  REQUIRE(pages <= kPages && mincore(addr, (size_t)pages * page, v) == 0);
  for (int i = 0; i < pages; ++i)
    if (!(v[i] & 1)) return 0;
  return 1;
}

int main(void) {
  alarm(60); /* a hang is a failure */
  page = sysconf(_SC_PAGESIZE);
  struct ibv_device** list = ibv_get_device_list(NULL);
  REQUIRE(list != NULL && list[0] != NULL);
  ctx = ibv_open_device(list[0]);
  REQUIRE(ctx != NULL);
  pd = ibv_alloc_pd(ctx);
  REQUIRE(pd != NULL);

  /* ---- the capabilities ---- */
  struct ibv_device_attr_ex ax;
  REQUIRE(ibv_query_device_ex(ctx, NULL, &ax) == 0);
  CHECK((ax.odp_caps.general_caps & IBV_ODP_SUPPORT) != 0);
  /* Not advertised, though it works (below): UCX 1.13 crashes with it (src/verbs/device.cc). */
  CHECK((ax.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT) == 0);
  const uint32_t rc = ax.odp_caps.per_transport_caps.rc_odp_caps;
  CHECK((rc & (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
               IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC)) ==
        (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
         IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC));
  /* XRC (rdma-core's test_odp_xrc_traffic asks for SEND and SRQ_RECV). */
  CHECK((ax.xrc_odp_caps & (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_SRQ_RECV)) ==
        (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_SRQ_RECV));

  /* ---- an explicit ODP region: pages 0-1 fresh (never touched), 2 inaccessible, 3 read-only.
   * (Page 2 is PROT_NONE rather than unmapped: an unmapped hole may be mapped again by any
   * allocation of the process meanwhile. Unmapped addresses are the implicit region's below.) */
  uint8_t* odp =
      mmap(NULL, kPages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(odp != MAP_FAILED);
  struct ibv_mr* mr = ibv_reg_mr(pd, odp, kPages * page, kAll | IBV_ACCESS_ON_DEMAND);
  REQUIRE(mr != NULL);
  CHECK(!resident(odp, 2)); /* registration touches nothing */
  REQUIRE(mprotect(odp + 2 * page, page, PROT_NONE) == 0);
  REQUIRE(mprotect(odp + 3 * page, page, PROT_READ) == 0);
  uint8_t* src = malloc(2 * page);
  uint8_t* dst = malloc(2 * page);
  REQUIRE(src != NULL && dst != NULL);
  for (long i = 0; i < 2 * page; ++i) src[i] = (uint8_t)(i * 13 + 5);
  struct ibv_mr* src_mr = ibv_reg_mr(pd, src, 2 * page, kAll);
  struct ibv_mr* dst_mr = ibv_reg_mr(pd, dst, 2 * page, kAll);
  REQUIRE(src_mr != NULL && dst_mr != NULL);

  struct pair p = make_pair();
  /* A WRITE into never-touched pages faults them in; a READ back gives the bytes. */
  CHECK(rdma(&p, IBV_WR_RDMA_WRITE, src, src_mr->lkey, (uintptr_t)odp, mr->rkey, 2 * page) ==
        IBV_WC_SUCCESS);
  CHECK(rdma(&p, IBV_WR_RDMA_READ, dst, dst_mr->lkey, (uintptr_t)odp, mr->rkey, 2 * page) ==
        IBV_WC_SUCCESS);
  CHECK(memcmp(dst, src, 2 * page) == 0);
  /* A READ of the read-only page is allowed; an atomic on a mapped page works. */
  CHECK(rdma(&p, IBV_WR_RDMA_READ, dst, dst_mr->lkey, (uintptr_t)(odp + 3 * page), mr->rkey, 64) ==
        IBV_WC_SUCCESS);
  free_pair(&p);

  /* A peer's WRITE into the inaccessible page, and into the read-only one: remote access error. */
  p = make_pair();
  CHECK(rdma(&p, IBV_WR_RDMA_WRITE, src, src_mr->lkey, (uintptr_t)(odp + 2 * page), mr->rkey, 64) ==
        IBV_WC_REM_ACCESS_ERR);
  free_pair(&p);
  p = make_pair();
  CHECK(rdma(&p, IBV_WR_RDMA_WRITE, src, src_mr->lkey, (uintptr_t)(odp + 3 * page), mr->rkey, 64) ==
        IBV_WC_REM_ACCESS_ERR);
  free_pair(&p);
  /* A WRITE that starts on a good page and runs into the hole. */
  p = make_pair();
  CHECK(rdma(&p, IBV_WR_RDMA_WRITE, src, src_mr->lkey, (uintptr_t)(odp + page), mr->rkey,
             (uint32_t)page + 1) == IBV_WC_REM_ACCESS_ERR);
  free_pair(&p);
  /* A READ of the hole. */
  p = make_pair();
  CHECK(rdma(&p, IBV_WR_RDMA_READ, dst, dst_mr->lkey, (uintptr_t)(odp + 2 * page), mr->rkey, 8) ==
        IBV_WC_REM_ACCESS_ERR);
  free_pair(&p);
  /* The QP's own SGE in the hole: a WRITE from it fails locally. */
  p = make_pair();
  CHECK(rdma(&p, IBV_WR_RDMA_WRITE, odp + 2 * page, mr->lkey, (uintptr_t)dst, dst_mr->rkey, 8) ==
        IBV_WC_LOC_PROT_ERR);
  free_pair(&p);
  /* A receive whose buffer is the hole: the SEND is refused at the receiver. */
  p = make_pair();
  {
    struct ibv_sge rsge = {(uintptr_t)(odp + 2 * page), 64, mr->lkey};
    struct ibv_recv_wr rwr, *rbad;
    memset(&rwr, 0, sizeof rwr);
    rwr.wr_id = 7;
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    REQUIRE(ibv_post_recv(p.qp[1], &rwr, &rbad) == 0);
    const enum ibv_wc_status s =
        rdma(&p, IBV_WR_SEND, src, src_mr->lkey, 0, 0, 64); /* SEND: remote fields unused */
    CHECK(s == IBV_WC_REM_OP_ERR);
    const struct ibv_wc r = wait_one(p.cq[1]);
    CHECK(r.wr_id == 7 && r.status == IBV_WC_LOC_PROT_ERR);
  }
  free_pair(&p);

  /* ---- the implicit region: any address of the process, faulted in per access ---- */
  struct ibv_mr* imr = ibv_reg_mr(pd, NULL, SIZE_MAX, kAll | IBV_ACCESS_ON_DEMAND);
  REQUIRE(imr != NULL);
  CHECK(imr->length == SIZE_MAX && imr->addr == NULL);
  memset(dst, 0, 2 * page);
  p = make_pair();
  CHECK(rdma(&p, IBV_WR_RDMA_WRITE, src, src_mr->lkey, (uintptr_t)dst, imr->rkey, 2 * page) ==
        IBV_WC_SUCCESS);
  CHECK(memcmp(dst, src, 2 * page) == 0);
  free_pair(&p);
  p = make_pair(); /* address 16: never mapped */
  CHECK(rdma(&p, IBV_WR_RDMA_WRITE, src, src_mr->lkey, 16, imr->rkey, 8) == IBV_WC_REM_ACCESS_ERR);
  free_pair(&p);
  p = make_pair(); /* the hole of the explicit region, through the implicit one */
  CHECK(rdma(&p, IBV_WR_RDMA_READ, dst, dst_mr->lkey, (uintptr_t)(odp + 2 * page), imr->rkey, 8) ==
        IBV_WC_REM_ACCESS_ERR);
  free_pair(&p);
  /* Without ON_DEMAND, or at an iova other than 0, the implicit form is refused. */
  errno = 0;
  CHECK(ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL);

  /* ---- ibv_advise_mr ---- */
  uint8_t* fresh = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(fresh != MAP_FAILED);
  struct ibv_mr* fmr = ibv_reg_mr(pd, fresh, 2 * page, kAll | IBV_ACCESS_ON_DEMAND);
  REQUIRE(fmr != NULL);
  CHECK(!resident(fresh, 2));
  struct ibv_sge fs = {(uintptr_t)fresh, (uint32_t)(2 * page), fmr->lkey};
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &fs, 1) ==
        0);
  CHECK(resident(fresh, 2)); /* faulted in, not a byte written */
  CHECK(fresh[0] == 0 && fresh[2 * page - 1] == 0);
  struct ibv_sge hole = {(uintptr_t)(odp + 2 * page), 8, mr->lkey};
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &hole, 1) ==
        EFAULT);
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &hole, 1) == 0); /* best effort */
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &fs, 1) == 0);
  struct ibv_sge plain = {(uintptr_t)src, 8, src_mr->lkey};
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &plain, 1) == EINVAL); /* not ODP */
  CHECK(ibv_advise_mr(pd, (enum ibv_advise_mr_advice)9, 0, &fs, 1) == EOPNOTSUPP);
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &fs, 0) == EINVAL);

  CHECK(ibv_dereg_mr(fmr) == 0 && ibv_dereg_mr(imr) == 0 && ibv_dereg_mr(mr) == 0);
  CHECK(ibv_dereg_mr(src_mr) == 0 && ibv_dereg_mr(dst_mr) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
  free(src);
  free(dst);
  munmap(odp, kPages * page);
  munmap(fresh, 2 * page);
  CHECK(ibv_close_device(ctx) == 0);
  ibv_free_device_list(list);
  if (failures != 0) {
    fprintf(stderr, "odp_test: %d failure(s)\n", failures);
    return 1;
  }
  printf("odp_test: PASS\n");
  return 0;
}

/* Import and sharing of objects through the drop-in libibverbs.so.1, as rdma-core's pyverbs
 * test_shared_pd.test_imported_rc_ex_rdma_write does it: a context imported from a dup of
 * another's cmd_fd, the PD and MR imported by handle, a QP created on the imported context with
 * the imported PD, RDMA WRITEs both ways with the imported MR's keys; then the errors (bad fds,
 * bad and stale handles), unimport against dealloc, and the imported context outliving the one
 * it came from. One process, one device. Run with UROCE_DEVICES=<one loopback address>. */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compat_test.h"

enum { kBuf = 4096, kAccess = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE };

/* The first context's PD and MR objects, which its closing leaves to the application (as
 * rdma-core's ibv_close_device does): kept reachable here. */
static void* g_left[2];

/* An RC QP with the ibv_wr_* interface (as pyverbs' QpExRCRDMAWrite) and its CQ. */
static struct ibv_qp* make_qp(struct ibv_context* ctx, struct ibv_pd* pd, struct ibv_cq** cq) {
  *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  REQUIRE(*cq != NULL);
  struct ibv_qp_init_attr_ex qa;
  memset(&qa, 0, sizeof qa);
  qa.send_cq = *cq;
  qa.recv_cq = *cq;
  qa.cap.max_send_wr = 8;
  qa.cap.max_recv_wr = 8;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  qa.qp_type = IBV_QPT_RC;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qa.pd = pd;
  qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
  struct ibv_qp* qp = ibv_create_qp_ex(ctx, &qa);
  REQUIRE(qp != NULL);
  return qp;
}

/* One signaled RDMA WRITE of `len` bytes through ibv_wr_*, waited for. */
static void write_and_wait(struct ibv_qp* qp, struct ibv_cq* cq, uint32_t lkey, const void* src,
                           uint32_t rkey, void* dst, uint32_t len, uint64_t wr_id) {
  struct ibv_qp_ex* x = ibv_qp_to_qp_ex(qp);
  REQUIRE(x != NULL);
  ibv_wr_start(x);
  x->wr_id = wr_id;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(x, rkey, (uintptr_t)dst);
  ibv_wr_set_sge(x, lkey, (uintptr_t)src, len);
  REQUIRE(ibv_wr_complete(x) == 0);
  struct ibv_wc wc;
  int got;
  do {
    got = ibv_poll_cq(cq, 1, &wc);
  } while (got == 0);
  CHECK(got == 1 && wc.wr_id == wr_id && wc.status == IBV_WC_SUCCESS &&
        wc.opcode == IBV_WC_RDMA_WRITE);
}

/* Before the writer reads what an RDMA WRITE put into a target of another context: one poll of
 * a CQ of the target's context, which takes that context's device lock. The target's progress
 * thread placed the bytes under that lock, and the completion reached the writer through the
 * network, which ThreadSanitizer cannot see as an ordering; the lock is one it sees. */
static void settle(struct ibv_cq* target_cq) {
  struct ibv_wc wc;
  CHECK(ibv_poll_cq(target_cq, 1, &wc) == 0); /* a WRITE completes nothing at its target */
}

static void fill(uint8_t* p, uint8_t seed) {
  for (int i = 0; i < kBuf; ++i) p[i] = (uint8_t)(seed + i * 7);
}

int main(void) {
  alarm(60); /* a hang is a failure */
  struct ibv_device** list = ibv_get_device_list(NULL);
  REQUIRE(list != NULL && list[0] != NULL);

  /* ---- the server's own resources, then the import from a dup of its cmd_fd ---- */
  struct ibv_context* a = ibv_open_device(list[0]);
  REQUIRE(a != NULL);
  CHECK(a->cmd_fd >= 0);
  struct ibv_pd* pd_a = ibv_alloc_pd(a);
  REQUIRE(pd_a != NULL);
  static uint8_t buf_a[kBuf], buf_c[kBuf];
  struct ibv_mr* mr_a =
      ibv_reg_mr(pd_a, buf_a, kBuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  REQUIRE(mr_a != NULL);

  const int fd = dup(a->cmd_fd);
  REQUIRE(fd >= 0);
  struct ibv_context* b = ibv_import_device(fd);
  REQUIRE(b != NULL);
  CHECK(b != a && b->device == a->device && b->cmd_fd == fd);
  CHECK(b->async_fd >= 0 && b->async_fd != a->async_fd);
  struct ibv_device_attr da, db;
  REQUIRE(ibv_query_device(a, &da) == 0 && ibv_query_device(b, &db) == 0);
  CHECK(da.node_guid == db.node_guid && da.max_qp == db.max_qp);

  struct ibv_pd* pd_b = ibv_import_pd(b, pd_a->handle);
  REQUIRE(pd_b != NULL);
  CHECK(pd_b != pd_a && pd_b->context == b && pd_b->handle == pd_a->handle);
  struct ibv_mr* mr_b = ibv_import_mr(pd_b, mr_a->handle);
  REQUIRE(mr_b != NULL);
  CHECK(mr_b->context == b && mr_b->pd == pd_b && mr_b->handle == mr_a->handle);
  CHECK(mr_b->lkey == mr_a->lkey && mr_b->rkey == mr_a->rkey && mr_b->length == kBuf);
  CHECK(mr_b->addr == NULL); /* as rdma-core's: the address is the registrar's */

  /* ---- the client: its own context on the same device ---- */
  struct ibv_context* c = ibv_open_device(list[0]);
  REQUIRE(c != NULL);
  struct ibv_pd* pd_c = ibv_alloc_pd(c);
  REQUIRE(pd_c != NULL);
  struct ibv_mr* mr_c =
      ibv_reg_mr(pd_c, buf_c, kBuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  REQUIRE(mr_c != NULL);
  struct ibv_cq *cq_b, *cq_c;
  struct ibv_qp* qp_b = make_qp(b, pd_b, &cq_b); /* the imported context, the imported PD */
  struct ibv_qp* qp_c = make_qp(c, pd_c, &cq_c);
  CHECK(qp_b->pd == pd_b && qp_b->context == b);
  union ibv_gid gid;
  REQUIRE(ibv_query_gid(c, 1, 0, &gid) == 0);
  rc_connect(qp_b, qp_c->qp_num, &gid, kAccess, 7, 1);
  rc_connect(qp_c, qp_b->qp_num, &gid, kAccess, 7, 1);

  /* The client writes into the imported MR (its rkey, the server's address); the imported side
   * writes from it (its lkey) into the client's. */
  uint8_t want[kBuf];
  fill(buf_c, 1);
  memcpy(want, buf_c, kBuf);
  write_and_wait(qp_c, cq_c, mr_c->lkey, buf_c, mr_b->rkey, buf_a, kBuf, 1);
  settle(cq_b);
  CHECK(memcmp(buf_a, want, kBuf) == 0);
  fill(buf_a, 99);
  memcpy(want, buf_a, kBuf);
  write_and_wait(qp_b, cq_b, mr_b->lkey, buf_a, mr_c->rkey, buf_c, kBuf, 2);
  settle(cq_c);
  CHECK(memcmp(buf_c, want, kBuf) == 0);

  /* ---- errors ---- */
  errno = 0;
  CHECK(ibv_import_device(-1) == NULL && errno == EINVAL); /* no file */
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  errno = 0;
  CHECK(ibv_import_device(pipe_fds[0]) == NULL && errno == EINVAL); /* no command file */
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  REQUIRE(null_fd >= 0);
  errno = 0;
  CHECK(ibv_import_device(null_fd) == NULL && errno == EINVAL);
  close(null_fd);
  errno = 0;
  CHECK(ibv_import_pd(b, 0x7fffff) == NULL && errno == ENOENT); /* names no PD */
  errno = 0;
  CHECK(ibv_import_mr(pd_b, 0x7fffff) == NULL && errno == ENOENT);
  errno = 0;
  CHECK(ibv_import_pd(b, cq_b->handle + 1000) == NULL && errno == ENOENT);
  errno = 0;
  CHECK(ibv_import_pd(NULL, pd_a->handle) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(ibv_import_mr(NULL, mr_a->handle) == NULL && errno == EINVAL);
  /* A deallocated PD's and a deregistered MR's handles name nothing any more. */
  struct ibv_pd* gone_pd = ibv_alloc_pd(a);
  REQUIRE(gone_pd != NULL);
  const uint32_t gone_pd_handle = gone_pd->handle;
  struct ibv_mr* gone_mr = ibv_reg_mr(gone_pd, buf_c, 64, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(gone_mr != NULL);
  const uint32_t gone_mr_handle = gone_mr->handle;
  REQUIRE(ibv_dereg_mr(gone_mr) == 0 && ibv_dealloc_pd(gone_pd) == 0);
  errno = 0;
  CHECK(ibv_import_pd(b, gone_pd_handle) == NULL && errno == ENOENT);
  errno = 0;
  CHECK(ibv_import_mr(pd_b, gone_mr_handle) == NULL && errno == ENOENT);

  /* ---- unimport frees only the import; dealloc through an import destroys the object ---- */
  struct ibv_mr* mr_b2 = ibv_import_mr(pd_b, mr_a->handle);
  REQUIRE(mr_b2 != NULL);
  ibv_unimport_mr(mr_b2);
  struct ibv_pd* pd_b2 = ibv_import_pd(b, pd_a->handle);
  REQUIRE(pd_b2 != NULL);
  ibv_unimport_pd(pd_b2);
  mr_b2 = ibv_import_mr(pd_b, mr_a->handle); /* still there */
  REQUIRE(mr_b2 != NULL);
  CHECK(mr_b2->rkey == mr_a->rkey);
  ibv_unimport_mr(mr_b2);
  CHECK(ibv_dealloc_pd(pd_b) == EBUSY); /* the shared PD still has its MR and a QP */

  /* A child of fork has the command file but not the objects (they live in the parent):
   * EOPNOTSUPP there, as for a file passed to another process. */
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    errno = 0;
    struct ibv_context* in_child = ibv_import_device(dup(b->cmd_fd));
    _exit(in_child == NULL && errno == EOPNOTSUPP ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  /* A dup of the imported context's cmd_fd imports the same objects again. */
  const int fd2 = dup(b->cmd_fd);
  REQUIRE(fd2 >= 0);
  struct ibv_context* b2 = ibv_import_device(fd2);
  REQUIRE(b2 != NULL);
  struct ibv_pd* pd_b3 = ibv_import_pd(b2, pd_a->handle);
  CHECK(pd_b3 != NULL);
  if (pd_b3 != NULL) ibv_unimport_pd(pd_b3);
  CHECK(ibv_close_device(b2) == 0);
  CHECK(fcntl(fd2, F_GETFD) == -1 && errno == EBADF); /* the import owned the fd */

  /* ---- the imported context outlives the one it came from ---- */
  g_left[0] = pd_a;
  g_left[1] = mr_a;
  const int kept = dup(a->cmd_fd);
  REQUIRE(kept >= 0);
  CHECK(ibv_close_device(a) == 0);
  fill(buf_c, 5);
  memcpy(want, buf_c, kBuf);
  write_and_wait(qp_c, cq_c, mr_c->lkey, buf_c, mr_b->rkey, buf_a, kBuf, 3);
  settle(cq_b);
  CHECK(memcmp(buf_a, want, kBuf) == 0);
  const int fd3 = dup(kept); /* a command file whose first context is gone imports still */
  struct ibv_context* b3 = ibv_import_device(fd3);
  CHECK(b3 != NULL);
  if (b3 != NULL) ibv_close_device(b3);

  /* The objects go through the imports: the MR for every holder, then the PD. */
  CHECK(ibv_destroy_qp(qp_b) == 0 && ibv_destroy_cq(cq_b) == 0);
  const uint32_t mr_handle = mr_b->handle;
  CHECK(ibv_dereg_mr(mr_b) == 0);
  errno = 0;
  CHECK(ibv_import_mr(pd_b, mr_handle) == NULL && errno == ENOENT);
  CHECK(ibv_dealloc_pd(pd_b) == 0);
  CHECK(ibv_close_device(b) == 0);
  /* With every context on it closed, the command file names nothing. */
  errno = 0;
  CHECK(ibv_import_device(kept) == NULL && errno == EOPNOTSUPP);
  close(kept);

  CHECK(ibv_destroy_qp(qp_c) == 0 && ibv_destroy_cq(cq_c) == 0);
  CHECK(ibv_dereg_mr(mr_c) == 0 && ibv_dealloc_pd(pd_c) == 0);
  CHECK(ibv_close_device(c) == 0);
  ibv_free_device_list(list);
  if (failures != 0) {
    fprintf(stderr, "import_test: %d check(s) failed\n", failures);
    return 1;
  }
  printf("import_test: PASS\n");
  return 0;
}

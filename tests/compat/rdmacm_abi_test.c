/* The drop-in librdmacm.so.1 at the ABI level: a C program against Debian's <rdma/rdma_cma.h>
 * (rdma-core 44) that does what rdma_cm applications do and checks what they rely on, on two
 * uroce devices of one process (UROCE_DEVICES=SERVER_IP,CLIENT_IP; each device its own
 * coordinator, so every MAD crosses the network):
 *   - event channels: a pollable fd, EAGAIN when non-blocking and empty;
 *   - address and route resolution (the events, id->verbs, the route's GIDs and path record);
 *   - connect / accept with private data both ways, the QP's states, data over the connection
 *     (SEND and RDMA WRITE), disconnect from either side; the same with QPs the application
 *     drives itself (rdma_init_qp_attr, rdma_establish);
 *   - rdma_init_qp_attr's values, rdma_reject with private data (REJECTED, status 28),
 *     a connect to a port nobody listens on (REJECTED, status 8);
 *   - UD over SIDR: the ud parameters, an AH from them, a datagram through it;
 *   - rdma_migrate_id: the connection's later events come on the new channel;
 *   - a synchronous ID (no channel): rdma_resolve_addr returns with its event in id->event;
 *   - listeners in two processes, each with its own connections, and a dead process's
 *     listener gone (a connect to it is REJECTED);
 *   - a thread blocked in rdma_get_cm_event stays blocked when another destroys the channel
 *     (as a read() of the kernel's rdma_cm file does), and a non-blocking call on a destroyed
 *     channel fails with EBADF.
 * Prints "rdmacm_abi_test: PASS N checks" or the first failure. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int checks;
static const char *server_ip;
static const char *client_ip;

#define CHECK(cond, ...)                                                 \
  do {                                                                   \
    ++checks;                                                            \
    if (!(cond)) {                                                       \
      fprintf(stderr, "rdmacm_abi_test: FAIL at line %d: %s: ", __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                      \
      fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno));      \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

static struct sockaddr_in addr_of(const char *ip, uint16_t port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

static void nonblocking(struct rdma_event_channel *ch) {
  int fl = fcntl(ch->fd, F_GETFL);
  CHECK(fl >= 0 && fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "fcntl on the channel's fd");
}

/* The next event of `ch` (non-blocking fd), waited for with poll(): it must be `want`. */
static struct rdma_cm_event *expect_event(struct rdma_event_channel *ch,
                                          enum rdma_cm_event_type want) {
  struct rdma_cm_event *e = NULL;
  for (;;) {
    if (rdma_get_cm_event(ch, &e) == 0) break;
    CHECK(errno == EAGAIN, "rdma_get_cm_event");
    struct pollfd p = {ch->fd, POLLIN, 0};
    int n = poll(&p, 1, 20000);
    CHECK(n == 1, "no event within 20 s (wanted %d)", want);
  }
  CHECK(e->event == want, "event %d (status %d), wanted %d", e->event, e->status, want);
  return e;
}

struct conn {
  struct rdma_cm_id *id;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_mr *mr;
  char buf[4096];
};

static void make_qp(struct conn *c, enum ibv_qp_type type) {
  c->pd = ibv_alloc_pd(c->id->verbs);
  CHECK(c->pd != NULL, "ibv_alloc_pd");
  c->cq = ibv_create_cq(c->id->verbs, 64, NULL, NULL, 0);
  CHECK(c->cq != NULL, "ibv_create_cq");
  c->mr = ibv_reg_mr(c->pd, c->buf, sizeof c->buf,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  CHECK(c->mr != NULL, "ibv_reg_mr");
  struct ibv_qp_init_attr a;
  memset(&a, 0, sizeof a);
  a.send_cq = c->cq;
  a.recv_cq = c->cq;
  a.qp_type = type;
  a.cap.max_send_wr = 16;
  a.cap.max_recv_wr = 16;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  CHECK(rdma_create_qp(c->id, c->pd, &a) == 0, "rdma_create_qp");
  CHECK(c->id->qp != NULL, "id->qp after rdma_create_qp");
  struct ibv_qp_attr qa;
  struct ibv_qp_init_attr qi;
  CHECK(ibv_query_qp(c->id->qp, &qa, IBV_QP_STATE, &qi) == 0, "ibv_query_qp");
  CHECK(qa.qp_state == (type == IBV_QPT_UD ? IBV_QPS_RTS : IBV_QPS_INIT),
        "a new %s QP in state %d", type == IBV_QPT_UD ? "UD" : "RC", qa.qp_state);
}

static void free_conn(struct conn *c) {
  if (c->id != NULL && c->id->qp != NULL) rdma_destroy_qp(c->id);
  if (c->mr != NULL) ibv_dereg_mr(c->mr);
  if (c->cq != NULL) ibv_destroy_cq(c->cq);
  if (c->pd != NULL) ibv_dealloc_pd(c->pd);
  if (c->id != NULL) rdma_destroy_id(c->id);
  memset(c, 0, sizeof *c);
}

static void post_recv(struct conn *c, size_t off, size_t len) {
  struct ibv_sge s = {(uintptr_t)(c->buf + off), (uint32_t)len, c->mr->lkey};
  struct ibv_recv_wr w, *bad;
  memset(&w, 0, sizeof w);
  w.wr_id = 1;
  w.sg_list = &s;
  w.num_sge = 1;
  CHECK(ibv_post_recv(c->id->qp, &w, &bad) == 0, "ibv_post_recv");
}

static struct ibv_wc wait_wc(struct conn *c) {
  struct ibv_wc wc;
  for (long spins = 0;; ++spins) {
    int n = ibv_poll_cq(c->cq, 1, &wc);
    if (n < 0 || spins > 200000000L) CHECK(0, "ibv_poll_cq %d after %ld polls", n, spins);
    if (n == 1) break;
    if (spins % 1000 == 999) usleep(100);
  }
  CHECK(wc.status == IBV_WC_SUCCESS, "completion status %s", ibv_wc_status_str(wc.status));
  return wc;
}

static uint16_t src_port(struct rdma_cm_id *id) {
  return ntohs(((struct sockaddr_in *)&id->route.addr.src_addr)->sin_port);
}

/* A listener on server_ip:port (0: any free port); returns the port. */
static uint16_t listen_on(struct rdma_event_channel *ch, struct rdma_cm_id **id, uint16_t port,
                          enum rdma_port_space ps) {
  CHECK(rdma_create_id(ch, id, (void *)0x5e7, ps) == 0, "rdma_create_id (listener)");
  struct sockaddr_in a = addr_of(server_ip, port);
  CHECK(rdma_bind_addr(*id, (struct sockaddr *)&a) == 0, "rdma_bind_addr %s:%u", server_ip, port);
  CHECK((*id)->verbs != NULL, "a listener bound to an address has its device");
  CHECK(rdma_listen(*id, 8) == 0, "rdma_listen");
  uint16_t p = src_port(*id);
  CHECK(p != 0 && (port == 0 || p == port), "the listener's port %u", p);
  return p;
}

/* A client ID on client_ip, resolved to server_ip:port (address and route). */
static void resolve(struct rdma_event_channel *ch, struct conn *c, uint16_t port,
                    enum rdma_port_space ps) {
  CHECK(rdma_create_id(ch, &c->id, c, ps) == 0, "rdma_create_id (client)");
  struct sockaddr_in src = addr_of(client_ip, 0);
  struct sockaddr_in dst = addr_of(server_ip, port);
  CHECK(rdma_resolve_addr(c->id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0,
        "rdma_resolve_addr");
  struct rdma_cm_event *e = expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
  CHECK(e->id == c->id && e->status == 0, "ADDR_RESOLVED for its ID");
  rdma_ack_cm_event(e);
  CHECK(c->id->verbs != NULL, "id->verbs after ADDR_RESOLVED");
  /* librdmacm's ucma_get_device: bound to its device, the ID carries the device's default PD,
   * on which programs make QPs of their own (pyverbs' external-QP tests do). */
  CHECK(c->id->pd != NULL && c->id->pd->context == c->id->verbs,
        "id->pd, the device's default PD, after ADDR_RESOLVED");
  struct ibv_cq *own_cq = ibv_create_cq(c->id->verbs, 2, NULL, NULL, 0);
  CHECK(own_cq != NULL, "a CQ of the program's own on id->verbs");
  struct ibv_qp_init_attr own;
  memset(&own, 0, sizeof own);
  own.qp_type = IBV_QPT_RC;
  own.send_cq = own.recv_cq = own_cq;
  own.cap.max_send_wr = own.cap.max_recv_wr = own.cap.max_send_sge = own.cap.max_recv_sge = 1;
  struct ibv_qp *own_qp = ibv_create_qp(c->id->pd, &own);
  CHECK(own_qp != NULL, "a QP of the program's own on id->pd (errno %d)", errno);
  CHECK(ibv_destroy_qp(own_qp) == 0 && ibv_destroy_cq(own_cq) == 0, "the program's QP and CQ go");
  CHECK(rdma_resolve_route(c->id, 2000) == 0, "rdma_resolve_route");
  e = expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
  rdma_ack_cm_event(e);
  CHECK(c->id->route.num_paths == 1 && c->id->route.path_rec != NULL, "one path record");
  union ibv_gid want;
  memset(&want, 0, sizeof want);
  want.raw[10] = want.raw[11] = 0xff;
  inet_pton(AF_INET, server_ip, &want.raw[12]);
  CHECK(memcmp(c->id->route.path_rec->dgid.raw, want.raw, 16) == 0, "the path's DGID");
  CHECK(memcmp(c->id->route.addr.addr.ibaddr.dgid.raw, want.raw, 16) == 0, "the route's DGID");
}

/* A client RC QP on client_ip connecting to server_ip:port with default parameters. */
static void connect_rc(struct rdma_event_channel *cch, struct conn *c, uint16_t port) {
  resolve(cch, c, port, RDMA_PS_TCP);
  make_qp(c, IBV_QPT_RC);
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof cp);
  CHECK(rdma_connect(c->id, &cp) == 0, "rdma_connect");
}

/* ---- the cases ---- */

static void rc_connection(struct rdma_event_channel *sch, struct rdma_event_channel *cch,
                          struct rdma_cm_id *listener, uint16_t port) {
  struct conn cl, sv;
  memset(&cl, 0, sizeof cl);
  memset(&sv, 0, sizeof sv);
  resolve(cch, &cl, port, RDMA_PS_TCP);
  make_qp(&cl, IBV_QPT_RC);
  post_recv(&cl, 0, 64);

  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof cp);
  char hello[56];
  snprintf(hello, sizeof hello, "hello rkey %u addr %llu", cl.mr->rkey,
           (unsigned long long)(uintptr_t)(cl.buf + 1024));
  cp.private_data = hello;
  cp.private_data_len = sizeof hello;
  cp.responder_resources = 4;
  cp.initiator_depth = 4;
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  CHECK(rdma_connect(cl.id, &cp) == 0, "rdma_connect");

  struct rdma_cm_event *e = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  CHECK(e->listen_id == listener, "CONNECT_REQUEST names its listener");
  CHECK(e->id != NULL && e->id != listener && e->id->context == listener->context,
        "a new ID with the listener's context");
  CHECK(e->param.conn.private_data_len == 56, "the REQ's private data is 56 bytes (got %u)",
        e->param.conn.private_data_len);
  CHECK(memcmp(e->param.conn.private_data, hello, sizeof hello) == 0, "the client's private data");
  CHECK(e->param.conn.qp_num == cl.id->qp->qp_num, "the REQ's QPN");
  CHECK(e->param.conn.initiator_depth == 4 && e->param.conn.responder_resources == 4,
        "the REQ's resources");
  CHECK(e->id->verbs != NULL, "the new ID's device");
  CHECK(e->id->pd != NULL && e->id->pd->context == e->id->verbs, "the new ID's default PD");
  struct sockaddr_in *peer = (struct sockaddr_in *)rdma_get_peer_addr(e->id);
  char ptxt[32];
  inet_ntop(AF_INET, &peer->sin_addr, ptxt, sizeof ptxt);
  CHECK(peer->sin_family == AF_INET && strcmp(ptxt, client_ip) == 0, "the peer's address %s",
        ptxt);
  CHECK(ntohs(peer->sin_port) == src_port(cl.id), "the peer's port");
  sv.id = e->id;
  rdma_ack_cm_event(e);
  make_qp(&sv, IBV_QPT_RC);
  post_recv(&sv, 0, 64);

  struct rdma_conn_param ap;
  memset(&ap, 0, sizeof ap);
  const char welcome[] = "welcome";
  ap.private_data = welcome;
  ap.private_data_len = sizeof welcome;
  ap.responder_resources = 4;
  ap.initiator_depth = 4;
  ap.rnr_retry_count = 7;
  CHECK(rdma_accept(sv.id, &ap) == 0, "rdma_accept");
  struct ibv_qp_attr qa;
  struct ibv_qp_init_attr qi;
  CHECK(ibv_query_qp(sv.id->qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_RTS,
        "the passive QP is RTS after rdma_accept");

  e = expect_event(cch, RDMA_CM_EVENT_ESTABLISHED);
  CHECK(e->id == cl.id, "ESTABLISHED for the client's ID");
  CHECK(e->param.conn.private_data_len == 196, "the REP's private data is 196 bytes");
  CHECK(memcmp(e->param.conn.private_data, welcome, sizeof welcome) == 0,
        "the server's private data");
  rdma_ack_cm_event(e);
  e = expect_event(sch, RDMA_CM_EVENT_ESTABLISHED);
  CHECK(e->id == sv.id, "ESTABLISHED for the server's ID");
  rdma_ack_cm_event(e);

  /* What the CM negotiated, as rdma_init_qp_attr says it. */
  struct ibv_qp_attr ia;
  int mask = 0;
  memset(&ia, 0, sizeof ia);
  ia.qp_state = IBV_QPS_RTR;
  CHECK(rdma_init_qp_attr(cl.id, &ia, &mask) == 0, "rdma_init_qp_attr RTR");
  CHECK(ia.dest_qp_num == sv.id->qp->qp_num, "RTR's dest_qp_num");
  CHECK((mask & IBV_QP_DEST_QPN) && (mask & IBV_QP_AV) && (mask & IBV_QP_RQ_PSN), "RTR's mask");
  struct ibv_qp_attr sa;
  memset(&sa, 0, sizeof sa);
  sa.qp_state = IBV_QPS_RTS;
  CHECK(rdma_init_qp_attr(sv.id, &sa, &mask) == 0, "rdma_init_qp_attr RTS");
  CHECK(sa.sq_psn == ia.rq_psn, "the server sends from the PSN the client expects");
  CHECK(ibv_query_qp(cl.id->qp, &qa, IBV_QP_STATE | IBV_QP_DEST_QPN, &qi) == 0 &&
            qa.qp_state == IBV_QPS_RTS && qa.dest_qp_num == sv.id->qp->qp_num,
        "the active QP is RTS, connected to the passive one");

  CHECK(ibv_query_qp(cl.id->qp, &qa, IBV_QP_ACCESS_FLAGS, &qi) == 0 &&
            (qa.qp_access_flags & IBV_ACCESS_REMOTE_WRITE),
        "the active QP takes RDMA WRITEs (access flags %#x)", qa.qp_access_flags);
  /* Data both ways: a SEND, and an RDMA WRITE to where the private data said. */
  strcpy(cl.buf + 100, "ping");
  struct ibv_sge s = {(uintptr_t)(cl.buf + 100), 5, cl.mr->lkey};
  struct ibv_send_wr w, *bad;
  memset(&w, 0, sizeof w);
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = IBV_WR_SEND;
  w.send_flags = IBV_SEND_SIGNALED;
  CHECK(ibv_post_send(cl.id->qp, &w, &bad) == 0, "ibv_post_send SEND");
  wait_wc(&cl);
  struct ibv_wc wc = wait_wc(&sv);
  CHECK(wc.opcode == IBV_WC_RECV && wc.byte_len == 5 && strcmp(sv.buf, "ping") == 0,
        "the server received the SEND");
  unsigned rkey = 0;
  unsigned long long raddr = 0;
  CHECK(sscanf(hello, "hello rkey %u addr %llu", &rkey, &raddr) == 2, "parse");
  strcpy(sv.buf + 200, "written by the server");
  struct ibv_sge s2 = {(uintptr_t)(sv.buf + 200), 22, sv.mr->lkey};
  memset(&w, 0, sizeof w);
  w.sg_list = &s2;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.remote_addr = raddr;
  w.wr.rdma.rkey = rkey;
  CHECK(ibv_post_send(sv.id->qp, &w, &bad) == 0, "ibv_post_send WRITE");
  wait_wc(&sv);
  /* A SEND behind it tells the client the WRITE has landed (RC keeps their order): the client
   * reads its memory after its receive completion, as an application must. */
  memset(&w, 0, sizeof w);
  w.sg_list = &s2;
  w.num_sge = 1;
  w.opcode = IBV_WR_SEND;
  w.send_flags = IBV_SEND_SIGNALED;
  CHECK(ibv_post_send(sv.id->qp, &w, &bad) == 0, "ibv_post_send SEND");
  wait_wc(&sv);
  wc = wait_wc(&cl);
  CHECK(wc.opcode == IBV_WC_RECV, "the client's receive");
  CHECK(strcmp(cl.buf + 1024, "written by the server") == 0, "the WRITE landed");

  /* The client disconnects: both QPs end in ERR, both sides see DISCONNECTED. */
  CHECK(rdma_disconnect(cl.id) == 0, "rdma_disconnect (client)");
  CHECK(ibv_query_qp(cl.id->qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_ERR,
        "the disconnecting QP is in ERR");
  e = expect_event(sch, RDMA_CM_EVENT_DISCONNECTED);
  CHECK(e->id == sv.id, "DISCONNECTED for the server's ID");
  rdma_ack_cm_event(e);
  CHECK(rdma_disconnect(sv.id) == 0, "rdma_disconnect (server, the DREP)");
  e = expect_event(cch, RDMA_CM_EVENT_DISCONNECTED);
  CHECK(e->id == cl.id, "DISCONNECTED for the client's ID");
  rdma_ack_cm_event(e);
  free_conn(&cl);
  free_conn(&sv);
}

/* Moves `qp` to `state` with what rdma_init_qp_attr says for `id`. */
static void drive(struct rdma_cm_id *id, struct ibv_qp *qp, enum ibv_qp_state state) {
  struct ibv_qp_attr a;
  int mask = 0;
  memset(&a, 0, sizeof a);
  a.qp_state = state;
  CHECK(rdma_init_qp_attr(id, &a, &mask) == 0, "rdma_init_qp_attr(%d)", state);
  CHECK(ibv_modify_qp(qp, &a, mask) == 0, "ibv_modify_qp to %d with mask %#x", state, mask);
}

/* Applications that drive their own QPs (UCX does): QPs from ibv_create_qp, not on the IDs; the
 * QP numbers in the connection parameters; each side moves its QP with rdma_init_qp_attr; the
 * active side answers CONNECT_RESPONSE with rdma_establish. Then data flows. */
static void own_qps(struct rdma_event_channel *sch, struct rdma_event_channel *cch,
                    uint16_t port) {
  struct conn cl, sv;
  memset(&cl, 0, sizeof cl);
  memset(&sv, 0, sizeof sv);
  resolve(cch, &cl, port, RDMA_PS_TCP);
  cl.pd = ibv_alloc_pd(cl.id->verbs);
  cl.cq = ibv_create_cq(cl.id->verbs, 16, NULL, NULL, 0);
  cl.mr = ibv_reg_mr(cl.pd, cl.buf, sizeof cl.buf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_qp_init_attr a;
  memset(&a, 0, sizeof a);
  a.send_cq = a.recv_cq = cl.cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = a.cap.max_recv_wr = 8;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  struct ibv_qp *cqp = ibv_create_qp(cl.pd, &a);
  CHECK(cqp != NULL, "ibv_create_qp (client)");
  drive(cl.id, cqp, IBV_QPS_INIT);
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof cp);
  cp.qp_num = cqp->qp_num;
  cp.responder_resources = 1;
  cp.initiator_depth = 1;
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  CHECK(rdma_connect(cl.id, &cp) == 0, "rdma_connect with the application's QP");

  struct rdma_cm_event *e = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  CHECK(e->param.conn.qp_num == cqp->qp_num, "the REQ carries the application's QPN");
  sv.id = e->id;
  rdma_ack_cm_event(e);
  sv.pd = ibv_alloc_pd(sv.id->verbs);
  sv.cq = ibv_create_cq(sv.id->verbs, 16, NULL, NULL, 0);
  sv.mr = ibv_reg_mr(sv.pd, sv.buf, sizeof sv.buf, IBV_ACCESS_LOCAL_WRITE);
  a.send_cq = a.recv_cq = sv.cq;
  struct ibv_qp *sqp = ibv_create_qp(sv.pd, &a);
  CHECK(sqp != NULL, "ibv_create_qp (server)");
  drive(sv.id, sqp, IBV_QPS_INIT);
  drive(sv.id, sqp, IBV_QPS_RTR);
  drive(sv.id, sqp, IBV_QPS_RTS);
  struct ibv_sge s = {(uintptr_t)sv.buf, 64, sv.mr->lkey};
  struct ibv_recv_wr rw, *rbad;
  memset(&rw, 0, sizeof rw);
  rw.sg_list = &s;
  rw.num_sge = 1;
  CHECK(ibv_post_recv(sqp, &rw, &rbad) == 0, "ibv_post_recv");
  memset(&cp, 0, sizeof cp);
  cp.qp_num = sqp->qp_num;
  cp.responder_resources = 1;
  cp.initiator_depth = 1;
  CHECK(rdma_accept(sv.id, &cp) == 0, "rdma_accept with the application's QP");

  e = expect_event(cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
  CHECK(e->param.conn.qp_num == sqp->qp_num, "the REP carries the server's QPN");
  rdma_ack_cm_event(e);
  drive(cl.id, cqp, IBV_QPS_RTR);
  drive(cl.id, cqp, IBV_QPS_RTS);
  CHECK(rdma_establish(cl.id) == 0, "rdma_establish");
  rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_ESTABLISHED));

  strcpy(cl.buf, "own qp");
  struct ibv_sge cs = {(uintptr_t)cl.buf, 7, cl.mr->lkey};
  struct ibv_send_wr w, *bad;
  memset(&w, 0, sizeof w);
  w.sg_list = &cs;
  w.num_sge = 1;
  w.opcode = IBV_WR_SEND;
  w.send_flags = IBV_SEND_SIGNALED;
  CHECK(ibv_post_send(cqp, &w, &bad) == 0, "ibv_post_send");
  wait_wc(&cl);
  wait_wc(&sv);
  CHECK(strcmp(sv.buf, "own qp") == 0, "the SEND over the application's QPs");

  CHECK(rdma_disconnect(cl.id) == 0, "rdma_disconnect");
  rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_DISCONNECTED));
  CHECK(rdma_disconnect(sv.id) == 0, "rdma_disconnect (server)");
  rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_DISCONNECTED));
  ibv_destroy_qp(cqp);
  ibv_destroy_qp(sqp);
  free_conn(&cl);
  free_conn(&sv);
}

static void rejected(struct rdma_event_channel *sch, struct rdma_event_channel *cch,
                     uint16_t port) {
  struct conn cl;
  memset(&cl, 0, sizeof cl);
  resolve(cch, &cl, port, RDMA_PS_TCP);
  make_qp(&cl, IBV_QPT_RC);
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof cp);
  /* More private data than a REQ carries after rdma_cm's header (56 bytes): EINVAL. */
  char big[200];
  memset(big, 0x5a, sizeof big);
  cp.private_data = big;
  cp.private_data_len = 57;
  CHECK(rdma_connect(cl.id, &cp) != 0 && errno == EINVAL, "57 bytes of REQ private data");
  cp.private_data = NULL;
  cp.private_data_len = 0;
  cp.retry_count = 7;
  CHECK(rdma_connect(cl.id, &cp) == 0, "rdma_connect");
  struct rdma_cm_event *e = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  struct rdma_cm_id *req = e->id;
  rdma_ack_cm_event(e);
  /* More than a REP (196) or a REJ (148) carries: EINVAL, and the request is still there. */
  memset(&cp, 0, sizeof cp);
  cp.private_data = big;
  cp.private_data_len = 197;
  CHECK(rdma_accept(req, &cp) != 0 && errno == EINVAL, "197 bytes of REP private data");
  CHECK(rdma_reject(req, big, 149) != 0 && errno == EINVAL, "149 bytes of REJ private data");
  const char no[] = "go away";
  CHECK(rdma_reject(req, no, sizeof no) == 0, "rdma_reject");
  e = expect_event(cch, RDMA_CM_EVENT_REJECTED);
  CHECK(e->status == 28, "REJECTED with reason 28 (consumer defined), got %d", e->status);
  CHECK(e->param.conn.private_data != NULL && memcmp(e->param.conn.private_data, no, sizeof no) == 0,
        "the REJ's private data");
  rdma_ack_cm_event(e);
  CHECK(rdma_destroy_id(req) == 0, "rdma_destroy_id (rejected request)");
  free_conn(&cl);
}

static void nobody_listens(struct rdma_event_channel *cch, uint16_t port) {
  struct conn cl;
  memset(&cl, 0, sizeof cl);
  connect_rc(cch, &cl, port);
  struct rdma_cm_event *e = expect_event(cch, RDMA_CM_EVENT_REJECTED);
  CHECK(e->status == 8, "REJECTED with reason 8 (invalid service ID), got %d", e->status);
  rdma_ack_cm_event(e);
  free_conn(&cl);
}

static void ud_sidr(struct rdma_event_channel *sch, struct rdma_event_channel *cch) {
  struct rdma_cm_id *listener;
  uint16_t port = listen_on(sch, &listener, 0, RDMA_PS_UDP);
  struct conn cl, sv;
  memset(&cl, 0, sizeof cl);
  memset(&sv, 0, sizeof sv);
  resolve(cch, &cl, port, RDMA_PS_UDP);
  make_qp(&cl, IBV_QPT_UD);
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof cp);
  const char hi[] = "ud hello";
  cp.private_data = hi;
  cp.private_data_len = sizeof hi;
  CHECK(rdma_connect(cl.id, &cp) == 0, "rdma_connect (SIDR)");
  struct rdma_cm_event *e = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  CHECK(e->param.ud.private_data_len == 180, "the SIDR_REQ's private data is 180 bytes");
  CHECK(memcmp(e->param.ud.private_data, hi, sizeof hi) == 0, "the SIDR_REQ's private data");
  sv.id = e->id;
  rdma_ack_cm_event(e);
  make_qp(&sv, IBV_QPT_UD);
  post_recv(&sv, 0, 40 + 64);
  CHECK(rdma_accept(sv.id, NULL) == 0, "rdma_accept (SIDR_REP)");
  e = expect_event(cch, RDMA_CM_EVENT_ESTABLISHED);
  CHECK(e->param.ud.qp_num == sv.id->qp->qp_num, "the SIDR_REP's QPN");
  CHECK(e->param.ud.qkey == RDMA_UDP_QKEY, "the SIDR_REP's Q_Key %#x", e->param.ud.qkey);
  struct ibv_ah *ah = ibv_create_ah(cl.pd, &e->param.ud.ah_attr);
  CHECK(ah != NULL, "ibv_create_ah from the event's ah_attr");
  uint32_t qpn = e->param.ud.qp_num, qkey = e->param.ud.qkey;
  rdma_ack_cm_event(e);
  strcpy(cl.buf, "datagram");
  struct ibv_sge s = {(uintptr_t)cl.buf, 9, cl.mr->lkey};
  struct ibv_send_wr w, *bad;
  memset(&w, 0, sizeof w);
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = IBV_WR_SEND;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.ud.ah = ah;
  w.wr.ud.remote_qpn = qpn;
  w.wr.ud.remote_qkey = qkey;
  CHECK(ibv_post_send(cl.id->qp, &w, &bad) == 0, "ibv_post_send UD");
  wait_wc(&cl);
  struct ibv_wc wc = wait_wc(&sv);
  CHECK(wc.byte_len == 40 + 9 && strcmp(sv.buf + 40, "datagram") == 0, "the datagram arrived");
  ibv_destroy_ah(ah);
  free_conn(&cl);
  free_conn(&sv);
  rdma_destroy_id(listener);
}

static void migrate(struct rdma_event_channel *sch, struct rdma_event_channel *cch,
                    uint16_t port) {
  struct conn cl, sv;
  memset(&cl, 0, sizeof cl);
  memset(&sv, 0, sizeof sv);
  connect_rc(cch, &cl, port);
  struct rdma_cm_event *e = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  sv.id = e->id;
  rdma_ack_cm_event(e);
  /* To the channel it is on: nothing to do (libfabric's verbs provider does this for every
   * request it accepts). */
  CHECK(rdma_migrate_id(sv.id, sch) == 0, "rdma_migrate_id to its own channel");
  CHECK(sv.id->channel == sch, "the ID's channel is unchanged");
  struct rdma_event_channel *other = rdma_create_event_channel();
  CHECK(other != NULL, "a second channel");
  nonblocking(other);
  CHECK(rdma_migrate_id(sv.id, other) == 0, "rdma_migrate_id");
  CHECK(sv.id->channel == other, "the ID's channel");
  make_qp(&sv, IBV_QPT_RC);
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof cp);
  CHECK(rdma_accept(sv.id, &cp) == 0, "rdma_accept");
  rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_ESTABLISHED));
  rdma_ack_cm_event(expect_event(other, RDMA_CM_EVENT_ESTABLISHED));
  CHECK(rdma_disconnect(cl.id) == 0, "rdma_disconnect");
  e = expect_event(other, RDMA_CM_EVENT_DISCONNECTED);
  CHECK(e->id == sv.id, "DISCONNECTED on the new channel");
  rdma_ack_cm_event(e);
  struct rdma_cm_event *none;
  CHECK(rdma_get_cm_event(sch, &none) != 0 && errno == EAGAIN, "nothing on the old channel");
  free_conn(&sv);
  free_conn(&cl);
  rdma_destroy_event_channel(other);
}

/* A loopback address that no device has (127.77.96.9): bound as the wildcard, as the kernel's
 * rdma_cm binds it (its cma_any_addr counts loopback addresses): no device attached, the address
 * kept as given, and a listen on it hears a REQ to a device's own address. libfabric's verbs
 * provider binds "localhost" so to find that no device owns it. */
static void loopback_bind(struct rdma_event_channel *sch, struct rdma_event_channel *cch) {
  struct rdma_cm_id *l;
  CHECK(rdma_create_id(sch, &l, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
  struct sockaddr_in a = addr_of("127.77.96.9", 0);
  CHECK(rdma_bind_addr(l, (struct sockaddr *)&a) == 0, "rdma_bind_addr 127.77.96.9");
  CHECK(l->verbs == NULL, "no device attached to a loopback bind");
  const struct sockaddr_in *got = (const struct sockaddr_in *)rdma_get_local_addr(l);
  CHECK(got->sin_family == AF_INET && got->sin_addr.s_addr == a.sin_addr.s_addr,
        "the bound address is kept as given");
  const uint16_t port = src_port(l);
  CHECK(port != 0, "an ephemeral port is chosen at bind");
  CHECK(rdma_listen(l, 4) == 0, "rdma_listen on the loopback bind");
  struct conn cl;
  memset(&cl, 0, sizeof cl);
  connect_rc(cch, &cl, port);
  struct rdma_cm_event *e = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  CHECK(e->listen_id == l, "the REQ to %s reaches the loopback-bound listener", server_ip);
  struct rdma_cm_id *req = e->id;
  rdma_ack_cm_event(e);
  CHECK(rdma_reject(req, NULL, 0) == 0, "rdma_reject");
  rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_REJECTED));
  CHECK(rdma_destroy_id(req) == 0, "rdma_destroy_id (rejected request)");
  free_conn(&cl);
  CHECK(rdma_destroy_id(l) == 0, "rdma_destroy_id (loopback listener)");
  /* An address that is not loopback and no device's: still refused. */
  CHECK(rdma_create_id(sch, &l, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
  a = addr_of("192.0.2.77", 0);
  CHECK(rdma_bind_addr(l, (struct sockaddr *)&a) != 0 && errno == EADDRNOTAVAIL,
        "a bind of no device's address: EADDRNOTAVAIL");
  rdma_destroy_id(l);
}

static void synchronous(uint16_t port) {
  struct rdma_cm_id *id;
  CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id without a channel");
  struct sockaddr_in src = addr_of(client_ip, 0);
  struct sockaddr_in dst = addr_of(server_ip, port);
  CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0,
        "synchronous rdma_resolve_addr");
  CHECK(id->event != NULL && id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED,
        "its event in id->event");
  CHECK(rdma_resolve_route(id, 2000) == 0, "synchronous rdma_resolve_route");
  CHECK(id->event != NULL && id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
        "ROUTE_RESOLVED in id->event");
  CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id (synchronous)");
  /* Resolved synchronously, then moved to a channel (libfabric's verbs provider does so with
   * every connecting endpoint): the last synchronous event is acknowledged on the way, so that
   * rdma_destroy_id does not wait for it. */
  struct rdma_event_channel *ch = rdma_create_event_channel();
  CHECK(ch != NULL, "rdma_create_event_channel");
  CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id without a channel");
  CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0,
        "synchronous rdma_resolve_addr");
  CHECK(rdma_resolve_route(id, 2000) == 0, "synchronous rdma_resolve_route");
  CHECK(rdma_migrate_id(id, ch) == 0, "rdma_migrate_id from synchronous to a channel");
  CHECK(id->channel == ch, "the ID's channel");
  CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id (migrated)");
  rdma_destroy_event_channel(ch);
}

/* rping's event thread: rdma_get_cm_event in a loop, exiting the process if it fails. */
struct reader {
  struct rdma_event_channel *ch;
  int events;
  int returned;
  int err;
};

static void *reader_main(void *arg) {
  struct reader *r = arg;
  for (;;) {
    struct rdma_cm_event *e;
    if (rdma_get_cm_event(r->ch, &e) != 0) {
      r->err = errno;
      __atomic_store_n(&r->returned, 1, __ATOMIC_SEQ_CST);
      return NULL;
    }
    rdma_ack_cm_event(e);
    __atomic_add_fetch(&r->events, 1, __ATOMIC_SEQ_CST);
  }
}

/* The main thread resolves an ID on the reader's channel, destroys the ID while its last event is
 * under way (the reader wakes for it and finds the ID gone) and destroys the channel: the reader
 * must stay in rdma_get_cm_event (it once returned EBADF there, and rping's exited with an
 * error). It is left blocked, as a thread in read() on the kernel's closed file is. */
static void blocked_reader(uint16_t port) {
  static struct reader r;
  r.ch = rdma_create_event_channel();
  CHECK(r.ch != NULL, "rdma_create_event_channel");
  pthread_t t;
  CHECK(pthread_create(&t, NULL, reader_main, &r) == 0, "pthread_create");
  struct rdma_cm_id *id;
  CHECK(rdma_create_id(r.ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
  struct sockaddr_in src = addr_of(client_ip, 0);
  struct sockaddr_in dst = addr_of(server_ip, port);
  CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0,
        "rdma_resolve_addr");
  for (int i = 0; i < 500 && __atomic_load_n(&r.events, __ATOMIC_SEQ_CST) < 1; ++i) usleep(10000);
  CHECK(r.events == 1, "the reader got ADDR_RESOLVED");
  CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route");
  CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
  rdma_destroy_event_channel(r.ch);
  /* It would return at once: 200 ms is plenty to see it. */
  for (int i = 0; i < 20 && !__atomic_load_n(&r.returned, __ATOMIC_SEQ_CST); ++i) usleep(10000);
  CHECK(!r.returned, "the blocked reader returned (errno %d) when the channel was destroyed",
        r.err);
  pthread_detach(t);
  /* A non-blocking call on a destroyed channel fails, as read() on a closed fd (a blocking one
   * blocks for good, as the reader does). */
  struct rdma_event_channel *nb = rdma_create_event_channel();
  CHECK(nb != NULL, "rdma_create_event_channel");
  nonblocking(nb);
  rdma_destroy_event_channel(nb);
  struct rdma_cm_event *e;
  CHECK(rdma_get_cm_event(nb, &e) != 0 && errno == EBADF, "a destroyed channel: EBADF");
}

/* A child process listens on `port` and serves one connection; the parent connects to it while
 * its own listener keeps its own. Then the child is killed: a connect gets REJECTED. */
static void two_processes(struct rdma_event_channel *sch, struct rdma_event_channel *cch,
                          struct rdma_cm_id *parent_listener, uint16_t parent_port) {
  int ready[2];
  CHECK(pipe(ready) == 0, "pipe");
  uint16_t child_port = (uint16_t)(parent_port + 1);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    close(ready[0]);
    struct rdma_event_channel *ch = rdma_create_event_channel();
    CHECK(ch != NULL, "child channel");
    nonblocking(ch);
    struct rdma_cm_id *l;
    listen_on(ch, &l, child_port, RDMA_PS_TCP);
    CHECK(write(ready[1], "r", 1) == 1, "ready");
    struct rdma_cm_event *e = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
    CHECK(e->listen_id == l, "the child's own listener");
    struct conn sv;
    memset(&sv, 0, sizeof sv);
    sv.id = e->id;
    rdma_ack_cm_event(e);
    make_qp(&sv, IBV_QPT_RC);
    struct rdma_conn_param ap;
    memset(&ap, 0, sizeof ap);
    CHECK(rdma_accept(sv.id, &ap) == 0, "child rdma_accept");
    rdma_ack_cm_event(expect_event(ch, RDMA_CM_EVENT_ESTABLISHED));
    CHECK(write(ready[1], "e", 1) == 1, "established");
    for (;;) pause(); /* until killed */
  }
  close(ready[1]);
  char c;
  CHECK(read(ready[0], &c, 1) == 1 && c == 'r', "the child listens");
  /* A connection to the child's listener: our own listener sees nothing. */
  struct conn cl;
  memset(&cl, 0, sizeof cl);
  resolve(cch, &cl, child_port, RDMA_PS_TCP);
  make_qp(&cl, IBV_QPT_RC);
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof cp);
  CHECK(rdma_connect(cl.id, &cp) == 0, "rdma_connect to the child");
  rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_ESTABLISHED));
  CHECK(read(ready[0], &c, 1) == 1 && c == 'e', "the child is established");
  struct rdma_cm_event *none;
  CHECK(rdma_get_cm_event(sch, &none) != 0 && errno == EAGAIN,
        "the parent's listener got no request");
  /* Our own listener still gets its own. */
  rc_connection(sch, cch, parent_listener, parent_port);
  /* The child dies: its connection goes (the client sees DISCONNECTED: the coordinator sends
   * the DREQ for the dead process's ID) and its listener with it. */
  kill(pid, SIGKILL);
  int st;
  CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_DISCONNECTED));
  free_conn(&cl);
  nobody_listens(cch, child_port);
  close(ready[0]);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: rdmacm_abi_test SERVER_IP CLIENT_IP\n");
    return 2;
  }
  server_ip = argv[1];
  client_ip = argv[2];
  struct rdma_event_channel *sch = rdma_create_event_channel();
  struct rdma_event_channel *cch = rdma_create_event_channel();
  CHECK(sch != NULL && cch != NULL, "rdma_create_event_channel");
  CHECK(sch->fd >= 0 && sch->fd != cch->fd, "each channel has its fd");
  nonblocking(sch);
  nonblocking(cch);
  struct rdma_cm_event *e;
  CHECK(rdma_get_cm_event(sch, &e) != 0 && errno == EAGAIN, "an empty non-blocking channel");
  struct pollfd p = {sch->fd, POLLIN, 0};
  CHECK(poll(&p, 1, 0) == 0, "an empty channel's fd is not readable");

  struct rdma_cm_id *listener;
  uint16_t port = listen_on(sch, &listener, 0, RDMA_PS_TCP);
  /* Binding the same port again is refused. */
  struct rdma_cm_id *dup;
  CHECK(rdma_create_id(sch, &dup, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
  struct sockaddr_in a = addr_of(server_ip, port);
  CHECK(rdma_bind_addr(dup, (struct sockaddr *)&a) != 0 && errno == EADDRINUSE,
        "a second bind of the port: EADDRINUSE");
  rdma_destroy_id(dup);

  rc_connection(sch, cch, listener, port);
  own_qps(sch, cch, port);
  rejected(sch, cch, port);
  nobody_listens(cch, (uint16_t)(port + 100));
  ud_sidr(sch, cch);
  migrate(sch, cch, port);
  loopback_bind(sch, cch);
  synchronous(port);
  two_processes(sch, cch, listener, port);
  blocked_reader(port);
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(sch);
  rdma_destroy_event_channel(cch);
  printf("rdmacm_abi_test: PASS %d checks\n", checks);
  return 0;
}

// uroce_verbs_check: a small verbs program that runs every RC operation (SEND, SEND with
// Immediate, RDMA WRITE, RDMA WRITE with Immediate, RDMA READ, Compare&Swap, Fetch&Add) and UD
// SEND between two processes and verifies every byte, every completion and every immediate;
// on request (-o mw) also a type 2 memory window: bound, written through, and invalidated by
// SEND with Invalidate; and IBTA 1.5's ATOMIC WRITE (-o atomic_write) and FLUSH (-o flush).
//
// It is written only against rdma-core 44's <infiniband/verbs.h> and links the system
// libibverbs, so the very same binary runs in a VM over the kernel's Soft-RoCE (rdma_rxe) and on
// the host over uroce's drop-in libibverbs.so.1 (LD_LIBRARY_PATH): the stock tools
// (ibv_*_pingpong, perftest) have no SEND/WRITE with Immediate and do not check UD's GRH area.
//
// Roles: without SERVER_ADDR the program is the server (the responder of every operation), with
// it the client (the requester). Both sides exchange their options, addresses and every step's
// synchronisation as text lines over one TCP connection; every blocking wait is bounded by
// --timeout. The last line is "uroce_verbs_check: PASS <N> checks" (exit 0) or
// "uroce_verbs_check: FAIL: ..." (exit 1); bad arguments or different options on the two sides
// exit 2.
//
// The TCP lines, client first where both send:
//   CONFIG <protocol> ops=.. sizes=.. iters=.. rnr=..   both; must be equal, else exit 2
//   ADDR lid qpn psn ud_qpn ud_psn gid addr rkey len active_mtu mtu_opt   both
//   READY                                   server: its QPs are in RTR/RTS
//   then per (op, size): STEP op size n     client; the server checks it expects that step
//     R i      server: iteration i may start (target buffer prepared, receive posted)
//     S i      client, --rnr only: its message is posted (the server posts the receive late)
//     W i / D i  client: its WRITE / READ i completed (the server checks its buffer)
//     A n      client: its n atomics completed (the server checks the final word)
//     K i rkey server, mw: its window is bound over the target with this key
//     R n      server: all n iterations verified
//   END      both, at the end.   FAIL <text>  either side, when it fails (the other exits too).
// Every message's data is a pattern of (op, size, iteration, offset); receive buffers hold the
// pattern's complement before, and GUARD bytes around them must stay untouched.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PROG "uroce_verbs_check"
#define PROTOCOL "uroce_verbs_check/1"

enum op {
  OP_SEND,
  OP_SEND_IMM,
  OP_WRITE,
  OP_WRITE_IMM,
  OP_READ,
  OP_CAS,
  OP_FAA,
  OP_UD,
  OP_MW,
  OP_ATOMIC_WRITE,
  OP_FLUSH,
  OP_COUNT
};
static const char* const kOpNames[OP_COUNT] = {"send", "send_imm",     "write", "write_imm",
                                               "read", "cas",          "faa",   "ud",
                                               "mw",   "atomic_write", "flush"};
// What runs without -o: all but the memory window and IBTA 1.5's operations (matrix cases of
// their own, as not every provider or kernel has them).
enum { DEFAULT_OPS = OP_MW };

// IBTA 1.5 FLUSH as rdma-core 45 has it (rdma-core 44's headers lack it): wr_flush appended to
// struct ibv_qp_ex, and these values. Only a requester whose library has it may run -o flush
// (uroce's drop-in has; rdma-core 44's rxe provider has not: its struct ends before wr_flush);
// the responder needs only a kernel with FLUSH (rxe since 6.2) and the access flag.
struct qp_ex_v45 {
  struct ibv_qp_ex ex;
  void (*wr_flush)(struct ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr, size_t len,
                   uint8_t type, uint8_t level);
};
enum {
  kQpExWithFlush = 1 << 11,     // IBV_QP_EX_WITH_FLUSH
  kAccessFlushGlobal = 1 << 8,  // IBV_ACCESS_FLUSH_GLOBAL
  kWcFlush = 8,                 // IBV_WC_FLUSH
  kFlushGlobal = 1,             // IBV_FLUSH_GLOBAL (placement type)
  kFlushRange = 0,              // IBV_FLUSH_RANGE (selectivity level)
};

enum { MAX_SIZES = 64 };
enum { CORRUPT_DATA = 1, CORRUPT_IMM = 2 };
static const size_t kDefaultSizes[] = {1,    2,    63,   64,   1023,  1024,
                                       1025, 4095, 4096, 4097, 65536, 1048576};
static const size_t kMaxSize = 64u << 20;
// At most this many bytes per (op, size): a 1 MiB case runs 4 iterations, not 20, so that it
// does not take minutes in an emulated VM.
static const size_t kBytesPerStep = 4u << 20;
static const uint32_t kUdQkey = 0x11111111;
static const size_t kGrhBytes = 40;  // UD receives start with the 40-byte GRH area
enum { GUARD = 64 };                 // bytes around every buffer that must stay untouched
static const uint8_t kGuardByte = 0xa5;
// --rnr: how long the responder waits, after the requester posted, before it posts the receive.
// The delay is the fault being injected (the first attempt must meet an empty receive queue),
// not synchronisation.
static const long kRnrDelayNs = 30 * 1000 * 1000;
// UD is unreliable: a UD message lost on the way (the matrix's loss cases) is asked for again
// after this long without its receive completion. A late original and its resend both
// arriving is recognised (the earlier message's pattern) and ignored.
static const double kUdResendS = 0.25;
enum { UD_HISTORY = 64 };

struct options {
  const char* dev;
  int ib_port;
  int gid_index;
  int tcp_port;
  int mtu;  // bytes; 0 = the smaller of the two ports' active MTUs
  int ops[OP_COUNT];
  int nops;
  size_t sizes[MAX_SIZES];
  int nsizes;
  unsigned iters;
  bool rnr;
  int timeout;
  bool verbose;
  int corrupt;   // self-test only (see usage): 0 off, CORRUPT_DATA or CORRUPT_IMM
  bool drop_ud;  // self-test only (see usage)
  bool dup_ud;   // self-test only (see usage)
  const char* server;
};

static struct options g_opt = {.ib_port = 1, .tcp_port = 18600, .iters = 20, .timeout = 60};
static int g_sock = -1;
static uint64_t g_checks;
static unsigned g_rnr_delayed;
static unsigned g_ud_resends;
static unsigned g_ud_copies;
// The step in progress, for failure messages.
static int g_cur_op = -1;
static size_t g_cur_size;
static long g_cur_iter = -1;

// ---------------------------------------------------------------------------------------------
// Failure reporting

static void tell_peer_raw(const char* line) {
  if (g_sock < 0) return;
  // Best effort: the peer prints what went wrong here instead of timing out.
  (void)send(g_sock, line, strlen(line), MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void where(char* out, size_t cap) {
  out[0] = 0;
  if (g_cur_op < 0) return;
  if (g_cur_iter >= 0) {
    snprintf(out, cap, " (op %s, size %zu, iteration %ld)", kOpNames[g_cur_op], g_cur_size,
             g_cur_iter);
  } else {
    snprintf(out, cap, " (op %s, size %zu)", kOpNames[g_cur_op], g_cur_size);
  }
}

__attribute__((format(printf, 1, 2), noreturn)) static void fail(const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char at[160];
  where(at, sizeof at);
  char line[1300];
  snprintf(line, sizeof line, "FAIL %s%s\n", msg, at);
  tell_peer_raw(line);
  printf("%s: FAIL: %s%s\n", PROG, msg, at);
  fflush(stdout);
  exit(1);
}

__attribute__((format(printf, 1, 2), noreturn)) static void usage_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", PROG);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry '%s --help'.\n", PROG);
  exit(2);
}

static void usage(FILE* to) {
  fprintf(to,
          "Usage: %s [options] [SERVER_ADDR]\n"
          "Runs RC SEND, SEND with Immediate, RDMA WRITE, RDMA WRITE with Immediate, RDMA READ,\n"
          "Compare&Swap, Fetch&Add and UD SEND against a peer and verifies every byte.\n"
          "Without SERVER_ADDR: the server (responder); with it: the client (requester).\n"
          "Both sides must be given the same -o, -s, -n and --rnr.\n"
          "  -d, --ib-dev=DEV        the RDMA device (default: the first one)\n"
          "  -i, --ib-port=PORT      the device's port (default 1)\n"
          "  -g, --gid-idx=INDEX     the local GID index (default 0)\n"
          "  -p, --port=PORT         the TCP port of the out-of-band exchange (default 18600)\n"
          "  -m, --mtu=BYTES         RC path MTU, 256..4096 (default: the smaller active MTU of\n"
          "                          both ports)\n"
          "  -o, --ops=LIST          comma list of send,send_imm,write,write_imm,read,cas,faa,ud,\n"
          "                          mw,atomic_write,flush (default: all but the last three; mw:\n"
          "                          a type 2 memory window bound over the target, a WRITE\n"
          "                          through it, SEND with Invalidate; atomic_write: IBTA 1.5's\n"
          "                          8-byte ATOMIC WRITE; flush: a WRITE and a FLUSH of its\n"
          "                          range, the client's library must have rdma-core 45's\n"
          "                          ibv_wr_flush)\n"
          "  -s, --sizes=LIST        comma list of message sizes in bytes (default\n"
          "                          1,2,63,64,1023,1024,1025,4095,4096,4097,65536,1048576);\n"
          "                          atomics use 8 bytes, UD at most the port MTU\n"
          "  -n, --iters=N           iterations per size (default 20; at most 4 MiB per size)\n"
          "      --rnr               the server posts each receive only after the client posted\n"
          "                          its message, and %ld ms later (Receiver Not Ready)\n"
          "      --timeout=SEC       bound of every blocking step (default 60)\n"
          "  -v, --verbose           a line per verified iteration\n"
          "      --corrupt[=data|imm] SELF-TEST ONLY: the client flips one bit of every message\n"
          "                          it sends or writes (data), or of every immediate (imm), so\n"
          "                          the run must FAIL (exit 1)\n"
          "      --drop-ud           SELF-TEST ONLY: the client does not send the first attempt\n"
          "                          of every other UD message, as if lost: the run must PASS\n"
          "                          with the server asking for them again\n"
          "      --dup-ud            SELF-TEST ONLY: the client sends every UD message once more,\n"
          "                          into the next one's receive: the run must PASS, the server\n"
          "                          setting the copies aside\n"
          "Exit status: 0 all checks passed, 1 a check or step failed, 2 bad arguments or the\n"
          "two sides were given different options.\n",
          PROG, kRnrDelayNs / 1000000);
}

// ---------------------------------------------------------------------------------------------
// Time

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double deadline(void) { return now_s() + g_opt.timeout; }

static int ms_left(double until, const char* step) {
  const double left = until - now_s();
  if (left <= 0) fail("timed out after %d s waiting for %s", g_opt.timeout, step);
  const double ms = left * 1000.0 + 1.0;
  return ms > 1000.0 ? 1000 : (int)ms;
}

// ---------------------------------------------------------------------------------------------
// The out-of-band TCP exchange: one text line per message.

static char g_rbuf[8192];
static size_t g_rlen;

__attribute__((format(printf, 2, 3))) static void tcp_send(const char* step, const char* fmt, ...) {
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof line - 1) fail("internal: line too long for %s", step);
  line[n++] = '\n';
  const double until = deadline();
  size_t off = 0;
  while (off < (size_t)n) {
    struct pollfd p = {.fd = g_sock, .events = POLLOUT};
    int r = poll(&p, 1, ms_left(until, step));
    if (r < 0 && errno != EINTR) fail("poll for %s: %s", step, strerror(errno));
    if (r <= 0) continue;
    ssize_t w = send(g_sock, line + off, (size_t)n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      fail("sending %s to the peer: %s", step, strerror(errno));
    }
    off += (size_t)w;
  }
}

// Receives one line (without its newline). A "FAIL ..." line from the peer ends this side too.
static void tcp_recv(char* out, size_t cap, const char* step) {
  const double until = deadline();
  for (;;) {
    char* nl = memchr(g_rbuf, '\n', g_rlen);
    if (nl != NULL) {
      const size_t len = (size_t)(nl - g_rbuf);
      if (len + 1 > cap) fail("the peer sent a line too long for %s", step);
      memcpy(out, g_rbuf, len);
      out[len] = 0;
      memmove(g_rbuf, nl + 1, g_rlen - len - 1);
      g_rlen -= len + 1;
      if (strncmp(out, "FAIL ", 5) == 0) {
        printf("%s: FAIL: the peer failed: %s\n", PROG, out + 5);
        fflush(stdout);
        exit(1);
      }
      return;
    }
    if (g_rlen == sizeof g_rbuf) fail("the peer sent a line too long for %s", step);
    struct pollfd p = {.fd = g_sock, .events = POLLIN};
    int r = poll(&p, 1, ms_left(until, step));
    if (r < 0 && errno != EINTR) fail("poll for %s: %s", step, strerror(errno));
    if (r <= 0) continue;
    ssize_t got = recv(g_sock, g_rbuf + g_rlen, sizeof g_rbuf - g_rlen, MSG_DONTWAIT);
    if (got == 0) {
      g_sock = -1;
      fail("the peer closed the connection while this side waited for %s", step);
    }
    if (got < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      fail("receiving %s: %s", step, strerror(errno));
    }
    g_rlen += (size_t)got;
  }
}

// Receives one line that must read exactly as `fmt` formats.
__attribute__((format(printf, 2, 3))) static void tcp_expect(const char* step, const char* fmt,
                                                             ...) {
  char want[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(want, sizeof want, fmt, ap);
  va_end(ap);
  char got[2048];
  tcp_recv(got, sizeof got, step);
  if (strcmp(got, want) != 0) {
    fail("out of step with the peer at %s: expected \"%s\", got \"%s\"", step, want, got);
  }
}

static void set_nodelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void tcp_serve(void) {
  int one = 1, zero = 0;
  // One socket for IPv4 and IPv6 clients; IPv4 only on a kernel without IPv6.
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  int r = -1;
  if (fd >= 0) {
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6,
                             .sin6_port = htons((uint16_t)g_opt.tcp_port),
                             .sin6_addr = in6addr_any};
    r = bind(fd, (struct sockaddr*)&a, sizeof a);
    if (r != 0 && errno != EADDRINUSE) {
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) fail("socket: %s", strerror(errno));
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)g_opt.tcp_port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    r = bind(fd, (struct sockaddr*)&a, sizeof a);
  }
  if (r != 0 || listen(fd, 1) != 0) {
    fail("couldn't listen to TCP port %d: %s", g_opt.tcp_port, strerror(errno));
  }
  const double until = deadline();
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char step[64];
    snprintf(step, sizeof step, "a client on TCP port %d", g_opt.tcp_port);
    r = poll(&p, 1, ms_left(until, step));
    if (r < 0 && errno != EINTR) fail("poll: %s", strerror(errno));
    if (r > 0) break;
  }
  g_sock = accept(fd, NULL, NULL);
  if (g_sock < 0) fail("accept: %s", strerror(errno));
  close(fd);
  set_nodelay(g_sock);
}

static void tcp_connect(void) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
  struct addrinfo* res = NULL;
  char port[16];
  snprintf(port, sizeof port, "%d", g_opt.tcp_port);
  if (getaddrinfo(g_opt.server, port, &hints, &res) != 0 || res == NULL) {
    usage_error("'%s' is not a numeric IPv4 or IPv6 address", g_opt.server);
  }
  char step[128];
  snprintf(step, sizeof step, "the server %s port %d to accept the connection", g_opt.server,
           g_opt.tcp_port);
  const double until = deadline();
  for (;;) {
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) fail("socket: %s", strerror(errno));
    int r = connect(fd, res->ai_addr, res->ai_addrlen);
    int err = r == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        r = poll(&p, 1, ms_left(until, step));
        if (r < 0 && errno != EINTR) fail("poll: %s", strerror(errno));
        if (r > 0) break;
      }
      socklen_t len = sizeof err;
      (void)getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) {
      g_sock = fd;
      break;
    }
    close(fd);
    if (err != ECONNREFUSED)
      fail("couldn't connect to %s port %d: %s", g_opt.server, g_opt.tcp_port, strerror(err));
    // The server is not listening yet: try again (a retry interval, not synchronisation).
    (void)ms_left(until, step);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  freeaddrinfo(res);
  set_nodelay(g_sock);
}

// ---------------------------------------------------------------------------------------------
// The data pattern: every 4-byte word depends on (op, size, iteration) and its own position, so
// a stale byte (another iteration's), a misplaced one (another offset's) or a lost one is caught.

static uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

static uint32_t seed_of(int op, size_t size, uint32_t iter) {
  return mix32((uint32_t)op * 0x9e3779b9U ^
               mix32((uint32_t)size * 0x85ebca6bU ^ mix32(iter + 0x01234567U)));
}

static uint8_t pattern_byte(uint32_t seed, size_t i) {
  return (uint8_t)(mix32(seed + (uint32_t)(i / 4) * 0x9e3779b9U) >> (8 * (i % 4)));
}

// Fills `n` bytes with the pattern, or with its complement (every byte differs from the
// pattern's: a buffer that was not written is caught byte by byte).
static void fill_pattern(uint8_t* p, size_t n, uint32_t seed, bool invert) {
  for (size_t i = 0; i < n; i += 4) {
    uint32_t w = mix32(seed + (uint32_t)(i / 4) * 0x9e3779b9U);
    if (invert) w = ~w;
    for (size_t k = 0; k < 4 && i + k < n; ++k) p[i + k] = (uint8_t)(w >> (8 * k));
  }
}

static void verify_pattern(const uint8_t* p, size_t n, uint32_t seed, const char* what) {
  size_t first = n, bad = 0;
  for (size_t i = 0; i < n; i += 4) {
    const uint32_t w = mix32(seed + (uint32_t)(i / 4) * 0x9e3779b9U);
    for (size_t k = 0; k < 4 && i + k < n; ++k) {
      if (p[i + k] != (uint8_t)(w >> (8 * k))) {
        if (first == n) first = i + k;
        ++bad;
      }
    }
  }
  if (bad != 0) {
    fail("%s: %zu of %zu bytes differ, the first at offset %zu: expected 0x%02x, got 0x%02x", what,
         bad, n, first, pattern_byte(seed, first), p[first]);
  }
  ++g_checks;
}

static void verify_guard(const uint8_t* p, size_t n, const char* what) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != kGuardByte) {
      fail("%s: byte %zu was overwritten: expected 0x%02x, got 0x%02x", what, i, kGuardByte, p[i]);
    }
  }
  ++g_checks;
}

static uint32_t imm_of(int op, size_t size, uint32_t iter) {
  return mix32(seed_of(op, size, iter) ^ 0x5bd1e995U);
}

static uint64_t u64_of(uint32_t a, uint32_t b) { return (uint64_t)mix32(a) << 32 | mix32(b); }

// ---------------------------------------------------------------------------------------------
// Verbs resources

struct peer {
  uint16_t lid;
  uint32_t qpn, psn, ud_qpn, ud_psn;
  union ibv_gid gid;
  uint64_t addr;
  uint32_t rkey;
  uint64_t len;
  int active_mtu;  // bytes
  int mtu_opt;     // the peer's -m
};

static struct {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_comp_channel* channel;
  struct ibv_cq *scq, *rcq;
  struct ibv_qp *qp, *ud_qp;
  struct ibv_qp_ex* qpx;  // the client's, for -o atomic_write / flush (ibv_wr_*)
  struct ibv_ah* ah;
  struct ibv_mr* mr;
  struct ibv_mw* mw;  // -o mw: the server's type 2 window
  uint8_t* buf;
  size_t len;
  // Regions of buf, each with GUARD bytes around it.
  size_t data_off, atom_off, scratch_off, ud_off;
  struct peer me, peer;
  int path_mtu;  // bytes
  int ud_mtu;    // bytes
} V;

static int mtu_bytes(enum ibv_mtu m) { return 128 << (int)m; }

static enum ibv_mtu mtu_enum(int bytes) {
  switch (bytes) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 1024:
      return IBV_MTU_1024;
    case 2048:
      return IBV_MTU_2048;
    default:
      return IBV_MTU_4096;
  }
}

static size_t max_size(void) {
  size_t m = 8;
  for (int i = 0; i < g_opt.nsizes; ++i) m = g_opt.sizes[i] > m ? g_opt.sizes[i] : m;
  return m;
}

static bool has_op(int op) {
  for (int i = 0; i < g_opt.nops; ++i)
    if (g_opt.ops[i] == op) return true;
  return false;
}

static size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

// ibv_modify_qp returns the errno value itself on failure.
static void modify_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask, const char* what) {
  const int r = ibv_modify_qp(qp, attr, mask);
  if (r != 0) fail("ibv_modify_qp %s: %s", what, strerror(r));
}

// The RC QP. A client given atomic_write or flush posts them with ibv_wr_*: its QP is an
// extended one with those operations (and WRITE, which flush's steps post before each FLUSH).
static void create_rc_qp(struct ibv_qp_init_attr* ia) {
  const bool aw = has_op(OP_ATOMIC_WRITE), fl = has_op(OP_FLUSH);
  if (g_opt.server == NULL || (!aw && !fl)) {
    V.qp = ibv_create_qp(V.pd, ia);
    if (V.qp == NULL) fail("ibv_create_qp (RC): %s", strerror(errno));
    return;
  }
  struct ibv_qp_init_attr_ex x = {
      .send_cq = ia->send_cq,
      .recv_cq = ia->recv_cq,
      .cap = ia->cap,
      .qp_type = IBV_QPT_RC,
      .sq_sig_all = ia->sq_sig_all,
      .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
      .pd = V.pd,
      .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | (aw ? IBV_QP_EX_WITH_ATOMIC_WRITE : 0) |
                        (fl ? kQpExWithFlush : 0)};
  V.qp = ibv_create_qp_ex(V.ctx, &x);
  if (V.qp == NULL) fail("ibv_create_qp_ex (RC, atomic write/flush): %s", strerror(errno));
  V.qpx = ibv_qp_to_qp_ex(V.qp);
  if (V.qpx == NULL) fail("ibv_qp_to_qp_ex: %s", strerror(errno));
}

static void open_device(void) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (list == NULL) {
    fail("ibv_get_device_list: %s%s", strerror(errno),
         errno == ENOSYS ? " (no RDMA device: is a provider such as rdma_rxe set up?)" : "");
  }
  struct ibv_device* dev = NULL;
  for (int i = 0; i < n && dev == NULL; ++i) {
    if (g_opt.dev == NULL || strcmp(ibv_get_device_name(list[i]), g_opt.dev) == 0) dev = list[i];
  }
  if (dev == NULL) {
    if (g_opt.dev != NULL) fail("no RDMA device named %s", g_opt.dev);
    fail("no RDMA device found");
  }
  V.ctx = ibv_open_device(dev);
  if (V.ctx == NULL) fail("couldn't open %s: %s", ibv_get_device_name(dev), strerror(errno));
  printf("device %s, port %d, GID index %d\n", ibv_get_device_name(dev), g_opt.ib_port,
         g_opt.gid_index);
  ibv_free_device_list(list);

  struct ibv_port_attr pa;
  if (ibv_query_port(V.ctx, (uint8_t)g_opt.ib_port, &pa) != 0) {
    fail("couldn't query port %d: %s", g_opt.ib_port, strerror(errno));
  }
  if (pa.state != IBV_PORT_ACTIVE)
    fail("port %d is not active (state %d)", g_opt.ib_port, (int)pa.state);
  V.me.lid = pa.lid;
  V.me.active_mtu = mtu_bytes(pa.active_mtu);
  V.me.mtu_opt = g_opt.mtu;
  if (ibv_query_gid(V.ctx, (uint8_t)g_opt.ib_port, g_opt.gid_index, &V.me.gid) != 0) {
    fail("couldn't read GID index %d: %s", g_opt.gid_index, strerror(errno));
  }

  // Buffer layout: [guard][data: max size][guard] [guard][atomic word 8][guard]
  // [guard][scratch 64][guard] [guard][UD: GRH 40 + 4096][guard].
  const size_t big = max_size();
  V.data_off = GUARD;
  V.atom_off = round_up(V.data_off + big + GUARD, 64) + GUARD;
  V.scratch_off = V.atom_off + 8 + GUARD + GUARD;
  V.ud_off = V.scratch_off + 64 + GUARD + GUARD;
  V.len = round_up(V.ud_off + kGrhBytes + 4096 + GUARD, 4096);
  if (posix_memalign((void**)&V.buf, 4096, V.len) != 0) fail("out of memory (%zu bytes)", V.len);
  memset(V.buf, kGuardByte, V.len);

  V.pd = ibv_alloc_pd(V.ctx);
  if (V.pd == NULL) fail("ibv_alloc_pd: %s", strerror(errno));
  V.mr = ibv_reg_mr(V.pd, V.buf, V.len,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC | (has_op(OP_MW) ? IBV_ACCESS_MW_BIND : 0) |
                        (has_op(OP_FLUSH) ? kAccessFlushGlobal : 0));
  if (V.mr == NULL) fail("ibv_reg_mr of %zu bytes: %s", V.len, strerror(errno));
  V.channel = ibv_create_comp_channel(V.ctx);
  if (V.channel == NULL) fail("ibv_create_comp_channel: %s", strerror(errno));
  // Waits poll() the channel with a deadline; ibv_get_cq_event must then never block.
  int fl = fcntl(V.channel->fd, F_GETFL);
  if (fl < 0 || fcntl(V.channel->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
    fail("making the completion channel non-blocking: %s", strerror(errno));
  }
  V.scq = ibv_create_cq(V.ctx, 64, NULL, V.channel, 0);
  V.rcq = ibv_create_cq(V.ctx, 64, NULL, V.channel, 0);
  if (V.scq == NULL || V.rcq == NULL) fail("ibv_create_cq: %s", strerror(errno));

  struct ibv_qp_init_attr ia = {
      .send_cq = V.scq,
      .recv_cq = V.rcq,
      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC,
      .sq_sig_all = 1};
  create_rc_qp(&ia);
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .pkey_index = 0,
                          .port_num = (uint8_t)g_opt.ib_port,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                             IBV_ACCESS_REMOTE_ATOMIC |
                                             (has_op(OP_FLUSH) ? kAccessFlushGlobal : 0)};
  modify_qp(V.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
            "(RC) to INIT");
  srand48(getpid() ^ (long)time(NULL));
  V.me.qpn = V.qp->qp_num;
  V.me.psn = (uint32_t)lrand48() & 0xffffff;
  V.me.addr = (uint64_t)(uintptr_t)V.buf;
  V.me.rkey = V.mr->rkey;
  V.me.len = V.len;

  if (has_op(OP_UD)) {
    ia.qp_type = IBV_QPT_UD;
    V.ud_qp = ibv_create_qp(V.pd, &ia);
    if (V.ud_qp == NULL) fail("ibv_create_qp (UD): %s", strerror(errno));
    struct ibv_qp_attr u = {.qp_state = IBV_QPS_INIT,
                            .pkey_index = 0,
                            .port_num = (uint8_t)g_opt.ib_port,
                            .qkey = kUdQkey};
    modify_qp(V.ud_qp, &u, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
              "(UD) to INIT");
    V.me.ud_qpn = V.ud_qp->qp_num;
    V.me.ud_psn = (uint32_t)lrand48() & 0xffffff;
  }
}

static void gid_text(const union ibv_gid* g, char* out, size_t cap) {
  if (inet_ntop(AF_INET6, g->raw, out, (socklen_t)cap) == NULL) snprintf(out, cap, "?");
}

static bool gid_is_v4(const union ibv_gid* g) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g->raw, prefix, sizeof prefix) == 0;
}

// Sends this side's address line and parses the peer's.
static void exchange_addresses(void) {
  char gid[64];
  gid_text(&V.me.gid, gid, sizeof gid);
  const struct peer* m = &V.me;
  if (g_opt.server != NULL) {
    tcp_send("the address exchange", "ADDR %u %u %u %u %u %s %" PRIu64 " %u %" PRIu64 " %d %d",
             m->lid, m->qpn, m->psn, m->ud_qpn, m->ud_psn, gid, m->addr, m->rkey, m->len,
             m->active_mtu, m->mtu_opt);
  }
  char line[512];
  tcp_recv(line, sizeof line, "the peer's addresses");
  struct peer* p = &V.peer;
  char pgid[64];
  unsigned lid;
  if (sscanf(line, "ADDR %u %u %u %u %u %63s %" SCNu64 " %u %" SCNu64 " %d %d", &lid, &p->qpn,
             &p->psn, &p->ud_qpn, &p->ud_psn, pgid, &p->addr, &p->rkey, &p->len, &p->active_mtu,
             &p->mtu_opt) != 11 ||
      inet_pton(AF_INET6, pgid, p->gid.raw) != 1) {
    fail("the peer's address line is not understood: \"%s\"", line);
  }
  p->lid = (uint16_t)lid;
  if (g_opt.server == NULL) {
    tcp_send("the address exchange", "ADDR %u %u %u %u %u %s %" PRIu64 " %u %" PRIu64 " %d %d",
             m->lid, m->qpn, m->psn, m->ud_qpn, m->ud_psn, gid, m->addr, m->rkey, m->len,
             m->active_mtu, m->mtu_opt);
  }
  printf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", m->lid, m->qpn, m->psn,
         gid);
  printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", p->lid, p->qpn, p->psn,
         pgid);
  if (V.ud_qp != NULL) {
    printf("  local UD:  QPN 0x%06x, PSN 0x%06x; remote UD: QPN 0x%06x, PSN 0x%06x\n", m->ud_qpn,
           m->ud_psn, p->ud_qpn, p->ud_psn);
  }
  if (p->mtu_opt != 0 && m->mtu_opt != 0 && p->mtu_opt != m->mtu_opt) {
    printf("%s: the two sides were given different -m: %d here, %d at the peer\n", PROG, m->mtu_opt,
           p->mtu_opt);
    exit(2);
  }
  const int smaller = m->active_mtu < p->active_mtu ? m->active_mtu : p->active_mtu;
  V.path_mtu = m->mtu_opt != 0 ? m->mtu_opt : p->mtu_opt != 0 ? p->mtu_opt : smaller;
  V.ud_mtu = smaller;  // UD messages are one packet of at most the port MTU
  printf("  RC path MTU %d (active MTU %d here, %d at the peer)\n", V.path_mtu, m->active_mtu,
         p->active_mtu);
  if (V.ud_qp != NULL && p->ud_qpn == 0) fail("the peer has no UD QP");
  if (g_opt.server != NULL && p->len < V.len) {
    fail("the server's buffer (%" PRIu64 " bytes) is smaller than this side's (%zu)", p->len,
         V.len);
  }
}

static struct ibv_ah_attr peer_ah(void) {
  struct ibv_ah_attr ah = {
      .dlid = V.peer.lid,
      .sl = 0,
      .is_global = 1,
      .port_num = (uint8_t)g_opt.ib_port,
      .grh = {.dgid = V.peer.gid, .sgid_index = (uint8_t)g_opt.gid_index, .hop_limit = 64}};
  return ah;
}

static void connect_qps(void) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
                          .path_mtu = mtu_enum(V.path_mtu),
                          .dest_qp_num = V.peer.qpn,
                          .rq_psn = V.peer.psn,
                          .max_dest_rd_atomic = 1,
                          .min_rnr_timer = 12,  // 0.64 ms
                          .ah_attr = peer_ah()};
  modify_qp(V.qp, &a,
            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
            "(RC) to RTR");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;  // 4.096 us * 2^14 = 67 ms
  a.retry_cnt = 7;
  a.rnr_retry = 7;  // retry forever after an RNR NAK
  a.sq_psn = V.me.psn;
  a.max_rd_atomic = 1;
  modify_qp(V.qp, &a,
            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                IBV_QP_MAX_QP_RD_ATOMIC,
            "(RC) to RTS");
  if (V.ud_qp != NULL) {
    struct ibv_qp_attr u = {.qp_state = IBV_QPS_RTR};
    modify_qp(V.ud_qp, &u, IBV_QP_STATE, "(UD) to RTR");
    u.qp_state = IBV_QPS_RTS;
    u.sq_psn = V.me.ud_psn;
    modify_qp(V.ud_qp, &u, IBV_QP_STATE | IBV_QP_SQ_PSN, "(UD) to RTS");
    if (g_opt.server != NULL) {
      struct ibv_ah_attr ah = peer_ah();
      V.ah = ibv_create_ah(V.pd, &ah);
      if (V.ah == NULL) fail("ibv_create_ah: %s", strerror(errno));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Completions

static const char* wc_opcode_name(int op) {
  switch (op) {
    case IBV_WC_SEND:
      return "SEND";
    case IBV_WC_RDMA_WRITE:
      return "RDMA_WRITE";
    case IBV_WC_RDMA_READ:
      return "RDMA_READ";
    case IBV_WC_COMP_SWAP:
      return "COMP_SWAP";
    case IBV_WC_FETCH_ADD:
      return "FETCH_ADD";
    case IBV_WC_RECV:
      return "RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM:
      return "RECV_RDMA_WITH_IMM";
    case IBV_WC_BIND_MW:
      return "BIND_MW";
    case IBV_WC_ATOMIC_WRITE:
      return "ATOMIC_WRITE";
    case kWcFlush:
      return "FLUSH";
    default:
      return "other";
  }
}

// Waits until `until` for the next completion of `cq`: polls, and when it is empty, arms the
// CQ, polls once more (a completion that arrived before arming raises no event) and waits on the
// completion channel. The channel wait is also bounded to 50 ms so a lost event costs a little
// time, not the run. False: none by `until`.
static bool wait_wc_until(struct ibv_cq* cq, struct ibv_wc* wc, const char* step, double until) {
  for (;;) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n < 0) fail("ibv_poll_cq failed (%d) waiting for %s", n, step);
    if (n == 1) return true;
    if (now_s() >= until) return false;
    const int armed = ibv_req_notify_cq(cq, 0);  // 0 or an errno value
    if (armed != 0) fail("ibv_req_notify_cq: %s", strerror(armed));
    n = ibv_poll_cq(cq, 1, wc);
    if (n < 0) fail("ibv_poll_cq failed (%d) waiting for %s", n, step);
    if (n == 1) return true;
    const double ms = (until - now_s()) * 1000.0 + 1.0;
    struct pollfd p = {.fd = V.channel->fd, .events = POLLIN};
    int r = poll(&p, 1, ms < 1.0 ? 0 : ms < 50.0 ? (int)ms : 50);
    if (r < 0 && errno != EINTR) fail("poll on the completion channel: %s", strerror(errno));
    if (r > 0) {
      struct ibv_cq* ev_cq;
      void* ev_ctx;
      if (ibv_get_cq_event(V.channel, &ev_cq, &ev_ctx) == 0) ibv_ack_cq_events(ev_cq, 1);
    }
  }
}

static void wait_wc(struct ibv_cq* cq, struct ibv_wc* wc, const char* step) {
  if (!wait_wc_until(cq, wc, step, deadline())) {
    fail("timed out after %d s waiting for %s", g_opt.timeout, step);
  }
}

static void check_wc(const struct ibv_wc* wc, const char* what, uint64_t wr_id,
                     const struct ibv_qp* qp, int opcode) {
  if (wc->status != IBV_WC_SUCCESS) {
    fail("%s completion: status %s (%d), vendor_err 0x%x, opcode %d", what,
         ibv_wc_status_str(wc->status), (int)wc->status, wc->vendor_err, (int)wc->opcode);
  }
  if ((int)wc->opcode != opcode) {
    fail("%s completion: expected opcode %s (%d), got %s (%d)", what, wc_opcode_name(opcode),
         opcode, wc_opcode_name((int)wc->opcode), (int)wc->opcode);
  }
  if (wc->wr_id != wr_id) {
    fail("%s completion: expected wr_id %" PRIu64 ", got %" PRIu64, what, wr_id,
         (uint64_t)wc->wr_id);
  }
  if (wc->qp_num != qp->qp_num) {
    fail("%s completion: expected qp_num 0x%06x, got 0x%06x", what, qp->qp_num, wc->qp_num);
  }
  ++g_checks;
}

static void check_imm(const struct ibv_wc* wc, bool want, uint32_t value) {
  const bool has = (wc->wc_flags & IBV_WC_WITH_IMM) != 0;
  if (has != want) {
    fail("receive completion: IBV_WC_WITH_IMM expected %s, got %s (wc_flags 0x%x)",
         want ? "set" : "clear", has ? "set" : "clear", wc->wc_flags);
  }
  // imm_data is in network byte order on both sides of the verbs API.
  if (want && ntohl(wc->imm_data) != value) {
    fail("receive completion: expected imm_data 0x%08x, got 0x%08x (as received: 0x%08x)", value,
         ntohl(wc->imm_data), wc->imm_data);
  }
  ++g_checks;
}

static void check_byte_len(const struct ibv_wc* wc, size_t want) {
  if (wc->byte_len != want)
    fail("receive completion: expected byte_len %zu, got %u", want, wc->byte_len);
  ++g_checks;
}

// ---------------------------------------------------------------------------------------------
// Posting

static void post_recv(struct ibv_qp* qp, size_t off, size_t len, uint64_t wr_id) {
  struct ibv_sge sge = {
      .addr = (uintptr_t)(V.buf + off), .length = (uint32_t)len, .lkey = V.mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
  int r = ibv_post_recv(qp, &wr, &bad);
  if (r != 0) fail("ibv_post_recv: %s", strerror(r));
}

static void post_send(struct ibv_qp* qp, struct ibv_send_wr* wr) {
  struct ibv_send_wr* bad = NULL;
  wr->send_flags |= IBV_SEND_SIGNALED;
  int r = ibv_post_send(qp, wr, &bad);
  if (r != 0) fail("ibv_post_send: %s", strerror(r));
}

static void rnr_delay(void) {
  struct timespec ts = {0, kRnrDelayNs};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// The client's message source: the pattern, with one byte flipped under --corrupt.
static void fill_source(size_t size, uint32_t seed) {
  fill_pattern(V.buf + V.data_off, size, seed, false);
  if (g_opt.corrupt == CORRUPT_DATA) V.buf[V.data_off + size / 2] ^= 0x01;  // one bit
}

// The receiver's data region before a message: the complement of the pattern, guards around.
static void prepare_target(size_t off, size_t size, uint32_t seed) {
  memset(V.buf + off - GUARD, kGuardByte, GUARD);
  fill_pattern(V.buf + off, size, seed, true);
  memset(V.buf + off + size, kGuardByte, GUARD);
}

static void verify_target(size_t off, size_t size, uint32_t seed, const char* what) {
  char w[96];
  snprintf(w, sizeof w, "%s: the guard before the data", what);
  verify_guard(V.buf + off - GUARD, GUARD, w);
  snprintf(w, sizeof w, "%s: data", what);
  verify_pattern(V.buf + off, size, seed, w);
  snprintf(w, sizeof w, "%s: the guard after the data", what);
  verify_guard(V.buf + off + size, GUARD, w);
}

// ---------------------------------------------------------------------------------------------
// The steps. In every step the server says "R i" when iteration i may start (its buffers are
// prepared, its receive posted) and "R n" when all n iterations were verified.

// -v: this side verified (or completed) iteration i of the current step.
static void iteration_done(unsigned i) {
  if (g_opt.verbose) printf("  %s size %zu: iteration %u ok\n", kOpNames[g_cur_op], g_cur_size, i);
}

// The client's last UD message, for the server's "U i" (send it again).
static struct {
  bool armed;
  unsigned iter;
  struct ibv_sge sge;
  struct ibv_send_wr wr;
} g_ud_last;

static void ready(unsigned i) { tcp_send("the step synchronisation", "R %u", i); }

static void ud_resend(void) {
  g_ud_last.wr.sg_list = &g_ud_last.sge;
  post_send(V.ud_qp, &g_ud_last.wr);
  struct ibv_wc wc;
  wait_wc(V.scq, &wc, "the send completion of a UD message sent again");
  check_wc(&wc, "send", g_ud_last.iter, V.ud_qp, IBV_WC_SEND);
  ++g_ud_resends;
  if (g_opt.verbose) printf("  ud: iteration %u sent again\n", g_ud_last.iter);
}

static void await_ready(unsigned i) {
  char step[64];
  snprintf(step, sizeof step, "the server to be ready for iteration %u", i);
  for (;;) {
    char got[256];
    tcp_recv(got, sizeof got, step);
    unsigned k;
    char tail;
    if (g_ud_last.armed && sscanf(got, "U %u%c", &k, &tail) == 1 && k == g_ud_last.iter) {
      ud_resend();
      continue;
    }
    char want[32];
    snprintf(want, sizeof want, "R %u", i);
    if (strcmp(got, want) != 0) {
      fail("out of step with the peer at %s: expected \"%s\", got \"%s\"", step, want, got);
    }
    return;
  }
}

// The server's recently verified UD messages: a late original whose resend was verified (or the
// other way round) arrives as a copy of one of them.
static struct {
  size_t size[UD_HISTORY];
  uint32_t seed[UD_HISTORY];
  unsigned n;
} g_ud_seen;

static bool pattern_matches(const uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pattern_byte(seed, i)) return false;
  return true;
}

static bool ud_duplicate(const struct ibv_wc* wc, const uint8_t* data) {
  if (wc->status != IBV_WC_SUCCESS || wc->byte_len < kGrhBytes) return false;
  const size_t size = wc->byte_len - kGrhBytes;
  const unsigned have = g_ud_seen.n < UD_HISTORY ? g_ud_seen.n : UD_HISTORY;
  for (unsigned k = 0; k < have; ++k) {
    if (g_ud_seen.size[k] == size && pattern_matches(data, size, g_ud_seen.seed[k])) return true;
  }
  return false;
}

// UD's GRH area per rdma-core and rxe: for RoCE v2 over IPv4, 20 unspecified bytes, then the
// IPv4 header of the packet; over IPv6, the IPv6 header.
static void check_grh(const uint8_t* g, size_t size) {
  const union ibv_gid *src = &V.peer.gid, *dst = &V.me.gid;
  // BTH 12 + DETH 8 + payload padded to 4 + ICRC 4, after the 8-byte UDP header.
  const size_t udp_len = 8 + 12 + 8 + round_up(size, 4) + 4;
  if (gid_is_v4(dst)) {
    const uint8_t* ip = g + 20;
    if (ip[0] != 0x45) fail("GRH area: IPv4 version/IHL: expected 0x45, got 0x%02x", ip[0]);
    if (ip[9] != 17) fail("GRH area: IPv4 protocol: expected 17 (UDP), got %u", ip[9]);
    const unsigned tot = (unsigned)ip[2] << 8 | ip[3];
    if (tot != 20 + udp_len) {
      fail("GRH area: IPv4 total length: expected %zu, got %u", 20 + udp_len, tot);
    }
    if (memcmp(ip + 12, src->raw + 12, 4) != 0 || memcmp(ip + 16, dst->raw + 12, 4) != 0) {
      char s[INET_ADDRSTRLEN], d[INET_ADDRSTRLEN], es[INET_ADDRSTRLEN], ed[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, ip + 12, s, sizeof s);
      inet_ntop(AF_INET, ip + 16, d, sizeof d);
      inet_ntop(AF_INET, src->raw + 12, es, sizeof es);
      inet_ntop(AF_INET, dst->raw + 12, ed, sizeof ed);
      fail("GRH area: IPv4 addresses: expected %s -> %s, got %s -> %s", es, ed, s, d);
    }
  } else {
    if ((g[0] >> 4) != 6) fail("GRH area: IPv6 version: expected 6, got %u", g[0] >> 4);
    if (g[6] != 17) fail("GRH area: IPv6 next header: expected 17 (UDP), got %u", g[6]);
    const unsigned plen = (unsigned)g[4] << 8 | g[5];
    if (plen != udp_len) fail("GRH area: IPv6 payload length: expected %zu, got %u", udp_len, plen);
    if (memcmp(g + 8, src->raw, 16) != 0 || memcmp(g + 24, dst->raw, 16) != 0) {
      char s[64], d[64], es[64], ed[64];
      inet_ntop(AF_INET6, g + 8, s, sizeof s);
      inet_ntop(AF_INET6, g + 24, d, sizeof d);
      gid_text(src, es, sizeof es);
      gid_text(dst, ed, sizeof ed);
      fail("GRH area: IPv6 addresses: expected %s -> %s, got %s -> %s", es, ed, s, d);
    }
  }
  ++g_checks;
}

// SEND, SEND with Immediate and UD SEND: the server receives and checks.
static void server_two_sided(int op, size_t size, unsigned n) {
  const bool ud = op == OP_UD;
  const bool rnr = g_opt.rnr && !ud;  // UD has no RNR: a message without a receive is dropped
  struct ibv_qp* qp = ud ? V.ud_qp : V.qp;
  // UD: the GRH area precedes the data in the same buffer.
  const size_t off = ud ? V.ud_off + kGrhBytes : V.data_off;
  for (unsigned i = 0; i < n; ++i) {
    g_cur_iter = i;
    const uint32_t seed = seed_of(op, size, i);
    if (rnr) {
      ready(i);
      tcp_expect("the client's message to be posted", "S %u", i);
      rnr_delay();
      ++g_rnr_delayed;
    }
    // UD: the guard precedes the GRH area, which is prefilled too (its first 20 bytes are
    // unspecified over IPv4, the rest is checked).
    prepare_target(off, size, seed);
    if (ud) memset(V.buf + V.ud_off - GUARD, kGuardByte, GUARD + kGrhBytes);
    post_recv(qp, ud ? V.ud_off : off, ud ? kGrhBytes + size : size, i);
    if (!rnr) ready(i);
    struct ibv_wc wc;
    if (!ud) {
      wait_wc(V.rcq, &wc, "the receive completion");
    } else {
      // Lost UD messages are asked for again; copies of earlier ones are put aside.
      const double give_up = deadline();
      for (;;) {
        const double t = now_s() + kUdResendS;
        if (wait_wc_until(V.rcq, &wc, "the UD receive completion", t < give_up ? t : give_up)) {
          if (!ud_duplicate(&wc, V.buf + off)) break;
          ++g_ud_copies;
          if (g_opt.verbose) printf("  ud: a copy of an earlier message, ignored\n");
          prepare_target(off, size, seed);
          memset(V.buf + V.ud_off - GUARD, kGuardByte, GUARD + kGrhBytes);
          post_recv(qp, V.ud_off, kGrhBytes + size, i);
          continue;
        }
        if (now_s() >= give_up) {
          fail("timed out after %d s waiting for the UD message (asked for %u times)",
               g_opt.timeout, g_ud_resends);
        }
        tcp_send("asking for a UD message again", "U %u", i);
        ++g_ud_resends;
      }
    }
    check_wc(&wc, "receive", i, qp, IBV_WC_RECV);
    check_imm(&wc, op == OP_SEND_IMM, imm_of(op, size, i));
    check_byte_len(&wc, ud ? kGrhBytes + size : size);
    if (ud) {
      if ((wc.wc_flags & IBV_WC_GRH) == 0) fail("UD receive completion without IBV_WC_GRH");
      if (wc.src_qp != V.peer.ud_qpn) {
        fail("UD receive completion: expected src_qp 0x%06x, got 0x%06x", V.peer.ud_qpn, wc.src_qp);
      }
      check_grh(V.buf + V.ud_off, size);
      verify_guard(V.buf + V.ud_off - GUARD, GUARD, "the guard before the UD receive buffer");
      verify_pattern(V.buf + off, size, seed, "received UD message: data");
      verify_guard(V.buf + off + size, GUARD, "received UD message: the guard after the data");
      g_ud_seen.size[g_ud_seen.n % UD_HISTORY] = size;
      g_ud_seen.seed[g_ud_seen.n % UD_HISTORY] = seed;
      ++g_ud_seen.n;
    } else {
      verify_target(off, size, seed, "received message");
    }
    iteration_done(i);
  }
}

static void client_two_sided(int op, size_t size, unsigned n) {
  const bool ud = op == OP_UD;
  const bool rnr = g_opt.rnr && !ud;
  for (unsigned i = 0; i < n; ++i) {
    g_cur_iter = i;
    await_ready(i);
    // --dup-ud: the previous message once more, now that the server's receive for this one is
    // posted: it must be recognised as a copy.
    if (ud && g_opt.dup_ud && i > 0) ud_resend();
    fill_source(size, seed_of(op, size, i));
    struct ibv_sge sge = {
        .addr = (uintptr_t)(V.buf + V.data_off), .length = (uint32_t)size, .lkey = V.mr->lkey};
    struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1};
    if (op == OP_SEND_IMM) {
      wr.opcode = IBV_WR_SEND_WITH_IMM;
      wr.imm_data = htonl(imm_of(op, size, i) ^ (g_opt.corrupt == CORRUPT_IMM ? 1u : 0u));
    } else {
      wr.opcode = IBV_WR_SEND;
    }
    if (ud) {
      wr.wr.ud.ah = V.ah;
      wr.wr.ud.remote_qpn = V.peer.ud_qpn;
      wr.wr.ud.remote_qkey = kUdQkey;
    }
    if (ud) {
      g_ud_last.armed = true;
      g_ud_last.iter = i;
      g_ud_last.sge = sge;
      g_ud_last.wr = wr;
      if (g_opt.drop_ud && i % 2 == 0) {
        iteration_done(i);  // "lost": the server asks for it again
        continue;
      }
    }
    post_send(ud ? V.ud_qp : V.qp, &wr);
    if (rnr) {
      tcp_send("telling the server the message is posted", "S %u", i);
      ++g_rnr_delayed;
    }
    struct ibv_wc wc;
    wait_wc(V.scq, &wc, "the send completion");
    check_wc(&wc, "send", i, ud ? V.ud_qp : V.qp, IBV_WC_SEND);
    iteration_done(i);
  }
}

// RDMA WRITE (checked by the server when the client says so) and RDMA WRITE with Immediate
// (checked at the server's receive completion).
static void server_write(int op, size_t size, unsigned n) {
  const bool imm = op == OP_WRITE_IMM;
  const bool rnr = g_opt.rnr && imm;
  for (unsigned i = 0; i < n; ++i) {
    g_cur_iter = i;
    const uint32_t seed = seed_of(op, size, i);
    prepare_target(V.data_off, size, seed);
    if (imm) {
      // The receive WQE a WRITE with Immediate consumes: its buffer must stay untouched.
      memset(V.buf + V.scratch_off - GUARD, kGuardByte, 64 + 2 * GUARD);
      if (rnr) {
        ready(i);
        tcp_expect("the client's write to be posted", "S %u", i);
        rnr_delay();
        ++g_rnr_delayed;
      }
      post_recv(V.qp, V.scratch_off, 64, i);
      if (!rnr) ready(i);
      struct ibv_wc wc;
      wait_wc(V.rcq, &wc, "the receive completion of the write with immediate");
      check_wc(&wc, "receive", i, V.qp, IBV_WC_RECV_RDMA_WITH_IMM);
      check_imm(&wc, true, imm_of(op, size, i));
      check_byte_len(&wc, size);
      verify_guard(V.buf + V.scratch_off - GUARD, 64 + 2 * GUARD,
                   "the receive buffer of a write with immediate");
    } else {
      ready(i);
      char step[64];
      snprintf(step, sizeof step, "the client's write %u to complete", i);
      tcp_expect(step, "W %u", i);
    }
    verify_target(V.data_off, size, seed, "written data");
    iteration_done(i);
  }
}

static void client_write(int op, size_t size, unsigned n) {
  const bool imm = op == OP_WRITE_IMM;
  const bool rnr = g_opt.rnr && imm;
  for (unsigned i = 0; i < n; ++i) {
    g_cur_iter = i;
    await_ready(i);
    fill_source(size, seed_of(op, size, i));
    struct ibv_sge sge = {
        .addr = (uintptr_t)(V.buf + V.data_off), .length = (uint32_t)size, .lkey = V.mr->lkey};
    struct ibv_send_wr wr = {.wr_id = i,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE};
    if (imm) wr.imm_data = htonl(imm_of(op, size, i) ^ (g_opt.corrupt == CORRUPT_IMM ? 1u : 0u));
    wr.wr.rdma.remote_addr = V.peer.addr + V.data_off;
    wr.wr.rdma.rkey = V.peer.rkey;
    post_send(V.qp, &wr);
    if (rnr) {
      tcp_send("telling the server the write is posted", "S %u", i);
      ++g_rnr_delayed;
    }
    struct ibv_wc wc;
    wait_wc(V.scq, &wc, "the write completion");
    check_wc(&wc, "write", i, V.qp, IBV_WC_RDMA_WRITE);
    if (!imm) tcp_send("telling the server the write completed", "W %u", i);
    iteration_done(i);
  }
}

// RDMA READ: the server fills its buffer, the client reads and checks.
static void server_read(size_t size, unsigned n) {
  for (unsigned i = 0; i < n; ++i) {
    g_cur_iter = i;
    const uint32_t seed = seed_of(OP_READ, size, i);
    memset(V.buf + V.data_off - GUARD, kGuardByte, GUARD);
    fill_pattern(V.buf + V.data_off, size, seed, false);
    memset(V.buf + V.data_off + size, kGuardByte, GUARD);
    ready(i);
    char step[64];
    snprintf(step, sizeof step, "the client's read %u to complete", i);
    tcp_expect(step, "D %u", i);
    verify_target(V.data_off, size, seed, "the read source after the read");
    iteration_done(i);
  }
}

static void client_read(size_t size, unsigned n) {
  for (unsigned i = 0; i < n; ++i) {
    g_cur_iter = i;
    await_ready(i);
    const uint32_t seed = seed_of(OP_READ, size, i);
    prepare_target(V.data_off, size, seed);
    struct ibv_sge sge = {
        .addr = (uintptr_t)(V.buf + V.data_off), .length = (uint32_t)size, .lkey = V.mr->lkey};
    struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ};
    wr.wr.rdma.remote_addr = V.peer.addr + V.data_off;
    wr.wr.rdma.rkey = V.peer.rkey;
    post_send(V.qp, &wr);
    struct ibv_wc wc;
    wait_wc(V.scq, &wc, "the read completion");
    check_wc(&wc, "read", i, V.qp, IBV_WC_RDMA_READ);
    verify_target(V.data_off, size, seed, "read data");
    tcp_send("telling the server the read completed", "D %u", i);
    iteration_done(i);
  }
}

// Atomics on one 8-byte aligned word. Fetch&Add adds add(i); Compare&Swap swaps in a chain of
// new values, every fourth compare deliberately wrong (memory must not change then). The
// client checks every returned original value, the server the final word.
static uint64_t atomic_initial(int op) { return u64_of(seed_of(op, 8, 0xffffffffU), 77); }
static uint64_t faa_add(unsigned i) { return u64_of(2 * i + 1, 2 * i + 2); }
static uint64_t cas_swap(unsigned i) { return u64_of(3 * i + 1001, 3 * i + 1002); }
static bool cas_fails(unsigned i) { return i % 4 == 3; }

static uint64_t atomic_final(int op, unsigned n) {
  uint64_t v = atomic_initial(op);
  for (unsigned i = 0; i < n; ++i) {
    if (op == OP_FAA)
      v += faa_add(i);
    else if (!cas_fails(i))
      v = cas_swap(i);
  }
  return v;
}

static void server_atomic(int op, unsigned n) {
  uint8_t* w = V.buf + V.atom_off;
  memset(w - GUARD, kGuardByte, 8 + 2 * GUARD);
  const uint64_t init = atomic_initial(op);
  memcpy(w, &init, 8);
  ready(0);
  tcp_expect("the client's atomics to complete", "A %u", n);
  g_cur_iter = -1;
  uint64_t got;
  memcpy(&got, w, 8);
  const uint64_t want = atomic_final(op, n);
  if (got != want) {
    fail("the word after %u %s operations: expected 0x%016" PRIx64 ", got 0x%016" PRIx64, n,
         kOpNames[op], want, got);
  }
  ++g_checks;
  verify_guard(w - GUARD, GUARD, "the guard before the atomic word");
  verify_guard(w + 8, GUARD, "the guard after the atomic word");
}

static void client_atomic(int op, unsigned n) {
  await_ready(0);
  uint64_t cur = atomic_initial(op);
  uint8_t* res = V.buf + V.atom_off;
  for (unsigned i = 0; i < n; ++i) {
    g_cur_iter = i;
    const uint64_t poison = ~cur;  // the returned value must overwrite it
    memcpy(res, &poison, 8);
    struct ibv_sge sge = {.addr = (uintptr_t)res, .length = 8, .lkey = V.mr->lkey};
    struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1};
    wr.wr.atomic.remote_addr = V.peer.addr + V.atom_off;
    wr.wr.atomic.rkey = V.peer.rkey;
    uint64_t next = cur;
    if (op == OP_FAA) {
      wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
      wr.wr.atomic.compare_add = faa_add(i);
      next = cur + faa_add(i);
    } else {
      wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
      wr.wr.atomic.compare_add = cas_fails(i) ? cur ^ (1ull << (i % 64)) : cur;
      wr.wr.atomic.swap = cas_swap(i);
      if (!cas_fails(i)) next = cas_swap(i);
    }
    post_send(V.qp, &wr);
    struct ibv_wc wc;
    wait_wc(V.scq, &wc, "the atomic completion");
    check_wc(&wc, "atomic", i, V.qp, op == OP_FAA ? IBV_WC_FETCH_ADD : IBV_WC_COMP_SWAP);
    uint64_t got;
    memcpy(&got, res, 8);
    if (got != cur) {
      fail("the original value returned: expected 0x%016" PRIx64 ", got 0x%016" PRIx64, cur, got);
    }
    ++g_checks;
    cur = next;
    iteration_done(i);
  }
  tcp_send("telling the server the atomics completed", "A %u", n);
}

// ATOMIC WRITE (-o atomic_write): the client writes a new 8-byte value into the server's
// atomic word each iteration, the server checks the word (never torn, never another
// iteration's) and its guards after each completion.
static uint64_t atomic_write_value(unsigned i) { return u64_of(5 * i + 7, 5 * i + 8); }

static void server_atomic_write(unsigned n) {
  uint8_t* w = V.buf + V.atom_off;
  memset(w - GUARD, kGuardByte, 8 + 2 * GUARD);
  for (unsigned i = 0; i < n; ++i) {
    g_cur_iter = i;
    const uint64_t before = ~atomic_write_value(i);
    memcpy(w, &before, 8);
    ready(i);
    char step[64];
    snprintf(step, sizeof step, "the client's atomic write %u to complete", i);
    tcp_expect(step, "W %u", i);
    uint64_t got;
    memcpy(&got, w, 8);
    if (got != atomic_write_value(i)) {
      fail("the word after atomic write %u: expected 0x%016" PRIx64 ", got 0x%016" PRIx64, i,
           atomic_write_value(i), got);
    }
    ++g_checks;
    verify_guard(w - GUARD, GUARD, "the guard before the atomic word");
    verify_guard(w + 8, GUARD, "the guard after the atomic word");
    iteration_done(i);
  }
}

static void complete_wr(const char* what) {
  const int r = ibv_wr_complete(V.qpx);
  if (r != 0) fail("ibv_wr_complete (%s): %s", what, strerror(r));
}

static void client_atomic_write(unsigned n) {
  for (unsigned i = 0; i < n; ++i) {
    g_cur_iter = i;
    await_ready(i);
    uint64_t value = atomic_write_value(i);
    ibv_wr_start(V.qpx);
    V.qpx->wr_id = i;
    V.qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_atomic_write(V.qpx, V.peer.rkey, V.peer.addr + V.atom_off, &value);
    complete_wr("atomic write");
    struct ibv_wc wc;
    wait_wc(V.scq, &wc, "the atomic write completion");
    check_wc(&wc, "atomic write", i, V.qp, IBV_WC_ATOMIC_WRITE);
    tcp_send("telling the server the atomic write completed", "W %u", i);
    iteration_done(i);
  }
}

// FLUSH (-o flush): each iteration the client WRITEs a message and FLUSHes (global visibility,
// the range) what it wrote, in one batch; both complete, the FLUSH last, and the server checks
// the data.
static void client_flush(size_t size, unsigned n) {
  for (unsigned i = 0; i < n; ++i) {
    g_cur_iter = i;
    await_ready(i);
    fill_source(size, seed_of(OP_FLUSH, size, i));
    ibv_wr_start(V.qpx);
    V.qpx->wr_id = 2 * (uint64_t)i;
    V.qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(V.qpx, V.peer.rkey, V.peer.addr + V.data_off);
    ibv_wr_set_sge(V.qpx, V.mr->lkey, (uintptr_t)(V.buf + V.data_off), (uint32_t)size);
    V.qpx->wr_id = 2 * (uint64_t)i + 1;
    V.qpx->wr_flags = IBV_SEND_SIGNALED;
    ((struct qp_ex_v45*)V.qpx)
        ->wr_flush(V.qpx, V.peer.rkey, V.peer.addr + V.data_off, size, kFlushGlobal, kFlushRange);
    complete_wr("write and flush");
    struct ibv_wc wc;
    wait_wc(V.scq, &wc, "the write completion");
    check_wc(&wc, "write", 2 * (uint64_t)i, V.qp, IBV_WC_RDMA_WRITE);
    wait_wc(V.scq, &wc, "the flush completion");
    check_wc(&wc, "flush", 2 * (uint64_t)i + 1, V.qp, kWcFlush);
    tcp_send("telling the server the flush completed", "W %u", i);
    iteration_done(i);
  }
}

// A type 2 memory window (-o mw): the server binds it over its target with a new key (BIND_MW,
// remote write only), the client WRITEs through the key and then sends a zero-length SEND with
// Invalidate of it; the server checks the data, that its receive says WITH_INV and names the key,
// and binds again (an invalidated type 2 window is free to bind) for the next iteration.
static void server_mw(size_t size, unsigned n) {
  if (V.mw == NULL) {
    V.mw = ibv_alloc_mw(V.pd, IBV_MW_TYPE_2);
    if (V.mw == NULL) fail("ibv_alloc_mw (type 2): %s", strerror(errno));
  }
  for (unsigned i = 0; i < n; ++i) {
    g_cur_iter = i;
    const uint32_t seed = seed_of(OP_MW, size, i);
    prepare_target(V.data_off, size, seed);
    const uint32_t key = ibv_inc_rkey(V.mw->rkey);
    struct ibv_send_wr wr = {.wr_id = i, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
    wr.bind_mw.mw = V.mw;
    wr.bind_mw.rkey = key;
    wr.bind_mw.bind_info.mr = V.mr;
    wr.bind_mw.bind_info.addr = (uintptr_t)(V.buf + V.data_off);
    wr.bind_mw.bind_info.length = size;
    wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    post_send(V.qp, &wr);
    struct ibv_wc wc;
    wait_wc(V.scq, &wc, "the window's bind");
    check_wc(&wc, "bind", i, V.qp, IBV_WC_BIND_MW);
    V.mw->rkey = key;  // as ibv_bind_mw does for a type 1 window; a type 2 one's is the WR's
    post_recv(V.qp, V.scratch_off, 64, i);
    ready(i);
    tcp_send("the window's key", "K %u %u", i, key);
    wait_wc(V.rcq, &wc, "the SEND with Invalidate of the window's key");
    check_wc(&wc, "receive", i, V.qp, IBV_WC_RECV);
    check_byte_len(&wc, 0);
    // rxe (6.1) passes the kernel's IB_WC_WITH_INVALIDATE (1 << 2) to user space as it is,
    // where that bit is IBV_WC_IP_CSUM_OK; libibverbs' IBV_WC_WITH_INV is 1 << 3. Either says
    // the SEND invalidated; the key must be the window's.
    const bool with_inv = (wc.wc_flags & (IBV_WC_WITH_INV | IBV_WC_IP_CSUM_OK)) != 0;
    if (!with_inv || wc.invalidated_rkey != key) {
      fail("the receive: expected WITH_INV of key 0x%08x, got flags 0x%x and key 0x%08x", key,
           (unsigned)wc.wc_flags, wc.invalidated_rkey);
    }
    ++g_checks;
    verify_target(V.data_off, size, seed, "data written through the window");
    iteration_done(i);
  }
}

static void client_mw(size_t size, unsigned n) {
  for (unsigned i = 0; i < n; ++i) {
    g_cur_iter = i;
    await_ready(i);
    char line[64];
    tcp_recv(line, sizeof line, "the window's key");
    unsigned at, key;
    char tail;
    if (sscanf(line, "K %u %u%c", &at, &key, &tail) != 2 || at != i) {
      fail("out of step with the peer at the window's key: got \"%s\"", line);
    }
    fill_source(size, seed_of(OP_MW, size, i));
    struct ibv_sge sge = {
        .addr = (uintptr_t)(V.buf + V.data_off), .length = (uint32_t)size, .lkey = V.mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE};
    wr.wr.rdma.remote_addr = V.peer.addr + V.data_off;
    wr.wr.rdma.rkey = key;
    post_send(V.qp, &wr);
    struct ibv_wc wc;
    wait_wc(V.scq, &wc, "the write through the window");
    check_wc(&wc, "write", i, V.qp, IBV_WC_RDMA_WRITE);
    struct ibv_send_wr inv = {.wr_id = i, .opcode = IBV_WR_SEND_WITH_INV};
    inv.invalidate_rkey = key;
    post_send(V.qp, &inv);
    wait_wc(V.scq, &wc, "the SEND with Invalidate");
    check_wc(&wc, "send with invalidate", i, V.qp, IBV_WC_SEND);
    iteration_done(i);
  }
}

static unsigned iterations_for(size_t size) {
  size_t n = kBytesPerStep / size;
  if (n > g_opt.iters) n = g_opt.iters;
  return n < 1 ? 1 : (unsigned)n;
}

static void run_step(int op, size_t size) {
  const bool server = g_opt.server == NULL;
  const unsigned n =
      op == OP_CAS || op == OP_FAA || op == OP_ATOMIC_WRITE ? g_opt.iters : iterations_for(size);
  g_cur_op = op;
  g_cur_size = size;
  g_cur_iter = -1;
  // Both sides walk the same steps; the client names each so a divergence is caught at once.
  if (server) {
    tcp_expect("the next step", "STEP %s %zu %u", kOpNames[op], size, n);
  } else {
    tcp_send("the next step", "STEP %s %zu %u", kOpNames[op], size, n);
  }
  if (g_opt.verbose) printf("%s size %zu: %u iterations...\n", kOpNames[op], size, n);
  switch (op) {
    case OP_SEND:
    case OP_SEND_IMM:
    case OP_UD:
      server ? server_two_sided(op, size, n) : client_two_sided(op, size, n);
      break;
    case OP_WRITE:
    case OP_WRITE_IMM:
      server ? server_write(op, size, n) : client_write(op, size, n);
      break;
    case OP_READ:
      server ? server_read(size, n) : client_read(size, n);
      break;
    case OP_MW:
      server ? server_mw(size, n) : client_mw(size, n);
      break;
    case OP_ATOMIC_WRITE:
      server ? server_atomic_write(n) : client_atomic_write(n);
      break;
    case OP_FLUSH:
      // The server's side is a WRITE's: prepare, then check once the client says it is done.
      server ? server_write(op, size, n) : client_flush(size, n);
      break;
    default:
      server ? server_atomic(op, n) : client_atomic(op, n);
      break;
  }
  g_cur_iter = -1;
  if (server) {
    ready(n);
  } else {
    await_ready(n);
  }
  g_ud_last.armed = false;
  printf("%s size %zu: %u iterations ok\n", kOpNames[op], size, n);
  g_cur_op = -1;
}

static void run_all(void) {
  for (int k = 0; k < g_opt.nops; ++k) {
    const int op = g_opt.ops[k];
    if (op == OP_CAS || op == OP_FAA || op == OP_ATOMIC_WRITE) {
      run_step(op, 8);
      continue;
    }
    size_t done_ud[MAX_SIZES];
    int ndone = 0;
    for (int s = 0; s < g_opt.nsizes; ++s) {
      size_t size = g_opt.sizes[s];
      if (op == OP_UD) {
        // A UD message is one packet: sizes beyond the MTU run once, at the MTU.
        if (size > (size_t)V.ud_mtu) size = (size_t)V.ud_mtu;
        bool dup = false;
        for (int d = 0; d < ndone; ++d) dup = dup || done_ud[d] == size;
        if (dup) {
          printf("ud size %zu: skipped (a UD message is at most the MTU, %d)\n", g_opt.sizes[s],
                 V.ud_mtu);
          continue;
        }
        done_ud[ndone++] = size;
      }
      run_step(op, size);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Options

static bool parse_uint(const char* s, unsigned long long min, unsigned long long max,
                       unsigned long long* out) {
  if (s == NULL || *s < '0' || *s > '9') return false;
  errno = 0;
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != 0 || v < min || v > max) return false;
  *out = v;
  return true;
}

static int int_arg(const char* name, const char* s, int min, int max) {
  unsigned long long v;
  if (!parse_uint(s, (unsigned long long)min, (unsigned long long)max, &v)) {
    usage_error("%s must be a number from %d to %d, not '%s'", name, min, max, s);
  }
  return (int)v;
}

static void parse_ops(const char* s) {
  char *copy = strdup(s), *rest = copy;
  if (copy == NULL) usage_error("out of memory");
  g_opt.nops = 0;
  for (char* t = strsep(&rest, ","); t != NULL; t = strsep(&rest, ",")) {
    if (*t == 0) usage_error("-o '%s' has an empty entry", s);
    int op = -1;
    for (int k = 0; k < OP_COUNT; ++k)
      if (strcmp(t, kOpNames[k]) == 0) op = k;
    if (op < 0) {
      usage_error(
          "unknown operation '%s' in -o (known: send,send_imm,write,write_imm,read,"
          "cas,faa,ud,mw,atomic_write,flush)",
          t);
    }
    for (int k = 0; k < g_opt.nops; ++k)
      if (g_opt.ops[k] == op) usage_error("operation '%s' given twice in -o", t);
    g_opt.ops[g_opt.nops++] = op;
  }
  free(copy);
  if (g_opt.nops == 0) usage_error("-o names no operation");
}

static void parse_sizes(const char* s) {
  char *copy = strdup(s), *rest = copy;
  if (copy == NULL) usage_error("out of memory");
  g_opt.nsizes = 0;
  for (char* t = strsep(&rest, ","); t != NULL; t = strsep(&rest, ",")) {
    unsigned long long v;
    if (!parse_uint(t, 1, kMaxSize, &v)) {
      usage_error("size '%s' in -s is not a number of bytes from 1 to %zu", t, kMaxSize);
    }
    if (g_opt.nsizes == MAX_SIZES) usage_error("-s: at most %d sizes", MAX_SIZES);
    g_opt.sizes[g_opt.nsizes++] = (size_t)v;
  }
  free(copy);
  if (g_opt.nsizes == 0) usage_error("-s names no size");
}

static void parse_args(int argc, char** argv) {
  enum { OPT_RNR = 256, OPT_TIMEOUT, OPT_CORRUPT, OPT_DROP_UD, OPT_DUP_UD };
  static const struct option longs[] = {{"ib-dev", required_argument, NULL, 'd'},
                                        {"ib-port", required_argument, NULL, 'i'},
                                        {"gid-idx", required_argument, NULL, 'g'},
                                        {"port", required_argument, NULL, 'p'},
                                        {"mtu", required_argument, NULL, 'm'},
                                        {"ops", required_argument, NULL, 'o'},
                                        {"sizes", required_argument, NULL, 's'},
                                        {"iters", required_argument, NULL, 'n'},
                                        {"rnr", no_argument, NULL, OPT_RNR},
                                        {"timeout", required_argument, NULL, OPT_TIMEOUT},
                                        {"verbose", no_argument, NULL, 'v'},
                                        {"corrupt", optional_argument, NULL, OPT_CORRUPT},
                                        {"drop-ud", no_argument, NULL, OPT_DROP_UD},
                                        {"dup-ud", no_argument, NULL, OPT_DUP_UD},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  for (int k = 0; k < DEFAULT_OPS; ++k) g_opt.ops[k] = k;
  g_opt.nops = DEFAULT_OPS;
  memcpy(g_opt.sizes, kDefaultSizes, sizeof kDefaultSizes);
  g_opt.nsizes = (int)(sizeof kDefaultSizes / sizeof kDefaultSizes[0]);
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":d:i:g:p:m:o:s:n:vh", longs, NULL)) != -1) {
    switch (c) {
      case 'd':
        g_opt.dev = optarg;
        break;
      case 'i':
        g_opt.ib_port = int_arg("-i (IB port)", optarg, 1, 255);
        break;
      case 'g':
        g_opt.gid_index = int_arg("-g (GID index)", optarg, 0, 255);
        break;
      case 'p':
        g_opt.tcp_port = int_arg("-p (TCP port)", optarg, 1, 65535);
        break;
      case 'm':
        g_opt.mtu = int_arg("-m (MTU)", optarg, 0, 4096);
        if (g_opt.mtu != 0 && g_opt.mtu != 256 && g_opt.mtu != 512 && g_opt.mtu != 1024 &&
            g_opt.mtu != 2048 && g_opt.mtu != 4096) {
          usage_error("-m must be 256, 512, 1024, 2048 or 4096 (or 0), not '%s'", optarg);
        }
        break;
      case 'o':
        parse_ops(optarg);
        break;
      case 's':
        parse_sizes(optarg);
        break;
      case 'n':
        g_opt.iters = (unsigned)int_arg("-n (iterations)", optarg, 1, 1000000);
        break;
      case OPT_RNR:
        g_opt.rnr = true;
        break;
      case OPT_TIMEOUT:
        g_opt.timeout = int_arg("--timeout", optarg, 1, 86400);
        break;
      case 'v':
        g_opt.verbose = true;
        break;
      case OPT_DUP_UD:
        g_opt.dup_ud = true;
        break;
      case OPT_DROP_UD:
        g_opt.drop_ud = true;
        break;
      case OPT_CORRUPT:
        if (optarg == NULL || strcmp(optarg, "data") == 0) {
          g_opt.corrupt = CORRUPT_DATA;
        } else if (strcmp(optarg, "imm") == 0) {
          g_opt.corrupt = CORRUPT_IMM;
        } else {
          usage_error("--corrupt takes data or imm, not '%s'", optarg);
        }
        break;
        g_opt.corrupt = true;
        break;
      case 'h':
        usage(stdout);
        exit(0);
      case ':':
        usage_error("option '%s' needs a value", argv[optind - 1]);
      default:
        usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) g_opt.server = argv[optind++];
  if (optind < argc) usage_error("unexpected argument '%s'", argv[optind]);
  if (g_opt.corrupt && g_opt.server == NULL) usage_error("--corrupt is for the client only");
  if ((g_opt.drop_ud || g_opt.dup_ud) && g_opt.server == NULL) {
    usage_error("--drop-ud and --dup-ud are for the client only");
  }
}

// The options both sides must share, as one line.
static void config_line(char* out, size_t cap) {
  size_t o = (size_t)snprintf(out, cap, "CONFIG %s ops=", PROTOCOL);
  for (int k = 0; k < g_opt.nops && o < cap; ++k)
    o += (size_t)snprintf(out + o, cap - o, "%s%s", k ? "," : "", kOpNames[g_opt.ops[k]]);
  if (o < cap) o += (size_t)snprintf(out + o, cap - o, " sizes=");
  for (int k = 0; k < g_opt.nsizes && o < cap; ++k)
    o += (size_t)snprintf(out + o, cap - o, "%s%zu", k ? "," : "", g_opt.sizes[k]);
  if (o < cap) snprintf(out + o, cap - o, " iters=%u rnr=%d", g_opt.iters, g_opt.rnr ? 1 : 0);
}

static void exchange_config(void) {
  char mine[1500], theirs[2048];
  config_line(mine, sizeof mine);
  if (g_opt.server != NULL) tcp_send("the option exchange", "%s", mine);
  tcp_recv(theirs, sizeof theirs, "the peer's options");
  if (g_opt.server == NULL) tcp_send("the option exchange", "%s", mine);
  if (strcmp(mine, theirs) != 0) {
    printf(
        "%s: the two sides were given different options (-o, -s, -n, --rnr must match):\n"
        "  here: %s\n  peer: %s\n",
        PROG, mine + 7, strncmp(theirs, "CONFIG ", 7) == 0 ? theirs + 7 : theirs);
    fflush(stdout);
    exit(2);
  }
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGPIPE, SIG_IGN);
  parse_args(argc, argv);
  const bool server = g_opt.server == NULL;
  if (server) {
    tcp_serve();
  } else {
    tcp_connect();
  }
  exchange_config();
  open_device();
  exchange_addresses();
  connect_qps();
  // The client starts only once the server's QPs are ready to receive.
  if (server) {
    tcp_send("the QP setup", "READY");
  } else {
    tcp_expect("the server's QPs to be ready", "READY");
  }
  if (g_opt.corrupt != 0) {
    printf("SELF-TEST: --corrupt flips one bit of every %s sent\n",
           g_opt.corrupt == CORRUPT_DATA ? "message" : "immediate");
  }
  run_all();
  if (g_opt.rnr) {
    printf("rnr: %u RNR-delayed messages %s\n", g_rnr_delayed,
           server ? "received (each receive posted late)" : "sent");
  }
  if (g_ud_resends != 0) {
    printf("ud: %u UD messages %s (lost on the way, or late)\n", g_ud_resends,
           server ? "asked for again" : "sent again");
  }
  if (g_ud_copies != 0) printf("ud: %u copies of earlier UD messages set aside\n", g_ud_copies);
  // Both sides finished every step; the closing exchange keeps either from leaving early.
  if (server) {
    tcp_expect("the client's end", "END");
    tcp_send("the end", "END");
  } else {
    tcp_send("the end", "END");
    tcp_expect("the server's end", "END");
  }
  if (V.ah != NULL) ibv_destroy_ah(V.ah);
  if (V.ud_qp != NULL) ibv_destroy_qp(V.ud_qp);
  ibv_destroy_qp(V.qp);
  ibv_destroy_cq(V.scq);
  ibv_destroy_cq(V.rcq);
  ibv_destroy_comp_channel(V.channel);
  if (V.mw != NULL) ibv_dealloc_mw(V.mw);
  ibv_dereg_mr(V.mr);
  ibv_dealloc_pd(V.pd);
  ibv_close_device(V.ctx);
  free(V.buf);
  close(g_sock);
  printf("%s: PASS %" PRIu64 " checks\n", PROG, g_checks);
  return 0;
}

// The project's own MPI program (issue 16): every result it gets from MPI is checked against
// what it must be, and any difference makes it exit non-zero.
//
//   mpi_check [MAX_BYTES [BARRIERS]]   (default 4 MiB, 1000; an even number of ranks, at least 2)
//
// Run with ranks placed by node, the first half on one host and the second half on another,
// so that rank r's partner r + n/2 (and back) is on the other host:
//   1. ping-pong between each partner pair at every power of two from 1 B to MAX_BYTES, a few
//      round trips per size, every byte of every message checked against a pattern of its own
//      (sender, size, round trip, direction), a buffer refilled with garbage before each
//      receive; MPI_Get_count must give the size;
//   2. MPI_Allreduce (sum of int64) at several counts up to 1 MiB of data, each element
//      checked against the sum computed from the formula every rank used;
//   3. MPI_Alltoall with blocks of 1 element, 1 KiB and 64 KiB, every element checked against
//      the (source, destination, index) that built it;
//   4. a loop of BARRIERS MPI_Barrier, each rank's count of them checked by an allreduce, then a
//      token passed around the ring of ranks across one more barrier.
// The collectives' sizes above MAX_BYTES (of the vector a rank gives, or of one alltoall block)
// are left out: a small MAX_BYTES keeps a run of many ranks on a small machine short.
// Prints one line per phase from rank 0 and "mpi_check: PASS" at the end.
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks;
static long errors;
static double phase_start;

static void fail(const char* what, long where, long got, long want) {
  if (errors < 10) {
    fprintf(stderr, "mpi_check: rank %d: %s at %ld: got %ld, want %ld\n", rank, what, where, got,
            want);
  }
  errors++;
}

static unsigned char pattern(int sender, size_t size, int iter, int dir, size_t i) {
  uint64_t x = (uint64_t)sender * 0x9e3779b97f4a7c15ull ^ (uint64_t)size * 0xbf58476d1ce4e5b9ull ^
               (uint64_t)(iter * 2 + dir) * 0x94d049bb133111ebull ^ (uint64_t)i;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 32;
  return (unsigned char)x;
}

static void check_all(const char* phase) {
  long total = 0;
  MPI_Allreduce(&errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("mpi_check: %s: %s (%.2f s)\n", phase, total == 0 ? "ok" : "MISMATCH",
           MPI_Wtime() - phase_start);
  }
  phase_start = MPI_Wtime();
  fflush(stdout);
  if (total != 0) {
    if (rank == 0) fprintf(stderr, "mpi_check: FAIL: %ld mismatches in %s\n", total, phase);
    MPI_Finalize();
    exit(1);
  }
}

static void pingpong(size_t max_bytes) {
  const int half = nranks / 2;
  const int partner = rank < half ? rank + half : rank - half;
  const int first = rank < half;  // sends first
  unsigned char* out = malloc(max_bytes);
  unsigned char* in = malloc(max_bytes);
  if (out == NULL || in == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
  int sizes = 0;
  for (size_t size = 1; size <= max_bytes; size *= 2, sizes++) {
    const int iters = size >= (1u << 20) ? 2 : 4;
    for (int it = 0; it < iters; it++) {
      for (int leg = 0; leg < 2; leg++) {
        // leg 0: the first side sends; leg 1: the other answers.
        const int sending = (leg == 0) == first;
        const int sender = sending ? rank : partner;
        if (sending) {
          for (size_t i = 0; i < size; i++) out[i] = pattern(sender, size, it, leg, i);
          MPI_Send(out, (int)size, MPI_BYTE, partner, (int)(size % 32768), MPI_COMM_WORLD);
        } else {
          memset(in, 0xa5 ^ it, size);
          MPI_Status st;
          MPI_Recv(in, (int)size, MPI_BYTE, partner, (int)(size % 32768), MPI_COMM_WORLD, &st);
          int count = -1;
          MPI_Get_count(&st, MPI_BYTE, &count);
          if ((size_t)count != size) fail("ping-pong count", (long)size, count, (long)size);
          for (size_t i = 0; i < size; i++) {
            const unsigned char want = pattern(sender, size, it, leg, i);
            if (in[i] != want) {
              fail("ping-pong byte (size, then offset below)", (long)size, in[i], want);
              fail("ping-pong byte offset", (long)i, in[i], want);
              break;
            }
          }
        }
      }
    }
  }
  free(out);
  free(in);
  // What each pair moved each way between the hosts, for the caller to hold against the
  // devices' counters.
  if (rank == 0) {
    unsigned long long each_way = 0;
    for (size_t size = 1; size <= max_bytes; size *= 2) {
      each_way += (unsigned long long)size * (size >= (1u << 20) ? 2 : 4);
    }
    printf("mpi_check: ping-pong moved %llu bytes each way per pair, %d pairs\n", each_way, half);
  }
  char phase[96];
  snprintf(phase, sizeof phase, "ping-pong between hosts, %d sizes from 1 B to %zu B", sizes,
           max_bytes);
  check_all(phase);
}

static void allreduce(size_t max_bytes) {
  const int counts[] = {1, 7, 1024, 65536, 131072};  // int64s: up to 1 MiB
  int largest = 0;
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    const int n = counts[c];
    if (c > 0 && sizeof(int64_t) * (size_t)n > max_bytes) break;
    largest = n;
    int64_t* v = malloc(sizeof(int64_t) * (size_t)n);
    int64_t* r = malloc(sizeof(int64_t) * (size_t)n);
    if (v == NULL || r == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
    for (int i = 0; i < n; i++) v[i] = (int64_t)(rank + 1) * 1000003 + (int64_t)i * (rank + 7);
    for (int i = 0; i < n; i++) r[i] = -1;
    MPI_Allreduce(v, r, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < n; i++) {
      int64_t want = 0;
      for (int p = 0; p < nranks; p++) want += (int64_t)(p + 1) * 1000003 + (int64_t)i * (p + 7);
      if (r[i] != want) {
        fail("allreduce element", i, (long)r[i], (long)want);
        break;
      }
    }
    free(v);
    free(r);
  }
  char phase[96];
  snprintf(phase, sizeof phase, "allreduce (sum of int64, 1 to %d elements)", largest);
  check_all(phase);
}

static int32_t a2a_value(int src, int dst, int k) { return src * 100000000 + dst * 1000000 + k; }

static void alltoall(size_t max_bytes) {
  const int blocks[] = {1, 256, 16384};  // int32s per block: 4 B, 1 KiB, 64 KiB
  size_t largest = 0;
  for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
    const int n = blocks[b];
    if (b > 0 && sizeof(int32_t) * (size_t)n > max_bytes) break;
    largest = sizeof(int32_t) * (size_t)n;
    int32_t* s = malloc(sizeof(int32_t) * (size_t)n * (size_t)nranks);
    int32_t* r = malloc(sizeof(int32_t) * (size_t)n * (size_t)nranks);
    if (s == NULL || r == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
    for (int d = 0; d < nranks; d++) {
      for (int k = 0; k < n; k++) s[d * n + k] = a2a_value(rank, d, k);
    }
    for (int i = 0; i < n * nranks; i++) r[i] = -1;
    MPI_Alltoall(s, n, MPI_INT32_T, r, n, MPI_INT32_T, MPI_COMM_WORLD);
    for (int src = 0; src < nranks; src++) {
      for (int k = 0; k < n; k++) {
        if (r[src * n + k] != a2a_value(src, rank, k)) {
          fail("alltoall element", src * n + k, r[src * n + k], a2a_value(src, rank, k));
          src = nranks;
          break;
        }
      }
    }
    free(s);
    free(r);
  }
  char phase[96];
  snprintf(phase, sizeof phase, "alltoall (blocks of 4 B to %zu B)", largest);
  check_all(phase);
}

static void barriers(int loops) {
  int done = 0;
  for (int i = 0; i < loops; i++) {
    MPI_Barrier(MPI_COMM_WORLD);
    done++;
  }
  int sum = 0;
  MPI_Allreduce(&done, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (sum != loops * nranks) fail("barrier count", 0, sum, loops * nranks);
  // And a ring exchange across the barrier: each rank's token reaches its successor intact.
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  int token = rank * 31 + 5, got = -1;
  MPI_Request rq;
  MPI_Irecv(&got, 1, MPI_INT, prev, 77, MPI_COMM_WORLD, &rq);
  MPI_Send(&token, 1, MPI_INT, next, 77, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Wait(&rq, MPI_STATUS_IGNORE);
  if (got != prev * 31 + 5) fail("ring token", prev, got, prev * 31 + 5);
  char phase[96];
  snprintf(phase, sizeof phase, "%d barriers, then a ring exchange", loops);
  check_all(phase);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  size_t max_bytes = argc > 1 ? (size_t)strtoull(argv[1], NULL, 0) : (size_t)4 << 20;
  const long loops = argc > 2 ? strtol(argv[2], NULL, 0) : 1000;
  if (nranks < 2 || nranks % 2 != 0 || max_bytes == 0 || max_bytes > (1u << 30) || loops < 1 ||
      loops > 10000000) {
    if (rank == 0) {
      fprintf(stderr,
              "mpi_check: needs an even number of ranks (got %d), 1 <= MAX_BYTES <= 1 GiB, "
              "1 <= BARRIERS <= 10^7\n",
              nranks);
    }
    MPI_Finalize();
    return 2;
  }
  if (rank == 0) printf("mpi_check: %d ranks\n", nranks);
  phase_start = MPI_Wtime();
  pingpong(max_bytes);
  allreduce(max_bytes);
  alltoall(max_bytes);
  barriers((int)loops);
  if (rank == 0) printf("mpi_check: PASS\n");
  MPI_Finalize();
  return 0;
}

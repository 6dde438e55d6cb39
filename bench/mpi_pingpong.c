// MPI ping-pong between two ranks (issue 16's benchmark, bench/mpi_bench.sh):
//
//   mpi_pingpong [--corrupt] [LAT_ITERS [BW_ITERS]]   (defaults 20000 and 300; exactly 2 ranks)
//
//   - latency: 8-byte messages, LAT_ITERS timed round trips after LAT_ITERS / 10 (at least 1)
//     of warm-up; every round trip is timed on its own (CLOCK_MONOTONIC, rank 0), and the
//     reported one-way latency is the median round trip / 2 (min as well).
//   - bandwidth: 1 MiB messages in a ping-pong (not a windowed stream), BW_ITERS timed round
//     trips after BW_ITERS / 10 (at least 1) of warm-up; MB/s (10^6 bytes per second) is
//     2 * 1 MiB over the median round trip: the data one direction moves per second while the
//     two directions take turns.
//
// No number comes from a broken transport: in both phases every message carries its iteration
// in its first and last 8 bytes, checked on receipt; the first warm-up and the last timed
// iteration send a full pattern of their own (sender, size, iteration), checked byte for byte
// into a buffer filled with garbage before; MPI_Get_count must give the size. Filling and
// checking happen outside the timed span. A rank that finds a mismatch makes both exit 1 before
// anything is printed. --corrupt (a self-test of those checks) makes rank 1 flip one bit in the
// middle of the last 1 MiB message it received before checking it, as a transport that broke it
// would have: the run must then fail.
//
// Output (rank 0), one line per metric, then what the caller can hold against the transport's
// counters:
//   mpi_pingpong: metric=latency bytes=8 iters=N one_way_us_median=X one_way_us_min=Y
//   mpi_pingpong: metric=bandwidth bytes=1048576 iters=N mb_per_s=X rtt_us_median=Y
//   mpi_pingpong: moved=B bytes each way (warm-up included)
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int rank;
static int corrupt;
static long errors;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static unsigned char pattern(int sender, size_t size, long iter, size_t i) {
  uint64_t x = ((uint64_t)sender + 1) * 0x9e3779b97f4a7c15ull +
               (uint64_t)size * 0x2545f4914f6cdd1dull + (uint64_t)iter * 0xd6e8feb86659fd93ull +
               (uint64_t)i;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return (unsigned char)x;
}

static void put_stamp(unsigned char* buf, size_t size, long iter) {
  uint64_t v = (uint64_t)iter;
  memcpy(buf, &v, sizeof v);
  memcpy(buf + size - sizeof v, &v, sizeof v);
}

static void mismatch(const char* what, size_t size, long iter, long at) {
  if (errors < 10) {
    fprintf(stderr, "mpi_pingpong: rank %d: %s at %zu B, iteration %ld, offset %ld\n", rank, what,
            size, iter, at);
  }
  errors++;
}

static void check_received(const unsigned char* buf, size_t size, long iter, int full, int sender,
                           const MPI_Status* st) {
  int count = -1;
  MPI_Get_count(st, MPI_BYTE, &count);
  if (count < 0 || (size_t)count != size) mismatch("wrong count", size, iter, count);
  uint64_t head, tail;
  memcpy(&head, buf, sizeof head);
  memcpy(&tail, buf + size - sizeof tail, sizeof tail);
  if (head != (uint64_t)iter) mismatch("wrong iteration stamp (head)", size, iter, 0);
  if (tail != (uint64_t)iter) mismatch("wrong iteration stamp (tail)", size, iter, (long)size - 8);
  if (!full) return;
  for (size_t i = sizeof head; i < size - sizeof tail; i++) {
    if (buf[i] != pattern(sender, size, iter, i)) {
      mismatch("wrong byte", size, iter, (long)i);
      return;
    }
  }
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

// Runs warm + iters round trips of SIZE bytes; rank 0 sends first. Returns (on rank 0) the
// timed round trips sorted, in *rtt (iters of them).
static void pingpong(size_t size, long warm, long iters, double* rtt) {
  unsigned char* out = malloc(size);
  unsigned char* in = malloc(size);
  if (out == NULL || in == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
  const int peer = 1 - rank;
  const int tag = (int)(size & 0x7fff);
  memset(out, 0, size);
  for (long it = 0; it < warm + iters; it++) {
    const int full = it == 0 || it == warm + iters - 1;
    // Before the timed span: the message this rank sends, and garbage where it receives.
    if (full) {
      for (size_t i = 0; i < size; i++) out[i] = pattern(rank, size, it, i);
      memset(in, 0xa5 ^ (int)(it & 0xff), size);
    }
    put_stamp(out, size, it);
    MPI_Status st;
    const double t0 = now_us();
    if (rank == 0) {
      MPI_Send(out, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
      MPI_Recv(in, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st);
    } else {
      MPI_Recv(in, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st);
      MPI_Send(out, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
    }
    const double t1 = now_us();
    if (it >= warm) rtt[it - warm] = t1 - t0;
    if (corrupt && rank == 1 && size > 16 && it == warm + iters - 1) in[size / 2] ^= 0x10;
    check_received(in, size, it, full, peer, &st);
  }
  qsort(rtt, (size_t)iters, sizeof *rtt, cmp_double);
  free(out);
  free(in);
}

static long arg(int argc, char** argv, int i, long def) {
  if (argc <= i) return def;
  char* end;
  const long v = strtol(argv[i], &end, 10);
  return *end == '\0' && v > 0 && v <= 100000000 ? v : -1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int a = 1;
  if (argc > 1 && strcmp(argv[1], "--corrupt") == 0) corrupt = a = 2;
  const long lat_iters = arg(argc, argv, a, 20000), bw_iters = arg(argc, argv, a + 1, 300);
  if (nranks != 2 || lat_iters < 0 || bw_iters < 0 || argc > a + 2) {
    if (rank == 0) {
      fprintf(stderr,
              "usage: mpirun -np 2 mpi_pingpong [--corrupt] [LAT_ITERS [BW_ITERS]] (%d ranks)\n",
              nranks);
    }
    MPI_Finalize();
    return 2;
  }
  const size_t lat_size = 8, bw_size = (size_t)1 << 20;
  const long lat_warm = lat_iters / 10 > 0 ? lat_iters / 10 : 1;
  const long bw_warm = bw_iters / 10 > 0 ? bw_iters / 10 : 1;
  double* lat = malloc(sizeof(double) * (size_t)lat_iters);
  double* bw = malloc(sizeof(double) * (size_t)bw_iters);
  if (lat == NULL || bw == NULL) MPI_Abort(MPI_COMM_WORLD, 2);

  MPI_Barrier(MPI_COMM_WORLD);
  pingpong(lat_size, lat_warm, lat_iters, lat);
  MPI_Barrier(MPI_COMM_WORLD);
  pingpong(bw_size, bw_warm, bw_iters, bw);

  long total = 0;
  MPI_Allreduce(&errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (total != 0) {
    if (rank == 0) fprintf(stderr, "mpi_pingpong: FAIL: %ld mismatches, no numbers\n", total);
    MPI_Finalize();
    return 1;
  }
  if (rank == 0) {
    const double lat_rtt = lat[lat_iters / 2], bw_rtt = bw[bw_iters / 2];
    printf(
        "mpi_pingpong: metric=latency bytes=%zu iters=%ld one_way_us_median=%.3f "
        "one_way_us_min=%.3f\n",
        lat_size, lat_iters, lat_rtt / 2, lat[0] / 2);
    printf("mpi_pingpong: metric=bandwidth bytes=%zu iters=%ld mb_per_s=%.1f rtt_us_median=%.1f\n",
           bw_size, bw_iters, 2.0 * (double)bw_size / bw_rtt, bw_rtt);
    printf("mpi_pingpong: moved=%llu bytes each way (warm-up included)\n",
           (unsigned long long)(lat_size * (size_t)(lat_warm + lat_iters) +
                                bw_size * (size_t)(bw_warm + bw_iters)));
  }
  free(lat);
  free(bw);
  MPI_Finalize();
  return 0;
}

// The test bed's delay stage (tests/netbed/netbed.py): this kernel has neither netem nor the fq
// qdisc (which would honour an EDT skb->tstamp), so a delay is a program: every Ethernet frame
// that arrives on IN_IF is sent out of OUT_IF DELAY_US microseconds later, in order (a fixed
// delay keeps FIFO order, so the queue is a ring). Frames that find the ring full are dropped
// and counted. The bed runs it in a namespace of its own on the return path (receiver towards
// senders), which carries ACKs and CNPs, not the data.
//
//   delayline IN_IF OUT_IF DELAY_US [SLOTS]
//
// Prints "ready" once both sockets are bound; on SIGTERM or SIGINT prints one JSON line of
// counters and exits 0. A frame waits for the delay from the moment this program reads it:
// when the program was not running, a frame waited longer (late_max_us says by how much a
// frame left after its time, late_mean_us on average, late_us_histogram how many were late by
// less than 10 us, 100 us, 1 ms, 10 ms, and more).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { kBatch = 64 };

static volatile sig_atomic_t stop;
static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// The histogram's bucket of a frame that left `late_ns` after its time: under 10 us, 100 us,
// 1 ms, 10 ms, and later.
static int late_bucket(uint64_t late_ns) {
  int b = 0;
  for (uint64_t limit = 10000; b < 4 && late_ns >= limit; limit *= 10) ++b;
  return b;
}

static int open_bound(const char* ifname, int protocol, unsigned* ifmtu) {
  const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, protocol);
  if (fd < 0) return -1;
  struct sockaddr_ll a;
  memset(&a, 0, sizeof a);
  a.sll_family = AF_PACKET;
  a.sll_protocol = (unsigned short)protocol;
  a.sll_ifindex = (int)if_nametoindex(ifname);
  if (a.sll_ifindex == 0 || bind(fd, (struct sockaddr*)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  if (ifmtu) {
    struct ifreq r;
    memset(&r, 0, sizeof r);
    snprintf(r.ifr_name, sizeof r.ifr_name, "%s", ifname);
    if (ioctl(fd, SIOCGIFMTU, &r) != 0) {
      close(fd);
      return -1;
    }
    *ifmtu = (unsigned)r.ifr_mtu;
  }
  return fd;
}

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    fprintf(stderr, "usage: delayline IN_IF OUT_IF DELAY_US [SLOTS]\n");
    return 2;
  }
  const uint64_t delay_ns = strtoull(argv[3], NULL, 10) * 1000u;
  const size_t slots = argc == 5 ? strtoul(argv[4], NULL, 10) : 8192;
  if (slots == 0) return 2;

  unsigned mtu = 0;
  const int rx = open_bound(argv[1], htons(ETH_P_ALL), &mtu);
  const int tx = open_bound(argv[2], 0, NULL);  // protocol 0: this socket receives nothing
  if (rx < 0 || tx < 0) {
    fprintf(stderr, "delayline: cannot open packet sockets on %s, %s: %s\n", argv[1], argv[2],
            strerror(errno));
    return 1;
  }
  const int one = 1;
  // Frames this host sends out of IN_IF (the data path's) are not ours to delay.
  if (setsockopt(rx, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0) {
    fprintf(stderr, "delayline: PACKET_IGNORE_OUTGOING: %s\n", strerror(errno));
    return 1;
  }
  const int rcvbuf = 8 << 20;
  (void)setsockopt(rx, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
  (void)prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // wake-ups to the microsecond, not 50 us

  const size_t slot_bytes = mtu + 64;  // Ethernet header and VLAN tag room
  unsigned char* ring = malloc(slots * slot_bytes);
  uint32_t* lens = calloc(slots, sizeof *lens);
  uint64_t* due = calloc(slots, sizeof *due);
  unsigned char* scratch = malloc(slot_bytes);
  if (!ring || !lens || !due || !scratch) {
    fprintf(stderr, "delayline: out of memory\n");
    return 1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  uint64_t forwarded = 0, dropped_full = 0, send_errors = 0, truncated = 0, late_max_ns = 0;
  uint64_t late_sum_ns = 0;
  uint64_t late_hist[5] = {0, 0, 0, 0, 0};  // by late_bucket()
  size_t head = 0, count = 0, max_queued = 0;
  printf("ready\n");
  fflush(stdout);

  while (!stop) {
    // Sleep until a frame arrives or the oldest one is due.
    struct timespec timeout, *tp = NULL;
    if (count) {
      const uint64_t t = now_ns();
      const uint64_t wait = due[head] > t ? due[head] - t : 0;
      timeout.tv_sec = (time_t)(wait / 1000000000u);
      timeout.tv_nsec = (long)(wait % 1000000000u);
      tp = &timeout;
    }
    struct pollfd p = {.fd = rx, .events = POLLIN};
    const int n = ppoll(&p, 1, tp, NULL);
    if (n < 0 && errno != EINTR) {
      fprintf(stderr, "delayline: poll: %s\n", strerror(errno));
      return 1;
    }
    if (n > 0) {
      for (;;) {  // drain what has arrived, a batch at a time
        struct mmsghdr m[kBatch];
        struct iovec iov[kBatch];
        size_t where[kBatch];
        const size_t room = slots - count;
        for (size_t i = 0; i < kBatch; ++i) {
          where[i] = (head + count + i) % slots;
          iov[i].iov_base = i < room ? ring + where[i] * slot_bytes : scratch;
          iov[i].iov_len = slot_bytes;
          memset(&m[i].msg_hdr, 0, sizeof m[i].msg_hdr);
          m[i].msg_hdr.msg_iov = &iov[i];
          m[i].msg_hdr.msg_iovlen = 1;
        }
        const int got = recvmmsg(rx, m, kBatch, MSG_DONTWAIT, NULL);
        if (got <= 0) break;
        const uint64_t t = now_ns();
        for (int i = 0; i < got; ++i) {
          if ((size_t)i >= room) {
            ++dropped_full;
            continue;
          }
          if (m[i].msg_hdr.msg_flags & MSG_TRUNC) ++truncated;
          lens[where[i]] = m[i].msg_len;
          due[where[i]] = t + delay_ns;
          ++count;
        }
        if (count > max_queued) max_queued = count;
        if (got < kBatch) break;
      }
    }
    // Send every frame that is due.
    const uint64_t t = now_ns();
    while (count && due[head] <= t) {
      const uint64_t late = t - due[head];
      if (late > late_max_ns) late_max_ns = late;
      late_sum_ns += late;
      ++late_hist[late_bucket(late)];
      if (send(tx, ring + head * slot_bytes, lens[head], 0) < 0)
        ++send_errors;
      else
        ++forwarded;
      head = (head + 1) % slots;
      --count;
    }
  }
  const uint64_t sent = forwarded + send_errors;
  const double late_mean_us = sent ? (double)late_sum_ns / 1000.0 / (double)sent : 0.0;
  printf(
      "{\"forwarded\":%llu,\"dropped_full\":%llu,\"send_errors\":%llu,\"truncated\":%llu,"
      "\"max_queued\":%zu,\"late_max_us\":%.1f,\"late_mean_us\":%.1f,"
      "\"late_us_histogram\":{\"lt10\":%llu,\"lt100\":%llu,\"lt1000\":%llu,\"lt10000\":%llu,"
      "\"ge10000\":%llu},\"delay_us\":%llu}\n",
      (unsigned long long)forwarded, (unsigned long long)dropped_full,
      (unsigned long long)send_errors, (unsigned long long)truncated, max_queued,
      (double)late_max_ns / 1000.0, late_mean_us, (unsigned long long)late_hist[0],
      (unsigned long long)late_hist[1], (unsigned long long)late_hist[2],
      (unsigned long long)late_hist[3], (unsigned long long)late_hist[4],
      (unsigned long long)(delay_ns / 1000u));
  return 0;
}

// tc BPF programs of the real-network test bed (tests/netbed/netbed.py), one object with four
// direct-action classifiers, each attached by its section name:
//
//   marker     on the bottleneck port's egress (clsact, before the TBF): ECN marking from a
//              virtual queue drained at the bottleneck's rate, DCQCN/RED style: below KMIN bytes
//              no mark, between KMIN and KMAX a CE mark with probability PMAX * (q - KMIN) /
//              (KMAX - KMIN), at KMAX and above every ECN-capable packet marked. Only IPv4
//              packets with ECT(0) or ECT(1) are marked (CE = 3); the IPv4 header checksum is
//              updated (bpf_l3_csum_replace). RoCEv2's ICRC masks the TOS byte, so a mark leaves
//              the ICRC valid.
//   ect_stamp  on a sender's egress: sets ECT(0) on Not-ECT IPv4 RoCEv2 packets (UDP port
//              4791), as a RoCE NIC with ECN enabled does; uroce does not set ECT itself yet.
//   ecn_count  on the receiver's ingress: counts IPv4 packets by ECN codepoint, RoCEv2 and TCP
//              apart, so that CE marks are seen where they arrive.
//   drop       drops every frame (the delay stage's ingress from the receiver).
//   xdp_pass   (XDP, not tc) passes every frame: see below.
//
// Parameters are constants set at build time (clang -D, by netbed.py):
//   NB_RATE_BPS  the virtual queue's drain rate in bytes per second (the TBF's rate: both count
//                a packet as its skb length, the Ethernet frame without FCS)
//   NB_LIMIT     the bottleneck's buffer in bytes (the TBF's limit): a packet that would take
//                the virtual queue past it is not added, as the TBF drops it (counted)
//   NB_KMIN, NB_KMAX  thresholds in bytes; NB_PMAX_PPM  the marking probability at KMAX, in
//                parts per million
//
// Each attachment loads its own copy of the object, so its maps are its own; netbed.py reads
// them with bpftool through the program's map IDs.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <stddef.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#ifndef NB_RATE_BPS
#define NB_RATE_BPS 125000000ULL  // 1 Gbit/s
#endif
#ifndef NB_LIMIT
#define NB_LIMIT 262144ULL
#endif
#ifndef NB_KMIN
#define NB_KMIN 20000ULL
#endif
#ifndef NB_KMAX
#define NB_KMAX 200000ULL
#endif
#ifndef NB_PMAX_PPM
#define NB_PMAX_PPM 10000ULL  // 1%
#endif

#define ROCEV2_PORT 4791
#define ECN_MASK 3
#define ECN_CE 3
#define IP_CSUM_OFF (ETH_HLEN + offsetof(struct iphdr, check))
#define IP_TOS_OFF (ETH_HLEN + offsetof(struct iphdr, tos))

// marker counters, by index
enum {
  MK_PKTS,          // IPv4 packets seen
  MK_BYTES,         // their skb bytes (what the TBF counts)
  MK_ECT,           // of them ECT(0) or ECT(1)
  MK_MARKED,        // CE set here
  MK_CE_ALREADY,    // arrived with CE
  MK_NOT_ECT_OVER,  // Not-ECT packets that found the virtual queue above KMIN (left alone)
  MK_OTHER,         // not IPv4 (ARP, IPv6): passed, not counted in the virtual queue
  MK_OVER_LIMIT,    // found the virtual queue full (the TBF drops such a packet)
  MK_COUNT
};

struct vqueue {
  struct bpf_spin_lock lock;
  __u64 bytes;    // the virtual queue's backlog
  __u64 last_ns;  // when it was last drained
  __u64 max_bytes;
};

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, MK_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} marker_cnt SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct vqueue);
} marker_vq SEC(".maps");

// ect_stamp: [0] packets stamped ECT(0), [1] RoCEv2 packets that already had an ECN codepoint
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, __u64);
} stamp_cnt SEC(".maps");

// ecn_count: [class * 4 + codepoint], class 0 RoCEv2 (UDP 4791), 1 TCP, 2 other IPv4
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 12);
  __type(key, __u32);
  __type(value, __u64);
} rx_ecn SEC(".maps");

static __always_inline void count(void* map, __u32 i, __u64 n) {
  __u64* v = bpf_map_lookup_elem(map, &i);
  if (v) __sync_fetch_and_add(v, n);
}

// The IPv4 header of an Ethernet frame, or NULL.
static __always_inline struct iphdr* ipv4(struct __sk_buff* skb) {
  void* data = (void*)(long)skb->data;
  void* end = (void*)(long)skb->data_end;
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP)) return NULL;
  struct iphdr* ip = (void*)(eth + 1);
  if ((void*)(ip + 1) > end || ip->ihl < 5) return NULL;
  return ip;
}

// Whether an IPv4 packet is RoCEv2 (UDP to port 4791).
static __always_inline int is_rocev2(struct __sk_buff* skb, struct iphdr* ip) {
  if (ip->protocol != IPPROTO_UDP) return 0;
  struct udphdr* udp = (void*)ip + ip->ihl * 4;
  if ((void*)(udp + 1) > (void*)(long)skb->data_end) return 0;
  return udp->dest == bpf_htons(ROCEV2_PORT);
}

// Rewrites the TOS byte: the checksum first (over the 16-bit word holding version/IHL and TOS),
// then the byte. Invalidates packet pointers.
static __always_inline int set_tos(struct __sk_buff* skb, __u8 old_tos, __u8 new_tos) {
  __u16 old_word = bpf_htons((__u16)old_tos);
  __u16 new_word = bpf_htons((__u16)new_tos);
  if (bpf_l3_csum_replace(skb, IP_CSUM_OFF, old_word, new_word, 2) < 0) return -1;
  return bpf_skb_store_bytes(skb, IP_TOS_OFF, &new_tos, 1, 0);
}

SEC("tc/marker")
int marker(struct __sk_buff* skb) {
  struct iphdr* ip = ipv4(skb);
  if (!ip) {
    count(&marker_cnt, MK_OTHER, 1);
    return TC_ACT_OK;
  }
  const __u8 tos = ip->tos;
  const __u64 len = skb->len;
  count(&marker_cnt, MK_PKTS, 1);
  count(&marker_cnt, MK_BYTES, len);

  // The virtual queue: drained at the bottleneck's rate since the last packet, then this one
  // added. Its backlog before this packet decides the mark, as a queue's would on arrival.
  __u32 zero = 0;
  struct vqueue* q = bpf_map_lookup_elem(&marker_vq, &zero);
  if (!q) return TC_ACT_OK;
  const __u64 now = bpf_ktime_get_ns();
  __u64 backlog;
  bpf_spin_lock(&q->lock);
  if (q->last_ns && now > q->last_ns) {
    __u64 dt = now - q->last_ns;
    if (dt > 1000000000ULL) dt = 1000000000ULL;  // a second drains any queue; no overflow
    const __u64 drained = dt * NB_RATE_BPS / 1000000000ULL;
    q->bytes = q->bytes > drained ? q->bytes - drained : 0;
  }
  q->last_ns = now;
  backlog = q->bytes;
  const int full = backlog + len > NB_LIMIT;
  if (!full) q->bytes += len;
  if (q->bytes > q->max_bytes) q->max_bytes = q->bytes;
  bpf_spin_unlock(&q->lock);
  if (full) count(&marker_cnt, MK_OVER_LIMIT, 1);

  const __u8 ecn = tos & ECN_MASK;
  if (ecn == ECN_CE) {
    count(&marker_cnt, MK_CE_ALREADY, 1);
    return TC_ACT_OK;
  }
  if (ecn) count(&marker_cnt, MK_ECT, 1);
  if (backlog <= NB_KMIN) return TC_ACT_OK;
  if (!ecn) {
    count(&marker_cnt, MK_NOT_ECT_OVER, 1);
    return TC_ACT_OK;
  }
  if (backlog < NB_KMAX) {
    const __u64 p_ppm = NB_PMAX_PPM * (backlog - NB_KMIN) / (NB_KMAX - NB_KMIN);
    if (bpf_get_prandom_u32() % 1000000 >= p_ppm) return TC_ACT_OK;
  }
  if (set_tos(skb, tos, tos | ECN_CE) == 0) count(&marker_cnt, MK_MARKED, 1);
  return TC_ACT_OK;
}

SEC("tc/ect_stamp")
int ect_stamp(struct __sk_buff* skb) {
  struct iphdr* ip = ipv4(skb);
  if (!ip || !is_rocev2(skb, ip)) return TC_ACT_OK;
  const __u8 tos = ip->tos;
  if (tos & ECN_MASK) {
    count(&stamp_cnt, 1, 1);
    return TC_ACT_OK;
  }
  if (set_tos(skb, tos, tos | 2) == 0) count(&stamp_cnt, 0, 1);  // ECT(0) is 10
  return TC_ACT_OK;
}

SEC("tc/ecn_count")
int ecn_count(struct __sk_buff* skb) {
  struct iphdr* ip = ipv4(skb);
  if (!ip) return TC_ACT_OK;
  __u32 cls = 2;
  if (is_rocev2(skb, ip))
    cls = 0;
  else if (ip->protocol == IPPROTO_TCP)
    cls = 1;
  count(&rx_ecn, cls * 4 + (ip->tos & ECN_MASK), 1);
  return TC_ACT_OK;
}

// drop: the delay stage's receiver-side port; its frames go through the delay line (which
// reads them from a packet socket, ahead of tc), never through the namespace's own stack.
SEC("tc/drop")
int drop(struct __sk_buff* skb) { return TC_ACT_SHOT; }

// xdp_pass: attached to every veth end of the bed, it puts the veth in NAPI mode: a frame sent
// into a veth is queued on its peer's one receive ring and taken off it in order by NAPI,
// instead of going through the backlog of whichever CPU sent it (netif_rx), which reorders a
// flow whose sender moves between CPUs. It passes every frame (and with it attached the
// kernel does no GRO on that device, so packets stay wire-sized).
SEC("xdp")
int xdp_pass(struct xdp_md* ctx) { return XDP_PASS; }

char _license[] SEC("license") = "GPL";

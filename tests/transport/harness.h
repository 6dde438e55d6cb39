// Test harness for the transport: a minimal memory-region table, completion collectors, and a
// pair of QPs joined by an in-memory wire that owns time. Packets cross as real frames (outer
// headers and ICRC built, then parsed), so what a test sees is what the wire would carry.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "base/prng.h"
#include "cc/congestion_control.h"
#include "transport/qp.h"
#include "wire/builder.h"

namespace uroce::test {

// A memory-region table good enough for transport tests (verbs/ has the real one).
class TestMemory : public transport::MemoryResolver {
 public:
  struct Region {
    std::uint32_t pd = 0;
    std::uint64_t addr = 0;
    std::uint64_t length = 0;
    std::uint32_t access = 0;
    bool valid = true;
    bool invalidatable = false;  // what a fast-register MR or a memory window would be
  };
  // Registers [addr, addr+length); returns its key (used as both lkey and rkey). Like verbs'
  // ordinary MRs, a region refuses invalidation unless made `invalidatable`.
  std::uint32_t add(std::uint32_t pd, void* addr, std::uint64_t length, std::uint32_t access,
                    bool invalidatable = false);
  void remove(std::uint32_t key) { regions_.at(key).valid = false; }
  std::uint32_t resolves = 0;

  Result<MutBytes, transport::AccessError> resolve(std::uint32_t pd, std::uint32_t qpn,
                                                   std::uint32_t key, bool remote,
                                                   std::uint64_t addr, std::uint64_t length,
                                                   std::uint32_t access) override;
  Result<MutBytes, transport::AccessError> resolve_region(std::uint32_t pd, std::uint32_t qpn,
                                                          std::uint32_t key,
                                                          std::uint32_t access) override;
  Result<bool, transport::AccessError> invalidate(std::uint32_t pd, std::uint32_t qpn,
                                                  std::uint32_t key, bool remote) override;
  // No windows here (verbs/ has them): every bind fails.
  Result<bool, transport::AccessError> bind_mw(const transport::MwBindRequest&) override {
    return Err{transport::AccessError::kInvalidKey};
  }

 private:
  // The valid region `key` names in `pd` with every `need` flag.
  Result<const Region*, transport::AccessError> checked(std::uint32_t pd, std::uint32_t key,
                                                        std::uint32_t need);
  std::map<std::uint32_t, Region> regions_;
  std::uint32_t next_key_ = 0x100;
};

class CqCollector : public transport::CompletionSink {
 public:
  void push(const Wc& wc, bool solicited) override {
    wcs.push_back(wc);
    solicited_flags.push_back(solicited);
  }
  std::vector<Wc> wcs;
  std::vector<bool> solicited_flags;
};

class EventCollector : public transport::EventSink {
 public:
  void qp_event(std::uint32_t qpn, AsyncEventType type) override { events.push_back({qpn, type}); }
  void srq_limit_reached(transport::RecvQueue*) override { ++srq_limits; }
  std::vector<std::pair<std::uint32_t, AsyncEventType>> events;
  int srq_limits = 0;
};

// Counts the feedback it is given; no congestion control (as rxe), or `inner`'s when a test sets
// one (every hook is then passed on to it).
class CountingCc final : public cc::CongestionControl {
 public:
  Instant next_send_time(Instant now, std::uint32_t bytes) override {
    return inner != nullptr ? inner->next_send_time(now, bytes) : now;
  }
  void on_sent(Instant now, std::uint32_t bytes) override {
    if (inner != nullptr) inner->on_sent(now, bytes);
  }
  void on_ack(const cc::AckEvent& ack) override {
    ++acks;
    acked_packets += ack.acked_packets;
    if (inner != nullptr) inner->on_ack(ack);
  }
  void on_loss(Instant now, cc::LossSignal signal) override {
    ++losses[static_cast<int>(signal)];
    if (inner != nullptr) inner->on_loss(now, signal);
  }
  std::uint32_t window_packets() const override {
    if (window != cc::kUnlimitedWindow) return window;
    return inner != nullptr ? inner->window_packets() : cc::kUnlimitedWindow;
  }
  void on_cnp(Instant now) override {
    ++cnps;
    if (inner != nullptr) inner->on_cnp(now);
  }
  void on_ecn_ce(Instant now) override {
    ++ecn_ce_marks;
    if (inner != nullptr) inner->on_ecn_ce(now);
  }
  bool take_cnp(Instant now) override { return inner != nullptr && inner->take_cnp(now); }
  bool ecn_capable() const override { return inner != nullptr && inner->ecn_capable(); }
  int cnps = 0;
  int ecn_ce_marks = 0;
  int acks = 0;
  std::uint64_t acked_packets = 0;
  int losses[2] = {0, 0};                       // by cc::LossSignal
  std::uint32_t window = cc::kUnlimitedWindow;  // a test's window (else inner's)
  cc::CongestionControl* inner = nullptr;
};

// An XRC QP's role, and a target's domain and SRQ table (transport::QpEnv's fields).
struct XrcSetup {
  transport::XrcRole role = transport::XrcRole::kNone;
  transport::XrcSrqTable* srqs = nullptr;
  std::uint32_t xrcd = 0;
};

// One side: a QP with its own CQs, RQ and memory.
struct Endpoint {
  Endpoint(std::uint32_t qpn, QpType type, wire::IpAddress ip, const QpCap& cap = default_cap(),
           const XrcSetup& xrc = {});
  static QpCap default_cap() { return QpCap{64, 64, 4, 4, 64}; }

  wire::IpAddress ip;
  TestMemory memory;
  CqCollector scq, rcq;
  EventCollector events;
  CountingCc cc;
  std::unique_ptr<transport::RecvQueue> rq;
  std::unique_ptr<transport::Qp> qp;
  std::vector<std::byte> buf;  // registered as `key`
  std::uint32_t key = 0;
  std::uint64_t addr() const { return reinterpret_cast<std::uint64_t>(buf.data()); }
};

struct Frame {
  Instant at;
  int to;  // 0 = a, 1 = b
  std::vector<std::byte> bytes;
};

// Two QPs connected back to back. Time only moves in run().
class Pair {
 public:
  explicit Pair(QpType type, std::uint32_t mtu = 1024, std::uint32_t psn_a = 0x100,
                std::uint32_t psn_b = 0x200, const XrcSetup& xrc_a = {},
                const XrcSetup& xrc_b = {});
  Endpoint a, b;
  Instant now = Instant::from_ns(1'000'000);
  Duration one_way = Duration::us(2);
  // Decides whether a frame in flight is dropped: (sender 0/1, frame bytes) -> drop?
  std::function<bool(int, const std::vector<std::byte>&)> drop;
  // Rewrites a frame in flight (sender 0/1, frame bytes), before `drop` and the faults: lets a
  // test make one side look like another implementation on the wire.
  std::function<void(int, std::vector<std::byte>&)> rewrite;
  // Seeded faults applied to every frame: loss, duplication and reordering (extra delay), as
  // numerators over 1000.
  struct Faults {
    std::uint32_t loss = 0, duplicate = 0, reorder = 0;
  } faults;
  Prng rng{1};
  std::vector<std::vector<std::byte>> captured;  // every frame sent, in order
  bool capture = false;

  // Connects a and b (INIT -> RTR -> RTS) with rxe-like defaults.
  void connect(std::uint8_t timeout = 14, std::uint8_t retry_cnt = 7, std::uint8_t rnr_retry = 7,
               std::uint8_t min_rnr_timer = 12, std::uint8_t max_rd_atomic = 16);
  // Runs until nothing is in flight and no QP has work or a timer before `limit`.
  void run(Duration limit = Duration::s(10));
  // Delivers one frame by hand.
  void deliver(int to, const std::vector<std::byte>& frame);

  Endpoint& side(int i) { return i == 0 ? a : b; }
  std::uint64_t frames_sent = 0;

 private:
  void transmit(int from);
  std::vector<Frame> wire_;  // kept sorted by arrival time (stable)
  void enqueue(Frame f);
};

// Test data: a byte pattern that differs for each seed and each position.
inline std::vector<std::byte> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>(seed + i * 13 + (i >> 8));
  return v;
}
inline void fill(Endpoint& e, std::size_t off, std::size_t n, std::uint8_t seed) {
  const auto p = pattern(n, seed);
  std::copy(p.begin(), p.end(), e.buf.begin() + static_cast<std::ptrdiff_t>(off));
}
inline std::vector<std::byte> slice(const Endpoint& e, std::size_t off, std::size_t n) {
  const auto b = e.buf.begin() + static_cast<std::ptrdiff_t>(off);
  return {b, b + static_cast<std::ptrdiff_t>(n)};
}
// An SGE over the endpoint's registered buffer.
inline Sge sge(const Endpoint& e, std::size_t off, std::uint32_t len) {
  return Sge{e.addr() + off, len, e.key};
}

// A send work request over `sges` (the RDMA and atomic fields are the caller's to fill in).
inline transport::SendRequest request(std::uint64_t id, WrOpcode op, std::span<const Sge> sges,
                                      std::uint32_t flags = kSendSignaled) {
  transport::SendRequest r;
  r.wr_id = id;
  r.opcode = op;
  r.send_flags = flags;
  r.sges = sges;
  return r;
}

// Builds a request/response frame as a peer would (for crafted-packet tests).
std::vector<std::byte> craft(const wire::IpAddress& src, const wire::IpAddress& dst,
                             const wire::TransportHeaders& h, ConstBytes payload);

}  // namespace uroce::test

namespace uroce::test {

// One QP in RTS, fed crafted packets from a fictitious peer; its output is decoded.
class Solo {
 public:
  struct Sent {
    wire::TransportHeaders h;
    const wire::OpcodeInfo* op = nullptr;
    std::vector<std::byte> payload;
    transport::AddressVector av;
    bool sr_kept = false;  // the BTH carries transport::kBthSrKeptBit (selective repeat)
  };
  static constexpr std::uint32_t kPeerQpn = 0x12;

  explicit Solo(QpType type, std::uint32_t mtu = 1024, std::uint32_t sq_psn = 0x1000,
                std::uint32_t rq_psn = 0x5000, const QpCap& cap = Endpoint::default_cap(),
                const XrcSetup& xrc = {});

  Endpoint e;
  wire::IpAddress peer = wire::IpAddress::v4(0x0a000002);
  // The UDP source port of every packet fed (source pinning, Qp::set_peer_udp_port).
  std::uint16_t src_port = wire::kRoceV2Port;
  // The next packet fed carries transport::kBthSrKeptBit (a selective-repeat peer's NAK).
  bool next_sr_kept = false;
  Instant now = Instant::from_ns(1'000'000);

  // Moves the QP to RESET and brings it up again as the constructor does (INIT, RTR, RTS with
  // `sq_psn` and `rq_psn`, then set()'s defaults): a QP reused for a new connection.
  void reconnect(std::uint32_t sq_psn = 0x1000, std::uint32_t rq_psn = 0x5000);
  // Sets retry parameters, timers and atomics limits (RC defaults as ibv_rc_pingpong uses).
  void set(std::uint8_t timeout, std::uint8_t retry_cnt, std::uint8_t rnr_retry,
           std::uint8_t min_rnr_timer = 12, std::uint8_t max_rd_atomic = 4);
  // Feeds one packet built from `h` (its opcode, PSN ...) with `payload`; the destination QPN
  // is filled in.
  void feed(wire::TransportHeaders h, ConstBytes payload = {});
  void feed(wire::Opcode op, std::uint32_t psn, ConstBytes payload = {}, bool ack_req = true);
  // As feed(h, payload), from `src` instead of `peer` (a third host, for the source check),
  // with the IP ECN bits `ecn`.
  void feed_from(const wire::IpAddress& src, wire::TransportHeaders h, ConstBytes payload = {},
                 std::uint8_t ecn = 0);
  // Everything the QP transmits now.
  // Everything the QP has to send now, or its first `max` packets.
  std::vector<Sent> drain(std::size_t max = 100000);
  void advance(Duration d) {
    now = now + d;
    e.qp->handle_timeout(now);
  }
  std::uint64_t va(std::size_t off) const { return e.addr() + off; }

 private:
  void bring_up(std::uint32_t sq_psn, std::uint32_t rq_psn);
  std::uint32_t mtu_;
};

}  // namespace uroce::test

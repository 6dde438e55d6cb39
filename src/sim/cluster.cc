#include "sim/cluster.h"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "base/prng.h"
#include "capture/pcap_file.h"
#include "datapath/datapath.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "sim/fault_plan.h"
#include "sim/network.h"
#include "transport/qp.h"
#include "uroce/verbs.h"
#include "verbs/address.h"
#include "wire/builder.h"
#include "wire/headers.h"
#include "wire/icrc.h"
#include "wire/packet.h"

namespace uroce::sim {

namespace {

constexpr std::size_t kGuardBytes = std::size_t{64} << 10;  // unregistered, at both ends
constexpr std::uint32_t kQkey = 0x11111111;

enum class OpKind : std::uint8_t {
  kSend,
  kSendImm,
  kWrite,
  kWriteImm,
  kRead,
  kCas,
  kFaa,
  kAtomicWrite,  // IBTA 1.5 (issue 41): RC only, to the side's slot at its peer
  kFlush,        // IBTA 1.5 (issue 41): RC only, placement type global
};
constexpr std::size_t kOpKinds = 9;

const char* op_name(OpKind k) {
  switch (k) {
    case OpKind::kSend:
      return "SEND";
    case OpKind::kSendImm:
      return "SEND_WITH_IMM";
    case OpKind::kWrite:
      return "RDMA_WRITE";
    case OpKind::kWriteImm:
      return "RDMA_WRITE_WITH_IMM";
    case OpKind::kRead:
      return "RDMA_READ";
    case OpKind::kCas:
      return "ATOMIC_CMP_AND_SWP";
    case OpKind::kFaa:
      return "ATOMIC_FETCH_AND_ADD";
    case OpKind::kAtomicWrite:
      return "ATOMIC_WRITE";
    case OpKind::kFlush:
      return "FLUSH";
  }
  return "?";
}

// Each operation's work request opcode and the completion opcode it reports on success
// (IBV_WR_*, IBV_WC_*, as rxe's), by OpKind.
struct OpOpcodes {
  WrOpcode wr;
  WcOpcode wc;
};
constexpr OpOpcodes kOpcodes[kOpKinds] = {
    {WrOpcode::kSend, WcOpcode::kSend},
    {WrOpcode::kSendWithImm, WcOpcode::kSend},
    {WrOpcode::kRdmaWrite, WcOpcode::kRdmaWrite},
    {WrOpcode::kRdmaWriteWithImm, WcOpcode::kRdmaWrite},
    {WrOpcode::kRdmaRead, WcOpcode::kRdmaRead},
    {WrOpcode::kAtomicCmpAndSwp, WcOpcode::kCompSwap},
    {WrOpcode::kAtomicFetchAndAdd, WcOpcode::kFetchAdd},
    {WrOpcode::kAtomicWrite, WcOpcode::kAtomicWrite},
    {WrOpcode::kFlush, WcOpcode::kFlush},
};
const OpOpcodes& opcodes_of(OpKind k) { return kOpcodes[static_cast<std::size_t>(k)]; }

// Whether `k` writes into the peer's memory (the ops a FLUSH behind them vouches for).
bool writes_remote(OpKind k) {
  return k == OpKind::kWrite || k == OpKind::kWriteImm || k == OpKind::kAtomicWrite;
}

bool consumes_recv(OpKind k) {
  return k == OpKind::kSend || k == OpKind::kSendImm || k == OpKind::kWriteImm;
}

// RC's protocol: RC itself and XRC's two halves. An XRC initiator is an RC requester without a
// receive side, a target an RC responder whose receive queue is its XRC SRQ.
bool rc_like(QpType t) {
  return t == QpType::kRc || t == QpType::kXrcSend || t == QpType::kXrcRecv;
}
bool rc_requester(QpType t) { return t == QpType::kRc || t == QpType::kXrcSend; }
bool rc_responder(QpType t) { return t == QpType::kRc || t == QpType::kXrcRecv; }

struct Cluster;
struct Side;

// One operation a QP posts. Its data is a pure function of the run seed and the op id.
struct Op {
  std::uint64_t id = 0;
  OpKind kind = OpKind::kSend;
  std::uint32_t len = 0;
  std::size_t local_off = 0;  // source (SEND/WRITE/ATOMIC WRITE), destination (READ, atomic)
  // WRITE target, READ source, atomic counter, ATOMIC WRITE slot, FLUSH range (with `len`).
  std::size_t remote_off = 0;
  std::uint32_t imm = 0;
  std::uint64_t compare = 0;
  std::uint64_t swap_add = 0;
  std::vector<std::byte> data;         // the message (SEND/WRITE), the 8 bytes of an ATOMIC WRITE
  std::uint8_t flush_selectivity = 0;  // FLUSH: wire::kFlushRange or wire::kFlushMr
  std::uint8_t sges = 1;               // SEND/WRITE: the source is gathered from this many SGEs
  // Posted with IBV_SEND_SIGNALED: a successful unsignaled op has no completion of its own (IBTA
  // C10-xx, rxe's do_complete: a CQE only for a signaled WR or an error); the next completion
  // of its QP says it is done. Decided when it is posted (post_sends).
  bool signaled = true;
};

struct RecvSlot {
  std::uint64_t wr_id = 0;
  std::size_t off = 0;
  std::uint32_t len = 0;
};

// One device and the application that polls it: its engine runs the same round as a real
// device's (engine::Engine::round), planned by a Scheduler with a real device's defaults (ACKs
// held and deferred unless ClusterOptions says otherwise), over this host's share of the
// network: frames delivered to it wait in `inbox` until a round receives them.
struct Host final : engine::QpDirectory, datapath::Datapath, DoorbellHandler {
  Cluster* cl = nullptr;
  HostId id = 0;
  wire::IpAddress ip;
  std::unique_ptr<Device> dev;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<engine::Scheduler> sched;
  std::deque<std::vector<std::byte>> inbox;  // delivered, not yet received
  // When this host's application must run a round again by itself (the Scheduler's
  // app_wait_until after its last round: a timer, held ACKs falling due).
  Instant wake = Instant::never();
  std::vector<std::byte> arena;
  std::vector<std::byte> expected;   // what the arena must hold
  std::vector<std::uint8_t> exempt;  // bytes checked by other oracles (counters, UC writes, GRH)
  PdHandle pd;
  MrInfo mr;
  std::size_t bump = kGuardBytes;
  std::vector<std::byte> frame;
  // The atomic counter of this host and what the oracle saw of it.
  std::size_t counter_off = 0;
  std::vector<std::uint64_t> counter_successes;  // values returned by successful atomics
  std::vector<std::uint64_t> counter_failures;   // values returned by failed CAS
  std::vector<std::byte> aimed;                  // a received frame with aimed corruption
  // Arena ranges [begin, end) that a packet placed in one pass wrote before it failed its ICRC:
  // undefined until its retransmission rewrites them (ClusterResult::unverified_bytes_left). A
  // WRITE or READ continuation's range must lie inside what its intact self writes (the state
  // knows the message's length); one that reaches beyond fails the run.
  struct Unverified {
    std::size_t begin = 0;
    std::size_t end = 0;
  };
  std::vector<Unverified> unverified;
  // On-demand paging (issue 41): whether the arena's region is an ODP one (drawn from the seed),
  // and the model of its pages behind DeviceConfig::fault_in: every arena page is mapped except
  // [hole_begin, hole_end) (empty but for check_odp_hole); a page faulted in for a write is
  // marked, so that the arena check can tell that no byte changed in a page never faulted in
  // for one (`initial`: the arena as the workload left it before the run).
  bool odp = false;
  std::vector<std::byte> initial;
  std::vector<std::uint8_t> faulted_for_write;  // per kOdpPage of the arena
  std::size_t hole_begin = 0;
  std::size_t hole_end = 0;
  bool fault_in(const std::byte* addr, std::size_t length, bool write);

  std::uint64_t va(std::size_t off) const {
    return reinterpret_cast<std::uint64_t>(arena.data()) + off;
  }
  std::size_t alloc(std::size_t n);
  transport::Qp* find_qp(std::uint32_t qpn) override { return dev->find_qp(qpn); }
  std::size_t receive(Instant now, std::size_t max, const RxHandler& handler) override;
  bool send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
            std::span<const ConstBytes> payload) override;
  // The simulated network takes each frame whole at send(): nothing is ever queued here.
  void flush(Instant) override {}
  void handle_frame(Instant now, ConstBytes f, const RxHandler& handler);
  void deliver(const wire::Frame& frame, wire::PendingIcrc* pending, const RxHandler& handler);
  // An application round (the Scheduler plans it, the engine runs it); then `wake`.
  void round(Instant now, engine::Engine::RoundKind kind);
  // Receiving rounds until the inbox is empty (a real device's application polls again at once
  // while packets wait).
  void receive_all(Instant now);
  // DoorbellHandler, as UdpDevice implements it.
  void doorbell(std::uint32_t qpn) override { engine->doorbell(qpn); }
  void qp_changing(std::uint32_t qpn) override;
  void qp_destroying(std::uint32_t qpn) override;
  bool in_unverified(std::size_t off) const {
    return std::any_of(unverified.begin(), unverified.end(),
                       [&](const Unverified& r) { return off >= r.begin && off < r.end; });
  }
};

// One QP of a pair (or a UD QP talking to one peer).
struct Side {
  Host* host = nullptr;
  Side* peer = nullptr;
  QpType type = QpType::kRc;
  QpHandle qp;
  std::uint32_t qpn = 0;
  CqHandle scq, rcq;
  AhHandle ah;  // UD: to the peer
  // XRC target: its domain and SRQ (its receive CQ is the SRQ's), whose number the initiator
  // names in each request.
  XrcdHandle xrcd;
  SrqHandle srq;
  std::uint32_t srq_num = 0;
  std::uint32_t mtu = 1024;
  std::uint32_t depth = 8;
  std::uint32_t rq_depth = 8;
  std::uint32_t max_len = 0;  // largest message: the receive slot size
  std::vector<Op> ops;
  std::size_t next_post = 0;
  std::deque<const Op*> outstanding;  // posted, not completed, in order
  std::uint32_t unsignaled_run = 0;   // unsignaled ops posted since the last signaled one
  std::uint64_t completed = 0;
  // Receive side.
  std::deque<RecvSlot> recv_posted;
  std::uint64_t recv_wr_next = 1;
  std::uint64_t recv_budget = 0;   // receive WQEs still to post
  std::deque<const Op*> incoming;  // RC: the peer's receive-consuming ops, in posting order
  std::map<std::uint64_t, const Op*> incoming_by_id;  // UC/UD: by op id
  std::string name;
  std::size_t index = 0;           // in Cluster::sides (and the tag of its CQs' channel)
  std::uint8_t ack_timeout = 0;    // RC: the local ACK timeout code (4.096 us * 2^code)
  std::uint8_t max_rd_atomic = 1;  // RC: READs/atomics its requester may have outstanding
  // RC error handling. A send WR that failed (RETRY_EXC_ERR) or flushed is the QP's first
  // error; every later one must flush. The application then tears the pair down: both QPs in
  // ERR, nothing more posted, the rest of the pair's work no longer awaited.
  bool torn_down = false;
  bool send_error = false;
  std::size_t uncertain_from = 0;  // with send_error: ops from here on may or may not have run
  bool recv_flushed = false;       // a receive WQE flushed: every later one must flush
  std::size_t recv_flushes = 0;    // of them so far
  // Selective repeat (ClusterOptions::selective_repeat_percent): the responder may place a SEND
  // into a later receive WQE before the one in progress completes.
  bool selective_repeat = false;
  std::uint64_t recv_expected = 0;  // RC: receives the peer's ops consume
  std::uint64_t recv_done = 0;      // RC: successful receive completions
  bool scripted = false;            // a scripted check after the workload took its pair into ERR
  // RC: the 8-byte aligned slot at the peer that all of this side's ATOMIC WRITEs target
  // (allocated with the first), so that their order there shows.
  std::optional<std::size_t> aw_slot;
};

struct Cluster {
  ClusterOptions opt;
  Prng rng;
  Network net;
  std::vector<std::unique_ptr<Host>> hosts;
  std::vector<std::unique_ptr<Side>> sides;
  std::optional<capture::PcapWriter> pcap;
  ClusterResult result;
  std::uint64_t next_op_id = 1;
  Instant now = Instant::from_ns(1'000'000);
  // Sides whose CQs got a completion (armed CQs report through the completion event handler,
  // as an application's completion channel would) or that have work to post.
  std::vector<std::size_t> dirty;
  std::vector<bool> is_dirty;
  // Work not yet finished, summed over sides: posted or unposted sends, expected RC receives.
  // A torn-down pair's work is taken out when it is torn down.
  std::uint64_t unfinished = 0;
  // Successful send WRs by OpKind (ClusterResult::ops_by_kind).
  std::array<std::uint64_t, kOpKinds> completed_by_kind{};
  std::uint8_t ack_timeout = 0;               // every RC requester's (drawn once per run)
  std::uint32_t check_pairs = 0;              // pairs made for the scripted checks (scripted_pair)
  Instant liveness_start = Instant::never();  // the end of the fault phase

  void mark_dirty(std::size_t side) {
    if (side >= is_dirty.size()) is_dirty.resize(side + 1, false);
    if (is_dirty[side]) return;
    is_dirty[side] = true;
    dirty.push_back(side);
  }

  Prng aim_rng;  // aimed corruption: its own stream, so that it changes no other draw

  explicit Cluster(const ClusterOptions& o)
      : opt(o), rng(o.seed ^ 0x5eed), net(o.seed), aim_rng(o.seed ^ 0xa1dc0de) {}

  void fail(const std::string& what) {
    if (!result.ok) return;
    result.ok = false;
    char buf[128];
    std::snprintf(buf, sizeof buf, "seed %" PRIu64 " at t=%" PRId64 " ns: ", opt.seed, now.ns());
    result.failure = buf + what;
  }
};

class CompletionEvents final : public CompletionEventHandler {
 public:
  explicit CompletionEvents(Cluster& c) : c_(c) {}
  void cq_event(CqHandle, std::uint64_t channel) override { c_.mark_dirty(channel); }

 private:
  Cluster& c_;
};

class Tap final : public FrameTap {
 public:
  explicit Tap(Cluster& c) : c_(c) {}
  void on_frame(const TapEvent& e) override {
    if (e.point == TapPoint::kSend && c_.pcap) c_.pcap->write(e.frame, e.time.ns());
  }

 private:
  Cluster& c_;
};

std::size_t Host::alloc(std::size_t n) {
  const std::size_t off = (bump + 63) & ~std::size_t{63};
  UROCE_CHECK(off + n + 64 <= arena.size() - kGuardBytes);  // the workload fits the arena
  bump = off + n;
  return off;
}

bool Host::send(Instant now, const wire::OuterHeaders& o0, ConstBytes transport_headers,
                std::span<const ConstBytes> payload) {
  wire::OuterHeaders o = o0;
  o.src_mac = cl->net.host_mac(id);
  if (auto to = cl->net.find_host(o.dst)) o.dst_mac = cl->net.host_mac(*to);
  frame.resize(16384);
  frame.resize(wire::build_frame_gather(frame, o, transport_headers, payload));
  // Oracle: every frame a host emits is a valid RoCEv2 packet (what `uroce pcap check` checks).
  auto f = wire::parse_frame(wire::LinkType::kEthernet, frame);
  if (!f.ok()) {
    cl->fail("host " + std::to_string(id) +
             " emitted an invalid frame: " + std::string(wire::drop_reason_name(f.error())));
    return true;
  }
  cl->net.send(now, id, frame);
  ++cl->result.frames_sent;
  return true;
}

// One bit of `f` flipped where a corrupted header would do the most harm if it were trusted:
// the opcode, the pad count, the destination QPN's low byte, the PSN's low bits (a neighbour's
// PSN, maybe the expected one), the RETH's address, rkey or length; or anywhere from the end of
// the BTH on (payload, pad, ICRC, extension headers). A frame that does not parse gets a bit
// anywhere.
void aim_corruption(std::vector<std::byte>& f, Prng& rng) {
  const auto flip = [&f](std::size_t byte, std::uint64_t bit) {
    f[byte] ^= static_cast<std::byte>(1u << bit);
  };
  auto p =
      wire::parse_frame(wire::LinkType::kEthernet, f, wire::FrameOptions{.verify_icrc = false});
  if (!p.ok()) {
    flip(rng.below(f.size()), rng.below(8));
    return;
  }
  const std::size_t bth = static_cast<std::size_t>(p->roce.bytes.data() - f.data());
  const std::size_t roce_bytes = p->roce.bytes.size();
  const wire::OpcodeInfo& op = *p->roce.op;
  const bool reth = op.has(wire::ExtHeader::kReth);
  const std::size_t r = reth ? bth + op.offset_of(wire::ExtHeader::kReth) : 0;
  switch (rng.below(8)) {
    case 0:
      return flip(bth, rng.below(8));  // opcode
    case 1:
      return flip(bth + 1, 4 + rng.below(2));  // pad count
    case 2:
      return flip(bth + 7, rng.below(8));  // destination QPN, low byte
    case 3:
      return flip(bth + 11, rng.below(4));  // PSN, low bits
    case 4:
      return reth ? flip(r + 6 + rng.below(2), rng.below(8))  // RETH virtual address, low bytes
                  : flip(bth + 11, rng.below(4));
    case 5:
      return reth ? flip(r + 8 + rng.below(4), rng.below(8))  // RETH rkey
                  : flip(bth, rng.below(8));
    case 6:
      return reth ? flip(r + 14 + rng.below(2), rng.below(8))  // RETH DMA length, low bytes
                  : flip(bth + 7, rng.below(8));
    default:
      return flip(bth + wire::kBthBytes + rng.below(roce_bytes - wire::kBthBytes), rng.below(8));
  }
}

std::size_t Host::receive(Instant now, std::size_t max, const RxHandler& handler) {
  std::size_t n = 0;
  while (n < max && !inbox.empty()) {
    const std::vector<std::byte> f = std::move(inbox.front());
    inbox.pop_front();
    ++n;
    handle_frame(now, f, handler);
  }
  return n;
}

void Host::round(Instant now, engine::Engine::RoundKind kind) {
  const engine::RoundReport rep = engine::run_app_round(*engine, *sched, now, kind).report;
  wake = sched->app_wait_until(now, Instant::never(), rep);
}

void Host::receive_all(Instant now) {
  do {
    round(now, engine::Engine::RoundKind::kReceive);
  } while (!inbox.empty());
}

void Host::qp_changing(std::uint32_t) { engine->flush_held_acks(cl->now, sched->acks()); }

void Host::qp_destroying(std::uint32_t qpn) { engine->qp_destroying(cl->now, qpn); }

void Host::handle_frame(Instant now, ConstBytes f, const RxHandler& handler) {
  if (cl->opt.aimed_corruption_per_mille != 0 && cl->opt.faults && now < cl->liveness_start &&
      cl->aim_rng.chance(cl->opt.aimed_corruption_per_mille, 1000)) {
    aimed.assign(f.begin(), f.end());
    aim_corruption(aimed, cl->aim_rng);
    ++cl->result.aimed_corruptions;
    f = ConstBytes(aimed);
  }
  // As datapath/udp with deferred checks (issue 14): a message continuation's ICRC is checked
  // by the engine in the pass that places its payload; everything else is verified first.
  auto unverified_frame =
      wire::parse_frame(wire::LinkType::kEthernet, f, wire::FrameOptions{.verify_icrc = false});
  if (!unverified_frame.ok() || !wire::icrc_deferrable(*unverified_frame->roce.op)) {
    auto parsed = wire::parse_frame(wire::LinkType::kEthernet, f);
    if (!parsed.ok()) {
      engine->count_drop(parsed.error());
      if (parsed.error() == wire::DropReason::kBadIcrc) ++cl->result.icrc_drops;
      return;
    }
    deliver(*parsed, nullptr, handler);
    return;
  }
  const wire::Frame& fr = *unverified_frame;
  wire::PendingIcrc pending(fr.ip_udp, fr.roce.bytes, fr.roce.payload, nullptr);
  deliver(fr, &pending, handler);
  UROCE_CHECK(pending.finished());
  if (!pending.verified()) ++cl->result.icrc_drops;
}

void Host::deliver(const wire::Frame& frame, wire::PendingIcrc* pending, const RxHandler& handler) {
  // No destination check needed: the network routes a frame by its destination address as sent
  // (network.h), and a frame whose addresses were corrupted on the way fails the ICRC. The
  // source goes to the QP, which checks it against its path (transport/qp.cc).
  datapath::RxMeta meta;
  meta.src = frame.v6 ? frame.ipv6.src : frame.ipv4.src;
  meta.src_port = frame.udp.src_port;
  meta.tos = frame.v6 ? frame.ipv6.traffic_class : frame.ipv4.tos;
  meta.icrc_verified = pending == nullptr;
  meta.ip_header = frame.ip_udp.first(frame.ip_udp.size() - wire::kUdpBytes);
  meta.pending = pending;
  // What the engine makes of it (Engine::handle_datapath_rx), to ask the QP where it goes.
  transport::PacketInfo info;
  info.src = meta.src;
  info.src_port = meta.src_port;
  info.ecn = static_cast<std::uint8_t>(meta.tos & 3u);
  info.ip_header = meta.ip_header;
  info.pending = pending;
  // Where the engine will place a deferred packet's payload, to know what a failed one left.
  std::array<MutBytes, transport::kMaxSge> where;
  std::size_t pieces = 0;
  if (pending != nullptr) {
    if (transport::Qp* qp = find_qp(frame.roce.bth().dest_qpn())) {
      pieces = qp->one_pass_target(frame.roce, info, where);
    }
  }
  const std::uint64_t one_pass_before = engine->counters().rx_one_pass;
  handler(frame.roce, meta);
  const bool placed = engine->counters().rx_one_pass != one_pass_before;
  UROCE_CHECK(placed == (pieces > 0));
  if (!placed) return;
  ++cl->result.one_pass_packets;
  if (pending->verified()) return;
  ++cl->result.one_pass_icrc_drops;
  for (std::size_t i = 0; i < pieces; ++i) {
    const MutBytes w = where[i];
    // The only registered memory is the arena.
    UROCE_CHECK(w.data() >= arena.data() && w.data() + w.size() <= arena.data() + arena.size());
    const auto off = static_cast<std::size_t>(w.data() - arena.data());
    UROCE_CHECK(!frame.roce.op->is(wire::kFlagSend));  // wire::icrc_deferrable
    unverified.push_back({off, off + w.size()});
  }
}

// ---- setup -------------------------------------------------------------------------------

void fill_random(std::span<std::byte> b, std::uint64_t seed) {
  Prng p(seed);
  std::size_t i = 0;
  for (; i + 8 <= b.size(); i += 8) {
    const std::uint64_t v = p.next();
    std::memcpy(b.data() + i, &v, 8);
  }
  for (; i < b.size(); ++i) b[i] = static_cast<std::byte>(p.next());
}

constexpr std::size_t kOdpPage = 4096;

bool Host::fault_in(const std::byte* addr, std::size_t length, bool write) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  const auto base = reinterpret_cast<std::uintptr_t>(arena.data());
  if (a < base || length > arena.size() || a - base > arena.size() - length) return false;
  const std::size_t off = a - base;
  if (off < hole_end && hole_begin < off + length) return false;  // not mapped
  for (std::size_t p = off / kOdpPage; write && p <= (off + length - 1) / kOdpPage; ++p) {
    faulted_for_write[p] = 1;
  }
  return true;
}

// Whether host `index`'s arena region is on demand: half the hosts, from a hash of the seed and
// the index (the workload's draws stay as they were).
bool host_is_odp(std::uint64_t seed, std::uint32_t index) {
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ull + index + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return ((z ^ (z >> 31)) & 1) != 0;
}

bool make_host(Cluster& c, std::uint32_t index, std::size_t arena_bytes) {
  auto h = std::make_unique<Host>();
  h->cl = &c;
  h->ip = wire::IpAddress::v4(0x0a630000u + 11 + index);
  auto id =
      c.net.add_host(h->ip, MacAddress{0x02, 0, 0, 0, 0, static_cast<std::uint8_t>(index + 1)});
  if (!id.ok()) return false;
  h->id = id.value();
  DeviceConfig cfg;
  cfg.name = "sim" + std::to_string(index);
  cfg.ip = h->ip;
  cfg.netdev_mtu = 9000;  // active MTU 4096: every path MTU can be chosen
  cfg.seed = c.opt.seed * 1000 + index;
  h->odp = host_is_odp(c.opt.seed, index);
  Host* raw = h.get();
  cfg.fault_in = [raw](std::byte* addr, std::size_t length, bool write) {
    return raw->fault_in(addr, length, write);
  };
  auto dev = Device::create(cfg);
  if (!dev.ok()) return false;
  h->dev = std::move(dev.value());
  h->engine = std::make_unique<engine::Engine>(*h, *h, h->ip);
  // A real device's progress policy (the AckPolicy's and the Scheduler's defaults, as
  // device/udp_device.h's), in polling mode: the application owns the socket.
  engine::SchedulerConfig sc;
  sc.acks = c.opt.acks;
  h->sched = std::make_unique<engine::Scheduler>(sc);
  h->dev->set_doorbell_handler(h.get());
  h->arena.resize(arena_bytes);
  fill_random(h->arena, c.opt.seed * 7919 + index);
  h->expected = h->arena;
  h->faulted_for_write.assign((arena_bytes + kOdpPage - 1) / kOdpPage, 0);
  h->exempt.assign(arena_bytes, 0);
  auto pd = h->dev->alloc_pd();
  if (!pd.ok()) return false;
  h->pd = pd.value();
  auto mr = h->dev->reg_mr(h->pd, h->arena.data() + kGuardBytes, arena_bytes - 2 * kGuardBytes,
                           kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead |
                               kAccessRemoteAtomic | kAccessFlushGlobal |
                               (h->odp ? kAccessOnDemand : 0u) |
                               kAccessMwBind);  // check_memory_window binds a window to it
  if (!mr.ok()) return false;
  h->mr = mr.value();
  h->counter_off = h->alloc(8);
  std::memset(h->arena.data() + h->counter_off, 0, 8);
  std::memset(h->expected.data() + h->counter_off, 0, 8);
  std::fill(h->exempt.begin() + static_cast<std::ptrdiff_t>(h->counter_off),
            h->exempt.begin() + static_cast<std::ptrdiff_t>(h->counter_off + 8), 1);
  c.hosts.push_back(std::move(h));
  return true;
}

std::uint32_t pick_len(Prng& r, std::uint32_t mtu, std::uint32_t max_len, std::uint32_t min_len) {
  std::uint32_t len = 0;
  switch (r.below(8)) {
    case 0:
      len = static_cast<std::uint32_t>(r.below(9));
      break;
    case 1:
      len = mtu - 1 + static_cast<std::uint32_t>(r.below(3));
      break;
    case 2:
      len = 2 * mtu;
      break;
    default:
      len = static_cast<std::uint32_t>(r.below(max_len + 1));
      break;
  }
  return std::clamp(len, min_len, max_len);
}

// An ATOMIC WRITE: 8 bytes of its own (the first 4 its op id, so that no two are alike) into the
// side's slot at the peer.
void generate_atomic_write(Cluster& c, Side& s, Op& op) {
  Host& local = *s.host;
  Host& remote = *s.peer->host;
  if (!s.aw_slot) s.aw_slot = remote.alloc(8);
  op.len = 8;
  op.data.resize(8);
  fill_random(op.data, c.opt.seed ^ (op.id * 0x9e3779b97f4a7c15ull));
  std::memcpy(op.data.data(), &op.id, 4);
  op.local_off = local.alloc(8);
  std::copy(op.data.begin(), op.data.end(), local.arena.begin() + std::ptrdiff_t(op.local_off));
  std::copy(op.data.begin(), op.data.end(), local.expected.begin() + std::ptrdiff_t(op.local_off));
  op.remote_off = *s.aw_slot;
}

// A FLUSH, placement type global (uroce has no persistent memory: kDeviceExFlushGlobal only),
// of the whole region or of a range: the span of the targets that this side's WRITEs and ATOMIC
// WRITEs since its last FLUSH have in the peer's arena (other sides' slots may lie between: a
// FLUSH of them is harmless), or 64 bytes of its own there when there are none.
void generate_flush(Cluster& c, Side& s, Op& op) {
  op.flush_selectivity = c.rng.chance(1, 2) ? wire::kFlushMr : wire::kFlushRange;
  std::size_t begin = SIZE_MAX, end = 0;
  for (auto it = s.ops.rbegin(); it != s.ops.rend() && it->kind != OpKind::kFlush; ++it) {
    if (!writes_remote(it->kind) || it->len == 0) continue;
    begin = std::min(begin, it->remote_off);
    end = std::max(end, it->remote_off + it->len);
  }
  if (begin == SIZE_MAX) {
    begin = s.peer->host->alloc(64);
    end = begin + 64;
  }
  op.remote_off = begin;
  op.len = static_cast<std::uint32_t>(end - begin);
}

// Long: one case per QP type drawing its operation mix from the same stream.
void generate_ops(Cluster& c, Side& s) {
  if (s.type == QpType::kXrcRecv) return;  // a target sends nothing
  Prng& r = c.rng;
  Host& local = *s.host;
  Host& remote = *s.peer->host;
  for (std::uint32_t i = 0; i < c.opt.ops_per_qp; ++i) {
    Op op;
    op.id = c.next_op_id++;
    switch (s.type) {
      case QpType::kRc:
      case QpType::kXrcSend: {
        // No SEND with Invalidate: uroce's MRs cannot be invalidated, so it fails and takes its
        // pair into the error state; it is checked once per run, at the end (check_send_inv).
        // RC adds IBTA 1.5's ATOMIC WRITE and FLUSH, which XRC does not carry (rxe has no XRC,
        // and IBTA 1.5 defines them for RC only): an XRC initiator draws as before.
        const std::uint64_t k = r.below(s.type == QpType::kRc ? 20 : 16);
        op.kind = k < 4    ? OpKind::kSend
                  : k < 6  ? OpKind::kSendImm
                  : k < 9  ? OpKind::kWrite
                  : k < 10 ? OpKind::kWriteImm
                  : k < 13 ? OpKind::kRead
                  : k < 14 ? OpKind::kCas
                  : k < 16 ? OpKind::kFaa
                  : k < 18 ? OpKind::kAtomicWrite
                           : OpKind::kFlush;
        break;
      }
      case QpType::kUc: {
        const std::uint64_t k = r.below(4);
        op.kind = k == 0   ? OpKind::kSend
                  : k == 1 ? OpKind::kSendImm
                  : k == 2 ? OpKind::kWrite
                           : OpKind::kWriteImm;
        break;
      }
      case QpType::kUd:
        op.kind = r.chance(1, 2) ? OpKind::kSend : OpKind::kSendImm;
        break;
      case QpType::kXrcRecv:  // returned above
        UROCE_CHECK(false);
    }
    // UC and UD messages name themselves in their first 8 bytes (they may be lost or
    // duplicated, so the receiver identifies them by content).
    const std::uint32_t min_len = rc_like(s.type) ? 0 : 8;
    op.imm = static_cast<std::uint32_t>(op.id);
    op.sges = static_cast<std::uint8_t>(1 + r.below(3));
    switch (op.kind) {
      case OpKind::kSend:
      case OpKind::kSendImm:
      case OpKind::kWrite:
      case OpKind::kWriteImm: {
        op.len = pick_len(r, s.mtu, s.max_len, min_len);
        // An RC side's WRITE goes, a quarter of the time once it has one, to its ATOMIC WRITE
        // slot: 8 bytes placed there in order among the ATOMIC WRITEs.
        const bool to_slot = op.kind == OpKind::kWrite && s.aw_slot && r.chance(1, 4);
        if (to_slot) op.len = 8;
        op.data.resize(op.len);
        fill_random(op.data, c.opt.seed ^ (op.id * 0x9e3779b97f4a7c15ull));
        if (op.len >= 8) std::memcpy(op.data.data(), &op.id, 8);
        op.local_off = local.alloc(op.len);
        std::copy(op.data.begin(), op.data.end(),
                  local.arena.begin() + std::ptrdiff_t(op.local_off));
        std::copy(op.data.begin(), op.data.end(),
                  local.expected.begin() + std::ptrdiff_t(op.local_off));
        if (op.kind == OpKind::kWrite || op.kind == OpKind::kWriteImm) {
          op.remote_off = to_slot ? *s.aw_slot : remote.alloc(op.len);
          if (s.type == QpType::kUc) {
            std::fill(remote.exempt.begin() + static_cast<std::ptrdiff_t>(op.remote_off),
                      remote.exempt.begin() + static_cast<std::ptrdiff_t>(op.remote_off + op.len),
                      1);
          }
        }
        break;
      }
      case OpKind::kRead: {
        op.len = pick_len(r, s.mtu, s.max_len, 0);
        // READ sources are never written: anywhere in a region allocated for that purpose.
        op.remote_off = remote.alloc(op.len);
        op.local_off = local.alloc(op.len);
        break;
      }
      case OpKind::kCas:
      case OpKind::kFaa:
        op.len = 8;
        op.remote_off = remote.counter_off;
        op.local_off = local.alloc(8);
        op.compare = r.below(c.opt.ops_per_qp * 2 + 1);  // a guess of the counter's value
        op.swap_add = op.kind == OpKind::kFaa ? 1 : op.compare + 1;
        break;
      case OpKind::kAtomicWrite:
        generate_atomic_write(c, s, op);
        break;
      case OpKind::kFlush:
        generate_flush(c, s, op);
        break;
    }
    s.ops.push_back(std::move(op));
  }
}

// Whether the RC pair `index` runs selective repeat: drawn from the seed by a hash of its own,
// so that turning it on changes no other draw of the run.
bool selective_repeat_for(const ClusterOptions& o, std::uint32_t index) {
  if (o.selective_repeat_percent == 0) return false;
  std::uint64_t z = o.seed * 0x9e3779b97f4a7c15ull + index + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return z % 100 < o.selective_repeat_percent;
}

bool connect_side(Cluster& c, Side& s, std::uint32_t sq_psn, std::uint32_t rq_psn,
                  std::uint8_t timeout) {
  Device& dev = *s.host->dev;
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  a.qkey = kQkey;
  std::uint32_t mask = kQpState | kQpPkeyIndex | kQpPort;
  mask |= s.type == QpType::kUd ? kQpQkey : kQpAccessFlags;
  if (s.type == QpType::kUc) a.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite;
  if (s.type == QpType::kRc) a.qp_access_flags |= kAccessFlushGlobal;  // the workload's FLUSHes
  if (dev.modify_qp(s.qp, a, mask) != Errc::kOk) return false;
  a.qp_state = QpState::kRtr;
  mask = kQpState;
  if (s.type != QpType::kUd) {
    a.ah_attr.dgid = verbs::gid_from_ip(s.peer->host->ip);
    a.ah_attr.sgid_index = 0;
    a.ah_attr.hop_limit = 64;
    a.ah_attr.is_global = true;
    a.path_mtu = mtu_from_bytes(s.mtu);
    a.dest_qp_num = s.peer->qpn;
    a.rq_psn = rq_psn;
    mask |= kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn;
    if (rc_responder(s.type)) {
      // At least what the peer's requester may have outstanding (what rdma_cm negotiates);
      // often exactly that, so that responder resources are reused as soon as allowed.
      a.max_dest_rd_atomic = s.peer->max_rd_atomic;
      if (c.rng.chance(1, 2)) {
        a.max_dest_rd_atomic = static_cast<std::uint8_t>(s.peer->max_rd_atomic +
                                                         c.rng.below(17u - s.peer->max_rd_atomic));
      }
      a.min_rnr_timer = static_cast<std::uint8_t>(1 + c.rng.below(14));
      mask |= kQpMaxDestRdAtomic | kQpMinRnrTimer;
    }
  }
  if (dev.modify_qp(s.qp, a, mask) != Errc::kOk) return false;
  a.qp_state = QpState::kRts;
  a.sq_psn = sq_psn;
  mask = kQpState | kQpSqPsn;
  if (rc_requester(s.type)) {
    s.ack_timeout = timeout;
    a.timeout = timeout;
    a.retry_cnt = 7;  // 7 retries (IBTA): a long partition fails the WR with RETRY_EXC_ERR
    a.rnr_retry = 7;  // infinite
    a.max_rd_atomic = s.max_rd_atomic;
    mask |= kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic;
  } else if (s.type == QpType::kXrcRecv) {
    a.timeout = timeout;  // the kernel's XRC_TGT row asks for it, and nothing a requester has
    mask |= kQpTimeout;
  }
  return dev.modify_qp(s.qp, a, mask) == Errc::kOk;
}

std::uint32_t max_message_bytes(const ClusterOptions& o, QpType type, std::uint32_t mtu) {
  const std::uint32_t natural =
      type == QpType::kUd ? 4096 : std::min<std::uint32_t>(3 * mtu + 100, 16384);
  if (o.max_message_bytes == 0) return natural;
  return std::clamp<std::uint32_t>(o.max_message_bytes, 8, natural);
}

// The arena a side needs on its own host and on its peer's, at most (64-byte aligned slots).
std::size_t side_bytes(const ClusterOptions& o, QpType type, std::uint32_t mtu) {
  const std::size_t len = max_message_bytes(o, type, mtu) + 64 + transport::kGrhBytes;
  const std::size_t ops = o.ops_per_qp;
  // Sources and results here; WRITE/READ slots at the peer; receive slots for the peer's ops
  // (UC/UD keep three times as many posted, for duplicates).
  const std::size_t recv = rc_like(type) ? ops : 3 * ops + 8;
  return ops * (len + 64) + ops * len + recv * len;
}

// An XRC target's domain and SRQ (completing into the side's receive CQ), and what its QP is
// created with: the domain only.
bool make_xrc_target(Side& s, Device& dev, Host& h, QpInitAttr& init) {
  auto xrcd = dev.open_xrcd();
  if (!xrcd.ok()) return false;
  auto srq = dev.create_xrc_srq(h.pd, *xrcd, s.rcq, SrqAttr{s.rq_depth, 1, 0});
  if (!srq.ok()) return false;
  s.xrcd = *xrcd;
  s.srq = srq->handle;
  s.srq_num = srq->srq_num;
  init = QpInitAttr{};
  init.qp_type = QpType::kXrcRecv;
  init.xrcd = s.xrcd;
  return true;
}

Side* make_side(Cluster& c, Host& h, QpType type, std::uint32_t mtu) {
  auto s = std::make_unique<Side>();
  s->host = &h;
  s->type = type;
  s->mtu = type == QpType::kUd ? 4096 : mtu;
  s->depth = static_cast<std::uint32_t>(1 + c.rng.below(12));
  s->rq_depth = static_cast<std::uint32_t>(1 + c.rng.below(12));
  s->max_len = max_message_bytes(c.opt, type, s->mtu);
  Device& dev = *h.dev;
  const std::uint64_t tag = c.sides.size();  // the channel tag names the side
  s->index = tag;
  auto scq = dev.create_cq(CqInitAttr{s->depth * 2 + 8, tag, 0});
  auto rcq = dev.create_cq(CqInitAttr{s->rq_depth * 2 + 8, tag, 0});
  if (!scq.ok() || !rcq.ok()) return nullptr;
  s->scq = scq->handle;
  s->rcq = rcq->handle;
  QpInitAttr init;
  init.qp_type = type;
  init.send_cq = s->scq;
  init.recv_cq = s->rcq;
  init.cap = QpCap{s->depth, s->rq_depth, 3, 1, 0};
  init.sq_sig_all = false;  // ops choose (Op::signaled)
  if (type == QpType::kXrcSend) {
    init.recv_cq = CqHandle{};  // no receive side
    init.cap = QpCap{s->depth, 0, 3, 0, 0};
  } else if (type == QpType::kXrcRecv && !make_xrc_target(*s, dev, h, init)) {
    return nullptr;
  }
  auto qp = dev.create_qp(type == QpType::kXrcRecv ? PdHandle{} : h.pd, init);
  if (!qp.ok()) return nullptr;
  s->qp = qp->handle;
  s->qpn = qp->qp_num;
  c.sides.push_back(std::move(s));
  return c.sides.back().get();
}

// ---- posting -------------------------------------------------------------------------------

void post_recvs(Cluster& c, Side& s) {
  if (s.torn_down) return;
  Host& h = *s.host;
  while (s.recv_budget > 0 && s.recv_posted.size() < s.rq_depth) {
    const std::uint32_t len = s.max_len + (s.type == QpType::kUd ? transport::kGrhBytes : 0);
    RecvSlot slot{s.recv_wr_next++, h.alloc(len), len};
    if (!rc_like(s.type)) {
      // UC and UD place a message before they know it completes: an aborted or unclaimed
      // message may leave bytes in a receive buffer. Completed messages are checked exactly.
      std::fill(h.exempt.begin() + static_cast<std::ptrdiff_t>(slot.off),
                h.exempt.begin() + static_cast<std::ptrdiff_t>(slot.off + len), 1);
    }
    const Sge sge{h.va(slot.off), len, h.mr.lkey};
    const RecvWr wr{slot.wr_id, std::span(&sge, 1)};
    const Errc e = s.type == QpType::kXrcRecv
                       ? h.dev->post_srq_recv(s.srq, std::span(&wr, 1), nullptr)
                       : h.dev->post_recv(s.qp, std::span(&wr, 1), nullptr);
    if (e != Errc::kOk) {
      c.fail(s.name + ": post_recv failed");
      return;
    }
    s.recv_posted.push_back(slot);
    --s.recv_budget;
  }
}

// Whether `op`, about to be posted, asks for a completion. A quarter of the ops do not (as
// perftest's and UCX's streams post most WRs unsignaled), which is what lets a host defer an ACK
// behind its own request (AckPolicyConfig::defer). Drawn from a hash of the seed and the op, not
// from the run's generator, so that the rest of the run draws what it drew before. Signaled
// regardless: a QP's last op (nothing would complete it) and one that would make the send queue
// all unsignaled (an application must signal at least one WR per queue depth).
bool signal_op(const Cluster& c, const Side& s, const Op& op) {
  if (s.next_post + 1 == s.ops.size() || s.unsignaled_run + 1 >= s.depth) return true;
  std::uint64_t z = (c.opt.seed ^ 0x51c7a1edull) + op.id * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return ((z ^ (z >> 31)) & 3u) != 0;
}

// Long: each operation's SGEs and work request by kind; the kinds share the SGE split.
void post_sends(Cluster& c, Side& s) {
  if (s.torn_down) return;
  Host& h = *s.host;
  Host& remote = *s.peer->host;
  while (s.outstanding.size() < s.depth && s.next_post < s.ops.size()) {
    Op& op = s.ops[s.next_post];
    // SEND and WRITE sources are split over up to three SGEs (gathered in order).
    Sge sges[3];
    std::size_t nsge = 0;
    const bool gathered = op.kind == OpKind::kSend || op.kind == OpKind::kSendImm ||
                          op.kind == OpKind::kWrite || op.kind == OpKind::kWriteImm;
    const std::uint32_t pieces = op.kind == OpKind::kFlush ? 0  // no local memory
                                 : gathered ? std::min<std::uint32_t>(op.sges, op.len)
                                            : 1;
    std::uint32_t done = 0;
    for (std::uint32_t i = 0; i < pieces; ++i) {
      const std::uint32_t n = i + 1 == pieces ? op.len - done : op.len / pieces;
      sges[nsge++] = Sge{h.va(op.local_off + done), n, h.mr.lkey};
      done += n;
    }
    SendWr wr;
    wr.wr_id = op.id;
    wr.sg_list = std::span(sges, op.len == 0 ? 0 : nsge);
    op.signaled = signal_op(c, s, op);
    s.unsignaled_run = op.signaled ? 0 : s.unsignaled_run + 1;
    wr.send_flags = op.signaled ? std::uint32_t{kSendSignaled} : 0u;
    wr.imm_data = op.imm;
    wr.opcode = opcodes_of(op.kind).wr;
    switch (op.kind) {
      case OpKind::kSend:
      case OpKind::kSendImm:
        break;
      case OpKind::kCas:
      case OpKind::kFaa:
        wr.atomic.remote_addr = remote.va(op.remote_off);
        wr.atomic.rkey = remote.mr.rkey;
        wr.atomic.compare_add = op.kind == OpKind::kCas ? op.compare : op.swap_add;
        wr.atomic.swap = op.swap_add;
        break;
      default:  // WRITE, READ, ATOMIC WRITE and FLUSH name their remote memory in a RETH
        wr.rdma.remote_addr = remote.va(op.remote_off);
        wr.rdma.rkey = remote.mr.rkey;
        if (op.kind != OpKind::kFlush) break;
        wr.flush.length = op.len;
        wr.flush.placement = wire::kFlushGlobal;
        wr.flush.selectivity = op.flush_selectivity;
        break;
    }
    if (s.type == QpType::kXrcSend) wr.xrc.remote_srqn = s.peer->srq_num;
    if (s.type == QpType::kUd) {
      wr.ud.ah = s.ah;
      wr.ud.remote_qpn = s.peer->qpn;
      wr.ud.remote_qkey = kQkey;
    }
    const Errc e = h.dev->post_send(s.qp, std::span(&wr, 1), nullptr);
    if (e != Errc::kOk) {
      c.fail(s.name + ": post_send of op " + std::to_string(op.id) + " failed: " + errc_name(e));
      return;
    }
    s.outstanding.push_back(&op);
    if (consumes_recv(op.kind)) {
      if (rc_like(s.type)) {
        s.peer->incoming.push_back(&op);
      } else {
        s.peer->incoming_by_id[op.id] = &op;
      }
    }
    ++s.next_post;
  }
  // Each post rang the QP's doorbell (Host::doorbell); the caller's transmit round sends it.
}

// ---- oracles -------------------------------------------------------------------------------

bool region_equals(Cluster& c, Host& h, std::size_t off, ConstBytes want, const std::string& what) {
  if (want.empty()) return true;
  if (std::memcmp(h.arena.data() + off, want.data(), want.size()) != 0) {
    std::size_t i = 0;
    while (i < want.size() && h.arena[off + i] == want[i]) ++i;
    c.fail(what + ": byte " + std::to_string(i) + " of " + std::to_string(want.size()) +
           " differs");
    return false;
  }
  std::memcpy(h.expected.data() + off, want.data(), want.size());
  // What a failed one-pass packet left there was rewritten: those bytes are defined again.
  const std::size_t end = off + want.size();
  std::vector<Host::Unverified> keep;
  for (const Host::Unverified& r : h.unverified) {
    if (r.begin >= end || r.end <= off) {
      keep.push_back(r);
      continue;
    }
    if (r.begin < off || r.end > end) {
      c.fail(what + ": a packet placed in one pass wrote [" + std::to_string(r.begin) + ", " +
             std::to_string(r.end) + "), beyond the target");
      return false;
    }
  }
  h.unverified = std::move(keep);
  return true;
}

Duration ack_timeout_of(const Side& s) { return Duration::ns(std::int64_t{4096} << s.ack_timeout); }

// The application's answer to a QP that failed: both QPs of the pair to ERR (their outstanding
// WRs flush), nothing more posted, and the pair's remaining work no longer awaited.
void tear_down(Cluster& c, Side& s) {
  if (s.torn_down) return;
  ++c.result.torn_down_pairs;
  for (Side* x : {&s, s.peer}) {
    x->torn_down = true;
    c.unfinished -= x->ops.size() - x->completed;
    if (rc_like(x->type)) c.unfinished -= x->recv_expected - x->recv_done;
  }
  for (Side* x : {&s, s.peer}) {
    QpAttr a;
    a.qp_state = QpState::kErr;
    if (x->host->dev->modify_qp(x->qp, a, kQpState) != Errc::kOk) {
      c.fail(x->name + ": modify_qp to ERR failed");
      return;
    }
    c.mark_dirty(x->index);
  }
}

// A send WR completed with an error. RC only: RETRY_EXC_ERR when the faults justify it (during
// the fault phase, or within the QP's retry budget after it: 8 ACK timeouts, 1 + 7 retries;
// uroce's timer fires exactly at its deadline, so IBTA's timer slack does not apply), or
// WR_FLUSH_ERR on a torn-down pair, as the QP's first error; then only WR_FLUSH_ERR. Returns
// whether the completion is accepted (otherwise the run has failed).
bool accept_send_error(Cluster& c, Side& s, const Op& op, WcStatus status) {
  const std::string what = s.name + ": " + op_name(op.kind) + " op " + std::to_string(op.id) +
                           " completed with " + wc_status_name(status);
  if (!rc_requester(s.type)) {
    c.fail(what);
    return false;
  }
  if (s.send_error) {
    if (status == WcStatus::kWrFlushErr) return true;
    c.fail(what + " after the QP's first error (every later WR must flush)");
    return false;
  }
  if (status == WcStatus::kRetryExcErr) {
    if (!c.opt.faults) {
      c.fail(what + " in a run without faults");
      return false;
    }
    const Instant budget_end = c.liveness_start + ack_timeout_of(s) * 8;
    if (c.now > budget_end) {
      c.fail(what + " " + std::to_string((c.now - c.liveness_start).count_ns()) +
             " ns after the faults stopped: beyond the QP's retry budget (8 x ACK timeout = " +
             std::to_string((ack_timeout_of(s) * 8).count_ns()) + " ns)");
      return false;
    }
    ++c.result.retry_exceeded_qps;
  } else if (status != WcStatus::kWrFlushErr || !s.torn_down) {
    c.fail(what + (status == WcStatus::kWrFlushErr ? " on a QP nobody moved to ERR" : ""));
    return false;
  }
  s.send_error = true;
  s.uncertain_from = static_cast<std::size_t>(&op - s.ops.data());
  tear_down(c, s);
  return c.result.ok;
}

void send_succeeded(Cluster& c, Side& s, const Op& op);

void on_send_completion(Cluster& c, Side& s, const Wc& wc) {
  // Unsignaled ops before the one completing succeeded without a completion of their own: a
  // failed WR completes with its error whether signaled or not, so the first op not done would
  // be the one named.
  while (!s.outstanding.empty() && !s.outstanding.front()->signaled &&
         s.outstanding.front()->id != wc.wr_id && c.result.ok) {
    send_succeeded(c, s, *s.outstanding.front());
  }
  if (s.outstanding.empty()) {
    c.fail(s.name + ": completion for wr_id " + std::to_string(wc.wr_id) + " with nothing posted");
    return;
  }
  const Op& op = *s.outstanding.front();
  if (wc.wr_id != op.id) {
    c.fail(s.name + ": completion out of order: got wr_id " + std::to_string(wc.wr_id) +
           ", expected " + std::to_string(op.id));
    return;
  }
  if (wc.status != WcStatus::kSuccess) {
    if (accept_send_error(c, s, op, wc.status)) s.outstanding.pop_front();
    return;
  }
  if (wc.opcode != opcodes_of(op.kind).wc) {
    c.fail(s.name + ": " + op_name(op.kind) + " op " + std::to_string(op.id) +
           " completed with opcode " + std::to_string(static_cast<int>(wc.opcode)) + ", expected " +
           std::to_string(static_cast<int>(opcodes_of(op.kind).wc)));
    return;
  }
  send_succeeded(c, s, op);
}

// Whether `op` of `s` writes its ATOMIC WRITE slot: an ATOMIC WRITE, or an 8-byte WRITE aimed
// there (generate_ops). A zero-length WRITE posted before the slot was allocated may name the
// same offset (an empty allocation takes no room): it writes nothing.
bool slot_writer(const Side& s, const Op& op) {
  return (op.kind == OpKind::kAtomicWrite || op.kind == OpKind::kWrite) && s.aw_slot &&
         op.remote_off == *s.aw_slot && op.len == 8;
}

// Whether the 8 bytes at `got` are the value of op `from` of `s` (a slot writer) or of a later
// slot writer of `s` already posted: what the side's slot may hold once op `from` is known to
// have executed. A responder executes a QP's requests in order, an ATOMIC WRITE all 8 bytes at
// a time, each exactly once: a duplicate ATOMIC WRITE is answered from its saved resource and
// never placed again (IBTA oA19-14; rxe's duplicate_request() replays it, atomic_write_reply()
// skips the write when replaying), a duplicate WRITE only acknowledged (C9-105). Unlike a
// READ's, such a replay is not harmless: placed again after a later write to the slot, it would
// leave the older value there; a torn one would match no value.
bool aw_slot_holds(const Side& s, std::size_t from, const std::byte* got) {
  for (std::size_t j = from; j < s.next_post; ++j) {
    if (slot_writer(s, s.ops[j]) && std::memcmp(s.ops[j].data.data(), got, 8) == 0) return true;
  }
  return false;
}

std::string hex8(const std::byte* p) {
  std::uint64_t v = 0;
  std::memcpy(&v, p, 8);
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

// Slot writer `op` of `s` completed: its slot holds its value or a later one's (above); the
// expected image takes its value (the last one's stays: the arena check at the end).
void slot_write_succeeded(Cluster& c, Side& s, const Op& op, const std::string& what) {
  Host& remote = *s.peer->host;
  const std::byte* got = remote.arena.data() + op.remote_off;
  if (!aw_slot_holds(s, static_cast<std::size_t>(&op - s.ops.data()), got)) {
    c.fail(what + ": ATOMIC WRITE slot holds " + hex8(got) + ", neither its value " +
           hex8(op.data.data()) + " nor a later write's there (placed twice, torn or lost)");
    return;
  }
  std::memcpy(remote.expected.data() + op.remote_off, op.data.data(), 8);
}

// FLUSH op `op` of `s` completed: every WRITE and ATOMIC WRITE that `s` posted before it into
// what it flushed (the region: all of them; a range: those meeting it) is in place at the peer
// (IBTA 1.5 A19: a FLUSH completes only when the writes before it are placed, and visible for
// its placement type). A WRITE's target holds its message (no later WR of `s` writes there); the
// ATOMIC WRITE slot the value of the last write there before the FLUSH or of a later posted one.
void flush_succeeded(Cluster& c, Side& s, const Op& op, const std::string& what) {
  const Host& remote = *s.peer->host;
  const std::size_t k = static_cast<std::size_t>(&op - s.ops.data());
  const bool whole = op.flush_selectivity == wire::kFlushMr;
  std::optional<std::size_t> last_aw;
  for (std::size_t j = 0; j < k; ++j) {
    const Op& w = s.ops[j];
    if (!writes_remote(w.kind) || w.len == 0) continue;
    if (!whole &&
        (w.remote_off + w.len <= op.remote_off || w.remote_off >= op.remote_off + op.len)) {
      continue;
    }
    if (slot_writer(s, w)) {
      last_aw = j;
      continue;
    }
    if (std::memcmp(remote.arena.data() + w.remote_off, w.data.data(), w.len) != 0) {
      c.fail(what + " completed, yet " + op_name(w.kind) + " op " + std::to_string(w.id) +
             " posted before it is not in place");
      return;
    }
  }
  if (last_aw && !aw_slot_holds(s, *last_aw, remote.arena.data() + s.ops[*last_aw].remote_off)) {
    c.fail(what + " completed, yet the ATOMIC WRITE slot holds " +
           hex8(remote.arena.data() + s.ops[*last_aw].remote_off) + ", not op " +
           std::to_string(s.ops[*last_aw].id) + "'s value nor a later write's there");
  }
}

// `op`, the first outstanding of `s`, completed successfully (with a completion of its own, or,
// unsignaled, with a later op's): the oracles that a completion lets run.
void send_succeeded(Cluster& c, Side& s, const Op& op) {
  UROCE_ASSERT(!s.outstanding.empty() && s.outstanding.front() == &op);
  if (s.send_error) {
    c.fail(s.name + ": " + op_name(op.kind) + " op " + std::to_string(op.id) +
           " succeeded after an earlier WR of the QP failed");
    return;
  }
  s.outstanding.pop_front();
  ++s.completed;
  if (!s.torn_down) --c.unfinished;
  ++c.result.ops_completed;
  ++c.completed_by_kind[static_cast<std::size_t>(op.kind)];
  if (s.type == QpType::kXrcSend) ++c.result.xrc_ops_completed;
  Host& h = *s.host;
  Host& remote = *s.peer->host;
  const std::string what = s.name + " " + op_name(op.kind) + " op " + std::to_string(op.id);
  switch (op.kind) {
    case OpKind::kWrite:
    case OpKind::kWriteImm:
      // RC: a completed WRITE is placed at the responder (one to the ATOMIC WRITE slot, or a
      // later write there).
      if (slot_writer(s, op)) {
        slot_write_succeeded(c, s, op, what);
      } else if (rc_like(s.type)) {
        region_equals(c, remote, op.remote_off, op.data, what);
      }
      break;
    case OpKind::kRead: {
      const ConstBytes src(remote.arena.data() + op.remote_off, op.len);
      region_equals(c, h, op.local_off, src, what);
      break;
    }
    case OpKind::kCas:
    case OpKind::kFaa: {
      std::uint64_t v = 0;
      std::memcpy(&v, h.arena.data() + op.local_off, 8);
      std::memcpy(h.expected.data() + op.local_off, &v, 8);
      const bool success = op.kind == OpKind::kFaa || v == op.compare;
      (success ? remote.counter_successes : remote.counter_failures).push_back(v);
      break;
    }
    case OpKind::kAtomicWrite:
      slot_write_succeeded(c, s, op, what);
      break;
    case OpKind::kFlush:
      flush_succeeded(c, s, op, what);
      break;
    default:
      break;
  }
}

// A receive WQE of a torn-down RC QP flushed. The first may hold part of the message that was
// being placed in it (the peer's next receive-consuming op, if a SEND): each byte old or that
// message's. Later ones were never touched (the final image check), except with selective
// repeat, whose responder places a SEND it kept out of order in the receive WQE it is certain
// to take: the k-th flushed one may hold part of the k-th such op.
// Bytes [off, off + len) of `at` that a failed or flushed WR may or may not have written: each
// must be as expected or the WR's new content (`fresh`, of which only the first `fresh_len`
// bytes exist), and the expected image then takes what is there. Returns the offset of the
// first byte that is neither (nothing is taken then); counts the WR in unfinished_wrs_landed
// if any new byte landed.
std::optional<std::size_t> settle_old_or_new(Cluster& c, Host& at, std::size_t off, std::size_t len,
                                             const std::byte* fresh, std::size_t fresh_len) {
  bool landed = false;
  for (std::size_t i = 0; i < len; ++i) {
    const std::byte got = at.arena[off + i];
    if (got != at.expected[off + i] && (i >= fresh_len || got != fresh[i])) {
      if (!at.in_unverified(off + i)) return i;
      ++c.result.unverified_bytes_left;
    }
    landed = landed || got != at.expected[off + i];
    at.expected[off + i] = got;
  }
  if (landed) ++c.result.unfinished_wrs_landed;
  return std::nullopt;
}

void on_recv_flush(Cluster& c, Side& s, const RecvSlot& slot) {
  const std::size_t k = s.recv_flushes++;
  if (s.recv_flushed && !s.selective_repeat) return;
  s.recv_flushed = true;
  const Op* op = k < s.incoming.size() ? s.incoming[k] : nullptr;
  if (op == nullptr || op->kind == OpKind::kWriteImm) return;
  if (auto i = settle_old_or_new(c, *s.host, slot.off, slot.len, op->data.data(), op->len)) {
    c.fail(s.name + ": the flushed receive of " + op_name(op->kind) + " op " +
           std::to_string(op->id) + " holds a foreign byte at " + std::to_string(*i));
  }
}

// Long: one receive completion checked against its operation, case by case.
void on_recv_completion(Cluster& c, Side& s, const Wc& wc) {
  if (s.recv_posted.empty() || s.recv_posted.front().wr_id != wc.wr_id) {
    c.fail(s.name + ": receive completion out of order (wr_id " + std::to_string(wc.wr_id) + ")");
    return;
  }
  const RecvSlot slot = s.recv_posted.front();
  s.recv_posted.pop_front();
  Host& h = *s.host;
  if (wc.status != WcStatus::kSuccess) {
    if (wc.status == WcStatus::kWrFlushErr && s.torn_down && rc_like(s.type)) {
      on_recv_flush(c, s, slot);
      return;
    }
    c.fail(s.name + ": receive completed with " + wc_status_name(wc.status));
    return;
  }
  if (s.recv_flushed) {
    c.fail(s.name + ": a receive succeeded after an earlier one flushed");
    return;
  }
  const Op* op = nullptr;
  if (rc_like(s.type)) {
    if (s.incoming.empty()) {
      c.fail(s.name + ": a receive completed with no message sent");
      return;
    }
    op = s.incoming.front();
    s.incoming.pop_front();
    ++s.recv_done;
    if (!s.torn_down) --c.unfinished;
  } else {
    // UC/UD: identify the message by its immediate or its first 8 bytes.
    std::uint64_t id = 0;
    if (wc.wc_flags & kWcWithImm) {
      id = wc.imm_data;
    } else {
      const std::size_t at = slot.off + (s.type == QpType::kUd ? transport::kGrhBytes : 0);
      std::memcpy(&id, h.arena.data() + at, 8);
    }
    auto it = s.incoming_by_id.find(id);
    if (it == s.incoming_by_id.end()) {
      c.fail(s.name + ": received a message that was never sent (id " + std::to_string(id) + ")");
      return;
    }
    op = it->second;
  }
  const std::string what =
      s.name + " receive of " + op_name(op->kind) + " op " + std::to_string(op->id);
  const bool imm = op->kind == OpKind::kSendImm || op->kind == OpKind::kWriteImm;
  const WcOpcode want_opcode =
      op->kind == OpKind::kWriteImm ? WcOpcode::kRecvRdmaWithImm : WcOpcode::kRecv;
  const std::uint32_t grh = s.type == QpType::kUd ? transport::kGrhBytes : 0;
  if (wc.opcode != want_opcode || ((wc.wc_flags & kWcWithImm) != 0) != imm ||
      (wc.wc_flags & kWcWithInv) != 0 || (imm && wc.imm_data != op->imm) ||
      wc.byte_len != op->len + grh || wc.src_qp != s.peer->qpn ||
      ((wc.wc_flags & kWcGrh) != 0) != (s.type == QpType::kUd)) {
    c.fail(what + ": wrong completion (opcode " + std::to_string(static_cast<int>(wc.opcode)) +
           ", byte_len " + std::to_string(wc.byte_len) + ", flags " + std::to_string(wc.wc_flags) +
           ", src_qp " + std::to_string(wc.src_qp) + ")");
    return;
  }
  if (op->kind == OpKind::kWriteImm) {
    if (rc_like(s.type)) region_equals(c, h, op->remote_off, op->data, what);
  } else {
    if (grh != 0) {
      // The GRH area: 20 zero bytes, then the IPv4 header (rxe): exempt from the image, but
      // its addresses are checked.
      std::fill(h.exempt.begin() + static_cast<std::ptrdiff_t>(slot.off),
                h.exempt.begin() + static_cast<std::ptrdiff_t>(slot.off + grh), 1);
      const std::byte* ip = h.arena.data() + slot.off + 20;
      if (static_cast<std::uint8_t>(ip[0]) != 0x45 ||
          std::memcmp(ip + 12, s.peer->host->ip.bytes.data(), 4) != 0 ||
          std::memcmp(ip + 16, h.ip.bytes.data(), 4) != 0) {
        c.fail(what + ": wrong GRH area");
        return;
      }
    }
    region_equals(c, h, slot.off + grh, op->data, what);
  }
}

void poll_side(Cluster& c, Side& s) {
  Wc wcs[32];
  Device& dev = *s.host->dev;
  for (int round = 0; round < 1000 && c.result.ok; ++round) {
    auto n = dev.poll_cq(s.scq, wcs);
    if (!n.ok()) {
      c.fail(s.name + ": send CQ error " + errc_name(n.error()));
      return;
    }
    for (std::size_t i = 0; i < n.value() && c.result.ok; ++i) on_send_completion(c, s, wcs[i]);
    auto m = dev.poll_cq(s.rcq, wcs);
    if (!m.ok()) {
      c.fail(s.name + ": receive CQ error " + errc_name(m.error()));
      return;
    }
    for (std::size_t i = 0; i < m.value() && c.result.ok; ++i) on_recv_completion(c, s, wcs[i]);
    if (n.value() == 0 && m.value() == 0) break;
  }
  post_recvs(c, s);
  post_sends(c, s);
  // Re-arm, then poll once more: nothing that completed in between is missed.
  dev.req_notify_cq(s.scq, false);
  dev.req_notify_cq(s.rcq, false);
}

void poll_dirty(Cluster& c) {
  // Handling a side may post work whose completions mark sides dirty again: bounded rounds.
  for (int round = 0; round < 64 && !c.dirty.empty() && c.result.ok; ++round) {
    std::vector<std::size_t> now_dirty;
    now_dirty.swap(c.dirty);
    for (std::size_t i : now_dirty) c.is_dirty[i] = false;
    for (std::size_t i : now_dirty) poll_side(c, *c.sides[i]);
  }
}

bool finished(const Cluster& c) { return c.unfinished == 0; }

// ---- time ----------------------------------------------------------------------------------

// When something next happens: a frame arrives, or a host's application must run a round by
// itself (a QP timer, held ACKs falling due: Host::wake).
Instant next_event(const Cluster& c) {
  Instant t = c.net.next_event_time();
  for (const auto& h : c.hosts) t = earliest(t, h->wake);
  return t;
}

// At c.now: the frames due go to their hosts' inboxes, then every host runs receiving rounds
// (which fire its due timers and send what the packets and timers made, or held ACKs now due).
void deliver_and_receive(Cluster& c) {
  Delivery d;
  while (c.net.poll_delivery(c.now, d)) {
    ++c.result.frames_delivered;
    c.hosts[d.to]->inbox.push_back(std::move(d.frame));
  }
  for (auto& h : c.hosts) h->receive_all(c.now);
}

// Every host's application sends what it just posted (the drop-in's ibv_post_send: a quiet
// doorbell, then a transmit round of its own).
void transmit_rounds(Cluster& c) {
  for (auto& h : c.hosts) h->round(c.now, engine::Engine::RoundKind::kTransmit);
}

// The ATOMIC WRITE slot of a torn-down side whose WRs from uncertain_from on may or may not have
// run: it holds the value of the last write there that completed (the expected image's), or
// that of one of those that may have run (the last of them that did), whole; the image then
// takes it.
void settle_atomic_write_slot(Cluster& c, Side& s) {
  if (!s.aw_slot) return;
  Host& remote = *s.peer->host;
  const std::byte* got = remote.arena.data() + *s.aw_slot;
  std::byte* want = remote.expected.data() + *s.aw_slot;
  if (std::memcmp(got, want, 8) == 0) return;
  if (!aw_slot_holds(s, s.uncertain_from, got)) {
    c.fail(s.name + ": ATOMIC WRITE slot holds " + hex8(got) +
           ", neither the last completed write's " + hex8(want) +
           " nor that of one that failed or flushed");
    return;
  }
  ++c.result.unfinished_wrs_landed;
  std::memcpy(want, got, 8);
}

// A torn-down pair's WRs from the first failed one on may or may not have run: each byte of
// an RC WRITE's target is old or new, a READ's destination old or the source (never written).
// Those bytes are then taken as the expected image; everything else stays exact.
void settle_uncertain(Cluster& c, Side& s) {
  // An XRC target's receive WQEs are its SRQ's: only the one a message was being placed in
  // flushes with the QP; the others stay posted, untouched (the final image check).
  const bool recv_left = !s.recv_posted.empty() && s.type != QpType::kXrcRecv;
  if (!s.outstanding.empty() || recv_left) {
    c.fail(s.name + ": torn down, yet " + std::to_string(s.outstanding.size()) + " send and " +
           std::to_string(s.recv_posted.size()) + " receive WRs never completed (flushed)");
    return;
  }
  if (!s.send_error) return;
  Host& h = *s.host;
  Host& remote = *s.peer->host;
  for (std::size_t k = s.uncertain_from; k < s.next_post; ++k) {
    const Op& op = s.ops[k];
    Host* at = nullptr;
    std::size_t off = 0;
    const std::byte* new_bytes = nullptr;
    if (slot_writer(s, op)) {
      continue;  // the slot: below
    } else if (op.kind == OpKind::kWrite || op.kind == OpKind::kWriteImm) {
      at = &remote;
      off = op.remote_off;
      new_bytes = op.data.data();
    } else if (op.kind == OpKind::kRead) {
      at = &h;
      off = op.local_off;
      new_bytes = remote.arena.data() + op.remote_off;
    } else {
      continue;  // SENDs: the receive oracle; atomics: the counter oracle; FLUSHes write nothing
    }
    if (auto i = settle_old_or_new(c, *at, off, op.len, new_bytes, op.len)) {
      c.fail(s.name + ": " + op_name(op.kind) + " op " + std::to_string(op.id) +
             " (failed or flushed) left a foreign byte at " + std::to_string(*i));
      return;
    }
  }
  settle_atomic_write_slot(c, s);
}

// The atomics of torn-down pairs that may or may not have run, by target host: Compare&Swap
// compare values (it changes the counter only from that value) and a count of Fetch&Adds.
struct UncertainAtomics {
  std::vector<std::uint64_t> cas_compares;
  std::uint64_t faa = 0;
};

// Every successful atomic (a Fetch&Add, or a Compare&Swap that found its compare value) adds
// 1 to the counter: the values they returned are distinct and below the final value, and
// every value below it that nobody saw was taken by a failed atomic that did run (any value
// for a Fetch&Add, its compare value for a Compare&Swap). Without failed atomics: exactly
// 0, 1, ..., final - 1.
void check_counter(Cluster& c, Host& h, const UncertainAtomics& u) {
  std::uint64_t counter = 0;
  std::memcpy(&counter, h.arena.data() + h.counter_off, 8);
  std::vector<std::uint64_t> seen = h.counter_successes;
  std::sort(seen.begin(), seen.end());
  const std::string host = "host " + std::to_string(h.id);
  if (seen.size() > counter) {
    c.fail(host + ": counter is " + std::to_string(counter) + " after " +
           std::to_string(seen.size()) + " successful atomics");
    return;
  }
  for (std::size_t i = 0; i < seen.size(); ++i) {
    if ((i > 0 && seen[i] == seen[i - 1]) || seen[i] >= counter) {
      c.fail(host + ": atomics not linearizable: value " + std::to_string(seen[i]) + " seen " +
             std::to_string(std::count(seen.begin(), seen.end(), seen[i])) +
             " times, the counter is " + std::to_string(counter));
      return;
    }
  }
  std::vector<std::uint64_t> cas = u.cas_compares;
  std::sort(cas.begin(), cas.end());
  std::uint64_t faa = u.faa;
  std::size_t next_seen = 0;
  for (std::uint64_t v = 0; v < counter; ++v) {
    if (next_seen < seen.size() && seen[next_seen] == v) {
      ++next_seen;
      continue;
    }
    // A CAS can only have taken its compare value: use one for v if there is one, which
    // leaves the Fetch&Adds (any value) for the rest.
    auto it = std::lower_bound(cas.begin(), cas.end(), v);
    if (it != cas.end() && *it == v) {
      cas.erase(it);
      ++c.result.unfinished_wrs_landed;
    } else if (faa > 0) {
      --faa;
      ++c.result.unfinished_wrs_landed;
    } else {
      c.fail(host + ": counter is " + std::to_string(counter) + " after " +
             std::to_string(seen.size()) + " successful atomics and " +
             std::to_string(u.cas_compares.size() + u.faa) + " failed ones: value " +
             std::to_string(v) + " was taken by none (atomics not linearizable)");
      return;
    }
  }
  for (std::uint64_t v : h.counter_failures) {
    if (v > counter) {
      c.fail(host + ": a failed CAS returned " + std::to_string(v) +
             ", never a value of the counter");
      return;
    }
  }
}

// An on-demand region's bytes change only in pages faulted in for a write (DeviceConfig::
// fault_in): every path that writes into a region (a WRITE's or atomic's target, a receive's
// scatter, a READ response's) asks for the write first.
void check_odp_faults(Cluster& c, const Host& h) {
  for (std::size_t p = 0; p < h.faulted_for_write.size(); ++p) {
    if (h.faulted_for_write[p] != 0) continue;
    const std::size_t begin = p * kOdpPage;
    const std::size_t n = std::min(kOdpPage, h.arena.size() - begin);
    if (std::memcmp(h.arena.data() + begin, h.initial.data() + begin, n) != 0) {
      c.fail("host " + std::to_string(h.id) + ": a byte of ODP page " + std::to_string(p) +
             " changed, but the page was never faulted in for a write");
      return;
    }
  }
}

void final_checks(Cluster& c) {
  std::map<const Host*, UncertainAtomics> uncertain;
  for (auto& sp : c.sides) {
    Side& s = *sp;
    if (!s.torn_down) continue;
    settle_uncertain(c, s);
    if (!c.result.ok) return;
    if (!s.send_error) continue;
    UncertainAtomics& u = uncertain[s.peer->host];
    for (std::size_t k = s.uncertain_from; k < s.next_post; ++k) {
      if (s.ops[k].kind == OpKind::kCas) u.cas_compares.push_back(s.ops[k].compare);
      if (s.ops[k].kind == OpKind::kFaa) ++u.faa;
    }
  }
  // Each ATOMIC WRITE slot holds the value of the last write there (the image's), exactly.
  for (auto& sp : c.sides) {
    if (!sp->aw_slot) continue;
    const Host& remote = *sp->peer->host;
    const std::byte* got = remote.arena.data() + *sp->aw_slot;
    if (std::memcmp(got, remote.expected.data() + *sp->aw_slot, 8) != 0) {
      c.fail(sp->name + ": ATOMIC WRITE slot holds " + hex8(got) +
             " at the end, the last one put " + hex8(remote.expected.data() + *sp->aw_slot) +
             " there");
      return;
    }
  }
  for (auto& hp : c.hosts) {
    Host& h = *hp;
    auto u = uncertain.find(&h);
    check_counter(c, h, u == uncertain.end() ? UncertainAtomics{} : u->second);
    if (!c.result.ok) return;
    // Nothing else changed: the whole arena, registered or not, is as expected. Compared a
    // page at a time; only a page that differs is looked at byte by byte.
    constexpr std::size_t kPage = 4096;
    for (std::size_t i = 0; i < h.arena.size(); ++i) {
      if (i % kPage == 0 && i + kPage <= h.arena.size() &&
          std::memcmp(h.arena.data() + i, h.expected.data() + i, kPage) == 0) {
        i += kPage - 1;
        continue;
      }
      if (h.exempt[i] == 0 && h.arena[i] != h.expected[i]) {
        c.fail("host " + std::to_string(h.id) + ": byte at offset " + std::to_string(i) +
               (i < kGuardBytes || i >= h.arena.size() - kGuardBytes ? " (unregistered)" : "") +
               " was written unexpectedly");
        return;
      }
    }
    if (h.odp) check_odp_faults(c, h);
    if (!c.result.ok) return;
  }
  // UC writes: each byte is either as before or as written.
  for (auto& sp : c.sides) {
    if (sp->type != QpType::kUc) continue;
    Host& remote = *sp->peer->host;
    for (const Op& op : sp->ops) {
      if (op.kind != OpKind::kWrite && op.kind != OpKind::kWriteImm) continue;
      for (std::size_t i = 0; i < op.len; ++i) {
        const std::byte got = remote.arena[op.remote_off + i];
        if (got != op.data[i] && got != remote.expected[op.remote_off + i]) {
          c.fail(sp->name + ": UC WRITE op " + std::to_string(op.id) + " left a foreign byte");
          return;
        }
      }
    }
  }
}

Side* scripted_pair(Cluster& c, bool odp_responder);

// A scripted check's two sides (x the requester, y its peer), stepped by hand after the workload:
// each step posts work and runs the network until the completions it expects came.
struct Script {
  Cluster& c;
  Side& x;
  Side& y;
  Host& hx;
  Host& hy;
  std::vector<Wc> got_x, got_y;

  Script(Cluster& cl, Side& requester)
      : c(cl), x(requester), y(*requester.peer), hx(*x.host), hy(*y.host) {
    for (auto& h : c.hosts) h->dev->set_completion_event_handler(nullptr);  // polled here
  }
  static void poll(Device& dev, CqHandle cq, std::vector<Wc>& into) {
    Wc wcs[4];
    auto n = dev.poll_cq(cq, wcs);
    if (n.ok()) into.insert(into.end(), wcs, wcs + n.value());
  }
  // Runs the network until x has `nx` completions (send and receive) and y `ny`, and the
  // network is quiet: whether exactly those came, within a simulated second.
  bool settle(std::size_t nx, std::size_t ny) {
    const Instant deadline = c.now + Duration::ns(1'000'000'000);
    got_x.clear();
    got_y.clear();
    for (;;) {
      transmit_rounds(c);
      poll(*hx.dev, x.scq, got_x);
      if (x.rcq != x.scq) poll(*hx.dev, x.rcq, got_x);
      poll(*hy.dev, y.scq, got_y);
      if (y.rcq != y.scq) poll(*hy.dev, y.rcq, got_y);
      if (got_x.size() >= nx && got_y.size() >= ny && c.net.next_event_time().is_never()) {
        return got_x.size() == nx && got_y.size() == ny;
      }
      const Instant t = next_event(c);
      if (t.is_never() || t > deadline) return false;
      if (t > c.now) c.now = t;
      deliver_and_receive(c);
    }
  }
  // Whether both QPs are in the error state; the pair is left to the checks after.
  bool both_in_error() {
    x.scripted = y.scripted = true;
    auto qx = hx.dev->query_qp(x.qp);
    auto qy = hy.dev->query_qp(y.qp);
    return qx.ok() && qy.ok() && qx->attr.qp_state == QpState::kErr &&
           qy->attr.qp_state == QpState::kErr;
  }
};

// x's 16 bytes at `from` (in its arena) WRITten through `rkey` to y's arena at `off`: whether the
// WRITE completes, alone, with `status`; on success its bytes must be there (the image takes
// them).
bool write_through(Script& sc, std::uint64_t wr_id, std::size_t from, std::size_t off,
                   std::uint32_t rkey, WcStatus status, const std::string& what) {
  const Sge sge{sc.hx.va(from), 16, sc.hx.mr.lkey};
  SendWr write;
  write.wr_id = wr_id;
  write.opcode = WrOpcode::kRdmaWrite;
  write.send_flags = kSendSignaled;
  write.sg_list = std::span(&sge, 1);
  write.rdma.remote_addr = sc.hy.va(off);
  write.rdma.rkey = rkey;
  if (sc.hx.dev->post_send(sc.x.qp, std::span(&write, 1), nullptr) != Errc::kOk ||
      !sc.settle(1, 0) || sc.got_x[0].wr_id != wr_id || sc.got_x[0].status != status) {
    sc.c.fail(
        what + ": a WRITE got " + std::to_string(sc.got_x.size()) + " completion(s), the first " +
        (sc.got_x.empty() ? "none" : wc_status_name(sc.got_x[0].status)) + ", and " +
        std::to_string(sc.got_y.size()) + " at its peer; expected one " + wc_status_name(status));
    return false;
  }
  if (status != WcStatus::kSuccess) return true;  // nothing written: the arena check at the end
  for (std::size_t i = 0; i < 16; ++i) {
    if (sc.hy.arena[off + i] != sc.hx.arena[from + i]) {
      sc.c.fail(what + ": the WRITE left a wrong byte at " + std::to_string(i));
      return false;
    }
    sc.hy.expected[off + i] = sc.hy.arena[off + i];
  }
  return true;
}

// y binds type 2 window `mw` to its QP under `key` over 256 bytes of its arena at `off`.
bool bind_window(Script& sc, const MwInfo& mw, std::uint32_t key, std::size_t off,
                 const std::string& what) {
  SendWr bind;
  bind.wr_id = 1;
  bind.opcode = WrOpcode::kBindMw;
  bind.send_flags = kSendSignaled;
  bind.bind_mw.mw = mw.handle;
  bind.bind_mw.rkey = key;
  bind.bind_mw.bind_info = MwBindInfo{sc.hy.mr.handle, sc.hy.va(off), 256, kAccessRemoteWrite};
  if (sc.hy.dev->post_send(sc.y.qp, std::span(&bind, 1), nullptr) != Errc::kOk ||
      !sc.settle(0, 1) || sc.got_y[0].status != WcStatus::kSuccess ||
      sc.got_y[0].opcode != WcOpcode::kBindMw) {
    sc.c.fail(what + ": the bind did not complete");
    return false;
  }
  return true;
}

// A signaled SEND with Invalidate (zero-length) or LOCAL_INV of `key`.
SendWr invalidation(std::uint64_t wr_id, WrOpcode opcode, std::uint32_t key) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = opcode;
  wr.send_flags = kSendSignaled;
  wr.invalidate_rkey = key;
  return wr;
}

// Whether `key` grants nothing at y's host any more: it names a window bound to nothing.
bool key_unbound(Script& sc, std::uint32_t key, std::size_t off) {
  auto probe =
      sc.hy.dev->memory().resolve(0, sc.y.qpn, key, true, sc.hy.va(off), 1, kAccessRemoteWrite);
  return !probe.ok() && probe.error() == transport::AccessError::kInvalidKey;
}

// A type 2 memory window's life, once per run on a pair of its own (scripted_pair), after the
// workload and its oracles: y binds a window over 256 bytes of its arena to its QP (BIND_MW), x
// WRITEs 16 bytes through it and then sends a zero-length SEND with Invalidate of its key: each
// completes successfully, the WRITE's bytes land (the arena check holds them), the receive says
// WITH_INV and names the key, and the key grants nothing afterwards. Then y binds it again under
// the next key, x WRITEs through that, y invalidates it itself (LOCAL_INV, completing as such),
// and x WRITEs through it once more: refused, as rxe refuses an access through an invalidated
// window (check_rkey(): the window is no longer valid; NAK Remote Access Error), so the WRITE
// completes with REM_ACCESS_ERR, nothing lands, and both QPs end in the error state (class D1e).
// Long: one scripted scenario: bind, WRITE, SEND with Invalidate, probe, bind, WRITE, LOCAL_INV,
// WRITE refused.
void check_memory_window(Cluster& c) {
  Side* requester = scripted_pair(c, false);
  if (requester == nullptr) return;
  Script sc(c, *requester);
  Host& hx = sc.hx;
  Host& hy = sc.hy;
  const std::string what = sc.x.name + " through a memory window of " + sc.y.name;
  constexpr std::size_t kOff = kGuardBytes + 64;  // past the counter; the workload is done
  auto mw = hy.dev->alloc_mw(hy.pd, MwType::kType2);
  if (!mw.ok()) {
    c.fail(what + ": alloc_mw failed");
    return;
  }
  const auto next_key = [](std::uint32_t k) { return (k & ~0xffu) | ((k + 1) & 0xffu); };
  const std::uint32_t key = next_key(mw->rkey);
  if (!bind_window(sc, *mw, key, kOff, what) ||
      !write_through(sc, 2, kOff, kOff, key, WcStatus::kSuccess, what)) {
    return;
  }
  const RecvWr rwr{3, {}};
  const SendWr inv = invalidation(4, WrOpcode::kSendWithInv, key);
  if (hy.dev->post_recv(sc.y.qp, std::span(&rwr, 1), nullptr) != Errc::kOk ||
      hx.dev->post_send(sc.x.qp, std::span(&inv, 1), nullptr) != Errc::kOk || !sc.settle(1, 1) ||
      sc.got_x[0].status != WcStatus::kSuccess || sc.got_y[0].status != WcStatus::kSuccess ||
      (sc.got_y[0].wc_flags & kWcWithInv) == 0 || sc.got_y[0].imm_data != key) {
    c.fail(what + ": the SEND with Invalidate of its key did not complete as such");
    return;
  }
  // Unbound: the key names a window that grants nothing, whatever the PD.
  if (!key_unbound(sc, key, kOff)) {
    c.fail(what + ": the window still grants access after its invalidation");
    return;
  }
  const std::uint32_t key2 = next_key(key);
  if (!bind_window(sc, *mw, key2, kOff, what) ||
      !write_through(sc, 5, kOff, kOff + 32, key2, WcStatus::kSuccess, what)) {
    return;
  }
  const SendWr local_inv = invalidation(6, WrOpcode::kLocalInv, key2);
  if (hy.dev->post_send(sc.y.qp, std::span(&local_inv, 1), nullptr) != Errc::kOk ||
      !sc.settle(0, 1) || sc.got_y[0].status != WcStatus::kSuccess ||
      sc.got_y[0].opcode != WcOpcode::kLocalInv || !key_unbound(sc, key2, kOff)) {
    c.fail(what + ": the LOCAL_INV of its key did not complete as such");
    return;
  }
  if (!write_through(sc, 7, kOff, kOff + 64, key2, WcStatus::kRemAccessErr, what)) return;
  if (!sc.both_in_error()) {
    c.fail(what + ": a WRITE through the invalidated window left the QPs out of the error state");
    return;
  }
  if (hy.dev->dealloc_mw(mw->handle) != Errc::kOk) {
    c.fail(what + ": dealloc_mw failed");
    return;
  }
  ++c.result.memory_windows_checked;
}

// SEND with Invalidate, the negative case the workload leaves out: every MR of uroce is an
// ordinary one, which only fast-register MRs and memory windows are not (IBTA o10-37,
// rxe_invalidate_mr()), so it must fail. Checked once per run on a pair of its own
// (scripted_pair: not torn down by retry exceeded, nor used by another check), after the
// workload and its oracles, when the network has no faults
// left (a run ends after the fault plan's end): the responder NAKs Invalid Request, the SEND
// and the receive it consumed both complete with REM_INV_REQ_ERR and nothing else, both QPs are
// in the error state, and the named region is as valid as before. Zero-length, so no byte is
// written there (the arena check runs again after it). A READ goes just before it, in the same
// post: an error NAK must leave after the responses owed to the requests before it, so the READ
// completes with its data (when the link delivers both requests in one batch, a responder that
// dropped its queued responses for the NAK would fail it: issue 11, item 1).
// Long: one scripted scenario: post, run, then check each completion and the memory.
void check_send_inv(Cluster& c) {
  Side* x = scripted_pair(c, false);
  if (x == nullptr) return;
  Side& y = *x->peer;
  x->scripted = y.scripted = true;
  Host& hx = *x->host;
  Host& hy = *y.host;
  const std::string what = x->name + " SEND_WITH_INV of " + y.name + "'s MR";
  for (auto& h : c.hosts) h->dev->set_completion_event_handler(nullptr);  // polled below
  constexpr std::uint64_t kWrId = ~std::uint64_t{0};
  constexpr std::uint64_t kReadId = kWrId - 1;
  const RecvWr rwr{kWrId, {}};
  // The READ: 2 MTUs and a bit, from the start of y's registered arena past its counter (the
  // first slot) into the same place of x's: the workload is done with both.
  constexpr std::size_t kReadOff = kGuardBytes + 64;
  const std::size_t read_len =
      std::min<std::size_t>(2 * std::size_t{x->mtu} + 7, hx.arena.size() - 2 * kGuardBytes - 64);
  const Sge read_sge{hx.va(kReadOff), static_cast<std::uint32_t>(read_len), hx.mr.lkey};
  const bool with_read = x->depth >= 2;  // a send queue of one takes the SEND alone
  SendWr wrs[2];
  wrs[0].wr_id = kReadId;
  wrs[0].opcode = WrOpcode::kRdmaRead;
  wrs[0].send_flags = kSendSignaled;
  wrs[0].sg_list = std::span(&read_sge, 1);
  wrs[0].rdma.remote_addr = hy.va(kReadOff);
  wrs[0].rdma.rkey = hy.mr.rkey;
  SendWr& wr = wrs[1];
  wr.wr_id = kWrId;
  wr.opcode = WrOpcode::kSendWithInv;
  wr.send_flags = kSendSignaled;
  wr.invalidate_rkey = hy.mr.rkey;
  if (hy.dev->post_recv(y.qp, std::span(&rwr, 1), nullptr) != Errc::kOk ||
      hx.dev->post_send(x->qp, std::span(wrs).last(with_read ? 2 : 1), nullptr) != Errc::kOk) {
    c.fail(what + ": could not be posted");
    return;
  }
  std::vector<Wc> sent, received;
  auto poll = [&](Device& dev, CqHandle cq, std::vector<Wc>& into) {
    Wc wcs[4];
    auto n = dev.poll_cq(cq, wcs);
    if (n.ok()) into.insert(into.end(), wcs, wcs + n.value());
  };
  const Instant deadline = c.now + Duration::ns(1'000'000'000);
  for (;;) {
    transmit_rounds(c);
    poll(*hx.dev, x->scq, sent);
    poll(*hy.dev, y.rcq, received);
    if (sent.size() >= (with_read ? 2u : 1u) && !received.empty() &&
        c.net.next_event_time().is_never()) {
      break;
    }
    const Instant t = next_event(c);
    if (t.is_never() || t > deadline) {
      c.fail(what + ": " + std::to_string(sent.size()) + " send and " +
             std::to_string(received.size()) + " receive completions, expected one of each");
      return;
    }
    if (t > c.now) c.now = t;
    deliver_and_receive(c);
  }
  poll(*hx.dev, x->scq, sent);
  poll(*hy.dev, y.rcq, received);
  std::vector<Wc> others;
  poll(*hx.dev, x->rcq, others);
  poll(*hy.dev, y.scq, others);
  const std::size_t sends = with_read ? 2 : 1;
  if (sent.size() != sends || received.size() != 1 || !others.empty() ||
      (with_read && sent[0].wr_id != kReadId) || sent.back().wr_id != kWrId ||
      received[0].wr_id != kWrId) {
    c.fail(what + ": wrong completions (" + std::to_string(sent.size()) + " send, " +
           std::to_string(received.size()) + " receive, " + std::to_string(others.size()) +
           " other)");
    return;
  }
  if (with_read && sent[0].status != WcStatus::kSuccess) {
    c.fail(what + ": the READ posted just before it completed with " +
           wc_status_name(sent[0].status) + ", expected success");
    return;
  }
  if (sent.back().status != WcStatus::kRemInvReqErr ||
      received[0].status != WcStatus::kRemInvReqErr) {
    c.fail(what + ": completed with " + wc_status_name(sent.back().status) + " / " +
           wc_status_name(received[0].status) + ", expected REM_INV_REQ_ERR for both");
    return;
  }
  // The READ's data: y's bytes (which the arena check holds to y's image); x's image takes them.
  for (std::size_t i = 0; with_read && i < read_len; ++i) {
    const std::size_t off = kReadOff + i;
    if (hx.arena[off] != hy.arena[off]) {
      c.fail(what + ": the READ before it brought a wrong byte at " + std::to_string(i));
      return;
    }
    hx.expected[off] = hx.arena[off];
  }
  auto qx = hx.dev->query_qp(x->qp);
  auto qy = hy.dev->query_qp(y.qp);
  if (!qx.ok() || !qy.ok() || qx->attr.qp_state != QpState::kErr ||
      qy->attr.qp_state != QpState::kErr) {
    c.fail(what + ": the QPs are not both in the error state");
    return;
  }
  // Still valid: the key is known, only PD 0 is wrong for it (an invalid key is unknown to all).
  auto probe = hy.dev->memory().resolve(0, 0, hy.mr.rkey, true, 0, 1, 0);
  if (probe.ok() || probe.error() != transport::AccessError::kWrongPd) {
    c.fail(what + ": the region did not stay valid");
    return;
  }
  ++c.result.send_invs_checked;
}

std::uint32_t pick_mtu(Prng& r) {
  static constexpr std::uint32_t kMtus[] = {256, 512, 1024, 2048, 4096};
  return kMtus[r.below(5)];
}

// Which hosts a pair joins, and its path MTU.
struct PairPlan {
  QpType type;
  std::uint32_t a, b, mtu;
};

// The pairs, drawn first, so that every host's memory can be sized for what it will hold.
std::vector<PairPlan> plan_pairs(Cluster& c) {
  std::vector<PairPlan> pairs;
  auto plan = [&](QpType type, std::uint32_t n) {
    for (std::uint32_t i = 0; i < n; ++i) {
      const auto a = static_cast<std::uint32_t>(c.rng.below(c.opt.hosts));
      auto b = static_cast<std::uint32_t>(c.rng.below(c.opt.hosts - 1));
      if (b >= a) ++b;
      pairs.push_back(PairPlan{type, a, b, pick_mtu(c.rng)});
    }
  };
  plan(QpType::kRc, c.opt.rc_pairs);
  plan(QpType::kUc, c.opt.uc_pairs);
  plan(QpType::kUd, c.opt.ud_pairs);
  plan(QpType::kXrcSend, c.opt.xrc_pairs);  // the initiator on a, the target on b
  return pairs;
}

bool make_hosts(Cluster& c, const std::vector<PairPlan>& pairs) {
  std::vector<std::size_t> need(c.opt.hosts, 2 * kGuardBytes + 4096);
  for (const PairPlan& p : pairs) {
    const std::size_t bytes = side_bytes(c.opt, p.type, p.type == QpType::kUd ? 4096 : p.mtu);
    need[p.a] += 2 * bytes;  // its side, and the peer's remote slots and receive buffers here
    need[p.b] += 2 * bytes;
  }
  for (std::uint32_t i = 0; i < c.opt.hosts; ++i) {
    if (!make_host(c, i, (need[i] + 4095) & ~std::size_t{4095})) {
      c.fail("host setup failed");
      return false;
    }
  }
  return true;
}

// A UD side's address handle for its peer.
bool make_ah(Cluster& c, Side& side) {
  AhAttr ah;
  ah.dgid = verbs::gid_from_ip(side.peer->host->ip);
  ah.is_global = true;
  auto h = side.host->dev->create_ah(side.host->pd, ah);
  if (!h.ok()) {
    c.fail("address handle setup failed");
    return false;
  }
  side.ah = h.value();
  return true;
}

// The two sides of pair `p` made, named `label`.a and .b, and connected (PSNs, max_rd_atomic and
// the rest drawn from the seed); its `a` side, or null (the run failed).
Side* link_pair(Cluster& c, const PairPlan& p, const std::string& label, std::uint8_t timeout) {
  Side* x = make_side(c, *c.hosts[p.a], p.type, p.mtu);
  Side* y =
      make_side(c, *c.hosts[p.b], p.type == QpType::kXrcSend ? QpType::kXrcRecv : p.type, p.mtu);
  if (x == nullptr || y == nullptr) {
    c.fail("QP setup failed");
    return nullptr;
  }
  x->peer = y;
  y->peer = x;
  x->name = label + ".a(host" + std::to_string(p.a) + " qpn " + std::to_string(x->qpn) + ")";
  y->name = label + ".b(host" + std::to_string(p.b) + " qpn " + std::to_string(y->qpn) + ")";
  const auto psn_x = static_cast<std::uint32_t>(c.rng.below(1u << 24));
  const auto psn_y = static_cast<std::uint32_t>(c.rng.below(1u << 24));
  if (rc_like(p.type)) {
    x->max_rd_atomic = static_cast<std::uint8_t>(1 + c.rng.below(8));
    y->max_rd_atomic = static_cast<std::uint8_t>(1 + c.rng.below(8));
  }
  if (!connect_side(c, *x, psn_x, psn_y, timeout) || !connect_side(c, *y, psn_y, psn_x, timeout)) {
    c.fail("QP connection failed");
    return nullptr;
  }
  return x;
}

// Pair `index` (counted from 1): its two sides made, named and connected, then its operations.
bool connect_pair(Cluster& c, const PairPlan& p, std::uint32_t index, std::uint8_t timeout) {
  const char* t = p.type == QpType::kRc        ? "rc"
                  : p.type == QpType::kUc      ? "uc"
                  : p.type == QpType::kXrcSend ? "xrc"
                                               : "ud";
  Side* x = link_pair(c, p, t + std::to_string(index - 1), timeout);
  if (x == nullptr) return false;
  Side* y = x->peer;
  if (p.type == QpType::kRc && selective_repeat_for(c.opt, index)) {
    for (Side* side : {x, y}) {
      side->host->dev->find_qp(side->qpn)->set_selective_repeat(true);
      side->selective_repeat = true;
    }
  }
  if (p.type == QpType::kUd && (!make_ah(c, *x) || !make_ah(c, *y))) return false;
  generate_ops(c, *x);
  generate_ops(c, *y);
  return true;
}

// The pair for a scripted check after the workload, one that ends in the error state: the first
// RC pair that neither the faults (torn down) nor an earlier check took there, whose responder's
// region is on demand if `odp_responder`; else one made for the check between host 0 or 1 and a
// host whose region fits, connected as the workload's. Null (no check) only when no host's
// region is on demand and one must be.
Side* scripted_pair(Cluster& c, bool odp_responder) {
  for (auto& sp : c.sides) {
    if (sp->type == QpType::kRc && !sp->torn_down && !sp->scripted &&
        (!odp_responder || sp->peer->host->odp)) {
      return sp.get();
    }
  }
  std::uint32_t b = 1;
  if (odp_responder) {
    auto it = std::find_if(c.hosts.begin(), c.hosts.end(), [](const auto& h) { return h->odp; });
    if (it == c.hosts.end()) return nullptr;
    b = static_cast<std::uint32_t>(it - c.hosts.begin());
  }
  const PairPlan p{QpType::kRc, b == 0 ? 1u : 0u, b, pick_mtu(c.rng)};
  return link_pair(c, p, "check" + std::to_string(c.check_pairs++), c.ack_timeout);
}

// The work the run waits for (`unfinished`), and each side's receive budget: RC receives
// exactly the peer's consuming ops; UC/UD may receive duplicates, so they keep their queue
// topped up.
void count_work(Cluster& c) {
  for (const auto& side : c.sides) {
    for (const Op& op : side->ops) {
      c.unfinished += 1 + (rc_like(side->type) && consumes_recv(op.kind) ? 1 : 0);
    }
  }
  for (auto& s : c.sides) {
    std::uint64_t consuming = 0;
    for (const Op& op : s->peer->ops) consuming += consumes_recv(op.kind) ? 1 : 0;
    s->recv_budget = rc_like(s->type) ? consuming : consuming * 3 + 8;
    if (rc_like(s->type)) s->recv_expected = consuming;
  }
}

// Idle QPs (scale runs): created, connected to nothing, never used.
bool make_idle_qps(Cluster& c) {
  for (auto& h : c.hosts) {
    for (std::uint32_t i = 0; i < c.opt.idle_qps_per_host; ++i) {
      Side* s = make_side(c, *h, QpType::kRc, 1024);
      if (s == nullptr) {
        c.fail("idle QP setup failed");
        return false;
      }
      c.sides.pop_back();  // not part of the workload
    }
  }
  return true;
}

// The links: the fault plan (the test's, or the seed's, with --faults' rule) from `start`, or a
// plain link. Sets c.liveness_start, when the faults stop.
bool set_up_network(Cluster& c, Instant start) {
  const ClusterOptions& opt = c.opt;
  std::vector<HostId> ids;
  for (auto& h : c.hosts) ids.push_back(h->id);
  FaultPlanOptions po;
  po.host_count = opt.hosts;
  po.fault_phase_ns = opt.fault_phase_ns;
  FaultPlan plan = opt.plan ? *opt.plan : FaultPlan::generate(opt.seed, po);
  if (opt.plan && plan.options.host_count != opt.hosts) {
    c.fail("the fault plan is for " + std::to_string(plan.options.host_count) + " hosts");
    return false;
  }
  if (opt.faults && opt.fault_spec) {
    auto p = plan.with_faults(*opt.fault_spec);
    if (!p.ok()) {
      c.fail("the fault spec does not fit the simulator: " + p.error());
      return false;
    }
    plan = std::move(p.value());
  }
  std::vector<wire::IpAddress> addresses;
  for (auto& h : c.hosts) addresses.push_back(h->ip);
  c.result.plan = opt.faults ? plan.to_string(addresses) : "no faults";
  if (opt.faults && !plan.install(c.net, start, ids).ok()) {
    c.fail("fault plan could not be installed");
    return false;
  }
  if (!opt.faults) {
    // A plain data-center link: 2 us, 25 Gb/s; or, for half the seeds, no serialization at all,
    // so that a burst arrives at once and the receiver takes it in one batch (as recvmmsg
    // does) before its application can post more receive WQEs: RNR NAKs without any fault.
    LinkConfig plain;
    plain.delay_ns = 2000;
    plain.bandwidth_bps = c.rng.chance(1, 2) ? 25'000'000'000 : 0;
    plain.queue_limit_packets = 0;
    if (!c.net.configure_default(start, plain).ok()) c.fail("network setup failed");
  }
  c.liveness_start = opt.faults ? plan.liveness_start(start) : start;
  return true;
}

// The workload: capture, hosts, pairs and their operations, idle QPs. False (with c.result
// failed) when a step fails.
bool build_workload(Cluster& c, Tap& tap) {
  if (!c.opt.pcap_path.empty()) {
    auto w = capture::PcapWriter::open(c.opt.pcap_path);
    if (!w.ok()) {
      c.fail("cannot write " + c.opt.pcap_path + ": " + w.error());
      return false;
    }
    c.pcap.emplace(std::move(w.value()));
  }
  c.net.set_tap(&tap);
  const std::vector<PairPlan> pairs = plan_pairs(c);
  if (!make_hosts(c, pairs)) return false;
  c.ack_timeout = static_cast<std::uint8_t>(6 + c.rng.below(9));  // 262 us .. 67 ms
  std::uint32_t index = 0;
  for (const PairPlan& p : pairs) {
    if (!connect_pair(c, p, ++index, c.ack_timeout)) return false;
  }
  count_work(c);
  if (!c.result.ok) return false;
  return make_idle_qps(c);
}

// The sides whose work is unfinished at the liveness deadline, for the failure's message.
std::string stuck_sides(const Cluster& c) {
  std::string stuck;
  for (auto& s : c.sides) {
    if (s->torn_down) continue;  // its work is no longer awaited
    if (!s->outstanding.empty() || s->next_post < s->ops.size()) {
      stuck += " " + s->name + ": " + std::to_string(s->outstanding.size()) + " outstanding, " +
               std::to_string(s->ops.size() - s->next_post) + " unposted;";
    }
  }
  return stuck;
}

// The event loop: each event delivers and receives, then the applications poll and the
// engines transmit, until the work is finished and the network is quiet, or a check fails.
void run_events(Cluster& c) {
  const Instant deadline = c.liveness_start + Duration::ns(c.opt.liveness_limit_ns);
  for (std::size_t i = 0; i < c.sides.size(); ++i) c.mark_dirty(i);
  poll_dirty(c);
  transmit_rounds(c);
  for (std::uint64_t step = 0; c.result.ok; ++step) {
    if (finished(c) && c.net.next_event_time().is_never()) break;
    const Instant t = next_event(c);
    if (t.is_never()) {
      if (!finished(c)) c.fail("stalled: work outstanding but nothing scheduled (a lost wakeup)");
      break;
    }
    if (t > deadline) {
      c.now = t;
      c.fail("liveness: work unfinished " +
             std::to_string((deadline - c.liveness_start).count_ns()) +
             " ns after the faults stopped:" + stuck_sides(c));
      break;
    }
    if (t > c.now) c.now = t;
    ++c.result.events;
    deliver_and_receive(c);
    poll_dirty(c);
    transmit_rounds(c);
    if (step > 200'000'000) {
      c.fail("event budget exhausted");
      break;
    }
  }
}

// The engines' and QPs' counters into the result, and the checks on them.
void collect_counters(Cluster& c) {
  const LinkStats& total = c.net.total_stats();
  c.result.frames_dropped = total.dropped_total();
  std::uint64_t retry_exceeded = 0, seq_naks = 0, timeouts = 0;
  for (auto& h : c.hosts) {
    c.result.acks_held += h->engine->counters().tx_acks_held;
    c.result.acks_deferred += h->engine->counters().tx_acks_deferred;
    for (transport::Qp* qp : h->dev->live_qps()) {
      c.result.retransmissions += qp->counters().retransmitted_packets;
      c.result.selective_retransmits += qp->counters().selective_retransmits;
      c.result.out_of_order_kept += qp->counters().out_of_order_kept;
      retry_exceeded += qp->counters().retry_exceeded;
      seq_naks += qp->counters().seq_naks_sent;
      timeouts += qp->counters().timeouts + qp->counters().adaptive_timeouts;
    }
  }
  // A network that loses, duplicates and reorders nothing leaves no PSN gap for a responder to
  // NAK, and (its queues unbounded, its delay microseconds against ACK timeouts of 262 us and
  // more) lets no ACK timer expire, IBTA's nor the adaptive one (transport/recovery.cc, at least
  // 5 ms): RNR NAKs are the only retries it may see. A sequence NAK
  // there is a responder NAKing its own making (one sent behind an RNR NAK, say).
  if (c.result.ok && !c.opt.faults && c.result.frames_dropped == 0 &&
      (seq_naks != 0 || timeouts != 0)) {
    c.fail("a network without faults saw " + std::to_string(seq_naks) + " sequence NAKs and " +
           std::to_string(timeouts) + " ACK timeouts");
  }
  // The QPs' own count of exhausted retries is the workload's: none went unnoticed.
  if (c.result.ok && retry_exceeded != c.result.retry_exceeded_qps) {
    c.fail(std::to_string(retry_exceeded) + " QPs counted retry_exceeded, the workload saw " +
           std::to_string(c.result.retry_exceeded_qps));
  }
}

}  // namespace

std::uint64_t completed_ops(const ClusterResult& r, std::string_view name) {
  for (const auto& [n, count] : r.ops_by_kind) {
    if (n == name) return count;
  }
  return 0;
}

std::string replay_command(const ClusterOptions& o) {
  std::string cmd = "uroce sim --seed " + std::to_string(o.seed);
  if (!o.faults) cmd += " --no-faults";
  if (o.hosts != ClusterOptions{}.hosts) cmd += " --hosts " + std::to_string(o.hosts);
  if (o.rc_pairs != ClusterOptions{}.rc_pairs) cmd += " --rc " + std::to_string(o.rc_pairs);
  if (o.uc_pairs != ClusterOptions{}.uc_pairs) cmd += " --uc " + std::to_string(o.uc_pairs);
  if (o.ud_pairs != ClusterOptions{}.ud_pairs) cmd += " --ud " + std::to_string(o.ud_pairs);
  if (o.xrc_pairs != ClusterOptions{}.xrc_pairs) cmd += " --xrc " + std::to_string(o.xrc_pairs);
  if (o.ops_per_qp != ClusterOptions{}.ops_per_qp) cmd += " --ops " + std::to_string(o.ops_per_qp);
  if (o.max_message_bytes != 0) cmd += " --max-msg " + std::to_string(o.max_message_bytes);
  if (o.idle_qps_per_host != 0) cmd += " --idle-qps " + std::to_string(o.idle_qps_per_host);
  if (o.fault_spec && o.faults) cmd += " --faults '" + o.fault_spec->to_string() + "'";
  if (o.aimed_corruption_per_mille != 0 && o.faults) {
    cmd += " --aim-corruption " + std::to_string(o.aimed_corruption_per_mille);
  }
  if (!o.acks.hold) cmd += " --no-hold-acks";
  if (!o.acks.defer) cmd += " --no-defer-acks";
  if (o.selective_repeat_percent != 0) {
    cmd += " --selective-repeat " + std::to_string(o.selective_repeat_percent);
  }
  if (o.plan && o.faults) cmd += " (and the test's own fault plan)";
  return cmd;
}

// A page of an on-demand region that is not mapped (issue 41), once per run on an RC pair the
// checks before it left alone, whose responder's region is on demand: y's page model reports 256
// bytes of its arena unmapped, and x WRITEs 16 bytes there. The WRITE fails with
// REM_ACCESS_ERR (NAK Remote Access Error, as rxe's failed ODP fault), x sees nothing else, and
// no byte is written (the arena check runs again after it).
void check_odp_hole(Cluster& c) {
  Side* requester = scripted_pair(c, true);
  if (requester == nullptr) return;
  Script sc(c, *requester);
  constexpr std::size_t kHole = kGuardBytes + kOdpPage;
  if (kHole + 256 > sc.hy.arena.size() - kGuardBytes) return;
  const std::string what = sc.x.name + " WRITE into an unmapped ODP page of " + sc.y.name;
  sc.hy.hole_begin = kHole;
  sc.hy.hole_end = kHole + 256;
  const bool refused = write_through(sc, 5, kGuardBytes + 64, kHole + 16, sc.hy.mr.rkey,
                                     WcStatus::kRemAccessErr, what);
  sc.hy.hole_begin = sc.hy.hole_end = 0;
  if (!refused) return;
  if (!sc.both_in_error()) {
    c.fail(what + ": the QPs are not both in the error state");
    return;
  }
  ++c.result.odp_holes_checked;
}

// FLUSH of a range that its region does not open to FLUSH (the workload's regions all allow
// placement type global), once per run on a pair of its own after the other checks: y registers
// a page of its arena again, with remote write only, and x FLUSHes 64 bytes of it, placement
// type global. The QP allows that type, the region does not: refused as rxe's check_rkey()
// refuses it (the R_Key lacks IB_ACCESS_FLUSH_GLOBAL: NAK Remote Access Error), so the FLUSH
// completes with REM_ACCESS_ERR, alone, and both QPs end in the error state.
void check_flush_refused(Cluster& c) {
  Side* requester = scripted_pair(c, false);
  if (requester == nullptr) return;
  Script sc(c, *requester);
  const std::string what = sc.x.name + " FLUSH of a region of " + sc.y.name + " without FLUSH";
  auto mr = sc.hy.dev->reg_mr(sc.hy.pd, sc.hy.arena.data() + kGuardBytes, kOdpPage,
                              kAccessLocalWrite | kAccessRemoteWrite);
  if (!mr.ok()) {
    c.fail(what + ": reg_mr failed");
    return;
  }
  SendWr flush;
  flush.wr_id = 8;
  flush.opcode = WrOpcode::kFlush;
  flush.send_flags = kSendSignaled;
  flush.rdma.remote_addr = sc.hy.va(kGuardBytes + 64);
  flush.rdma.rkey = mr->rkey;
  flush.flush.length = 64;
  flush.flush.placement = wire::kFlushGlobal;
  flush.flush.selectivity = wire::kFlushRange;
  const bool settled =
      sc.hx.dev->post_send(sc.x.qp, std::span(&flush, 1), nullptr) == Errc::kOk && sc.settle(1, 0);
  const bool in_error = sc.both_in_error();
  if (sc.hy.dev->dereg_mr(mr->handle) != Errc::kOk) {
    c.fail(what + ": dereg_mr failed");
  } else if (!settled || sc.got_x[0].wr_id != 8 || sc.got_x[0].status != WcStatus::kRemAccessErr) {
    c.fail(what + ": " + std::to_string(sc.got_x.size()) + " completion(s), the first " +
           (sc.got_x.empty() ? "none" : wc_status_name(sc.got_x[0].status)) +
           ", expected one REM_ACCESS_ERR");
  } else if (!in_error) {
    c.fail(what + ": the QPs are not both in the error state");
  } else {
    ++c.result.flush_refusals_checked;
  }
}

// Builds the cluster and its workload, runs it to the end, then checks what it left.
ClusterResult run_cluster(const ClusterOptions& opt) {
  Cluster c(opt);
  if (opt.hosts < 2) {
    c.fail("a cluster needs at least 2 hosts");
    return c.result;
  }
  Tap tap(c);
  if (!build_workload(c, tap)) return c.result;
  const Instant start = c.now;
  if (!set_up_network(c, start)) return c.result;
  // What the application leaves in the arenas (the workload's sources written): from here on
  // only the device writes them (check_odp_faults).
  for (auto& h : c.hosts) {
    if (h->odp) h->initial = h->arena;
  }
  CompletionEvents events(c);
  for (auto& h : c.hosts) h->dev->set_completion_event_handler(&events);
  run_events(c);
  if (c.result.ok) final_checks(c);
  if (c.result.ok) check_memory_window(c);
  if (c.result.ok) check_send_inv(c);
  if (c.result.ok) check_odp_hole(c);
  if (c.result.ok) check_flush_refused(c);
  if (c.result.ok) final_checks(c);  // the negative cases wrote nothing
  c.result.simulated_ns = (c.now - start).count_ns();
  for (std::size_t k = 0; k < kOpKinds; ++k) {
    c.result.ops_by_kind.emplace_back(op_name(static_cast<OpKind>(k)), c.completed_by_kind[k]);
  }
  collect_counters(c);
  c.net.set_tap(nullptr);
  for (auto& h : c.hosts) h->dev->set_completion_event_handler(nullptr);
  return c.result;
}

}  // namespace uroce::sim

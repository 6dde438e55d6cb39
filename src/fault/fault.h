// Faults on demand: one description of network faults (loss, bursts of loss, duplication,
// reordering, delay with jitter, corruption, a rate limit with a queue, partitions), aimed by
// direction, peer, QPN and packet class, and the code that decides each packet's fate from it.
//
// Two users share it. The real datapath runs a FaultStage on transmit and on receive of every
// uroce device that has a fault specification (UROCE_FAULTS, the config file, `uroce faults`);
// the simulator's network decides the fate of each frame on a link with the same decide()
// (sim/network.cc), so that a fault plan printed by a failing simulation names, in this grammar,
// faults that can be replayed against real processes.
//
// Sans-I/O, like the protocol core: no clock, no socket. Time comes in as `now`; a packet the
// stage holds back (delay, reordering, the rate limit's queue) comes out of poll() once due.
// Every random choice comes from a seeded Prng, one stream per fault kind and rule, so the same
// seed and the same packet sequence give the same faults, and turning one fault on or off does
// not change the choices of the others.
//
// The grammar (parse() and to_string() are inverse on what parse() accepts, to_string() being
// canonical):
//
//   spec  := rule (';' rule)*            the first rule that matches a packet decides its fate
//   rule  := item (',' item)*
//   item  := key '=' value
//   match keys (a rule without them matches every packet):
//     dir=tx|rx|both                     direction at this device (default both)
//     peer=IP                            the other end's address (IPv4 or IPv6)
//     qpn=N                              the packet's destination QP (BTH DestQP), decimal or 0x
//     class=C[+C...]                     req (requests: SEND, WRITE, READ request), ack (ACK and
//                                        NAK, atomic ACK included), read (READ responses),
//                                        atomic (CmpSwap/FetchAdd requests), cnp, cm (QP 1 MADs),
//                                        other; `all` is every class
//     attr=A[+A...]                      CM MADs (class cm) with these attribute IDs only: req,
//                                        mra, rej, rep, rtu, dreq, drep, sidr_req, sidr_rep,
//                                        lap, apr (e.g. `class=cm,attr=drep,loss=100%`: every
//                                        DREP lost); with class=, that must include cm
//   fault keys:
//     loss=R                             independent loss
//     burst=P:R[:H[:K]]                  Gilbert-Elliott loss: P good->bad, R bad->good per
//                                        packet, H loss in the bad state (default 100%), K loss
//                                        in the good state (default 0); replaces loss=
//     dup=R                              one extra copy
//     reorder=R                          the packet is held back...
//     reorder_by=N|TIME                  ...until N more packets of the rule went (default 3;
//                                        at most 1 s after it came), or for TIME
//     delay=TIME  jitter=TIME            added to every packet of the rule (jitter uniform in
//                                        [0, TIME]: it may reorder, as netem's does)
//     corrupt=R  corrupt_bits=N          N distinct bits flipped (default 1), anywhere past the
//                                        outer headers: in BTH, extension headers, payload or
//                                        ICRC, so that the receiver's ICRC check catches it
//     rate=RATE  queue=N                 serialize at RATE (bit, kbit, mbit, gbit per second, as
//                                        tc writes them), queueing up to N packets (default
//                                        1000); a packet that finds the queue full is dropped
//     partition=START+LEN[/PERIOD]       everything the rule matches is dropped from START for
//                                        LEN (after the stage's start), again every PERIOD;
//                                        several partition= items add windows
//   and, anywhere (it applies to the whole spec):
//     seed=N                             default 1; the seed in use is printed at device open
//   R: a probability: P% (up to 4 decimals: 0.0001%), or N/D, or 0 (kept in lowest terms)
//   TIME: a number with ns, us, ms or s (e.g. 200us, 1.5ms, 2s); delay, jitter and reorder_by
//         up to 1 h, partition times up to 30 days
//
// Examples: "loss=1%,dup=0.5%,reorder=1%,seed=7";
//           "dir=tx,class=ack,loss=5%;peer=10.0.0.2,partition=2s+2s";
//           "dir=tx,attr=drep,loss=100%".
// A malformed spec is refused with a message that names the bad item; never a silent default.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/bytes.h"
#include "base/prng.h"
#include "base/result.h"
#include "base/time.h"
#include "wire/ip.h"

namespace uroce::fault {

// A probability num/den with 0 <= num <= den and den > 0. The default is zero ("off").
struct Ratio {
  std::uint32_t num = 0;
  std::uint32_t den = 1;

  constexpr bool is_zero() const { return num == 0; }
  constexpr bool valid() const { return den > 0 && num <= den; }
  bool operator==(const Ratio&) const = default;
};

std::string to_string(Ratio r);  // "3/100", or "0" when off (the simulator's plans)
// The grammar's form: "1%" when it is a whole number of 1/10000 percent, else "N/D".
std::string to_spec_string(Ratio r);
Result<Ratio, std::string> parse_ratio(std::string_view s);

enum class Direction : std::uint8_t { kTx = 1, kRx = 2 };

enum class PacketClass : std::uint8_t {
  kRequest,       // SEND, WRITE, READ request (RC, UC, UD)
  kAck,           // ACK, NAK, atomic ACK
  kReadResponse,  // RDMA READ response First/Middle/Last/Only
  kAtomic,        // CmpSwap, FetchAdd requests
  kCnp,           // congestion notification
  kCm,            // a MAD to QP 1
  kOther,         // anything else (unparseable included)
};
inline constexpr std::size_t kPacketClassCount = 7;
std::string_view to_string(PacketClass c);  // "req", "ack", "read", "atomic", "cnp", "cm", "other"

// The CM MAD attribute IDs attr= selects (IBTA 12.6: REQ 0x10 .. APR 0x1a), bit (ID - 0x10) of
// Match::cm_attrs. Their names are wire::cm_attr_name()'s in lowercase.
inline constexpr std::uint16_t kFirstCmAttr = 0x10;
inline constexpr std::size_t kCmAttrCount = 11;

// An address as the grammar writes it (peer=): dotted IPv4; IPv6 as RFC 5952 (lowercase, the
// longest run of zero groups as "::", an IPv4-mapped address with its IPv4 tail).
std::string address_string(const wire::IpAddress& a);

// What a rule can match a packet on.
struct PacketInfo {
  Direction dir = Direction::kTx;
  PacketClass cls = PacketClass::kOther;
  std::uint32_t dest_qpn = 0;
  std::uint16_t cm_attr = 0;  // class kCm with the CM's management class: the attribute ID, else 0
  wire::IpAddress peer;       // the remote end (destination on tx, source on rx)
  // Carried through a hold unchanged, for the datapath (not matched on): the peer's UDP port,
  // the IP TOS / traffic class and TTL / hop limit.
  std::uint16_t peer_port = 0;
  std::uint8_t tos = 0;
  std::uint8_t ttl = 0;
};

// A packet's class and DestQP from its transport headers (`roce`: BTH onwards, as the UDP
// payload), and a CM MAD's attribute ID. Never fails: what does not parse is kOther with DestQP 0.
PacketInfo classify(ConstBytes roce, Direction dir, const wire::IpAddress& peer);

struct Match {
  std::uint8_t dirs = 3;         // bit 1: tx, bit 2: rx
  std::uint32_t classes = 0x7f;  // bit (1 << PacketClass)
  std::optional<wire::IpAddress> peer;
  std::optional<std::uint32_t> qpn;
  std::uint16_t cm_attrs = 0;  // attr=: bit (ID - kFirstCmAttr); 0 when not given (any packet)
  bool matches(const PacketInfo& p) const;
  bool operator==(const Match&) const = default;
};

struct GilbertElliott {
  Ratio p;                // good -> bad, per packet
  Ratio r;                // bad -> good, per packet
  Ratio loss_bad{1, 1};   // h
  Ratio loss_good{0, 1};  // k
  bool operator==(const GilbertElliott&) const = default;
};

// What happens to the packets of one rule (or one simulated link): the per-packet fate.
struct Faults {
  Ratio loss;
  std::optional<GilbertElliott> burst;  // replaces `loss` when set
  Ratio duplication;
  Ratio reordering;
  std::uint32_t reorder_packets = 3;  // held until this many more packets went...
  std::int64_t reorder_delay_ns = 0;  // ...or, when > 0, for this long instead
  std::int64_t delay_ns = 0;
  std::int64_t jitter_ns = 0;
  Ratio corruption;
  std::uint32_t corrupt_bits = 1;
  std::uint64_t rate_bps = 0;  // 0: no rate limit
  std::uint32_t queue_packets = 1000;
  bool operator==(const Faults&) const = default;
  bool any() const;  // anything at all (a rate counts)
};

// A window during which a rule drops everything it matches: [start, start + length), repeated
// every period when period > 0 (then length < period).
struct Partition {
  std::int64_t start_ns = 0;
  std::int64_t length_ns = 0;
  std::int64_t period_ns = 0;
  bool operator==(const Partition&) const = default;
  bool active(std::int64_t since_start_ns) const;
};

struct Rule {
  Match match;
  Faults faults;
  std::vector<Partition> partitions;
  bool operator==(const Rule&) const = default;
};

struct FaultSpec {
  std::uint64_t seed = 1;
  std::vector<Rule> rules;
  bool empty() const { return rules.empty(); }
  static Result<FaultSpec, std::string> parse(std::string_view text);
  // Canonical: "" for the empty spec with the default seed ("seed=N" with another seed). Items
  // at their default values are left out, and so are modifiers whose fault is off
  // (corrupt_bits= without corruption, queue= without a rate, reorder_by= without reordering).
  std::string to_string() const;
  bool operator==(const FaultSpec&) const = default;
};

// --- The fate of one packet (shared with the simulator) ---

inline constexpr std::uint32_t kMaxCorruptBits = 64;

// The random streams and the burst state of one rule or one simulated link.
struct FateState {
  enum Stream : std::size_t { kLoss, kDuplication, kJitter, kReordering, kCorruption, kCount };
  // streams[k] is seeded with derive_seed(seed, k) (base/prng.h): the simulator's seeding of a
  // link's streams, so that a link's FateState draws what its streams always drew.
  explicit FateState(std::uint64_t seed);
  std::array<Prng, kCount> streams;
  bool burst_bad = false;  // Gilbert-Elliott: in the bad state (the burst loss uses kLoss)
};

struct CopyFate {
  std::int64_t extra_delay_ns = 0;  // delay + jitter (+ reorder_delay_ns when reordered by time)
  bool reordered = false;           // reordering drawn for this copy
  bool corrupted = false;
  // When corrupted: the kCorruption stream as it was after this copy's draw. decide() has moved
  // the stream past the bit positions already (for `corruptible_bytes`), so that the next copy
  // and packet draw what they would have drawn had the bits been flipped right then; flip them
  // with flip_bits(bytes, from, f.corrupt_bits, *corrupt_rng) over exactly that many bytes.
  std::optional<Prng> corrupt_rng;
};

struct Fate {
  bool lost = false;
  bool burst_loss = false;  // the loss came from the Gilbert-Elliott model
  std::uint8_t copies = 1;  // 0 when lost, 2 when duplicated
  std::array<CopyFate, 2> copy{};
};

// Draws the fate of one packet: loss (or burst) from its stream, then duplication, then per
// copy jitter, reordering and corruption, each from its own stream and only when that fault is
// on (a lost packet draws nothing more). `corruptible_bytes`: the size of the span a corrupted
// copy's bits will be flipped in (see CopyFate::corrupt_rng). The rate limit and partitions are
// not part of it (they depend on time and queue).
Fate decide(const Faults& f, FateState& s, std::size_t corruptible_bytes);

// Flips min(bits, 8 * (bytes.size() - from)) distinct bits of bytes[from, end), positions drawn
// from `rng` (Floyd's sampling: `bits` draws, no rejection). bits <= kMaxCorruptBits.
void flip_bits(MutBytes bytes, std::size_t from, std::uint32_t bits, Prng& rng);

// --- The stage of a real datapath ---

enum class Injected : std::uint8_t {
  kLoss,
  kBurstLoss,
  kPartition,
  kQueueFull,  // rate limit's queue overflowed
  kDuplicate,  // the extra copy
  kReorder,
  kDelay,  // delay or jitter held it
  kCorrupt,
};
inline constexpr std::size_t kInjectedCount = 8;
std::string_view to_string(Injected k);  // "loss", "burst_loss", "partition", "queue_full",
                                         // "duplicate", "reorder", "delay", "corrupt"

struct StageCounters {
  std::uint64_t packets = 0;  // packets that matched a rule
  std::array<std::uint64_t, kInjectedCount> injected{};
};

// One injected fault, for captures and logs.
struct FaultEvent {
  Instant at;
  Injected kind = Injected::kLoss;
  PacketInfo info;
  std::uint64_t packet_number = 0;  // the stage's count of packets seen in info.dir, from 1
  std::size_t rule = 0;             // index in the spec
};

// Packets the stage holds at once, at most; a copy that would exceed it is dropped and counted
// as kQueueFull (a delay at a high packet rate must not hold unbounded memory).
inline constexpr std::size_t kMaxHeldPackets = std::size_t{1} << 16;

// Semantics, per rule and direction (a rule's tx and rx packets have their own random streams,
// rate limit and reorder count): partitions first (kPartition), then the rate limit (a packet
// leaves when the transmitter is free: FIFO, each packet occupying it for
// ceil(8 * bytes * 1e9 / rate) ns, bytes being the packet as submitted; a packet that finds
// queue_packets packets not yet completely serialized, the one being serialized included, is
// dropped as kQueueFull), then decide(): a lost packet has used the transmitter; each copy is
// due at its departure plus its extra delay. A copy reordered by packets is released when
// reorder_packets more packets of its rule and direction have been submitted (after those
// packets: it then takes its place in the due order behind what was already due), or 1 s after
// it came, whichever is first (and never before its delay).
//
// Not thread-safe: one owner at a time (a device's datapath, under its lock; its transmit and
// receive paths share the stage).
class FaultStage {
 public:
  // `start`: the origin of partition windows. `spec` must be valid (as parse() returns them).
  FaultStage(FaultSpec spec, Instant start);
  ~FaultStage();
  FaultStage(FaultStage&&) noexcept;
  FaultStage& operator=(FaultStage&&) noexcept;

  const FaultSpec& spec() const { return spec_; }

  enum class Verdict : std::uint8_t {
    kPass,  // deliver the packet now, unchanged, once: the stage kept nothing
    kTaken  // the stage dropped it or holds its copies: take them from poll()
  };
  // A packet enters in `info.dir`. `packet` is the UDP payload (BTH to ICRC, the ICRC already
  // computed on transmit, not yet checked on receive): the stage keeps a copy of it when it
  // holds or changes it. Corruption flips bits anywhere in it.
  Verdict submit(Instant now, const PacketInfo& info, ConstBytes packet);

  struct Out {
    PacketInfo info;
    std::vector<std::byte> bytes;
    bool duplicate = false;
    bool corrupted = false;
  };
  // The next packet due by `now` (in due order, ties in submit order), into `out` (its buffer
  // reused). False when none is. A `now` earlier than one submit() or poll() already had counts
  // as that one (the transmit and receive paths may read the clock apart).
  bool poll(Instant now, Out& out);
  // When the next held packet is due; Instant::never() when none is held.
  Instant next_deadline() const;
  std::size_t held() const;

  // Injected faults not yet taken, oldest first (bounded: the oldest are dropped past 4096,
  // counted in events_lost).
  std::optional<FaultEvent> poll_event();
  std::uint64_t events_lost() const { return events_lost_; }

  const StageCounters& counters(Direction d) const;

 private:
  struct Held;
  FaultSpec spec_;
  Instant start_;
  std::vector<FateState> states_;  // per rule and direction: [2 * rule + (rx ? 1 : 0)]
  std::uint64_t events_lost_ = 0;
  std::array<StageCounters, 2> counters_{};
  std::array<std::uint64_t, 2> seen_{};
  // implementation-defined queues (held packets by due time; per-rule rate state; reorder
  // counters; the event ring)
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace uroce::fault

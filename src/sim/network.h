// The simulated network: hosts with one IP address each, directional links between every pair,
// a manual clock, and seeded faults. It moves Ethernet frames; it knows nothing of the transport.
//
// Sans-I/O, like the protocol core: every call that takes `now` first brings the network up to
// `now` (applying scheduled events and deciding the fate of every frame due by then), then acts.
// `now` never goes backwards across calls (checked). A caller's loop looks like:
//
//     while (...) {
//       now = max(now, earliest(net.next_event_time(), hosts' timers));
//       while (net.poll_delivery(now, d)) host[d.to].handle_frame(now, d.frame);
//       ... hosts send with net.send(now, from, frame) ...
//     }
//
// Life of a frame (all decided at send time except the partition check, made again on arrival):
//
//   send(now) -> route by destination IP (parsed now, before any corruption; unparseable or
//             |   unknown address: dropped, no_route)
//             -> partition? (link cut, either host isolated: dropped, partition)
//             -> transmit queue (tail drop: queue_full; in-flight bound: in_flight_limit)
//             -> serialized at bandwidth_bps after the frames ahead of it
//             -> loss? (dropped, loss) -> ECN mark? -> duplicate? (one extra copy)
//             -> per copy: + delay + jitter [+ reorder_delay], corruption?
//   arrival   -> dropped (partition) if the link is cut now or was cut while the frame was in
//                flight; otherwise delivered: handed out by poll_delivery in (time, seq) order.
//
// Each frame's fate (loss, duplication, and per copy jitter, reordering and corruption) is
// fault::decide()'s, the real datapath's fault stage's, on the link's fault::FateState; ECN
// marking and the transmit queue are the network's own.
//
// Determinism: every random choice comes from a per-link stream (see network.cc, link_seed())
// that is a pure function of (network seed, source IP, destination IP, kind of fault). A link's
// choices therefore do not depend on other links' traffic, on when the link was first used, on
// the order hosts were added, or on which other faults are enabled. Ties in arrival time are
// broken by a sequence number given at send time, so a run is a function of the seed and of the
// calls made.
//
// Bounds: hosts, frames in flight, frame size, scheduled events and pooled buffers are all
// bounded by NetworkOptions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/bytes.h"
#include "base/prng.h"
#include "base/result.h"
#include "base/time.h"
#include "fault/fault.h"
#include "sim/frame_peek.h"
#include "sim/link_config.h"
#include "wire/ip.h"

namespace uroce::sim {

using HostId = std::uint32_t;  // 0, 1, 2 ... in the order hosts were added
inline constexpr HostId kNoHost = 0xffffffffu;
using MacAddress = std::array<std::uint8_t, 6>;

enum class SimError : std::uint8_t {
  kDuplicateAddress,  // add_host: another host has this IP address
  kTooManyHosts,      // add_host: NetworkOptions::max_hosts reached
  kInvalidConfig,     // configure_*: LinkConfig::invalid_reason() says why
};
std::string_view sim_error_name(SimError e);

using SimStatus = Result<std::monostate, SimError>;

enum class DropCause : std::uint8_t {
  kLoss,           // LinkConfig::loss
  kQueueFull,      // transmit queue tail drop
  kPartition,      // link cut or host isolated, at send or while in flight
  kNoRoute,        // no parseable IP header, or no host has the destination address
  kInFlightLimit,  // NetworkOptions::max_in_flight_frames reached
};
inline constexpr std::size_t kDropCauseCount = 5;
std::string_view drop_cause_name(DropCause c);  // "loss", "queue_full", ...

struct LinkStats {
  std::uint64_t sent_frames = 0;  // frames handed to send() (no_route: only in the total)
  std::uint64_t sent_bytes = 0;
  std::uint64_t delivered_frames = 0;  // copies that arrived (duplicates included)
  std::uint64_t delivered_bytes = 0;
  std::array<std::uint64_t, kDropCauseCount> dropped_frames{};  // by DropCause
  std::uint64_t duplicated = 0;                                 // extra copies made
  std::uint64_t reordered = 0;                                  // copies given reorder_delay_ns
  std::uint64_t corrupted = 0;                                  // copies with bits flipped
  std::uint64_t ecn_marked = 0;  // frames whose ECN field changed to CE

  std::uint64_t dropped(DropCause c) const { return dropped_frames[static_cast<std::size_t>(c)]; }
  std::uint64_t dropped_total() const;
  void add(const LinkStats& o);
  bool operator==(const LinkStats&) const = default;
};

// A switch's egress port in front of a host (configure_port): every link into the host shares
// it, which is what makes N senders into one receiver congest (an incast) where the network's
// per-pair links alone never would. A frame enters the port when its sender's link has
// serialized it, waits behind the frames ahead of it, is serialized at the port's rate, then
// takes its link's delay. The port tail-drops beyond queue_limit_bytes and marks ECN CE on
// ECN-capable frames as DCQCN's congestion point does: never below ecn_kmin_bytes queued, with
// a probability rising linearly to ecn_pmax at ecn_kmax_bytes, always above it (RED's marking
// curve, the one ConnectX-era switches are configured with; 0 bytes for Kmax: no marking).
// The queue the mark is drawn on is the one the frame finds on arrival (marking at enqueue), or
// with ecn_mark_on_dequeue the one it leaves behind when it departs (the frames that reached the
// port while it waited): what HPCC's ns-3 switch and many ASICs do, and what tells the receiver
// of the queue now rather than one queue's wait ago.
struct PortConfig {
  std::uint64_t bandwidth_bps = 10'000'000'000;  // > 0
  std::uint64_t queue_limit_bytes = 0;           // 0: no limit
  std::uint64_t ecn_kmin_bytes = 0;
  std::uint64_t ecn_kmax_bytes = 0;
  fault::Ratio ecn_pmax{1, 5};
  bool ecn_mark_on_dequeue = true;
  // Why the configuration is invalid, or nullptr.
  const char* invalid_reason() const;
};

struct PortStats {
  std::uint64_t enqueued_frames = 0;
  std::uint64_t enqueued_bytes = 0;
  std::uint64_t dropped_frames = 0;  // tail drops (also counted as the link's queue_full)
  std::uint64_t ecn_marked = 0;      // marked here (also counted as the link's ecn_marked)
  std::uint64_t max_queue_bytes = 0;
  // The queue each frame found on arrival (itself excluded), in 1 KiB buckets; the last bucket
  // holds everything from 4095 KiB up.
  static constexpr std::size_t kBucketBytes = 1024;
  std::array<std::uint64_t, 4096> queue_histogram{};
  // The smallest queue length (bytes, a bucket's upper edge) that `per_mille` of the arrivals
  // found at most: per_mille 990 is the p99.
  std::uint64_t queue_percentile_bytes(std::uint32_t per_mille) const;
  // Bytes forwarded per sending host (indexed by HostId; grown as senders appear).
  std::vector<std::uint64_t> forwarded_bytes_by_source;
};

// A frame handed to its destination host.
struct Delivery {
  Instant time;       // arrival time (<= the `now` of poll_delivery)
  Instant sent_time;  // when the source called send()
  HostId from = kNoHost;
  HostId to = kNoHost;
  std::uint64_t seq = 0;  // the tie-break: unique, increasing in the order copies were made
  // Ownership passes to the caller. poll_delivery swaps the caller's previous buffer into the
  // network's buffer pool, so a caller that reuses one Delivery allocates nothing in steady
  // state.
  std::vector<std::byte> frame;
  // What the network did to this copy. For tests and checkers: a host must not look at these.
  bool duplicate = false;  // the extra copy of a duplicated frame
  bool reordered = false;
  bool corrupted = false;
  bool ecn_marked = false;
};

enum class NetEventKind : std::uint8_t {
  kCutLink,      // a -> b stops carrying frames
  kHealLink,     // a -> b carries frames again
  kIsolateHost,  // every link from or to a is cut
  kHealHost,     // a is no longer isolated (its links' own cuts stay)
  kHealAll,      // every link and host healed
  kEndFaults,    // kHealAll, and every link's config (and the default) becomes without_faults()
};
std::string_view net_event_kind_name(NetEventKind k);  // "cut_link", ...

// A change to the network at a time given in advance (partitions in a fault plan).
struct NetEvent {
  Instant at;
  NetEventKind kind = NetEventKind::kHealAll;
  HostId a = 0;
  HostId b = 0;
  bool operator==(const NetEvent&) const = default;
};

// Observation points, for pcap capture and checkers. Called synchronously from inside the
// network's calls, in time order (timestamps never decrease).
enum class TapPoint : std::uint8_t {
  kSend,     // the frame as the host sent it, at send time
  kDeliver,  // the copy as it arrives (corrupted, marked), at its arrival time
  kDrop,     // a frame or copy dropped, at the time of the drop
};

struct TapEvent {
  TapPoint point = TapPoint::kSend;
  Instant time;
  HostId from = kNoHost;
  HostId to = kNoHost;     // kNoHost for no_route drops
  DropCause cause{};       // kDrop only
  ConstBytes frame;        // valid during the call only
  std::uint64_t seq = 0;   // kDeliver only, as in Delivery
  bool duplicate = false;  // kDeliver only, as in Delivery
  bool reordered = false;
  bool corrupted = false;
  bool ecn_marked = false;
};

class FrameTap {
 public:
  virtual ~FrameTap() = default;
  // Must not call back into the Network.
  virtual void on_frame(const TapEvent& e) = 0;
};

struct NetworkOptions {
  std::size_t max_hosts = 1024;
  // Frames and copies sent but not yet arrived, plus arrived but not yet polled; also the bound
  // of each link's transmit queue when its LinkConfig sets no limit.
  std::size_t max_in_flight_frames = std::size_t{1} << 16;
  // Larger frames are a sender bug (jumbo frames are 9216 bytes), not a network event: checked.
  std::size_t max_frame_bytes = 10240;
  std::size_t max_scheduled_events = 4096;
  std::size_t max_pooled_buffers = 1024;
};

class Network {
 public:
  explicit Network(std::uint64_t seed, const NetworkOptions& options = {});
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  std::uint64_t seed() const { return seed_; }

  // ---- hosts ----------------------------------------------------------------------------
  Result<HostId, SimError> add_host(const wire::IpAddress& ip, const MacAddress& mac);
  std::size_t host_count() const { return hosts_.size(); }
  const wire::IpAddress& host_ip(HostId h) const;
  const MacAddress& host_mac(HostId h) const;
  std::optional<HostId> find_host(const wire::IpAddress& ip) const;  // "ARP"

  // ---- configuration (takes effect for frames sent at or after `now`) -------------------
  // The configuration of every link that has no explicit one.
  SimStatus configure_default(Instant now, const LinkConfig& c);
  SimStatus configure_link(Instant now, HostId from, HostId to, const LinkConfig& c);
  // A switch egress port in front of host `to`, shared by every link into it (PortConfig).
  SimStatus configure_port(Instant now, HostId to, const PortConfig& c);
  // Zeros for a host without a port.
  const PortStats& port_stats(HostId to) const;
  // The bytes the port in front of `to` holds at `now` (frames not yet completely serialized);
  // 0 for a host without a port.
  std::uint64_t port_queue_bytes(HostId to, Instant now) const;
  // Back to following the default.
  void reset_link(Instant now, HostId from, HostId to);
  const LinkConfig& default_config() const { return default_config_; }
  const LinkConfig& link_config(HostId from, HostId to) const;

  // ---- partitions (take effect at `now`, after every arrival due at or before `now`) ------
  // Cuts and heals are states, not counts: one heal undoes any number of cuts.
  void cut_link(Instant now, HostId from, HostId to);
  void heal_link(Instant now, HostId from, HostId to);
  void isolate_host(Instant now, HostId h);
  void heal_host(Instant now, HostId h);
  void heal_all(Instant now);
  // heal_all, and every link's configuration and the default become without_faults().
  void end_faults(Instant now);
  // Applies `e` at e.at (>= the latest `now` seen), in (time, seq) order with arrivals: an event
  // scheduled before a frame was sent goes first when both fall on the same nanosecond.
  void schedule(const NetEvent& e);
  bool link_cut(HostId from, HostId to) const;  // cut, or either host isolated
  bool host_isolated(HostId h) const;

  // ---- frames ---------------------------------------------------------------------------
  // `from` sends `frame` (an Ethernet frame) at `now`; the network copies it.
  void send(Instant now, HostId from, ConstBytes frame);
  // The earliest time at which something happens: an arrival (or a frame already arrived and
  // not yet polled, whose time is <= now) or a scheduled event; never() when idle. O(1).
  Instant next_event_time() const;
  // Hands out the next frame whose arrival time is <= now, in (time, seq) order. False when
  // there is none.
  bool poll_delivery(Instant now, Delivery& out);

  // ---- observation ----------------------------------------------------------------------
  const LinkStats& link_stats(HostId from, HostId to) const;  // zeros for an unused link
  const LinkStats& total_stats() const { return total_; }
  std::size_t in_flight_frames() const { return in_flight_; }  // sent, not yet arrived
  std::size_t ready_frames() const { return ready_.size(); }   // arrived, not yet polled
  Instant now() const { return now_; }
  // nullptr to stop. The tap must outlive the network or be removed first.
  void set_tap(FrameTap* tap) { tap_ = tap; }

 private:
  // A link's streams: fault::FateState's (loss, duplication, jitter, reordering, corruption:
  // 0 .. 4), then ECN marking's.
  static constexpr std::size_t kStreamEcn = fault::FateState::kCount;

  struct Host {
    wire::IpAddress ip;
    MacAddress mac{};
    bool isolated = false;
  };

  struct QueuedFrame {
    Instant tx_end;
    std::size_t bytes = 0;
  };

  struct Port {
    PortConfig config;
    Instant busy_until;             // when the port finishes serializing its last frame
    std::deque<QueuedFrame> queue;  // frames not completely serialized yet, by tx_end
    std::uint64_t queue_bytes = 0;
    Prng ecn{0};  // port_seed(), set by configure_port
    PortStats stats;
    // Marking on dequeue: every frame the port took, in order (ids from entered_first_id), with
    // the bytes taken up to and including it; kept while a frame awaiting its mark may need it.
    struct Entered {
      Instant at_switch;
      std::uint64_t bytes_through = 0;
    };
    std::deque<Entered> entered;
    std::uint64_t entered_first_id = 0;
    std::uint64_t next_entered_id = 0;
    std::uint64_t bytes_through = 0;
    std::multiset<std::uint64_t> awaiting;  // ids of frames in flight whose mark is not drawn
    // Whether a frame finding (or leaving) `queued` bytes is marked (RED's curve above).
    bool draw_mark(std::uint64_t queued);
  };
  // A frame through a port that marks on dequeue: where to find what entered after it.
  struct Departure {
    HostId port = 0;
    std::uint64_t id = 0;
    Instant tx_end;
  };
  // The port stage of send(): the time the frame leaves the port (tx_end when `to` has no port),
  // or nullopt when the port dropped it; sets `mark` when the port marks it at enqueue, or
  // `departure` when the mark is drawn at its departure (mark_at_departure).
  std::optional<Instant> through_port(HostId from, HostId to, Instant at_switch, std::size_t bytes,
                                      bool& mark, std::optional<Departure>& departure);
  // The mark of a frame whose port marks on dequeue, drawn on the bytes that reached the port
  // between its arrival there and its departure; at the frame's arrival, when every frame that
  // reached the port before its departure has been sent. Sets the frame's CE when ECN-capable
  // and `delivered` (a frame a cut link loses is only forgotten).
  void mark_at_departure(std::uint32_t slot, bool delivered);

  struct Link {
    Link(HostId f, HostId t, std::uint64_t seed);
    HostId from = kNoHost;
    HostId to = kNoHost;
    std::optional<LinkConfig> own;  // nullopt: the network's default
    bool cut = false;
    // Increases whenever the link becomes cut (by itself or through a host), so that a frame in
    // flight across a cut that has already healed is still lost.
    std::uint64_t cut_generation = 0;
    Instant tx_busy_until;             // when the transmitter finishes the last queued frame
    std::deque<QueuedFrame> tx_queue;  // frames not completely serialized yet
    std::size_t tx_queue_bytes = 0;
    fault::FateState fate;  // the streams of kStreamEcn's predecessors, see link_seed()
    Prng ecn;
    LinkStats stats;
  };

  struct InFlight {
    std::vector<std::byte> frame;
    Instant sent_time;
    Instant arrival;
    std::uint64_t seq = 0;
    Link* link = nullptr;
    std::uint64_t cut_generation = 0;
    bool duplicate = false;
    bool reordered = false;
    bool corrupted = false;
    bool ecn_marked = false;
    std::optional<Departure> departure;  // its port marks on dequeue, and has not yet
  };

  struct Pending {  // a frame's arrival, in the arrival heap
    Instant time;
    std::uint64_t seq = 0;
    std::uint32_t slot = 0;
  };
  struct PendingLater {
    bool operator()(const Pending& x, const Pending& y) const {
      return x.time != y.time ? x.time > y.time : x.seq > y.seq;
    }
  };
  struct Scheduled {
    NetEvent event;
    std::uint64_t seq = 0;
  };
  struct ScheduledLater {
    bool operator()(const Scheduled& x, const Scheduled& y) const {
      return x.event.at != y.event.at ? x.event.at > y.event.at : x.seq > y.seq;
    }
  };

  void advance(Instant now);
  void apply(const NetEvent& e);
  void arrive(std::uint32_t slot);
  Link& link(HostId from, HostId to);
  const LinkConfig& config_of(const Link& l) const;
  bool effectively_cut(const Link& l) const;
  void mark_cut(Link& l);
  void drop(Instant t, HostId from, HostId to, Link* l, DropCause c, ConstBytes frame);
  // The tap's kSend or kDrop event of a frame (`cause`: kDrop's).
  void tap(TapPoint point, Instant t, HostId from, HostId to, ConstBytes frame,
           DropCause cause = {});
  // send()'s steps, after the tap's kSend event.
  // The sender's link takes a frame of `bytes` at `now`: when its serialization ends, with
  // `ecn_by_queue` set when the transmit queue it joins is long enough to mark it; nullopt, with
  // `cause`, when the queue or the in-flight bound drops it.
  std::optional<Instant> onto_link(Instant now, Link& l, const LinkConfig& c, std::size_t bytes,
                                   DropCause& cause, bool& ecn_by_queue);
  // What every copy of one sent frame shares.
  struct Outgoing {
    Instant now;     // when it was sent
    Instant tx_end;  // when it has left the sender's link and the port in front of `to`
    Link* link = nullptr;
    const LinkConfig* config = nullptr;
    HostId to = kNoHost;
    bool marked = false;  // CE set
    std::optional<Departure> departure;
  };
  // One copy of it goes in flight, with its own fate (delay, reordering, corruption).
  void launch(const Outgoing& o, std::vector<std::byte>&& buf, fault::CopyFate& cf, bool duplicate);
  std::vector<std::byte> acquire_buffer(ConstBytes contents);
  void release_buffer(std::vector<std::byte>&& b);
  std::uint32_t acquire_slot();
  void check_host(HostId h) const;

  std::uint64_t seed_;
  NetworkOptions options_;
  Instant now_;
  std::uint64_t next_seq_ = 0;
  std::vector<Host> hosts_;
  std::map<std::pair<bool, std::array<std::uint8_t, 16>>, HostId> by_ip_;
  LinkConfig default_config_;
  std::map<std::pair<HostId, HostId>, Link> links_;  // node-based: Link* stay valid
  std::map<HostId, Port> ports_;
  std::vector<InFlight> slots_;
  std::vector<std::uint32_t> free_slots_;
  std::priority_queue<Pending, std::vector<Pending>, PendingLater> arrivals_;
  std::priority_queue<Scheduled, std::vector<Scheduled>, ScheduledLater> scheduled_;
  std::deque<std::uint32_t> ready_;
  std::vector<std::vector<std::byte>> pool_;
  std::size_t in_flight_ = 0;
  LinkStats total_;
  FrameTap* tap_ = nullptr;
};

// Mixes a seed with a tag into an independent seed (splitmix64 finalizer over both): how a
// harness derives the network's seed, the fault plan's and its own from one run seed.
using uroce::derive_seed;

}  // namespace uroce::sim

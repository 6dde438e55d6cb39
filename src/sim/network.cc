#include "sim/network.h"

#include <algorithm>

namespace uroce::sim {

namespace {

constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ull;

constexpr std::uint64_t absorb(std::uint64_t h, std::uint64_t word) {
  return mix64(h + kGolden + mix64(word));
}

std::uint64_t absorb_address(std::uint64_t h, const wire::IpAddress& a) {
  std::uint64_t hi = 0;
  std::uint64_t lo = 0;
  for (std::size_t i = 0; i < 8; ++i) {
    hi = (hi << 8) | a.bytes[i];
    lo = (lo << 8) | a.bytes[8 + i];
  }
  return absorb(absorb(absorb(h, a.v6 ? 6 : 4), hi), lo);
}

// The seed of link from -> to. Keyed by the endpoints' IP addresses, not by their HostIds:
// HostIds follow the order in which hosts were added, addresses do not. So link A -> B draws the
// same numbers whichever hosts exist, in whatever order they were added, and whenever the link
// was first used. No network-wide stream is ever drawn from, so no link's traffic moves another
// link's draws.
std::uint64_t link_seed(std::uint64_t seed, const wire::IpAddress& from,
                        const wire::IpAddress& to) {
  constexpr std::uint64_t kLinkTag = 0x6c696e6b;  // "link"
  return absorb_address(absorb_address(derive_seed(seed, kLinkTag), from), to);
}

// The seed of the switch port in front of `to`, keyed by its address as a link's is.
std::uint64_t port_seed(std::uint64_t seed, const wire::IpAddress& to) {
  constexpr std::uint64_t kPortTag = 0x706f7274;  // "port"
  return absorb_address(derive_seed(seed, kPortTag), to);
}

// ceil(8 * bytes * 1e9 / bandwidth_bps); 0 for an infinitely fast link.
Duration serialization_time(std::size_t bytes, std::uint64_t bandwidth_bps) {
  if (bandwidth_bps == 0) return Duration::zero();
  const unsigned __int128 bits_ns = static_cast<unsigned __int128>(bytes) * 8 * 1'000'000'000u;
  const unsigned __int128 ns = (bits_ns + bandwidth_bps - 1) / bandwidth_bps;
  return Duration::ns(static_cast<std::int64_t>(ns));
}

}  // namespace

std::string_view sim_error_name(SimError e) {
  switch (e) {
    case SimError::kDuplicateAddress:
      return "duplicate_address";
    case SimError::kTooManyHosts:
      return "too_many_hosts";
    case SimError::kInvalidConfig:
      return "invalid_config";
  }
  return "?";
}

std::string_view drop_cause_name(DropCause c) {
  switch (c) {
    case DropCause::kLoss:
      return "loss";
    case DropCause::kQueueFull:
      return "queue_full";
    case DropCause::kPartition:
      return "partition";
    case DropCause::kNoRoute:
      return "no_route";
    case DropCause::kInFlightLimit:
      return "in_flight_limit";
  }
  return "?";
}

std::string_view net_event_kind_name(NetEventKind k) {
  switch (k) {
    case NetEventKind::kCutLink:
      return "cut_link";
    case NetEventKind::kHealLink:
      return "heal_link";
    case NetEventKind::kIsolateHost:
      return "isolate_host";
    case NetEventKind::kHealHost:
      return "heal_host";
    case NetEventKind::kHealAll:
      return "heal_all";
    case NetEventKind::kEndFaults:
      return "end_faults";
  }
  return "?";
}

std::uint64_t LinkStats::dropped_total() const {
  std::uint64_t n = 0;
  for (std::uint64_t d : dropped_frames) n += d;
  return n;
}

void LinkStats::add(const LinkStats& o) {
  sent_frames += o.sent_frames;
  sent_bytes += o.sent_bytes;
  delivered_frames += o.delivered_frames;
  delivered_bytes += o.delivered_bytes;
  for (std::size_t i = 0; i < kDropCauseCount; ++i) dropped_frames[i] += o.dropped_frames[i];
  duplicated += o.duplicated;
  reordered += o.reordered;
  corrupted += o.corrupted;
  ecn_marked += o.ecn_marked;
}

Network::Network(std::uint64_t seed, const NetworkOptions& options)
    : seed_(seed), options_(options) {
  UROCE_CHECK(options_.max_in_flight_frames > 0);
  UROCE_CHECK(options_.max_in_flight_frames < (std::size_t{1} << 32));
}

// ---- hosts ------------------------------------------------------------------------------

Result<HostId, SimError> Network::add_host(const wire::IpAddress& ip, const MacAddress& mac) {
  if (hosts_.size() >= options_.max_hosts) return Err{SimError::kTooManyHosts};
  wire::IpAddress key = ip;
  if (!key.v6) std::fill(key.bytes.begin() + 4, key.bytes.end(), 0);  // only 4 bytes are read
  if (!by_ip_.try_emplace({key.v6, key.bytes}, static_cast<HostId>(hosts_.size())).second) {
    return Err{SimError::kDuplicateAddress};
  }
  hosts_.push_back(Host{key, mac, false});
  return static_cast<HostId>(hosts_.size() - 1);
}

void Network::check_host(HostId h) const { UROCE_CHECK(h < hosts_.size()); }

const wire::IpAddress& Network::host_ip(HostId h) const {
  check_host(h);
  return hosts_[h].ip;
}

const MacAddress& Network::host_mac(HostId h) const {
  check_host(h);
  return hosts_[h].mac;
}

std::optional<HostId> Network::find_host(const wire::IpAddress& ip) const {
  wire::IpAddress key = ip;
  if (!key.v6) std::fill(key.bytes.begin() + 4, key.bytes.end(), 0);
  auto it = by_ip_.find({key.v6, key.bytes});
  if (it == by_ip_.end()) return std::nullopt;
  return it->second;
}

// ---- configuration ----------------------------------------------------------------------

SimStatus Network::configure_default(Instant now, const LinkConfig& c) {
  if (c.invalid_reason()) return Err{SimError::kInvalidConfig};
  advance(now);
  default_config_ = c;
  return std::monostate{};
}

SimStatus Network::configure_link(Instant now, HostId from, HostId to, const LinkConfig& c) {
  check_host(from);
  check_host(to);
  if (c.invalid_reason()) return Err{SimError::kInvalidConfig};
  advance(now);
  link(from, to).own = c;
  return std::monostate{};
}

void Network::reset_link(Instant now, HostId from, HostId to) {
  check_host(from);
  check_host(to);
  advance(now);
  link(from, to).own.reset();
}

const LinkConfig& Network::link_config(HostId from, HostId to) const {
  check_host(from);
  check_host(to);
  auto it = links_.find({from, to});
  if (it == links_.end()) return default_config_;
  return config_of(it->second);
}

const LinkConfig& Network::config_of(const Link& l) const {
  return l.own ? *l.own : default_config_;
}

// ---- partitions -------------------------------------------------------------------------

bool Network::effectively_cut(const Link& l) const {
  return l.cut || hosts_[l.from].isolated || hosts_[l.to].isolated;
}

void Network::mark_cut(Link& l) { ++l.cut_generation; }

void Network::cut_link(Instant now, HostId from, HostId to) {
  schedule(NetEvent{now, NetEventKind::kCutLink, from, to});
  advance(now);
}
void Network::heal_link(Instant now, HostId from, HostId to) {
  schedule(NetEvent{now, NetEventKind::kHealLink, from, to});
  advance(now);
}
void Network::isolate_host(Instant now, HostId h) {
  schedule(NetEvent{now, NetEventKind::kIsolateHost, h, 0});
  advance(now);
}
void Network::heal_host(Instant now, HostId h) {
  schedule(NetEvent{now, NetEventKind::kHealHost, h, 0});
  advance(now);
}
void Network::heal_all(Instant now) {
  schedule(NetEvent{now, NetEventKind::kHealAll, 0, 0});
  advance(now);
}
void Network::end_faults(Instant now) {
  schedule(NetEvent{now, NetEventKind::kEndFaults, 0, 0});
  advance(now);
}

void Network::schedule(const NetEvent& e) {
  UROCE_CHECK(e.at >= now_ && !e.at.is_never());
  switch (e.kind) {
    case NetEventKind::kCutLink:
    case NetEventKind::kHealLink:
      check_host(e.a);
      check_host(e.b);
      break;
    case NetEventKind::kIsolateHost:
    case NetEventKind::kHealHost:
      check_host(e.a);
      break;
    case NetEventKind::kHealAll:
    case NetEventKind::kEndFaults:
      break;
  }
  UROCE_CHECK(scheduled_.size() < options_.max_scheduled_events);
  scheduled_.push(Scheduled{e, next_seq_++});
}

void Network::apply(const NetEvent& e) {
  switch (e.kind) {
    case NetEventKind::kCutLink: {
      Link& l = link(e.a, e.b);
      l.cut = true;
      mark_cut(l);
      break;
    }
    case NetEventKind::kHealLink:
      link(e.a, e.b).cut = false;
      break;
    case NetEventKind::kIsolateHost:
      hosts_[e.a].isolated = true;
      // Links not created yet carry no frames, so the existing ones are all that matter.
      for (auto& [key, l] : links_) {
        if (key.first == e.a || key.second == e.a) mark_cut(l);
      }
      break;
    case NetEventKind::kHealHost:
      hosts_[e.a].isolated = false;
      break;
    case NetEventKind::kHealAll:
    case NetEventKind::kEndFaults:
      for (auto& h : hosts_) h.isolated = false;
      for (auto& [key, l] : links_) l.cut = false;
      if (e.kind == NetEventKind::kEndFaults) {
        default_config_ = default_config_.without_faults();
        for (auto& [key, l] : links_) {
          if (l.own) l.own = l.own->without_faults();
        }
      }
      break;
  }
}

bool Network::link_cut(HostId from, HostId to) const {
  check_host(from);
  check_host(to);
  if (hosts_[from].isolated || hosts_[to].isolated) return true;
  auto it = links_.find({from, to});
  return it != links_.end() && it->second.cut;
}

bool Network::host_isolated(HostId h) const {
  check_host(h);
  return hosts_[h].isolated;
}

// ---- frames -----------------------------------------------------------------------------

// Stream k of the link is seeded with derive_seed(link seed, k): FateState's streams 0 .. 4,
// then ECN marking's.
Network::Link::Link(HostId f, HostId t, std::uint64_t seed)
    : from(f), to(t), fate(seed), ecn(derive_seed(seed, kStreamEcn)) {}

const char* PortConfig::invalid_reason() const {
  if (bandwidth_bps == 0) return "a port needs a bandwidth";
  if (ecn_kmax_bytes != 0 && ecn_kmin_bytes > ecn_kmax_bytes) return "ecn_kmin above ecn_kmax";
  if (!ecn_pmax.valid()) return "ecn_pmax is not a probability";
  return nullptr;
}

std::uint64_t PortStats::queue_percentile_bytes(std::uint32_t per_mille) const {
  std::uint64_t total = 0;
  for (std::uint64_t n : queue_histogram) total += n;
  if (total == 0) return 0;
  // The first bucket by which at least per_mille/1000 of the arrivals are counted.
  const std::uint64_t want = (total * per_mille + 999) / 1000;
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < queue_histogram.size(); ++i) {
    seen += queue_histogram[i];
    if (seen >= want) return (i + 1) * kBucketBytes;
  }
  return queue_histogram.size() * kBucketBytes;
}

SimStatus Network::configure_port(Instant now, HostId to, const PortConfig& c) {
  advance(now);
  check_host(to);
  if (c.invalid_reason() != nullptr) return Err{SimError::kInvalidConfig};
  auto [it, fresh] = ports_.try_emplace(to);
  Port& p = it->second;
  p.config = c;
  if (fresh) p.ecn = Prng(port_seed(seed_, hosts_[to].ip));
  return std::monostate{};
}

const PortStats& Network::port_stats(HostId to) const {
  static const PortStats kNone;
  auto it = ports_.find(to);
  return it == ports_.end() ? kNone : it->second.stats;
}

std::uint64_t Network::port_queue_bytes(HostId to, Instant now) const {
  auto it = ports_.find(to);
  if (it == ports_.end()) return 0;
  std::uint64_t q = 0;
  for (const QueuedFrame& f : it->second.queue) q += f.tx_end > now ? f.bytes : 0;
  return q;
}

std::optional<Instant> Network::through_port(HostId from, HostId to, Instant at_switch,
                                             std::size_t bytes, bool& mark,
                                             std::optional<Departure>& departure) {
  auto it = ports_.find(to);
  if (it == ports_.end()) return at_switch;
  Port& p = it->second;
  const PortConfig& c = p.config;
  // Frames enter in the order they are sent, which is the order they reach the switch as long as
  // the senders' links are alike; the queue a frame finds is what has not left by then.
  while (!p.queue.empty() && p.queue.front().tx_end <= at_switch) {
    p.queue_bytes -= p.queue.front().bytes;
    p.queue.pop_front();
  }
  const std::uint64_t q = p.queue_bytes;
  if (c.queue_limit_bytes != 0 && q + bytes > c.queue_limit_bytes) {
    ++p.stats.dropped_frames;
    return std::nullopt;
  }
  ++p.stats.queue_histogram[std::min<std::size_t>(q / PortStats::kBucketBytes,
                                                  p.stats.queue_histogram.size() - 1)];
  if (!c.ecn_mark_on_dequeue) mark = p.draw_mark(q);
  const Instant end =
      std::max(at_switch, p.busy_until) + serialization_time(bytes, c.bandwidth_bps);
  p.busy_until = end;
  p.queue.push_back(QueuedFrame{end, bytes});
  p.queue_bytes += bytes;
  ++p.stats.enqueued_frames;
  p.stats.enqueued_bytes += bytes;
  p.stats.max_queue_bytes = std::max(p.stats.max_queue_bytes, q + bytes);
  if (p.stats.forwarded_bytes_by_source.size() <= from) {
    p.stats.forwarded_bytes_by_source.resize(from + 1, 0);
  }
  p.stats.forwarded_bytes_by_source[from] += bytes;
  if (c.ecn_mark_on_dequeue && c.ecn_kmax_bytes != 0) {
    p.bytes_through += bytes;
    if (p.entered.empty()) p.entered_first_id = p.next_entered_id;
    p.entered.push_back(Port::Entered{at_switch, p.bytes_through});
    departure = Departure{to, p.next_entered_id, end};
    ++p.next_entered_id;
  }
  return end;
}

bool Network::Port::draw_mark(std::uint64_t queued) {
  const PortConfig& c = config;
  if (c.ecn_kmax_bytes == 0 || queued <= c.ecn_kmin_bytes) return false;
  // Linear from 0 at Kmin to pmax at Kmax; 1 above Kmax. Drawn only between the two.
  if (queued >= c.ecn_kmax_bytes) return true;
  const std::uint64_t span = c.ecn_kmax_bytes - c.ecn_kmin_bytes;
  const std::uint64_t num = std::uint64_t{c.ecn_pmax.num} * (queued - c.ecn_kmin_bytes);
  const std::uint64_t den = std::uint64_t{c.ecn_pmax.den} * span;
  return ecn.below(den) < num;
}

void Network::mark_at_departure(std::uint32_t slot, bool delivered) {
  InFlight& f = slots_[slot];
  if (!f.departure) return;
  const Departure d = *f.departure;
  f.departure.reset();
  Port& p = ports_.at(d.port);
  p.awaiting.erase(p.awaiting.find(d.id));
  // What entered after the frame and reached the port before it left: the queue it leaves.
  const std::size_t own = d.id - p.entered_first_id;
  const auto after =
      std::upper_bound(p.entered.begin() + static_cast<std::ptrdiff_t>(own), p.entered.end(),
                       d.tx_end, [](Instant t, const Port::Entered& e) { return t < e.at_switch; });
  const std::uint64_t behind = std::prev(after)->bytes_through - p.entered[own].bytes_through;
  // What no frame in flight can need any more.
  const std::uint64_t keep = p.awaiting.empty() ? p.next_entered_id : *p.awaiting.begin();
  while (p.entered_first_id < keep && !p.entered.empty()) {
    p.entered.pop_front();
    ++p.entered_first_id;
  }
  if (!delivered || !p.draw_mark(behind)) return;
  const std::optional<IpPeek> ip = peek_ip(f.frame);
  if (!ip || !mark_ce(f.frame, *ip)) return;
  f.ecn_marked = true;
  ++f.link->stats.ecn_marked;
  ++total_.ecn_marked;
  ++p.stats.ecn_marked;
}

Network::Link& Network::link(HostId from, HostId to) {
  auto it = links_.find({from, to});
  if (it != links_.end()) return it->second;
  const std::uint64_t s = link_seed(seed_, hosts_[from].ip, hosts_[to].ip);
  return links_.try_emplace({from, to}, from, to, s).first->second;
}

std::vector<std::byte> Network::acquire_buffer(ConstBytes contents) {
  std::vector<std::byte> b;
  if (!pool_.empty()) {
    b = std::move(pool_.back());
    pool_.pop_back();
  }
  b.assign(contents.begin(), contents.end());
  return b;
}

void Network::release_buffer(std::vector<std::byte>&& b) {
  b.clear();
  if (b.capacity() > 0 && pool_.size() < options_.max_pooled_buffers) pool_.push_back(std::move(b));
}

std::uint32_t Network::acquire_slot() {
  if (!free_slots_.empty()) {
    const std::uint32_t s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  UROCE_CHECK(slots_.size() < options_.max_in_flight_frames);
  slots_.emplace_back();
  return static_cast<std::uint32_t>(slots_.size() - 1);
}

void Network::drop(Instant t, HostId from, HostId to, Link* l, DropCause c, ConstBytes frame) {
  const auto i = static_cast<std::size_t>(c);
  ++total_.dropped_frames[i];
  if (l != nullptr) ++l->stats.dropped_frames[i];
  tap(TapPoint::kDrop, t, from, to, frame, c);
}

void Network::send(Instant now, HostId from, ConstBytes frame) {
  advance(now);
  check_host(from);
  UROCE_CHECK(frame.size() <= options_.max_frame_bytes);
  ++total_.sent_frames;
  total_.sent_bytes += frame.size();

  // The route is decided here, from the frame as sent: corruption on the way cannot misroute it.
  const std::optional<IpPeek> ip = peek_ip(frame);
  HostId to = kNoHost;
  if (ip) to = find_host(ip->dst).value_or(kNoHost);
  tap(TapPoint::kSend, now, from, to, frame);
  if (to == kNoHost) return drop(now, from, kNoHost, nullptr, DropCause::kNoRoute, frame);

  Link& l = link(from, to);
  const LinkConfig& c = config_of(l);
  ++l.stats.sent_frames;
  l.stats.sent_bytes += frame.size();
  if (effectively_cut(l)) return drop(now, from, to, &l, DropCause::kPartition, frame);
  DropCause cause{};
  bool ecn_by_queue = false;
  const std::optional<Instant> link_end = onto_link(now, l, c, frame.size(), cause, ecn_by_queue);
  if (!link_end) return drop(now, from, to, &l, cause, frame);
  // The switch port in front of `to`, if any, after the sender's link has serialized the frame.
  Outgoing o{now, Instant{}, &l, &c, to, false, std::nullopt};
  bool port_mark = false;
  const std::optional<Instant> port_end =
      through_port(from, to, *link_end, frame.size(), port_mark, o.departure);
  if (!port_end) return drop(now, from, to, &l, DropCause::kQueueFull, frame);
  o.tx_end = *port_end;

  // Each fault draws from its own stream, and only when it is on: turning one fault on or off
  // does not change the choices of the others. The fate is the fault stage's (corruption flips
  // bits anywhere in the Ethernet frame); ECN marking is the network's own.
  fault::Faults faults = c.faults();
  // A reordering with no delay only marks the copy here (faults() leaves it out, as the stage
  // would reorder such a packet by packets): drawn all the same, as it always was.
  if (c.reorder_delay_ns == 0) faults.reordering = c.reordering;
  fault::Fate fate = fault::decide(faults, l.fate, frame.size());
  if (fate.lost) return drop(now, from, to, &l, DropCause::kLoss, frame);
  std::vector<std::byte> first = acquire_buffer(frame);
  bool ecn = ecn_by_queue || port_mark;
  if (!c.ecn_mark.is_zero() && l.ecn.chance(c.ecn_mark.num, c.ecn_mark.den)) ecn = true;
  o.marked = ecn && mark_ce(first, *ip);
  if (o.marked) {
    ++l.stats.ecn_marked;
    ++total_.ecn_marked;
    if (port_mark) ++ports_.at(to).stats.ecn_marked;
  }
  std::vector<std::byte> second;
  if (fate.copies == 2) {
    ++l.stats.duplicated;
    ++total_.duplicated;
    second = acquire_buffer(first);
  }
  for (std::size_t copy = 0; copy < fate.copies; ++copy) {
    std::vector<std::byte>& buf = copy == 0 ? first : second;
    if (copy == 1 && slots_.size() - free_slots_.size() >= options_.max_in_flight_frames) {
      drop(now, from, to, &l, DropCause::kInFlightLimit, buf);
      release_buffer(std::move(buf));
      break;
    }
    launch(o, std::move(buf), fate.copy[copy], copy == 1);
  }
}

void Network::tap(TapPoint point, Instant t, HostId from, HostId to, ConstBytes frame,
                  DropCause cause) {
  if (tap_ == nullptr) return;
  TapEvent e;
  e.point = point;
  e.time = t;
  e.from = from;
  e.to = to;
  e.cause = cause;
  e.frame = frame;
  tap_->on_frame(e);
}

std::optional<Instant> Network::onto_link(Instant now, Link& l, const LinkConfig& c,
                                          std::size_t bytes, DropCause& cause, bool& ecn_by_queue) {
  // The transmit queue: frames whose serialization has not ended by `now`.
  while (!l.tx_queue.empty() && l.tx_queue.front().tx_end <= now) {
    l.tx_queue_bytes -= l.tx_queue.front().bytes;
    l.tx_queue.pop_front();
  }
  const bool queue_full =
      (c.queue_limit_packets != 0 && l.tx_queue.size() >= c.queue_limit_packets) ||
      (c.queue_limit_bytes != 0 && l.tx_queue_bytes + bytes > c.queue_limit_bytes);
  if (queue_full) {
    cause = DropCause::kQueueFull;
    return std::nullopt;
  }
  // A lost frame holds its place in the transmit queue but no slot: bound the queue as well, for
  // links without a queue limit.
  if (slots_.size() - free_slots_.size() >= options_.max_in_flight_frames ||
      l.tx_queue.size() >= options_.max_in_flight_frames) {
    cause = DropCause::kInFlightLimit;
    return std::nullopt;
  }
  ecn_by_queue = c.ecn_mark_queue_packets != 0 && l.tx_queue.size() >= c.ecn_mark_queue_packets;
  const Instant link_end =
      std::max(now, l.tx_busy_until) + serialization_time(bytes, c.bandwidth_bps);
  l.tx_busy_until = link_end;
  if (link_end > now) {
    l.tx_queue.push_back(QueuedFrame{link_end, bytes});
    l.tx_queue_bytes += bytes;
  }
  return link_end;
}

void Network::launch(const Outgoing& o, std::vector<std::byte>&& buf, fault::CopyFate& cf,
                     bool duplicate) {
  Link& l = *o.link;
  // extra_delay_ns: delay + jitter (+ reorder_delay_ns when reordered).
  const Instant arrival = o.tx_end + Duration::ns(cf.extra_delay_ns);
  if (cf.reordered) {
    ++l.stats.reordered;
    ++total_.reordered;
  }
  if (cf.corrupted) {
    fault::flip_bits(buf, 0, o.config->corrupt_bits, *cf.corrupt_rng);
    ++l.stats.corrupted;
    ++total_.corrupted;
  }
  const std::uint32_t slot = acquire_slot();
  InFlight& f = slots_[slot];
  f.frame = std::move(buf);
  f.sent_time = o.now;
  f.arrival = arrival;
  f.seq = next_seq_++;
  f.link = &l;
  f.cut_generation = l.cut_generation;
  f.duplicate = duplicate;
  f.reordered = cf.reordered;
  f.corrupted = cf.corrupted;
  f.ecn_marked = o.marked;
  f.departure = o.departure;
  if (o.departure) ports_.at(o.to).awaiting.insert(o.departure->id);
  arrivals_.push(Pending{arrival, f.seq, slot});
  ++in_flight_;
}

void Network::arrive(std::uint32_t slot) {
  InFlight& f = slots_[slot];
  Link& l = *f.link;
  --in_flight_;
  const bool cut = effectively_cut(l) || l.cut_generation != f.cut_generation;
  mark_at_departure(slot, !cut);
  if (cut) {
    drop(f.arrival, l.from, l.to, &l, DropCause::kPartition, f.frame);
    release_buffer(std::move(f.frame));
    free_slots_.push_back(slot);
    return;
  }
  ++l.stats.delivered_frames;
  l.stats.delivered_bytes += f.frame.size();
  ++total_.delivered_frames;
  total_.delivered_bytes += f.frame.size();
  ready_.push_back(slot);
  if (tap_ != nullptr) {
    TapEvent e;
    e.point = TapPoint::kDeliver;
    e.time = f.arrival;
    e.from = l.from;
    e.to = l.to;
    e.frame = f.frame;
    e.seq = f.seq;
    e.duplicate = f.duplicate;
    e.reordered = f.reordered;
    e.corrupted = f.corrupted;
    e.ecn_marked = f.ecn_marked;
    tap_->on_frame(e);
  }
}

void Network::advance(Instant now) {
  UROCE_CHECK(now >= now_);
  now_ = now;
  // Each iteration consumes one heap entry; both heaps are bounded.
  while (true) {
    const bool arrival_due = !arrivals_.empty() && arrivals_.top().time <= now;
    const bool event_due = !scheduled_.empty() && scheduled_.top().event.at <= now;
    if (!arrival_due && !event_due) break;
    bool take_event = event_due;
    if (arrival_due && event_due) {
      const Pending& a = arrivals_.top();
      const Scheduled& s = scheduled_.top();
      take_event = s.event.at != a.time ? s.event.at < a.time : s.seq < a.seq;
    }
    if (take_event) {
      const NetEvent e = scheduled_.top().event;
      scheduled_.pop();
      apply(e);
    } else {
      const std::uint32_t slot = arrivals_.top().slot;
      arrivals_.pop();
      arrive(slot);
    }
  }
}

Instant Network::next_event_time() const {
  if (!ready_.empty()) return slots_[ready_.front()].arrival;
  Instant t = Instant::never();
  if (!arrivals_.empty()) t = arrivals_.top().time;
  if (!scheduled_.empty()) t = earliest(t, scheduled_.top().event.at);
  return t;
}

bool Network::poll_delivery(Instant now, Delivery& out) {
  advance(now);
  if (ready_.empty()) return false;
  const std::uint32_t slot = ready_.front();
  ready_.pop_front();
  InFlight& f = slots_[slot];
  out.time = f.arrival;
  out.sent_time = f.sent_time;
  out.from = f.link->from;
  out.to = f.link->to;
  out.seq = f.seq;
  out.duplicate = f.duplicate;
  out.reordered = f.reordered;
  out.corrupted = f.corrupted;
  out.ecn_marked = f.ecn_marked;
  std::swap(out.frame, f.frame);
  release_buffer(std::move(f.frame));
  f.frame = {};
  free_slots_.push_back(slot);
  return true;
}

const LinkStats& Network::link_stats(HostId from, HostId to) const {
  static const LinkStats kZero;
  check_host(from);
  check_host(to);
  auto it = links_.find({from, to});
  return it == links_.end() ? kZero : it->second.stats;
}

}  // namespace uroce::sim

// Two CM endpoints back to back through a seeded lossy, duplicating, reordering in-memory channel
// with a manual clock, driven by applications that accept, reject, establish and disconnect at
// random times. The QP's data path is modelled only as far as the CM depends on it: a side that is
// up probes its peer now and then; the probe establishes a passive side still waiting for the RTU
// (IB_EVENT_COMM_EST) or, when the peer's connection is gone, fails like an RC QP that runs out of
// retries, and the application disconnects.
//
// Oracles: every connect either establishes on both sides with matching QP attributes or fails on
// both; a side that came up alone (its peer gave up on the RTU) is torn down within a bound; at the
// end no connection is left on either side and nothing is in flight; after the faults, a new
// connect establishes (liveness). A failure prints its seed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <queue>
#include <sstream>
#include <string>
#include <vector>

#include "cm/cm.h"

namespace uroce::cm {
namespace {

constexpr std::uint64_t kService = wire::rdma_service_id(wire::RdmaPortSpace::kTcp, 7471);
constexpr std::uint64_t kNoService = wire::rdma_service_id(wire::RdmaPortSpace::kTcp, 9);
constexpr std::uint64_t kUdpService = wire::rdma_service_id(wire::RdmaPortSpace::kUdp, 7471);

struct Faults {
  std::uint64_t loss_per_1000 = 0;
  std::uint64_t dup_per_1000 = 0;
  std::int64_t latency_ms = 1;
  std::int64_t jitter_ms = 0;  // reordering: each copy gets its own delay in [latency, +jitter]
  Instant partition_begin = Instant::never();
  Instant partition_end = Instant::never();
  bool canary_corrupt_rep_psn = false;  // a deliberately broken channel the oracle must catch
};

Faults faults_from_seed(Prng& prng) {
  Faults f;
  f.loss_per_1000 = prng.below(4) == 0 ? 0 : prng.range(0, 400);
  f.dup_per_1000 = prng.range(0, 200);
  f.latency_ms = static_cast<std::int64_t>(prng.range(1, 40));
  // Delays stay within the path's packet lifetime (2^18 * 4.096 us, about 1.07 s), as the CM's
  // timewait assumes.
  f.jitter_ms =
      static_cast<std::int64_t>(prng.below(3) == 0 ? prng.range(0, 1000) : prng.range(0, 50));
  if (prng.below(4) == 0) {
    f.partition_begin =
        Instant::from_ns(0) + Duration::ms(static_cast<std::int64_t>(prng.range(0, 100'000)));
    f.partition_end =
        f.partition_begin + Duration::ms(static_cast<std::int64_t>(prng.range(1000, 150'000)));
  }
  return f;
}

CmPeer peer_of(int ep) {
  CmPeer p;
  p.gid = wire::ipv4_mapped_gid(0x0a000001u + static_cast<std::uint32_t>(ep));
  return p;
}

class CmSim {
 public:
  CmSim(std::uint64_t seed, bool canary)
      : seed_(seed), prng_(seed), eps_{CmEndpoint(config(seed, 0)), CmEndpoint(config(seed, 1))} {
    faults_ = faults_from_seed(prng_);
    faults_.canary_corrupt_rep_psn = canary;
    for (auto& e : eps_) {
      UROCE_CHECK(e.listen(kService).ok());
      UROCE_CHECK(e.listen(kUdpService).ok());
    }
  }

  // Runs the fault phase and the liveness phase; returns "" or what went wrong.
  std::string run() {
    const int attempts = static_cast<int>(prng_.range(1, 6));
    for (int i = 0; i < attempts; ++i) {
      const Instant at = now_ + Duration::ms(static_cast<std::int64_t>(prng_.range(0, 60'000)));
      const int from = static_cast<int>(prng_.below(2));
      const bool listener = prng_.below(10) != 0;
      schedule(at, [this, from, listener] { start_attempt(from, listener, true); });
    }
    const int sidr_attempts = static_cast<int>(prng_.range(0, 3));
    for (int i = 0; i < sidr_attempts; ++i) {
      const Instant at = now_ + Duration::ms(static_cast<std::int64_t>(prng_.range(0, 60'000)));
      const int from = static_cast<int>(prng_.below(2));
      const bool listener = prng_.below(8) != 0;
      schedule(at, [this, from, listener] { start_sidr(from, listener); });
    }
    if (!run_until_quiet()) return failure_;
    if (!check_final("fault phase")) return failure_;

    // Liveness: no faults; a connect the application accepts must come up on both sides.
    faults_ = Faults{};
    const std::size_t live = start_attempt(static_cast<int>(prng_.below(2)), true, false);
    if (!run_until_quiet()) return failure_;
    if (!check_final("liveness phase")) return failure_;
    if (!sides_[attempts_[live].side[0]].established ||
        !sides_[attempts_[live].side[1]].established) {
      return fail("liveness: the connect after the faults did not establish on both sides");
    }
    return "";
  }

  std::string describe() const {
    std::ostringstream o;
    o << "seed " << seed_ << ": loss " << faults_.loss_per_1000 << "/1000, attempts "
      << attempts_.size() << ", half-open closed " << half_open_closed_;
    return o.str();
  }
  int half_open_closed() const { return half_open_closed_; }
  int established_both() const { return established_both_; }
  std::uint64_t retransmits() const {
    return eps_[0].counters().retransmits + eps_[1].counters().retransmits;
  }
  std::uint64_t duplicates() const {
    return eps_[0].counters().rx_duplicate + eps_[1].counters().rx_duplicate;
  }
  std::uint64_t answered() const {
    return eps_[0].counters().rx_answered + eps_[1].counters().rx_answered;
  }
  std::uint64_t qp_errors() const { return qp_errors_; }
  int sidr_resolved() const {
    int n = 0;
    for (const auto& a : sidr_) {
      n += a.got_reply && a.got_status == wire::SidrStatus::kSuccess ? 1 : 0;
    }
    return n;
  }

 private:
  struct Side {
    std::optional<ConnId> id;
    bool established = false;
    bool failed = false;  // rejected or unreachable before it was up
    bool up = false;
    bool gone = false;
    Instant up_since;
    Instant down_at = Instant::never();
    QpAttributes qp;
  };
  struct Attempt {
    int active_ep = 0;
    bool listener = true;
    bool may_reject = true;
    std::uint32_t active_qpn = 0;
    std::uint32_t passive_qpn = 0;
    std::vector<std::byte> private_data;
    std::size_t side[2] = {0, 0};  // indexes into sides_: 0 active, 1 passive
  };
  // A UD ID's address resolution (rdma_resolve_route for RDMA_PS_UDP): SIDR_REQ, SIDR_REP.
  struct SidrAttempt {
    int active_ep = 0;
    bool listener = true;
    int requests_seen = 0;  // kSidrRequest events on the passive side
    bool replied = false;   // the passive application answered (or destroyed)
    wire::SidrStatus reply_status = wire::SidrStatus::kSuccess;
    std::uint32_t reply_qpn = 0;
    std::uint32_t reply_qkey = 0;
    int results = 0;  // kSidrReply or kUnreachable on the active side
    bool got_reply = false;
    wire::SidrStatus got_status = wire::SidrStatus::kSuccess;
    std::uint32_t got_qpn = 0;
    std::uint32_t got_qkey = 0;
  };
  struct InFlight {
    Instant at;
    std::uint64_t seq;
    int to;
    std::array<std::byte, wire::kMadBytes> mad;
    bool operator>(const InFlight& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };

  static CmConfig config(std::uint64_t seed, int ep) {
    CmConfig c;
    c.seed = seed * 2 + static_cast<std::uint64_t>(ep);
    c.local_ca_guid = 0x0200000000000000ull + static_cast<std::uint64_t>(ep);
    c.send_mra = ((seed >> 1) & 1) != 0 && ep == 1;
    return c;
  }

  Duration ms(std::uint64_t lo, std::uint64_t hi) {
    return Duration::ms(static_cast<std::int64_t>(prng_.range(lo, hi)));
  }

  void schedule(Instant at, std::function<void()> f) {
    actions_.emplace(std::make_pair(at, action_seq_++), std::move(f));
  }

  std::string fail(const std::string& what) {
    if (failure_.empty()) {
      failure_ = describe() + ": " + what + "\nlast steps:\n";
      for (const auto& line : trace_) failure_ += line + "\n";
    }
    return failure_;
  }

  // The last steps of the run, printed with a failure.
  void trace(int ep, const std::string& what) {
    if (trace_.size() == 60) trace_.pop_front();
    trace_.push_back(std::to_string(now_.ns() / 1'000'000) + " ms ep" + std::to_string(ep) + " " +
                     what);
  }
  static std::string mad_name(const std::array<std::byte, wire::kMadBytes>& mad) {
    auto parsed = wire::parse_cm_mad(mad);
    if (!parsed.ok()) return "malformed";
    std::string out(wire::cm_attr_name(wire::cm_attr_of(parsed->message)));
    std::visit(
        [&](const auto& m) {
          if constexpr (requires { m.local_comm_id; }) {
            out += " local " + std::to_string(m.local_comm_id);
          }
          if constexpr (requires { m.remote_comm_id; }) {
            out += " remote " + std::to_string(m.remote_comm_id);
          }
          if constexpr (requires { m.reason; }) out += " reason " + std::to_string(m.reason);
        },
        parsed->message);
    return out;
  }

  std::size_t start_attempt(int from, bool listener, bool may_reject) {
    Attempt a;
    a.active_ep = from;
    a.listener = listener;
    a.may_reject = may_reject;
    a.active_qpn = next_qpn_++;
    a.passive_qpn = next_qpn_++;
    a.private_data.resize(prng_.range(0, 92));
    for (auto& b : a.private_data) b = std::byte(prng_.below(256));
    ConnectParams p;
    p.peer = peer_of(1 - from);
    p.local_gid = peer_of(from).gid;
    p.service_id = listener ? kService : kNoService;
    p.local_qpn = a.active_qpn;
    p.starting_psn = static_cast<std::uint32_t>(prng_.below(1u << 24));
    p.responder_resources = static_cast<std::uint8_t>(prng_.range(0, 16));
    p.initiator_depth = static_cast<std::uint8_t>(prng_.range(0, 16));
    p.retry_count = static_cast<std::uint8_t>(prng_.range(0, 7));
    p.rnr_retry_count = static_cast<std::uint8_t>(prng_.range(0, 7));
    p.path_mtu = static_cast<std::uint8_t>(prng_.range(1, 5));
    p.private_data = a.private_data;
    auto id = eps_[from].connect(now_, p);
    UROCE_CHECK(id.ok());
    a.side[0] = new_side();
    a.side[1] = new_side();
    sides_[a.side[0]].id = *id;
    attempts_.push_back(a);
    const std::size_t index = attempts_.size() - 1;
    owner_[{from, id->value}] = {index, a.side[0], 0};
    return index;
  }

  void start_sidr(int from, bool listener) {
    SidrAttempt a;
    a.active_ep = from;
    a.listener = listener;
    sidr_.push_back(a);
    const auto index = static_cast<std::uint32_t>(sidr_.size() - 1);
    std::array<std::byte, 4> pd{};
    store_be32(pd, 0, index);  // the passive application finds the attempt by it
    SidrParams p;
    p.peer = peer_of(1 - from);
    p.service_id = listener ? kUdpService : kNoService;
    p.private_data = pd;
    auto id = eps_[from].sidr_resolve(now_, p);
    UROCE_CHECK(id.ok());
    sidr_owner_[{from, id->value}] = index;
  }

  void on_sidr_request(int ep, const CmEvent& ev) {
    const std::uint32_t index = load_be32(as_bytes(ev.private_data.data(), 4), 0);
    if (index >= sidr_.size() || sidr_[index].active_ep != 1 - ep) {
      fail("a SIDR request nobody sent");
      return;
    }
    SidrAttempt& a = sidr_[index];
    if (++a.requests_seen > 1) {
      fail("a second SIDR request for one resolve");
      return;
    }
    const ConnId id = ev.id;
    // Sometimes later than the SIDR_REQ's timeout (4 s), so that it is retransmitted meanwhile.
    const Duration delay = prng_.below(4) == 0 ? ms(0, 9000) : ms(0, 300);
    a.replied = true;
    if (prng_.below(8) == 0) {
      a.reply_status = wire::SidrStatus::kReject;  // rdma_destroy_id: SIDR_REP Reject
      schedule(now_ + delay, [this, ep, id] { UROCE_CHECK(eps_[ep].destroy(now_, id).ok()); });
      return;
    }
    a.reply_qpn = next_qpn_++;
    a.reply_qkey = static_cast<std::uint32_t>(prng_.next());
    const std::uint32_t qpn = a.reply_qpn;
    const std::uint32_t qkey = a.reply_qkey;
    schedule(now_ + delay, [this, ep, id, qpn, qkey] {
      UROCE_CHECK(eps_[ep].sidr_reply(now_, id, wire::SidrStatus::kSuccess, qpn, qkey, {}).ok());
    });
  }

  // kSidrReply or kUnreachable for a SIDR ID; false when the ID is not one.
  bool on_sidr_result(int ep, const CmEvent& ev) {
    auto it = sidr_owner_.find({ep, ev.id.value});
    if (it == sidr_owner_.end()) return false;
    SidrAttempt& a = sidr_[it->second];
    if (++a.results > 1) {
      fail("two results for one SIDR resolve");
      return true;
    }
    if (ev.type == CmEventType::kSidrReply) {
      a.got_reply = true;
      a.got_status = ev.sidr_status;
      a.got_qpn = ev.sidr_qpn;
      a.got_qkey = ev.sidr_qkey;
    } else if (ev.type != CmEventType::kUnreachable) {
      fail("a SIDR ID got " + std::string(cm_event_name(ev.type)));
    }
    return true;
  }

  bool check_sidr(const std::string& where) {
    for (std::size_t i = 0; i < sidr_.size(); ++i) {
      const SidrAttempt& a = sidr_[i];
      const std::string tag = where + "SIDR " + std::to_string(i) + ": ";
      if (a.results != 1) {
        fail(tag + "no result");
        return false;
      }
      if (!a.got_reply) continue;  // unreachable: every SIDR_REQ or SIDR_REP was lost
      if (!a.listener) {
        if (a.got_status != wire::SidrStatus::kUnsupported || a.requests_seen != 0) {
          fail(tag + "no listener, yet not Unsupported");
          return false;
        }
        continue;
      }
      if (!a.replied || a.got_status != a.reply_status ||
          (a.got_status == wire::SidrStatus::kSuccess &&
           (a.got_qpn != a.reply_qpn || a.got_qkey != a.reply_qkey))) {
        fail(tag + "the SIDR_REP received is not the one sent");
        return false;
      }
    }
    return true;
  }

  std::size_t new_side() {
    sides_.emplace_back();
    return sides_.size() - 1;
  }

  // ---- the run loop ----

  bool run_until_quiet() {
    for (std::uint64_t step = 0; step < 200'000; ++step) {
      flush();
      if (!failure_.empty()) return false;
      Instant next = Instant::never();
      if (!wire_.empty()) next = earliest(next, wire_.top().at);
      if (!actions_.empty()) next = earliest(next, actions_.begin()->first.first);
      for (auto& e : eps_) next = earliest(next, e.poll_timeout());
      if (next.is_never()) return true;
      UROCE_CHECK(next >= now_);
      now_ = next;
      if (!wire_.empty() && wire_.top().at == now_) {
        InFlight m = wire_.top();
        wire_.pop();
        const CmRx rx = eps_[m.to].handle_mad(now_, peer_of(1 - m.to), m.mad);
        trace(m.to, "rx " + mad_name(m.mad) + " -> " + std::to_string(static_cast<int>(rx)));
        continue;
      }
      if (!actions_.empty() && actions_.begin()->first.first == now_) {
        auto f = std::move(actions_.begin()->second);
        actions_.erase(actions_.begin());
        f();
        continue;
      }
      for (auto& e : eps_) e.handle_timeout(now_);
    }
    fail("did not go quiet in 200000 steps");
    return false;
  }

  // Moves what the endpoints send into the channel and hands their events to the applications.
  void flush() {
    for (int ep = 0; ep < 2; ++ep) {
      while (auto out = eps_[ep].poll_transmit()) {
        if (out->to != peer_of(1 - ep)) {
          fail("a MAD addressed to a peer that is not there");
          return;
        }
        transmit(1 - ep, out->mad);
      }
      while (auto ev = eps_[ep].poll_event()) on_event(ep, *ev);
    }
  }

  void transmit(int to, std::array<std::byte, wire::kMadBytes> mad) {
    const bool partitioned = now_ >= faults_.partition_begin && now_ < faults_.partition_end;
    if (partitioned || prng_.chance(faults_.loss_per_1000, 1000)) {
      trace(1 - to, "tx " + mad_name(mad) + " (lost)");
      return;
    }
    trace(1 - to, "tx " + mad_name(mad));
    if (faults_.canary_corrupt_rep_psn &&
        load_be16(mad, wire::kMadOffAttrId) == static_cast<std::uint16_t>(wire::CmAttr::kRep)) {
      auto parsed = wire::parse_cm_mad(mad);
      UROCE_CHECK(parsed.ok());
      std::get<wire::CmRep>(parsed->message).starting_psn ^= 1;
      mad = wire::build_cm_mad(*parsed);
    }
    const int copies = prng_.chance(faults_.dup_per_1000, 1000) ? 2 : 1;
    for (int i = 0; i < copies; ++i) {
      const Duration delay = Duration::ms(faults_.latency_ms) +
                             Duration::ms(static_cast<std::int64_t>(
                                 prng_.range(0, static_cast<std::uint64_t>(faults_.jitter_ms))));
      wire_.push(InFlight{now_ + delay, wire_seq_++, to, mad});
    }
  }

  // ---- the applications ----

  void on_event(int ep, const CmEvent& ev) {
    trace(ep,
          "event " + std::string(cm_event_name(ev.type)) + " id " + std::to_string(ev.id.value));
    if (ev.type == CmEventType::kConnectRequest) {
      on_connect_request(ep, ev);
      return;
    }
    if (ev.type == CmEventType::kSidrRequest) {
      on_sidr_request(ep, ev);
      return;
    }
    if (on_sidr_result(ep, ev)) return;
    auto it = owner_.find({ep, ev.id.value});
    if (it == owner_.end()) {
      fail(std::string("event ") + std::string(cm_event_name(ev.type)) + " for an unknown ID");
      return;
    }
    const auto [index, side_index, role] = it->second;
    Attempt& a = attempts_[index];
    Side& s = sides_[side_index];
    if (s.gone) {
      fail("an event after timewait exit");
      return;
    }
    switch (ev.type) {
      case CmEventType::kConnectResponse: {
        if (role != 0) {
          fail("connect response on the passive side");
          return;
        }
        const ConnId id = ev.id;
        if (a.may_reject && prng_.below(16) == 0) {
          schedule(now_ + ms(0, 2000), [this, ep, id] { (void)eps_[ep].reject(now_, id, {}); });
        } else {
          schedule(now_ + ms(0, 2000), [this, ep, id] { (void)eps_[ep].establish(now_, id); });
        }
        return;
      }
      case CmEventType::kEstablished: {
        if (s.established) {
          fail("established twice");
          return;
        }
        s.established = true;
        s.up = true;
        s.up_since = now_;
        s.qp = ev.qp;
        const Duration first_probe = prng_.below(4) == 0 ? ms(500, 90'000) : ms(100, 3000);
        schedule(now_ + first_probe,
                 [this, index, side_index, role] { probe(index, side_index, role); });
        if (role == 0 || prng_.below(2) == 0) {
          const ConnId id = ev.id;
          close_later(ep, side_index, id, ms(1000, 120'000));
        }
        return;
      }
      case CmEventType::kRejected:
      case CmEventType::kUnreachable:
        if (s.established) {
          fail("rejected or unreachable after established");
          return;
        }
        s.failed = true;
        return;
      case CmEventType::kDisconnected: {
        if (s.up) {
          s.up = false;
          s.down_at = now_;
        }
        const ConnId id = ev.id;
        // As rdma_cm users do: rdma_disconnect() (sends the DREP if it is due) or
        // rdma_destroy_id() on DISCONNECTED.
        close_later(ep, side_index, id, ms(0, 500));
        return;
      }
      case CmEventType::kTimewaitExit:
        if (s.up) {
          fail("timewait exit while up");
          return;
        }
        s.gone = true;
        return;
      default:
        fail("unexpected event");
        return;
    }
  }

  void on_connect_request(int ep, const CmEvent& ev) {
    std::size_t index = attempts_.size();
    for (std::size_t i = 0; i < attempts_.size(); ++i) {
      if (attempts_[i].active_qpn == ev.qp.remote_qpn) index = i;
    }
    if (index == attempts_.size() || attempts_[index].active_ep != 1 - ep) {
      fail("a connect request nobody sent");
      return;
    }
    Attempt& a = attempts_[index];
    if (sides_[a.side[1]].id.has_value()) {
      fail("a second connect request for one connect");
      return;
    }
    for (std::size_t i = 0; i < 92; ++i) {
      const std::uint8_t want =
          i < a.private_data.size() ? static_cast<std::uint8_t>(a.private_data[i]) : 0;
      if (ev.private_data[i] != want) {
        fail("REQ private data differs");
        return;
      }
    }
    sides_[a.side[1]].id = ev.id;
    owner_[{ep, ev.id.value}] = {index, a.side[1], 1};
    const ConnId id = ev.id;
    if (a.may_reject && prng_.below(8) == 0) {
      const std::size_t side_index = a.side[1];
      if (prng_.below(2) == 0) {
        destroy_later(ep, side_index, id, ms(0, 3000));  // rdma_destroy_id() before accept
      } else {
        schedule(now_ + ms(0, 3000), [this, ep, id] { (void)eps_[ep].reject(now_, id, {}); });
      }
      return;
    }
    AcceptParams p;
    p.local_qpn = a.passive_qpn;
    p.starting_psn = static_cast<std::uint32_t>(prng_.below(1u << 24));
    p.responder_resources = static_cast<std::uint8_t>(prng_.range(0, 16));
    p.initiator_depth = static_cast<std::uint8_t>(prng_.range(0, 16));
    p.rnr_retry_count = static_cast<std::uint8_t>(prng_.range(0, 7));
    // Sometimes later than the REQ's timeout, so that the REQ is retransmitted meanwhile.
    const Duration delay = prng_.below(4) == 0 ? ms(0, 12'000) : ms(0, 500);
    schedule(now_ + delay, [this, ep, id, p] { (void)eps_[ep].accept(now_, id, p); });
  }

  // rdma_disconnect(), or now and then rdma_destroy_id() (after which the ID gives no events).
  void close_later(int ep, std::size_t side_index, ConnId id, Duration delay) {
    if (prng_.below(4) != 0) {
      schedule(now_ + delay, [this, ep, id] { (void)eps_[ep].disconnect(now_, id, {}); });
    } else {
      destroy_later(ep, side_index, id, delay);
    }
  }

  void destroy_later(int ep, std::size_t side_index, ConnId id, Duration delay) {
    schedule(now_ + delay, [this, ep, side_index, id] {
      if (!eps_[ep].destroy(now_, id).ok()) return;
      Side& s = sides_[side_index];
      trace(ep, "destroy id " + std::to_string(id.value));
      if (s.up) {
        s.up = false;
        s.down_at = now_;
      }
      if (!s.established) s.failed = true;
      s.gone = true;
    });
  }

  // The data path as the CM sees it: a packet from an up side reaches the peer's QP.
  void probe(std::size_t index, std::size_t side_index, int role, int tries = 0) {
    Attempt& a = attempts_[index];
    Side& s = sides_[side_index];
    if (!s.up) return;
    const Side& peer = sides_[a.side[1 - role]];
    const int ep = role == 0 ? a.active_ep : 1 - a.active_ep;
    const bool partitioned = now_ >= faults_.partition_begin && now_ < faults_.partition_end;
    if (partitioned && tries < 7) {
      // The RC QP retransmits (retry count 7, an ACK timeout of about 2 s each).
      schedule(now_ + Duration::s(2), [this, index, side_index, role, tries] {
        probe(index, side_index, role, tries + 1);
      });
      return;
    }
    bool peer_alive = false;
    if (peer.id.has_value() && !partitioned) {
      peer_alive = eps_[1 - ep].handle_comm_established(now_, *peer.id).ok();
    }
    if (peer_alive) {
      schedule(now_ + ms(5000, 30'000),
               [this, index, side_index, role] { probe(index, side_index, role); });
      return;
    }
    // RC retries exhausted (IBV_WC_RETRY_EXC_ERR): the application disconnects.
    ++qp_errors_;
    trace(ep, "QP error: disconnect");
    (void)eps_[ep].disconnect(now_, *s.id, {});
  }

  // ---- oracles ----

  bool check_final(const char* phase) {
    const std::string where = std::string(phase) + ": ";
    for (int ep = 0; ep < 2; ++ep) {
      if (eps_[ep].connection_count() != 0) {
        fail(where + "connections left on endpoint " + std::to_string(ep));
        return false;
      }
    }
    if (!wire_.empty()) {
      fail(where + "MADs in flight at the end");
      return false;
    }
    for (std::size_t i = 0; i < attempts_.size(); ++i) {
      if (checked_ > i) continue;
      Attempt& a = attempts_[i];
      const Side& act = sides_[a.side[0]];
      const Side& pas = sides_[a.side[1]];
      const std::string tag = where + "connect " + std::to_string(i) + ": ";
      if (!a.listener && (act.established || pas.id.has_value())) {
        fail(tag + "a connect to no listener got somewhere");
        return false;
      }
      if (act.up || pas.up) {
        fail(tag + "still up at the end");
        return false;
      }
      if (act.established && pas.established) {
        ++established_both_;
        const QpAttributes& x = act.qp;
        const QpAttributes& y = pas.qp;
        if (x.local_qpn != y.remote_qpn || x.remote_qpn != y.local_qpn || x.sq_psn != y.rq_psn ||
            x.rq_psn != y.sq_psn || x.max_rd_atomic != y.max_dest_rd_atomic ||
            x.max_dest_rd_atomic != y.max_rd_atomic || x.path_mtu != y.path_mtu ||
            x.retry_count != y.retry_count || x.rnr_retry != y.rnr_retry || x.pkey != y.pkey) {
          fail(tag + "QP attributes do not match");
          return false;
        }
      } else if (act.established != pas.established) {
        // Up alone: the peer gave up (no RTU reached it) and its REJ was lost. The data path
        // must have torn it down within a probe interval plus the DREQ's retries.
        const Side& alone = act.established ? act : pas;
        const Duration lived = alone.down_at - alone.up_since;
        if (alone.down_at.is_never() || lived > Duration::s(300)) {
          fail(tag + "half-open for too long");
          return false;
        }
        ++half_open_closed_;
      }
    }
    checked_ = attempts_.size();
    return check_sidr(where);
  }

  std::uint64_t seed_;
  Prng prng_;
  Faults faults_;
  CmEndpoint eps_[2];
  Instant now_ = Instant::from_ns(0);
  std::vector<Attempt> attempts_;
  std::deque<Side> sides_;
  std::vector<SidrAttempt> sidr_;
  std::map<std::pair<int, std::uint32_t>, std::uint32_t> sidr_owner_;
  // (endpoint, ID) -> (attempt, side, role)
  std::map<std::pair<int, std::uint32_t>, std::tuple<std::size_t, std::size_t, int>> owner_;
  std::priority_queue<InFlight, std::vector<InFlight>, std::greater<InFlight>> wire_;
  std::uint64_t wire_seq_ = 0;
  std::map<std::pair<Instant, std::uint64_t>, std::function<void()>> actions_;
  std::uint64_t action_seq_ = 0;
  std::uint32_t next_qpn_ = 0x100;
  std::size_t checked_ = 0;
  int half_open_closed_ = 0;
  int established_both_ = 0;
  std::uint64_t qp_errors_ = 0;
  std::string failure_;
  std::deque<std::string> trace_;
};

// Seeds 1..500; UROCE_CM_SIM_SEEDS=N runs seeds 1..N instead (a longer swarm).
TEST(CmSim, SeedsUnderLossDuplicationReorderingAndPartitions) {
  std::uint64_t kSeeds = 500;
  if (const char* n = std::getenv("UROCE_CM_SIM_SEEDS")) kSeeds = std::strtoull(n, nullptr, 10);
  int both = 0;
  int half_open = 0;
  std::uint64_t retransmits = 0;
  std::uint64_t duplicates = 0;
  std::uint64_t answered = 0;
  std::uint64_t qp_errors = 0;
  int sidr = 0;
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    CmSim sim(seed, false);
    const std::string failure = sim.run();
    ASSERT_EQ(failure, "") << "reproduce with seed " << seed;
    both += sim.established_both();
    half_open += sim.half_open_closed();
    retransmits += sim.retransmits();
    duplicates += sim.duplicates();
    answered += sim.answered();
    qp_errors += sim.qp_errors();
    sidr += sim.sidr_resolved();
  }
  // The runs must exercise the interesting paths, not only clean connects.
  EXPECT_GT(both, 200);
  EXPECT_GT(retransmits, 100u);
  EXPECT_GT(duplicates, 100u);
  EXPECT_GT(answered, 10u);
  EXPECT_GT(sidr, 100);
  std::printf(
      "cm sim: %llu seeds, %d connections up on both sides, %d up alone and torn down; "
      "%llu retransmissions, %llu duplicates received, %llu stale MADs answered, %llu QP errors; "
      "%d SIDR resolves\n",
      static_cast<unsigned long long>(kSeeds), both, half_open,
      static_cast<unsigned long long>(retransmits), static_cast<unsigned long long>(duplicates),
      static_cast<unsigned long long>(answered), static_cast<unsigned long long>(qp_errors), sidr);
}

// The canary: a channel that corrupts the REP's starting PSN. The oracle must notice.
TEST(CmSim, CanaryCorruptedRepPsnIsCaught) {
  int caught = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    CmSim sim(seed, true);
    if (sim.run().find("QP attributes do not match") != std::string::npos) ++caught;
  }
  EXPECT_GT(caught, 10);
}

}  // namespace
}  // namespace uroce::cm

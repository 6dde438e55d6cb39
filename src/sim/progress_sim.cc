#include "sim/progress_sim.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "base/prng.h"
#include "datapath/datapath.h"
#include "sim/failure.h"
#include "sim/network.h"
#include "sim/sim_socket.h"
#include "transport/qp.h"
#include "uroce/verbs.h"
#include "verbs/address.h"
#include "verbs/connect.h"
#include "wire/builder.h"
#include "wire/icrc.h"
#include "wire/opcode.h"
#include "wire/packet.h"

namespace uroce::sim {

namespace {

using engine::AppAfter;
using engine::Owner;
using engine::RoundPlan;
using engine::RoundReport;
using engine::Scheduler;
using engine::ThreadAction;

constexpr std::uint32_t kMaxMessage = 3000;  // up to 3 packets at path MTU 1024
constexpr std::size_t kSlot = 4096;          // one message's room in an arena
constexpr std::size_t kSlots = 8;            // receive buffers, reused in turn
// Sources and WRITE targets, reused in turn: as many as the send queue's depth, so that no
// message's source or target is reused while it may still be read or written (with a window of
// 16 and 8 of them, a WRITE that congestion control held back read the source of the one posted
// 8 after it).
constexpr std::size_t kSendSlots = 16;
constexpr std::size_t kSourceOffset = 0;
constexpr std::size_t kRecvOffset = kSendSlots * kSlot;
constexpr std::size_t kTargetOffset = kRecvOffset + kSlots * kSlot;
constexpr std::size_t kArenaBytes = kTargetOffset + kSendSlots * kSlot;
std::size_t source_off(std::uint64_t i) { return kSourceOffset + (i % kSendSlots) * kSlot; }
std::size_t recv_off(std::uint64_t k) { return kRecvOffset + (k % kSlots) * kSlot; }
std::size_t target_off(std::uint64_t i) { return kTargetOffset + (i % kSendSlots) * kSlot; }
constexpr std::uint64_t kChannel = 1;  // the CQ's completion channel tag

constexpr std::uint32_t kAllAccess =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

struct Run;

// One process: its device, engine and scheduler, the socket (frames arrived, not yet received),
// the progress thread's state and the application thread's.
struct SimHost final : engine::QpDirectory,
                       datapath::Datapath,
                       CompletionEventHandler,
                       DoorbellHandler {
  enum class ThreadState : std::uint8_t { kNone, kReady, kSpin, kSleep, kOffSocket };

  Run* run = nullptr;
  int index = 0;
  HostId id = 0;
  wire::IpAddress ip;
  std::unique_ptr<Device> dev;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<Scheduler> sched;
  Prng rng{1};
  std::vector<std::byte> arena;  // kArenaBytes: sources, receive slots, WRITE targets
  MrInfo mr;
  CqHandle cq;
  QpHandle qp;
  std::uint32_t qpn = 0;
  std::deque<std::vector<std::byte>> socket;
  std::vector<std::byte> frame;

  // Flush and held-ACK accounting.
  std::size_t batch_packets = 0;
  std::size_t batch_acks = 0;
  Instant held_since = Instant::never();

  // The progress thread.
  ThreadState tstate = ThreadState::kNone;
  Instant t_ready = Instant::never();
  ThreadAction action;
  Instant signal_at = Instant::never();  // a wake-up signal arrives (latency included)
  Instant io_at = Instant::never();      // the watched socket wakes the thread
  Instant spin_start = Instant::from_ns(0);

  // The application thread.
  AppModel model = AppModel::kPolling;
  Instant app_at = Instant::never();
  bool app_blocked = false;
  bool poster_turn = false;    // kBlockedWaiterOtherPoster: the poster acts next
  bool event_pending = false;  // the channel holds a completion event
  bool arm_next = false;       // kPollThenArm: its last poll found the CQ empty
  bool quiet = false;          // posting with quiet doorbells (the drop-in's post)

  // The workload.
  std::uint32_t sent = 0;
  std::uint32_t received = 0;
  std::uint32_t send_completions = 0;
  std::uint64_t recv_next = 0;  // receives posted so far (slot = count % kSlots)

  HostReport report;

  std::uint64_t va(std::size_t off) const {
    return reinterpret_cast<std::uint64_t>(arena.data()) + off;
  }
  transport::Qp* find_qp(std::uint32_t n) override { return dev->find_qp(n); }
  std::size_t receive(Instant now, std::size_t max, const RxHandler& handler) override;
  bool send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
            std::span<const ConstBytes> payload) override;
  void flush(Instant now) override;
  void cq_event(CqHandle, std::uint64_t) override;
  void doorbell(std::uint32_t n) override;
  void qp_changing(std::uint32_t) override;
  void qp_destroying(std::uint32_t n) override;
};

struct Run {
  ProgressSimOptions opt;
  Prng rng;
  Network net;
  SimHost hosts[2];
  Instant now = Instant::from_ns(1'000'000);
  Instant start = now;
  ProgressSimResult result;
  std::int64_t wake_latency_ns = 0;  // upper bounds, drawn from the seed
  std::int64_t poll_gap_ns = 0;

  explicit Run(const ProgressSimOptions& o) : opt(o), rng(o.seed ^ 0x9e0c), net(o.seed) {}

  void fail(const std::string& what) {
    if (!result.ok) return;
    result.ok = false;
    result.failure = failure_text(opt.seed, now - start, what);
  }
  Instant wake_after() { return now + Duration::ns(1 + rng.below(wake_latency_ns)); }
  Duration poll_gap() { return Duration::ns(50 + rng.below(poll_gap_ns)); }
  void signal(SimHost& h) {
    if (h.tstate == SimHost::ThreadState::kSleep || h.tstate == SimHost::ThreadState::kOffSocket) {
      h.signal_at = std::min(h.signal_at, wake_after());
    }
  }
};

bool SimHost::send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
                   std::span<const ConstBytes> payload) {
  send_frame(run->net, id, now, o, transport_headers, payload, frame);
  ++batch_packets;
  if (!transport_headers.empty() && static_cast<std::uint8_t>(transport_headers[0]) ==
                                        static_cast<std::uint8_t>(wire::Opcode::kRcAcknowledge)) {
    ++batch_acks;
    ++report.acks_sent;
  }
  return true;
}

// The socket: frames arrived, read in order (sim_socket.h).
std::size_t SimHost::receive(Instant, std::size_t max, const RxHandler& handler) {
  return receive_frames(socket, max, handler, [this] {
    run->fail("host " + std::to_string(index) + " received an invalid frame");
  });
}

void SimHost::flush(Instant) {
  if (batch_packets == 0) return;
  ++report.flushes;
  if (batch_acks == batch_packets) ++report.lone_ack_flushes;
  batch_packets = 0;
  batch_acks = 0;
}

void SimHost::cq_event(CqHandle, std::uint64_t) {
  event_pending = true;
  if (app_blocked) app_at = std::min(app_at, run->wake_after());
}

void SimHost::doorbell(std::uint32_t n) {
  engine->doorbell(n);
  if (sched->doorbell(quiet)) run->signal(*this);
}

void SimHost::qp_changing(std::uint32_t) { engine->flush_held_acks(run->now, sched->acks()); }

void SimHost::qp_destroying(std::uint32_t n) { engine->qp_destroying(run->now, n); }

// ---- setup ---------------------------------------------------------------------------------

bool connect(SimHost& s, const SimHost& peer, std::uint8_t timeout) {
  verbs::RcConnection c;
  c.peer_ip = peer.ip;
  c.peer_qpn = peer.qpn;
  c.sq_psn = 0x100;
  c.rq_psn = 0x100;
  c.timeout = timeout;
  c.access = kAllAccess;
  return verbs::connect_rc_qp(*s.dev, s.qp, c) == Errc::kOk;
}

bool make_host(Run& r, SimHost& h, int index) {
  h.run = &r;
  h.index = index;
  h.rng = Prng(r.opt.seed * 31 + static_cast<std::uint64_t>(index));
  h.ip = wire::IpAddress::v4(0x0a640000u + 1 + static_cast<std::uint32_t>(index));
  auto id =
      r.net.add_host(h.ip, MacAddress{0x02, 0, 0, 0, 1, static_cast<std::uint8_t>(index + 1)});
  if (!id.ok()) return false;
  h.id = id.value();
  DeviceConfig cfg;
  cfg.name = "progress" + std::to_string(index);
  cfg.ip = h.ip;
  cfg.netdev_mtu = 1500;
  cfg.seed = r.opt.seed * 1000 + static_cast<std::uint64_t>(index);
  auto dev = Device::create(cfg);
  if (!dev.ok()) return false;
  h.dev = std::move(dev.value());
  h.engine = std::make_unique<engine::Engine>(h, h, h.ip);
  engine::SchedulerConfig sc = r.opt.policy;
  sc.progress_thread = r.opt.thread[index];
  h.sched = std::make_unique<Scheduler>(sc);
  h.dev->set_doorbell_handler(&h);
  h.dev->set_completion_event_handler(&h);
  h.arena.assign(kArenaBytes, std::byte{0});
  auto pd = h.dev->alloc_pd();
  if (!pd.ok()) return false;
  auto mr = h.dev->reg_mr(pd.value(), h.arena.data(), h.arena.size(), kAllAccess);
  if (!mr.ok()) return false;
  h.mr = mr.value();
  auto cq = h.dev->create_cq(CqInitAttr{1024, kChannel, 0});
  if (!cq.ok()) return false;
  h.cq = cq->handle;
  QpInitAttr init;
  init.send_cq = h.cq;
  init.recv_cq = h.cq;
  init.cap = QpCap{kSendSlots, static_cast<std::uint32_t>(kSlots), 1, 1, 0};
  auto qp = h.dev->create_qp(pd.value(), init);
  if (!qp.ok()) return false;
  h.qp = qp->handle;
  h.qpn = qp->qp_num;
  h.model = r.opt.app[index];
  h.tstate = r.opt.thread[index] ? SimHost::ThreadState::kReady : SimHost::ThreadState::kNone;
  h.t_ready = r.now;
  return true;
}

// ---- the workload --------------------------------------------------------------------------

// Message `i` from host `from`: its length and bytes, a function of the seed.
std::uint32_t message_len(const Run& r, int from, std::uint32_t i) {
  Prng p(r.opt.seed * 7919 + static_cast<std::uint64_t>(from) * 104729 + i);
  return 1 + static_cast<std::uint32_t>(p.below(std::min(r.opt.max_message, kMaxMessage)));
}
void message_bytes(const Run& r, int from, std::uint32_t i, std::span<std::byte> out) {
  Prng p(r.opt.seed * 15485863 + static_cast<std::uint64_t>(from) * 32452843 + i);
  for (auto& b : out) b = static_cast<std::byte>(p.next());
}

bool post_recv(SimHost& h) {
  const std::size_t off = recv_off(h.recv_next);
  const Sge sge{h.va(off), static_cast<std::uint32_t>(kSlot), h.mr.lkey};
  const RecvWr w{h.recv_next, std::span(&sge, 1)};
  ++h.recv_next;
  return h.dev->post_recv(h.qp, std::span(&w, 1), nullptr) == Errc::kOk;
}

// The application posts its next message (a SEND, or a WRITE into the peer's slot), as the
// drop-in's ibv_post_send does: quiet doorbell, then a transmit round of its own.
void transmit_round(SimHost& h);
void post_next(Run& r, SimHost& h, const SimHost& peer, bool write) {
  const std::uint32_t i = h.sent;
  const std::uint32_t len = message_len(r, h.index, i);
  const std::size_t src = source_off(i);
  message_bytes(r, h.index, i, std::span(h.arena.data() + src, len));
  const Sge sge{h.va(src), len, h.mr.lkey};
  SendWr w;
  w.wr_id = i;
  w.sg_list = std::span(&sge, 1);
  // A host signals every signal_every-th message and its last (kWrites: every WRITE); in
  // kStreams also the one that fills its window, or it could wait for a completion forever.
  const bool streams = r.opt.workload == Workload::kStreams;
  const std::uint32_t every = write && !streams ? 1 : r.opt.signal_every[h.index];
  if (every <= 1 || (i + 1) % every == 0 || i + 1 == r.opt.messages ||
      (streams && i + 1 - h.send_completions >= r.opt.window)) {
    w.send_flags = kSendSignaled;
  }
  w.opcode = write ? WrOpcode::kRdmaWrite : WrOpcode::kSend;
  if (write) w.rdma = {peer.va(target_off(i)), peer.mr.rkey};
  h.quiet = h.sched->config().progress_thread;
  const SendWr* bad = nullptr;
  const Errc e = h.dev->post_send(h.qp, std::span(&w, 1), &bad);
  h.quiet = false;
  if (e != Errc::kOk) {
    r.fail("host " + std::to_string(h.index) + ": post_send failed: " + errc_name(e));
    return;
  }
  ++h.sent;
  transmit_round(h);
}

bool pingpong(const Run& r) {
  return r.opt.workload == Workload::kPingPong ||
         r.opt.workload == Workload::kPingPongAfterCompletion;
}

// A host of kPingPongAfterCompletion that signals every SEND waits for each one's completion.
bool waits_for_completions(const Run& r, const SimHost& h) {
  return r.opt.signal_every[h.index] <= 1;
}

// A ping-pong host's next SEND, once it has the peer's message it answers (host 0 starts) and,
// in kPingPongAfterCompletion, its own last SEND completed.
void maybe_post_answer(Run& r, SimHost& h, SimHost& peer) {
  if (h.sent >= r.opt.messages || h.received < h.sent + (h.index == 1 ? 1u : 0u)) return;
  if (r.opt.workload == Workload::kPingPongAfterCompletion && waits_for_completions(r, h) &&
      h.send_completions != h.sent) {
    return;
  }
  post_next(r, h, peer, false);
}

// kStreams: WRITEs up to the window, or up to the last message.
void fill_window(Run& r, SimHost& h, SimHost& peer) {
  while (r.result.ok && h.sent < r.opt.messages && h.sent - h.send_completions < r.opt.window) {
    post_next(r, h, peer, true);
  }
}

// kStreams: WRITE `i` completed, so its bytes landed in its target, which no later WRITE can
// have reused yet (kSendSlots: the application posts WRITE i + kSendSlots only after it polled
// i's completion, its window being at most the send queue).
bool stream_write_landed(const Run& r, const SimHost& h, const SimHost& peer, std::uint32_t i) {
  const std::uint32_t len = message_len(r, h.index, i);
  std::vector<std::byte> want(len);
  message_bytes(r, h.index, i, want);
  return std::memcmp(peer.arena.data() + target_off(i), want.data(), len) == 0;
}

bool host_done(const Run& r, const SimHost& h) {
  if (r.opt.workload == Workload::kStreams) {
    return h.sent == r.opt.messages && h.send_completions == r.opt.messages;
  }
  if (pingpong(r)) {
    return h.received == r.opt.messages && h.send_completions == r.opt.messages;
  }
  if (h.index == 0) return h.send_completions == r.opt.messages;
  const transport::Qp* q = h.dev->find_qp(h.qpn);
  return q != nullptr && q->outstanding_send_wqes() == 0;
}

// Handles what the application polled from its CQ.
void handle_completions(Run& r, SimHost& h, std::span<const Wc> wcs) {
  SimHost& peer = r.hosts[1 - h.index];
  for (const Wc& wc : wcs) {
    const std::string who = "host " + std::to_string(h.index) + ": ";
    if (wc.status != WcStatus::kSuccess) {
      r.fail(who + "WR " + std::to_string(wc.wr_id) + " completed with " +
             wc_status_name(wc.status));
      return;
    }
    if (wc.opcode == WcOpcode::kRecv) {
      const std::uint32_t i = h.received++;
      const std::uint32_t len = message_len(r, peer.index, i);
      std::vector<std::byte> want(len);
      message_bytes(r, peer.index, i, want);
      const std::size_t off = recv_off(wc.wr_id);
      if (wc.byte_len != len || std::memcmp(h.arena.data() + off, want.data(), len) != 0) {
        r.fail(who + "message " + std::to_string(i) + " arrived altered");
        return;
      }
      ++h.report.messages_received;
      if (!post_recv(h)) r.fail(who + "post_recv failed");
      maybe_post_answer(r, h, peer);
      continue;
    }
    // RC completes in order: a signaled completion stands for every WR before it.
    const auto done = static_cast<std::uint32_t>(wc.wr_id) + 1;
    if (done <= h.send_completions || done > h.sent) {
      r.fail(who + "send completion of WR " + std::to_string(wc.wr_id) + " after " +
             std::to_string(h.send_completions) + " of " + std::to_string(h.sent) + " sent");
      return;
    }
    h.send_completions = done;
    if (r.opt.workload == Workload::kStreams) {
      if (!stream_write_landed(r, h, peer, done - 1)) {
        r.fail(who + "WRITE " + std::to_string(done - 1) + " did not land");
        return;
      }
      fill_window(r, h, peer);
      continue;
    }
    if (r.opt.workload == Workload::kPingPongAfterCompletion) maybe_post_answer(r, h, peer);
    if (wc.opcode == WcOpcode::kRdmaWrite && h.index == 0) {
      // A WRITE's completion means its bytes are in the target.
      const auto i = static_cast<std::uint32_t>(wc.wr_id);
      const std::uint32_t len = message_len(r, h.index, i);
      std::vector<std::byte> want(len);
      message_bytes(r, h.index, i, want);
      const std::size_t off = target_off(i);
      if (std::memcmp(peer.arena.data() + off, want.data(), len) != 0) {
        r.fail(who + "WRITE " + std::to_string(i) + " did not land");
        return;
      }
      if (h.sent < r.opt.messages) post_next(r, h, peer, true);
    }
  }
}

// ---- rounds ---------------------------------------------------------------------------------

void note_held(Run& r, SimHost& h) {
  const bool held = !h.sched->acks().due().is_never();
  if (held && h.held_since.is_never()) h.held_since = r.now;
  if (!held && !h.held_since.is_never()) {
    h.report.max_ack_held_ns =
        std::max(h.report.max_ack_held_ns, (r.now - h.held_since).count_ns());
    h.held_since = Instant::never();
  }
}

// The engine's round, as UdpDevice runs it (Engine::round): the socket is h.socket, read by
// SimHost::receive.
RoundReport round(Run& r, SimHost& h, const RoundPlan& plan, bool receive) {
  return h.engine->round(
      r.now, plan,
      receive ? engine::Engine::RoundKind::kReceive : engine::Engine::RoundKind::kTransmit);
}

void app_round(Run& r, SimHost& h, bool receive) {
  const engine::AppRound a = engine::run_app_round(
      *h.engine, *h.sched, r.now,
      receive ? engine::Engine::RoundKind::kReceive : engine::Engine::RoundKind::kTransmit);
  if (a.after.wake_thread) r.signal(h);
  note_held(r, h);
}

void transmit_round(SimHost& h) { app_round(*h.run, h, false); }

// ibv_poll_cq as the drop-in runs it: the CQ, and when it is empty a progress round.
std::size_t poll_cq(Run& r, SimHost& h, bool round_if_empty) {
  Wc wcs[16];
  auto n = h.dev->poll_cq(h.cq, wcs);
  if (n.ok() && n.value() == 0 && round_if_empty) {
    app_round(r, h, true);
    n = h.dev->poll_cq(h.cq, wcs);
  }
  if (!n.ok()) {
    r.fail("host " + std::to_string(h.index) + ": poll_cq failed");
    return 0;
  }
  handle_completions(r, h, std::span(wcs, n.value()));
  return n.value();
}

// ---- the application thread -----------------------------------------------------------------

AppModel effective_model(const Run& r, const SimHost& h) {
  // How far the workload is: messages this host received, or WRITEs host 0 saw complete.
  const std::uint32_t progress = pingpong(r) ? h.received
                                 : r.opt.workload == Workload::kStreams
                                     ? h.send_completions
                                     : r.hosts[0].send_completions;
  if (h.model == AppModel::kPollThenStop) {
    return progress < r.opt.switch_after ? AppModel::kPolling : AppModel::kIdle;
  }
  if (h.model == AppModel::kPollThenBlock) {
    return progress < r.opt.switch_after ? AppModel::kPolling : AppModel::kBlocking;
  }
  return h.model;
}

void start_work(Run& r, SimHost& h) {
  if (r.opt.workload == Workload::kStreams) {
    fill_window(r, h, r.hosts[1 - h.index]);
  } else if (h.index == 0 && h.sent == 0) {
    post_next(r, h, r.hosts[1], r.opt.workload == Workload::kWrites);
  }
}

// A blocking application takes its event and re-arms the CQ: the drop-in's ibv_req_notify_cq
// hands the socket to the thread (application_waits).
void take_event_and_rearm(Run& r, SimHost& h) {
  h.event_pending = false;
  if (h.dev->req_notify_cq(h.cq, false) != Errc::kOk) r.fail("req_notify_cq failed");
  if (h.sched->app_blocks(r.now)) r.signal(h);
}

void app_act(Run& r, SimHost& h) {
  h.app_at = Instant::never();
  start_work(r, h);
  switch (effective_model(r, h)) {
    case AppModel::kPolling:
    case AppModel::kPollThenStop:
    case AppModel::kPollThenBlock:
      h.app_blocked = false;
      poll_cq(r, h, true);
      h.app_at = r.now + r.poll_gap();
      return;
    case AppModel::kBlocking: {
      // Woken by an event (or starting): take it, re-arm (the drop-in's ibv_req_notify_cq
      // hands the socket to the thread), poll once, then block in get_cq_event.
      h.app_blocked = false;
      take_event_and_rearm(r, h);
      poll_cq(r, h, true);
      if (h.sched->app_blocks(r.now)) r.signal(h);
      h.app_blocked = true;
      if (h.event_pending) h.app_at = r.wake_after();
      return;
    }
    case AppModel::kBlockedWaiterOtherPoster:
      if (!h.poster_turn) {
        // The waiter takes the event, re-arms and blocks again; the poster, handed the event,
        // runs up to 2 ms later (a thread the scheduler got to late: past the progress thread's
        // spin for a blocked application).
        take_event_and_rearm(r, h);
        h.app_blocked = true;
        h.poster_turn = true;
        h.app_at = r.now + Duration::ns(1 + static_cast<std::int64_t>(r.rng.below(2'000'000)));
        return;
      }
      // The poster answers what the completions ask for (poll_cq's completions post the
      // answers), with no round of its own when the CQ is empty, and waits for the next event.
      h.poster_turn = false;
      poll_cq(r, h, false);
      if (h.event_pending) h.app_at = r.wake_after();
      return;
    case AppModel::kPollThenArm:
      h.app_blocked = false;
      h.event_pending = false;  // whatever woke it, it polls
      if (h.arm_next) {
        h.arm_next = false;
        app_round(r, h, true);  // the other CQ's empty poll
        take_event_and_rearm(r, h);
        h.app_blocked = true;
        if (h.event_pending) h.app_at = r.wake_after();
        return;
      }
      h.arm_next = poll_cq(r, h, true) == 0;
      h.app_at = r.now + r.poll_gap();
      return;
    case AppModel::kIdle:
      return;
  }
}

// ---- the progress thread ---------------------------------------------------------------------

bool spin_ends(const SimHost& h) {
  return !h.socket.empty() || h.sched->doorbell_pending() || h.sched->owner() != Owner::kThread;
}

Instant thread_due(const Run& r, const SimHost& h) {
  switch (h.tstate) {
    case SimHost::ThreadState::kNone:
      return Instant::never();
    case SimHost::ThreadState::kReady:
      return h.t_ready;
    case SimHost::ThreadState::kSpin:
      return spin_ends(h) ? r.now : h.action.until;
    case SimHost::ThreadState::kSleep:
      return std::min({h.action.until, h.signal_at, h.io_at});
    case SimHost::ThreadState::kOffSocket:
      // The latest the executor's timeout may fire (UdpDevice: ppoll with the timer slack).
      return std::min(h.action.until + h.action.slack, h.signal_at);
  }
  return Instant::never();
}

void thread_act(Run& r, SimHost& h) {
  if (h.tstate == SimHost::ThreadState::kSpin) {
    h.report.thread_spin_ns += (r.now - h.spin_start).count_ns();
  } else if (h.tstate != SimHost::ThreadState::kReady) {
    ++h.report.thread_wakeups;
  }
  if (h.tstate != SimHost::ThreadState::kReady) {
    h.sched->thread_woke(r.now);
    h.signal_at = Instant::never();
    h.io_at = Instant::never();
  }
  const bool asked = h.sched->doorbell_pending();
  h.action = h.sched->thread_next(r.now);
  switch (h.action.kind) {
    case ThreadAction::Kind::kRound: {
      // One owner: the thread takes no round from the application's socket unless asked to.
      if (h.sched->owner() == Owner::kApplication && !asked) {
        r.fail("host " + std::to_string(h.index) +
               ": the thread ran a round while the application owned the socket");
        return;
      }
      const RoundReport rep = round(r, h, h.action.plan, true);
      h.sched->thread_round_end(r.now, rep);
      note_held(r, h);
      h.tstate = SimHost::ThreadState::kReady;
      h.t_ready = r.now + Duration::ns(300 + 100 * static_cast<std::int64_t>(rep.received));
      return;
    }
    case ThreadAction::Kind::kSpin:
      h.tstate = SimHost::ThreadState::kSpin;
      h.spin_start = r.now;
      return;
    case ThreadAction::Kind::kSleep:
    case ThreadAction::Kind::kWaitWritable:
      h.tstate = SimHost::ThreadState::kSleep;
      if (h.action.watch_socket && !h.socket.empty()) h.io_at = r.now;  // ppoll returns at once
      return;
    case ThreadAction::Kind::kSleepOffSocket:
      h.tstate = SimHost::ThreadState::kOffSocket;
      return;
  }
}

// ---- the event loop --------------------------------------------------------------------------

void deliver(Run& r) {
  Delivery d;
  while (r.net.poll_delivery(r.now, d)) {
    SimHost& h = r.hosts[d.to];
    h.socket.push_back(d.frame);
    if (h.tstate == SimHost::ThreadState::kSleep && h.action.watch_socket) {
      h.io_at = std::min(h.io_at, r.wake_after());
    }
  }
}

void check_retransmissions(Run& r) {
  if (!r.opt.loss.is_zero()) return;  // the recovery's business
  for (const SimHost& h : r.hosts) {
    const transport::Qp* q = h.dev->find_qp(h.qpn);
    // A tail-loss probe (transport/recovery.cc) is sent after about two RTTs without an ACK, well
    // within the ACK timeout: a peer whose application stopped polling answers later than that,
    // and the probe, one duplicate, is all it costs. Anything else resent is a timeout's go-back.
    if (q == nullptr) continue;
    const transport::QpCounters& c = q->counters();
    if (c.timeouts > 0 || c.adaptive_timeouts > 0 || c.retransmitted_packets > c.tail_probes) {
      r.fail("host " + std::to_string(h.index) +
             " retransmitted: an ACK did not come within the ACK timeout");
      return;
    }
  }
}

const char* thread_state_name(SimHost::ThreadState s) {
  switch (s) {
    case SimHost::ThreadState::kNone:
      return "none";
    case SimHost::ThreadState::kReady:
      return "ready";
    case SimHost::ThreadState::kSpin:
      return "spinning";
    case SimHost::ThreadState::kSleep:
      return "asleep";
    case SimHost::ThreadState::kOffSocket:
      return "asleep off the socket";
  }
  return "?";
}

std::string state_of(const Run& r) {
  std::string s;
  for (const SimHost& h : r.hosts) {
    s += " [host " + std::to_string(h.index) + ": sent " + std::to_string(h.sent) + ", received " +
         std::to_string(h.received) + ", send completions " + std::to_string(h.send_completions) +
         ", owner " + (h.sched->owner() == Owner::kThread ? "thread" : "application") +
         ", thread " + thread_state_name(h.tstate) +
         (h.tstate == SimHost::ThreadState::kSleep && h.action.watch_socket ? " on the socket"
                                                                            : "") +
         ", application " + (h.app_blocked ? "blocked" : "running") +
         (h.event_pending ? " with an event" : "") + "]";
  }
  return s;
}

void loop(Run& r) {
  const Instant limit = r.start + r.opt.limit;
  while (r.result.ok && !(host_done(r, r.hosts[0]) && host_done(r, r.hosts[1]))) {
    Instant t = r.net.next_event_time();
    for (const SimHost& h : r.hosts) t = std::min({t, h.app_at, thread_due(r, h)});
    if (t.is_never()) {
      r.fail("stalled: nothing is left to happen and the work is not done:" + state_of(r));
      return;
    }
    if (t > limit) {
      r.now = limit;
      r.fail("liveness: the work did not finish in time:" + state_of(r));
      return;
    }
    r.now = std::max(r.now, t);
    deliver(r);
    for (SimHost& h : r.hosts) {
      if (h.app_at <= r.now) app_act(r, h);
    }
    for (SimHost& h : r.hosts) {
      if (thread_due(r, h) <= r.now) thread_act(r, h);
    }
    check_retransmissions(r);
  }
}

}  // namespace

const char* app_model_name(AppModel m) {
  switch (m) {
    case AppModel::kPolling:
      return "polling";
    case AppModel::kBlocking:
      return "blocking";
    case AppModel::kIdle:
      return "idle";
    case AppModel::kPollThenStop:
      return "poll-then-stop";
    case AppModel::kPollThenBlock:
      return "poll-then-block";
    case AppModel::kBlockedWaiterOtherPoster:
      return "blocked-waiter-other-poster";
    case AppModel::kPollThenArm:
      return "poll-then-arm";
  }
  return "?";
}

ProgressSimResult run_progress_sim(const ProgressSimOptions& options) {
  auto r = std::make_unique<Run>(options);
  if (options.window == 0 || options.window > kSendSlots) {
    r->fail("window must be 1.." + std::to_string(kSendSlots));
    return r->result;
  }
  // The seed draws the machine: link delay 1-20 us, wake-up latency up to 2-30 us, poll gaps
  // up to 0.1-3 us.
  LinkConfig link;
  link.delay_ns = 1'000 + static_cast<std::int64_t>(r->rng.below(19'000));
  r->wake_latency_ns = 2'000 + static_cast<std::int64_t>(r->rng.below(28'000));
  r->poll_gap_ns = 100 + static_cast<std::int64_t>(r->rng.below(2'900));
  link.loss = options.loss;
  r->result.link_delay_ns = link.delay_ns;
  r->result.max_wake_latency_ns = r->wake_latency_ns;
  r->result.max_poll_gap_ns = r->poll_gap_ns + 50;
  for (int i = 0; i < 2; ++i) {
    if (!make_host(*r, r->hosts[i], i)) {
      r->fail("setup failed");
      return r->result;
    }
  }
  if (!r->net.configure_default(r->now, link).ok() ||
      !connect(r->hosts[0], r->hosts[1], options.ack_timeout) ||
      !connect(r->hosts[1], r->hosts[0], options.ack_timeout)) {
    r->fail("setup failed");
    return r->result;
  }
  for (SimHost& h : r->hosts) {
    for (std::size_t k = 0; k < kSlots; ++k) {
      if (!post_recv(h)) r->fail("post_recv failed");
    }
    if (h.model != AppModel::kIdle) h.app_at = r->now + r->poll_gap();
  }
  if (options.workload == Workload::kWrites) {
    // Host 1 WRITEs once first, so that it holds ACKs as a ping-pong side does.
    post_next(*r, r->hosts[1], r->hosts[0], true);
  }
  loop(*r);
  r->result.simulated_ns = (r->now - r->start).count_ns();
  for (SimHost& h : r->hosts) {
    h.report.sched = h.sched->counters();
    h.report.engine = h.engine->counters();
    h.report.cq_events_at_arm = h.dev->cq_events_at_arm();
    if (const transport::Qp* qp = h.dev->find_qp(h.qpn)) {
      h.report.acks_held_unanswered = qp->counters().acks_held_unanswered;
      h.report.acks_deferred_unanswered = qp->counters().acks_deferred_unanswered;
    }
    r->result.host[h.index] = h.report;
  }
  return r->result;
}

}  // namespace uroce::sim

// A verbs device served over the real network: the Device, a UDP datapath bound to its IP
// address, and the progress engine, in one of two progress modes.
//
// Application-driven polling (the default): the application drives progress itself, from the
// thread that uses the Device.
//
//   auto dev = UdpDevice::open(config);          // binds config.ip, UDP port 4791
//   dev->device().post_send(...);               // rings the engine's doorbell
//   dev->progress();                            // receive, timers, transmit: never blocks
//   dev->wait(Duration::ms(1));                 // or block until a packet or a timer is due
//
// Background progress thread: after start_progress_thread() a thread of the UdpDevice receives,
// fires timers and transmits, so that one-sided operations aimed at this device (RDMA WRITE,
// READ, atomics) complete while its application does nothing at all. The application then
// reaches the Device only through a lock guard, which holds the device mutex for its lifetime:
//
//   dev->start_progress_thread();
//   { auto d = dev->lock(); d->post_send(qp, wrs, &bad); }   // lock held for this block
//   { auto d = dev->lock(); n = d->poll_cq(cq, wcs); }
//
// Progress: who owns the socket. The policy lives in a sans-I/O Scheduler (scheduler.h: its
// header has the state diagram; the simulator drives the same class, sim/progress_sim.h); this
// class only carries out its actions. One owner of the socket at a time:
// - the application's thread while it polls: every progress() or transmit() takes the socket
//   and renews a lease (kAppLease), a store in memory. The thread then sleeps off the socket
//   (on its wake-up eventfd, with a timeout at the lease's end and SchedulerConfig::
//   lease_slack of timer slack, again while rounds renew it), so that datagrams do not wake it
//   on the CPU the application polls from;
// - the progress thread when the application does not poll: at once when the application says
//   it will block (application_waits(): get_cq_event(), get_async_event(), the drop-in's
//   ibv_req_notify_cq), or when the lease runs out (an application that went away without a
//   word). No guessing from /proc whether the application sleeps.
// The owning thread runs rounds of up to 64 datagrams received, due timers, and up to
// ProgressThreadOptions::tx_budget packets sent, taking the device mutex per round and
// releasing it between rounds (yielding to an application thread that waits for it). With
// nothing to do it spins (ProgressThreadOptions::spin, or blocked_app_spin after work while the
// application is blocked in the library or packets come in a stream) and then sleeps in ppoll() on
// the socket, the wake-up eventfd and the next timer deadline, never holding the lock while asleep.
// A doorbell writes the eventfd only when the scheduler says the thread sleeps, so a doorbell on a
// busy device costs no system call; a doorbell while the application owns the socket still gets a
// thread round (a poster that does not progress), except a quiet one (QuietDoorbells). The thread
// writes registered memory (remote WRITEs, atomics, received SENDs, READ responses): read such
// memory after taking the lock once the completion or message that says it arrived was seen (a
// completion polled through the guard already orders it). Keep guards short: the thread cannot
// progress while the application holds one. Never call progress(), wait(), stats(), get_cq_event(),
// get_async_event() or close() while holding a guard (they take the mutex).
//
// Completion channels (ibv_comp_channel): create_comp_channel() returns a nonzero tag to put in
// CqInitAttr::channel. A CQ armed with req_notify_cq() that gets a matching completion records
// an event in its channel, whose fd (an eventfd) is readable while the channel has events;
// get_cq_event() takes the oldest (ibv_get_cq_event), ack_cq_events() acknowledges
// (ibv_ack_cq_events). Async events: async_event_fd() is readable while the Device has queued
// asynchronous events (QP fatal, CQ overflow, SRQ limit, ...); take them with
// get_async_event(). Both work in both modes. In polling mode a channel's fd becomes readable
// during the progress()/wait() (or the Device call, e.g. a flush) that made the completion, the
// async fd at the end of the progress() round that queued the event.
//
// Counters: stats() snapshots the engine's, the datapath's and every QP's counters (stats.h).
// Each open UdpDevice also serves them to other processes (`uroce stats`) on the abstract unix
// datagram socket "@uroce/<pid>/<device name>" ("@uroce/<pid>/<name>~<n>" when that name is
// taken in this process). A request is one datagram, the words "text" or "json", optionally
// followed by "qp" (per-QP counters too); the answer goes back to the sender's address as one or
// more datagrams, each a marker byte, '+' (more follow) or '.' (the last), then up to
// kStatsChunk bytes of the text or JSON. Requests are served by progress()/wait() in polling mode
// (checked at most every millisecond, so a device whose application never progresses does not
// answer) and by the progress thread in thread mode. The same socket takes "faults show",
// "faults set SPEC" and "faults clear" (`uroce faults`), answered "ok SPEC" or "error: WHY".
//
// Faults: a fault spec (fault/fault.h) from DeviceOptions: UROCE_FAULTS_<NAME> (this device),
// else UROCE_FAULTS (every device); else the device's `faults=SPEC` in the config file, applies
// from open on; set_faults() replaces it. Opening with a malformed spec fails with the message. The
// spec in use, with its seed, is printed on stderr at open and in `uroce stats`; with UROCE_PCAP
// every injected fault is a line of PCAP.faults (time, direction, packet number, kind, class,
// DestQP, peer), which `uroce pcap dump` shows beside the packets.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "base/owner.h"
#include "base/result.h"
#include "base/spin_lock.h"
#include "base/time.h"
#include "capture/pcap_file.h"
#include "datapath/udp.h"
#include "device/device_config.h"
#include "device/device_options.h"
#include "device/shared_port.h"
#include "device/stats.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "seal/sealed_datapath.h"
#include "uroce/verbs.h"

namespace uroce::engine {

struct ProgressThreadOptions {
  // After a round that did work, keep busy-polling for this long before sleeping (without the
  // lock: a doorbell, a datagram or a due timer starts the next round): lower latency for a
  // CPU core. Zero: sleep at once.
  Duration spin = Duration::zero();
  // Packets sent per round before the lock is released.
  std::size_t tx_budget = 256;
  // With `spin` zero: still busy-poll this long after work while the application is blocked
  // in the library (application_waits()) or packets come in a stream (the thread's sleeps end
  // within SchedulerConfig::stream_gap): SchedulerConfig::blocked_app_spin. Zero: never.
  Duration blocked_app_spin = Duration::us(500);
};

// What close() achieved.
struct CloseResult {
  bool drained = true;                      // nothing outstanding when the socket closed
  std::uint32_t outstanding_send_wqes = 0;  // posted, not completed (QPs in RTS/SQD/SQE)
  bool tx_pending = false;                  // packets still queued for transmission
};

class UdpDevice final : public QpDirectory, public DoorbellHandler, public CompletionEventHandler {
 public:
  // The default bound of close() and of the destructor's drain.
  static constexpr Duration kCloseDeadline = Duration::s(2);
  static constexpr std::size_t kStatsChunk = 32 * 1024;

  // config.netdev_mtu 0 means "the MTU of the interface that holds config.ip": the port MTU
  // then follows as rxe derives it (largest power of two <= MTU - 80, at most 4096), from the
  // MTU less the seal trailer's 28 bytes when the device seals (seal::roce_share_of_mtu).
  // `capture_path`: write every packet sent and received to this pcap file (readable by
  // Wireshark and `uroce pcap check`); when empty, options.capture_path (UROCE_PCAP at the
  // edge) names the file, if set.
  //
  // Sharing: by default the device's address and port are shared with every other context
  // that opens them, in this process or another of the user (device/shared_port.h): each
  // UdpDevice is one member of the device's reuseport group, its QP numbers unique across the
  // device. kExclusive binds the port alone, as before sharing existed (the second opener
  // then fails with "in use"); kDefault is kShared unless options.shared is false
  // (UROCE_SHARED=0 at the edge).
  //
  // `options`: the knobs the program sets from outside (device/device_options.h), read from the
  // environment by the edge (src/edge) in the tools and the drop-in; the default is no variable
  // set. options.congestion_control, when set, replaces config.congestion_control; else the
  // config file's cc= for the device does.
  enum class Sharing { kDefault, kShared, kExclusive };
  static Result<std::unique_ptr<UdpDevice>, Error> open(
      const DeviceConfig& config, std::uint16_t port = wire::kRoceV2Port,
      const std::string& capture_path = "", Sharing sharing = Sharing::kDefault,
      const DeviceOptions& options = DeviceOptions{});
  // close(kCloseDeadline) unless close() was called.
  ~UdpDevice() override;
  UdpDevice(const UdpDevice&) = delete;
  UdpDevice& operator=(const UdpDevice&) = delete;

  // Polling mode: the Device, for the thread that also calls progress(). In thread mode use
  // lock() instead.
  Device& device() { return *device_; }
  // Valid until close().
  const Engine& engine() const { return *engine_; }
  // The ACK policy its rounds follow (DeviceOptions::acks; holding is off once it closes).
  const AckPolicyConfig& ack_policy() const { return acks_; }
  const datapath::UdpDatapath& datapath() const { return *dp_; }
  // The device's membership when shared (nullptr when exclusive).
  SharedPort* shared_port() { return shared_.get(); }
  int fd() const { return dp_ ? dp_->fd() : -1; }
  // Writes out what the capture file (capture_path) has buffered, so that it can be read while
  // the device runs.
  void flush_capture();

  // One round of progress now. Returns true if anything was received or sent. After close():
  // does nothing, returns false.
  //
  // A positive ACK a ping-pong QP owes its peer (transport::Qp::only_ack_to_send) waits, for
  // AckPolicyConfig::hold_for (100 us), for the request the application is about to post on
  // that QP, and leaves in the same batch right behind it (engine/ack_policy.h): one system call
  // per hop instead of two, and the peer, polling for its completion, finds the request first.
  // The owner's first round after the hold sends it (Scheduler: at most the hold + kAppLease in
  // thread mode). DeviceOptions::acks (UROCE_HOLD_ACKS=0) turns this off.
  bool progress();
  // progress() without receiving or timers: sends what is ready (what a post just queued).
  // For a caller that runs progress() itself when it polls; returns true if anything was sent.
  bool transmit();
  // Thread mode: an application's round keeps the socket the application's for this long (a
  // packet then waits at most this long for the thread when the application stops polling
  // without saying so).
  static constexpr Duration kAppLease = Duration::us(200);
  // Waits until a packet arrives, a timer is due, a stats request comes or `max_wait` passes,
  // then progresses.
  void wait(Duration max_wait);
  // The monotonic clock the engine runs on.
  static Instant now();

  // ---- background progress thread ----

  // The Device behind the device mutex, held for the guard's lifetime (movable, not copyable).
  class Locked {
   public:
    Device& operator*() const { return *dev_; }
    Device* operator->() const { return dev_; }

   private:
    friend class UdpDevice;
    Locked(std::unique_lock<OwnedMutex> lk, Device* dev) : lk_(std::move(lk)), dev_(dev) {}
    std::unique_lock<OwnedMutex> lk_;
    Device* dev_;
  };
  // Works in both modes (in polling mode the mutex is simply uncontended).
  Locked lock();
  // While one lives in a thread, doorbells rung by that thread's posts do not wake a sleeping
  // progress thread: for a caller that runs progress() right after posting (the drop-in
  // library's ibv_post_send), which transmits and wakes the thread only if work is left over.
  // Saves the thread a wake-up per post.
  class QuietDoorbells {
   public:
    QuietDoorbells();
    ~QuietDoorbells();
    QuietDoorbells(const QuietDoorbells&) = delete;
    QuietDoorbells& operator=(const QuietDoorbells&) = delete;

   private:
    bool was_;
  };
  // Thread mode: the application is about to block (waiting for a completion or async event)
  // rather than run rounds: it hands the socket to the thread at once instead of when its lease
  // ends (Scheduler::app_blocks). Called by get_cq_event() and get_async_event() before they
  // block; call it when arming a CQ for events that will be waited for elsewhere (poll() on
  // the fd).
  void application_waits();
  // The scheduler's counters (hand-offs, lease expiries, thread rounds and sleeps).
  SchedulerCounters scheduler_counters();
  // Starts the thread. An error message when it is already running or the device is closed.
  std::string start_progress_thread(const ProgressThreadOptions& options = {});
  // Stops and joins the thread (the device goes back to polling mode). No-op when not running.
  void stop_progress_thread();
  bool has_progress_thread() const { return thread_.joinable(); }

  // ---- completion channels ----

  // A new channel: its tag (nonzero) for CqInitAttr::channel. kNoMemory when eventfd fails.
  Result<std::uint64_t, Errc> create_comp_channel();
  // kInvalidArgument for an unknown channel, kBusy while it holds events not yet acknowledged
  // (ibv_destroy_comp_channel refuses a channel still in use likewise).
  Errc destroy_comp_channel(std::uint64_t channel);
  // The channel's fd (readable while it has events), or -1 for an unknown channel. Owned by
  // the UdpDevice: do not close it.
  int comp_channel_fd(std::uint64_t channel) const;
  // ibv_get_cq_event: the CQ of the oldest event of the channel, waiting up to `timeout` for
  // one (Duration::zero(): non-blocking; Duration::infinite(): blocks). nullopt when none came
  // in time; kInvalidArgument for an unknown channel. In polling mode the wait drives
  // progress itself. Re-arm with req_notify_cq() to get the next event, as with libibverbs.
  Result<std::optional<CqHandle>, Errc> get_cq_event(std::uint64_t channel, Duration timeout);
  // ibv_ack_cq_events: acknowledges `n` events of `cq` taken from `channel`.
  Errc ack_cq_events(std::uint64_t channel, CqHandle cq, std::uint32_t n);
  // Events of `cq` taken with get_cq_event() and not yet acknowledged (ibv_destroy_cq waits
  // for these to be acknowledged; destroy the CQ only when it is 0).
  std::uint32_t unacked_cq_events(std::uint64_t channel, CqHandle cq) const;

  // ---- asynchronous events ----

  // Readable while the Device has queued asynchronous events (the state as of the last round
  // of progress or the last get_async_event() here: events taken directly from the Device
  // leave it readable until then).
  int async_event_fd() const { return async_fd_; }
  // The oldest asynchronous event, waiting up to `timeout` as get_cq_event() does.
  std::optional<AsyncEvent> get_async_event(Duration timeout = Duration::zero());

  // ---- counters ----

  DeviceStats stats();
  // The per-connection key of QP `local_qpn` (docs/SECURITY.md "Per-connection keys"; the
  // drop-in librdmacm installs what the CM agreed): its packets to `remote_qpn` at `peer` are
  // sealed with it and only packets sealed with it are taken. False when the device does not
  // seal (aead=off) or the key is not 16 or 32 bytes. clear_connection_key: back to the device's
  // pre-shared key (or plain), as is every QP's when it is destroyed.
  bool set_connection_key(std::uint32_t local_qpn, const wire::IpAddress& peer,
                          std::uint32_t remote_qpn, ConstBytes key);
  void clear_connection_key(std::uint32_t local_qpn);
  std::size_t connection_keys();  // QPs with a per-connection key

  // ---- faults (fault/fault.h) ----

  // Replaces the device's fault spec (text in the grammar; "" clears it) from now on, as
  // UROCE_FAULTS does at open and `uroce faults -d DEV set|clear` through the stats endpoint.
  // A malformed spec changes nothing: the message names the bad item.
  Result<fault::FaultSpec, std::string> set_faults(const std::string& text);
  // The spec in effect, canonical ("" when none).
  std::string faults();
  // The stats endpoint's abstract socket name, without the leading NUL ("" if none).
  const std::string& stats_socket_name() const { return stats_name_; }

  // ---- shutdown ----

  // Stops the progress thread, then keeps progressing (receiving, firing timers, sending)
  // until every QP in RTS, SQD or SQE has no outstanding send WQE (every posted WR completed:
  // acknowledged, or failed once its retry budget ran out) and no QP or the engine has a
  // packet left to send (responses and ACKs owed to peers included), or until `deadline`
  // passes. Then flushes the capture file, closes the stats endpoint and the socket. QPs in
  // other states cannot progress and are not waited for. The Device stays usable for polling
  // CQs, taking events and destroying objects (without the lock; nothing else runs), but sends
  // and receives nothing more: work posted after close() stays queued. Requests from peers
  // are not awaited: close the side that initiates first. The drain still receives, so it
  // still executes the peers' requests: registered memory must stay valid until close()
  // returns (the destructor's included). Call it from one thread, with no
  // guard held and no other thread using the device. Idempotent: a second call returns the
  // first result. When DeviceOptions::stats_file (UROCE_STATS_FILE) names a file, the device's
  // counters at close are appended to it as one `uroce stats` text line (device counters only:
  // QPs destroyed before close leave the QP sums), so that a program that exits (the drop-in's
  // users: rdma-core's tools, perftest) still leaves them; the stats endpoint is gone by then.
  CloseResult close(Duration deadline = kCloseDeadline);
  bool is_closed() const { return closed_; }
  // With a stats file in the options it opened with: called as the process exits (atexit) for a
  // device the program left open (librdmacm keeps its contexts open until the process ends, as
  // rdma-core's does): sends what is queued now (held ACKs included), stops the device (no more
  // rounds: what it sent and received is final, as the process's death would make it a moment
  // later) and appends its counters to the file, as close() does. close() afterwards frees what
  // it holds and appends nothing. Not for use while the process goes on.
  void stop_at_exit();

  // QpDirectory, DoorbellHandler and CompletionEventHandler, for the engine and the device.
  transport::Qp* find_qp(std::uint32_t qpn) override { return device_->find_qp(qpn); }
  void doorbell(std::uint32_t qpn) override;
  // Held ACKs leave before a QP is modified or destroyed (an application that destroys its QP
  // right after its last exchange, as ibv_rc_pingpong does, still acknowledges it).
  void qp_changing(std::uint32_t qpn) override;
  void qp_destroying(std::uint32_t qpn) override;
  // A QP moved to RESET loses its per-connection key (docs/SECURITY.md).
  void qp_reset(std::uint32_t qpn) override;
  void cq_event(CqHandle cq, std::uint64_t channel) override;

 private:
  struct Channel;
  UdpDevice() = default;
  // The engine's round (Engine::round) with `plan`, then the async-event fd brought up to date
  // after a receiving one; the report's next_timer only when `want_next_timer`.
  RoundReport round_locked(Instant t, const RoundPlan& plan, Engine::RoundKind kind,
                           bool want_next_timer);
  bool application_round(bool receive);
  void sync_async_fd_locked();
  void thread_main();
  void thread_spin(Instant until);
  void thread_sleep(const ThreadAction& a);
  // The progress thread's timer slack (ThreadAction::slack); only that thread calls it.
  void set_timer_slack(Duration slack);
  void signal_thread() { signal_fd(wake_fd_); }
  // The Device's callbacks (doorbell, qp_changing, qp_destroying, cq_event) run inside a Device
  // call, which in thread mode holds the device mutex (debug builds check it).
  void assert_in_device_call() const {
    if (has_progress_thread()) mu_.assert_held();
  }
  static void signal_fd(int fd);
  SchedulerConfig base_config() const;
  void open_stats_endpoint();
  // Serves waiting stats requests if `force` or if the last check is older than 1 ms. Takes
  // the mutex for the snapshot. The test in line: every progress round asks (issue 40).
  void maybe_serve_stats(Instant t, bool force) {
    if (stats_fd_ < 0) return;
    if (!force && t.ns() < next_stats_check_ns_.load(std::memory_order_relaxed)) return;
    serve_stats(t, force);
  }
  void serve_stats(Instant t, bool force);
  DeviceStats stats_locked();
  CqStats cq_stats_locked(const Device::CqState& c) const;
  FaultStats fault_stats_locked() const;  // dp_ open
  std::shared_ptr<Channel> find_channel(std::uint64_t channel) const;
  std::uint32_t outstanding_locked(bool* tx_pending);
  // The answer to a "faults ..." request of the stats endpoint.
  std::string serve_faults_request(std::string_view request);

  // Before device_: destroyed after it (destroying its QPs gives their numbers back).
  std::unique_ptr<SharedPort> shared_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<datapath::UdpDatapath> dp_;
  // With aead= other than off: in front of dp_, the engine's datapath (docs/SECURITY.md).
  std::unique_ptr<seal::SealedDatapath> seal_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<capture::PcapWriter> capture_;
  // UROCE_PCAP's companion log of injected faults (PCAP.faults), opened with the first fault.
  std::string fault_log_path_;
  std::FILE* fault_log_ = nullptr;

  // Guards device_, dp_, engine_ and capture_ in thread mode.
  OwnedMutex mu_;  // the device mutex (*_locked functions assert that they hold it)
  // Guards sched_; taken inside mu_ or alone, never the other way round. Its sections are a
  // few scheduler calls, taken twice per application round: a spin lock.
  SpinLock sched_mu_;
  Scheduler sched_{SchedulerConfig{}};
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> app_waiting_{0};          // application threads waiting in lock()
  std::atomic<bool> thread_waiting_{false};  // the progress thread waits for the lock
  int wake_fd_ = -1;  // eventfd: doorbells, hand-offs and stop wake the thread
  Duration thread_slack_ = Duration::zero();  // the progress thread's timer slack (set_timer_slack)
  AckPolicyConfig acks_;                      // DeviceOptions::acks (UROCE_HOLD_ACKS, ...)
  std::string stats_file_;                    // DeviceOptions::stats_file (UROCE_STATS_FILE)

  // Completion channels; the map has its own mutex (taken inside mu_ by cq_event()).
  mutable std::mutex channels_mu_;
  std::map<std::uint64_t, std::shared_ptr<Channel>> channels_;
  std::uint64_t next_channel_ = 1;
  // While a round runs (the thread's or an application's, under mu_), cq_event() records the
  // event and leaves the channel's fd to signal_deferred_channels(), called once the round has
  // let go of mu_. Signalled at once, the waiter (on the same CPU, it preempts the signaller)
  // found the channel's and the device's mutexes held and slept on each: four context
  // switches per completion event, about 27 us of ibv_rc_pingpong -e's hop here. Until then
  // the channel owes its signal (Channel::signal_owed), and a get_cq_event() that takes the
  // events first cancels it instead of reading the fd.
  bool defer_channel_signals_ = false;                      // under mu_
  std::vector<std::shared_ptr<Channel>> deferred_signals_;  // under mu_
  // Moves the channels cq_event() deferred out of deferred_signals_ (under mu_) into `out`.
  void take_deferred_channels(std::vector<std::shared_ptr<Channel>>& out);
  // Signals them (without mu_) and empties `out`.
  static void signal_deferred_channels(std::vector<std::shared_ptr<Channel>>& out);

  int async_fd_ = -1;  // eventfd, readable while async events are queued
  bool async_signaled_ = false;

  int stats_fd_ = -1;
  std::string stats_name_;
  std::mutex stats_mu_;  // one server at a time (thread and an application progress())
  // Read before stats_mu_ is tried, so that most rounds look at one word and take no lock.
  std::atomic<std::int64_t> next_stats_check_ns_{0};
  std::atomic<std::uint64_t> stats_requests_{0};
  std::atomic<std::uint64_t> thread_wakeups_{0};  // ppoll returns in the thread
  std::uint64_t thread_rx_pkts_ = 0;              // under mu_

  std::atomic<bool> closed_{false};
  std::atomic<bool> stopped_at_exit_{false};  // stop_at_exit(): no more rounds
  CloseResult close_result_;
  EngineCounters closed_engine_;  // the engine's and datapath's last counters, after close()
  datapath::UdpCounters closed_dp_;
  seal::SealCounters closed_seal_;
  FaultStats closed_faults_;  // the last ones, after close()
};

// Resolves `sel` against the configuration (device_config.h) and opens the device: binds the
// address (clear messages for "not a local address" and "port in use").
// `options`: as UdpDevice::open's.
Result<std::unique_ptr<UdpDevice>, Error> open_device(
    const DeviceSelection& sel, const DeviceOptions& options = DeviceOptions{});

}  // namespace uroce::engine

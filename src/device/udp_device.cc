#include "device/udp_device.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <set>
#include <string_view>

#include "base/entropy.h"
#include "datapath/fault_in.h"
#include "device/device_config.h"

namespace uroce::engine {

namespace {

// How often progress() looks at the stats endpoint when nothing else wakes it.
constexpr Duration kStatsCheckInterval = Duration::ms(1);
// How long a polling-mode get_cq_event()/get_async_event() waits in one wait() call.
constexpr Duration kPollSlice = Duration::ms(10);

void drain_fd(int fd) {
  std::uint64_t v = 0;
  [[maybe_unused]] const ssize_t n = ::read(fd, &v, sizeof v);
}

// The async fd is the application's file (the drop-in makes the device's number name the file
// ibv_open_device gave out, blocking unless the application made it otherwise), so it is read
// only when it is readable: an application that read the file itself must not leave the device
// blocked in read() with its mutex held.
void drain_if_readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0) drain_fd(fd);
}

// ppoll's timeout for the span until `until` (nullptr: no timeout).
timespec* timeout_until(Instant until, Instant t, timespec& ts) {
  if (until.is_never()) return nullptr;
  const std::int64_t ns = std::max<std::int64_t>((until - t).count_ns(), 0);
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return &ts;
}

Instant deadline_after(Duration timeout) {
  return timeout.is_infinite() ? Instant::never() : UdpDevice::now() + timeout;
}

std::uint64_t cq_key(CqHandle cq) { return (std::uint64_t{cq.index} << 32) | cq.generation; }

// Set by UdpDevice::QuietDoorbells in the posting thread.
thread_local bool t_quiet_doorbells = false;

}  // namespace

void UdpDevice::signal_fd(int fd) {
  const std::uint64_t one = 1;
  // An eventfd write fails only when the counter would overflow: it is readable then anyway.
  [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
}

struct UdpDevice::Channel {
  int fd = -1;
  std::mutex mu;
  std::deque<CqHandle> events;  // not yet taken by get_cq_event()
  // cq_event() deferred the signal of the first event (defer_channel_signals_): fd is not
  // readable yet. get_cq_event() clears it when it takes the last event.
  bool signal_owed = false;
  std::unordered_map<std::uint64_t, std::uint32_t> unacked;  // per CQ: taken, not acked
  // The channel's invariant, under `mu` (debug builds): its fd is readable exactly while events
  // wait and no signal is owed, so that a poll() of it (UCX's epoll) and get_cq_event() agree.
  void check() const {
#ifndef NDEBUG
    pollfd p{fd, POLLIN, 0};
    int n = 0;
    do {
      n = ::poll(&p, 1, 0);
    } while (n < 0 && errno == EINTR);  // a signal (qperf's SIGALRM) may interrupt even this
    if (n < 0) return;                  // cannot tell
    UROCE_ASSERT(((p.revents & POLLIN) != 0) == (!events.empty() && !signal_owed));
#endif
  }
  ~Channel() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

// DeviceOptions::stats_file (UROCE_STATS_FILE): appends one counters line (best effort, like the
// stats endpoint: a file that cannot be written costs nothing else).
void append_stats_line(const std::string& path, const std::string& line) {
  if (path.empty()) return;
  if (std::FILE* f = std::fopen(path.c_str(), "a")) {
    std::fwrite(line.data(), 1, line.size(), f);
    std::fclose(f);
  }
}

// The devices opened with a stats file and not closed yet, for the exit hook (leaked:
// the hook may run after static destructors). Under g_open_mu, which the hook holds while it
// stops them, so that none is closed (and freed) meanwhile.
std::mutex g_open_mu;
std::set<UdpDevice*>* g_open = nullptr;
pid_t g_open_pid = 0;

void stop_open_devices_at_exit() {
  std::lock_guard lk(g_open_mu);
  // A forked child inherits the hook, not the devices' threads.
  if (g_open == nullptr || ::getpid() != g_open_pid) return;
  for (UdpDevice* d : *g_open) d->stop_at_exit();
  g_open->clear();
}

void remember_open(UdpDevice* d) {
  std::lock_guard lk(g_open_mu);
  if (g_open == nullptr) {
    g_open = new std::set<UdpDevice*>();
    std::atexit(stop_open_devices_at_exit);
  }
  if (g_open_pid != ::getpid()) {  // a forked child: its own devices only
    g_open->clear();
    g_open_pid = ::getpid();
  }
  [[maybe_unused]] const bool fresh = g_open->insert(d).second;
  UROCE_ASSERT(fresh);  // once, at open()
}

void forget_open(UdpDevice* d) {
  std::lock_guard lk(g_open_mu);
  if (g_open != nullptr) g_open->erase(d);
}

// The config file's entry for device `name` at `ip`, read once per open: nullopt when
// UROCE_DEVICES is set (no file in use), without a file, or without an entry (the device was
// opened by address). Names are unique in a file (check_unique), so there is one at most.
std::optional<DeviceSpec> file_entry(const std::string& name, const wire::IpAddress& ip,
                                     const DeviceOptions& options) {
  if (options.source.devices) return std::nullopt;
  auto list = configured_devices(options.source);
  if (!list.ok()) return std::nullopt;
  for (DeviceSpec& d : list.value()) {
    if (d.name == name && d.ip == ip) return std::move(d);
  }
  return std::nullopt;
}

// The fault spec for device `name`: the options' for this device (UROCE_FAULTS_<NAME>), else
// for every device (UROCE_FAULTS), else the config file's faults= for it; "" for none.
std::string configured_faults(const std::string& name, const DeviceOptions& options,
                              const std::optional<DeviceSpec>& entry) {
  if (auto it = options.device_faults.find(fault_key(name)); it != options.device_faults.end()) {
    return it->second;
  }
  if (options.faults) return *options.faults;
  return entry ? entry->faults : std::string();
}

// The congestion control: the options' (UROCE_CC), else the config file's cc= for the device,
// else `fallback` (the DeviceConfig's).
DeviceConfig::CongestionControl configured_cc(const DeviceOptions& options,
                                              const std::optional<DeviceSpec>& entry,
                                              DeviceConfig::CongestionControl fallback) {
  if (options.congestion_control) return *options.congestion_control;
  if (entry && entry->congestion_control) return *entry->congestion_control;
  return fallback;
}

// The loss recovery (DeviceConfig::adaptive_recovery): the options' (UROCE_RECOVERY), else the
// config file's recovery= for the device, else `fallback` (the DeviceConfig's).
bool configured_recovery(const DeviceOptions& options, const std::optional<DeviceSpec>& entry,
                         bool fallback) {
  if (options.adaptive_recovery) return *options.adaptive_recovery;
  if (entry && entry->adaptive_recovery) return *entry->adaptive_recovery;
  return fallback;
}

// Selective repeat (DeviceConfig::selective_repeat, sr_peers): the options' (UROCE_SR,
// UROCE_SR_PEERS), else the config file's sr= and sr_peers= for the device, else what `cfg` has.
void configure_selective_repeat(DeviceConfig& cfg, const DeviceOptions& options,
                                const std::optional<DeviceSpec>& entry) {
  std::optional<bool> on = options.selective_repeat;
  std::optional<SrPeers> peers = options.sr_peers;
  if (entry) {
    if (!on) on = entry->selective_repeat;
    if (!peers) peers = entry->sr_peers;
  }
  if (on) cfg.selective_repeat = *on;
  if (peers) {
    cfg.sr_all_peers = peers->all;
    cfg.sr_peers = peers->addresses;
  }
}

// The peers sent FLUSH with rxe's ICRC: the options' (UROCE_RXE_FLUSH_PEERS), else the config
// file's rxe_flush_peers= for the device, else none.
void configure_rxe_flush_icrc(datapath::UdpOptions& udp, const DeviceOptions& options,
                              const std::optional<DeviceSpec>& entry) {
  std::optional<SrPeers> peers = options.rxe_flush_peers;
  if (!peers && entry) peers = entry->rxe_flush_peers;
  if (!peers) return;
  udp.rxe_icrc_all_peers = peers->all;
  udp.rxe_icrc_peers = peers->addresses;
}

// The sealing (docs/SECURITY.md): the options', else the config file's aead= and psk= for the
// device, else off.
seal::Settings configured_seal(const DeviceOptions& options,
                               const std::optional<DeviceSpec>& entry) {
  if (options.seal) return *options.seal;
  if (entry && entry->seal) return *entry->seal;
  return {};
}

// The MTU the port MTU is derived from: the config's, else the interface's; less the seal
// trailer when the device seals, so that a sealed full-MTU packet still fits the interface.
Result<std::uint32_t, Error> roce_netdev_mtu(const DeviceConfig& cfg, seal::Mode mode) {
  std::uint32_t mtu = cfg.netdev_mtu;
  if (mtu == 0) {
    auto found = datapath::interface_mtu(cfg.ip);
    if (!found.ok()) return Err{found.error().within("cannot find the interface MTU")};
    mtu = found.value();
  }
  return seal::roce_share_of_mtu(mtu, mode);
}

}  // namespace

Instant UdpDevice::now() {
  return Instant::from_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now().time_since_epoch())
                              .count());
}

// Long: the steps of opening a device, each needing the ones before; read top to bottom.
Result<std::unique_ptr<UdpDevice>, Error> UdpDevice::open(const DeviceConfig& config,
                                                          std::uint16_t port,
                                                          const std::string& capture_path,
                                                          Sharing sharing,
                                                          const DeviceOptions& options) {
  DeviceConfig cfg = config;
  const std::optional<DeviceSpec> entry = file_entry(cfg.name, cfg.ip, options);
  cfg.congestion_control = configured_cc(options, entry, cfg.congestion_control);
  cfg.adaptive_recovery = configured_recovery(options, entry, cfg.adaptive_recovery);
  configure_selective_repeat(cfg, options, entry);
  // Unguessable MR keys from the kernel's CSPRNG, unless a seed asks for reproducible ones.
  if (!cfg.random_bytes && cfg.seed == 0) cfg.random_bytes = kernel_random_bytes;
  // ODP regions' pages faulted in as the kernel faults them in for a NIC (or refused).
  if (!cfg.fault_in) cfg.fault_in = datapath::fault_in;
  // The faults first: a malformed spec opens nothing.
  const std::string fault_text = configured_faults(cfg.name, options, entry);
  if (auto f = fault::FaultSpec::parse(fault_text); !f.ok()) {
    return Err{Error(EINVAL, cfg.name + ": " + f.error())};
  }
  const seal::Settings sealing = configured_seal(options, entry);
  auto mtu = roce_netdev_mtu(cfg, sealing.mode);
  if (!mtu.ok()) return Err{mtu.error()};
  cfg.netdev_mtu = mtu.value();
  auto dev = Device::create(cfg);
  if (!dev.ok()) {
    return Err{Error(static_cast<int>(dev.error()),
                     std::string("invalid device configuration: ") + errc_name(dev.error()))};
  }
  if (sharing == Sharing::kDefault)
    sharing = options.shared ? Sharing::kShared : Sharing::kExclusive;
  std::unique_ptr<SharedPort> shared;
  datapath::UdpOptions udp{config.ip, port};
  if (options.udp_gso) {
    udp.gso = *options.udp_gso;
    udp.gso_on_hardware = *options.udp_gso;  // asked for by name: trusted
  }
  if (options.udp_gro) udp.gro = *options.udp_gro;
  if (options.udp_batch) udp.tx_batch = *options.udp_batch;
  configure_rxe_flush_icrc(udp, options, entry);
  // Every packet of a QP leaves ECT(0) under DCQCN: the socket's own TOS, so that they need no
  // per-packet control message.
  udp.default_tos = congestion_control_ecn(config.congestion_control);
  if (sharing == Sharing::kShared) {
    auto sp = SharedPort::join(config.ip, port, cfg.name, options.devd);
    if (!sp.ok()) return Err{sp.error()};
    shared = std::move(sp.value());
    udp.bound_fd = shared->take_socket();
    UROCE_ASSERT(udp.bound_fd >= 0);  // the group's socket, bound already
    if (Errc e = dev.value()->set_qpn_source(shared.get()); e != Errc::kOk) {
      return Err{Error(static_cast<int>(e), std::string("set_qpn_source: ") + errc_name(e))};
    }
  }
  auto dp = datapath::UdpDatapath::open(udp);
  if (!dp.ok()) {
    if (shared) shared->forget_socket();
    return Err{dp.error()};
  }
  std::unique_ptr<UdpDevice> d(new UdpDevice());
  d->shared_ = std::move(shared);
  d->device_ = std::move(dev.value());
  d->dp_ = std::move(dp.value());
  if (sealing.mode != seal::Mode::kOff) {
    // Authenticated or encrypted packets (docs/SECURITY.md): the sealing datapath in front of
    // the socket's, with a nonce salt and first counter from the kernel's CSPRNG. It opens
    // packets before the engine sees them, so their ICRC is checked before (no deferral).
    const std::uint64_t r = kernel_random_u64();
    auto sd = seal::SealedDatapath::create(*d->dp_, sealing, static_cast<std::uint32_t>(r >> 32),
                                           kernel_random_u64() >> 1);
    if (!sd.ok()) return Err{Error(EINVAL, cfg.name + ": aead: " + sd.error())};
    d->seal_ = std::move(sd.value());
    d->dp_->set_accept_sealed(true);
    d->engine_ = std::make_unique<Engine>(*d, *d->seal_, config.ip);
  } else {
    d->engine_ = std::make_unique<Engine>(*d, *d->dp_, config.ip);
    // The engine checks the ICRC of message continuations in the pass that places their
    // payload (issue 14): the engine's round hands it RxMeta::pending.
    d->dp_->set_deferred_icrc(true);
  }
  // Its receive reads the IP header of UD packets only (the GRH area).
  d->dp_->set_ip_header_for_ud_only(true);
  std::string path = capture_path.empty() ? options.capture_path : capture_path;
  if (!path.empty()) {
    // UROCE_PCAP is the same for every device a process opens (UCX opens one several times) and
    // for every process of a job: each capture gets a file of its own (PATH-2, ...).
    std::string chosen;
    auto w = capture::PcapWriter::open_unshared(path, &chosen);
    if (!w.ok()) return Err{Error(EIO, "capture: " + w.error())};
    if (chosen != path) {
      std::fprintf(stderr, "uroce: %s is another device's capture; capturing to %s\n", path.c_str(),
                   chosen.c_str());
      path = chosen;
    }
    d->capture_ = std::make_unique<capture::PcapWriter>(std::move(w.value()));
    capture::PcapWriter* writer = d->capture_.get();
    d->dp_->set_tap([writer](ConstBytes frame, bool) {
      // Wall-clock timestamps, so that captures of two processes line up.
      const auto t = std::chrono::system_clock::now().time_since_epoch();
      writer->write(frame, std::chrono::duration_cast<std::chrono::nanoseconds>(t).count());
    });
  }
  if (!path.empty()) d->fault_log_path_ = path + ".faults";
  d->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  d->async_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (d->wake_fd_ < 0 || d->async_fd_ < 0) {
    return Err{Error::system(errno, "eventfd")};
  }
  d->acks_ = options.acks;
  d->stats_file_ = options.stats_file;
  d->sched_.reconfigure(d->base_config());
  d->device_->set_doorbell_handler(d.get());
  d->device_->set_completion_event_handler(d.get());
  d->open_stats_endpoint();
  if (!fault_text.empty()) (void)d->set_faults(fault_text);  // parsed above
  // An open device has its parts until close(), and no progress thread yet.
  UROCE_ASSERT(d->device_ && d->dp_ && d->engine_ && !d->has_progress_thread());
  if (!d->stats_file_.empty()) remember_open(d.get());
  return d;
}

UdpDevice::~UdpDevice() {
  close(kCloseDeadline);
  if (device_) device_->set_completion_event_handler(nullptr);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (async_fd_ >= 0) ::close(async_fd_);
}

// ---- progress ----

SchedulerConfig UdpDevice::base_config() const {
  SchedulerConfig c;
  c.acks = acks_;
  c.app_lease = kAppLease;
  return c;
}

RoundReport UdpDevice::round_locked(Instant t, const RoundPlan& plan, Engine::RoundKind kind,
                                    bool want_next_timer) {
  mu_.assert_held();
  UROCE_ASSERT(engine_ != nullptr);  // no round after close()
  const RoundReport r = engine_->round(t, plan, kind, want_next_timer);
  if (kind == Engine::RoundKind::kReceive) sync_async_fd_locked();
  return r;
}

bool UdpDevice::progress() { return application_round(true); }

bool UdpDevice::transmit() { return application_round(false); }

bool UdpDevice::application_round(bool receive) {
  if (closed_ || stopped_at_exit_) return false;
  const Instant t = now();
  RoundReport r;
  AppAfter after;
  // Per application thread, so that its capacity stays between rounds.
  thread_local std::vector<std::shared_ptr<Channel>> signals;
  {
    std::lock_guard lk(mu_);
    RoundPlan plan;
    {
      std::lock_guard sl(sched_mu_);
      plan = sched_.app_round_begin(t);
    }
    UROCE_ASSERT(!defer_channel_signals_);  // no round inside a round
    defer_channel_signals_ = true;
    r = round_locked(t, plan, receive ? Engine::RoundKind::kReceive : Engine::RoundKind::kTransmit,
                     false);
    defer_channel_signals_ = false;
    take_deferred_channels(signals);
    {
      std::lock_guard sl(sched_mu_);
      after = sched_.app_round_end(t, r);
    }
  }
  if (!signals.empty()) signal_deferred_channels(signals);
  if (after.wake_thread) signal_thread();
  maybe_serve_stats(t, false);
  return r.received > 0 || r.sent > 0;
}

UdpDevice::QuietDoorbells::QuietDoorbells() : was_(t_quiet_doorbells) { t_quiet_doorbells = true; }
UdpDevice::QuietDoorbells::~QuietDoorbells() { t_quiet_doorbells = was_; }

void UdpDevice::wait(Duration max_wait) {
  if (closed_ || stopped_at_exit_) return;
  const Instant t = now();
  Instant until = max_wait.is_infinite() ? Instant::never() : t + max_wait;
  {
    std::lock_guard lk(mu_);
    const RoundReport state = engine_->state(true);
    std::lock_guard sl(sched_mu_);
    until = sched_.app_wait_until(t, until, state);
  }
  pollfd p[2] = {{dp_->fd(), POLLIN, 0}, {stats_fd_, POLLIN, 0}};
  timespec ts;
  ::ppoll(p, stats_fd_ >= 0 ? 2 : 1, timeout_until(until, t, ts), nullptr);
  if (stats_fd_ >= 0 && (p[1].revents & POLLIN) != 0) maybe_serve_stats(now(), true);
  progress();
}

// ---- the progress thread ----

UdpDevice::Locked UdpDevice::lock() {
  // The mirror of the thread's courtesy: an application that polls in a tight loop would
  // otherwise take the lock straight back every time and starve the progress thread.
  for (int i = 0; i < 64 && thread_waiting_.load(std::memory_order_relaxed); ++i) {
    std::this_thread::yield();
  }
  app_waiting_.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock lk(mu_);
  app_waiting_.fetch_sub(1, std::memory_order_relaxed);
  return Locked(std::move(lk), device_.get());
}

std::string UdpDevice::start_progress_thread(const ProgressThreadOptions& options) {
  if (closed_) return "the device is closed";
  if (thread_.joinable()) return "the progress thread is already running";
  if (options.tx_budget == 0) return "tx_budget must be at least 1";
  UROCE_ASSERT(engine_ != nullptr);  // an open device has its engine until close()
  {
    SchedulerConfig c = base_config();
    c.progress_thread = true;
    c.spin = options.spin;
    c.blocked_app_spin = options.blocked_app_spin;
    c.tx_budget = options.tx_budget;
    std::lock_guard sl(sched_mu_);
    sched_.reconfigure(c);
  }
  stop_.store(false);
  // The thread takes none of the application's signals: a process-directed signal (qperf's
  // SIGALRM, a Ctrl-C) goes to an application thread, whose blocking call it interrupts, as
  // with libibverbs, which runs no thread. It starts with every signal blocked (the mask is
  // inherited); this thread's own mask is put back at once.
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  thread_ = std::thread(&UdpDevice::thread_main, this);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  UROCE_ASSERT(has_progress_thread());
  return "";
}

void UdpDevice::stop_progress_thread() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  signal_thread();
  thread_.join();
  UROCE_ASSERT(!has_progress_thread());
  // The thread let go of mu_ last after taking it: it says it waits only while it does.
  UROCE_ASSERT(!thread_waiting_.load(std::memory_order_relaxed));
  drain_fd(wake_fd_);
  std::lock_guard sl(sched_mu_);
  sched_.reconfigure(base_config());
}

void UdpDevice::application_waits() {
  bool wake;
  {
    std::lock_guard sl(sched_mu_);
    wake = sched_.app_blocks(now());
  }
  if (wake) signal_thread();
}

SchedulerCounters UdpDevice::scheduler_counters() {
  std::lock_guard sl(sched_mu_);
  return sched_.counters();
}

void UdpDevice::qp_changing(std::uint32_t /*qpn*/) {
  // Inside a Device call (under mu_ in thread mode). Sends every held ACK, not only this QP's:
  // simpler, and they are all due soon anyway.
  assert_in_device_call();
  if (!engine_) return;
  std::lock_guard sl(sched_mu_);
  engine_->flush_held_acks(now(), sched_.acks());
}

void UdpDevice::qp_destroying(std::uint32_t qpn) {
  // Inside destroy_qp (under mu_ in thread mode), right after qp_changing. The coordinator gets
  // the closed QP too: it answers for it once this context has closed (its block taken back).
  assert_in_device_call();
  // Its per-connection key goes with it: a QP created later with the same number must not seal
  // or open with it (docs/SECURITY.md).
  if (seal_) seal_->clear_connection_key(qpn);
  if (!engine_) return;
  const Instant t = now();
  auto closed = engine_->qp_destroying(t, qpn);
  UROCE_ASSERT(!closed || closed->qpn == qpn);
  if (closed && shared_) shared_->keep_closed_qp(*closed, closed->until - t);
}

void UdpDevice::qp_reset(std::uint32_t qpn) {
  // Inside modify_qp (under mu_ in thread mode), after the move. RESET takes everything of the
  // QP's connection (IBTA's Reset state; rxe_qp_reset), and the key is part of it: connected
  // again, the QP seals and opens with the device's pre-shared key (or sends plain) until a new
  // connection gives it a key of its own, whoever moved it (the drop-ins or the native API).
  assert_in_device_call();
  if (seal_) seal_->clear_connection_key(qpn);
}

void UdpDevice::doorbell(std::uint32_t qpn) {
  assert_in_device_call();
  UROCE_ASSERT(engine_ != nullptr);  // close() unhooks the doorbells before the engine goes
  engine_->doorbell(qpn);
  // Inside post_send (under mu_ in thread mode). A quiet doorbell's poster transmits itself
  // right after (QuietDoorbells): it neither wakes the thread nor asks it for a round.
  bool wake;
  {
    std::lock_guard sl(sched_mu_);
    wake = sched_.doorbell(t_quiet_doorbells);
  }
  if (wake) signal_thread();
}

void UdpDevice::thread_spin(Instant until) {
  // Busy-poll without the lock: a doorbell, a datagram, the application taking the socket or
  // `until` ends it.
  for (;;) {
    const Instant t = now();
    if (t >= until || stop_.load(std::memory_order_relaxed)) return;
    {
      std::lock_guard sl(sched_mu_);
      if (sched_.doorbell_pending() || sched_.owner() != Owner::kThread) return;
    }
    pollfd p{dp_->fd(), POLLIN, 0};
    if (::poll(&p, 1, 0) != 0) return;
    maybe_serve_stats(t, false);
    std::this_thread::yield();
  }
}

void UdpDevice::set_timer_slack(Duration slack) {
  // The thread's timer slack: how much later than asked the kernel may end its ppoll timeouts
  // (ppoll's timeout takes the larger of it and 0.1% of the span). Set only when it changes.
  if (slack == thread_slack_) return;
  thread_slack_ = slack;
  // 0 restores the thread's default (50 us, inherited).
  ::prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(slack.count_ns()), 0, 0, 0);
}

void UdpDevice::thread_sleep(const ThreadAction& a) {
  pollfd p[3];
  nfds_t n = 0;
  const short ev = a.kind == ThreadAction::Kind::kWaitWritable ? POLLIN | POLLOUT : POLLIN;
  if (a.watch_socket) p[n++] = {dp_->fd(), ev, 0};
  timespec ts;
  timespec* timeout = timeout_until(a.until, now(), ts);
  set_timer_slack(a.slack);
  const nfds_t wake = n;
  p[n++] = {wake_fd_, POLLIN, 0};
  const nfds_t stats = n;
  if (stats_fd_ >= 0) p[n++] = {stats_fd_, POLLIN, 0};
  ::ppoll(p, n, timeout, nullptr);
  thread_wakeups_.fetch_add(1, std::memory_order_relaxed);
  if ((p[wake].revents & POLLIN) != 0) drain_fd(wake_fd_);
  if (stats < n && (p[stats].revents & POLLIN) != 0) maybe_serve_stats(now(), true);
}

void UdpDevice::thread_main() {
  thread_slack_ = Duration::zero();  // a new thread starts with the default
  std::vector<std::shared_ptr<Channel>> signals;
  while (!stop_.load(std::memory_order_acquire)) {
    ThreadAction a;
    {
      std::lock_guard sl(sched_mu_);
      a = sched_.thread_next(now());
    }
    if (a.kind != ThreadAction::Kind::kRound) {
      if (a.kind == ThreadAction::Kind::kSpin) {
        thread_spin(a.until);
      } else {
        thread_sleep(a);
      }
      std::lock_guard sl(sched_mu_);
      sched_.thread_woke(now());
      continue;
    }
    Instant t;
    {
      thread_waiting_.store(true, std::memory_order_relaxed);
      std::lock_guard lk(mu_);
      thread_waiting_.store(false, std::memory_order_relaxed);
      t = now();
      UROCE_ASSERT(!defer_channel_signals_);  // no round inside a round
      defer_channel_signals_ = true;
      const RoundReport r = round_locked(t, a.plan, Engine::RoundKind::kReceive, true);
      defer_channel_signals_ = false;
      take_deferred_channels(signals);
      thread_rx_pkts_ += r.received;
      std::lock_guard sl(sched_mu_);
      sched_.thread_round_end(t, r);
    }
    signal_deferred_channels(signals);
    maybe_serve_stats(t, false);
    // Let an application thread that waits for the lock have it before the next round
    // (std::mutex is not fair: this thread would otherwise take it straight back).
    for (int i = 0; i < 64 && app_waiting_.load(std::memory_order_relaxed) > 0; ++i) {
      std::this_thread::yield();
    }
  }
}

// ---- completion channels ----

Result<std::uint64_t, Errc> UdpDevice::create_comp_channel() {
  auto ch = std::make_shared<Channel>();
  ch->fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (ch->fd < 0) return Err{Errc::kNoMemory};
  std::lock_guard lk(channels_mu_);
  const std::uint64_t tag = next_channel_++;
  [[maybe_unused]] const bool fresh = channels_.emplace(tag, std::move(ch)).second;
  UROCE_ASSERT(fresh);  // tags are never reused
  return tag;
}

std::shared_ptr<UdpDevice::Channel> UdpDevice::find_channel(std::uint64_t channel) const {
  std::lock_guard lk(channels_mu_);
  auto it = channels_.find(channel);
  return it == channels_.end() ? nullptr : it->second;
}

Errc UdpDevice::destroy_comp_channel(std::uint64_t channel) {
  std::lock_guard lk(channels_mu_);
  auto it = channels_.find(channel);
  if (it == channels_.end()) return Errc::kInvalidArgument;
  {
    std::lock_guard cl(it->second->mu);
    for (const auto& [cq, n] : it->second->unacked) {
      if (n != 0) return Errc::kBusy;
    }
  }
  channels_.erase(it);
  return Errc::kOk;
}

int UdpDevice::comp_channel_fd(std::uint64_t channel) const {
  auto ch = find_channel(channel);
  return ch ? ch->fd : -1;
}

void UdpDevice::cq_event(CqHandle cq, std::uint64_t channel) {
  // Called inside a Device call (under mu_ in thread mode): only record and signal.
  assert_in_device_call();
  auto ch = find_channel(channel);
  if (!ch) return;            // a CQ without a (live) channel: nobody to tell
  UROCE_ASSERT(ch->fd >= 0);  // a channel is created with its eventfd (create_comp_channel)
  std::lock_guard cl(ch->mu);
  ch->check();
  if (ch->events.empty()) {
    if (defer_channel_signals_) {
      if (!ch->signal_owed) {
        ch->signal_owed = true;
        deferred_signals_.push_back(ch);
      }
    } else {
      signal_fd(ch->fd);
    }
  }
  ch->events.push_back(cq);
  ch->check();
}

void UdpDevice::take_deferred_channels(std::vector<std::shared_ptr<Channel>>& out) {
  mu_.assert_held();
  UROCE_ASSERT(!defer_channel_signals_);  // the round that deferred them is over
  UROCE_ASSERT(out.empty());              // the last ones were signaled (and cleared)
  if (!deferred_signals_.empty()) std::swap(out, deferred_signals_);
  UROCE_ASSERT(deferred_signals_.empty());  // each owed signal is taken once
}

void UdpDevice::signal_deferred_channels(std::vector<std::shared_ptr<Channel>>& out) {
  for (const auto& ch : out) {
    // Under the channel's mutex (held for a few instructions), but no longer under the
    // device's: the fd is readable exactly while events wait and no signal is owed, so
    // get_cq_event() never reads an fd nobody wrote (the drop-in makes it blocking). Unless
    // get_cq_event() took the events meanwhile: then it cleared the debt and the fd stays quiet.
    std::lock_guard cl(ch->mu);
    if (ch->signal_owed && !ch->events.empty()) signal_fd(ch->fd);
    ch->signal_owed = false;
    ch->check();
  }
  out.clear();
}

Result<std::optional<CqHandle>, Errc> UdpDevice::get_cq_event(std::uint64_t channel,
                                                              Duration timeout) {
  auto ch = find_channel(channel);
  if (!ch) return Err{Errc::kInvalidArgument};
  const Instant until = deadline_after(timeout);
  for (;;) {
    {
      std::lock_guard cl(ch->mu);
      if (!ch->events.empty()) {
        const CqHandle cq = ch->events.front();
        ch->events.pop_front();
        ++ch->unacked[cq_key(cq)];
        if (ch->events.empty()) {
          // Readable exactly while events wait: drain what was written, or cancel the signal
          // still owed (nothing was written yet; a read would block on a blocking fd).
          if (ch->signal_owed) {
            ch->signal_owed = false;
          } else {
            drain_fd(ch->fd);
          }
        }
        ch->check();
        return std::optional<CqHandle>(cq);
      }
    }
    const Instant t = now();
    if (t >= until) return std::optional<CqHandle>();
    if (has_progress_thread() || closed_) {
      application_waits();
      pollfd p{ch->fd, POLLIN, 0};
      timespec ts;
      // A signal ends the wait, as it ends libibverbs' read() of the channel's fd (qperf stops
      // its timed tests with SIGALRM while it blocks here).
      if (::ppoll(&p, 1, timeout_until(until, t, ts), nullptr) < 0 && errno == EINTR) {
        return Err{Errc::kInterrupted};
      }
      if (closed_ && (p.revents & POLLIN) == 0) return std::optional<CqHandle>();
    } else {
      wait(std::min(until - t, kPollSlice));
    }
  }
}

Errc UdpDevice::ack_cq_events(std::uint64_t channel, CqHandle cq, std::uint32_t n) {
  auto ch = find_channel(channel);
  if (!ch) return Errc::kInvalidArgument;
  std::lock_guard cl(ch->mu);
  auto it = ch->unacked.find(cq_key(cq));
  if (it == ch->unacked.end() || it->second < n) return Errc::kInvalidArgument;
  UROCE_ASSERT(it->second > 0);  // a CQ with nothing unacknowledged has no entry
  it->second -= n;
  if (it->second == 0) ch->unacked.erase(it);
  return Errc::kOk;
}

std::uint32_t UdpDevice::unacked_cq_events(std::uint64_t channel, CqHandle cq) const {
  auto ch = find_channel(channel);
  if (!ch) return 0;
  std::lock_guard cl(ch->mu);
  auto it = ch->unacked.find(cq_key(cq));
  return it == ch->unacked.end() ? 0 : it->second;
}

// ---- asynchronous events ----

void UdpDevice::sync_async_fd_locked() {
  mu_.assert_held();
  UROCE_ASSERT(async_fd_ >= 0);  // created at open(), closed by the destructor
  const bool want = device_->has_async_event();
  if (want == async_signaled_) return;
  if (want) {
    signal_fd(async_fd_);
  } else {
    drain_if_readable(async_fd_);
  }
  async_signaled_ = want;
}

std::optional<AsyncEvent> UdpDevice::get_async_event(Duration timeout) {
  const Instant until = deadline_after(timeout);
  for (;;) {
    {
      std::lock_guard lk(mu_);
      std::optional<AsyncEvent> ev = device_->get_async_event();
      sync_async_fd_locked();
      if (ev) return ev;
    }
    const Instant t = now();
    if (t >= until) return std::nullopt;
    if (has_progress_thread() || closed_) {
      application_waits();
      pollfd p{async_fd_, POLLIN, 0};
      timespec ts;
      ::ppoll(&p, 1, timeout_until(until, t, ts), nullptr);
      if (closed_ && (p.revents & POLLIN) == 0) return std::nullopt;
    } else {
      wait(std::min(until - t, kPollSlice));
    }
  }
}

// ---- counters and the stats endpoint ----

DeviceStats UdpDevice::stats_locked() {
  mu_.assert_held();
  DeviceStats s;
  s.name = device_->name();
  s.pid = static_cast<int>(::getpid());
  s.engine = engine_ ? engine_->counters() : closed_engine_;
  s.datapath = dp_ ? dp_->counters() : closed_dp_;
  s.seal = seal_ ? seal_->counters() : closed_seal_;
  s.destroyed_qps = device_->destroyed_qp_counters();
  s.faults = dp_ ? fault_stats_locked() : closed_faults_;
  s.async_events_dropped = device_->async_events_dropped();
  s.cq_events_at_arm = device_->cq_events_at_arm();
  s.stats_requests = stats_requests_.load(std::memory_order_relaxed);
  s.thread_wakeups = thread_wakeups_.load(std::memory_order_relaxed);
  s.thread_rx_pkts = thread_rx_pkts_;
  {
    std::lock_guard sl(sched_mu_);  // inside mu_, as the rounds take it
    s.sched = sched_.counters();
  }
  const Instant t = now();
  for (const transport::Qp* qp : device_->live_qps()) {
    s.qps.push_back(engine_ ? qp_stats(*qp, *engine_, t) : qp_stats(*qp));
  }
  std::sort(s.qps.begin(), s.qps.end(),
            [](const QpStats& a, const QpStats& b) { return a.qpn < b.qpn; });
  for (const Device::CqState& c : device_->cq_states()) s.cqs.push_back(cq_stats_locked(c));
  return s;
}

CqStats UdpDevice::cq_stats_locked(const Device::CqState& c) const {
  CqStats s;
  s.cq = c.cq.index;
  s.queued = c.queued;
  s.capacity = c.capacity;
  s.arm = c.arm;
  s.error = c.error;
  s.events = c.events;
  auto ch = c.channel != 0 ? find_channel(c.channel) : nullptr;
  if (!ch) return s;
  s.has_channel = true;
  std::lock_guard cl(ch->mu);
  s.channel_waiting =
      static_cast<std::uint32_t>(std::count(ch->events.begin(), ch->events.end(), c.cq));
  auto it = ch->unacked.find(cq_key(c.cq));
  s.channel_unacked = it == ch->unacked.end() ? 0 : it->second;
  pollfd p{ch->fd, POLLIN, 0};
  s.channel_readable = ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
  return s;
}

Result<fault::FaultSpec, std::string> UdpDevice::set_faults(const std::string& text) {
  auto spec = fault::FaultSpec::parse(text);
  if (!spec.ok()) return Err{device_->name() + ": " + spec.error()};
  {
    std::lock_guard lk(mu_);
    if (!dp_) return Err{device_->name() + ": the device is closed"};
    if (!spec->empty() && !fault_log_path_.empty() && fault_log_ == nullptr) {
      fault_log_ = std::fopen(fault_log_path_.c_str(), "w");
      if (fault_log_ != nullptr) {
        std::fprintf(fault_log_,
                     "# uroce faults of %s (pid %d): time_ns dir packet kind class dest_qpn peer "
                     "rule\n",
                     device_->name().c_str(), static_cast<int>(::getpid()));
      }
    }
    if (fault_log_ != nullptr) {
      std::fprintf(fault_log_, "# spec \"%s\" seed %llu\n", spec->to_string().c_str(),
                   static_cast<unsigned long long>(spec->seed));
      std::FILE* log = fault_log_;
      dp_->set_fault_events([log](const fault::FaultEvent& e) {
        // Wall-clock time, as the capture's timestamps: the log lines up with it.
        const auto t = std::chrono::system_clock::now().time_since_epoch();
        std::fprintf(
            log, "%lld %s %llu %s %s %u %s %zu\n",
            static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(t).count()),
            e.info.dir == fault::Direction::kTx ? "tx" : "rx",
            static_cast<unsigned long long>(e.packet_number),
            std::string(fault::to_string(e.kind)).c_str(),
            std::string(fault::to_string(e.info.cls)).c_str(), e.info.dest_qpn,
            ip_to_string(e.info.peer).c_str(), e.rule);
      });
    }
    dp_->set_faults(spec.value(), now());
  }
  if (!spec->empty()) {
    std::fprintf(stderr, "uroce: %s: faults \"%s\" (seed %llu)\n", device_->name().c_str(),
                 spec->to_string().c_str(), static_cast<unsigned long long>(spec->seed));
  }
  return spec;
}

std::string UdpDevice::faults() {
  std::lock_guard lk(mu_);
  return dp_ ? dp_->fault_spec().to_string() : std::string();
}

std::string UdpDevice::serve_faults_request(std::string_view r) {
  // "faults show" | "faults set SPEC" | "faults clear"
  r.remove_prefix(std::string_view("faults").size());
  while (!r.empty() && r.front() == ' ') r.remove_prefix(1);
  std::string text;
  if (r == "show") {
    return "ok " + faults() + "\n";
  } else if (r == "clear") {
    text.clear();
  } else if (r.starts_with("set ")) {
    text = std::string(r.substr(4));
  } else {
    return "error: unknown faults request (expected show, set SPEC or clear)\n";
  }
  auto f = set_faults(text);
  if (!f.ok()) return "error: " + f.error() + "\n";
  return "ok " + f->to_string() + "\n";
}

FaultStats UdpDevice::fault_stats_locked() const {
  mu_.assert_held();
  UROCE_ASSERT(dp_ != nullptr);  // not after close() (closed_faults_ then)
  FaultStats f;
  if (!dp_->has_faults()) return f;
  f.spec = dp_->fault_spec().to_string();
  f.seed = dp_->fault_spec().seed;
  f.tx = dp_->fault_counters(fault::Direction::kTx);
  f.rx = dp_->fault_counters(fault::Direction::kRx);
  return f;
}

DeviceStats UdpDevice::stats() {
  std::lock_guard lk(mu_);
  return stats_locked();
}

bool UdpDevice::set_connection_key(std::uint32_t local_qpn, const wire::IpAddress& peer,
                                   std::uint32_t remote_qpn, ConstBytes key) {
  std::lock_guard lk(mu_);
  if (!seal_ || (key.size() != 16 && key.size() != 32)) return false;
  seal::Key k;
  k.size = key.size();
  std::copy(key.begin(), key.end(), k.bytes.begin());
  return seal_->set_connection_key(local_qpn, peer, remote_qpn, k);
}

void UdpDevice::clear_connection_key(std::uint32_t local_qpn) {
  std::lock_guard lk(mu_);
  if (seal_) seal_->clear_connection_key(local_qpn);
}

std::size_t UdpDevice::connection_keys() {
  std::lock_guard lk(mu_);
  return seal_ ? seal_->connection_keys() : 0;
}

void UdpDevice::flush_capture() {
  std::lock_guard lk(mu_);
  if (capture_) capture_->flush();
}

void UdpDevice::open_stats_endpoint() {
  // Without an endpoint the device still works; `uroce stats` just does not see it.
  UROCE_ASSERT(stats_fd_ < 0);  // opened once, at open()
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  const std::string base = "uroce/" + std::to_string(::getpid()) + "/" + device_->name();
  for (int n = 1; n <= 64; ++n) {
    const std::string name = n == 1 ? base : base + "~" + std::to_string(n);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (name.size() + 1 > sizeof a.sun_path) break;
    std::memcpy(a.sun_path + 1, name.data(), name.size());  // abstract: leading NUL
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), len) == 0) {
      stats_fd_ = fd;
      stats_name_ = name;
      return;
    }
    if (errno != EADDRINUSE) break;
  }
  ::close(fd);
}

void UdpDevice::serve_stats(Instant t, bool force) {
  std::unique_lock sl(stats_mu_, std::try_to_lock);
  if (!sl.owns_lock()) return;  // the other progress caller is serving
  if (!force && t.ns() < next_stats_check_ns_.load(std::memory_order_relaxed)) return;
  next_stats_check_ns_.store((t + kStatsCheckInterval).ns(), std::memory_order_relaxed);
  for (int i = 0; i < 16; ++i) {
    char req[2048];
    sockaddr_un from{};
    socklen_t from_len = sizeof from;
    const ssize_t n = ::recvfrom(stats_fd_, req, sizeof req - 1, MSG_DONTWAIT,
                                 reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 0) return;
    // An unbound sender has no address to answer to.
    if (from_len <= static_cast<socklen_t>(offsetof(sockaddr_un, sun_path))) continue;
    std::string_view r(req, static_cast<std::size_t>(n));
    while (!r.empty() && (r.back() == '\n' || r.back() == ' ')) r.remove_suffix(1);
    const bool json = r.starts_with("json");
    const bool text = r.starts_with("text");
    const bool with_qps = r.find(" qp") != std::string_view::npos;
    std::string body;
    if (r.starts_with("faults")) {
      body = serve_faults_request(r);
    } else if (!json && !text) {
      body =
          "error: unknown request (expected \"text\" or \"json\", optionally \" qp\", or "
          "\"faults show|set SPEC|clear\")\n";
    } else {
      stats_requests_.fetch_add(1, std::memory_order_relaxed);
      DeviceStats s;
      {
        std::lock_guard lk(mu_);
        s = stats_locked();
      }
      body = json ? format_stats_json(s, with_qps) : format_stats_text(s, with_qps);
    }
    // Chunks of kStatsChunk: '+' more follow, '.' the last. A client that does not read fast
    // enough loses the rest (MSG_DONTWAIT: the progress loop never blocks on it) and sees no
    // final chunk.
    std::size_t off = 0;
    std::string chunk;
    do {
      const std::size_t len = std::min(kStatsChunk, body.size() - off);
      const bool last = off + len == body.size();
      chunk.assign(1, last ? '.' : '+');
      chunk.append(body, off, len);
      UROCE_ASSERT(chunk.size() <= kStatsChunk + 1);  // what a client's buffer takes
      if (::sendto(stats_fd_, chunk.data(), chunk.size(), MSG_DONTWAIT,
                   reinterpret_cast<const sockaddr*>(&from), from_len) < 0) {
        break;
      }
      off += len;
    } while (off < body.size());
  }
}

// ---- shutdown ----

std::uint32_t UdpDevice::outstanding_locked(bool* tx_pending) {
  mu_.assert_held();
  UROCE_ASSERT(engine_ != nullptr && tx_pending != nullptr);  // close()'s drain, before reset
  std::uint32_t n = 0;
  for (transport::Qp* qp : device_->live_qps()) {
    const QpState st = qp->state();
    if (st == QpState::kRts || st == QpState::kSqd || st == QpState::kSqe) {
      n += qp->outstanding_send_wqes();
    }
    if (qp->has_transmit_work()) {
      *tx_pending = true;
      // Make sure the engine drives it (a QP resumed from SQD rings no doorbell).
      engine_->doorbell(qp->qpn());
    }
  }
  if (engine_->has_tx_work()) *tx_pending = true;
  return n;
}

void UdpDevice::stop_at_exit() {
  if (closed_ || stopped_at_exit_) return;
  stop_progress_thread();
  std::string line;
  {
    std::lock_guard lk(mu_);
    if (engine_) (void)engine_->flush_tx(now(), SIZE_MAX, AckMode::kSend);
    stopped_at_exit_ = true;
    line = format_stats_text(stats_locked(), false);
  }
  append_stats_line(stats_file_, line);
}

CloseResult UdpDevice::close(Duration deadline) {
  if (closed_) return close_result_;
  forget_open(this);
  stop_progress_thread();
  acks_.hold = false;  // the drain sends everything owed
  {
    std::lock_guard sl(sched_mu_);
    sched_.reconfigure(base_config());
  }
  CloseResult res;
  if (device_ && dp_ && engine_) {
    const Instant give_up = deadline_after(deadline);
    // Stopped at exit: nothing more goes out.
    while (!stopped_at_exit_) {
      Instant next;
      res = CloseResult{};
      {
        std::lock_guard lk(mu_);
        round_locked(now(), RoundPlan{}, Engine::RoundKind::kReceive, false);
        res.outstanding_send_wqes = outstanding_locked(&res.tx_pending);
        next = engine_->next_timeout();
      }
      if (res.outstanding_send_wqes == 0 && !res.tx_pending) break;
      const Instant t = now();
      if (t >= give_up) break;
      Instant until = std::min(next, give_up);
      short events = POLLIN;
      if (res.tx_pending) {
        events |= POLLOUT;
        until = std::min(until, t + Duration::ms(1));
      }
      pollfd p{dp_->fd(), events, 0};
      timespec ts;
      ::ppoll(&p, 1, timeout_until(until, t, ts), nullptr);
    }
    res.drained = res.outstanding_send_wqes == 0 && !res.tx_pending;
    std::lock_guard lk(mu_);
    device_->set_doorbell_handler(nullptr);
    dp_->set_tap(nullptr);
    dp_->set_fault_events(nullptr);
    if (capture_) capture_->flush();
    capture_.reset();
    if (fault_log_ != nullptr) std::fclose(fault_log_);
    fault_log_ = nullptr;
    // The QPs the application left go as if it had destroyed them (the kernel destroys a
    // process's QPs when it exits): the coordinator answers for them.
    for (transport::Qp* qp : device_->live_qps()) qp_destroying(qp->qpn());
    closed_engine_ = engine_->counters();
    closed_dp_ = dp_->counters();
    if (seal_) closed_seal_ = seal_->counters();
    closed_faults_ = fault_stats_locked();
    engine_.reset();
    seal_.reset();
    if (shared_) shared_->forget_socket();
    dp_.reset();  // closes the socket
    // Closed: only the counters remain.
    UROCE_ASSERT(!engine_ && !seal_ && !dp_ && !capture_ && fault_log_ == nullptr);
  }
  if (shared_) shared_->leave();
  if (stats_fd_ >= 0) {
    std::lock_guard sl(stats_mu_);
    ::close(stats_fd_);
    stats_fd_ = -1;
  }
  closed_ = true;
  close_result_ = res;
  // Once per device: stop_at_exit() may have appended them already.
  if (!stopped_at_exit_) append_stats_line(stats_file_, format_stats_text(stats(), false));
  return res;
}

Result<std::unique_ptr<UdpDevice>, Error> open_device(const DeviceSelection& sel,
                                                      const DeviceOptions& options) {
  auto spec = resolve_device(sel, options.source);
  if (!spec.ok()) return Err{Error(ENODEV, spec.error())};
  DeviceConfig cfg;
  cfg.name = spec.value().name;
  cfg.ip = spec.value().ip;
  cfg.netdev_mtu = 0;   // the interface's
  cfg.seed = sel.seed;  // 0: keys from the kernel's CSPRNG (UdpDevice::open)
  auto dev =
      UdpDevice::open(cfg, sel.port, sel.capture_path, UdpDevice::Sharing::kDefault, options);
  if (!dev.ok()) return Err{dev.error().within(cfg.name + " (" + ip_to_string(cfg.ip) + ")")};
  return std::move(dev.value());
}

}  // namespace uroce::engine

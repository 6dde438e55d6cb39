// Device creation, attributes, GID table, protection domains, async events and the engine's
// accessors. The other objects live in mr.cc, cq.cc, srq.cc, ah.cc and qp.cc.
#include <algorithm>

#include "cc/aimd.h"
#include "cc/dcqcn.h"
#include "cc/dcqcn_aimd.h"
#include "transport/qp.h"
#include "verbs/address.h"
#include "verbs/device_state.h"
#include "wire/ip.h"

namespace uroce {

using verbs::detail::DeviceState;
using verbs::detail::from_raw;
using verbs::detail::to_raw;
namespace vd = verbs::detail;

namespace verbs::detail {
namespace {

DeviceAttr make_device_attr(const wire::IpAddress& ip) {
  DeviceAttr a;
  a.fw_ver = "0.0.0";
  a.node_guid = node_guid_from_ip(ip);
  a.sys_image_guid = a.node_guid;
  a.max_mr_size = UINT64_MAX;
  a.page_size_cap = 0xfffff000;
  a.vendor_id = 0xffffff;  // rxe's RXE_VENDOR_ID: tools that check for a vendor see one
  a.vendor_part_id = 0;
  a.hw_ver = 0;
  a.max_qp = kMaxQp;
  a.max_qp_wr = transport::kMaxQpWr;
  // rxe's flags without those uroce does not implement (automatic path migration, SRQ
  // resize, memory management extensions, changing the physical port). Memory windows of type
  // 1 and 2B, as rxe. XRC, which rxe lacks (issue 41), as a ConnectX has it.
  a.device_cap_flags = kDeviceBadPkeyCntr | kDeviceBadQkeyCntr | kDeviceUdAvPortEnforce |
                       kDevicePortActiveEvent | kDeviceSysImageGuid | kDeviceRcRnrNakGen |
                       kDeviceMemWindow | kDeviceMemWindowType2B | kDeviceXrc;
  a.device_cap_flags_ex = kDeviceExFlushGlobal | kDeviceExAtomicWrite;
  // On-demand paging for every operation of every transport: uroce pins nothing, so every region
  // is paged as the process's memory is (verbs.h, kOdpSupport); rxe has RC only. The implicit
  // region works when asked for, but is not advertised (as rxe, which has none): UCX 1.13's
  // verbs memory domain, the one every non-mlx5 device gets, takes an advertised implicit ODP as
  // its registration method whenever its registration cache is off (UCX_MEM_EVENTS=no), and
  // then crashes in uct_ib_md_close (compat.ucx.* under ThreadSanitizer).
  constexpr std::uint32_t kOdpAll =
      kOdpSend | kOdpRecv | kOdpWrite | kOdpRead | kOdpAtomic | kOdpSrqRecv;
  a.odp.general_caps = kOdpSupport;
  a.odp.rc_odp_caps = kOdpAll;
  a.odp.uc_odp_caps = kOdpSend | kOdpRecv | kOdpWrite | kOdpSrqRecv;
  a.odp.ud_odp_caps = kOdpSend | kOdpRecv | kOdpSrqRecv;
  // XRC: RC's operations. A receive lands in an XRC SRQ (SRQ_RECV), never in a receive queue of
  // the QP's own, which XRC QPs have not (rdma-core's test_odp_xrc_traffic asks for SEND and
  // SRQ_RECV; ibv_query_device_ex's xrc_odp_caps).
  a.odp.xrc_odp_caps = kOdpSend | kOdpWrite | kOdpRead | kOdpAtomic | kOdpSrqRecv;
  a.max_sge = transport::kMaxSge;
  a.max_sge_rd = transport::kMaxSge;
  a.max_cq = kMaxCq;
  a.max_cqe = kMaxCqe;
  a.max_mr = kMaxMr;
  a.max_mw = kMaxMw;
  a.max_pd = kMaxPd;
  a.max_qp_rd_atom = transport::kMaxRdAtomic;
  a.max_ee_rd_atom = 0;
  a.max_res_rd_atom = kMaxResRdAtom;
  a.max_qp_init_rd_atom = transport::kMaxRdAtomic;
  a.max_ee_init_rd_atom = 0;
  a.atomic_cap = AtomicCap::kHca;
  // No multicast, EE contexts or raw QPs in uroce (rxe reports multicast).
  a.max_ah = kMaxAh;
  a.max_srq = kMaxSrq;
  a.max_srq_wr = kMaxSrqWr;
  a.max_srq_sge = kMaxSrqSge;
  a.max_pkeys = 1;
  a.local_ca_ack_delay = 15;
  a.phys_port_cnt = 1;
  a.max_inline_data = transport::kMaxInlineData;
  return a;
}

PortAttr make_port_attr(Mtu active_mtu, LinkRate rate) {
  PortAttr p;
  p.state = PortState::kActive;
  p.max_mtu = Mtu::k4096;
  p.active_mtu = active_mtu;
  p.gid_tbl_len = kGidTableLen;
  p.port_cap_flags = kPortCmSup;
  p.max_msg_sz = static_cast<std::uint32_t>(transport::kMaxMessageBytes);
  p.pkey_tbl_len = 1;
  p.max_vl_num = 1;
  p.active_width = rate.width;
  p.active_speed = rate.speed;
  p.phys_state = 5;  // LinkUp
  p.link_layer = LinkLayer::kEthernet;
  return p;
}

}  // namespace

DeviceState::DeviceState(const DeviceConfig& cfg)
    : config(cfg),
      attr(make_device_attr(cfg.ip)),
      port(make_port_attr(*port_mtu_for_netdev(cfg.netdev_mtu),
                          link_rate_for_eth_speed(cfg.link_speed_mbps))),
      gid{gid_from_ip(cfg.ip), GidType::kRoceV2},
      prng(cfg.seed),
      qpn_alloc(kMinQpn, kMaxQpn, kMaxQp, kMinQpn),
      events(cfg.async_event_queue_depth) {}

void DeviceState::push_event(const AsyncEvent& ev) {
  if (events.full()) {
    ++events_dropped;
    return;
  }
  events.push_back(ev);
}

void DeviceState::qp_event(std::uint32_t qpn, AsyncEventType type) {
  QpObj* q = qp_for_qpn(qpn);
  UROCE_ASSERT(q != nullptr);  // only live QPs report events
  if (q == nullptr) return;
  AsyncEvent ev;
  ev.type = type;
  ev.qp_num = qpn;
  // To every handle of the QP, as the kernel's __ib_shared_qp_event_handler().
  if (!q->closed) {
    ev.qp = q->self;
    push_event(ev);
  }
  for (QpHandle h : q->opened) {
    ev.qp = h;
    push_event(ev);
  }
}

QpObj* DeviceState::qp_of(QpHandle h) {
  QpObj* q = qps.get(to_raw(h));
  if (q == nullptr) return nullptr;
  if (!q->opened_qp.is_null()) return qps.get(to_raw(q->opened_qp));
  return q->closed ? nullptr : q;
}

void DeviceState::srq_limit_reached(transport::RecvQueue* rq) {
  for (SrqObj* srq : armed_srqs) {
    if (&srq->rq == rq) {
      report_srq_limit(srq);
      return;
    }
  }
}

void DeviceState::report_srq_limit(SrqObj* srq) {
  auto it = std::find(armed_srqs.begin(), armed_srqs.end(), srq);
  if (it == armed_srqs.end()) return;  // not armed, or already reported
  armed_srqs.erase(it);
  srq->attr.srq_limit = 0;
  AsyncEvent ev;
  ev.type = AsyncEventType::kSrqLimitReached;
  ev.srq = srq->self;
  push_event(ev);
}

void DeviceState::sweep_srq_limits() {
  // Collect first: report_srq_limit() edits the list.
  SrqObj* fired[kMaxSrq];
  std::size_t n = 0;
  for (SrqObj* srq : armed_srqs) {
    if (srq->rq.limit() == 0) fired[n++] = srq;
  }
  for (std::size_t i = 0; i < n; ++i) report_srq_limit(fired[i]);
}

QpObj* DeviceState::look_up_qpn(std::uint32_t qpn) const {
  const auto it = qp_by_qpn.find(qpn);
  if (it == qp_by_qpn.end()) return nullptr;
  last_qpn_ = qpn;
  last_qp_ = it->second;
  return it->second;
}

std::unique_ptr<cc::CongestionControl> make_congestion_control(const DeviceConfig& config) {
  cc::DcqcnParams dcqcn = config.dcqcn;
  if (dcqcn.line_rate_mbps == 0) dcqcn.line_rate_mbps = config.link_speed_mbps;
  switch (config.congestion_control) {
    case DeviceConfig::CongestionControl::kDcqcn:
      return std::make_unique<cc::Dcqcn>(dcqcn);
    case DeviceConfig::CongestionControl::kAimd:
      return std::make_unique<cc::Aimd>(config.aimd);
    case DeviceConfig::CongestionControl::kDcqcnAimd:
      return std::make_unique<cc::DcqcnAimd>(dcqcn, config.aimd);
    case DeviceConfig::CongestionControl::kNone:
      break;
  }
  return std::make_unique<cc::NoCongestionControl>();  // kNone, or not one
}

}  // namespace verbs::detail

LinkRate link_rate_for_eth_speed(std::uint32_t mbps) {
  // ib_get_eth_speed(): an unknown speed counts as SPEED_1000.
  if (mbps == 0) mbps = 1000;
  constexpr std::uint8_t k1x = 1, k4x = 2;                           // IB_WIDTH_*
  constexpr std::uint8_t kSdr = 1, kDdr = 2, kFdr10 = 8, kEdr = 32;  // IB_SPEED_*
  if (mbps <= 1000) return {k1x, kSdr};
  if (mbps <= 10000) return {k1x, kFdr10};
  if (mbps <= 20000) return {k4x, kDdr};
  if (mbps <= 25000) return {k1x, kEdr};
  if (mbps <= 40000) return {k4x, kFdr10};
  return {k4x, kEdr};
}

namespace {

struct CcName {
  DeviceConfig::CongestionControl cc;
  const char* name;
};
constexpr CcName kCcNames[] = {
    {DeviceConfig::CongestionControl::kNone, "none"},
    {DeviceConfig::CongestionControl::kDcqcn, "dcqcn"},
    {DeviceConfig::CongestionControl::kAimd, "aimd"},
    {DeviceConfig::CongestionControl::kDcqcnAimd, "dcqcn-aimd"},
};

}  // namespace

const char* congestion_control_name(DeviceConfig::CongestionControl cc) {
  for (const CcName& n : kCcNames) {
    if (n.cc == cc) return n.name;
  }
  return "?";
}

std::uint8_t congestion_control_ecn(DeviceConfig::CongestionControl cc) {
  DeviceConfig config;
  config.congestion_control = cc;
  return vd::make_congestion_control(config)->ecn_capable() ? wire::kEcnEct0 : 0;
}

std::optional<DeviceConfig::CongestionControl> congestion_control_from_name(std::string_view name) {
  for (const CcName& n : kCcNames) {
    if (name == n.name) return n.cc;
  }
  return std::nullopt;
}

Result<std::unique_ptr<Device>, Errc> Device::create(const DeviceConfig& config) {
  if (config.name.empty() || config.name.size() > 63) return Err{Errc::kInvalidArgument};
  if (verbs::ip_is_unspecified(config.ip)) return Err{Errc::kInvalidArgument};
  if (!verbs::port_mtu_for_netdev(config.netdev_mtu)) return Err{Errc::kInvalidArgument};
  if (config.async_event_queue_depth == 0) return Err{Errc::kInvalidArgument};
  if (config.num_comp_vectors == 0) return Err{Errc::kInvalidArgument};
  return std::unique_ptr<Device>(new Device(std::make_unique<DeviceState>(config)));
}

Device::Device(std::unique_ptr<DeviceState> state) : s_(std::move(state)) {}
Device::~Device() = default;

const std::string& Device::name() const { return s_->config.name; }
const DeviceAttr& Device::query_device() const { return s_->attr; }

Result<PortAttr, Errc> Device::query_port(std::uint8_t port_num) const {
  if (port_num != 1) return Err{Errc::kInvalidArgument};
  return s_->port;
}

Result<GidEntry, Errc> Device::query_gid_entry(std::uint8_t port_num, std::uint32_t index) const {
  if (port_num != 1 || index >= vd::kGidTableLen) return Err{Errc::kInvalidArgument};
  if (index != 0) return Err{Errc::kNoEntry};
  return s_->gid;
}

Result<Gid, Errc> Device::query_gid(std::uint8_t port_num, std::uint32_t index) const {
  auto e = query_gid_entry(port_num, index);
  if (e) return e->gid;
  if (e.error() == Errc::kNoEntry) return Gid{};  // libibverbs: an empty entry reads as zero
  return Err{e.error()};
}

Result<std::uint16_t, Errc> Device::query_pkey(std::uint8_t port_num, std::uint32_t index) const {
  if (port_num != 1 || index != 0) return Err{Errc::kInvalidArgument};
  return vd::kDefaultPkey;
}

Result<PdHandle, Errc> Device::alloc_pd() {
  auto pd = std::make_unique<vd::PdObj>();
  pd->id = s_->next_pd_id++;
  const RawHandle h = s_->pds.insert(std::move(pd));
  if (h.generation == 0) return Err{Errc::kNoMemory};
  return from_raw<PdHandle>(h);
}

Errc Device::dealloc_pd(PdHandle pd) {
  vd::PdObj* p = s_->pds.get(to_raw(pd));
  if (p == nullptr) return Errc::kInvalidArgument;
  if (p->use_count != 0) return Errc::kBusy;
  s_->pds.remove(to_raw(pd));
  return Errc::kOk;
}

bool Device::has_async_event() {
  s_->sweep_srq_limits();
  return !s_->events.empty();
}

std::optional<AsyncEvent> Device::get_async_event() {
  s_->sweep_srq_limits();
  if (s_->events.empty()) return std::nullopt;
  AsyncEvent ev = s_->events.front();
  s_->events.pop_front();
  return ev;
}

std::uint64_t Device::async_events_dropped() const { return s_->events_dropped; }

std::uint64_t Device::cq_events_at_arm() const { return s_->cq_events_at_arm; }

const wire::IpAddress& Device::local_ip() const { return s_->config.ip; }
Mtu Device::active_mtu() const { return s_->port.active_mtu; }
std::uint32_t Device::active_mtu_bytes() const { return mtu_bytes(s_->port.active_mtu); }

transport::Qp* Device::find_qp(std::uint32_t qpn) const {
  vd::QpObj* q = s_->qp_for_qpn(qpn);
  return q == nullptr ? nullptr : q->qp.get();
}

std::span<transport::Qp* const> Device::live_qps() const { return s_->live_qps; }

const transport::QpCounters& Device::destroyed_qp_counters() const { return s_->destroyed_qps; }

transport::MemoryResolver& Device::memory() { return *s_; }

void Device::set_completion_event_handler(CompletionEventHandler* handler) {
  s_->comp_handler = handler;
}

void Device::set_doorbell_handler(DoorbellHandler* handler) { s_->doorbell_handler = handler; }

Errc Device::set_qpn_source(QpnSource* source) {
  if (!s_->qp_by_qpn.empty()) return Errc::kBusy;
  s_->qpn_source = source;
  return Errc::kOk;
}

}  // namespace uroce

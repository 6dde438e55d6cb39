#include "tools/devinfo_cmd.h"

#include <memory>
#include <vector>

#include "datapath/udp.h"
#include "device/device_config.h"
#include "edge/environment.h"
#include "tools/ping_cmd.h"
#include "uroce/verbs.h"
#include "verbs/address.h"

namespace uroce::tools {
namespace {

// The node GUID as a number whose most significant byte is GUID byte 0 (DeviceAttr's
// convention), printed as ibv_devinfo does: four groups of four hex digits.
std::string guid_groups(std::uint64_t g) {
  char s[20];
  std::snprintf(s, sizeof s, "%04x:%04x:%04x:%04x", static_cast<unsigned>(g >> 48) & 0xffff,
                static_cast<unsigned>(g >> 32) & 0xffff, static_cast<unsigned>(g >> 16) & 0xffff,
                static_cast<unsigned>(g) & 0xffff);
  return s;
}

// A value's name in one of the tables below, as ibv_devinfo prints it; `unknown` for a value
// none names.
template <typename T>
struct Named {
  T value;
  const char* name;
};

template <typename T, std::size_t N>
const char* name_of(T value, const Named<T> (&names)[N], const char* unknown) {
  for (const Named<T>& n : names) {
    if (n.value == value) return n.name;
  }
  return unknown;
}

const char* port_state_name(PortState s) {
  static constexpr Named<PortState> kNames[] = {{PortState::kNop, "PORT_NOP"},
                                                {PortState::kDown, "PORT_DOWN"},
                                                {PortState::kInit, "PORT_INIT"},
                                                {PortState::kArmed, "PORT_ARMED"},
                                                {PortState::kActive, "PORT_ACTIVE"}};
  return name_of(s, kNames, "invalid state");
}

const char* phys_state_name(std::uint8_t s) {
  static constexpr Named<std::uint8_t> kNames[] = {
      {1, "SLEEP"},    {2, "POLLING"},
      {3, "DISABLED"}, {4, "PORT_CONFIGURATION TRAINNING"},
      {5, "LINK_UP"},  {6, "LINK_ERROR_RECOVERY"},
      {7, "PHY TEST"}};
  return name_of(s, kNames, "invalid physical state");
}

const char* link_layer_name(LinkLayer l) {
  static constexpr Named<LinkLayer> kNames[] = {{LinkLayer::kInfiniband, "InfiniBand"},
                                                {LinkLayer::kEthernet, "Ethernet"}};
  return name_of(l, kNames, "Unknown");
}

const char* atomic_cap_name(AtomicCap a) {
  static constexpr Named<AtomicCap> kNames[] = {{AtomicCap::kNone, "ATOMIC_NONE"},
                                                {AtomicCap::kHca, "ATOMIC_HCA"},
                                                {AtomicCap::kGlob, "ATOMIC_GLOB"}};
  return name_of(a, kNames, "invalid atomic capability");
}

// The IBTA's width and speed codes (ibv_width_str, ibv_speed_str).
const char* width_name(std::uint8_t w) {
  static constexpr Named<std::uint8_t> kNames[] = {
      {1, "1"}, {2, "4"}, {4, "8"}, {8, "12"}, {16, "2"}};
  return name_of(w, kNames, "invalid width");
}

const char* speed_name(std::uint8_t s) {
  static constexpr Named<std::uint8_t> kNames[] = {
      {1, "2.5 Gbps"},   {2, "5.0 Gbps"},   {4, "10.0 Gbps"},  {8, "10.0 Gbps"},
      {16, "14.0 Gbps"}, {32, "25.0 Gbps"}, {64, "50.0 Gbps"}, {128, "100.0 Gbps"}};
  return name_of(s, kNames, "invalid speed");
}

void print_cap_flags(std::FILE* out, std::uint32_t flags) {
  // IBV_DEVICE_* names for the bits uroce can report (verbs.h DeviceCapFlag), in bit order as
  // ibv_devinfo prints them.
  static const struct {
    std::uint32_t bit;
    const char* name;
  } kNames[] = {{kDeviceBadPkeyCntr, "BAD_PKEY_CNTR"},
                {kDeviceBadQkeyCntr, "BAD_QKEY_CNTR"},
                {kDeviceUdAvPortEnforce, "UD_AV_PORT_ENFORCE"},
                {kDevicePortActiveEvent, "PORT_ACTIVE_EVENT"},
                {kDeviceSysImageGuid, "SYS_IMAGE_GUID"},
                {kDeviceRcRnrNakGen, "RC_RNR_NAK_GEN"},
                {kDeviceMemWindow, "MEM_WINDOW"},
                {kDeviceXrc, "XRC"},
                {kDeviceMemWindowType2B, "MEM_WINDOW_TYPE_2B"}};
  std::uint32_t unknown = flags;
  for (const auto& n : kNames) {
    if (flags & n.bit) {
      std::fprintf(out, "\t\t\t\t\t%s\n", n.name);
      unknown &= ~n.bit;
    }
  }
  if (unknown != 0) std::fprintf(out, "\t\t\t\t\tUnknown flags: 0x%x\n", unknown);
}

// The 32-bit limits ibv_devinfo -v prints, in its order and with its tab alignment.
struct LimitRow {
  const char* label;
  std::uint32_t DeviceAttr::*field;
};
constexpr LimitRow kLimitsBeforeFlags[] = {
    {"max_qp:\t\t\t\t", &DeviceAttr::max_qp},
    {"max_qp_wr:\t\t\t", &DeviceAttr::max_qp_wr},
};
constexpr LimitRow kLimitsBeforeAtomic[] = {
    {"max_sge:\t\t\t", &DeviceAttr::max_sge},
    {"max_sge_rd:\t\t\t", &DeviceAttr::max_sge_rd},
    {"max_cq:\t\t\t\t", &DeviceAttr::max_cq},
    {"max_cqe:\t\t\t", &DeviceAttr::max_cqe},
    {"max_mr:\t\t\t\t", &DeviceAttr::max_mr},
    {"max_pd:\t\t\t\t", &DeviceAttr::max_pd},
    {"max_qp_rd_atom:\t\t\t", &DeviceAttr::max_qp_rd_atom},
    {"max_ee_rd_atom:\t\t\t", &DeviceAttr::max_ee_rd_atom},
    {"max_res_rd_atom:\t\t", &DeviceAttr::max_res_rd_atom},
    {"max_qp_init_rd_atom:\t\t", &DeviceAttr::max_qp_init_rd_atom},
    {"max_ee_init_rd_atom:\t\t", &DeviceAttr::max_ee_init_rd_atom},
};
constexpr LimitRow kLimitsAfterAtomic[] = {
    {"max_ee:\t\t\t\t", &DeviceAttr::max_ee},
    {"max_rdd:\t\t\t", &DeviceAttr::max_rdd},
    {"max_mw:\t\t\t\t", &DeviceAttr::max_mw},
    {"max_raw_ipv6_qp:\t\t", &DeviceAttr::max_raw_ipv6_qp},
    {"max_raw_ethy_qp:\t\t", &DeviceAttr::max_raw_ethy_qp},
    {"max_mcast_grp:\t\t\t", &DeviceAttr::max_mcast_grp},
    {"max_mcast_qp_attach:\t\t", &DeviceAttr::max_mcast_qp_attach},
    {"max_total_mcast_qp_attach:\t", &DeviceAttr::max_total_mcast_qp_attach},
    {"max_ah:\t\t\t\t", &DeviceAttr::max_ah},
    {"max_fmr:\t\t\t", &DeviceAttr::max_fmr},
    {"max_srq:\t\t\t", &DeviceAttr::max_srq},
    {"max_srq_wr:\t\t\t", &DeviceAttr::max_srq_wr},
    {"max_srq_sge:\t\t\t", &DeviceAttr::max_srq_sge},
};

template <std::size_t N>
void print_limit_rows(std::FILE* out, const DeviceAttr& a, const LimitRow (&rows)[N]) {
  for (const LimitRow& r : rows) std::fprintf(out, "\t%s%u\n", r.label, a.*r.field);
}

void print_device_limits(std::FILE* out, const DeviceAttr& a, std::uint32_t num_comp_vectors) {
  std::fprintf(out, "\tmax_mr_size:\t\t\t0x%llx\n", static_cast<unsigned long long>(a.max_mr_size));
  std::fprintf(out, "\tpage_size_cap:\t\t\t0x%llx\n",
               static_cast<unsigned long long>(a.page_size_cap));
  print_limit_rows(out, a, kLimitsBeforeFlags);
  std::fprintf(out, "\tdevice_cap_flags:\t\t0x%08x\n", a.device_cap_flags);
  print_cap_flags(out, a.device_cap_flags);
  print_limit_rows(out, a, kLimitsBeforeAtomic);
  std::fprintf(out, "\tatomic_cap:\t\t\t%s (%d)\n", atomic_cap_name(a.atomic_cap),
               static_cast<int>(a.atomic_cap));
  print_limit_rows(out, a, kLimitsAfterAtomic);
  std::fprintf(out, "\tmax_pkeys:\t\t\t%u\n", a.max_pkeys);
  std::fprintf(out, "\tlocal_ca_ack_delay:\t\t%u\n", a.local_ca_ack_delay);
  std::fprintf(out, "\tnum_comp_vectors:\t\t%u\n", num_comp_vectors);
}

void print_port(std::FILE* out, const Device& dev, std::uint8_t port, const PortAttr& p,
                bool verbose) {
  std::fprintf(out, "\t\tport:\t%u\n", port);
  std::fprintf(out, "\t\t\tstate:\t\t\t%s (%d)\n", port_state_name(p.state),
               static_cast<int>(p.state));
  std::fprintf(out, "\t\t\tmax_mtu:\t\t%u (%d)\n", mtu_bytes(p.max_mtu),
               static_cast<int>(p.max_mtu));
  std::fprintf(out, "\t\t\tactive_mtu:\t\t%u (%d)\n", mtu_bytes(p.active_mtu),
               static_cast<int>(p.active_mtu));
  std::fprintf(out, "\t\t\tsm_lid:\t\t\t%u\n", p.sm_lid);
  std::fprintf(out, "\t\t\tport_lid:\t\t%u\n", p.lid);
  std::fprintf(out, "\t\t\tport_lmc:\t\t0x%02x\n", p.lmc);
  std::fprintf(out, "\t\t\tlink_layer:\t\t%s\n", link_layer_name(p.link_layer));
  if (verbose) {
    std::fprintf(out, "\t\t\tmax_msg_sz:\t\t0x%x\n", p.max_msg_sz);
    std::fprintf(out, "\t\t\tport_cap_flags:\t\t0x%08x\n", p.port_cap_flags);
    std::fprintf(out, "\t\t\tport_cap_flags2:\t0x0000\n");
    std::fprintf(out, "\t\t\tmax_vl_num:\t\t%u (%u)\n", p.max_vl_num, p.max_vl_num);
    std::fprintf(out, "\t\t\tbad_pkey_cntr:\t\t0x%x\n", p.bad_pkey_cntr);
    std::fprintf(out, "\t\t\tqkey_viol_cntr:\t\t0x%x\n", p.qkey_viol_cntr);
    std::fprintf(out, "\t\t\tsm_sl:\t\t\t%u\n", p.sm_sl);
    std::fprintf(out, "\t\t\tpkey_tbl_len:\t\t%u\n", p.pkey_tbl_len);
    std::fprintf(out, "\t\t\tgid_tbl_len:\t\t%u\n", p.gid_tbl_len);
    std::fprintf(out, "\t\t\tsubnet_timeout:\t\t%u\n", p.subnet_timeout);
    std::fprintf(out, "\t\t\tinit_type_reply:\t%u\n", p.init_type_reply);
    std::fprintf(out, "\t\t\tactive_width:\t\t%sX (%u)\n", width_name(p.active_width),
                 p.active_width);
    std::fprintf(out, "\t\t\tactive_speed:\t\t%s (%u)\n", speed_name(p.active_speed),
                 p.active_speed);
    std::fprintf(out, "\t\t\tphys_state:\t\t%s (%u)\n", phys_state_name(p.phys_state),
                 p.phys_state);
  }
  // The GID table (ibv_devinfo prints it with -v only; uroce always does: it is how a peer
  // addresses this device). Empty entries are skipped, as ibv_devinfo does.
  for (std::uint32_t i = 0; i < p.gid_tbl_len; ++i) {
    auto e = dev.query_gid_entry(port, i);
    if (!e.ok()) continue;
    const char* type = e->type == GidType::kRoceV2   ? "RoCE v2"
                       : e->type == GidType::kRoceV1 ? "RoCE v1"
                                                     : "IB";
    std::fprintf(out, "\t\t\tGID[%3u]:\t\t%s, %s\n", i, gid_to_text(e->gid).c_str(), type);
  }
  std::fprintf(out, "\n");
}

// The Device of `spec`, without a socket: the port MTU follows the interface like rxe's.
Result<std::unique_ptr<Device>, std::string> make_device(const engine::DeviceSpec& spec) {
  auto mtu = datapath::interface_mtu(spec.ip);
  if (!mtu.ok()) {
    return Err{spec.name + " (" + engine::ip_to_string(spec.ip) + "): " + mtu.error().text};
  }
  DeviceConfig cfg;
  cfg.name = spec.name;
  cfg.ip = spec.ip;
  cfg.netdev_mtu =
      seal::roce_share_of_mtu(mtu.value(), spec.seal ? spec.seal->mode : seal::Mode::kOff);
  cfg.link_speed_mbps = datapath::interface_speed_mbps(spec.ip);  // as the drop-in's
  cfg.num_comp_vectors = engine::host_num_comp_vectors();
  auto dev = Device::create(cfg);
  if (!dev.ok()) {
    return Err{spec.name + " (" + engine::ip_to_string(spec.ip) + "): cannot create the device: " +
               errc_name(dev.error()) + " (interface MTU " + std::to_string(mtu.value()) + ")"};
  }
  return std::move(dev.value());
}

}  // namespace

int devices_run(std::FILE* out, std::FILE* err) {
  auto list = engine::configured_devices(edge::device_source());
  if (!list.ok()) {
    std::fprintf(err, "uroce devices: %s\n", list.error().c_str());
    return 1;
  }
  std::fprintf(out, "    %-16s\t   node GUID\n", "device");
  std::fprintf(out, "    %-16s\t----------------\n", "------");
  for (const auto& d : list.value()) {
    std::fprintf(out, "    %-16s\t%016llx\n", d.name.c_str(),
                 static_cast<unsigned long long>(verbs::node_guid_from_ip(d.ip)));
  }
  return 0;
}

int devinfo_run(const DevinfoOptions& opt, std::FILE* out, std::FILE* err) {
  std::vector<engine::DeviceSpec> specs;
  if (!opt.ib_dev.empty() || !opt.address.empty()) {
    engine::DeviceSelection sel;
    sel.name = opt.ib_dev;
    sel.ip = opt.address;
    auto spec = engine::resolve_device(sel, edge::device_source());
    if (!spec.ok()) {
      std::fprintf(err, "uroce devinfo: %s\n", spec.error().c_str());
      return 1;
    }
    specs.push_back(spec.value());
  } else {
    auto list = engine::configured_devices(edge::device_source());
    if (!list.ok()) {
      std::fprintf(err, "uroce devinfo: %s\n", list.error().c_str());
      return 1;
    }
    specs = list.value();
  }
  if (opt.list) {
    std::fprintf(out, "%zu HCA%s found:\n", specs.size(), specs.size() == 1 ? "" : "s");
    for (const auto& s : specs) std::fprintf(out, "\t%s\n", s.name.c_str());
    return 0;
  }
  int rc = 0;
  for (const auto& spec : specs) {
    auto dev = make_device(spec);
    if (!dev.ok()) {
      std::fprintf(err, "uroce devinfo: %s\n", dev.error().c_str());
      rc = 1;
      continue;
    }
    const Device& d = *dev.value();
    const DeviceAttr& a = d.query_device();
    std::fprintf(out, "hca_id:\t%s\n", d.name().c_str());
    // libibverbs reports RoCE devices, rxe included, with the InfiniBand transport; the
    // RoCE v2 part shows in the link layer (Ethernet) and the GID types.
    std::fprintf(out, "\ttransport:\t\t\tInfiniBand (0)\n");
    std::fprintf(out, "\tfw_ver:\t\t\t\t%s\n", a.fw_ver.c_str());
    std::fprintf(out, "\tnode_guid:\t\t\t%s\n", guid_groups(a.node_guid).c_str());
    std::fprintf(out, "\tsys_image_guid:\t\t\t%s\n", guid_groups(a.sys_image_guid).c_str());
    std::fprintf(out, "\tvendor_id:\t\t\t0x%04x\n", a.vendor_id);
    std::fprintf(out, "\tvendor_part_id:\t\t\t%u\n", a.vendor_part_id);
    std::fprintf(out, "\thw_ver:\t\t\t\t0x%x\n", a.hw_ver);
    std::fprintf(out, "\tphys_port_cnt:\t\t\t%u\n", a.phys_port_cnt);
    if (opt.verbose) print_device_limits(out, a, engine::host_num_comp_vectors());
    for (std::uint8_t port = 1; port <= a.phys_port_cnt; ++port) {
      if (opt.ib_port != 0 && opt.ib_port != port) continue;
      auto p = d.query_port(port);
      if (!p.ok()) continue;
      print_port(out, d, port, p.value(), opt.verbose);
    }
    if (opt.ib_port != 0 && (opt.ib_port < 1 || opt.ib_port > a.phys_port_cnt)) {
      std::fprintf(err, "uroce devinfo: %s has no port %d (ports 1..%u)\n", d.name().c_str(),
                   opt.ib_port, a.phys_port_cnt);
      rc = 1;
    }
  }
  return rc;
}

}  // namespace uroce::tools

// Address handles: a RoCE v2 address vector resolved from the AH attributes.
#include "verbs/address.h"
#include "verbs/device_state.h"

namespace uroce {

using verbs::detail::from_raw;
using verbs::detail::to_raw;
namespace vd = verbs::detail;

namespace verbs::detail {

// rdma_check_ah_attr() (the port exists; RoCE needs the GRH) and rxe_av_chk_attr() (the source
// GID index names a valid RoCE v2 entry), then the destination: the GID's address, which must
// be of the device's family (rxe takes the packet's family from the source GID).
Result<transport::AddressVector, Errc> DeviceState::resolve_ah_attr(const AhAttr& a) const {
  if (a.port_num != 1 || !a.is_global) return Err{Errc::kInvalidArgument};
  if (a.sgid_index != 0) return Err{Errc::kInvalidArgument};  // the only valid GID entry
  const std::optional<wire::IpAddress> dst = ip_from_gid(a.dgid);
  if (!dst || dst->v6 != config.ip.v6) return Err{Errc::kInvalidArgument};
  transport::AddressVector av;
  av.dst = *dst;
  av.traffic_class = a.traffic_class;
  av.hop_limit = a.hop_limit;
  av.flow_label = a.flow_label & 0xfffffu;
  av.udp_sport = 0;
  return av;
}

}  // namespace verbs::detail

Result<AhHandle, Errc> Device::create_ah(PdHandle pd, const AhAttr& attr) {
  vd::DeviceState& s = *s_;
  vd::PdObj* p = s.pds.get(to_raw(pd));
  if (p == nullptr) return Err{Errc::kInvalidArgument};
  auto av = s.resolve_ah_attr(attr);
  if (!av) return Err{av.error()};
  if (s.ahs.full()) return Err{Errc::kNoMemory};
  auto ah = std::make_unique<vd::AhObj>();
  ah->pd = pd;
  ah->attr = attr;
  ah->av = *av;
  // The UDP source port: from a nonzero flow label as ibv_flow_label_to_udp_sport() computes
  // it; with flow label 0 the sending QP's own port (rxe sends every UD packet from the QP's
  // port, hash_32(qpn)), filled in by post_send().
  if (av->flow_label != 0) ah->av.udp_sport = wire::flow_label_to_udp_sport(av->flow_label);
  const RawHandle h = s.ahs.insert(std::move(ah));
  UROCE_CHECK(h.generation != 0);
  ++p->use_count;
  return from_raw<AhHandle>(h);
}

Result<AhAttr, Errc> Device::query_ah(AhHandle ah) const {
  const vd::AhObj* a = s_->ahs.get(to_raw(ah));
  if (a == nullptr) return Err{Errc::kInvalidArgument};
  return a->attr;
}

Errc Device::destroy_ah(AhHandle ah) {
  vd::DeviceState& s = *s_;
  vd::AhObj* a = s.ahs.get(to_raw(ah));
  if (a == nullptr) return Errc::kInvalidArgument;
  vd::PdObj* p = s.pds.get(to_raw(a->pd));
  UROCE_CHECK(p != nullptr && p->use_count > 0);
  --p->use_count;
  s.ahs.remove(to_raw(ah));
  return Errc::kOk;
}

}  // namespace uroce

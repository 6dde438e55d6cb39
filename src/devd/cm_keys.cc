#include "devd/cm_keys.h"

#include <cstring>

#include "base/bytes.h"
#include "wire/cm_mad.h"

namespace uroce::engine {

namespace {

// Offsets in a MAD: the attribute ID, and the REP's and RTU's first two fields (local and remote
// communication IDs, cm_mad.def).
constexpr std::size_t kLocalCommId = wire::kMadHeaderBytes;
constexpr std::size_t kRemoteCommId = wire::kMadHeaderBytes + 4;
constexpr std::size_t kMaxPeers = 65536;  // as CmConfig::max_connections

std::uint16_t attr_of(ConstBytes mad) { return load_be16(mad, wire::kMadOffAttrId); }

bool carries_share(ConstBytes mad) {
  const std::uint16_t a = attr_of(mad);
  return a == static_cast<std::uint16_t>(wire::CmAttr::kRep) ||
         a == static_cast<std::uint16_t>(wire::CmAttr::kRtu);
}

}  // namespace

std::optional<ConstBytes> CmKeys::on_receive(ConstBytes payload) {
  if (payload.size() == wire::kMadBytes) return payload;
  if (payload.size() != wire::kMadBytes + kExtensionBytes) return std::nullopt;
  const ConstBytes mad = payload.first(wire::kMadBytes);
  const ConstBytes ext = payload.subspan(wire::kMadBytes);
  if (!carries_share(mad) || std::memcmp(ext.data(), kExtensionMagic.data(), 4) != 0 ||
      static_cast<std::uint8_t>(ext[4]) != kExtensionVersion) {
    ++counters_.bad_extension;
    return std::nullopt;
  }
  // Kept by our ID, which the REP or RTU names as its remote communication ID; an ID we do not
  // have is forgotten again when the CM drops the MAD (forget() at the connection's end, or
  // overwritten by the next share for that ID).
  Peer p;
  std::memcpy(p.share.data(), ext.data() + 8, p.share.size());
  p.comm_id = load_be32(mad, kLocalCommId);
  const std::uint32_t ours = load_be32(mad, kRemoteCommId);
  const bool rep = attr_of(mad) == static_cast<std::uint16_t>(wire::CmAttr::kRep);
  // An RTU's only for a connection this side drew a pair for; a REP's while the table has room
  // (a flood of REPs for IDs that do not exist cannot grow it without bound).
  if (own_.count(ours) != 0 || (rep && (peer_.size() < kMaxPeers || peer_.count(ours) != 0))) {
    peer_[ours] = p;
  }
  return mad;
}

std::optional<std::array<std::byte, kExtensionBytes>> CmKeys::extension_for(ConstBytes mad) const {
  if (mad.size() != wire::kMadBytes || !carries_share(mad)) return std::nullopt;
  auto it = own_.find(load_be32(mad, kLocalCommId));
  if (it == own_.end()) return std::nullopt;
  std::array<std::byte, kExtensionBytes> ext{};
  std::memcpy(ext.data(), kExtensionMagic.data(), 4);
  ext[4] = static_cast<std::byte>(kExtensionVersion);
  std::memcpy(ext.data() + 8, it->second.public_share().data(), seal::kPublicShareBytes);
  return ext;
}

void CmKeys::on_accept(cm::ConnId id, const cm::QpAttributes& qp, seal::Mode mode) {
  if (mode == seal::Mode::kOff) return;
  if (!qp.peer_uroce) {
    ++counters_.plain_peers;
    return;
  }
  auto k = seal::KeyShare::generate();
  if (!k.ok()) {
    ++counters_.failures;
    return;
  }
  own_.insert_or_assign(id.value, std::move(k.value()));
}

void CmKeys::on_established(cm::ConnId id, cm::QpAttributes& qp) {
  if (own_.count(id.value) == 0) return;
  if (!derive(id, false, qp)) ++counters_.plain_peers;
  forget(id);
}

bool CmKeys::on_connect_response(cm::ConnId id, cm::QpAttributes& qp, seal::Mode mode) {
  const bool offered = qp.peer_uroce && peer_.count(id.value) != 0;
  if (mode == seal::Mode::kOff) {
    peer_.erase(id.value);
    return true;
  }
  if (!offered) {
    ++counters_.plain_peers;
    peer_.erase(id.value);
    return mode != seal::Mode::kRequire;
  }
  auto k = seal::KeyShare::generate();
  if (!k.ok()) {
    ++counters_.failures;
    return mode != seal::Mode::kRequire;
  }
  own_.insert_or_assign(id.value, std::move(k.value()));  // sent after the RTU, kept until forget
  return derive(id, true, qp) || mode != seal::Mode::kRequire;
}

bool CmKeys::derive(cm::ConnId id, bool active, cm::QpAttributes& qp) {
  auto own = own_.find(id.value);
  auto peer = peer_.find(id.value);
  if (own == own_.end() || peer == peer_.end()) return false;
  seal::ConnectionIdentity ident;
  ident.active_gid = active ? local_gid_ : qp.remote_gid;
  ident.passive_gid = active ? qp.remote_gid : local_gid_;
  ident.active_qpn = active ? qp.local_qpn : qp.remote_qpn;
  ident.passive_qpn = active ? qp.remote_qpn : qp.local_qpn;
  ident.active_comm_id = active ? id.value : peer->second.comm_id;
  ident.passive_comm_id = active ? peer->second.comm_id : id.value;
  ident.active_share = active ? own->second.public_share() : peer->second.share;
  ident.passive_share = active ? peer->second.share : own->second.public_share();
  auto key = own->second.derive(peer->second.share, ident);
  peer_.erase(peer);
  if (!key.ok()) {
    ++counters_.failures;
    return false;
  }
  std::memcpy(qp.seal_key.data(), key.value().bytes.data(), key.value().size);
  qp.seal_key_bytes = static_cast<std::uint8_t>(key.value().size);
  ++counters_.agreed;
  return true;
}

void CmKeys::forget(cm::ConnId id) {
  own_.erase(id.value);
  peer_.erase(id.value);
}

}  // namespace uroce::engine

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

std::optional<std::uint8_t> extension_version(ConstBytes ext) {
  if (ext.size() != kExtensionBytes && ext.size() != kAuthExtensionBytes) return std::nullopt;
  const auto version = static_cast<std::uint8_t>(ext[4]);
  const std::uint8_t want =
      ext.size() == kExtensionBytes ? kExtensionVersion : kAuthExtensionVersion;
  if (std::memcmp(ext.data(), kExtensionMagic.data(), 4) != 0 || version != want) {
    return std::nullopt;
  }
  return version;
}

std::string_view refusal_text(Refusal r) {
  return r == Refusal::kAuth ? kPskRejectText : kRequireRejectText;
}

std::optional<ConstBytes> CmKeys::on_receive(ConstBytes payload) {
  if (payload.size() == wire::kMadBytes) return payload;
  if (payload.size() < wire::kMadBytes) return std::nullopt;
  const std::size_t ext_bytes = payload.size() - wire::kMadBytes;
  if (ext_bytes != kExtensionBytes && ext_bytes != kAuthExtensionBytes) return std::nullopt;
  const ConstBytes mad = payload.first(wire::kMadBytes);
  const ConstBytes ext = payload.subspan(wire::kMadBytes);
  const std::optional<std::uint8_t> checked = extension_version(ext);
  if (!carries_share(mad) || !checked) {
    ++counters_.bad_extension;
    return std::nullopt;
  }
  const std::uint8_t version = *checked;
  // Kept by our ID, which the REP or RTU names as its remote communication ID; an ID we do not
  // have is forgotten again when the CM drops the MAD (forget() at the connection's end, or
  // overwritten by the next share for that ID).
  Peer p;
  std::memcpy(p.share.data(), ext.data() + 8, p.share.size());
  if (version == kAuthExtensionVersion) {
    p.mac.emplace();
    std::memcpy(p.mac->data(), ext.data() + kExtensionBytes, p.mac->size());
  }
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

std::optional<Extension> CmKeys::extension_for(ConstBytes mad) const {
  if (mad.size() != wire::kMadBytes || !carries_share(mad)) return std::nullopt;
  auto it = own_.find(load_be32(mad, kLocalCommId));
  if (it == own_.end()) return std::nullopt;
  const Own& own = it->second;
  Extension ext;
  ext.size = own.psk ? kAuthExtensionBytes : kExtensionBytes;
  std::memcpy(ext.bytes.data(), kExtensionMagic.data(), 4);
  ext.bytes[4] = static_cast<std::byte>(own.psk ? kAuthExtensionVersion : kExtensionVersion);
  std::memcpy(ext.bytes.data() + 8, own.share.public_share().data(), seal::kPublicShareBytes);
  if (own.psk) {
    // The REP vouches for the passive side's value (the active side's communication ID is the
    // REP's remote one); the RTU for both values.
    const bool rep = attr_of(mad) == static_cast<std::uint16_t>(wire::CmAttr::kRep);
    seal::ConnectionIdentity ident = own.ident;
    if (rep) ident.active_comm_id = load_be32(mad, kRemoteCommId);
    auto mac = seal::transcript_mac(
        *own.psk, rep ? seal::ShareRole::kPassive : seal::ShareRole::kActive, ident);
    if (!mac.ok()) return std::nullopt;  // the peer refuses the exchange without it
    std::memcpy(ext.bytes.data() + kExtensionBytes, mac.value().data(), mac.value().size());
  }
  return ext;
}

Refusal CmKeys::on_request(const cm::QpAttributes& qp, seal::Mode mode, bool has_psk) {
  if (mode == seal::Mode::kOff) return Refusal::kNone;
  const bool offers = qp.peer_uroce && qp.peer_offers_key;
  Refusal r = Refusal::kNone;
  if (has_psk && qp.peer_uroce && !offers) {
    ++counters_.auth_failed;  // a uroce peer that will not key: at `off`, or the offer stripped
    r = Refusal::kAuth;
  } else if (mode == seal::Mode::kRequire && !offers) {
    r = Refusal::kPlain;
  }
  if (r != Refusal::kNone) ++counters_.refused;
  return r;
}

seal::ConnectionIdentity CmKeys::identity(cm::ConnId id, bool active, const cm::QpAttributes& qp,
                                          std::uint32_t peer_comm_id) const {
  seal::ConnectionIdentity ident;
  ident.active_gid = active ? local_gid_ : qp.remote_gid;
  ident.passive_gid = active ? qp.remote_gid : local_gid_;
  ident.active_qpn = active ? qp.local_qpn : qp.remote_qpn;
  ident.passive_qpn = active ? qp.remote_qpn : qp.local_qpn;
  ident.active_comm_id = active ? id.value : peer_comm_id;
  ident.passive_comm_id = active ? peer_comm_id : id.value;
  return ident;
}

void CmKeys::on_accept(cm::ConnId id, const cm::QpAttributes& qp, seal::Mode mode,
                       const std::optional<seal::CmPsk>& psk) {
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
  Own own{std::move(k.value()), psk, identity(id, false, qp, 0), mode};
  own.ident.passive_share = own.share.public_share();
  own_.insert_or_assign(id.value, std::move(own));
}

bool CmKeys::authentic(const std::optional<seal::CmPsk>& psk, const Peer& peer,
                       seal::ShareRole role, const seal::ConnectionIdentity& ident) {
  // Without a pre-shared key a MAC cannot be checked, and the peer (which has one) derives
  // another key: refused as well.
  const bool ok = psk ? peer.mac && seal::transcript_mac_ok(*psk, role, ident, *peer.mac)
                      : !peer.mac.has_value();
  if (!ok) ++counters_.auth_failed;
  return ok;
}

bool CmKeys::on_established(cm::ConnId id, cm::QpAttributes& qp) {
  auto it = own_.find(id.value);
  if (it == own_.end()) return true;
  Own& own = it->second;
  auto peer = peer_.find(id.value);
  bool keyed = false;
  bool refused = false;
  if (peer == peer_.end()) {
    // No public value in the RTU: a peer at `off` whose REQ offered a key all the same, or the
    // extension stripped.
    ++counters_.plain_peers;
    if (own.psk) ++counters_.auth_failed;
  } else {
    own.ident.active_comm_id = peer->second.comm_id;
    own.ident.active_share = peer->second.share;
    refused = !authentic(own.psk, peer->second, seal::ShareRole::kActive, own.ident);
    keyed = !refused && install(own, peer->second.share, qp);
    if (!refused && !keyed) ++counters_.plain_peers;
  }
  // Without a key the connection stays only where it may be plain.
  const bool ok = keyed || (!refused && !own.psk && own.mode != seal::Mode::kRequire);
  if (!ok) ++counters_.refused;
  forget(id);
  return ok;
}

Refusal CmKeys::on_connect_response(cm::ConnId id, cm::QpAttributes& qp, seal::Mode mode,
                                    const std::optional<seal::CmPsk>& psk) {
  auto peer = peer_.find(id.value);
  const bool offered = qp.peer_uroce && peer != peer_.end();
  const Peer got = offered ? peer->second : Peer{};
  peer_.erase(id.value);
  if (mode == seal::Mode::kOff) return Refusal::kNone;
  const Refusal fallback = mode == seal::Mode::kRequire ? Refusal::kPlain : Refusal::kNone;
  if (!offered) {
    ++counters_.plain_peers;
    if (psk && qp.peer_uroce) {
      ++counters_.auth_failed;  // a uroce peer without a public value: at `off`, or stripped
      return Refusal::kAuth;
    }
    return fallback;
  }
  seal::ConnectionIdentity ident = identity(id, true, qp, got.comm_id);
  ident.passive_share = got.share;
  if (!authentic(psk, got, seal::ShareRole::kPassive, ident)) return Refusal::kAuth;
  auto k = seal::KeyShare::generate();
  if (!k.ok()) {
    ++counters_.failures;
    return psk ? Refusal::kAuth : fallback;
  }
  Own own{std::move(k.value()), psk, ident, mode};
  own.ident.active_share = own.share.public_share();
  const bool keyed = install(own, got.share, qp);
  own_.insert_or_assign(id.value, std::move(own));  // sent after the RTU, kept until forget
  if (!keyed) return psk ? Refusal::kAuth : fallback;
  return Refusal::kNone;
}

bool CmKeys::install(const Own& own, const seal::PublicShare& peer, cm::QpAttributes& qp) {
  auto key = own.share.derive(peer, own.ident, own.psk ? &*own.psk : nullptr);
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

// devd/cm_keys: the per-connection keys of authenticated and encrypted RDMA between uroce peers
// (issue 44, docs/SECURITY.md "Per-connection keys"), agreed by the coordinators of the two
// devices while their CMs connect.
//
// The REQ stays what the kernel's cma.c sends: the active side does not know yet whether the
// passive side is uroce, and a REQ must reach rxe and hardware byte for byte. Its Local CA GUID
// carries uroce's mark (wire::is_uroce_guid) all the same. So:
//   - the passive side, seeing the mark in the REQ and sealing (its ID's mode is not off), draws
//     an X25519 key pair and sends its public value after the REP's 256 bytes;
//   - the active side, seeing the mark and a public value in the REP and sealing, draws its own
//     pair, derives the key (seal::KeyShare::derive) and sends its public value after the RTU's
//     256 bytes; the passive side derives the same key when the RTU comes.
// The extension (kExtensionBytes after the MAD, in the same UD SEND to QP 1) goes only to a peer
// whose GUID carries the mark: rxe and hardware peers get the plain 256-byte MADs. The
// application's private data is untouched. The key reaches the client library with the event
// that moves its QP (CONNECT_RESPONSE on the active side, ESTABLISHED on the passive side) in
// cm::QpAttributes::seal_key, and the library installs it in its device's sealing datapath.
//
// Policy `require`: a REQ (passive) or REP (active) from a peer without the mark, or a REP
// without a public value, is refused with a REJ (Consumer Defined) whose private data says why.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>

#include "base/bytes.h"
#include "cm/cm.h"
#include "seal/aead.h"
#include "seal/key_exchange.h"

namespace uroce::engine {

// After a REP's or RTU's MAD: the magic "urkx", a version byte (1), three zero bytes, the
// sender's X25519 public value.
inline constexpr std::size_t kExtensionBytes = 8 + seal::kPublicShareBytes;
inline constexpr std::array<std::uint8_t, 4> kExtensionMagic = {'u', 'r', 'k', 'x'};
inline constexpr std::uint8_t kExtensionVersion = 1;
// The REJ's private data under `require` (what the refused peer's application sees).
inline constexpr std::string_view kRequireRejectText =
    "uroce: aead=require refuses a peer without a per-connection key";

struct CmKeyCounters {
  std::uint64_t agreed = 0;         // connections with a key (each side counts its own)
  std::uint64_t plain_peers = 0;    // connections without one (peer not uroce, or not sealing)
  std::uint64_t refused = 0;        // REJs sent under require
  std::uint64_t failures = 0;       // key generation or derivation failed (no key)
  std::uint64_t bad_extension = 0;  // a MAD followed by bytes that are not the extension
};

class CmKeys {
 public:
  explicit CmKeys(const cm::Gid& local_gid) : local_gid_(local_gid) {}

  // A received QP 1 payload: the MAD (the first 256 bytes) when it is a MAD alone or a REP/RTU
  // followed by the extension, whose public value is kept for the connection; nullopt when it
  // is neither (the caller counts it as not a CM MAD).
  std::optional<ConstBytes> on_receive(ConstBytes payload);
  // What to send after an outgoing MAD: the extension for a REP or RTU of a connection this
  // side has drawn a key pair for (retransmissions too); nullopt for anything else.
  std::optional<std::array<std::byte, kExtensionBytes>> extension_for(ConstBytes mad) const;

  // Passive, rdma_accept of a connection whose REQ `qp` describes: draws this side's pair when
  // the peer is uroce and `mode` seals.
  void on_accept(cm::ConnId id, const cm::QpAttributes& qp, seal::Mode mode);
  // Passive, the RTU came: the key into `qp` when both sides sent a public value.
  void on_established(cm::ConnId id, cm::QpAttributes& qp);
  // Active, the REP came: draws this side's pair and derives the key into `qp` when the peer is
  // uroce, sent a public value and `mode` seals. False: refuse the connection (require, and no
  // key).
  bool on_connect_response(cm::ConnId id, cm::QpAttributes& qp, seal::Mode mode);
  // The connection is over (or was never to be keyed): forgets what is kept for it.
  void forget(cm::ConnId id);

  // Whether `mode` refuses a peer whose REQ or REP has no uroce mark.
  static bool refuses_plain(seal::Mode mode, bool peer_uroce) {
    return mode == seal::Mode::kRequire && !peer_uroce;
  }
  void count_refused() { ++counters_.refused; }
  const CmKeyCounters& counters() const { return counters_; }
  std::size_t pending() const { return own_.size() + peer_.size(); }

 private:
  struct Peer {
    seal::PublicShare share{};
    std::uint32_t comm_id = 0;  // the peer's local communication ID (from its REP or RTU)
  };
  bool derive(cm::ConnId id, bool active, cm::QpAttributes& qp);

  cm::Gid local_gid_;
  std::map<std::uint32_t, seal::KeyShare> own_;  // by local communication ID
  std::map<std::uint32_t, Peer> peer_;
  CmKeyCounters counters_;
};

}  // namespace uroce::engine

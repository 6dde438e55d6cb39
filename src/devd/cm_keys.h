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
// The passive side knows from the REQ itself whether the active side will key: an active side
// whose ID seals sets the key-offer bit in its REQ's Local CA GUID (wire::kUroceGuidKeyOffer,
// cm::ConnectParams::offer_key), and `require` REJects a uroce REQ without it (a peer at `off`)
// before the REP.
//
// A pre-shared key (the device's psk=, which the library hands the coordinator with the ID's
// mode; the coordinator keeps only seal::cm_psk_from of it) makes the exchange authenticated:
// the key is derived with it (seal::KeyShare::derive's salt), and each extension is version 2,
// the public value followed by an HMAC under it over the connection's identity
// (seal::transcript_mac): the REP's over the passive side's value, the RTU's over both. A side
// with a pre-shared key refuses a uroce peer whose exchange does not authenticate: a REP or RTU
// whose MAC is wrong (a public value swapped, another psk=), missing (stripped) or whose
// extension is missing altogether, and a REQ without the key offer. The active side REJects the
// REP; the passive side, which cannot REJ after the RTU, installs no key and disconnects (DREQ),
// as it does under `require` when the RTU brings no public value. Counted in keys_auth_failed.
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

// After a REP's or RTU's MAD: the magic "urkx", a version byte, three zero bytes, the sender's
// X25519 public value; version 2 (with a pre-shared key) adds the transcript MAC.
inline constexpr std::size_t kExtensionBytes = 8 + seal::kPublicShareBytes;
inline constexpr std::size_t kAuthExtensionBytes = kExtensionBytes + seal::kTranscriptMacBytes;
inline constexpr std::array<std::uint8_t, 4> kExtensionMagic = {'u', 'r', 'k', 'x'};
inline constexpr std::uint8_t kExtensionVersion = 1;
inline constexpr std::uint8_t kAuthExtensionVersion = 2;
// Whether `ext` (what follows a MAD) has an extension's size, magic and the version that size
// goes with; its version then, else nullopt. (The three zero bytes are not checked here.)
std::optional<std::uint8_t> extension_version(ConstBytes ext);
// The REJ's private data under `require` (what the refused peer's application sees).
inline constexpr std::string_view kRequireRejectText =
    "uroce: aead=require refuses a peer without a per-connection key";
// The REJ's private data when the exchange does not authenticate under the pre-shared key.
inline constexpr std::string_view kPskRejectText =
    "uroce: psk= refuses a key exchange that does not authenticate";

// Why a connection is refused (the REJ's text): not at all, `require` and no key, or the
// exchange did not authenticate under the pre-shared key.
enum class Refusal : std::uint8_t { kNone, kPlain, kAuth };
std::string_view refusal_text(Refusal r);

// An extension to send: its bytes, kExtensionBytes or kAuthExtensionBytes of them.
struct Extension {
  std::array<std::byte, kAuthExtensionBytes> bytes{};
  std::size_t size = 0;
  ConstBytes view() const { return ConstBytes(bytes).first(size); }
};

struct CmKeyCounters {
  std::uint64_t agreed = 0;         // connections with a key (each side counts its own)
  std::uint64_t plain_peers = 0;    // connections without one (peer not uroce, or not sealing)
  std::uint64_t refused = 0;        // REJs sent under require
  std::uint64_t failures = 0;       // key generation or derivation failed (no key)
  std::uint64_t bad_extension = 0;  // a MAD followed by bytes that are not the extension
  // A uroce peer's exchange that did not authenticate under the pre-shared key (a public value
  // swapped, a MAC or the exchange stripped, another psk=): refused.
  std::uint64_t auth_failed = 0;
};

class CmKeys {
 public:
  explicit CmKeys(const cm::Gid& local_gid) : local_gid_(local_gid) {}

  // A received QP 1 payload: the MAD (the first 256 bytes) when it is a MAD alone or a REP/RTU
  // followed by an extension, whose public value (and MAC) is kept for the connection; nullopt
  // when it is neither (the caller counts it as not a CM MAD).
  std::optional<ConstBytes> on_receive(ConstBytes payload);
  // What to send after an outgoing MAD: the extension for a REP or RTU of a connection this
  // side has drawn a key pair for (retransmissions too); nullopt for anything else.
  std::optional<Extension> extension_for(ConstBytes mad) const;

  // Passive, a REQ that `qp` describes, for a listener in `mode` (with a pre-shared key or
  // not): whether to refuse it before the application sees it. `require` refuses a peer that is
  // not uroce or does not offer a key (its ID does not seal); a pre-shared key refuses a uroce
  // peer that does not offer one. Counts what it refuses.
  Refusal on_request(const cm::QpAttributes& qp, seal::Mode mode, bool has_psk);
  // Passive, rdma_accept of a connection whose REQ `qp` describes: draws this side's pair when
  // the peer is uroce and `mode` seals; `psk` authenticates the exchange.
  void on_accept(cm::ConnId id, const cm::QpAttributes& qp, seal::Mode mode,
                 const std::optional<seal::CmPsk>& psk = std::nullopt);
  // Passive, the RTU came: the key into `qp` when both sides sent a public value (that
  // authenticates, with a pre-shared key). False: no key where one is needed (the exchange did
  // not authenticate, or `require` or a pre-shared key and no public value in the RTU); `qp` has
  // none and the connection is to be torn down (counted as refused).
  bool on_established(cm::ConnId id, cm::QpAttributes& qp);
  // Active, the REP came: draws this side's pair and derives the key into `qp` when the peer is
  // uroce, sent a public value (that authenticates under `psk`, when given) and `mode` seals.
  // Otherwise why to refuse the connection (kNone: go on without a key).
  Refusal on_connect_response(cm::ConnId id, cm::QpAttributes& qp, seal::Mode mode,
                              const std::optional<seal::CmPsk>& psk = std::nullopt);
  // The connection is over (or was never to be keyed): forgets what is kept for it.
  void forget(cm::ConnId id);

  void count_refused() { ++counters_.refused; }
  const CmKeyCounters& counters() const { return counters_; }
  std::size_t pending() const { return own_.size() + peer_.size(); }

 private:
  struct Peer {
    seal::PublicShare share{};
    std::uint32_t comm_id = 0;  // the peer's local communication ID (from its REP or RTU)
    std::optional<seal::TranscriptMac> mac;  // a version 2 extension's
  };
  // This side's pair for a connection, the pre-shared secret it authenticates with, and the
  // connection's identity as far as this side knows it (the passive side learns the active
  // side's communication ID and public value from the REP it sends and the RTU).
  struct Own {
    seal::KeyShare share;
    std::optional<seal::CmPsk> psk;
    seal::ConnectionIdentity ident;
    seal::Mode mode = seal::Mode::kOff;  // the ID's
  };
  seal::ConnectionIdentity identity(cm::ConnId id, bool active, const cm::QpAttributes& qp,
                                    std::uint32_t peer_comm_id) const;
  // Whether the peer's MAC (or its absence) is what this side's pre-shared key (or its
  // absence) wants, for the public value of `role`; counts auth_failed when not.
  bool authentic(const std::optional<seal::CmPsk>& psk, const Peer& peer, seal::ShareRole role,
                 const seal::ConnectionIdentity& ident);
  bool install(const Own& own, const seal::PublicShare& peer, cm::QpAttributes& qp);

  cm::Gid local_gid_;
  std::map<std::uint32_t, Own> own_;  // by local communication ID
  std::map<std::uint32_t, Peer> peer_;
  CmKeyCounters counters_;
};

}  // namespace uroce::engine

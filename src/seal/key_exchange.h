// seal/key_exchange: the per-connection key of authenticated and encrypted RDMA between uroce
// peers (issue 44, docs/SECURITY.md "Per-connection keys"). Each end of a connection made through
// the CM draws an X25519 key pair, the two public values travel with the CM's REP and RTU (only
// between uroce peers), and both ends derive the connection's AES-256-GCM key with HKDF-SHA-256
// over the X25519 shared secret and the connection's identity: both GIDs, both QPNs, both CM
// communication IDs and both public values. A new connection has new key pairs and new
// identities: a packet recorded from an earlier one no longer verifies.
//
// With a pre-shared key (the device's psk=), the CM's own secret derived from it (CmPsk) is
// HKDF's salt, so that without the pre-shared key no one derives the connection's key, and each
// side authenticates the public value it sends with an HMAC under it over the connection's
// identity (transcript_mac): a public value swapped or a MAC stripped on the way is detected
// while the connection is being set up (docs/SECURITY.md, "Authenticated key agreement").
//
// All of it is OpenSSL's (EVP_PKEY X25519, EVP_PKEY_HKDF, HMAC); the private key comes from
// OpenSSL's CSPRNG (seeded from the kernel's) and never leaves the KeyShare.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/result.h"
#include "seal/aead.h"

struct evp_pkey_st;

namespace uroce::seal {

inline constexpr std::size_t kPublicShareBytes = 32;  // an X25519 public value
using PublicShare = std::array<std::byte, kPublicShareBytes>;

// Who the connection is between, as both ends see it after the REP: the active side (the one
// that sent the REQ) and the passive side.
struct ConnectionIdentity {
  std::array<std::uint8_t, 16> active_gid{};
  std::array<std::uint8_t, 16> passive_gid{};
  std::uint32_t active_qpn = 0;
  std::uint32_t passive_qpn = 0;
  std::uint32_t active_comm_id = 0;  // the active side's local communication ID
  std::uint32_t passive_comm_id = 0;
  PublicShare active_share{};
  PublicShare passive_share{};
};

// The bytes HKDF takes as its info: a label, then every field above in order (fixed size).
inline constexpr std::size_t kIdentityInfoBytes = 16 + 2 * 16 + 4 * 4 + 2 * kPublicShareBytes;
std::array<std::byte, kIdentityInfoBytes> identity_info(const ConnectionIdentity& id);

// The CM's secret from a device's pre-shared key: HKDF-SHA-256(salt "uroce cm psk v1", ikm the
// key), 32 bytes. The coordinator holds this, never the key the packets are sealed with.
inline constexpr std::size_t kCmPskBytes = 32;
using CmPsk = std::array<std::byte, kCmPskBytes>;
Result<CmPsk, std::string> cm_psk_from(const Key& psk);

// Which public value a transcript MAC authenticates: the passive side's (after the REP; it has
// not seen the active side's yet, whose place in the identity is zero) or the active side's
// (after the RTU; the whole identity, both public values).
enum class ShareRole : std::uint8_t { kPassive, kActive };
inline constexpr std::size_t kTranscriptMacBytes = 32;
using TranscriptMac = std::array<std::byte, kTranscriptMacBytes>;
// HMAC-SHA-256 under `psk` over a label naming `role` and identity_info(id) (with, for kPassive,
// the active public value taken as zero whatever `id` holds).
Result<TranscriptMac, std::string> transcript_mac(const CmPsk& psk, ShareRole role,
                                                  const ConnectionIdentity& id);
// Whether `mac` is transcript_mac(psk, role, id) (compared in constant time).
bool transcript_mac_ok(const CmPsk& psk, ShareRole role, const ConnectionIdentity& id,
                       const TranscriptMac& mac);

// One side's X25519 key pair for one connection. Move-only; the private key is freed with it.
class KeyShare {
 public:
  static Result<KeyShare, std::string> generate();
  ~KeyShare();
  KeyShare(KeyShare&& o) noexcept;
  KeyShare& operator=(KeyShare&& o) noexcept;
  KeyShare(const KeyShare&) = delete;
  KeyShare& operator=(const KeyShare&) = delete;

  const PublicShare& public_share() const { return public_; }
  // The connection's AES-256-GCM key from the peer's public value and the identity (which holds
  // both public values: the caller puts this side's own where its role says), with `psk` as
  // HKDF's salt when given. Fails on a peer value that gives an all-zero shared secret (a
  // low-order point) or a library failure.
  Result<Key, std::string> derive(const PublicShare& peer, const ConnectionIdentity& id,
                                  const CmPsk* psk = nullptr) const;

 private:
  KeyShare() = default;
  evp_pkey_st* pkey_ = nullptr;
  PublicShare public_{};
};

}  // namespace uroce::seal

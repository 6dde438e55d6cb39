// seal/key_exchange: the per-connection key of authenticated and encrypted RDMA between uroce
// peers (issue 44, docs/SECURITY.md "Per-connection keys"). Each end of a connection made through
// the CM draws an X25519 key pair, the two public values travel with the CM's REP and RTU (only
// between uroce peers), and both ends derive the connection's AES-256-GCM key with HKDF-SHA-256
// over the X25519 shared secret and the connection's identity: both GIDs, both QPNs, both CM
// communication IDs and both public values. A new connection has new key pairs and new
// identities: a packet recorded from an earlier one no longer verifies.
//
// All of it is OpenSSL's (EVP_PKEY X25519, EVP_PKEY_HKDF); the private key comes from OpenSSL's
// CSPRNG (seeded from the kernel's) and never leaves the KeyShare.
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
  // both public values: the caller puts this side's own where its role says). Fails on a peer
  // value that gives an all-zero shared secret (a low-order point) or a library failure.
  Result<Key, std::string> derive(const PublicShare& peer, const ConnectionIdentity& id) const;

 private:
  KeyShare() = default;
  evp_pkey_st* pkey_ = nullptr;
  PublicShare public_{};
};

}  // namespace uroce::seal

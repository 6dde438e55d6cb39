#include "seal/key_exchange.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

namespace uroce::seal {

namespace {

// HKDF's salt without a pre-shared key: fixed, so that the key depends on the exchange and the
// identity only. With one, the CmPsk is the salt.
constexpr char kSalt[] = "uroce connection key v1";
constexpr char kCmPskSalt[] = "uroce cm psk v1";
// The transcript MAC's labels (16 bytes each, NUL-padded): which side's public value it vouches
// for, so that one side's MAC is never taken for the other's.
constexpr char kPassiveLabel[16] = "uroce-cm-pas-v1";
constexpr char kActiveLabel[16] = "uroce-cm-act-v1";
constexpr char kInfoLabel[16] = "uroce-cm-x25519";  // 15 characters and the NUL

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* c) const { EVP_PKEY_CTX_free(c); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using PkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree>;

const unsigned char* u8(const std::byte* p) { return reinterpret_cast<const unsigned char*>(p); }

std::byte* put_be32(std::byte* at, std::uint32_t v) {
  for (int i = 3; i >= 0; --i) *at++ = static_cast<std::byte>(v >> (8 * i));
  return at;
}

Result<std::array<std::byte, 32>, std::string> x25519(EVP_PKEY* own, const PublicShare& peer) {
  PkeyPtr peer_key(
      EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, u8(peer.data()), peer.size()));
  if (!peer_key) return Err{std::string("the peer's X25519 value does not load")};
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new(own, nullptr));
  std::array<std::byte, 32> secret{};
  std::size_t n = secret.size();
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1 ||
      EVP_PKEY_derive_set_peer(ctx.get(), peer_key.get()) != 1 ||
      EVP_PKEY_derive(ctx.get(), reinterpret_cast<unsigned char*>(secret.data()), &n) != 1 ||
      n != secret.size()) {
    return Err{std::string("X25519 failed (a low-order peer value?)")};
  }
  if (std::all_of(secret.begin(), secret.end(), [](std::byte b) { return b == std::byte{0}; })) {
    return Err{std::string("X25519 gave an all-zero secret (a low-order peer value)")};
  }
  return secret;
}

// HKDF-SHA-256 of `ikm` with `salt` and `info` into `out`.
bool hkdf(ConstBytes salt, ConstBytes ikm, ConstBytes info, std::span<std::byte> out) {
  std::size_t n = out.size();
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  return ctx && EVP_PKEY_derive_init(ctx.get()) == 1 &&
         EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) == 1 &&
         EVP_PKEY_CTX_set1_hkdf_salt(ctx.get(), u8(salt.data()), static_cast<int>(salt.size())) ==
             1 &&
         EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), u8(ikm.data()), static_cast<int>(ikm.size())) == 1 &&
         (info.empty() || EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), u8(info.data()),
                                                      static_cast<int>(info.size())) == 1) &&
         EVP_PKEY_derive(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &n) == 1 &&
         n == out.size();
}

}  // namespace

Result<CmPsk, std::string> cm_psk_from(const Key& psk) {
  if (psk.size == 0) return Err{std::string("no pre-shared key")};
  CmPsk out{};
  if (!hkdf(as_bytes(kCmPskSalt, sizeof kCmPskSalt - 1), psk.view(), {}, out)) {
    return Err{std::string("HKDF failed")};
  }
  return out;
}

Result<TranscriptMac, std::string> transcript_mac(const CmPsk& psk, ShareRole role,
                                                  const ConnectionIdentity& id) {
  ConnectionIdentity seen = id;
  if (role == ShareRole::kPassive) seen.active_share = PublicShare{};
  std::array<std::byte, 16 + kIdentityInfoBytes> msg{};
  std::memcpy(msg.data(), role == ShareRole::kPassive ? kPassiveLabel : kActiveLabel, 16);
  const auto info = identity_info(seen);
  std::memcpy(msg.data() + 16, info.data(), info.size());
  TranscriptMac mac{};
  unsigned int n = 0;
  if (HMAC(EVP_sha256(), psk.data(), static_cast<int>(psk.size()), u8(msg.data()), msg.size(),
           reinterpret_cast<unsigned char*>(mac.data()), &n) == nullptr ||
      n != mac.size()) {
    return Err{std::string("HMAC failed")};
  }
  return mac;
}

bool transcript_mac_ok(const CmPsk& psk, ShareRole role, const ConnectionIdentity& id,
                       const TranscriptMac& mac) {
  const auto want = transcript_mac(psk, role, id);
  return want.ok() && CRYPTO_memcmp(want.value().data(), mac.data(), mac.size()) == 0;
}

std::array<std::byte, kIdentityInfoBytes> identity_info(const ConnectionIdentity& id) {
  std::array<std::byte, kIdentityInfoBytes> info{};
  std::byte* at = info.data();
  std::memcpy(at, kInfoLabel, sizeof kInfoLabel);
  at += sizeof kInfoLabel;
  std::memcpy(at, id.active_gid.data(), 16);
  at += 16;
  std::memcpy(at, id.passive_gid.data(), 16);
  at += 16;
  at = put_be32(at, id.active_qpn);
  at = put_be32(at, id.passive_qpn);
  at = put_be32(at, id.active_comm_id);
  at = put_be32(at, id.passive_comm_id);
  std::memcpy(at, id.active_share.data(), kPublicShareBytes);
  at += kPublicShareBytes;
  std::memcpy(at, id.passive_share.data(), kPublicShareBytes);
  return info;
}

Result<KeyShare, std::string> KeyShare::generate() {
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, nullptr));
  EVP_PKEY* raw = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_keygen(ctx.get(), &raw) != 1) {
    return Err{std::string("X25519 key generation failed")};
  }
  KeyShare k;
  k.pkey_ = raw;
  std::size_t n = k.public_.size();
  if (EVP_PKEY_get_raw_public_key(raw, reinterpret_cast<unsigned char*>(k.public_.data()), &n) !=
          1 ||
      n != k.public_.size()) {
    return Err{std::string("X25519 public value unavailable")};
  }
  return k;
}

KeyShare::~KeyShare() { EVP_PKEY_free(pkey_); }

KeyShare::KeyShare(KeyShare&& o) noexcept
    : pkey_(std::exchange(o.pkey_, nullptr)), public_(o.public_) {}

KeyShare& KeyShare::operator=(KeyShare&& o) noexcept {
  if (this != &o) {
    EVP_PKEY_free(pkey_);
    pkey_ = std::exchange(o.pkey_, nullptr);
    public_ = o.public_;
  }
  return *this;
}

Result<Key, std::string> KeyShare::derive(const PublicShare& peer, const ConnectionIdentity& id,
                                          const CmPsk* psk) const {
  if (pkey_ == nullptr) return Err{std::string("no key pair")};
  auto secret = x25519(pkey_, peer);
  if (!secret.ok()) return Err{secret.error()};
  const auto info = identity_info(id);
  Key key;
  key.size = 32;
  const ConstBytes salt = psk != nullptr ? ConstBytes(*psk) : as_bytes(kSalt, sizeof kSalt - 1);
  const bool ok = hkdf(salt, ConstBytes(secret.value()), ConstBytes(info),
                       std::span(key.bytes).first(key.size));
  secret.value().fill(std::byte{0});
  if (!ok) return Err{std::string("HKDF failed")};
  return key;
}

}  // namespace uroce::seal

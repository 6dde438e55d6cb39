// seal/aead: the per-packet AEAD of authenticated and encrypted RDMA between uroce peers
// (issue 44, docs/SECURITY.md): AES-GCM through OpenSSL's EVP interface (AES-NI and PCLMULQDQ
// where the CPU has them), the device's policy and pre-shared key, and the replay window.
//
// Nothing here is a cipher of uroce's own: Aead only feeds OpenSSL the key, the nonce, the
// associated data and the payload, and compares the tag through OpenSSL.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/bytes.h"
#include "base/result.h"
#include "wire/packet.h"

struct evp_cipher_ctx_st;

namespace uroce::seal {

// A device's policy (the config file's aead=):
//   kOff: plain packets out; sealed ones in are dropped (bad_tver, the device has no key).
//   kAuthenticate: packets out carry a tag over headers and payload (payload in clear);
//     sealed packets in must verify; plain ones are still taken (counted, aead_plain_rx).
//   kEncrypt: the same with the payload encrypted.
//   kRequire: kEncrypt, and plain packets in are dropped too (aead_plain_drops).
enum class Mode : std::uint8_t { kOff, kAuthenticate, kEncrypt, kRequire };
std::optional<Mode> mode_from_name(std::string_view name);  // off|authenticate|encrypt|require
std::string_view mode_name(Mode m);

// A pre-shared key: 16 bytes (AES-128-GCM) or 32 (AES-256-GCM).
struct Key {
  std::array<std::byte, 32> bytes{};
  std::size_t size = 0;
  ConstBytes view() const { return ConstBytes(bytes).first(size); }
};
// 32 or 64 hex digits. The message does not repeat the text (it is a secret).
Result<Key, std::string> parse_key_hex(std::string_view hex);

// What a device seals with: its policy and pre-shared key. Without a key (size 0) only QPs
// with a per-connection key (agreed through the CM, seal/key_exchange.h) are sealed.
struct Settings {
  Mode mode = Mode::kOff;
  Key key;
};
// The policy from the config file's words (aead=MODE, psk=HEX); the errors say what is wrong.
Result<Settings, std::string> parse_settings(std::string_view mode, std::string_view psk_hex);

// The interface MTU left to a plain RoCE packet when it leaves sealed: a device in `mode` derives
// its port MTU from this instead of the interface's, so that a full-MTU packet with its 28-byte
// trailer still fits the interface and is never fragmented or lost. (The pad needs no room: a
// payload and its pad round up to a multiple of 4, and every path MTU is one.) 0 when nothing
// is left.
std::uint32_t roce_share_of_mtu(std::uint32_t netdev_mtu, Mode mode);

using Nonce = std::array<std::byte, wire::kSealNonceBytes>;
using Tag = std::array<std::byte, wire::kSealTagBytes>;

// AES-GCM with one key, for one direction (a sender seals, a receiver opens). Not thread-safe.
class Aead {
 public:
  static Result<Aead, std::string> create(const Key& key);
  ~Aead();
  Aead(Aead&& o) noexcept;
  Aead& operator=(Aead&&) = delete;
  Aead(const Aead&) = delete;

  // Encrypts the pieces of `plaintext` into `out` (their total size) with `aad` as associated
  // data, and writes the tag. `extra_aad` pieces are authenticated after `aad` (authenticate
  // mode passes the payload there, with an empty plaintext). False on a library failure.
  bool seal(const Nonce& nonce, ConstBytes aad, std::span<const ConstBytes> extra_aad,
            std::span<const ConstBytes> plaintext, MutBytes out, Tag& tag);
  // Checks `tag` over `aad`, `extra_aad` and `ciphertext`, decrypting into `out` (the size of
  // `ciphertext`). False when the tag does not verify: `out` then holds garbage and must not be
  // used.
  bool open(const Nonce& nonce, ConstBytes aad, std::span<const ConstBytes> extra_aad,
            ConstBytes ciphertext, MutBytes out, const Tag& tag);

 private:
  Aead() = default;
  evp_cipher_ctx_st* enc_ = nullptr;
  evp_cipher_ctx_st* dec_ = nullptr;
};

// The nonce a sealed packet (pkt.sealed()) carries in its trailer.
Nonce nonce_of(const wire::RocePacket& pkt);

// Verifies a sealed packet with `aead`: its pad must be zero and its tag right over its headers
// and payload. Its payload in clear when it verifies: pkt.payload (TVer 1), or decrypted into
// `plain` (TVer 2; at least the payload's size); nullopt when it does not. The replay window is
// the caller's.
std::optional<ConstBytes> open_packet(Aead& aead, const wire::RocePacket& pkt, MutBytes plain);

// Which 64-bit counters of one sender were seen (RFC 6479's bitmap): the newest, and the
// kWindow - 64 before it. A counter older than that is taken for a replay.
class ReplayWindow {
 public:
  static constexpr std::uint64_t kWindow = 1024;
  // Whether `c` may be new (not seen, not too old); does not record it.
  bool fresh(std::uint64_t c) const;
  // Records `c` (call only after its packet verified).
  void record(std::uint64_t c);

 private:
  static constexpr std::size_t kWords = kWindow / 64;
  bool started_ = false;
  std::uint64_t top_ = 0;
  std::array<std::uint64_t, kWords> bits_{};
};

}  // namespace uroce::seal

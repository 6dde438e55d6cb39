// seal/sealed_datapath: a Datapath in front of another (the device's UdpDatapath) that seals
// every packet it sends and opens every sealed packet it receives, so that the engine above it
// sees plain packets only and never one that did not verify (issue 44, docs/SECURITY.md).
//
// Wire format (wire/packet.h): BTH TVer 1 (payload authenticated, in clear) or 2 (payload
// encrypted); then the headers and payload as usual, the payload's pad (zero bytes: a receiver
// drops a packet whose pad is not, as it drops one whose tag is wrong), and a 28-byte trailer,
// the nonce (12 bytes) and the AES-GCM tag (16), before the ICRC. The associated data is the
// transport headers as sent (BTH with its TVer, PSN and QPN, and every extension header: RETH's
// address and rkey, AETH, ...); in authenticate mode the payload follows it as associated data.
//
// The nonce is the sender's 32-bit salt followed by its 64-bit packet counter, both big-endian.
// The salt is drawn from the kernel's CSPRNG when the device opens, and the counter starts at a
// random value below 2^63 and grows by one for every packet sealed, whatever its QP: no two
// packets of one sender share a nonce, a retransmission of a PSN (whose payload the application
// may have changed in between) included. Two senders under one key (both ends of a connection
// with the same pre-shared key, several processes of a device) reuse a nonce only when their
// salts are equal and their counter ranges overlap: about 2^-32 * 2^-23 for two senders that
// each send 2^40 packets. The QPN and PSN are not in the nonce: the nonce must be unique, and
// they are authenticated as associated data (a packet moved to another QP or PSN fails its tag).
//
// Replay: the receiver keeps, per sender salt (kSenders of them, the least recently seen one
// making room), a window of the last 960 counters (seal::ReplayWindow); a packet whose counter
// was seen or is older is dropped before its tag is checked (aead_replay_drops), and a counter
// is recorded only once its packet verified. Drops happen here, before the engine: a forged or
// replayed packet never reaches a QP or memory.
//
// Packets to QP 1 (the CM's MADs, answered by the coordinator over its own socket) travel plain
// both ways in every mode.
//
// Keys (docs/SECURITY.md): a QP with a per-connection key (set_connection_key, agreed through
// the CM: seal/key_exchange.h) seals what it sends to its peer's QP with that key, opens what
// arrives for it with that key only, and takes no plain packet whatever the mode (a
// per-connection `require`). Every other QP uses the device's pre-shared key when it has one
// (Settings::key), for programs that exchange QP numbers out of band; without one it sends
// plain packets, and a sealed packet for it cannot verify (aead_auth_drops).
//
// Passes over a payload (docs/SECURITY.md, "What sealing costs"). Send: AES-GCM reads the
// payload where the transport gathered it and writes the ciphertext straight into the inner
// datapath's buffer for the packet (Datapath::send_built; the UDP datapath's staging ring, where
// its ICRC is computed over the bytes as written), else into a slot of its own that send()
// copies. Receive: the ICRC of a sealed packet is not checked where the tag verifies (the tag
// covers every byte the ICRC does but the outer headers', which the IP and UDP checksums cover);
// only a packet whose tag fails, or one from a source that failed lately, has it checked
// (RxMeta::pending), so that corruption on the way is told from forgery and is not charged as
// one. GCM decrypts into a buffer of this datapath's (4 KiB, always in cache), and the engine
// copies the plaintext to where it goes once the tag verified: never into registered memory
// before (an application may watch its memory, and a forged packet's bytes must never reach it).
//
// Receive requires the inner datapath not to defer ICRC checks of plain packets to the handler
// (the device turns deferral off when it seals) and to accept sealed packets
// (UdpDatapath::set_accept_sealed).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/source_budget.h"
#include "datapath/datapath.h"
#include "seal/aead.h"

namespace uroce::seal {

// The counters `uroce stats` shows (DeviceStats::seal).
struct SealCounters {
  std::uint64_t tx_sealed = 0;         // aead_tx_pkts
  std::uint64_t tx_errors = 0;         // aead_tx_errors: not sealed (library failure, too long)
  std::uint64_t rx_opened = 0;         // aead_rx_pkts: verified (and decrypted)
  std::uint64_t rx_tag_checks = 0;     // tags checked, verified or not (not in `uroce stats`)
  std::uint64_t rx_auth_fail = 0;      // aead_auth_drops: tag wrong (forged, tampered, wrong key)
  std::uint64_t rx_replay = 0;         // aead_replay_drops
  std::uint64_t rx_plain_dropped = 0;  // aead_plain_drops: plain packets refused (require)
  std::uint64_t rx_plain = 0;          // aead_plain_rx: plain packets taken (authenticate, encrypt)
  // aead_src_limited: sealed packets dropped unopened, their source (address and UDP port) out
  // of its budget of packets that failed (kFailBurst, then kFailPerSecond).
  std::uint64_t rx_src_limited = 0;
};

class SealedDatapath final : public datapath::Datapath {
 public:
  static constexpr std::size_t kSenders = 64;  // replay windows (sender salts) remembered
  static constexpr std::size_t kSlots = 64;    // bodies in slots before the inner one is flushed
  static constexpr std::size_t kMaxHeaderBytes = 64;
  // Per source: sealed packets that may fail (tag, pad or replay) at once, and per second after.
  static constexpr std::uint32_t kFailBurst = 64;
  static constexpr std::uint32_t kFailPerSecond = 64;

  // `inner` outlives the result. `salt` and `first_counter` make the nonces (see above): the
  // device draws them from the kernel's CSPRNG. `settings.mode` must not be kOff.
  static Result<std::unique_ptr<SealedDatapath>, std::string> create(datapath::Datapath& inner,
                                                                     const Settings& settings,
                                                                     std::uint32_t salt,
                                                                     std::uint64_t first_counter);

  std::size_t receive(Instant now, std::size_t max, const RxHandler& handler) override;
  bool send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
            std::span<const ConstBytes> payload) override;
  void flush(Instant now) override;
  bool tx_queued() const override { return inner_.tx_queued(); }
  Instant next_deadline() const override { return inner_.next_deadline(); }

  Mode mode() const { return mode_; }
  const SealCounters& counters() const { return counters_; }
  bool has_psk() const { return psk_.has_value(); }

  // The per-connection key of local QP `local_qpn`, connected to QP `remote_qpn` at `peer`
  // (replaces the QP's earlier one). False when the key does not load (16 or 32 bytes).
  bool set_connection_key(std::uint32_t local_qpn, const wire::IpAddress& peer,
                          std::uint32_t remote_qpn, const Key& key);
  // The QP's packets go back to the pre-shared key (or plain) rules.
  void clear_connection_key(std::uint32_t local_qpn);
  std::size_t connection_keys() const { return by_local_.size(); }

 private:
  struct Sender {
    bool used = false;
    std::uint32_t salt = 0;
    std::uint64_t last_seen = 0;
    ReplayWindow window;
  };

  struct ConnKey {
    wire::IpAddress peer;
    std::uint32_t remote_qpn = 0;
    Aead aead;
  };
  using RemoteKey = std::pair<std::uint32_t, std::array<std::uint8_t, 16>>;

  SealedDatapath(datapath::Datapath& inner, Mode mode, std::optional<Aead> psk, std::uint32_t salt,
                 std::uint64_t first_counter);
  void on_rx(const wire::RocePacket& pkt, const datapath::RxMeta& meta);
  void deliver_plain(const wire::RocePacket& pkt, const datapath::RxMeta& meta);
  // The replay window, the tag, and the handler for a packet that verified. `icrc`: its ICRC
  // check when still to be made (RxMeta::pending), finished or skipped here where needed.
  void open_sealed(const wire::RocePacket& pkt, const datapath::RxMeta& meta,
                   wire::PendingIcrc* icrc);
  // The key a packet for local QP `qpn` is opened with: its connection's, else the pre-shared
  // one, else none.
  Aead* rx_key(std::uint32_t qpn);
  // The key a packet to `o.dst`'s QP `dest_qpn` is sealed with: the connection's, else the
  // pre-shared one, else none (plain).
  Aead* tx_key(const wire::OuterHeaders& o, std::uint32_t dest_qpn);
  bool seal_and_send(Instant now, Aead& aead, const wire::OuterHeaders& o,
                     ConstBytes transport_headers, std::span<const ConstBytes> payload,
                     std::size_t n);
  // For an inner datapath without send_built(): the body written into a slot of ours, which
  // send() may read up to the inner datapath's next flush.
  bool send_from_slot(Instant now, const wire::OuterHeaders& o, ConstBytes headers,
                      std::size_t body_bytes, datapath::BodyWriter& writer);
  Sender* find_sender(std::uint32_t salt);
  Sender& add_sender(std::uint32_t salt);

  datapath::Datapath& inner_;
  Mode mode_;
  std::optional<Aead> psk_;
  std::unordered_map<std::uint32_t, std::unique_ptr<ConnKey>> by_local_;  // by local QPN
  std::map<RemoteKey, ConnKey*> by_remote_;  // by the peer's QPN and address
  std::uint32_t salt_;
  std::uint64_t counter_;
  std::vector<std::byte> slots_;  // kSlots bodies (payload, pad, trailer): send_from_slot
  std::size_t used_slots_ = 0;    // since the inner datapath's last flush
  std::vector<std::byte> plain_;  // a received packet's decrypted payload
  std::vector<Sender> senders_;
  std::uint64_t rx_seq_ = 0;  // for last_seen
  const RxHandler* handler_ = nullptr;
  RxHandler thunk_;  // made once: calls on_rx
  SealCounters counters_;
  SourceBudget failures_{kFailBurst, kFailPerSecond};
  Instant now_ = Instant::from_ns(0);  // the receive() call's
};

}  // namespace uroce::seal

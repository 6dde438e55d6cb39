#include "seal/sealed_datapath.h"

#include <algorithm>
#include <cstring>

#include "wire/builder.h"
#include "wire/headers.h"

namespace uroce::seal {

namespace {

constexpr std::size_t kSlotBytes = wire::kMaxPayloadBytes + 3 + wire::kSealTrailerBytes;
constexpr std::uint32_t kGsiQpn = 1;

// Writes a sealed packet's body (payload, pad, nonce, tag) in one pass over the payload: AES-GCM
// reads it from where the transport gathered it (registered memory) once and writes the
// ciphertext where the packet leaves from (the UDP datapath's staging ring).
class Sealer final : public datapath::BodyWriter {
 public:
  Sealer(Aead& aead, bool encrypt, ConstBytes headers, std::span<const ConstBytes> payload,
         std::size_t n, const Nonce& nonce)
      : aead_(aead),
        encrypt_(encrypt),
        headers_(headers),
        payload_(payload),
        n_(n),
        nonce_(nonce) {}
  bool write(MutBytes body) override {
    written_ = true;
    const std::size_t pad = wire::pad_for(n_);
    UROCE_CHECK(body.size() == n_ + pad + wire::kSealTrailerBytes);
    const MutBytes data = body.first(n_);
    std::fill_n(body.begin() + static_cast<std::ptrdiff_t>(n_), pad, std::byte{0});
    Tag tag;
    if (encrypt_) {
      ok_ = aead_.seal(nonce_, headers_, {}, payload_, data, tag);
    } else {
      std::size_t at = 0;
      for (ConstBytes p : payload_) {
        if (!p.empty()) std::memcpy(data.data() + at, p.data(), p.size());
        at += p.size();
      }
      // The tag covers the copy, not the source read again: a READ response's source is memory
      // its application may rewrite at any moment, and the packet carries the copy.
      const ConstBytes copy[1] = {data};
      ok_ = aead_.seal(nonce_, headers_, copy, {}, {}, tag);
    }
    if (!ok_) return false;
    std::memcpy(body.data() + n_ + pad, nonce_.data(), nonce_.size());
    std::memcpy(body.data() + n_ + pad + nonce_.size(), tag.data(), tag.size());
    return true;
  }
  bool failed() const { return written_ && !ok_; }

 private:
  Aead& aead_;
  bool encrypt_;
  ConstBytes headers_;
  std::span<const ConstBytes> payload_;
  std::size_t n_;
  const Nonce& nonce_;
  bool written_ = false;
  bool ok_ = false;
};

// Whether a packet whose ICRC was not checked yet (`icrc`, null when it was) fails it: it was
// corrupted on the way rather than forged (the UDP datapath counts it as bad_icrc).
bool corrupted(wire::PendingIcrc* icrc) { return icrc != nullptr && !icrc->finish(); }

}  // namespace

Result<std::unique_ptr<SealedDatapath>, std::string> SealedDatapath::create(
    datapath::Datapath& inner, const Settings& settings, std::uint32_t salt,
    std::uint64_t first_counter) {
  if (settings.mode == Mode::kOff) return Err{std::string("aead=off seals nothing")};
  std::optional<Aead> psk;
  if (settings.key.size != 0) {
    auto aead = Aead::create(settings.key);
    if (!aead.ok()) return Err{aead.error()};
    psk.emplace(std::move(aead.value()));
  }
  return std::unique_ptr<SealedDatapath>(
      new SealedDatapath(inner, settings.mode, std::move(psk), salt, first_counter));
}

SealedDatapath::SealedDatapath(datapath::Datapath& inner, Mode mode, std::optional<Aead> psk,
                               std::uint32_t salt, std::uint64_t first_counter)
    : inner_(inner),
      mode_(mode),
      psk_(std::move(psk)),
      salt_(salt),
      counter_(first_counter),
      plain_(wire::kMaxPayloadBytes),
      senders_(kSenders),
      thunk_([this](const wire::RocePacket& pkt, const datapath::RxMeta& meta) {
        on_rx(pkt, meta);
      }) {}

bool SealedDatapath::set_connection_key(std::uint32_t local_qpn, const wire::IpAddress& peer,
                                        std::uint32_t remote_qpn, const Key& key) {
  auto aead = Aead::create(key);
  if (!aead.ok()) return false;
  clear_connection_key(local_qpn);
  auto k = std::unique_ptr<ConnKey>(new ConnKey{peer, remote_qpn, std::move(aead.value())});
  by_remote_[RemoteKey{remote_qpn, peer.bytes}] = k.get();
  by_local_[local_qpn] = std::move(k);
  return true;
}

void SealedDatapath::clear_connection_key(std::uint32_t local_qpn) {
  auto it = by_local_.find(local_qpn);
  if (it == by_local_.end()) return;
  auto r = by_remote_.find(RemoteKey{it->second->remote_qpn, it->second->peer.bytes});
  if (r != by_remote_.end() && r->second == it->second.get()) by_remote_.erase(r);
  by_local_.erase(it);
}

Aead* SealedDatapath::tx_key(const wire::OuterHeaders& o, std::uint32_t dest_qpn) {
  if (!by_remote_.empty()) {
    auto it = by_remote_.find(RemoteKey{dest_qpn, o.dst.bytes});
    if (it != by_remote_.end()) return &it->second->aead;
  }
  return psk_ ? &*psk_ : nullptr;
}

std::size_t SealedDatapath::receive(Instant now, std::size_t max, const RxHandler& handler) {
  handler_ = &handler;
  now_ = now;
  const std::size_t n = inner_.receive(now, max, thunk_);
  handler_ = nullptr;
  return n;
}

SealedDatapath::Sender* SealedDatapath::find_sender(std::uint32_t salt) {
  for (Sender& s : senders_) {
    if (s.used && s.salt == salt) return &s;
  }
  return nullptr;
}

SealedDatapath::Sender& SealedDatapath::add_sender(std::uint32_t salt) {
  Sender* oldest = &senders_[0];
  for (Sender& s : senders_) {
    if (!s.used) {
      oldest = &s;
      break;
    }
    if (s.last_seen < oldest->last_seen) oldest = &s;
  }
  *oldest = Sender{};
  oldest->used = true;
  oldest->salt = salt;
  return *oldest;
}

void SealedDatapath::on_rx(const wire::RocePacket& pkt, const datapath::RxMeta& meta) {
  // The device turns deferred ICRC checks off when it seals: a packet here was checked, or is a
  // sealed one that comes with its check (RxMeta::pending) for the tag to make unneeded.
  UROCE_CHECK(meta.pending == nullptr || pkt.sealed());
  wire::PendingIcrc* const icrc = meta.pending;
  if (!pkt.sealed()) {
    deliver_plain(pkt, meta);
    return;
  }
  open_sealed(pkt, meta, icrc);
  // A packet dropped before its ICRC was needed: not checked (the UDP datapath counts nothing).
  if (icrc != nullptr && !icrc->finished()) icrc->skip();
}

void SealedDatapath::deliver_plain(const wire::RocePacket& pkt, const datapath::RxMeta& meta) {
  const std::uint32_t qpn = pkt.bth().dest_qpn();
  // A QP with a per-connection key takes sealed packets only, whatever the device's mode.
  const bool per_connection = !by_local_.empty() && by_local_.count(qpn) != 0;
  if ((mode_ == Mode::kRequire || per_connection) && qpn != kGsiQpn) {
    ++counters_.rx_plain_dropped;
    return;
  }
  ++counters_.rx_plain;
  datapath::RxMeta unproven = meta;  // anyone may have sent it: it pins no peer's port
  unproven.may_teach_port = false;
  (*handler_)(pkt, unproven);
}

Aead* SealedDatapath::rx_key(std::uint32_t qpn) {
  if (!by_local_.empty()) {
    auto it = by_local_.find(qpn);
    if (it != by_local_.end()) return &it->second->aead;
  }
  return psk_ ? &*psk_ : nullptr;
}

void SealedDatapath::open_sealed(const wire::RocePacket& pkt, const datapath::RxMeta& meta,
                                 wire::PendingIcrc* icrc) {
  // A source whose sealed packets keep failing is refused before the tag check it would cost.
  const SourceKey source{meta.src.bytes, meta.src_port};
  if (!failures_.allows(source, now_)) {
    ++counters_.rx_src_limited;
    return;
  }
  // The ICRC, where it is still unchecked, only matters when the tag fails: it tells corruption
  // on the way (counted as bad_icrc, not charged) from forgery. But a source that failed lately
  // has it checked first, as every packet had before: its corrupted packets then cost a CRC, not
  // a tag check too, and corruption can owe at most one charge at a time (below), never run a
  // source out of budget, while a forger who spoils the ICRC gets no more tag checks than one
  // who does not.
  if (icrc != nullptr && !failures_.whole(source, now_)) {
    if (!icrc->finish()) return;
    icrc = nullptr;
  }
  const Nonce nonce = nonce_of(pkt);
  const std::uint32_t salt = load_be32(nonce, 0);
  const std::uint64_t counter = load_be64(nonce, 4);
  Aead* const key = rx_key(pkt.bth().dest_qpn());
  if (key == nullptr) {  // no key this packet can be sealed with here
    if (!corrupted(icrc)) ++counters_.rx_auth_fail;
    return;
  }
  Sender* sender = find_sender(salt);
  if (sender != nullptr && !sender->window.fresh(counter)) {
    if (corrupted(icrc)) return;
    ++counters_.rx_replay;
    failures_.charge(source, now_);
    return;
  }
  ++counters_.rx_tag_checks;
  const std::optional<ConstBytes> payload = open_packet(*key, pkt, plain_);
  if (!payload) {
    // Charged either way: a corrupted packet leaves its source checked ICRC first until the
    // charge is earned back.
    if (!corrupted(icrc)) ++counters_.rx_auth_fail;
    failures_.charge(source, now_);
    return;
  }
  if (icrc != nullptr) icrc->skip();  // the tag vouches for every byte the ICRC covers here
  wire::RocePacket out = pkt;
  out.trailer = {};
  out.payload = *payload;
  if (sender == nullptr) sender = &add_sender(salt);
  sender->window.record(counter);
  sender->last_seen = ++rx_seq_;
  ++counters_.rx_opened;
  datapath::RxMeta verified = meta;
  verified.pending = nullptr;
  verified.icrc_verified = true;
  (*handler_)(out, verified);
}

bool SealedDatapath::send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
                          std::span<const ConstBytes> payload) {
  const std::uint32_t dest_qpn = wire::BthView(transport_headers).dest_qpn();
  Aead* key = dest_qpn == kGsiQpn ? nullptr : tx_key(o, dest_qpn);
  if (key == nullptr) return inner_.send(now, o, transport_headers, payload);  // QP 1, no key
  std::size_t n = 0;
  for (ConstBytes p : payload) n += p.size();
  if (transport_headers.size() > kMaxHeaderBytes || n > wire::kMaxPayloadBytes) {
    ++counters_.tx_errors;  // no path MTU carries it: lost, as the UDP datapath loses it
    return true;
  }
  return seal_and_send(now, *key, o, transport_headers, payload, n);
}

bool SealedDatapath::seal_and_send(Instant now, Aead& aead, const wire::OuterHeaders& o,
                                   ConstBytes transport_headers,
                                   std::span<const ConstBytes> payload, std::size_t n) {
  const std::size_t hn = transport_headers.size();
  std::array<std::byte, kMaxHeaderBytes> hb;
  std::memcpy(hb.data(), transport_headers.data(), hn);
  const bool encrypt = mode_ != Mode::kAuthenticate;
  wire::BthMut(MutBytes(hb).first(hn))
      .set_tver(encrypt ? wire::kTverEncrypted : wire::kTverAuthenticated);
  const ConstBytes headers = ConstBytes(hb).first(hn);
  Nonce nonce;
  store_be32(nonce, 0, salt_);
  store_be64(nonce, 4, counter_++);  // never again, whatever happens to this packet
  Sealer sealer(aead, encrypt, headers, payload, n, nonce);
  const std::size_t body_bytes = n + wire::pad_for(n) + wire::kSealTrailerBytes;
  std::optional<bool> sent = inner_.send_built(now, o, headers, body_bytes, sealer);
  if (!sent) sent = send_from_slot(now, o, headers, body_bytes, sealer);
  if (sealer.failed()) {
    ++counters_.tx_errors;
    return true;
  }
  if (!*sent) return false;  // the caller retries (a new nonce)
  ++counters_.tx_sealed;
  return true;
}

bool SealedDatapath::send_from_slot(Instant now, const wire::OuterHeaders& o, ConstBytes headers,
                                    std::size_t body_bytes, datapath::BodyWriter& writer) {
  if (used_slots_ == kSlots) {
    inner_.flush(now);  // afterwards no queued packet refers to the slots
    used_slots_ = 0;
  }
  if (slots_.empty()) slots_.resize(kSlots * kSlotBytes);  // only for such inner datapaths
  const MutBytes body = MutBytes(slots_).subspan(used_slots_ * kSlotBytes, body_bytes);
  if (!writer.write(body)) return true;
  const ConstBytes piece[1] = {body};
  if (!inner_.send(now, o, headers, piece)) return false;
  ++used_slots_;
  return true;
}

void SealedDatapath::flush(Instant now) {
  inner_.flush(now);
  used_slots_ = 0;
}

}  // namespace uroce::seal

#include "seal/sealed_datapath.h"

#include <algorithm>
#include <cstring>

#include "wire/builder.h"
#include "wire/headers.h"

namespace uroce::seal {

namespace {

constexpr std::size_t kSlotBytes =
    SealedDatapath::kMaxHeaderBytes + wire::kMaxPayloadBytes + 3 + wire::kSealTrailerBytes;
constexpr std::uint32_t kGsiQpn = 1;

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
      slots_(kSlots * kSlotBytes),
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
  // The device turns deferred ICRC checks off when it seals: every packet here was checked.
  UROCE_CHECK(meta.pending == nullptr);
  const std::uint32_t qpn = pkt.bth().dest_qpn();
  Aead* key = nullptr;
  bool per_connection = false;
  if (!by_local_.empty()) {
    auto it = by_local_.find(qpn);
    if (it != by_local_.end()) {
      key = &it->second->aead;
      per_connection = true;
    }
  }
  if (key == nullptr && psk_) key = &*psk_;
  if (!pkt.sealed()) {
    // A QP with a per-connection key takes sealed packets only, whatever the device's mode.
    if ((mode_ == Mode::kRequire || per_connection) && qpn != kGsiQpn) {
      ++counters_.rx_plain_dropped;
      return;
    }
    ++counters_.rx_plain;
    datapath::RxMeta unproven = meta;  // anyone may have sent it: it pins no peer's port
    unproven.may_teach_port = false;
    (*handler_)(pkt, unproven);
    return;
  }
  // A source whose sealed packets keep failing is refused before the tag check it would cost.
  const SourceKey source{meta.src.bytes, meta.src_port};
  if (!failures_.allows(source, now_)) {
    ++counters_.rx_src_limited;
    return;
  }
  const Nonce nonce = nonce_of(pkt);
  const std::uint32_t salt = load_be32(nonce, 0);
  const std::uint64_t counter = load_be64(nonce, 4);
  if (key == nullptr) {  // no key this packet can be sealed with here
    ++counters_.rx_auth_fail;
    return;
  }
  Sender* sender = find_sender(salt);
  if (sender != nullptr && !sender->window.fresh(counter)) {
    ++counters_.rx_replay;
    failures_.charge(source, now_);
    return;
  }
  const std::optional<ConstBytes> payload = open_packet(*key, pkt, plain_);
  if (!payload) {
    ++counters_.rx_auth_fail;
    failures_.charge(source, now_);
    return;
  }
  wire::RocePacket out = pkt;
  out.trailer = {};
  out.payload = *payload;
  if (sender == nullptr) sender = &add_sender(salt);
  sender->window.record(counter);
  sender->last_seen = ++rx_seq_;
  ++counters_.rx_opened;
  (*handler_)(out, meta);
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
  if (used_slots_ == kSlots) {
    inner_.flush(now);  // afterwards no queued packet refers to the slots
    used_slots_ = 0;
  }
  const MutBytes slot = MutBytes(slots_).subspan(used_slots_ * kSlotBytes, kSlotBytes);
  const std::size_t hn = transport_headers.size();
  const std::size_t pad = wire::pad_for(n);
  const MutBytes headers = slot.first(hn);
  std::memcpy(headers.data(), transport_headers.data(), hn);
  const bool encrypt = mode_ != Mode::kAuthenticate;
  wire::BthMut(headers).set_tver(encrypt ? wire::kTverEncrypted : wire::kTverAuthenticated);
  const MutBytes body = slot.subspan(hn, n + pad + wire::kSealTrailerBytes);
  const MutBytes data = body.first(n);
  std::fill_n(body.begin() + static_cast<std::ptrdiff_t>(n), pad, std::byte{0});
  Nonce nonce;
  store_be32(nonce, 0, salt_);
  store_be64(nonce, 4, counter_++);  // never again, whatever happens to this packet
  Tag tag;
  bool ok = false;
  if (encrypt) {
    ok = aead.seal(nonce, headers, {}, payload, data, tag);
  } else {
    std::size_t at = 0;
    for (ConstBytes p : payload) {
      if (!p.empty()) std::memcpy(data.data() + at, p.data(), p.size());
      at += p.size();
    }
    ok = aead.seal(nonce, headers, payload, {}, {}, tag);
  }
  if (!ok) {
    ++counters_.tx_errors;
    return true;
  }
  std::memcpy(body.data() + n + pad, nonce.data(), nonce.size());
  std::memcpy(body.data() + n + pad + nonce.size(), tag.data(), tag.size());
  const ConstBytes piece[1] = {body};
  if (!inner_.send(now, o, headers, piece)) return false;  // the caller retries (a new nonce)
  ++used_slots_;
  ++counters_.tx_sealed;
  return true;
}

void SealedDatapath::flush(Instant now) {
  inner_.flush(now);
  used_slots_ = 0;
}

}  // namespace uroce::seal

// seal/aead and seal/sealed_datapath without sockets: AES-GCM against the GCM specification's
// test vectors (so that uroce drives OpenSSL right), the policy and key parsers, the replay
// window, and a SealedDatapath over a datapath that keeps what is sent and hands back what a
// test queues: every byte of a sealed packet tampered with, replays, plain packets per policy.
#include "seal/aead.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "keeping_datapath.h"
#include "seal/sealed_datapath.h"
#include "wire/builder.h"

namespace uroce::seal {
namespace {

std::vector<std::byte> hex(std::string_view h) {
  std::vector<std::byte> out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) {
    out.push_back(static_cast<std::byte>(std::stoi(std::string(h.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

Nonce nonce_of(std::string_view h) {
  Nonce n;
  const auto b = hex(h);
  std::memcpy(n.data(), b.data(), n.size());
  return n;
}

Key key_of(std::string_view h) { return parse_key_hex(h).value(); }

// McGrew and Viega, "The Galois/Counter Mode of Operation (GCM)", test cases 1, 2 and 4 (also in
// NIST's GCM test vectors).
TEST(Aead, GcmSpecificationTestVectors) {
  {
    auto a = Aead::create(key_of("00000000000000000000000000000000")).value();
    Tag tag;
    ASSERT_TRUE(a.seal(nonce_of("000000000000000000000000"), {}, {}, {}, {}, tag));
    EXPECT_EQ(std::vector<std::byte>(tag.begin(), tag.end()),
              hex("58e2fccefa7e3061367f1d57a4e7455a"));
  }
  {
    auto a = Aead::create(key_of("00000000000000000000000000000000")).value();
    const std::vector<std::byte> p(16, std::byte{0});
    std::vector<std::byte> c(16);
    Tag tag;
    const ConstBytes pieces[] = {p};
    ASSERT_TRUE(a.seal(nonce_of("000000000000000000000000"), {}, {}, pieces, c, tag));
    EXPECT_EQ(c, hex("0388dace60b6a392f328c2b971b2fe78"));
    EXPECT_EQ(std::vector<std::byte>(tag.begin(), tag.end()),
              hex("ab6e47d42cec13bdf53a67b21257bddf"));
  }
  const auto key = key_of("feffe9928665731c6d6a8f9467308308");
  const auto nonce = nonce_of("cafebabefacedbaddecaf888");
  const auto p =
      hex("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
          "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39");
  const auto aad = hex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
  const auto want_c =
      hex("42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e"
          "21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091");
  const auto want_tag = hex("5bc94fbc3221a5db94fae95ae7121a47");
  auto a = Aead::create(key).value();
  // The plaintext in three pieces, as a packet's payload comes from several SGEs.
  const ConstBytes pieces[] = {ConstBytes(p).first(7), ConstBytes(p).subspan(7, 30),
                               ConstBytes(p).subspan(37)};
  std::vector<std::byte> c(p.size());
  Tag tag;
  ASSERT_TRUE(a.seal(nonce, aad, {}, pieces, c, tag));
  EXPECT_EQ(c, want_c);
  EXPECT_EQ(std::vector<std::byte>(tag.begin(), tag.end()), want_tag);
  std::vector<std::byte> back(c.size());
  ASSERT_TRUE(a.open(nonce, aad, {}, c, back, tag));
  EXPECT_EQ(back, p);
  // Associated data in two pieces is the same associated data.
  const ConstBytes aad_tail[] = {ConstBytes(aad).subspan(5)};
  ASSERT_TRUE(a.open(nonce, ConstBytes(aad).first(5), aad_tail, c, back, tag));
  // Any bit of the ciphertext, the associated data or the tag: refused.
  for (std::size_t bit = 0; bit < c.size() * 8; bit += 13) {
    auto bad = c;
    bad[bit / 8] ^= std::byte{static_cast<std::uint8_t>(1u << (bit % 8))};
    EXPECT_FALSE(a.open(nonce, aad, {}, bad, back, tag)) << bit;
  }
  for (std::size_t bit = 0; bit < aad.size() * 8; bit += 7) {
    auto bad = aad;
    bad[bit / 8] ^= std::byte{static_cast<std::uint8_t>(1u << (bit % 8))};
    EXPECT_FALSE(a.open(nonce, bad, {}, c, back, tag)) << bit;
  }
  Tag bad_tag = tag;
  bad_tag[15] ^= std::byte{1};
  EXPECT_FALSE(a.open(nonce, aad, {}, c, back, bad_tag));
  // And a good packet still opens after the refusals.
  EXPECT_TRUE(a.open(nonce, aad, {}, c, back, tag));
}

TEST(Aead, Aes256KeysWork) {
  auto key = parse_key_hex(std::string(64, 'a'));
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(key->size, 32u);
  auto a = Aead::create(key.value()).value();
  const auto p = hex("00112233445566778899");
  std::vector<std::byte> c(p.size()), back(p.size());
  Tag tag;
  const ConstBytes pieces[] = {p};
  const Nonce n{};
  ASSERT_TRUE(a.seal(n, {}, {}, pieces, c, tag));
  EXPECT_NE(c, p);
  ASSERT_TRUE(a.open(n, {}, {}, c, back, tag));
  EXPECT_EQ(back, p);
  // The same bytes under the 128-bit key of the first half: another ciphertext.
  auto b = Aead::create(parse_key_hex(std::string(32, 'a')).value()).value();
  std::vector<std::byte> c2(p.size());
  Tag tag2;
  ASSERT_TRUE(b.seal(n, {}, {}, pieces, c2, tag2));
  EXPECT_NE(c2, c);
}

TEST(Aead, KeysAndPoliciesParse) {
  EXPECT_FALSE(parse_key_hex("").ok());
  EXPECT_FALSE(parse_key_hex(std::string(31, '0')).ok());
  EXPECT_FALSE(parse_key_hex(std::string(31, '0') + "g").ok());
  const auto k = parse_key_hex("000102030405060708090a0B0c0D0e0F");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->size, 16u);
  EXPECT_EQ(k->bytes[11], std::byte{0x0b});
  for (const char* m : {"off", "authenticate", "encrypt", "require"}) {
    EXPECT_EQ(mode_name(*mode_from_name(m)), m);
  }
  EXPECT_FALSE(mode_from_name("on"));
  EXPECT_EQ(parse_settings("off", "").value().mode, Mode::kOff);
  // A mode that seals without a key: per-connection keys only (agreed through the CM).
  ASSERT_TRUE(parse_settings("encrypt", "").ok());
  EXPECT_EQ(parse_settings("encrypt", "").value().key.size, 0u);
  EXPECT_FALSE(parse_settings("encrypt", "abc").ok());
  EXPECT_FALSE(parse_settings("sometimes", std::string(32, '1')).ok());
  const auto s = parse_settings("require", std::string(64, 'f'));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->mode, Mode::kRequire);
  EXPECT_EQ(s->key.size, 32u);
  // The message never repeats the secret.
  const auto bad = parse_settings("encrypt", std::string(30, '7') + "zz");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().find("777"), std::string::npos) << bad.error();
}

TEST(ReplayWindow, TakesEachCounterOnceWithinTheWindow) {
  ReplayWindow w;
  const std::uint64_t base = (std::uint64_t{1} << 62) + 5;
  EXPECT_TRUE(w.fresh(base));
  w.record(base);
  EXPECT_FALSE(w.fresh(base));
  // Out of order within the window: each once.
  for (std::uint64_t c : {base + 10, base + 3, base + 7, base + 1}) {
    EXPECT_TRUE(w.fresh(c)) << c - base;
    w.record(c);
    EXPECT_FALSE(w.fresh(c)) << c - base;
  }
  EXPECT_TRUE(w.fresh(base + 2));
  EXPECT_FALSE(w.fresh(base + 3));
  // A jump far ahead: everything behind the window is old.
  w.record(base + 100000);
  EXPECT_FALSE(w.fresh(base + 2));
  EXPECT_FALSE(w.fresh(base + 100000 - (ReplayWindow::kWindow - 64)));
  EXPECT_TRUE(w.fresh(base + 100000 - (ReplayWindow::kWindow - 64) + 1));
  EXPECT_TRUE(w.fresh(base + 99999));
  // Advancing by less than the window keeps what was recorded within it, and frees the words
  // it moves past.
  w.record(base + 99990);
  w.record(base + 100500);
  EXPECT_FALSE(w.fresh(base + 99990));
  EXPECT_FALSE(w.fresh(base + 100000));
  EXPECT_TRUE(w.fresh(base + 100001));
  for (std::uint64_t c = base + 100501; c < base + 100501 + 3 * ReplayWindow::kWindow; ++c) {
    ASSERT_TRUE(w.fresh(c)) << c - base;
    w.record(c);
  }
}

struct Received {
  std::vector<std::byte> payload;
  std::uint32_t psn = 0;
  std::uint32_t qpn = 0;
};

class SealedPair : public ::testing::Test {
 protected:
  void make(Mode tx_mode, Mode rx_mode, const std::string& rx_key = std::string(32, '4')) {
    tx_ = SealedDatapath::create(tx_inner_, Settings{tx_mode, key_of(std::string(32, '4'))},
                                 0x11223344, 1000)
              .value();
    rx_ =
        SealedDatapath::create(rx_inner_, Settings{rx_mode, key_of(rx_key)}, 0x55667788, 5).value();
  }
  // A packet from the transport: RDMA WRITE Only of `payload` to `qpn` at `psn`.
  void send(std::uint32_t qpn, std::uint32_t psn, ConstBytes payload) {
    wire::TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcRdmaWriteOnly);
    h.bth.dest_qpn = qpn;
    h.bth.psn = psn;
    h.reth = wire::Reth{0x1000, 0xabcd, static_cast<std::uint32_t>(payload.size())};
    std::array<std::byte, 64> hb;
    const std::size_t hn = wire::write_headers(hb, h, payload.size());
    // The payload in two pieces, as from two SGEs.
    const std::size_t cut = payload.size() / 3;
    const ConstBytes pieces[] = {payload.first(cut), payload.subspan(cut)};
    ASSERT_TRUE(tx_->send(Instant{}, wire::OuterHeaders{}, ConstBytes(hb).first(hn), pieces));
  }
  std::vector<Received> deliver(const std::vector<std::byte>& packet) {
    rx_inner_.inbound.push_back(packet);
    std::vector<Received> got;
    clock_ = clock_ + tick_;  // a second apart by default: no source runs out of budget
    rx_->receive(clock_, 64, [&](const wire::RocePacket& pkt, const datapath::RxMeta&) {
      EXPECT_FALSE(pkt.sealed());
      got.push_back({std::vector<std::byte>(pkt.payload.begin(), pkt.payload.end()),
                     pkt.bth().psn(), pkt.bth().dest_qpn()});
    });
    return got;
  }
  void tampered_and_replayed(Mode m, bool pending);
  KeepingDatapath tx_inner_, rx_inner_;
  std::unique_ptr<SealedDatapath> tx_, rx_;
  Instant clock_ = Instant::from_ns(0);
  Duration tick_ = Duration::s(1);
};

std::vector<std::byte> pattern(std::size_t n) {
  std::vector<std::byte> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>('A' + i % 26);
  return p;
}

bool contains(const std::vector<std::byte>& hay, ConstBytes needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

TEST_F(SealedPair, EncryptedPacketsCarryNoPlaintextAndOpen) {
  make(Mode::kEncrypt, Mode::kEncrypt);
  const auto p = pattern(301);  // 3 bytes of pad
  send(17, 0x100, p);
  send(17, 0x100, p);  // the same PSN and bytes again, as a retransmission
  ASSERT_EQ(tx_inner_.sent.size(), 2u);
  for (const auto& s : tx_inner_.sent) {
    EXPECT_EQ(wire::BthView(s).tver(), wire::kTverEncrypted);
    EXPECT_FALSE(contains(s, ConstBytes(p).subspan(100, 16)));
    auto parsed = wire::parse_roce(s, true);
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(parsed->payload.size(), p.size());
    EXPECT_EQ(parsed->pad, 3);
  }
  // Each packet has a nonce of its own: a retransmission is not the same ciphertext.
  EXPECT_NE(tx_inner_.sent[0], tx_inner_.sent[1]);
  for (const auto& s : tx_inner_.sent) {
    const auto got = deliver(s);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].payload, p);
    EXPECT_EQ(got[0].psn, 0x100u);
    EXPECT_EQ(got[0].qpn, 17u);
  }
  EXPECT_EQ(tx_->counters().tx_sealed, 2u);
  EXPECT_EQ(rx_->counters().rx_opened, 2u);
}

TEST_F(SealedPair, AuthenticatedPacketsCarryTheirPayloadInClear) {
  make(Mode::kAuthenticate, Mode::kRequire);
  const auto p = pattern(64);
  send(17, 0x100, p);
  ASSERT_EQ(tx_inner_.sent.size(), 1u);
  EXPECT_EQ(wire::BthView(tx_inner_.sent[0]).tver(), wire::kTverAuthenticated);
  EXPECT_TRUE(contains(tx_inner_.sent[0], p));
  const auto got = deliver(tx_inner_.sent[0]);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, p);
}

// Every byte of a sealed packet but the ICRC (which the UDP datapath checks: an attacker
// recomputes it), flipped: the packet fails to parse or is dropped as unauthentic, never
// delivered. Then the untouched packet is delivered once, and its replay is dropped.
// Again with the ICRC unchecked (as the UDP datapath hands sealed packets on) and made right
// after each change (as an attacker makes it): the same drops, each counted as a forgery.
TEST_F(SealedPair, EveryTamperedByteIsDroppedAndReplaysToo) {
  for (const bool pending : {false, true}) {
    for (Mode m : {Mode::kAuthenticate, Mode::kEncrypt}) {
      SCOPED_TRACE(std::string(mode_name(m)) + (pending ? ", ICRC unchecked" : ""));
      tampered_and_replayed(m, pending);
    }
  }
}

void SealedPair::tampered_and_replayed(Mode m, bool pending) {
  tx_inner_.sent.clear();
  rx_inner_.pending_icrc = pending;
  make(m, Mode::kRequire);
  send(17, 0x100, pattern(77));
  std::vector<std::byte> good = tx_inner_.sent.at(0);
  if (pending) KeepingDatapath::set_icrc(good);
  std::size_t auth_drops = 0;
  for (std::size_t i = 0; i + wire::kIcrcBytes < good.size(); ++i) {
    for (std::uint8_t flip : {0x01, 0x80}) {
      auto bad = good;
      bad[i] ^= std::byte{flip};
      if (pending) KeepingDatapath::set_icrc(bad);
      const std::size_t parse_before = rx_inner_.parse_drops;
      EXPECT_TRUE(deliver(bad).empty()) << "byte " << i;
      if (rx_inner_.parse_drops == parse_before) ++auth_drops;
    }
  }
  // Every flip that still parsed was caught by its tag (a flip of the counter is not a
  // replay either: no counter was recorded yet), or made it a plain packet (TVer 1 -> 0),
  // which `require` refuses.
  EXPECT_GT(auth_drops, good.size());
  EXPECT_EQ(rx_->counters().rx_auth_fail + rx_->counters().rx_plain_dropped, auth_drops);
  EXPECT_LE(rx_->counters().rx_plain_dropped, 1u);
  EXPECT_EQ(rx_->counters().rx_replay, 0u);
  EXPECT_EQ(rx_->counters().rx_opened, 0u);
  EXPECT_EQ(deliver(good).size(), 1u);
  EXPECT_TRUE(deliver(good).empty());
  EXPECT_TRUE(deliver(good).empty());
  EXPECT_EQ(rx_->counters().rx_replay, 2u);
  EXPECT_EQ(rx_->counters().rx_opened, 1u);
}

TEST_F(SealedPair, OutOfOrderPacketsAreTakenOnceEach) {
  make(Mode::kEncrypt, Mode::kEncrypt);
  for (std::uint32_t i = 0; i < 20; ++i) send(17, 0x100 + i, pattern(8 + i));
  const auto sent = tx_inner_.sent;
  for (std::size_t i : {3, 0, 19, 7, 1, 2, 18}) {
    const auto got = deliver(sent[i]);
    ASSERT_EQ(got.size(), 1u) << i;
    EXPECT_EQ(got[0].psn, 0x100u + i);
  }
  for (std::size_t i : {3, 0, 19, 7}) EXPECT_TRUE(deliver(sent[i]).empty()) << i;
  EXPECT_EQ(rx_->counters().rx_replay, 4u);
}

TEST_F(SealedPair, WrongKeyIsRefused) {
  make(Mode::kEncrypt, Mode::kEncrypt, std::string(32, '5'));
  send(17, 0x100, pattern(40));
  EXPECT_TRUE(deliver(tx_inner_.sent.at(0)).empty());
  EXPECT_EQ(rx_->counters().rx_auth_fail, 1u);
}

TEST_F(SealedPair, PlainPacketsByPolicy) {
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcSendOnly);
  h.bth.dest_qpn = 17;
  const auto p = pattern(16);
  std::vector<std::byte> plain(wire::roce_size(*wire::opcode_info(h.bth.opcode), p.size()));
  wire::write_roce(plain, h, p);
  h.bth.dest_qpn = 1;  // the CM's QP
  std::vector<std::byte> gsi(plain.size());
  wire::write_roce(gsi, h, p);
  make(Mode::kEncrypt, Mode::kEncrypt);
  EXPECT_EQ(deliver(plain).size(), 1u);
  EXPECT_EQ(rx_->counters().rx_plain, 1u);
  make(Mode::kEncrypt, Mode::kRequire);
  EXPECT_TRUE(deliver(plain).empty());
  EXPECT_EQ(rx_->counters().rx_plain_dropped, 1u);
  EXPECT_EQ(deliver(gsi).size(), 1u);  // QP 1 is plain in every mode
  // And QP 1 goes out plain.
  send(1, 5, p);
  EXPECT_EQ(wire::BthView(tx_inner_.sent.back()).tver(), 0);
  EXPECT_EQ(tx_->counters().tx_sealed, 0u);
}

// An inner datapath without send_built(): the bodies are sealed into the sealing datapath's own
// slots, which send() may read up to the next flush, so it flushes the inner one when they run
// out. The packets open as the others do.
TEST_F(SealedPair, ManyPacketsBeforeAFlushFlushTheInnerDatapath) {
  tx_inner_.in_place = false;
  make(Mode::kEncrypt, Mode::kEncrypt);
  for (std::size_t i = 0; i < 2 * SealedDatapath::kSlots + 1; ++i) send(17, i, pattern(100));
  EXPECT_EQ(tx_inner_.flushes, 2u);
  EXPECT_EQ(tx_inner_.built, 0u);
  EXPECT_EQ(tx_->counters().tx_sealed, 2 * SealedDatapath::kSlots + 1);
  const auto got = deliver(tx_inner_.sent.back());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, pattern(100));
}

// Where the inner datapath offers it (send_built, as the UDP datapath's staging ring), the body
// is sealed straight into the inner datapath's buffer for the packet: no slot, no flush of the
// sealing datapath's own, and each packet opens.
TEST_F(SealedPair, PacketsAreSealedWhereTheInnerDatapathSendsThemFrom) {
  make(Mode::kEncrypt, Mode::kEncrypt);
  constexpr std::size_t kPackets = 2 * SealedDatapath::kSlots + 1;
  for (std::size_t i = 0; i < kPackets; ++i) send(17, static_cast<std::uint32_t>(i), pattern(100));
  EXPECT_EQ(tx_inner_.built, kPackets);
  EXPECT_EQ(tx_inner_.flushes, 0u);
  EXPECT_EQ(tx_->counters().tx_sealed, kPackets);
  for (const auto& s : tx_inner_.sent) {
    const auto got = deliver(s);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].payload, pattern(100));
  }
}

// A sealed packet that comes with its ICRC unchecked (from the UDP datapath): the tag that
// verifies vouches for every byte the ICRC covers but the outer headers', so the ICRC is never
// computed, not even where it is wrong (only it or the outer headers could differ then).
TEST_F(SealedPair, AVerifiedTagMakesTheIcrcUnneeded) {
  make(Mode::kEncrypt, Mode::kEncrypt);
  rx_inner_.pending_icrc = true;
  send(17, 0x100, pattern(300));
  const std::vector<std::byte> good = tx_inner_.sent.at(0);  // its ICRC left zero: wrong
  ASSERT_NE(KeepingDatapath::icrc(good), 0u);
  const auto got = deliver(good);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, pattern(300));
  ASSERT_TRUE(rx_inner_.last_icrc.has_value());
  EXPECT_TRUE(rx_inner_.last_icrc->skipped);
  EXPECT_EQ(rx_->counters().rx_tag_checks, 1u);
  EXPECT_EQ(rx_->counters().rx_opened, 1u);
}

// A packet corrupted on the way (its ICRC wrong) fails its tag; its ICRC is checked then, and it
// is dropped as corrupted (bad_icrc: the UDP datapath counts it), not counted as a forgery. Its
// source has its ICRC checked first until that charge is earned back: further corrupted packets
// (or forgeries whose ICRC the forger spoilt) cost no tag check, and however many come they
// never run the source out of budget. Genuine packets still open; a forgery with its ICRC made
// right is counted as one; once the charges are earned back the ICRC is skipped again.
TEST_F(SealedPair, ACorruptedPacketIsToldFromAForgeryAndLocksNoSourceOut) {
  make(Mode::kEncrypt, Mode::kEncrypt);
  rx_inner_.pending_icrc = true;
  tick_ = Duration::ns(0);  // all at one instant
  clock_ = Instant::from_ns(1'000'000'000);
  for (std::uint32_t i = 0; i < 3; ++i) send(17, 0x100 + i, pattern(200));
  const auto sent = tx_inner_.sent;
  const auto corrupted = [](std::vector<std::byte> p) {
    KeepingDatapath::set_icrc(p);
    p[40] ^= std::byte{0x10};  // a payload byte, after the ICRC was made
    return p;
  };
  EXPECT_TRUE(deliver(corrupted(sent[0])).empty());
  ASSERT_TRUE(rx_inner_.last_icrc.has_value());
  EXPECT_FALSE(rx_inner_.last_icrc->skipped);
  EXPECT_FALSE(rx_inner_.last_icrc->verified);
  EXPECT_EQ(rx_->counters().rx_tag_checks, 1u);
  EXPECT_EQ(rx_->counters().rx_auth_fail, 0u);
  constexpr std::size_t kMore = 5 * SealedDatapath::kFailBurst;
  for (std::size_t i = 0; i < kMore; ++i) EXPECT_TRUE(deliver(corrupted(sent[1])).empty());
  EXPECT_EQ(rx_->counters().rx_tag_checks, 1u);
  EXPECT_EQ(rx_->counters().rx_src_limited, 0u);
  EXPECT_EQ(rx_->counters().rx_auth_fail, 0u);
  // Genuine: its ICRC checked first, and right.
  auto genuine = sent[1];
  KeepingDatapath::set_icrc(genuine);
  ASSERT_EQ(deliver(genuine).size(), 1u);
  EXPECT_FALSE(rx_inner_.last_icrc->skipped);
  EXPECT_TRUE(rx_inner_.last_icrc->verified);
  // A forgery: ICRC right, tag wrong.
  auto forged = sent[2];
  forged[40] ^= std::byte{0x10};
  KeepingDatapath::set_icrc(forged);
  EXPECT_TRUE(deliver(forged).empty());
  EXPECT_EQ(rx_->counters().rx_auth_fail, 1u);
  EXPECT_EQ(rx_->counters().rx_tag_checks, 3u);
  // A second later every charge is earned back: the ICRC is skipped again (here it is wrong).
  clock_ = clock_ + Duration::s(1);
  ASSERT_EQ(deliver(sent[2]).size(), 1u);
  EXPECT_TRUE(rx_inner_.last_icrc->skipped);
  EXPECT_EQ(rx_->counters().rx_opened, 2u);
}

TEST(SealedDatapath, OffIsNotASealingMode) {
  KeepingDatapath inner;
  EXPECT_FALSE(SealedDatapath::create(inner, Settings{}, 1, 1).ok());
}

}  // namespace
}  // namespace uroce::seal

namespace uroce::seal {
namespace {

SourceKey source(std::uint8_t last, std::uint16_t port) {
  SourceKey k;
  k.address = {127, 0, 0, last};
  k.port = port;
  return k;
}

// A source may cost `burst` units at once, then one per 1/per_second: exactly, by the clock it
// is given. Others keep their own budget.
TEST(SourceBudget, BurstThenRateAndEachSourceItsOwn) {
  SourceBudget b(8, 4);  // one unit every 250 ms
  const Instant t0 = Instant::from_ns(1'000'000'000);
  const SourceKey x = source(2, 5000);
  int allowed = 0;
  for (int i = 0; i < 100; ++i) {
    if (!b.allows(x, t0)) continue;
    ++allowed;
    b.charge(x, t0);
  }
  EXPECT_EQ(allowed, 8);
  EXPECT_TRUE(b.allows(source(2, 4791), t0));  // the same address on another port
  EXPECT_TRUE(b.allows(source(3, 5000), t0));
  EXPECT_FALSE(b.allows(x, t0 + Duration::ms(249)));
  EXPECT_TRUE(b.allows(x, t0 + Duration::ms(250)));
  b.charge(x, t0 + Duration::ms(250));
  EXPECT_FALSE(b.allows(x, t0 + Duration::ms(250)));
  // Whole again after burst intervals.
  EXPECT_TRUE(b.allows(x, t0 + Duration::s(3)));
}

// However many sources charge it, the table holds kSlots of them; one that a flood of others
// pushed out starts again from a whole budget, never more.
TEST(SourceBudget, MemoryIsBoundedWhateverTheSources) {
  SourceBudget b(2, 1);
  const Instant t = Instant::from_ns(5'000'000'000);
  for (std::uint32_t i = 0; i < 100000; ++i) {
    SourceKey k;
    k.address[12] = static_cast<std::uint8_t>(i >> 16);
    k.address[13] = static_cast<std::uint8_t>(i >> 8);
    k.address[14] = static_cast<std::uint8_t>(i);
    k.port = 7;
    b.charge(k, t);
  }
  EXPECT_EQ(b.tracked(), SourceBudget::kSlots);
  static_assert(sizeof(SourceBudget) < 16 * 1024);
  const SourceKey x = source(9, 9);
  b.charge(x, t);
  b.charge(x, t);
  EXPECT_FALSE(b.allows(x, t));
}

// A flood of sealed packets under another key from one source: the first kFailBurst cost a tag
// check each and are counted as such, the rest are dropped unopened (aead_src_limited), all at
// one instant; a genuine packet from another source (the peer's port) still opens.
TEST_F(SealedPair, AFailingSourceIsLimitedOthersAreNot) {
  make(Mode::kEncrypt, Mode::kEncrypt);
  auto other = SealedDatapath::create(
                   tx_inner_, Settings{Mode::kEncrypt, key_of(std::string(32, '5'))}, 0x99, 1)
                   .value();
  constexpr std::uint32_t kFlood = 1000;
  const auto p = pattern(40);
  for (std::uint32_t i = 0; i < kFlood; ++i) {
    wire::TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcSendOnly);
    h.bth.dest_qpn = 17;
    h.bth.psn = i;
    std::array<std::byte, 64> hb;
    const std::size_t hn = wire::write_headers(hb, h, p.size());
    const ConstBytes piece[] = {ConstBytes(p)};
    ASSERT_TRUE(other->send(Instant{}, wire::OuterHeaders{}, ConstBytes(hb).first(hn), piece));
  }
  rx_inner_.meta.src_port = 40000;  // the attacker's
  tick_ = Duration::ns(0);          // all at one instant
  for (const auto& pkt : tx_inner_.sent) EXPECT_TRUE(deliver(pkt).empty());
  EXPECT_EQ(rx_->counters().rx_auth_fail, SealedDatapath::kFailBurst);
  EXPECT_EQ(rx_->counters().rx_src_limited, kFlood - SealedDatapath::kFailBurst);
  tx_inner_.sent.clear();
  send(17, 0x100, p);
  rx_inner_.meta.src_port = wire::kRoceV2Port;  // the peer's
  EXPECT_EQ(deliver(tx_inner_.sent.at(0)).size(), 1u);
  EXPECT_EQ(rx_->counters().rx_opened, 1u);
}

}  // namespace
}  // namespace uroce::seal

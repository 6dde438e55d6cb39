// seal/key_exchange and the per-connection keys of seal/sealed_datapath (issue 44,
// docs/SECURITY.md "Per-connection keys"): both ends of a connection derive the same key from
// their X25519 exchange and the connection's identity, another session (new key pairs, or the
// same pairs with another identity) derives another one, and a QP with a key seals and opens
// with it only: a packet recorded from an earlier session fails its tag, where under one
// pre-shared key it verified.
#include "seal/key_exchange.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <vector>

#include "keeping_datapath.h"
#include "seal/sealed_datapath.h"
#include "wire/builder.h"

namespace uroce::seal {
namespace {

ConnectionIdentity identity(const KeyShare& active, const KeyShare& passive) {
  ConnectionIdentity id;
  id.active_gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 44, 0, 1};
  id.passive_gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 44, 0, 2};
  id.active_qpn = 0x1234;
  id.passive_qpn = 0x4321;
  id.active_comm_id = 0xa0a0a0a0;
  id.passive_comm_id = 0xb0b0b0b0;
  id.active_share = active.public_share();
  id.passive_share = passive.public_share();
  return id;
}

struct Pair {
  KeyShare active = KeyShare::generate().value();
  KeyShare passive = KeyShare::generate().value();
};

TEST(KeyExchange, BothSidesDeriveTheSameKeyAndSessionsDiffer) {
  Pair one;
  const ConnectionIdentity id = identity(one.active, one.passive);
  const Key a = one.active.derive(one.passive.public_share(), id).value();
  const Key p = one.passive.derive(one.active.public_share(), id).value();
  EXPECT_EQ(a.size, 32u);
  EXPECT_TRUE(std::equal(a.view().begin(), a.view().end(), p.view().begin(), p.view().end()));
  EXPECT_NE(one.active.public_share(), one.passive.public_share());
  // Another session between the same QPs and IDs: new key pairs, another key.
  Pair two;
  const ConnectionIdentity id2 = identity(two.active, two.passive);
  const Key a2 = two.active.derive(two.passive.public_share(), id2).value();
  const Key p2 = two.passive.derive(two.active.public_share(), id2).value();
  EXPECT_TRUE(std::equal(a2.view().begin(), a2.view().end(), p2.view().begin(), p2.view().end()));
  EXPECT_FALSE(std::equal(a.view().begin(), a.view().end(), a2.view().begin(), a2.view().end()));
}

TEST(KeyExchange, EveryFieldOfTheIdentityChangesTheKey) {
  Pair s;
  const ConnectionIdentity base = identity(s.active, s.passive);
  const Key k = s.active.derive(s.passive.public_share(), base).value();
  std::vector<ConnectionIdentity> changed(8, base);
  changed[0].active_gid[15] ^= 1;
  changed[1].passive_gid[15] ^= 1;
  changed[2].active_qpn ^= 1;
  changed[3].passive_qpn ^= 1;
  changed[4].active_comm_id ^= 1;
  changed[5].passive_comm_id ^= 1;
  changed[6].active_share[0] ^= std::byte{1};
  changed[7].passive_share[31] ^= std::byte{1};
  for (std::size_t i = 0; i < changed.size(); ++i) {
    const Key other = s.active.derive(s.passive.public_share(), changed[i]).value();
    EXPECT_FALSE(
        std::equal(k.view().begin(), k.view().end(), other.view().begin(), other.view().end()))
        << "field " << i;
  }
  // An attacker's public value in place of the peer's: another secret, another key.
  Pair mallory;
  const Key m = s.active.derive(mallory.passive.public_share(), base).value();
  EXPECT_FALSE(std::equal(k.view().begin(), k.view().end(), m.view().begin(), m.view().end()));
}

TEST(KeyExchange, ALowOrderPeerValueIsRefused) {
  Pair s;
  const PublicShare zero{};  // the all-zero point: the shared secret would be zero
  EXPECT_FALSE(s.active.derive(zero, identity(s.active, s.passive)).ok());
}

// With a pre-shared key (docs/SECURITY.md, "Authenticated key agreement"): the key depends on
// it (a man in the middle of the CM without it derives neither side's key), and each side's
// transcript MAC verifies only over the identity and public values it was made over, under the
// same key.
TEST(KeyExchange, APskIsMixedIntoTheKeyAndAuthenticatesTheValues) {
  Pair s;
  const ConnectionIdentity id = identity(s.active, s.passive);
  const CmPsk psk = cm_psk_from(parse_key_hex(std::string(32, 'a')).value()).value();
  const CmPsk other = cm_psk_from(parse_key_hex(std::string(32, 'b')).value()).value();
  EXPECT_NE(psk, other);
  const Key plain = s.active.derive(s.passive.public_share(), id).value();
  const Key a = s.active.derive(s.passive.public_share(), id, &psk).value();
  const Key p = s.passive.derive(s.active.public_share(), id, &psk).value();
  const Key wrong = s.passive.derive(s.active.public_share(), id, &other).value();
  EXPECT_EQ(a.bytes, p.bytes);
  EXPECT_NE(a.bytes, plain.bytes);
  EXPECT_NE(a.bytes, wrong.bytes);

  const TranscriptMac rep = transcript_mac(psk, ShareRole::kPassive, id).value();
  const TranscriptMac rtu = transcript_mac(psk, ShareRole::kActive, id).value();
  EXPECT_TRUE(transcript_mac_ok(psk, ShareRole::kPassive, id, rep));
  EXPECT_TRUE(transcript_mac_ok(psk, ShareRole::kActive, id, rtu));
  EXPECT_FALSE(transcript_mac_ok(other, ShareRole::kPassive, id, rep));  // wrong psk
  EXPECT_FALSE(transcript_mac_ok(psk, ShareRole::kActive, id, rep));     // the other role's
  // The passive side's MAC is made before it knows the active value: that value is not in it.
  ConnectionIdentity later = id;
  later.active_share[0] ^= std::byte{1};
  EXPECT_TRUE(transcript_mac_ok(psk, ShareRole::kPassive, later, rep));
  EXPECT_FALSE(transcript_mac_ok(psk, ShareRole::kActive, later, rtu));
  // Mallory's value in place of either: neither MAC verifies.
  Pair mallory;
  ConnectionIdentity swapped = id;
  swapped.passive_share = mallory.passive.public_share();
  EXPECT_FALSE(transcript_mac_ok(psk, ShareRole::kPassive, swapped, rep));
  EXPECT_FALSE(transcript_mac_ok(psk, ShareRole::kActive, swapped, rtu));
  swapped = id;
  swapped.active_share = mallory.active.public_share();
  EXPECT_FALSE(transcript_mac_ok(psk, ShareRole::kActive, swapped, rtu));
  EXPECT_FALSE(cm_psk_from(Key{}).ok());
}

constexpr std::uint32_t kTxQpn = 0x99;  // the sender's QP
constexpr std::uint32_t kRxQpn = 0x17;  // the receiver's

// One end of a connection: a sealing datapath in `mode` (with a pre-shared key or none).
struct End {
  KeepingDatapath inner;
  std::unique_ptr<SealedDatapath> sd;
  End(Mode mode, const Key& psk, std::uint32_t salt) {
    sd = SealedDatapath::create(inner, Settings{mode, psk}, salt, 1000).value();
  }
};

std::vector<std::byte> send_write(End& e, std::uint32_t qpn, std::uint32_t psn) {
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcRdmaWriteOnly);
  h.bth.dest_qpn = qpn;
  h.bth.psn = psn;
  static constexpr char kText[] = "the session's secret payload";
  const ConstBytes payload = as_bytes(kText, sizeof kText);
  h.reth = wire::Reth{0x1000, 0xabcd, static_cast<std::uint32_t>(payload.size())};
  std::array<std::byte, 64> hb;
  const std::size_t hn = wire::write_headers(hb, h, payload.size());
  EXPECT_TRUE(e.sd->send(Instant{}, wire::OuterHeaders{}, ConstBytes(hb).first(hn),
                         std::span(&payload, 1)));
  return e.inner.sent.back();
}

std::size_t deliver(End& e, const std::vector<std::byte>& packet) {
  e.inner.inbound.push_back(packet);
  std::size_t got = 0;
  e.sd->receive(Instant{}, 8, [&](const wire::RocePacket& pkt, const datapath::RxMeta&) {
    EXPECT_FALSE(pkt.sealed());
    ++got;
  });
  return got;
}

Key session_key() {
  Pair s;
  return s.active.derive(s.passive.public_share(), identity(s.active, s.passive)).value();
}

TEST(ConnectionKeys, WithoutAPskOnlyKeyedQpsAreSealedAndTheyTakeNothingPlain) {
  End tx(Mode::kEncrypt, Key{}, 0x1111), rx(Mode::kEncrypt, Key{}, 0x2222);
  // No key for the QP: out plain, and the receiver (encrypt) takes it.
  const auto plain = send_write(tx, kRxQpn, 1);
  EXPECT_EQ(wire::BthView(plain).tver(), 0);
  EXPECT_EQ(tx.sd->counters().tx_sealed, 0u);
  EXPECT_EQ(deliver(rx, plain), 1u);
  // The connection's key on both ends: sealed, and it opens.
  const Key k = session_key();
  ASSERT_TRUE(tx.sd->set_connection_key(kTxQpn, wire::IpAddress{}, kRxQpn, k));
  ASSERT_TRUE(rx.sd->set_connection_key(kRxQpn, wire::IpAddress{}, kTxQpn, k));
  const auto sealed = send_write(tx, kRxQpn, 2);
  EXPECT_EQ(wire::BthView(sealed).tver(), wire::kTverEncrypted);
  EXPECT_EQ(deliver(rx, sealed), 1u);
  EXPECT_EQ(rx.sd->counters().rx_opened, 1u);
  // A plain packet for the keyed QP is refused, though the device's mode is encrypt.
  EXPECT_EQ(deliver(rx, plain), 0u);
  EXPECT_EQ(rx.sd->counters().rx_plain_dropped, 1u);
  // Cleared: the QP is back to the device's rules (no pre-shared key: plain).
  rx.sd->clear_connection_key(kRxQpn);
  EXPECT_EQ(rx.sd->connection_keys(), 0u);
  EXPECT_EQ(deliver(rx, plain), 1u);
  // A sealed packet for a QP without a key, on a device without a pre-shared key: no key opens
  // it.
  const auto sealed2 = send_write(tx, kRxQpn, 3);
  EXPECT_EQ(deliver(rx, sealed2), 0u);
  EXPECT_EQ(rx.sd->counters().rx_auth_fail, 1u);
}

TEST(ConnectionKeys, APacketFromAnEarlierSessionFailsWhereUnderThePskItVerified) {
  const Key psk = parse_key_hex(std::string(64, '3')).value();
  // Session 1, between two processes: a WRITE recorded off the wire.
  std::vector<std::byte> recorded_psk, recorded_conn;
  {
    End tx(Mode::kEncrypt, psk, 0x1111);
    recorded_psk = send_write(tx, kRxQpn, 7);
    const Key k1 = session_key();
    ASSERT_TRUE(tx.sd->set_connection_key(kTxQpn, wire::IpAddress{}, kRxQpn, k1));
    recorded_conn = send_write(tx, kRxQpn, 7);
  }
  // Session 2: new processes (new replay windows), the same QP numbers.
  End rx(Mode::kEncrypt, psk, 0x3333);
  // Under the pre-shared key alone the old packet verifies and would reach the QP.
  EXPECT_EQ(deliver(rx, recorded_psk), 1u);
  // With session 2's own key, neither the old PSK packet nor session 1's keyed one does.
  End rx2(Mode::kEncrypt, psk, 0x4444);
  ASSERT_TRUE(rx2.sd->set_connection_key(kRxQpn, wire::IpAddress{}, kTxQpn, session_key()));
  EXPECT_EQ(deliver(rx2, recorded_psk), 0u);
  EXPECT_EQ(deliver(rx2, recorded_conn), 0u);
  EXPECT_EQ(rx2.sd->counters().rx_auth_fail, 2u);
  EXPECT_EQ(rx2.sd->counters().rx_opened, 0u);
}

TEST(ConnectionKeys, KeysGoToTheirPeerAndQpOnly) {
  End tx(Mode::kEncrypt, Key{}, 0x1111);
  wire::IpAddress peer = wire::IpAddress::v4(0x7f2c0002);
  ASSERT_TRUE(tx.sd->set_connection_key(kTxQpn, peer, kRxQpn, session_key()));
  // Another destination QP, or the same QPN at another address: no key, plain.
  EXPECT_EQ(wire::BthView(send_write(tx, kRxQpn + 1, 1)).tver(), 0);
  EXPECT_EQ(wire::BthView(send_write(tx, kRxQpn, 1)).tver(), 0);         // OuterHeaders{}: 0.0.0.0
  EXPECT_FALSE(tx.sd->set_connection_key(kTxQpn, peer, kRxQpn, Key{}));  // no key material
}

}  // namespace
}  // namespace uroce::seal

// Authenticated and encrypted RDMA between two uroce devices on loopback (issue 44,
// docs/SECURITY.md): with `encrypt` the data arrives and the packets on the wire do not hold
// it; packets captured from a live connection and sent again, as they were or with a header or
// payload byte changed (and a valid ICRC), are dropped and counted before they reach a QP or
// memory, while the connection goes on; a peer with the wrong key, or without sealing against
// `require`, ends in retry-exceeded completions, counted, with nothing written.

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "capture/pcap_file.h"
#include "device/stats.h"
#include "device/two_devices.h"
#include "seal/aead.h"
#include "tools/pcap_cmd.h"
#include "wire/builder.h"
#include "wire/icrc.h"
#include "wire/packet.h"

namespace uroce::engine {
namespace {

using test::Side;

constexpr const char* kKey = "000102030405060708090a0b0c0d0e0f";
constexpr const char* kOtherKey = "f00102030405060708090a0b0c0d0e0f";

seal::Settings sealing(seal::Mode m, const char* key = kKey) {
  seal::Settings s;
  s.mode = m;
  if (m != seal::Mode::kOff) s.key = seal::parse_key_hex(key).value();
  return s;
}

// a and b, each at an address of its own, sealing in `ma` and `mb`, connected; a captures to
// `cap` unless it is empty.
void sealed_pair(Side& a, Side& b, seal::Mode ma, seal::Mode mb, const std::string& cap = {}) {
  test::SideOptions oa, ob;
  oa.device.seal = sealing(ma);
  ob.device.seal = sealing(mb);
  oa.capture = cap;
  test::make_side(a, test::unique_ip(), oa);
  test::make_side(b, test::unique_ip(), ob);
  test::pair_up(a, b);
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("uroce-aead-" + name + "-" + std::to_string(::getpid()) + ".pcap"))
      .string();
}

std::uint64_t counter(Side& s, std::string_view name) {
  return test::named_counter(s.dev->stats().device_counters(), name);
}

// A byte pattern no header or key material contains by chance.
std::vector<std::byte> secret_text(std::size_t n) {
  static constexpr char kText[] = "attack at dawn, bring the rkeys; ";
  std::vector<std::byte> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>(kText[i % (sizeof kText - 1)]);
  return p;
}

// The RoCE packets (BTH to ICRC) of a capture that `src` sent.
std::vector<std::vector<std::byte>> packets_from(const std::string& pcap, const std::string& src) {
  std::vector<std::vector<std::byte>> out;
  constexpr std::size_t kOuter = 14 + 20 + 8;  // Ethernet, IPv4, UDP
  auto scan = capture::for_each_record(pcap, [&](const capture::PcapRecord& rec) {
    if (rec.data.size() < kOuter + wire::kBthBytes) return;
    char ip[16];
    const auto* a = reinterpret_cast<const unsigned char*>(rec.data.data() + 14 + 12);
    std::snprintf(ip, sizeof ip, "%u.%u.%u.%u", a[0], a[1], a[2], a[3]);
    if (src != ip) return;
    // Sealed or not, a frame is RoCEv2 with a valid ICRC (what `uroce pcap check` verifies).
    auto f = wire::parse_frame(wire::LinkType::kEthernet, rec.data,
                               wire::FrameOptions{.verify_icrc = true, .accept_sealed = true});
    EXPECT_TRUE(f.ok()) << wire::drop_reason_name(f.error());
    out.emplace_back(rec.data.begin() + kOuter, rec.data.end());
  });
  EXPECT_TRUE(scan.ok()) << scan.error();
  return out;
}

bool contains(ConstBytes hay, ConstBytes needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

// A UDP socket on `ip` with a port of the kernel's choice, as any local user can open one on
// the peer's address: it sends RoCE packets with their ICRC made right for itself.
class Injector {
 public:
  explicit Injector(const char* ip) : ip_(ip), socket_(ip, 0) {}
  // `spoil_at`: a byte changed after the ICRC was made (as corruption on the way changes it).
  void send(const char* to, std::vector<std::byte> roce,
            std::optional<std::size_t> spoil_at = std::nullopt) {
    wire::OuterHeaders o;
    o.src = test::v4(ip_);
    o.dst = test::v4(to);
    o.src_port = socket_.port();
    o.ethernet = false;
    std::array<std::byte, 64> ip_udp;
    const std::size_t n = wire::write_outer(ip_udp, o, roce.size());
    const std::size_t body = roce.size() - wire::kIcrcBytes;
    store_le32(roce, body,
               wire::icrc_compute(ConstBytes(ip_udp).first(n), ConstBytes(roce).first(body)));
    if (spoil_at) roce.at(*spoil_at) ^= std::byte{0x08};
    socket_.send(to, roce);
  }

 private:
  const char* ip_;
  test::RawSender socket_;
};

// An RDMA WRITE of `data` (placed in a's buffer at `at`) to b's buffer at `at`; its completion.
Wc write(Side& a, Side& b, std::size_t at, const std::vector<std::byte>& data,
         std::uint64_t id = 1) {
  std::memcpy(a.buf.data() + at, data.data(), data.size());
  const Sge sge{a.va(at), static_cast<std::uint32_t>(data.size()), a.mr.lkey};
  const SendWr w = test::write_wr(id, sge, b, at);
  EXPECT_EQ(a.dev->device().post_send(a.qp, std::span(&w, 1), nullptr), Errc::kOk);
  const auto wcs = test::run_until(a, b, 1);
  EXPECT_EQ(wcs.size(), 1u);
  return wcs.empty() ? Wc{} : wcs[0];
}

class AeadModes : public ::testing::TestWithParam<seal::Mode> {};

// Both ends in the mode: a WRITE of 64 KiB and a SEND arrive whole. The capture of the sender
// shows the text only when the mode leaves the payload in clear.
TEST_P(AeadModes, DataArrivesAndTheWireShowsPlaintextOnlyWhenNotEncrypted) {
  const seal::Mode mode = GetParam();
  const std::string cap = temp_path(std::string("data-") + std::string(seal::mode_name(mode)));
  Side a, b;
  sealed_pair(a, b, mode, mode, cap);
  const char* const a_ip = a.ip.c_str();
  const auto text = secret_text(65536);
  const Wc wc = write(a, b, 0, text);
  EXPECT_EQ(wc.status, WcStatus::kSuccess) << wc_status_name(wc.status);
  EXPECT_EQ(std::memcmp(b.buf.data(), text.data(), text.size()), 0);
  // A SEND of an odd length (pad bytes) into a posted receive.
  const Sge rsge{b.va(200000), 4096, b.mr.lkey};
  const RecvWr rwr{7, std::span(&rsge, 1)};
  ASSERT_EQ(b.dev->device().post_recv(b.qp, std::span(&rwr, 1), nullptr), Errc::kOk);
  const Sge ssge{a.va(100), 3001, a.mr.lkey};
  SendWr s;
  s.wr_id = 2;
  s.opcode = WrOpcode::kSend;
  s.sg_list = std::span(&ssge, 1);
  s.send_flags = kSendSignaled;
  ASSERT_EQ(a.dev->device().post_send(a.qp, std::span(&s, 1), nullptr), Errc::kOk);
  const auto wcs = test::run_until(a, b, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  Wc rwc{};
  const Instant give_up = UdpDevice::now() + Duration::s(20);
  while (UdpDevice::now() < give_up) {
    b.dev->progress();
    auto k = b.dev->device().poll_cq(b.cq, std::span(&rwc, 1));
    if (k.ok() && k.value() == 1) break;
  }
  EXPECT_EQ(rwc.status, WcStatus::kSuccess);
  EXPECT_EQ(rwc.byte_len, 3001u);
  EXPECT_EQ(std::memcmp(b.buf.data() + 200000, a.buf.data() + 100, 3001), 0);

  a.dev->flush_capture();
  const auto sent = packets_from(cap, a_ip);
  ASSERT_GT(sent.size(), 64u);  // 64 KiB at a path MTU of 1024, and the SEND
  std::size_t with_text = 0;
  for (const auto& p : sent) {
    const std::uint8_t tver = wire::BthView(p).tver();
    EXPECT_EQ(tver, mode == seal::Mode::kOff            ? 0
                    : mode == seal::Mode::kAuthenticate ? wire::kTverAuthenticated
                                                        : wire::kTverEncrypted);
    // Any 24 bytes of the text (it repeats every 33).
    if (contains(p, ConstBytes(text).subspan(5, 24))) ++with_text;
  }
  const bool clear = mode == seal::Mode::kOff || mode == seal::Mode::kAuthenticate;
  if (clear) {
    EXPECT_GE(with_text, 64u);
  } else {
    EXPECT_EQ(with_text, 0u);
  }
  const std::uint64_t sealed = counter(a, "aead_tx_pkts");
  if (mode == seal::Mode::kOff) {
    EXPECT_EQ(sealed, 0u);
  } else {
    EXPECT_GE(sealed, sent.size());
    EXPECT_EQ(counter(b, "aead_rx_pkts"), counter(a, "aead_tx_pkts"));
    EXPECT_EQ(counter(a, "aead_rx_pkts"), counter(b, "aead_tx_pkts"));
    EXPECT_EQ(counter(b, "aead_auth_drops"), 0u);
    EXPECT_EQ(counter(b, "aead_replay_drops"), 0u);
  }
  std::filesystem::remove(cap);
}

INSTANTIATE_TEST_SUITE_P(Modes, AeadModes,
                         ::testing::Values(seal::Mode::kOff, seal::Mode::kAuthenticate,
                                           seal::Mode::kEncrypt, seal::Mode::kRequire),
                         [](const auto& info) { return std::string(seal::mode_name(info.param)); });

class AeadAttacks : public ::testing::TestWithParam<seal::Mode> {};

// The last RDMA WRITE Only that `ip` sent in the capture `cap` (empty: none).
std::vector<std::byte> last_write_only(const std::string& cap, const char* ip) {
  std::vector<std::byte> captured;
  for (const auto& p : packets_from(cap, ip)) {
    if (wire::BthView(p).opcode() == static_cast<std::uint8_t>(wire::Opcode::kRcRdmaWriteOnly)) {
      captured = p;
    }
  }
  return captured;
}

// An on-path attacker captured a's RDMA WRITE to b and sends it from a's address again: as it
// was and with its RETH address changed (replays: the nonce was seen), then with a fresh
// counter in its nonce and its PSN, its RETH address, a payload byte or its tag changed (the
// tag fails). Each is dropped and counted by b before its QP sees it; b's memory stays as it
// was; the connection's next WRITE completes.
TEST_P(AeadAttacks, ReplayedAndTamperedPacketsAreDroppedBeforeMemory) {
  const std::string cap = temp_path(std::string("attack-") + std::string(mode_name(GetParam())));
  Side a, b;
  sealed_pair(a, b, GetParam(), seal::Mode::kRequire, cap);
  const char* const a_ip = a.ip.c_str();
  const char* const b_ip = b.ip.c_str();
  const auto text = secret_text(512);
  ASSERT_EQ(write(a, b, 0, text).status, WcStatus::kSuccess);
  a.dev->flush_capture();
  const std::vector<std::byte> captured = last_write_only(cap, a_ip);
  ASSERT_FALSE(captured.empty());
  // b's copy is wiped: a packet that got through would write it again.
  std::fill_n(b.buf.begin(), 4096, std::byte{0});
  const transport::Qp& qb = *b.dev->device().find_qp(b.qpn);
  const std::uint64_t qp_received = qb.counters().packets_received;

  Injector attacker(a_ip);
  // As it was: its nonce was seen.
  attacker.send(b_ip, captured);
  constexpr std::size_t kPsn = 11;         // BTH's low PSN byte
  constexpr std::size_t kRethVa = 12 + 7;  // the low byte of RETH's virtual address
  constexpr std::size_t kPayload = 12 + 16 + 100;
  const std::size_t nonce = captured.size() - wire::kIcrcBytes - wire::kSealTrailerBytes;
  const std::size_t tag = captured.size() - wire::kIcrcBytes - 1;
  // Changed, with its nonce as it was: still a replay, dropped before its tag is checked.
  auto same_nonce = captured;
  same_nonce[kRethVa] ^= std::byte{0x40};
  attacker.send(b_ip, same_nonce);
  // Changed, and given a counter b has not seen (ahead of every counter a used): the tag does
  // not verify.
  for (std::size_t at : {kPsn, kRethVa, kPayload, tag}) {
    auto t = captured;
    t[at] ^= std::byte{0x04};
    store_be64(t, nonce + 4, load_be64(t, nonce + 4) + (std::uint64_t{1} << 20) + at);
    attacker.send(b_ip, t);
  }
  test::receive(b, 6);
  EXPECT_EQ(counter(b, "aead_replay_drops"), 2u);
  EXPECT_EQ(counter(b, "aead_auth_drops"), 4u);
  EXPECT_EQ(qb.counters().packets_received, qp_received);
  EXPECT_EQ(qb.state(), QpState::kRts);
  for (std::size_t i = 0; i < 4096; ++i) ASSERT_EQ(b.buf[i], std::byte{0}) << i;

  // The connection goes on.
  const auto more = secret_text(2000);
  ASSERT_EQ(write(a, b, 8192, more, 2).status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(b.buf.data() + 8192, more.data(), more.size()), 0);
  const std::string stats = format_stats_text(b.dev->stats(), false);
  EXPECT_NE(stats.find(" aead_auth_drops 4 aead_replay_drops 2 "), std::string::npos) << stats;
  std::filesystem::remove(cap);
}

// A sealed packet corrupted on the way (here a captured WRITE with a counter b has not seen and
// a payload byte changed after its ICRC was made) fails its tag and then its ICRC, which b checks
// only for a packet whose tag failed: b counts each as a bad ICRC, not a forgery, and drops it
// before memory; however many come, the source is not limited, and a's next WRITE completes.
TEST_P(AeadAttacks, ACorruptedPacketIsABadIcrcNotAForgery) {
  const std::string cap = temp_path(std::string("corrupt-") + std::string(mode_name(GetParam())));
  Side a, b;
  sealed_pair(a, b, GetParam(), seal::Mode::kRequire, cap);
  const char* const a_ip = a.ip.c_str();
  const char* const b_ip = b.ip.c_str();
  ASSERT_EQ(write(a, b, 0, secret_text(512)).status, WcStatus::kSuccess);
  a.dev->flush_capture();
  std::vector<std::byte> captured = last_write_only(cap, a_ip);
  ASSERT_FALSE(captured.empty());
  std::fill_n(b.buf.begin(), 4096, std::byte{0});
  const std::uint64_t icrc_before = counter(b, "icrc_err");
  const std::size_t nonce = captured.size() - wire::kIcrcBytes - wire::kSealTrailerBytes;
  constexpr std::size_t kPayload = 12 + 16 + 100;
  constexpr std::uint64_t kCorrupted = 3 * seal::SealedDatapath::kFailBurst;
  Injector network(a_ip);
  for (std::uint64_t i = 0; i < kCorrupted; ++i) {
    store_be64(captured, nonce + 4, load_be64(captured, nonce + 4) + (std::uint64_t{1} << 20) + i);
    network.send(b_ip, captured, kPayload);
    if (i % 64 == 63) test::receive(b, 64);
  }
  test::receive(b, kCorrupted % 64);
  EXPECT_EQ(counter(b, "icrc_err") - icrc_before, kCorrupted);
  EXPECT_EQ(counter(b, "aead_auth_drops"), 0u);
  EXPECT_EQ(counter(b, "aead_src_limited"), 0u);
  for (std::size_t i = 0; i < 4096; ++i) ASSERT_EQ(b.buf[i], std::byte{0}) << i;
  const auto more = secret_text(3000);
  ASSERT_EQ(write(a, b, 8192, more, 2).status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(b.buf.data() + 8192, more.data(), more.size()), 0);
  std::filesystem::remove(cap);
}

// What a command printed to a stream of its own.
struct Captured {
  char* text = nullptr;
  std::size_t size = 0;
  std::FILE* f = ::open_memstream(&text, &size);
  ~Captured() {
    std::fclose(f);
    std::free(text);
  }
  std::string str() {
    std::fflush(f);
    return std::string(text, size);
  }
};

// `uroce pcap check` and `dump` given the key (--psk): on a capture of an encrypting pair, every
// sealed packet verifies and the dump shows the payload decrypted; under another key every one
// fails verification, reported as invalid, not a crash; without a key the capture still checks.
TEST(Aead, PcapVerifiesAndDecryptsGivenTheKey) {
  const std::string cap = temp_path("pcap-psk");
  Side a, b;
  sealed_pair(a, b, seal::Mode::kEncrypt, seal::Mode::kEncrypt, cap);
  const char* const a_ip = a.ip.c_str();
  const char* const b_ip = b.ip.c_str();
  ASSERT_EQ(write(a, b, 0, secret_text(3000)).status, WcStatus::kSuccess);
  a.dev->flush_capture();
  const std::size_t sealed = packets_from(cap, a_ip).size() + packets_from(cap, b_ip).size();
  ASSERT_GE(sealed, 3u);
  const seal::Key key = seal::parse_key_hex(kKey).value();
  const seal::Key other = seal::parse_key_hex(kOtherKey).value();
  {
    Captured out, err;
    EXPECT_EQ(tools::pcap_check({cap}, out.f, err.f, &key), tools::kExitOk) << out.str();
    EXPECT_NE(out.str().find(", " + std::to_string(sealed) + " sealed and verified"),
              std::string::npos)
        << out.str();
  }
  {
    Captured out, err;
    EXPECT_EQ(tools::pcap_check({cap}, out.f, err.f, &other), tools::kExitInvalidPackets);
    EXPECT_NE(out.str().find(std::to_string(sealed) + " invalid"), std::string::npos) << out.str();
    EXPECT_NE(out.str().find("invalid: seal (the tag does not verify"), std::string::npos);
  }
  {
    Captured out, err;
    EXPECT_EQ(tools::pcap_check({cap}, out.f, err.f, nullptr), tools::kExitOk) << out.str();
  }
  {
    // "attack at dawn" as the dump shows the first WRITE packet's payload, decrypted.
    Captured out, err;
    EXPECT_EQ(tools::pcap_dump(cap, out.f, err.f, &key), tools::kExitOk);
    const std::string text = out.str();
    EXPECT_NE(text.find("  decrypted 61747461 636b2061 74206461 776e2c20"), std::string::npos)
        << text;
    EXPECT_EQ(text.find("FAILED"), std::string::npos);
  }
  {
    Captured out, err;
    EXPECT_EQ(tools::pcap_dump(cap, out.f, err.f, &other), tools::kExitInvalidPackets);
    const std::string text = out.str();
    EXPECT_NE(text.find("FAILED verification"), std::string::npos);
    EXPECT_EQ(text.find("decrypted"), std::string::npos);
  }
  std::filesystem::remove(cap);
}

// An RC SEND Only of `payload` to `qpn` at `psn`, plain, its ICRC left for the Injector.
std::vector<std::byte> plain_send(std::uint32_t qpn, std::uint32_t psn, ConstBytes payload) {
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcSendOnly);
  h.bth.dest_qpn = qpn;
  h.bth.psn = psn;
  h.bth.ack_req = true;
  std::vector<std::byte> out(wire::roce_size(*wire::opcode_info(h.bth.opcode), payload.size()));
  wire::write_roce(out, h, payload);
  return out;
}

// Source pinning on a sealing device: a connection whose peer's port is to be learned (not
// known as uroce's) learns it only from a packet whose tag verified. A plain SEND from the
// peer's address on another port, at the expected PSN, before the peer's first packet, is taken
// (authenticate and encrypt take plain packets) but pins nothing: the peer's WRITEs that follow
// get through, and once one of them pinned port 4791 the injector's next packet is dropped.
TEST_P(AeadAttacks, APlainPacketFirstDoesNotPinItsPort) {
  Side a, b;
  sealed_pair(a, b, GetParam(), GetParam());
  const char* const a_ip = a.ip.c_str();
  const char* const b_ip = b.ip.c_str();
  const transport::Qp& qb = *b.dev->device().find_qp(b.qpn);
  ASSERT_FALSE(qb.peer_udp_port());  // to be learned
  const Sge rsge{b.va(300000), 64, b.mr.lkey};
  const RecvWr rwr{9, std::span(&rsge, 1)};
  ASSERT_EQ(b.dev->device().post_recv(b.qp, std::span(&rwr, 1), nullptr), Errc::kOk);
  Injector attacker(a_ip);
  const auto forged = secret_text(16);
  attacker.send(b_ip, plain_send(b.qpn, 0x100, forged));
  test::receive(b, 1);
  EXPECT_EQ(counter(b, "aead_plain_rx"), 1u);
  EXPECT_EQ(qb.responder_psn(), 0x101u);  // taken: this mode does not stop injection
  EXPECT_FALSE(qb.peer_udp_port());       // but it taught nothing
  // a's first WRITE (PSN 0x100) is now a duplicate to b, acknowledged; its second is new.
  ASSERT_EQ(write(a, b, 0, secret_text(100), 1).status, WcStatus::kSuccess);
  const auto more = secret_text(700);
  ASSERT_EQ(write(a, b, 4096, more, 2).status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(b.buf.data() + 4096, more.data(), more.size()), 0);
  ASSERT_TRUE(qb.peer_udp_port());
  EXPECT_EQ(*qb.peer_udp_port(), wire::kRoceV2Port);
  EXPECT_EQ(qb.counters().src_port_mismatch, 0u);
  attacker.send(b_ip, plain_send(b.qpn, qb.responder_psn(), forged));
  test::receive(b, 1);
  EXPECT_EQ(qb.counters().src_port_mismatch, 1u);
}

// A flood of forged sealed packets from the peer's address on another port: the source's
// budget of failures (SealedDatapath::kFailBurst, then kFailPerSecond) bounds the tag checks it
// costs; the rest are dropped unopened and counted (aead_src_limited, in `uroce stats`); the
// peer's own connection, from port 4791, goes on. The bound is computed from the time the flood
// took, not assumed.
TEST_P(AeadAttacks, AFloodOfForgedPacketsIsLimitedPerSource) {
  const std::string cap = temp_path(std::string("flood-") + std::string(mode_name(GetParam())));
  Side a, b;
  sealed_pair(a, b, GetParam(), GetParam(), cap);
  const char* const a_ip = a.ip.c_str();
  const char* const b_ip = b.ip.c_str();
  ASSERT_EQ(write(a, b, 0, secret_text(512)).status, WcStatus::kSuccess);
  a.dev->flush_capture();
  std::vector<std::byte> captured = packets_from(cap, a_ip).at(0);
  const std::size_t nonce = captured.size() - wire::kIcrcBytes - wire::kSealTrailerBytes;
  constexpr std::uint64_t kFlood = 400;
  Injector attacker(a_ip);
  const Instant start = UdpDevice::now();
  for (std::uint64_t i = 0; i < kFlood; ++i) {
    captured[captured.size() - wire::kIcrcBytes - 1] ^= std::byte{0x01};  // a wrong tag
    store_be64(captured, nonce + 4, load_be64(captured, nonce + 4) + 1);  // a new counter
    attacker.send(b_ip, captured);
    if (i % 64 == 63) test::receive(b, 64);
  }
  test::receive(b, kFlood % 64);
  const double seconds = static_cast<double>((UdpDevice::now() - start).count_ns()) / 1e9;
  const std::uint64_t checked = counter(b, "aead_auth_drops");
  const std::uint64_t limited = counter(b, "aead_src_limited");
  EXPECT_EQ(checked + limited, kFlood);
  EXPECT_GE(checked, std::uint64_t{seal::SealedDatapath::kFailBurst});
  EXPECT_LE(static_cast<double>(checked),
            seal::SealedDatapath::kFailBurst + seal::SealedDatapath::kFailPerSecond * seconds + 1);
  const auto more = secret_text(2000);
  ASSERT_EQ(write(a, b, 8192, more, 2).status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(b.buf.data() + 8192, more.data(), more.size()), 0);
  const std::string stats = format_stats_text(b.dev->stats(), false);
  EXPECT_NE(stats.find(" aead_src_limited " + std::to_string(limited) + " "), std::string::npos)
      << stats;
  std::filesystem::remove(cap);
}

INSTANTIATE_TEST_SUITE_P(Modes, AeadAttacks,
                         ::testing::Values(seal::Mode::kAuthenticate, seal::Mode::kEncrypt),
                         [](const auto& info) { return std::string(seal::mode_name(info.param)); });

// Per-connection keys (docs/SECURITY.md): two devices at `encrypt` without a pre-shared key seal
// only the QPs the CM gave a key (here set as the drop-in librdmacm sets it). A WRITE arrives
// sealed, its text in no packet. The receiver of a later session (a new process: new replay
// windows), whose QP of that number has that session's key, drops the WRITE recorded from the
// first session (its tag fails), counted, where under one pre-shared key it verified.
TEST(Aead, PerConnectionKeysSealWithoutAPskAndAnEarlierSessionsPacketFails) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  const std::string cap = temp_path("per-connection");
  std::vector<std::byte> recorded;
  std::uint32_t a_qpn = 0;
  std::uint32_t b_qpn = 0;
  const auto key_of = [](char c) {
    std::array<std::byte, 32> k;
    k.fill(static_cast<std::byte>(c));
    return k;
  };
  const auto text = secret_text(3000);
  {
    Side a, b;
    test::SideOptions oa, ob;
    oa.device.seal = seal::Settings{seal::Mode::kEncrypt, {}};
    ob.device.seal = seal::Settings{seal::Mode::kEncrypt, {}};
    // Exclusive devices: every packet to the address reaches the one process (a shared one
    // steers a QPN no context owns any more to its coordinator).
    oa.sharing = UdpDevice::Sharing::kExclusive;
    ob.sharing = UdpDevice::Sharing::kExclusive;
    oa.capture = cap;
    test::make_side(a, a_ip, oa);
    test::make_side(b, b_ip, ob);
    test::pair_up(a, b);
    a_qpn = a.qpn;
    b_qpn = b.qpn;
    const auto k1 = key_of('1');
    ASSERT_TRUE(a.dev->set_connection_key(a.qpn, test::v4(b_ip), b.qpn, ConstBytes(k1)));
    ASSERT_TRUE(b.dev->set_connection_key(b.qpn, test::v4(a_ip), a.qpn, ConstBytes(k1)));
    ASSERT_EQ(write(a, b, 0, text).status, WcStatus::kSuccess);
    EXPECT_EQ(std::memcmp(b.buf.data(), text.data(), text.size()), 0);
    EXPECT_GT(counter(a, "aead_tx_pkts"), 0u);
    EXPECT_EQ(counter(b, "aead_rx_pkts"), counter(a, "aead_tx_pkts"));
    EXPECT_EQ(counter(b, "aead_plain_rx"), 0u);
    a.dev->flush_capture();
    for (const auto& p : packets_from(cap, a_ip)) {
      EXPECT_EQ(wire::BthView(p).tver(), wire::kTverEncrypted);
      EXPECT_FALSE(contains(p, ConstBytes(text).subspan(5, 24)));
      if (wire::BthView(p).opcode() == static_cast<std::uint8_t>(wire::Opcode::kRcRdmaWriteFirst)) {
        recorded = p;
      }
    }
  }
  ASSERT_FALSE(recorded.empty());
  Side b2;
  test::SideOptions ob2;
  ob2.device.seal = seal::Settings{seal::Mode::kEncrypt, {}};
  ob2.sharing = UdpDevice::Sharing::kExclusive;
  test::make_side(b2, b_ip, ob2);
  const auto k2 = key_of('2');
  ASSERT_TRUE(b2.dev->set_connection_key(b_qpn, test::v4(a_ip), a_qpn, ConstBytes(k2)));
  Injector attacker(a_ip);
  attacker.send(b_ip, recorded);
  test::receive(b2, 1);
  EXPECT_EQ(counter(b2, "aead_auth_drops"), 1u);
  EXPECT_EQ(counter(b2, "aead_rx_pkts"), 0u);
  std::filesystem::remove(cap);
}

// A destroyed QP's per-connection key goes with it (it stayed until its number reached RTR
// again): a QP created later, whatever number it gets, finds none of an earlier connection's,
// and the other QPs keep theirs.
TEST(Aead, ADestroyedQpsConnectionKeyGoesWithIt) {
  const char* const a_ip = test::unique_ip();
  Side a;
  test::SideOptions o;
  o.device.seal = seal::Settings{seal::Mode::kEncrypt, {}};
  o.sharing = UdpDevice::Sharing::kExclusive;
  test::make_side(a, a_ip, o);
  Device& dev = a.dev->device();
  QpInitAttr init;
  init.send_cq = a.cq;
  init.recv_cq = a.cq;
  init.cap = QpCap{4, 4, 1, 1, 0};
  const auto other = dev.create_qp(a.pd, init);
  ASSERT_TRUE(other.ok());
  std::array<std::byte, 32> key;
  key.fill(std::byte{0x5c});
  ASSERT_TRUE(a.dev->set_connection_key(a.qpn, test::v4("10.44.0.9"), 0x1234, ConstBytes(key)));
  ASSERT_TRUE(
      a.dev->set_connection_key(other->qp_num, test::v4("10.44.0.9"), 0x1235, ConstBytes(key)));
  EXPECT_EQ(a.dev->connection_keys(), 2u);
  ASSERT_EQ(dev.destroy_qp(a.qp), Errc::kOk);
  EXPECT_EQ(a.dev->connection_keys(), 1u);
  const auto again = dev.create_qp(a.pd, init);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(a.dev->connection_keys(), 1u);
  ASSERT_EQ(dev.destroy_qp(other->handle), Errc::kOk);
  EXPECT_EQ(a.dev->connection_keys(), 0u);
}

// Whether `p` (BTH to ICRC, as captured) verifies under `key`.
bool opens_under(const std::vector<std::byte>& p, const seal::Key& key) {
  auto pkt = wire::parse_roce(p, true);
  auto aead = seal::Aead::create(key);
  if (!pkt.ok() || !pkt.value().sealed() || !aead.ok()) return false;
  std::vector<std::byte> plain(pkt.value().payload.size());
  return seal::open_packet(aead.value(), pkt.value(), plain).has_value();
}

// `p`, an encrypted packet that opens under `key`, sealed again under it as another sender's (its
// nonce's salt `salt`): a packet that whoever holds `key` could send and that no receiver has seen
// yet (a new salt, not a's counter moved ahead, which would leave a's own packets behind the
// receiver's replay window once it verified).
std::vector<std::byte> resealed(const std::vector<std::byte>& p, const seal::Key& key,
                                std::uint32_t salt) {
  std::vector<std::byte> out = p;
  auto pkt = wire::parse_roce(p, true);
  auto aead = seal::Aead::create(key);
  EXPECT_TRUE(pkt.ok() && pkt.value().sealed() && aead.ok());
  if (!pkt.ok() || !aead.ok()) return out;
  std::vector<std::byte> plain(pkt.value().payload.size());
  const auto opened = seal::open_packet(aead.value(), pkt.value(), plain);
  EXPECT_TRUE(opened.has_value());
  const std::size_t at = static_cast<std::size_t>(pkt.value().payload.data() - p.data());
  const std::size_t trailer = p.size() - wire::kIcrcBytes - wire::kSealTrailerBytes;
  seal::Nonce nonce = seal::nonce_of(pkt.value());
  store_be32(nonce, 0, salt);
  seal::Tag tag;
  const ConstBytes text[1] = {ConstBytes(plain)};
  EXPECT_TRUE(aead.value().seal(nonce, ConstBytes(p).first(pkt.value().op->header_bytes), {}, text,
                                MutBytes(out).subspan(at, plain.size()), tag));
  std::memcpy(out.data() + trailer, nonce.data(), nonce.size());
  std::memcpy(out.data() + trailer + nonce.size(), tag.data(), tag.size());
  return out;
}

// A QP moved to RESET forgets its per-connection key, as it forgets its queues, PSNs and peer
// (IBTA's Reset state; rxe_qp_reset): moved by the native API here, without the drop-ins, and
// connected again out of band, a's QP seals with the devices' pre-shared key and not with the
// old key, and b's QP, which took a packet sealed with the old key before the RESET, drops one
// after it (its tag fails, counted). Both keep no per-connection key.
TEST(Aead, AQpMovedToResetForgetsItsConnectionKey) {
  const std::string cap = temp_path("reset");
  Side a, b;
  sealed_pair(a, b, seal::Mode::kEncrypt, seal::Mode::kEncrypt, cap);
  const char* const a_ip = a.ip.c_str();
  const char* const b_ip = b.ip.c_str();
  const seal::Key psk = seal::parse_key_hex(kKey).value();
  seal::Key old_key;
  old_key.size = 32;
  old_key.bytes.fill(std::byte{0x3c});
  ASSERT_TRUE(a.dev->set_connection_key(a.qpn, test::v4(b_ip), b.qpn, old_key.view()));
  ASSERT_TRUE(b.dev->set_connection_key(b.qpn, test::v4(a_ip), a.qpn, old_key.view()));
  ASSERT_EQ(write(a, b, 0, secret_text(512)).status, WcStatus::kSuccess);
  a.dev->flush_capture();
  const std::vector<std::byte> captured = last_write_only(cap, a_ip);
  ASSERT_FALSE(captured.empty());
  ASSERT_TRUE(opens_under(captured, old_key));
  ASSERT_FALSE(opens_under(captured, psk));
  const std::size_t before_reset = packets_from(cap, a_ip).size();

  // Before the RESET a packet sealed with the old key verifies (its QP then drops it: it comes
  // from another port than a's).
  Injector holder(a_ip);
  const std::uint64_t opened = counter(b, "aead_rx_pkts");
  holder.send(b_ip, resealed(captured, old_key, 0x44000001));
  test::receive(b, 1);
  EXPECT_EQ(counter(b, "aead_rx_pkts"), opened + 1);
  EXPECT_EQ(counter(b, "aead_auth_drops"), 0u);

  QpAttr reset;
  reset.qp_state = QpState::kReset;
  ASSERT_EQ(a.dev->device().modify_qp(a.qp, reset, kQpState), Errc::kOk);
  ASSERT_EQ(b.dev->device().modify_qp(b.qp, reset, kQpState), Errc::kOk);
  EXPECT_EQ(a.dev->connection_keys(), 0u);
  EXPECT_EQ(b.dev->connection_keys(), 0u);
  test::pair_up(a, b);

  // After it, the same kind of packet (from yet another sender) fails its tag: b opens with the
  // pre-shared key.
  holder.send(b_ip, resealed(captured, old_key, 0x44000002));
  test::receive(b, 1);
  EXPECT_EQ(counter(b, "aead_rx_pkts"), opened + 1);
  EXPECT_EQ(counter(b, "aead_auth_drops"), 1u);
  // And a seals with the pre-shared key: every packet it sent since opens under it alone.
  const auto text = secret_text(3000);
  ASSERT_EQ(write(a, b, 8192, text, 2).status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(b.buf.data() + 8192, text.data(), text.size()), 0);
  a.dev->flush_capture();
  const auto sent = packets_from(cap, a_ip);
  ASSERT_GT(sent.size(), before_reset);
  for (std::size_t i = before_reset; i < sent.size(); ++i) {
    EXPECT_TRUE(opens_under(sent[i], psk)) << i;
    EXPECT_FALSE(opens_under(sent[i], old_key)) << i;
  }
  std::filesystem::remove(cap);
}

// a's WRITE towards b cannot get through: b drops every packet, counted under `dropped_as`,
// and a's completion is retry-exceeded (ACK timeout about 1 ms, 2 retries).
void fails_cleanly(const seal::Settings& sa, const seal::Settings& sb,
                   const std::string& dropped_as) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  test::SideOptions oa, ob;
  oa.device.seal = sa;
  ob.device.seal = sb;
  test::make_side(a, a_ip, oa);
  test::make_side(b, b_ip, ob);
  test::connect(a, b, b_ip, 8, 2);
  test::connect(b, a, a_ip);
  const Wc wc = write(a, b, 0, secret_text(3000));
  EXPECT_EQ(wc.status, WcStatus::kRetryExcErr) << wc_status_name(wc.status);
  const auto named = b.dev->stats().device_counters();
  std::uint64_t drops = 0;
  if (dropped_as.starts_with("drop_")) {  // a drop reason of the wire parser
    for (std::size_t r = 0; r < wire::kDropReasonCount; ++r) {
      if (wire::drop_reason_name(static_cast<wire::DropReason>(r)) == dropped_as.substr(5)) {
        drops = b.dev->datapath().counters().rx_drops[r];
      }
    }
  } else {
    drops = test::named_counter(named, dropped_as);
  }
  EXPECT_GE(drops, 3u);  // the first try and two retries, at least
  EXPECT_EQ(b.dev->device().find_qp(b.qpn)->counters().packets_received, 0u);
  for (std::size_t i = 0; i < 4096; ++i) ASSERT_EQ(b.buf[i], std::byte{0}) << i;
  EXPECT_EQ(test::named_counter(named, "retry_exceeded_err"), 0u);
  EXPECT_EQ(counter(a, "retry_exceeded_err"), 1u);
}

TEST(Aead, AWrongKeyEndsInRetryExceeded) {
  fails_cleanly(sealing(seal::Mode::kEncrypt), sealing(seal::Mode::kEncrypt, kOtherKey),
                "aead_auth_drops");
}

TEST(Aead, OffAgainstRequireEndsInRetryExceeded) {
  fails_cleanly(sealing(seal::Mode::kOff), sealing(seal::Mode::kRequire), "aead_plain_drops");
}

TEST(Aead, RequireAgainstOffEndsInRetryExceeded) {
  // The off device has no key: sealed packets are an unknown transport version to it, as to rxe.
  fails_cleanly(sealing(seal::Mode::kRequire), sealing(seal::Mode::kOff), "drop_bad_tver");
}

TEST(Aead, TheConfigFileNamesModeAndKey) {
  auto list = parse_device_file(
      "a 10.0.0.1 aead=encrypt psk=000102030405060708090a0b0c0d0e0f\n"
      "b 10.0.0.2 cc=none aead=off\n"
      "c 10.0.0.3\n"
      "d 10.0.0.4 aead=require\n",
      "f");
  ASSERT_TRUE(list.ok()) << list.error();
  ASSERT_TRUE(list.value()[0].seal);
  EXPECT_EQ(list.value()[0].seal->mode, seal::Mode::kEncrypt);
  EXPECT_EQ(list.value()[0].seal->key.size, 16u);
  EXPECT_EQ(list.value()[1].seal->mode, seal::Mode::kOff);
  EXPECT_FALSE(list.value()[2].seal);
  // No psk=: per-connection keys only (agreed through the CM).
  EXPECT_EQ(list.value()[3].seal->mode, seal::Mode::kRequire);
  EXPECT_EQ(list.value()[3].seal->key.size, 0u);
  for (const char* bad : {"a 10.0.0.1 aead=maybe", "a 10.0.0.1 aead=require psk=12"}) {
    auto r = parse_device_file(bad, "f");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.error().find("f:1: "), std::string::npos) << r.error();
    }
  }
}

}  // namespace
}  // namespace uroce::engine

// datapath/udp with a fault stage (fault/fault.h) on loopback: what a rule does on transmit and
// on receive reaches the real socket, with time an input (the `now` given to send, flush and
// receive), so nothing here waits on a clock. Addresses of this test process's own
// (support/test_net.h).
#include <gtest/gtest.h>
#include <poll.h>

#include <string>
#include <vector>

#include "datapath/udp.h"
#include "support/ip_text.h"
#include "support/test_net.h"
#include "wire/builder.h"

namespace uroce::datapath {
namespace {

using test::v4;

std::unique_ptr<UdpDatapath> open_at(const char* ip) {
  UdpOptions o(v4(ip));
  o.gso = false;
  o.gro = false;
  auto dp = UdpDatapath::open(o);
  EXPECT_TRUE(dp.ok()) << dp.error();
  return dp.ok() ? std::move(dp.value()) : nullptr;
}

fault::FaultSpec spec(const char* text) {
  auto s = fault::FaultSpec::parse(text);
  EXPECT_TRUE(s.ok()) << s.error();
  return s.ok() ? s.value() : fault::FaultSpec{};
}

// Sends `n` RC SEND Only packets (PSN i, 64 bytes of payload) to `to` at time `now`.
void send_n(UdpDatapath& from, const char* to, int n, Instant now, std::uint32_t first_psn = 0) {
  // The datapath may read a payload until its flush (Datapath::send).
  std::vector<std::array<std::byte, 64>> payloads(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    wire::TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcSendOnly);
    h.bth.dest_qpn = 0x11;
    h.bth.psn = first_psn + static_cast<std::uint32_t>(i);
    std::array<std::byte, 64>& payload = payloads[static_cast<std::size_t>(i)];
    payload[0] = static_cast<std::byte>(i);
    std::array<std::byte, 64> hdr{};
    const std::size_t hn = wire::write_headers(hdr, h, payload.size());
    wire::OuterHeaders o;
    o.dst = v4(to);
    o.ethernet = false;
    const ConstBytes pieces[1] = {ConstBytes(payload)};
    ASSERT_TRUE(from.send(now, o, ConstBytes(hdr).first(hn), pieces));
  }
  from.flush(now);
}

// The PSNs of the valid packets received by `dp` at `now` until `want` came or nothing more
// comes (bounded wait for the socket: synchronization, not a sleep).
std::vector<std::uint32_t> receive_psns(UdpDatapath& dp, std::size_t want, Instant now) {
  std::vector<std::uint32_t> got;
  for (int tries = 0; tries < 50 && got.size() < want; ++tries) {
    dp.receive(now, 64, [&](const wire::RocePacket& p, const RxMeta& m) {
      EXPECT_TRUE(m.icrc_verified);
      got.push_back(p.bth().psn());
    });
    if (got.size() >= want) break;
    pollfd p{dp.fd(), POLLIN, 0};
    if (::poll(&p, 1, tries < 5 ? 2000 : 20) != 1 && tries >= 5) break;
  }
  return got;
}

std::uint64_t bad_icrc(const UdpDatapath& dp) {
  return dp.counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)];
}

TEST(UdpFaults, NoFaultsByDefaultAndAnEmptySpecClears) {
  const char* const a_ip = test::unique_ip();
  auto a = open_at(a_ip);
  ASSERT_TRUE(a);
  EXPECT_FALSE(a->has_faults());
  EXPECT_EQ(a->next_deadline(), Instant::never());
  a->set_faults(spec("loss=1%"), Instant{});
  EXPECT_TRUE(a->has_faults());
  EXPECT_EQ(a->fault_spec().to_string(), spec("loss=1%").to_string());
  a->set_faults(fault::FaultSpec{}, Instant{});
  EXPECT_FALSE(a->has_faults());
}

TEST(UdpFaults, TransmitLossAndCorruptionReachTheWireAndTheReceiversIcrcCatchesEveryCorruption) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  auto a = open_at(a_ip);
  auto b = open_at(b_ip);
  ASSERT_TRUE(a && b);
  a->set_faults(spec("dir=tx,loss=20%,corrupt=20%,corrupt_bits=3,seed=11"), Instant{});
  const Instant t = Instant::from_ns(1'000'000);
  send_n(*a, b_ip, 200, t);
  const fault::StageCounters c = a->fault_counters(fault::Direction::kTx);
  const auto lost = c.injected[static_cast<std::size_t>(fault::Injected::kLoss)];
  const auto corrupted = c.injected[static_cast<std::size_t>(fault::Injected::kCorrupt)];
  EXPECT_EQ(c.packets, 200u);
  EXPECT_GT(lost, 0u);
  EXPECT_GT(corrupted, 0u);
  const std::size_t good = 200 - lost - corrupted;
  auto got = receive_psns(*b, good, t);
  // Wait for the corrupted ones too: every packet that left has been read when the counts add up.
  for (int i = 0; i < 50 && b->counters().rx_packets < 200 - lost; ++i) {
    pollfd p{b->fd(), POLLIN, 0};
    if (::poll(&p, 1, 100) == 1) receive_psns(*b, 0, t);
  }
  EXPECT_EQ(got.size(), good);
  EXPECT_EQ(b->counters().rx_packets, 200 - lost);
  EXPECT_EQ(bad_icrc(*b), corrupted);
}

TEST(UdpFaults, DelayHoldsAPacketUntilItsTimeWhichNextDeadlineTells) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  auto a = open_at(a_ip);
  auto b = open_at(b_ip);
  ASSERT_TRUE(a && b);
  a->set_faults(spec("dir=tx,delay=5ms"), Instant{});
  const Instant t0 = Instant::from_ns(10'000'000);
  send_n(*a, b_ip, 3, t0);
  EXPECT_EQ(a->counters().tx_packets, 0u);
  EXPECT_EQ(a->next_deadline(), t0 + Duration::ms(5));
  a->flush(t0 + (Duration::ms(5) - Duration::ns(1)));
  EXPECT_EQ(a->counters().tx_packets, 0u);
  a->flush(t0 + Duration::ms(5));
  EXPECT_EQ(a->counters().tx_packets, 3u);
  EXPECT_EQ(a->next_deadline(), Instant::never());
  EXPECT_EQ(receive_psns(*b, 3, t0), (std::vector<std::uint32_t>{0, 1, 2}));
}

TEST(UdpFaults, ReceiveDuplicationAndReceiveDelay) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  auto a = open_at(a_ip);
  auto b = open_at(b_ip);
  ASSERT_TRUE(a && b);
  b->set_faults(spec("dir=rx,dup=100%"), Instant{});
  const Instant t = Instant::from_ns(1'000'000);
  send_n(*a, b_ip, 2, t);
  EXPECT_EQ(receive_psns(*b, 4, t), (std::vector<std::uint32_t>{0, 0, 1, 1}));

  b->set_faults(spec("dir=rx,delay=1ms"), Instant{});
  send_n(*a, b_ip, 1, t, 7);
  // Read from the socket, held by the stage: nothing delivered before its time.
  pollfd p{b->fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  std::size_t early = 0;
  b->receive(t, 64, [&](const wire::RocePacket&, const RxMeta&) { ++early; });
  EXPECT_EQ(early, 0u);
  EXPECT_EQ(b->counters().rx_packets, 4u);  // the stage has it (the four before it counted)
  EXPECT_EQ(b->next_deadline(), t + Duration::ms(1));
  EXPECT_EQ(receive_psns(*b, 1, t + Duration::ms(1)), (std::vector<std::uint32_t>{7}));
}

TEST(UdpFaults, AimedRulesTouchOnlyTheirPackets) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  const char* const c_ip = test::unique_ip();
  auto a = open_at(a_ip);
  auto b = open_at(b_ip);
  auto c = open_at(c_ip);
  ASSERT_TRUE(a && b && c);
  // Everything to b is lost; c is another peer.
  a->set_faults(spec((std::string("dir=tx,peer=") + b_ip + ",loss=100%").c_str()), Instant{});
  const Instant t = Instant::from_ns(1'000'000);
  send_n(*a, b_ip, 5, t);
  send_n(*a, c_ip, 5, t);
  EXPECT_EQ(receive_psns(*c, 5, t).size(), 5u);
  EXPECT_EQ(a->counters().tx_packets, 5u);
  EXPECT_EQ(a->fault_counters(fault::Direction::kTx).packets, 5u);
}

TEST(UdpFaults, TheSameSeedGivesTheSameFaultsAtTheSamePackets) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  std::vector<std::vector<std::uint32_t>> runs;
  for (int run = 0; run < 2; ++run) {
    auto a = open_at(a_ip);
    auto b = open_at(b_ip);
    ASSERT_TRUE(a && b);
    a->set_faults(spec("dir=tx,loss=30%,seed=5"), Instant{});
    std::vector<std::uint32_t> events;
    a->set_fault_events([&](const fault::FaultEvent& e) {
      events.push_back(static_cast<std::uint32_t>(e.packet_number));
    });
    send_n(*a, b_ip, 100, Instant::from_ns(1'000'000));
    runs.push_back(events);
  }
  EXPECT_FALSE(runs[0].empty());
  EXPECT_EQ(runs[0], runs[1]);
}

// A packet the socket has no room for (send() returns false: the caller sends it again later)
// enters the stage once, when the datapath takes it: the attempts it refused are neither counted
// nor drawn, so that backpressure does not change which packets the seed's faults hit.
TEST(UdpFaults, APacketRefusedForWantOfRoomEntersTheStageOnceWhenItIsTaken) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  struct Run {
    std::vector<std::uint32_t> events;  // the packet numbers of the faults
    std::vector<std::uint32_t> received;
    std::uint64_t packets = 0;  // the stage's count
    std::uint64_t refused = 0;  // send() calls that returned false
  };
  std::vector<Run> runs;
  for (const bool backpressure : {false, true}) {
    Run r;
    bool blocked = backpressure;
    UdpOptions o(v4(a_ip));
    o.gso = false;
    o.gro = false;
    o.tx_batch = 2;
    o.sendmmsg_hook = [&](int fd, mmsghdr* v, unsigned n) -> int {
      if (blocked) {
        errno = EAGAIN;
        return -1;
      }
      return ::sendmmsg(fd, v, n, 0);
    };
    auto opened = UdpDatapath::open(o);
    ASSERT_TRUE(opened.ok()) << opened.error();
    UdpDatapath& a = *opened.value();
    auto b = open_at(b_ip);
    ASSERT_TRUE(b);
    a.set_faults(spec("dir=tx,loss=30%,seed=5"), Instant{});
    a.set_fault_events([&](const fault::FaultEvent& e) {
      r.events.push_back(static_cast<std::uint32_t>(e.packet_number));
    });
    const Instant t = Instant::from_ns(1'000'000);
    constexpr int kPackets = 20;
    for (int i = 0; i < kPackets; ++i) {
      wire::TransportHeaders h;
      h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcSendOnly);
      h.bth.dest_qpn = 0x11;
      h.bth.psn = static_cast<std::uint32_t>(i);
      std::array<std::byte, 64> payload{};
      std::array<std::byte, 64> hdr{};
      const std::size_t hn = wire::write_headers(hdr, h, payload.size());
      wire::OuterHeaders out;
      out.dst = v4(b_ip);
      out.ethernet = false;
      const ConstBytes pieces[1] = {ConstBytes(payload)};
      // Refused while the socket is blocked, tried again three times, then taken once it has
      // room (and blocked again for the next).
      int tries = 0;
      while (!a.send(t, out, ConstBytes(hdr).first(hn), pieces)) {
        ++r.refused;
        if (++tries == 3) {
          blocked = false;
          a.flush(t);
        }
        ASSERT_LT(tries, 10);
      }
      a.flush(t);  // the payload is read by the flush at the latest (Datapath::send)
      blocked = backpressure;
    }
    blocked = false;
    a.flush(t);
    const fault::StageCounters c = a.fault_counters(fault::Direction::kTx);
    r.packets = c.packets;
    const auto lost = c.injected[static_cast<std::size_t>(fault::Injected::kLoss)];
    r.received = receive_psns(*b, kPackets - lost, t);
    EXPECT_EQ(r.packets, static_cast<std::uint64_t>(kPackets));
    EXPECT_EQ(r.events.size(), lost);
    EXPECT_EQ(r.received.size() + lost, static_cast<std::size_t>(kPackets));
    runs.push_back(r);
  }
  EXPECT_EQ(runs[0].refused, 0u);
  EXPECT_GT(runs[1].refused, 0u);  // the backpressure happened
  EXPECT_FALSE(runs[0].events.empty());
  EXPECT_EQ(runs[0].events, runs[1].events);
  EXPECT_EQ(runs[0].received, runs[1].received);
}

}  // namespace
}  // namespace uroce::datapath

// Held ACKs (UdpDevice::progress, AckPolicy, Engine::flush_tx): a QP that plays one side of a
// ping-pong sends the ACK it owes behind its next request, in one system call; a held ACK
// still goes out on its own, in polling mode and in thread mode, when no request comes; a QP
// that only responds never holds one. Over real UDP sockets on loopback; waits are bounded by
// generous deadlines only as hang guards. Only behaviour is asserted here (what was sent, that
// the peer's WR completes); how long an ACK is held and that it comes before the peer's ACK
// timeout are properties of the Scheduler with time as an input: tests/sim/progress_sim_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "capture/pcap_file.h"
#include "device/two_devices.h"
#include "device/udp_device.h"
#include "wire/opcode.h"

namespace uroce::engine {
namespace {

using test::make_side;
using test::named_counter;
using test::pair_up;
using test::Side;
using test::SideOptions;
using test::write_wr;

constexpr Duration kGiveUp = Duration::s(20);

void post_write(Side& from, const Side& to, std::uint64_t id, std::size_t off, std::uint32_t len,
                bool signaled = true) {
  const Sge sge{from.va(off), len, from.mr.lkey};
  SendWr w = write_wr(id, sge, to, off);
  if (!signaled) w.send_flags = 0;
  const SendWr* bad = nullptr;
  ASSERT_EQ(from.dev->lock()->post_send(from.qp, std::span(&w, 1), &bad), Errc::kOk);
}

// Polling mode: progresses both sides until `s` has a completion (or the hang guard).
std::optional<Wc> drive_until_completion(Side& s, Side& other) {
  const Instant give_up = UdpDevice::now() + kGiveUp;
  while (UdpDevice::now() < give_up) {
    s.dev->progress();
    other.dev->progress();
    Wc wc;
    auto n = s.dev->lock()->poll_cq(s.cq, std::span(&wc, 1));
    if (n.ok() && n.value() == 1) return wc;
  }
  return std::nullopt;
}

// Two connected sides; B has already sent a request of its own and seen it complete, so it
// looks like one side of a ping-pong from then on.
void pingpong_pair(Side& a, Side& b, const char* ip_a, const char* ip_b, const SideOptions& bo = {},
                   const SideOptions& ao = {}) {
  make_side(a, ip_a, ao);
  make_side(b, ip_b, bo);
  pair_up(a, b);
  post_write(b, a, 1, 0, 8);
  ASSERT_TRUE(drive_until_completion(b, a).has_value());
}

// Progresses only `a` (B is left to its thread, or to nobody) until `a` has a completion.
std::optional<Wc> progress_until_completion(Side& a) {
  const Instant give_up = UdpDevice::now() + kGiveUp;
  while (UdpDevice::now() < give_up) {
    a.dev->progress();
    Wc wc;
    auto n = a.dev->lock()->poll_cq(a.cq, std::span(&wc, 1));
    if (n.ok() && n.value() == 1) return wc;
  }
  return std::nullopt;
}

// Progresses `s` alone until its engine has received `n` packets in all.
bool receive_until(Side& s, std::uint64_t n) {
  const Instant give_up = UdpDevice::now() + kGiveUp;
  while (s.dev->engine().counters().rx_packets < n && UdpDevice::now() < give_up) {
    s.dev->progress();
  }
  return s.dev->engine().counters().rx_packets >= n;
}

// (source address, BTH opcode) of every frame in a capture, in capture order: a device's
// capture records what it receives when its round takes it from the socket and what it sends
// when the kernel has taken it, so the order is the order of the round's steps.
std::vector<std::pair<std::string, std::uint8_t>> frames_in(const std::string& pcap) {
  std::vector<std::pair<std::string, std::uint8_t>> out;
  auto scan = capture::for_each_record(pcap, [&](const capture::PcapRecord& rec) {
    if (rec.data.size() < 14 + 20 + 8 + 12) return;
    char src[16];
    const auto* a = reinterpret_cast<const unsigned char*>(rec.data.data() + 14 + 12);
    std::snprintf(src, sizeof src, "%u.%u.%u.%u", a[0], a[1], a[2], a[3]);
    out.emplace_back(src, static_cast<std::uint8_t>(rec.data[14 + 20 + 8]));
  });
  EXPECT_TRUE(scan.ok()) << scan.error();
  return out;
}

// BTH opcodes of the frames `ip` sent, in capture order.
std::vector<std::uint8_t> opcodes_sent_by(const std::string& pcap, const std::string& ip) {
  std::vector<std::uint8_t> ops;
  for (const auto& [src, op] : frames_in(pcap)) {
    if (src == ip) ops.push_back(op);
  }
  return ops;
}

class AckHold : public ::testing::Test {
 protected:
  std::string capture_path(const char* name) {
    return (std::filesystem::temp_directory_path() /
            (std::string("uroce-ackhold-") + name + "-" + std::to_string(::getpid()) + ".pcap"))
        .string();
  }
};

TEST_F(AckHold, PingPongAckLeavesBehindTheNextRequestInOneSystemCall) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  const std::string cap = capture_path("pingpong");
  Side a, b;
  SideOptions ao;
  ao.device.acks.defer = false;  // the ACK follows the answer (deferring: below)
  SideOptions bo = ao;
  bo.capture = cap;
  pingpong_pair(a, b, a_ip, b_ip, bo, ao);

  // A writes to B; B receives it and holds the ACK (no packet leaves B).
  const std::uint64_t b_rx = b.dev->engine().counters().rx_packets;
  const std::uint64_t b_tx = b.dev->engine().counters().tx_packets;
  const std::uint64_t b_held = b.dev->engine().counters().tx_acks_held;
  post_write(a, b, 2, 64, 8);
  a.dev->progress();
  ASSERT_TRUE(receive_until(b, b_rx + 1));
  EXPECT_EQ(b.dev->engine().counters().tx_packets, b_tx);
  EXPECT_GT(b.dev->engine().counters().tx_acks_held, b_held);

  // B answers with a WRITE of its own: request and ACK leave together, the request first.
  const std::uint64_t b_calls = b.dev->datapath().counters().tx_calls;
  post_write(b, a, 3, 128, 8);
  b.dev->progress();
  EXPECT_EQ(b.dev->engine().counters().tx_packets, b_tx + 2);
  EXPECT_EQ(b.dev->datapath().counters().tx_calls, b_calls + 1);
  auto wa = drive_until_completion(a, b);
  ASSERT_TRUE(wa.has_value());
  EXPECT_EQ(wa->wr_id, 2u);
  EXPECT_EQ(wa->status, WcStatus::kSuccess);
  auto wb = drive_until_completion(b, a);
  ASSERT_TRUE(wb.has_value());
  EXPECT_EQ(wb->wr_id, 3u);

  b.dev->close();
  const std::vector<std::uint8_t> ops = opcodes_sent_by(cap, b.ip);
  std::filesystem::remove(cap);
  // What B sent: its first WRITE, then its answer (RDMA WRITE Only) before the ACK it held.
  const auto write_only = static_cast<std::uint8_t>(wire::Opcode::kRcRdmaWriteOnly);
  const auto ack = static_cast<std::uint8_t>(wire::Opcode::kRcAcknowledge);
  EXPECT_EQ(ops, (std::vector<std::uint8_t>{write_only, write_only, ack}));
}

// Deferred ACKs (on by default; AckPolicyConfig::defer): a ping-pong of WRITEs whose sides post
// their next WRITE as soon as the peer's arrives, without waiting for their own completions.
// Whether a given ACK stays behind an answer or leaves when its hold runs out depends on the
// machine's speed (the simulator tests that with time as an input:
// ProgressSim.APingPongThatDoesNotWaitForCompletionsDefersItsAcks); here, over real sockets,
// every WRITE completes, in order, and every byte is where it was written, whichever way each
// ACK went.
TEST_F(AckHold, DeferredAcksLoseNothing) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  pingpong_pair(a, b, a_ip, b_ip);
  ASSERT_TRUE(a.dev->ack_policy().defer);
  ASSERT_TRUE(b.dev->ack_policy().defer);
  constexpr std::uint32_t kHops = 12;  // each side's WRITEs stay within its send queue (16)
  auto stamp = [](Side& s, std::uint32_t i, char who) {
    char text[8] = {who, 'o', 'p', ' ', static_cast<char>('a' + i), 0, 0, 0};
    std::memcpy(s.buf.data() + 256 + 8 * i, text, 8);
  };
  auto arrived = [](const Side& s, std::uint32_t i, char who) {
    return s.buf[256 + 8 * i] == static_cast<std::byte>(who) &&
           s.buf[256 + 8 * i + 4] == static_cast<std::byte>('a' + i);
  };
  auto wait_for = [&](Side& s, Side& other, std::uint32_t i, char who) {
    const Instant give_up = UdpDevice::now() + kGiveUp;
    while (!arrived(s, i, who) && UdpDevice::now() < give_up) {
      s.dev->progress();
      other.dev->progress();
    }
    return arrived(s, i, who);
  };
  // As UCX posts them: unsignaled (an ACK is deferred only behind such a request) but for the
  // last, whose completion stands for every WRITE before it.
  for (std::uint32_t i = 0; i < kHops; ++i) {
    const bool last = i + 1 == kHops;
    stamp(a, i, 'A');
    post_write(a, b, 10 + i, 256 + 8 * i, 8, last);
    ASSERT_TRUE(wait_for(b, a, i, 'A')) << "hop " << i;
    stamp(b, i, 'B');
    post_write(b, a, 100 + i, 256 + 8 * i, 8, last);
    ASSERT_TRUE(wait_for(a, b, i, 'B')) << "hop " << i;
  }
  auto wa = drive_until_completion(a, b);
  ASSERT_TRUE(wa.has_value());
  EXPECT_EQ(wa->wr_id, 10 + kHops - 1);
  EXPECT_EQ(wa->status, WcStatus::kSuccess);
  auto wb = drive_until_completion(b, a);
  ASSERT_TRUE(wb.has_value());
  EXPECT_EQ(wb->wr_id, 100 + kHops - 1);
  EXPECT_EQ(wb->status, WcStatus::kSuccess);
  for (Side* s : {&a, &b}) {  // nothing else completes, and nothing is left to send
    Wc wc;
    auto n = s->dev->lock()->poll_cq(s->cq, std::span(&wc, 1));
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(n.value(), 0u);
  }
}

TEST_F(AckHold, DeferringIsSwitchedOffByTheOptions) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a;
  SideOptions ao;
  ao.device.acks.defer = false;  // UROCE_DEFER_ACKS=0
  make_side(a, a_ip, ao);
  const Instant t = UdpDevice::now();
  EXPECT_EQ(AckPolicy(a.dev->ack_policy()).mode(t), AckMode::kHold);  // held, never deferred
  Side b;
  SideOptions bo;
  bo.device.acks.defer = true;
  bo.device.acks.hold = false;  // UROCE_HOLD_ACKS=0
  make_side(b, b_ip, bo);
  EXPECT_EQ(AckPolicy(b.dev->ack_policy()).mode(t), AckMode::kSend);  // nothing is held or deferred
}

TEST_F(AckHold, ARoundSendsWhatWasPostedBeforeItReadsTheSocket) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  // A ping-pong's answer is posted right after the question arrives; the next round must send
  // it before it reads the socket (a system call even when that finds nothing), not after.
  const std::string cap = capture_path("tx-first");
  Side a, b;
  SideOptions bo;
  bo.capture = cap;
  pingpong_pair(a, b, a_ip, b_ip, bo);
  // A's WRITE waits in B's socket; B's application posts a WRITE of its own and runs a round.
  post_write(a, b, 2, 64, 8);
  a.dev->progress();
  const std::uint64_t b_rx = b.dev->engine().counters().rx_packets;
  const std::uint64_t b_tx = b.dev->engine().counters().tx_packets;
  post_write(b, a, 3, 128, 8);
  b.dev->progress();
  EXPECT_EQ(b.dev->engine().counters().rx_packets, b_rx + 1);  // the round read A's WRITE
  EXPECT_GE(b.dev->engine().counters().tx_packets, b_tx + 1);  // and sent B's
  auto wa = drive_until_completion(a, b);
  ASSERT_TRUE(wa.has_value());
  EXPECT_EQ(wa->status, WcStatus::kSuccess);
  auto wb = drive_until_completion(b, a);
  ASSERT_TRUE(wb.has_value());
  EXPECT_EQ(wb->status, WcStatus::kSuccess);

  b.dev->close();
  const auto frames = frames_in(cap);
  std::filesystem::remove(cap);
  // In B's capture: pingpong_pair's WRITE and A's ACK of it; then B's answer, sent before the
  // round took A's second WRITE from the socket.
  const auto write_only = static_cast<std::uint8_t>(wire::Opcode::kRcRdmaWriteOnly);
  ASSERT_GE(frames.size(), 4u);
  EXPECT_EQ(frames[2], std::make_pair(b.ip, write_only));
  EXPECT_EQ(frames[3], std::make_pair(a.ip, write_only));
}

TEST_F(AckHold, HeldAckLeavesOnItsOwnWhenNoRequestComes) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  pingpong_pair(a, b, a_ip, b_ip);
  const std::uint64_t held = b.dev->engine().counters().tx_acks_held;
  // B never posts again; it only keeps progressing (polling mode): A's WRITE still completes.
  post_write(a, b, 2, 64, 8);
  auto wa = drive_until_completion(a, b);
  ASSERT_TRUE(wa.has_value());
  EXPECT_EQ(wa->status, WcStatus::kSuccess);
  EXPECT_GT(b.dev->engine().counters().tx_acks_held, held);
}

// What a QP learns when its held ACK leaves alone (transport's Qp::note_ack_held; the audit and
// the progress simulator test the rule itself), through the engine and real sockets: B, one side
// of a ping-pong, holds the ACK of A's WRITE and never answers it, so the ACK leaves alone; the
// ACK of A's next WRITE is not held at all; once B answers a WRITE with a request of its own,
// the next WRITE's ACK is held again. Every WRITE completes.
TEST_F(AckHold, AWriteNobodyAnsweredIsNotHeldTheNextTime) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  pingpong_pair(a, b, a_ip, b_ip);
  const std::uint64_t held = b.dev->engine().counters().tx_acks_held;
  auto a_writes = [&](std::uint64_t id) {
    post_write(a, b, id, 64, 8);
    auto wa = drive_until_completion(a, b);
    ASSERT_TRUE(wa.has_value());
    EXPECT_EQ(wa->status, WcStatus::kSuccess);
  };
  // (Relative counts: a machine stalled past A's ACK timeout would add a retransmission.)
  a_writes(2);
  const std::uint64_t held2 = b.dev->engine().counters().tx_acks_held;
  auto unanswered = [&] {
    return named_counter(b.dev->stats().device_counters(), "tx_acks_held_unanswered");
  };
  const std::uint64_t unanswered2 = unanswered();
  EXPECT_GT(held2, held);
  EXPECT_GE(unanswered2, 1u);
  a_writes(3);
  EXPECT_EQ(b.dev->engine().counters().tx_acks_held, held2);  // it left at once
  EXPECT_EQ(unanswered(), unanswered2);
  // B answers: a WRITE of its own before A's next request.
  post_write(b, a, 4, 128, 8);
  ASSERT_TRUE(drive_until_completion(b, a).has_value());
  a_writes(5);
  EXPECT_GT(b.dev->engine().counters().tx_acks_held, held2);
}

TEST_F(AckHold, RoundsWithNothingNewLeaveAHeldAckAlone) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  pingpong_pair(a, b, a_ip, b_ip);
  post_write(a, b, 2, 64, 8);
  a.dev->progress();  // A's WRITE is in B's socket when this returns (loopback)
  const std::uint64_t rx = b.dev->engine().counters().rx_packets;
  ASSERT_TRUE(receive_until(b, rx + 1));
  const std::uint64_t held = b.dev->engine().counters().tx_acks_held;
  // Rounds that receive nothing and have nothing new to send do not flush again: doing so
  // would only set the same ACK aside once more, and they are the polling loop of every
  // ping-pong (issue 14). Whether the hold is still on (nothing happens) or has ended (the
  // ACK leaves, unheld), no round holds it again.
  for (int i = 0; i < 5; ++i) b.dev->progress();
  EXPECT_EQ(b.dev->engine().counters().tx_acks_held, held);
  EXPECT_EQ(b.dev->engine().counters().rx_packets, rx + 1);
  // And it does leave: A's WRITE completes without B posting anything.
  auto wa = drive_until_completion(a, b);
  ASSERT_TRUE(wa.has_value());
  EXPECT_EQ(wa->status, WcStatus::kSuccess);
}

TEST_F(AckHold, ThreadSendsAHeldAckWhileTheApplicationDoesNothing) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  pingpong_pair(a, b, a_ip, b_ip);
  ASSERT_EQ(b.dev->start_progress_thread(), "");
  // B's application posts nothing and runs no round: its thread receives A's WRITE, holds the
  // ACK for the request that never comes, and sends it when due.
  post_write(a, b, 2, 64, 8);
  const std::optional<Wc> wa = progress_until_completion(a);
  ASSERT_TRUE(wa.has_value());
  EXPECT_EQ(wa->status, WcStatus::kSuccess);
  b.dev->stop_progress_thread();
  EXPECT_GT(b.dev->engine().counters().tx_acks_held, 0u);
}

TEST_F(AckHold, ThreadSendsAnAckTheApplicationsRoundHeld) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  pingpong_pair(a, b, a_ip, b_ip);
  // A's WRITE waits in B's socket before B's thread starts; B's application then runs one
  // round itself (as ibv_poll_cq does), which receives the WRITE and holds the ACK, and
  // stops: the thread must send the ACK.
  const std::uint64_t rx = b.dev->engine().counters().rx_packets;
  post_write(a, b, 2, 64, 8);
  a.dev->progress();
  ASSERT_EQ(b.dev->start_progress_thread(), "");
  const Instant give_up = UdpDevice::now() + kGiveUp;
  for (bool got = false; !got && UdpDevice::now() < give_up;) {
    b.dev->progress();
    auto guard = b.dev->lock();  // the thread runs: read the counters under the lock
    got = b.dev->engine().counters().rx_packets > rx;
  }
  const std::optional<Wc> wa = progress_until_completion(a);
  ASSERT_TRUE(wa.has_value());
  EXPECT_EQ(wa->status, WcStatus::kSuccess);
}

TEST_F(AckHold, DestroyingTheQpSendsItsHeldAck) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  pingpong_pair(a, b, a_ip, b_ip);
  // B receives A's last WRITE, holds the ACK, and destroys its QP at once (ibv_rc_pingpong's
  // last exchange): the ACK must still leave, or A retries until its WR fails (RETRY_EXC_ERR).
  const std::uint64_t b_rx = b.dev->engine().counters().rx_packets;
  const std::uint64_t b_tx = b.dev->engine().counters().tx_packets;
  post_write(a, b, 2, 64, 8);
  a.dev->progress();
  ASSERT_TRUE(receive_until(b, b_rx + 1));
  ASSERT_EQ(b.dev->engine().counters().tx_packets, b_tx);  // held
  ASSERT_EQ(b.dev->device().destroy_qp(b.qp), Errc::kOk);
  EXPECT_EQ(b.dev->engine().counters().tx_packets, b_tx + 1);
  const std::optional<Wc> wa = progress_until_completion(a);
  ASSERT_TRUE(wa.has_value());
  EXPECT_EQ(wa->status, WcStatus::kSuccess);
}

TEST_F(AckHold, ResponderOnlyQpNeverHoldsAnAck) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  make_side(a, a_ip);
  make_side(b, b_ip);
  pair_up(a, b);
  // B has never sent a request: every ACK it owes goes at once (a bandwidth test's target).
  for (std::uint64_t i = 0; i < 8; ++i) {
    post_write(a, b, i, 64 * i, 64);
    ASSERT_TRUE(drive_until_completion(a, b).has_value());
  }
  EXPECT_EQ(b.dev->engine().counters().tx_acks_held, 0u);
}

TEST_F(AckHold, SwitchedOffByTheOptions) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  SideOptions o;
  o.device.acks.hold = false;  // UROCE_HOLD_ACKS=0
  make_side(a, a_ip, o);
  make_side(b, b_ip, o);
  pair_up(a, b);
  post_write(b, a, 1, 0, 8);
  ASSERT_TRUE(drive_until_completion(b, a).has_value());
  const std::uint64_t b_tx = b.dev->engine().counters().tx_packets;
  const std::uint64_t b_rx = b.dev->engine().counters().rx_packets;
  post_write(a, b, 2, 64, 8);
  a.dev->progress();
  ASSERT_TRUE(receive_until(b, b_rx + 1));
  EXPECT_EQ(b.dev->engine().counters().tx_packets, b_tx + 1);  // the ACK left at once
  EXPECT_EQ(b.dev->engine().counters().tx_acks_held, 0u);
}

}  // namespace
}  // namespace uroce::engine

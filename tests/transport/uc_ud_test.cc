// UC and UD end to end (two QPs back to back) and the UD receive side fed crafted datagrams:
// UC drops a message with a lost packet whole and keeps its receive WQE for the next one, and
// its sender completes without ACKs; UD puts the GRH area in front of the payload, checks the
// Q_Key and needs a receive WQE per datagram.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "wire/opcode.h"
#include "wire/packet.h"

namespace uroce::test {
namespace {

using transport::SendRequest;
using wire::Opcode;

SendRequest send_req(std::uint64_t id, WrOpcode op, const Sge& s,
                     std::uint32_t flags = kSendSignaled) {
  SendRequest r;
  r.wr_id = id;
  r.opcode = op;
  r.send_flags = flags;
  r.sges = std::span<const Sge>(&s, 1);
  return r;
}

std::vector<std::uint64_t> wr_ids(const CqCollector& cq) {
  std::vector<std::uint64_t> out;
  for (const Wc& wc : cq.wcs) out.push_back(wc.wr_id);
  return out;
}

std::vector<std::string> statuses(const CqCollector& cq) {
  std::vector<std::string> out;
  for (const Wc& wc : cq.wcs) out.push_back(wc_status_name(wc.status));
  return out;
}

std::vector<std::string> all_success(std::size_t n) {
  return std::vector<std::string>(n, wc_status_name(WcStatus::kSuccess));
}

// ---- UC ---------------------------------------------------------------------------------------

TEST(UcPair, SendWriteAndWriteWithImmediate) {
  Pair p(QpType::kUc, 1024);
  p.connect();
  fill(p.a, 0, 10000, 1);
  const Sge r1 = sge(p.b, 100000, 4000);
  const Sge r2 = sge(p.b, 200000, 4000);
  ASSERT_EQ(p.b.qp->post_recv(1, std::span(&r1, 1)), Errc::kOk);
  ASSERT_EQ(p.b.qp->post_recv(2, std::span(&r2, 1)), Errc::kOk);

  const Sge s1 = sge(p.a, 0, 3000);
  ASSERT_EQ(p.a.qp->post_send(send_req(10, WrOpcode::kSend, s1)), Errc::kOk);
  const Sge s2 = sge(p.a, 3000, 5000);
  SendRequest w = send_req(11, WrOpcode::kRdmaWrite, s2);
  w.remote_addr = p.b.addr() + 300000;
  w.rkey = p.b.key;
  ASSERT_EQ(p.a.qp->post_send(w), Errc::kOk);
  const Sge s3 = sge(p.a, 8000, 2000);
  w = send_req(12, WrOpcode::kRdmaWriteWithImm, s3, kSendSignaled | kSendSolicited);
  w.remote_addr = p.b.addr() + 400000;
  w.rkey = p.b.key;
  w.imm_data = 0xdeadbeef;
  ASSERT_EQ(p.a.qp->post_send(w), Errc::kOk);
  p.run();

  EXPECT_EQ(p.frames_sent, 3u + 5u + 2u);  // no ACKs
  EXPECT_EQ(wr_ids(p.a.scq), (std::vector<std::uint64_t>{10, 11, 12}));
  EXPECT_EQ(statuses(p.a.scq), all_success(3));
  ASSERT_EQ(p.b.rcq.wcs.size(), 2u);
  const Wc& recv = p.b.rcq.wcs[0];
  EXPECT_EQ(recv.wr_id, 1u);
  EXPECT_EQ(recv.status, WcStatus::kSuccess);
  EXPECT_EQ(recv.opcode, WcOpcode::kRecv);
  EXPECT_EQ(recv.byte_len, 3000u);
  EXPECT_EQ(recv.wc_flags, 0u);
  EXPECT_EQ(recv.qp_num, 0x12u);
  EXPECT_EQ(recv.src_qp, 0x11u);
  EXPECT_FALSE(p.b.rcq.solicited_flags[0]);
  const Wc& imm = p.b.rcq.wcs[1];
  EXPECT_EQ(imm.wr_id, 2u);
  EXPECT_EQ(imm.status, WcStatus::kSuccess);
  EXPECT_EQ(imm.opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(imm.byte_len, 2000u);
  EXPECT_EQ(imm.imm_data, 0xdeadbeefu);
  EXPECT_EQ(imm.wc_flags, static_cast<std::uint32_t>(kWcWithImm));
  EXPECT_TRUE(p.b.rcq.solicited_flags[1]);
  EXPECT_EQ(slice(p.b, 100000, 3000), slice(p.a, 0, 3000));
  EXPECT_EQ(slice(p.b, 300000, 5000), slice(p.a, 3000, 5000));
  EXPECT_EQ(slice(p.b, 400000, 2000), slice(p.a, 8000, 2000));
  EXPECT_EQ(p.b.qp->counters().dropped, 0u);
  EXPECT_TRUE(p.a.rcq.wcs.empty());
}

TEST(UcPair, SendWithImmediate) {
  Pair p(QpType::kUc, 256);
  p.connect();
  fill(p.a, 0, 600, 2);
  const Sge r = sge(p.b, 0, 1000);
  ASSERT_EQ(p.b.qp->post_recv(1, std::span(&r, 1)), Errc::kOk);
  const Sge s = sge(p.a, 0, 600);
  SendRequest w = send_req(5, WrOpcode::kSendWithImm, s);
  w.imm_data = 0x01020304;
  ASSERT_EQ(p.a.qp->post_send(w), Errc::kOk);
  p.run();
  ASSERT_EQ(p.b.rcq.wcs.size(), 1u);
  EXPECT_EQ(p.b.rcq.wcs[0].byte_len, 600u);
  EXPECT_EQ(p.b.rcq.wcs[0].imm_data, 0x01020304u);
  EXPECT_EQ(p.b.rcq.wcs[0].wc_flags, static_cast<std::uint32_t>(kWcWithImm));
  EXPECT_EQ(p.b.rcq.wcs[0].opcode, WcOpcode::kRecv);
  EXPECT_EQ(slice(p.b, 0, 600), slice(p.a, 0, 600));
  EXPECT_EQ(statuses(p.a.scq), all_success(1));
}

// Message 1 (SEND, 4 packets) loses one packet; messages 2 (SEND, 2 packets) and 3 (SEND, 1
// packet) arrive whole. The receiver drops message 1 whole, without a completion, and gives its
// receive WQE to message 2; the sender, which has no ACKs, completes all three successfully.
TEST(UcPair, MessageWithALostPacketIsDroppedWholeAndItsReceiveWqeReused) {
  for (int lost : {0, 1, 2, 3}) {
    SCOPED_TRACE("lost packet " + std::to_string(lost) + " of message 1");
    Pair p(QpType::kUc, 256);
    p.connect();
    int from_a = 0;
    p.drop = [&](int from, const std::vector<std::byte>&) { return from == 0 && from_a++ == lost; };
    fill(p.a, 0, 2000, 3);
    std::array<Sge, 3> rs = {sge(p.b, 10000, 2048), sge(p.b, 20000, 2048), sge(p.b, 30000, 2048)};
    for (std::uint64_t i = 0; i < 3; ++i) {
      ASSERT_EQ(p.b.qp->post_recv(i + 1, std::span(&rs[i], 1)), Errc::kOk);
    }
    const Sge m1 = sge(p.a, 0, 1000);
    const Sge m2 = sge(p.a, 1000, 300);
    const Sge m3 = sge(p.a, 1300, 100);
    ASSERT_EQ(p.a.qp->post_send(send_req(11, WrOpcode::kSend, m1)), Errc::kOk);
    ASSERT_EQ(p.a.qp->post_send(send_req(12, WrOpcode::kSend, m2)), Errc::kOk);
    ASSERT_EQ(p.a.qp->post_send(send_req(13, WrOpcode::kSend, m3)), Errc::kOk);
    p.run();

    EXPECT_EQ(p.frames_sent, 7u);
    EXPECT_EQ(wr_ids(p.a.scq), (std::vector<std::uint64_t>{11, 12, 13}));
    EXPECT_EQ(statuses(p.a.scq), all_success(3));
    EXPECT_EQ(p.a.qp->counters().retransmitted_packets, 0u);
    // Message 2 in the first receive WQE, message 3 in the second; the third is still posted.
    EXPECT_EQ(wr_ids(p.b.rcq), (std::vector<std::uint64_t>{1, 2}));
    EXPECT_EQ(statuses(p.b.rcq), all_success(2));
    ASSERT_EQ(p.b.rcq.wcs.size(), 2u);
    EXPECT_EQ(p.b.rcq.wcs[0].byte_len, 300u);
    EXPECT_EQ(p.b.rcq.wcs[1].byte_len, 100u);
    EXPECT_EQ(slice(p.b, 10000, 300), slice(p.a, 1000, 300));
    EXPECT_EQ(slice(p.b, 20000, 100), slice(p.a, 1300, 100));
    EXPECT_EQ(p.b.rq->size(), 1u);
    EXPECT_GE(p.b.qp->counters().out_of_sequence, 1u);
    EXPECT_EQ(p.b.qp->state(), QpState::kRts);
  }
}

TEST(UcPair, WriteWithImmediateWithALostPacketCompletesNothingAtTheReceiver) {
  Pair p(QpType::kUc, 256);
  p.connect();
  int from_a = 0;
  p.drop = [&](int from, const std::vector<std::byte>&) { return from == 0 && from_a++ == 1; };
  fill(p.a, 0, 2000, 4);
  const Sge r = sge(p.b, 0, 64);
  ASSERT_EQ(p.b.qp->post_recv(1, std::span(&r, 1)), Errc::kOk);
  const Sge s1 = sge(p.a, 0, 700);  // 3 packets, the Middle lost
  SendRequest w = send_req(1, WrOpcode::kRdmaWriteWithImm, s1);
  w.remote_addr = p.b.addr() + 100000;
  w.rkey = p.b.key;
  w.imm_data = 1;
  ASSERT_EQ(p.a.qp->post_send(w), Errc::kOk);
  const Sge s2 = sge(p.a, 1000, 500);
  w = send_req(2, WrOpcode::kRdmaWriteWithImm, s2);
  w.remote_addr = p.b.addr() + 200000;
  w.rkey = p.b.key;
  w.imm_data = 2;
  ASSERT_EQ(p.a.qp->post_send(w), Errc::kOk);
  p.run();
  EXPECT_EQ(statuses(p.a.scq), all_success(2));
  ASSERT_EQ(p.b.rcq.wcs.size(), 1u);
  EXPECT_EQ(p.b.rcq.wcs[0].wr_id, 1u);
  EXPECT_EQ(p.b.rcq.wcs[0].imm_data, 2u);
  EXPECT_EQ(p.b.rcq.wcs[0].byte_len, 500u);
  EXPECT_EQ(p.b.rcq.wcs[0].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(slice(p.b, 200000, 500), slice(p.a, 1000, 500));
  // The Last after the gap was not written either.
  EXPECT_EQ(slice(p.b, 100000 + 512, 188), std::vector<std::byte>(188));
}

TEST(UcPair, SendWithoutAReceiveWqeIsDroppedSilently) {
  Pair p(QpType::kUc, 1024);
  p.connect();
  fill(p.a, 0, 100, 5);
  const Sge s = sge(p.a, 0, 100);
  ASSERT_EQ(p.a.qp->post_send(send_req(1, WrOpcode::kSend, s)), Errc::kOk);
  p.run();
  EXPECT_EQ(statuses(p.a.scq), all_success(1));
  EXPECT_TRUE(p.b.rcq.wcs.empty());
  EXPECT_EQ(p.b.qp->counters().dropped, 1u);
  EXPECT_EQ(p.b.qp->counters().rnr_naks_sent, 0u);
  EXPECT_EQ(p.frames_sent, 1u);  // UC sends no RNR NAK
  EXPECT_EQ(p.b.qp->state(), QpState::kRts);
  const Sge r = sge(p.b, 0, 100);
  ASSERT_EQ(p.b.qp->post_recv(9, std::span(&r, 1)), Errc::kOk);
  ASSERT_EQ(p.a.qp->post_send(send_req(2, WrOpcode::kSend, s)), Errc::kOk);
  p.run();
  EXPECT_EQ(wr_ids(p.b.rcq), (std::vector<std::uint64_t>{9}));
  EXPECT_EQ(slice(p.b, 0, 100), slice(p.a, 0, 100));
}

TEST(UcPair, MessageLongerThanTheReceiveBufferIsDroppedAndTheWqeKept) {
  Pair p(QpType::kUc, 256);
  p.connect();
  fill(p.a, 0, 1000, 6);
  const Sge r = sge(p.b, 0, 400);
  ASSERT_EQ(p.b.qp->post_recv(1, std::span(&r, 1)), Errc::kOk);
  const Sge big = sge(p.a, 0, 600);  // its third packet overflows the buffer
  const Sge small = sge(p.a, 600, 300);
  ASSERT_EQ(p.a.qp->post_send(send_req(1, WrOpcode::kSend, big)), Errc::kOk);
  ASSERT_EQ(p.a.qp->post_send(send_req(2, WrOpcode::kSend, small)), Errc::kOk);
  p.run();
  EXPECT_EQ(statuses(p.a.scq), all_success(2));
  EXPECT_EQ(wr_ids(p.b.rcq), (std::vector<std::uint64_t>{1}));
  ASSERT_EQ(p.b.rcq.wcs.size(), 1u);
  EXPECT_EQ(p.b.rcq.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(p.b.rcq.wcs[0].byte_len, 300u);
  EXPECT_EQ(slice(p.b, 0, 300), slice(p.a, 600, 300));
  EXPECT_EQ(p.b.qp->state(), QpState::kRts);
}

TEST(UcPair, ManyMessagesUnderSeededLoss) {
  // Every WQE completes at the sender; at the receiver, each completion is a whole message with
  // the right bytes, in order, and never a partial one.
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Pair p(QpType::kUc, 256);
    p.connect();
    p.rng = Prng(seed);
    p.faults.loss = 100;
    constexpr int kMessages = 40;
    std::vector<Sge> rs;
    rs.reserve(kMessages);
    for (int i = 0; i < kMessages; ++i) {
      rs.push_back(sge(p.b, 100000 + static_cast<std::size_t>(i) * 2048, 2048));
      ASSERT_EQ(p.b.qp->post_recv(static_cast<std::uint64_t>(i), std::span(&rs.back(), 1)),
                Errc::kOk);
    }
    std::vector<Sge> ss;
    ss.reserve(kMessages);
    for (int i = 0; i < kMessages; ++i) {
      const std::uint32_t len = 1 + static_cast<std::uint32_t>((seed * 97 + i * 331) % 1200);
      fill(p.a, static_cast<std::size_t>(i) * 2048, len, static_cast<std::uint8_t>(i));
      ss.push_back(sge(p.a, static_cast<std::size_t>(i) * 2048, len));
      SendRequest w = send_req(static_cast<std::uint64_t>(i), WrOpcode::kSendWithImm, ss.back());
      w.imm_data = static_cast<std::uint32_t>(i);  // which message landed
      ASSERT_EQ(p.a.qp->post_send(w), Errc::kOk);
      p.run();  // one message at a time, so that losses hit different messages
    }
    EXPECT_EQ(statuses(p.a.scq), all_success(kMessages));
    ASSERT_LT(p.b.rcq.wcs.size(), static_cast<std::size_t>(kMessages));  // the loss hit some
    ASSERT_GT(p.b.rcq.wcs.size(), 0u);
    std::uint32_t last = 0;
    for (std::size_t k = 0; k < p.b.rcq.wcs.size(); ++k) {
      const Wc& wc = p.b.rcq.wcs[k];
      ASSERT_EQ(wc.status, WcStatus::kSuccess);
      EXPECT_EQ(wc.wr_id, k);  // receive WQEs are used in order, none lost
      const std::uint32_t m = wc.imm_data;
      if (k > 0) {
        EXPECT_GT(m, last);
      }
      last = m;
      EXPECT_EQ(wc.byte_len, ss[m].length);
      EXPECT_EQ(slice(p.b, 100000 + k * 2048, ss[m].length),
                slice(p.a, static_cast<std::size_t>(m) * 2048, ss[m].length));
    }
  }
}

// ---- UD ---------------------------------------------------------------------------------------

struct UdPair {
  UdPair() : p(QpType::kUd) {
    p.connect();
    p.capture = true;
    to_b.dst = p.b.ip;
    fill(p.a, 0, 8192, 9);
  }
  // A datagram of `len` bytes from a's buffer at `off` to b's QP.
  Errc send(std::uint64_t id, std::size_t off, std::uint32_t len, std::uint32_t qkey = 0x11111111,
            WrOpcode op = WrOpcode::kSend, std::uint32_t flags = kSendSignaled) {
    s = sge(p.a, off, len);
    SendRequest r = send_req(id, op, s, flags);
    r.ud_av = &to_b;
    r.remote_qpn = p.b.qp->qpn();
    r.remote_qkey = qkey;
    r.imm_data = 0x0badcafe;
    return p.a.qp->post_send(r);
  }
  Errc recv(std::uint64_t id, std::size_t off, std::uint32_t len) {
    r = sge(p.b, off, len);
    return p.b.qp->post_recv(id, std::span(&r, 1));
  }
  void set_qkey(Endpoint& e, std::uint32_t qkey) {
    QpAttr attr;
    attr.qkey = qkey;
    e.qp->modify(attr, kQpQkey, e.qp->path());
  }
  Pair p;
  transport::AddressVector to_b;
  Sge s, r;
};

TEST(UdPair, ReceiveBufferStartsWithTheGrhArea) {
  UdPair u;
  ASSERT_EQ(u.recv(7, 1000, transport::kGrhBytes + 100), Errc::kOk);
  std::fill(u.p.b.buf.begin() + 1000, u.p.b.buf.begin() + 1140, std::byte{0xee});
  ASSERT_EQ(u.send(1, 0, 100), Errc::kOk);
  u.p.run();
  EXPECT_EQ(statuses(u.p.a.scq), all_success(1));
  ASSERT_EQ(u.p.b.rcq.wcs.size(), 1u);
  const Wc& wc = u.p.b.rcq.wcs[0];
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(wc.opcode, WcOpcode::kRecv);
  EXPECT_EQ(wc.byte_len, 140u);  // payload + 40
  EXPECT_EQ(wc.wc_flags, static_cast<std::uint32_t>(kWcGrh));
  EXPECT_EQ(wc.src_qp, 0x11u);
  EXPECT_EQ(wc.qp_num, 0x12u);
  EXPECT_EQ(wc.network_hdr, NetworkHdr::kIpv4);  // what the GRH area holds (the drop-in's sl)
  EXPECT_EQ(u.p.a.scq.wcs[0].network_hdr, NetworkHdr::kNone);  // a send completion: none
  // RoCEv2 over IPv4 (rxe): 20 zero bytes, then the IPv4 header as received.
  ASSERT_EQ(u.p.captured.size(), 1u);
  const std::vector<std::byte>& frame = u.p.captured[0];
  const std::vector<std::byte> ipv4(frame.begin() + 14, frame.begin() + 34);
  EXPECT_EQ(ipv4[0], std::byte{0x45});
  EXPECT_EQ(slice(u.p.b, 1000, 20), std::vector<std::byte>(20));
  EXPECT_EQ(slice(u.p.b, 1020, 20), ipv4);
  EXPECT_EQ(slice(u.p.b, 1040, 100), slice(u.p.a, 0, 100));
  // The source address a reply would use (ibv_init_ah_from_wc) is in the GRH area.
  EXPECT_EQ(slice(u.p.b, 1020 + 12, 4),
            (std::vector<std::byte>{std::byte{10}, std::byte{0}, std::byte{0}, std::byte{1}}));
}

TEST(UdPair, GrhAreaAndPayloadSpanReceiveSges) {
  UdPair u;
  const std::array<Sge, 3> rs = {sge(u.p.b, 5000, 30), sge(u.p.b, 6000, 50), sge(u.p.b, 7000, 100)};
  ASSERT_EQ(u.p.b.qp->post_recv(3, rs), Errc::kOk);
  ASSERT_EQ(u.send(1, 100, 120), Errc::kOk);
  u.p.run();
  ASSERT_EQ(u.p.b.rcq.wcs.size(), 1u);
  EXPECT_EQ(u.p.b.rcq.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(u.p.b.rcq.wcs[0].byte_len, 160u);
  const std::vector<std::byte>& frame = u.p.captured.at(0);
  std::vector<std::byte> expect(20);
  expect.insert(expect.end(), frame.begin() + 14, frame.begin() + 34);
  const auto payload = slice(u.p.a, 100, 120);
  expect.insert(expect.end(), payload.begin(), payload.end());
  std::vector<std::byte> got = slice(u.p.b, 5000, 30);
  for (auto b : slice(u.p.b, 6000, 50)) got.push_back(b);
  for (auto b : slice(u.p.b, 7000, 80)) got.push_back(b);
  EXPECT_EQ(got, expect);
  EXPECT_EQ(u.p.b.buf[7080], std::byte{0});
}

TEST(UdPair, ImmediateAndSolicited) {
  UdPair u;
  ASSERT_EQ(u.recv(1, 0, 200), Errc::kOk);
  ASSERT_EQ(u.send(1, 0, 60, 0x11111111, WrOpcode::kSendWithImm, kSendSignaled | kSendSolicited),
            Errc::kOk);
  u.p.run();
  ASSERT_EQ(u.p.b.rcq.wcs.size(), 1u);
  EXPECT_EQ(u.p.b.rcq.wcs[0].wc_flags, static_cast<std::uint32_t>(kWcGrh | kWcWithImm));
  EXPECT_EQ(u.p.b.rcq.wcs[0].imm_data, 0x0badcafeu);
  EXPECT_EQ(u.p.b.rcq.wcs[0].byte_len, 100u);
  EXPECT_TRUE(u.p.b.rcq.solicited_flags[0]);
}

TEST(UdPair, QkeyMismatchIsDroppedAndKeepsTheReceiveWqe) {
  UdPair u;
  ASSERT_EQ(u.recv(1, 0, 200), Errc::kOk);
  ASSERT_EQ(u.send(1, 0, 10, 0x22222222), Errc::kOk);
  u.p.run();
  EXPECT_EQ(statuses(u.p.a.scq), all_success(1));  // UD: the sender never knows
  EXPECT_TRUE(u.p.b.rcq.wcs.empty());
  EXPECT_EQ(u.p.b.qp->counters().qkey_violations, 1u);
  EXPECT_EQ(u.p.b.rq->size(), 1u);
  EXPECT_EQ(u.p.b.qp->state(), QpState::kRts);
  ASSERT_EQ(u.send(2, 0, 10), Errc::kOk);
  u.p.run();
  EXPECT_EQ(wr_ids(u.p.b.rcq), (std::vector<std::uint64_t>{1}));
  EXPECT_EQ(u.p.b.qp->counters().qkey_violations, 1u);
}

TEST(UdPair, NoReceiveWqeDropsTheDatagram) {
  UdPair u;
  ASSERT_EQ(u.send(1, 0, 10), Errc::kOk);
  u.p.run();
  EXPECT_EQ(statuses(u.p.a.scq), all_success(1));
  EXPECT_TRUE(u.p.b.rcq.wcs.empty());
  EXPECT_EQ(u.p.b.qp->counters().ud_no_wqe_drops, 1u);
  EXPECT_EQ(u.p.frames_sent, 1u);  // no RNR NAK
  EXPECT_EQ(u.p.b.qp->state(), QpState::kRts);
  ASSERT_EQ(u.recv(4, 0, 100), Errc::kOk);
  ASSERT_EQ(u.send(2, 0, 10), Errc::kOk);
  u.p.run();
  EXPECT_EQ(wr_ids(u.p.b.rcq), (std::vector<std::uint64_t>{4}));
  EXPECT_EQ(u.p.b.qp->counters().ud_no_wqe_drops, 1u);
}

TEST(UdPair, RemoteQkeyWithTheHighBitSetUsesTheSendersOwnQkey) {
  UdPair u;
  u.set_qkey(u.p.a, 0x33333333);  // b keeps 0x11111111
  ASSERT_EQ(u.recv(1, 0, 200), Errc::kOk);
  ASSERT_EQ(u.send(1, 0, 10, 0x80000000), Errc::kOk);
  u.p.run();
  EXPECT_TRUE(u.p.b.rcq.wcs.empty());
  EXPECT_EQ(u.p.b.qp->counters().qkey_violations, 1u);
  u.set_qkey(u.p.b, 0x33333333);
  const Sge r2 = sge(u.p.b, 1000, 200);
  ASSERT_EQ(u.p.b.qp->post_recv(2, std::span(&r2, 1)), Errc::kOk);
  ASSERT_EQ(u.send(2, 0, 10, 0x80000000), Errc::kOk);
  ASSERT_EQ(u.send(3, 0, 10, 0x80001111), Errc::kOk);  // any value with the high bit
  u.p.run();
  EXPECT_EQ(wr_ids(u.p.b.rcq), (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(u.p.b.qp->counters().qkey_violations, 1u);
  EXPECT_EQ(statuses(u.p.a.scq), all_success(3));
}

TEST(UdPair, DatagramLargerThanTheReceiveBufferIsDroppedAndTheWqeWaits) {
  // rxe, IBTA class D: without an SRQ the datagram is dropped, no completion, the QP lives on
  // and the same receive WQE takes the next datagram that fits.
  UdPair u;
  ASSERT_EQ(u.recv(1, 0, transport::kGrhBytes + 50), Errc::kOk);
  ASSERT_EQ(u.send(1, 0, 51), Errc::kOk);
  u.p.run();
  EXPECT_TRUE(u.p.b.rcq.wcs.empty());
  EXPECT_EQ(u.p.b.qp->state(), QpState::kRts);
  EXPECT_EQ(u.p.b.qp->counters().dropped, 1u);
  ASSERT_EQ(u.send(2, 0, 50), Errc::kOk);
  u.p.run();
  ASSERT_EQ(u.p.b.rcq.wcs.size(), 1u);
  EXPECT_EQ(u.p.b.rcq.wcs[0].wr_id, 1u);
  EXPECT_EQ(u.p.b.rcq.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(u.p.b.rcq.wcs[0].byte_len, transport::kGrhBytes + 50);
  EXPECT_EQ(statuses(u.p.a.scq), all_success(2));
}

TEST(UdPair, ExactlyFittingBufferAndEmptyDatagram) {
  UdPair u;
  ASSERT_EQ(u.recv(1, 0, transport::kGrhBytes + 50), Errc::kOk);
  ASSERT_EQ(u.recv(2, 1000, transport::kGrhBytes), Errc::kOk);
  ASSERT_EQ(u.send(1, 0, 50), Errc::kOk);
  ASSERT_EQ(u.send(2, 0, 0), Errc::kOk);
  u.p.run();
  EXPECT_EQ(statuses(u.p.b.rcq), all_success(2));
  ASSERT_EQ(u.p.b.rcq.wcs.size(), 2u);
  EXPECT_EQ(u.p.b.rcq.wcs[0].byte_len, 90u);
  EXPECT_EQ(u.p.b.rcq.wcs[1].byte_len, 40u);
}

TEST(UdPair, DatagramOfThePortMtu) {
  UdPair u;
  ASSERT_EQ(u.recv(1, 100000, transport::kGrhBytes + 4096), Errc::kOk);
  ASSERT_EQ(u.send(1, 0, 4096), Errc::kOk);
  u.p.run();
  ASSERT_EQ(u.p.b.rcq.wcs.size(), 1u);
  EXPECT_EQ(u.p.b.rcq.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(u.p.b.rcq.wcs[0].byte_len, 4136u);
  EXPECT_EQ(slice(u.p.b, 100040, 4096), slice(u.p.a, 0, 4096));
}

// The UD receive side fed crafted datagrams.
void feed_ud(Solo& s, std::uint32_t psn, std::uint32_t qkey, std::uint32_t src_qpn,
             ConstBytes payload) {
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(Opcode::kUdSendOnly);
  h.bth.psn = psn;
  h.deth = wire::Deth{qkey, src_qpn};
  s.feed(h, payload);
}

TEST(UdReceiver, SourceQpFromDethAndNoPsnChecks) {
  Solo s(QpType::kUd);
  std::array<Sge, 4> rs;
  for (std::uint64_t i = 0; i < 4; ++i) {
    rs[i] = sge(s.e, i * 1000, 200);
    ASSERT_EQ(s.e.qp->post_recv(i, std::span(&rs[i], 1)), Errc::kOk);
  }
  const auto data = pattern(16, 1);
  // UD has no PSN sequence: old, repeated and future PSNs are all delivered.
  feed_ud(s, 0x10, 0x11111111, 0x4567, data);
  feed_ud(s, 0x05, 0x11111111, 0x4568, data);
  feed_ud(s, 0x05, 0x11111111, 0xabcdef, data);
  feed_ud(s, 0x900000, 0x11111111, 0x1, data);
  ASSERT_EQ(s.e.rcq.wcs.size(), 4u);
  EXPECT_EQ(s.e.rcq.wcs[0].src_qp, 0x4567u);
  EXPECT_EQ(s.e.rcq.wcs[1].src_qp, 0x4568u);
  EXPECT_EQ(s.e.rcq.wcs[2].src_qp, 0xabcdefu);
  EXPECT_EQ(s.e.rcq.wcs[3].src_qp, 0x1u);
  EXPECT_EQ(statuses(s.e.rcq), all_success(4));
  for (const Wc& wc : s.e.rcq.wcs) EXPECT_EQ(wc.byte_len, 56u);
  EXPECT_EQ(slice(s.e, 3000 + 40, 16), data);
  EXPECT_TRUE(s.drain().empty());  // UD never answers
  EXPECT_EQ(s.e.qp->counters().out_of_sequence, 0u);
}

TEST(UdReceiver, ResponsesAndOtherTransportsAreDropped) {
  Solo s(QpType::kUd);
  const Sge r = sge(s.e, 0, 200);
  ASSERT_EQ(s.e.qp->post_recv(1, std::span(&r, 1)), Errc::kOk);
  const auto data = pattern(8, 1);
  s.feed(Opcode::kRcSendOnly, 0x5000, data);
  s.feed(Opcode::kUcSendOnly, 0x5000, data);
  wire::TransportHeaders ack;
  ack.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcAcknowledge);
  s.feed(ack);
  EXPECT_TRUE(s.e.rcq.wcs.empty());
  EXPECT_EQ(s.e.qp->counters().dropped, 3u);
  EXPECT_EQ(s.e.rq->size(), 1u);
}

TEST(UdReceiver, GrhAreaOfAnIpv6DatagramIsItsIpv6Header) {
  Solo s(QpType::kUd);
  const Sge r = sge(s.e, 0, 200);
  ASSERT_EQ(s.e.qp->post_recv(1, std::span(&r, 1)), Errc::kOk);
  wire::IpAddress src, dst;
  src.v6 = dst.v6 = true;
  for (std::uint8_t i = 0; i < 16; ++i) {
    src.bytes[i] = static_cast<std::uint8_t>(0x20 + i);
    dst.bytes[i] = static_cast<std::uint8_t>(0x40 + i);
  }
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(Opcode::kUdSendOnly);
  h.bth.dest_qpn = s.e.qp->qpn();
  h.deth = wire::Deth{0x11111111, 0x99};
  const auto data = pattern(24, 3);
  const auto frame = craft(src, dst, h, data);
  auto f = wire::parse_frame(wire::LinkType::kEthernet, frame);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(f->v6);
  transport::PacketInfo info;
  info.src = src;
  info.ip_header = f->ip_udp.first(40);
  s.e.qp->handle_packet(s.now, f->roce, info);
  ASSERT_EQ(s.e.rcq.wcs.size(), 1u);
  EXPECT_EQ(s.e.rcq.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(s.e.rcq.wcs[0].byte_len, 64u);
  EXPECT_EQ(s.e.rcq.wcs[0].network_hdr, NetworkHdr::kIpv6);
  const std::vector<std::byte> ipv6(frame.begin() + 14, frame.begin() + 54);
  EXPECT_EQ(ipv6[0] >> 4, std::byte{6});
  EXPECT_EQ(slice(s.e, 0, 40), ipv6);
  EXPECT_EQ(slice(s.e, 40, 24), data);
}

}  // namespace
}  // namespace uroce::test

// XRC through verbs: domains, XRC SRQs and their numbers, the two QP halves and what they may
// be given, and an initiator and a target of one device exchanging packets by hand.
#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "verbs/device_state.h"
#include "verbs_test_util.h"
#include "wire/builder.h"
#include "wire/packet.h"

namespace uroce {
namespace {

using testing::ah_to;
using testing::make_device;
using testing::test_config;

struct Xrc {
  Xrc() : dev(make_device()) {
    pd = *dev->alloc_pd();
    cq = dev->create_cq(CqInitAttr{63, 0, 0})->handle;
    xrcd = *dev->open_xrcd();
  }
  QpInfo send_qp() {
    QpInitAttr i;
    i.qp_type = QpType::kXrcSend;
    i.send_cq = cq;
    i.cap = QpCap{8, 0, 1, 0, 0};
    auto q = dev->create_qp(pd, i);
    EXPECT_TRUE(q.ok());
    return *q;
  }
  QpInfo recv_qp(XrcdHandle d) {
    QpInitAttr i;
    i.qp_type = QpType::kXrcRecv;
    i.xrcd = d;
    auto q = dev->create_qp(PdHandle{}, i);
    EXPECT_TRUE(q.ok());
    return *q;
  }
  std::unique_ptr<Device> dev;
  PdHandle pd;
  CqHandle cq;
  XrcdHandle xrcd;
};

TEST(Xrc, DomainsAndSrqsHoldTheirParents) {
  Xrc x;
  auto s1 = x.dev->create_xrc_srq(x.pd, x.xrcd, x.cq, SrqAttr{4, 1, 0});
  auto s2 = x.dev->create_xrc_srq(x.pd, x.xrcd, x.cq, SrqAttr{4, 1, 0});
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_NE(s1->srq_num, 0u);
  EXPECT_NE(s1->srq_num, s2->srq_num);
  EXPECT_LE(s1->srq_num, 0xffffffu);
  EXPECT_EQ(x.dev->create_xrc_srq(x.pd, XrcdHandle{}, x.cq, SrqAttr{4, 1, 0}).error(),
            Errc::kInvalidArgument);
  EXPECT_EQ(x.dev->create_xrc_srq(x.pd, x.xrcd, CqHandle{}, SrqAttr{4, 1, 0}).error(),
            Errc::kInvalidArgument);
  EXPECT_EQ(x.dev->close_xrcd(x.xrcd), Errc::kBusy);
  EXPECT_EQ(x.dev->destroy_cq(x.cq), Errc::kBusy);
  const QpInfo r = x.recv_qp(x.xrcd);
  EXPECT_EQ(x.dev->destroy_srq(s1->handle), Errc::kOk);
  EXPECT_EQ(x.dev->destroy_srq(s2->handle), Errc::kOk);
  EXPECT_EQ(x.dev->close_xrcd(x.xrcd), Errc::kBusy);  // the target QP is in it
  EXPECT_EQ(x.dev->destroy_qp(r.handle), Errc::kOk);
  EXPECT_EQ(x.dev->close_xrcd(x.xrcd), Errc::kOk);
  EXPECT_EQ(x.dev->close_xrcd(x.xrcd), Errc::kInvalidArgument);
}

TEST(Xrc, QpHalvesTakeWhatTheirSideNeeds) {
  Xrc x;
  QpInitAttr i;
  i.qp_type = QpType::kXrcRecv;  // no domain
  EXPECT_EQ(x.dev->create_qp(PdHandle{}, i).error(), Errc::kInvalidArgument);
  i.qp_type = QpType::kXrcSend;  // no PD and CQ
  EXPECT_EQ(x.dev->create_qp(PdHandle{}, i).error(), Errc::kInvalidArgument);
  const QpInfo s = x.send_qp();
  const QpInfo r = x.recv_qp(x.xrcd);
  // Neither has a receive queue; the target has no send queue.
  std::vector<std::byte> buf(64);
  const MrInfo mr = *x.dev->reg_mr(x.pd, buf.data(), buf.size(), kAccessLocalWrite);
  const Sge sge{reinterpret_cast<std::uint64_t>(buf.data()), 8, mr.lkey};
  RecvWr rwr;
  rwr.sg_list = std::span(&sge, 1);
  EXPECT_EQ(x.dev->post_recv(s.handle, std::span(&rwr, 1), nullptr), Errc::kInvalidArgument);
  EXPECT_EQ(x.dev->post_recv(r.handle, std::span(&rwr, 1), nullptr), Errc::kInvalidArgument);
  // An XRC SRQ is no basic SRQ for an RC QP.
  auto srq = x.dev->create_xrc_srq(x.pd, x.xrcd, x.cq, SrqAttr{4, 1, 0});
  QpInitAttr rc;
  rc.qp_type = QpType::kRc;
  rc.send_cq = x.cq;
  rc.recv_cq = x.cq;
  rc.srq = srq->handle;
  rc.cap = QpCap{4, 0, 1, 0, 0};
  EXPECT_EQ(x.dev->create_qp(x.pd, rc).error(), Errc::kInvalidArgument);
  // The kernel's state table for each half: a target needs no requester attributes at RTS.
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.port_num = 1;
  ASSERT_EQ(x.dev->modify_qp(r.handle, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags),
            Errc::kOk);
  a.qp_state = QpState::kRtr;
  a.ah_attr = ah_to(test_config().ip);
  a.path_mtu = Mtu::k1024;
  a.dest_qp_num = s.qp_num;
  ASSERT_EQ(x.dev->modify_qp(r.handle, a,
                             kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                 kQpMaxDestRdAtomic | kQpMinRnrTimer),
            Errc::kOk);
  a.qp_state = QpState::kRts;
  a.timeout = 14;
  EXPECT_EQ(x.dev->modify_qp(r.handle, a, kQpState | kQpTimeout | kQpSqPsn | kQpRetryCnt),
            Errc::kInvalidArgument);
  EXPECT_EQ(x.dev->modify_qp(r.handle, a, kQpState | kQpTimeout | kQpSqPsn), Errc::kOk);
}

// The packets `from` has to send now, each as the bytes parse_roce() takes.
std::vector<std::vector<std::byte>> take_packets(transport::Qp& from) {
  std::vector<std::vector<std::byte>> out;
  transport::TxPacket tx;
  while (from.poll_transmit(Instant::from_ns(1000), tx)) {
    std::vector<std::byte> roce(tx.header_span().begin(), tx.header_span().end());
    for (ConstBytes piece : tx.payload()) roce.insert(roce.end(), piece.begin(), piece.end());
    roce.resize(roce.size() + wire::pad_for(tx.payload_bytes) + wire::kIcrcBytes);
    out.push_back(std::move(roce));
  }
  return out;
}

// Hands one packet to the device's QP it is for.
void deliver(Device& dev, const std::vector<std::byte>& roce) {
  auto pkt = wire::parse_roce(roce);
  ASSERT_TRUE(pkt.ok());
  transport::Qp* to = dev.find_qp(pkt->bth().dest_qpn());
  ASSERT_NE(to, nullptr);
  transport::PacketInfo info;
  info.src = test_config().ip;
  info.src_port = wire::kRoceV2Port;
  to->handle_packet(Instant::from_ns(1000), *pkt, info);
}

// Moves every packet the device's QPs have to send to the QP it is for, until none has any.
void shuttle(Device& dev) {
  for (int round = 0; round < 100; ++round) {
    bool moved = false;
    const std::vector<transport::Qp*> qps(dev.live_qps().begin(), dev.live_qps().end());
    for (transport::Qp* from : qps) {
      for (const auto& roce : take_packets(*from)) {
        deliver(dev, roce);
        moved = true;
      }
    }
    if (!moved) return;
  }
  FAIL() << "packets still moving after 100 rounds";
}

void connect(Device& dev, QpHandle q, QpType t, std::uint32_t dest) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.port_num = 1;
  a.qp_access_flags = kAccessRemoteWrite;
  ASSERT_EQ(dev.modify_qp(q, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags), Errc::kOk);
  a.qp_state = QpState::kRtr;
  a.ah_attr = ah_to(test_config().ip);
  a.path_mtu = Mtu::k1024;
  a.dest_qp_num = dest;
  a.rq_psn = 0x10;
  a.min_rnr_timer = 12;
  const std::uint32_t rtr = kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                            (t == QpType::kXrcRecv ? kQpMaxDestRdAtomic | kQpMinRnrTimer : 0u);
  ASSERT_EQ(dev.modify_qp(q, a, rtr), Errc::kOk);
  a.qp_state = QpState::kRts;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0x10;
  const std::uint32_t rts =
      kQpState | kQpTimeout | kQpSqPsn |
      (t == QpType::kXrcSend ? kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic : 0u);
  ASSERT_EQ(dev.modify_qp(q, a, rts), Errc::kOk);
}

TEST(Xrc, ASendLandsInTheNamedSrqAndAnotherDomainsIsRefused) {
  Xrc x;
  const XrcdHandle other = *x.dev->open_xrcd();
  CqHandle srq_cq = x.dev->create_cq(CqInitAttr{15, 0, 0})->handle;
  auto mine = x.dev->create_xrc_srq(x.pd, x.xrcd, srq_cq, SrqAttr{4, 1, 0});
  auto theirs = x.dev->create_xrc_srq(x.pd, other, srq_cq, SrqAttr{4, 1, 0});
  std::vector<std::byte> buf(4096);
  const MrInfo mr = *x.dev->reg_mr(x.pd, buf.data(), buf.size(), kAccessLocalWrite);
  const Sge dst{reinterpret_cast<std::uint64_t>(buf.data()) + 1024, 512, mr.lkey};
  RecvWr rwr;
  rwr.wr_id = 77;
  rwr.sg_list = std::span(&dst, 1);
  ASSERT_EQ(x.dev->post_srq_recv(mine->handle, std::span(&rwr, 1), nullptr), Errc::kOk);
  ASSERT_EQ(x.dev->post_srq_recv(theirs->handle, std::span(&rwr, 1), nullptr), Errc::kOk);

  const QpInfo s = x.send_qp();
  const QpInfo r = x.recv_qp(x.xrcd);
  connect(*x.dev, s.handle, QpType::kXrcSend, r.qp_num);
  connect(*x.dev, r.handle, QpType::kXrcRecv, s.qp_num);
  const char msg[] = "to the SRQ of the XRCETH";
  std::memcpy(buf.data(), msg, sizeof msg);
  const Sge src{reinterpret_cast<std::uint64_t>(buf.data()), sizeof msg, mr.lkey};
  SendWr wr;
  wr.wr_id = 5;
  wr.sg_list = std::span(&src, 1);
  wr.send_flags = kSendSignaled;
  wr.xrc.remote_srqn = mine->srq_num;
  ASSERT_EQ(x.dev->post_send(s.handle, std::span(&wr, 1), nullptr), Errc::kOk);
  shuttle(*x.dev);
  Wc wc[4];
  ASSERT_EQ(*x.dev->poll_cq(srq_cq, wc), 1u);
  EXPECT_EQ(wc[0].wr_id, 77u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wc[0].qp_num, r.qp_num);
  EXPECT_EQ(wc[0].byte_len, sizeof msg);
  EXPECT_EQ(std::memcmp(buf.data() + 1024, msg, sizeof msg), 0);
  ASSERT_EQ(*x.dev->poll_cq(x.cq, wc), 1u);  // the initiator's send completion
  EXPECT_EQ(wc[0].wr_id, 5u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);

  // The other domain's SRQ: the target NAKs (Invalid Request), the initiator's WQE fails.
  wr.wr_id = 6;
  wr.xrc.remote_srqn = theirs->srq_num;
  ASSERT_EQ(x.dev->post_send(s.handle, std::span(&wr, 1), nullptr), Errc::kOk);
  shuttle(*x.dev);
  ASSERT_EQ(*x.dev->poll_cq(x.cq, wc), 1u);
  EXPECT_EQ(wc[0].wr_id, 6u);
  EXPECT_EQ(wc[0].status, WcStatus::kRemInvReqErr);
  EXPECT_EQ(*x.dev->poll_cq(srq_cq, wc), 0u);
  EXPECT_EQ(x.dev->find_qp(r.qp_num)->counters().xrc_bad_srqn, 1u);
  EXPECT_EQ(x.dev->query_qp(r.handle)->attr.qp_state, QpState::kErr);
}

// The kernel counts no XRC_RECV QP on an XRC SRQ (ib_destroy_srq_user() is EBUSY only while
// srq->usecnt, which QPs created on an SRQ raise): ibv_destroy_srq succeeds while a target QP is
// in the middle of a message into it, and its CQ can go next. The target drops that message (its
// WQE went with the SRQ) and refuses the rest of it; under ASan, a target that still completed
// into the freed CQ fails here.
TEST(Xrc, AnSrqDestroyedMidMessageTakesTheMessageWithIt) {
  Xrc x;
  CqHandle srq_cq = x.dev->create_cq(CqInitAttr{15, 0, 0})->handle;
  auto srq = x.dev->create_xrc_srq(x.pd, x.xrcd, srq_cq, SrqAttr{4, 1, 0});
  ASSERT_TRUE(srq.ok());
  std::vector<std::byte> buf(8192);
  const MrInfo mr = *x.dev->reg_mr(x.pd, buf.data(), buf.size(), kAccessLocalWrite);
  const Sge dst{reinterpret_cast<std::uint64_t>(buf.data()) + 4096, 4096, mr.lkey};
  RecvWr rwr;
  rwr.wr_id = 77;
  rwr.sg_list = std::span(&dst, 1);
  ASSERT_EQ(x.dev->post_srq_recv(srq->handle, std::span(&rwr, 1), nullptr), Errc::kOk);
  const QpInfo s = x.send_qp();
  const QpInfo r = x.recv_qp(x.xrcd);
  connect(*x.dev, s.handle, QpType::kXrcSend, r.qp_num);
  connect(*x.dev, r.handle, QpType::kXrcRecv, s.qp_num);
  const Sge src{reinterpret_cast<std::uint64_t>(buf.data()), 3000, mr.lkey};
  SendWr wr;
  wr.wr_id = 5;
  wr.sg_list = std::span(&src, 1);
  wr.send_flags = kSendSignaled;
  wr.xrc.remote_srqn = srq->srq_num;
  ASSERT_EQ(x.dev->post_send(s.handle, std::span(&wr, 1), nullptr), Errc::kOk);
  const auto packets = take_packets(*x.dev->find_qp(s.qp_num));
  ASSERT_EQ(packets.size(), 3u);  // 3000 bytes at MTU 1024
  deliver(*x.dev, packets[0]);
  EXPECT_EQ(x.dev->destroy_srq(srq->handle), Errc::kOk);
  EXPECT_EQ(x.dev->destroy_cq(srq_cq), Errc::kOk);
  deliver(*x.dev, packets[1]);
  deliver(*x.dev, packets[2]);
  shuttle(*x.dev);
  Wc wc[4];
  ASSERT_EQ(*x.dev->poll_cq(x.cq, wc), 1u);
  EXPECT_EQ(wc[0].wr_id, 5u);
  EXPECT_EQ(wc[0].status, WcStatus::kRemInvReqErr);
  EXPECT_EQ(x.dev->find_qp(r.qp_num)->counters().xrc_bad_srqn, 1u);
  EXPECT_EQ(x.dev->query_qp(r.handle)->attr.qp_state, QpState::kErr);
  EXPECT_EQ(x.dev->destroy_qp(r.handle), Errc::kOk);
  EXPECT_EQ(x.dev->close_xrcd(x.xrcd), Errc::kOk);
}

// ibv_open_qp: another handle on a target QP, found by number within its domain, with the
// kernel's errors (ib_open_qp(): EINVAL for each) and its lifetime (the QP lives while a handle
// does, and each handle holds the domain).
TEST(Xrc, OpenQpGivesAnotherHandleOnATargetQp) {
  Xrc x;
  const XrcdHandle other = *x.dev->open_xrcd();
  const QpInfo r = x.recv_qp(x.xrcd);
  const QpInfo s = x.send_qp();
  EXPECT_EQ(x.dev->open_qp(other, r.qp_num, QpType::kXrcRecv).error(), Errc::kInvalidArgument);
  EXPECT_EQ(x.dev->open_qp(x.xrcd, r.qp_num ^ 0x5000, QpType::kXrcRecv).error(),
            Errc::kInvalidArgument);
  EXPECT_EQ(x.dev->open_qp(x.xrcd, s.qp_num, QpType::kXrcRecv).error(), Errc::kInvalidArgument);
  EXPECT_EQ(x.dev->open_qp(x.xrcd, r.qp_num, QpType::kRc).error(), Errc::kInvalidArgument);
  EXPECT_EQ(x.dev->open_qp(XrcdHandle{}, r.qp_num, QpType::kXrcRecv).error(),
            Errc::kInvalidArgument);
  auto o = x.dev->open_qp(x.xrcd, r.qp_num, QpType::kXrcRecv);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->qp_num, r.qp_num);
  EXPECT_NE(o->handle, r.handle);
  // One QP: modified through one handle, seen through the other.
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.port_num = 1;
  ASSERT_EQ(x.dev->modify_qp(o->handle, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags),
            Errc::kOk);
  EXPECT_EQ(x.dev->query_qp(r.handle)->attr.qp_state, QpState::kInit);
  // The creator's handle closes alone; the QP stays for the other.
  EXPECT_EQ(x.dev->destroy_qp(r.handle), Errc::kOk);
  EXPECT_FALSE(x.dev->query_qp(r.handle).ok());
  EXPECT_EQ(x.dev->destroy_qp(r.handle), Errc::kInvalidArgument);
  EXPECT_EQ(x.dev->query_qp(o->handle)->attr.qp_state, QpState::kInit);
  EXPECT_NE(x.dev->find_qp(r.qp_num), nullptr);
  EXPECT_EQ(x.dev->close_xrcd(x.xrcd), Errc::kBusy);
  EXPECT_EQ(x.dev->destroy_qp(o->handle), Errc::kOk);
  EXPECT_EQ(x.dev->find_qp(r.qp_num), nullptr);
  EXPECT_EQ(x.dev->close_xrcd(x.xrcd), Errc::kOk);
  EXPECT_EQ(x.dev->close_xrcd(other), Errc::kOk);
  // An opened handle of a QP whose creator's handle is still open closes alone too.
  const XrcdHandle d = *x.dev->open_xrcd();
  const QpInfo r2 = x.recv_qp(d);
  const QpInfo o2 = *x.dev->open_qp(d, r2.qp_num, QpType::kXrcRecv);
  EXPECT_EQ(x.dev->destroy_qp(o2.handle), Errc::kOk);
  EXPECT_EQ(x.dev->destroy_qp(o2.handle), Errc::kInvalidArgument);
  EXPECT_EQ(x.dev->query_qp(r2.handle)->attr.qp_state, QpState::kReset);
  EXPECT_EQ(x.dev->destroy_qp(r2.handle), Errc::kOk);
  EXPECT_EQ(x.dev->close_xrcd(d), Errc::kOk);
}

// A target QP's async events reach every handle on it (the kernel's
// __ib_shared_qp_event_handler()).
TEST(Xrc, EveryHandleOfATargetQpGetsItsEvents) {
  Xrc x;
  const QpInfo s = x.send_qp();
  const QpInfo r = x.recv_qp(x.xrcd);
  const QpInfo o = *x.dev->open_qp(x.xrcd, r.qp_num, QpType::kXrcRecv);
  connect(*x.dev, s.handle, QpType::kXrcSend, r.qp_num);
  connect(*x.dev, o.handle, QpType::kXrcRecv, s.qp_num);
  SendWr wr;
  wr.wr_id = 1;
  wr.send_flags = kSendSignaled;
  wr.xrc.remote_srqn = 0x777;  // no such SRQ: the target NAKs and enters the error state
  ASSERT_EQ(x.dev->post_send(s.handle, std::span(&wr, 1), nullptr), Errc::kOk);
  shuttle(*x.dev);
  std::vector<QpHandle> told;
  while (auto ev = x.dev->get_async_event()) {
    if (ev->type == AsyncEventType::kQpReqErr && ev->qp_num == r.qp_num) told.push_back(ev->qp);
  }
  ASSERT_EQ(told.size(), 2u);
  EXPECT_TRUE((told[0] == r.handle && told[1] == o.handle) ||
              (told[0] == o.handle && told[1] == r.handle));
}

TEST(Xrc, TheDeviceAdvertisesXrc) {
  auto dev = make_device();
  EXPECT_NE(dev->query_device().device_cap_flags & kDeviceXrc, 0u);
}

}  // namespace
}  // namespace uroce

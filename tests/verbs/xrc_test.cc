// XRC through verbs: domains, XRC SRQs and their numbers, the two QP halves and what they may
// be given, and an initiator and a target of one device exchanging packets by hand.
#include <gtest/gtest.h>

#include <cstring>
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

// Moves every packet the device's QPs have to send to the QP it is for, until none has any.
void shuttle(Device& dev) {
  const wire::IpAddress self = test_config().ip;
  for (int round = 0; round < 100; ++round) {
    bool moved = false;
    const std::vector<transport::Qp*> qps(dev.live_qps().begin(), dev.live_qps().end());
    for (transport::Qp* from : qps) {
      transport::TxPacket tx;
      while (from->poll_transmit(Instant::from_ns(1000), tx)) {
        std::vector<std::byte> roce(tx.header_span().begin(), tx.header_span().end());
        for (ConstBytes piece : tx.payload()) roce.insert(roce.end(), piece.begin(), piece.end());
        roce.resize(roce.size() + wire::pad_for(tx.payload_bytes) + wire::kIcrcBytes);
        auto pkt = wire::parse_roce(roce);
        ASSERT_TRUE(pkt.ok());
        transport::Qp* to = dev.find_qp(pkt->bth().dest_qpn());
        ASSERT_NE(to, nullptr);
        transport::PacketInfo info;
        info.src = self;
        info.src_port = wire::kRoceV2Port;
        to->handle_packet(Instant::from_ns(1000), *pkt, info);
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

TEST(Xrc, TheDeviceAdvertisesXrc) {
  auto dev = make_device();
  EXPECT_NE(dev->query_device().device_cap_flags & kDeviceXrc, 0u);
}

}  // namespace
}  // namespace uroce

// Queue pairs through the verbs API: creation limits, QPNs, lifetime rules, modify_qp() on real
// QPs (every transition reachable by modify_qp for RC, UC and UD), the address vector and UDP
// source port, work-request translation, and traffic between two devices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "transport/qp.h"
#include "verbs/address.h"
#include "verbs/device_state.h"
#include "verbs/qp_state_table.h"
#include "verbs_test_util.h"
#include "wire/aeth.h"
#include "wire/builder.h"
#include "wire/packet.h"

namespace uroce {
namespace {

using testing::ah_to;
using testing::make_device;
using testing::test_config;

const wire::IpAddress kIpA = wire::IpAddress::v4(0x0a000001);
const wire::IpAddress kIpB = wire::IpAddress::v4(0x0a000002);

// Attribute values that are valid for every transition.
QpAttr good_attr(std::uint32_t dest_qpn = 0x22) {
  QpAttr a;
  a.port_num = 1;
  a.pkey_index = 0;
  a.qkey = 0x11111111;
  a.qp_access_flags = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  a.ah_attr = ah_to(kIpB);
  a.path_mtu = Mtu::k1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = 0x200;
  a.sq_psn = 0x100;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  return a;
}

struct Fixture {
  explicit Fixture(const DeviceConfig& c = test_config()) : dev(make_device(c)) {
    pd = *dev->alloc_pd();
    cq = dev->create_cq(CqInitAttr{255, 0, 0})->handle;
  }
  QpInitAttr init(QpType t, QpCap cap = QpCap{16, 16, 2, 2, 0}) {
    QpInitAttr i;
    i.qp_type = t;
    i.send_cq = cq;
    i.recv_cq = cq;
    i.cap = cap;
    return i;
  }
  QpInfo create(QpType t) {
    auto q = dev->create_qp(pd, init(t));
    EXPECT_TRUE(q.ok());
    return *q;
  }
  QpState state(QpHandle q) { return dev->query_qp(q)->attr.qp_state; }
  // Moves a QP along RESET -> INIT -> RTR -> RTS (-> SQD) or to ERR, with required masks.
  Errc to(QpHandle q, QpType t, QpState next, const QpAttr& values = good_attr()) {
    const QpState cur = state(q);
    const verbs::QpTransitionRule r = verbs::qp_transition_rule(t, cur, next);
    QpAttr a = values;
    a.qp_state = next;
    return dev->modify_qp(q, a, kQpState | r.required);
  }
  void drive(QpHandle q, QpType t, QpState target) {
    const QpState path[] = {QpState::kInit, QpState::kRtr, QpState::kRts, QpState::kSqd};
    if (target == QpState::kReset) return;
    if (target == QpState::kErr) {
      ASSERT_EQ(to(q, t, QpState::kInit), Errc::kOk);
      ASSERT_EQ(to(q, t, QpState::kErr), Errc::kOk);
      return;
    }
    for (QpState s : path) {
      if (s <= state(q)) continue;  // already past it
      ASSERT_EQ(to(q, t, s), Errc::kOk) << static_cast<int>(s);
      if (s == target) return;
    }
  }
  std::unique_ptr<Device> dev;
  PdHandle pd;
  CqHandle cq;
};

TEST(QpCreate, ChecksParentsTypeAndCaps) {
  Fixture f;
  QpInitAttr i = f.init(QpType::kRc);
  EXPECT_EQ(f.dev->create_qp(PdHandle{}, i).error(), Errc::kInvalidArgument);
  i.send_cq = CqHandle{};
  EXPECT_EQ(f.dev->create_qp(f.pd, i).error(), Errc::kInvalidArgument);
  i = f.init(QpType::kRc);
  i.recv_cq = CqHandle{7, 7};
  EXPECT_EQ(f.dev->create_qp(f.pd, i).error(), Errc::kInvalidArgument);
  i = f.init(QpType::kRc);
  i.srq = SrqHandle{3, 1};
  EXPECT_EQ(f.dev->create_qp(f.pd, i).error(), Errc::kInvalidArgument);
  i = f.init(static_cast<QpType>(8));  // IBV_QPT_RAW_PACKET
  EXPECT_EQ(f.dev->create_qp(f.pd, i).error(), Errc::kNotSupported);
  const QpCap too_big[] = {{16385, 1, 1, 1, 0},
                           {1, 16385, 1, 1, 0},
                           {1, 1, 33, 1, 0},
                           {1, 1, 1, 33, 0},
                           {1, 1, 1, 1, 401}};
  for (const QpCap& cap : too_big) {
    EXPECT_EQ(f.dev->create_qp(f.pd, f.init(QpType::kRc, cap)).error(), Errc::kInvalidArgument);
  }
  EXPECT_TRUE(f.dev->create_qp(f.pd, f.init(QpType::kRc, {16384, 16384, 32, 32, 400})).ok());
  // With an SRQ the receive capabilities are not looked at.
  i = f.init(QpType::kRc, {1, 99999, 1, 99, 0});
  i.srq = f.dev->create_srq(f.pd, SrqAttr{8, 1, 0})->handle;
  auto q = f.dev->create_qp(f.pd, i);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->cap.max_recv_wr, 0u);
}

TEST(QpCreate, CapsAreRoundedAsRxeDoes) {
  Fixture f;
  struct Case {
    QpCap asked, got;
  };
  const Case cases[] = {
      {{10, 3, 1, 2, 0}, {15, 3, 1, 2, 16}},                // a WQE holds 1 SGE = 16 inline bytes
      {{16, 4, 2, 1, 100}, {31, 7, 6, 1, 100}},             // 100 inline bytes = room for 6 SGEs
      {{1, 1, 1, 1, 400}, {1, 1, 25, 1, 400}},              // 400 bytes = 25 SGEs
      {{1, 1, 32, 1, 0}, {1, 1, 32, 1, 400}},               // 32 SGEs = 512 bytes, capped at 400
      {{16384, 16384, 1, 1, 0}, {16384, 16384, 1, 1, 16}},  // capped at max_qp_wr
      {{0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}},
  };
  for (const Case& c : cases) {
    auto q = f.dev->create_qp(f.pd, f.init(QpType::kRc, c.asked));
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->cap.max_send_wr, c.got.max_send_wr);
    EXPECT_EQ(q->cap.max_recv_wr, c.got.max_recv_wr);
    EXPECT_EQ(q->cap.max_send_sge, c.got.max_send_sge);
    EXPECT_EQ(q->cap.max_recv_sge, c.got.max_recv_sge);
    EXPECT_EQ(q->cap.max_inline_data, c.got.max_inline_data);
    EXPECT_EQ(f.dev->query_qp(q->handle)->attr.cap.max_send_wr, c.got.max_send_wr);
  }
}

TEST(QpCreate, QpnsStartAt0x11AndAreHandedOutCyclically) {
  Fixture f;
  QpInfo a = f.create(QpType::kRc);
  QpInfo b = f.create(QpType::kUd);
  QpInfo c = f.create(QpType::kUc);
  EXPECT_EQ(a.qp_num, 0x11u);
  EXPECT_EQ(b.qp_num, 0x12u);
  EXPECT_EQ(c.qp_num, 0x13u);
  EXPECT_EQ(f.dev->find_qp(0x12)->qpn(), 0x12u);
  EXPECT_EQ(f.dev->find_qp(0x12)->type(), QpType::kUd);
  EXPECT_EQ(f.dev->live_qps().size(), 3u);
  ASSERT_EQ(f.dev->destroy_qp(b.handle), Errc::kOk);
  EXPECT_EQ(f.dev->find_qp(0x12), nullptr);
  EXPECT_EQ(f.dev->live_qps().size(), 2u);
  for (transport::Qp* q : f.dev->live_qps()) EXPECT_NE(q->qpn(), 0x12u);
  // The freed QPN is not reused at once (rxe allocates cyclically).
  EXPECT_EQ(f.create(QpType::kRc).qp_num, 0x14u);
  EXPECT_EQ(f.dev->find_qp(0), nullptr);
  EXPECT_EQ(f.dev->find_qp(1), nullptr);
  EXPECT_EQ(f.dev->find_qp(0xffffff), nullptr);
  EXPECT_EQ(f.dev->find_qp(0x11), f.dev->live_qps()[0]);
}

TEST(QpLifetime, ParentsAreBusyWhileAQpUsesThem) {
  Fixture f;
  CqHandle scq = f.dev->create_cq(CqInitAttr{15, 0, 0})->handle;
  SrqHandle srq = f.dev->create_srq(f.pd, SrqAttr{8, 1, 0})->handle;
  QpInitAttr i = f.init(QpType::kRc);
  i.send_cq = scq;
  i.srq = srq;
  QpHandle qp = f.dev->create_qp(f.pd, i)->handle;
  QpHandle qp2 = f.create(QpType::kUd).handle;  // send and receive CQ are the same CQ
  EXPECT_EQ(f.dev->dealloc_pd(f.pd), Errc::kBusy);
  EXPECT_EQ(f.dev->destroy_cq(scq), Errc::kBusy);
  EXPECT_EQ(f.dev->destroy_cq(f.cq), Errc::kBusy);
  EXPECT_EQ(f.dev->destroy_srq(srq), Errc::kBusy);
  ASSERT_EQ(f.dev->destroy_qp(qp), Errc::kOk);
  EXPECT_EQ(f.dev->destroy_cq(scq), Errc::kOk);
  EXPECT_EQ(f.dev->destroy_srq(srq), Errc::kOk);
  EXPECT_EQ(f.dev->destroy_cq(f.cq), Errc::kBusy);  // still qp2's, twice
  EXPECT_EQ(f.dev->dealloc_pd(f.pd), Errc::kBusy);
  ASSERT_EQ(f.dev->destroy_qp(qp2), Errc::kOk);
  EXPECT_EQ(f.dev->destroy_cq(f.cq), Errc::kOk);
  EXPECT_EQ(f.dev->dealloc_pd(f.pd), Errc::kOk);
}

TEST(QpLifetime, StaleHandlesAreDetected) {
  Fixture f;
  QpHandle qp = f.create(QpType::kRc).handle;
  ASSERT_EQ(f.dev->destroy_qp(qp), Errc::kOk);
  EXPECT_EQ(f.dev->destroy_qp(qp), Errc::kInvalidArgument);
  EXPECT_EQ(f.dev->modify_qp(qp, good_attr(), kQpState), Errc::kInvalidArgument);
  EXPECT_EQ(f.dev->query_qp(qp).error(), Errc::kInvalidArgument);
  SendWr s;
  const SendWr* bad_s = nullptr;
  EXPECT_EQ(f.dev->post_send(qp, {&s, 1}, &bad_s), Errc::kInvalidArgument);
  EXPECT_EQ(bad_s, &s);
  RecvWr r;
  const RecvWr* bad_r = nullptr;
  EXPECT_EQ(f.dev->post_recv(qp, {&r, 1}, &bad_r), Errc::kInvalidArgument);
  EXPECT_EQ(bad_r, &r);
  // A new QP in the same slot is not reached through the old handle.
  QpHandle qp2 = f.create(QpType::kRc).handle;
  EXPECT_EQ(qp2.index, qp.index);
  EXPECT_EQ(f.dev->destroy_qp(qp), Errc::kInvalidArgument);
  EXPECT_EQ(f.dev->query_qp(qp2)->attr.qp_state, QpState::kReset);
}

// Every transition that modify_qp can be asked for, from every state modify_qp can reach
// (SQE is only entered by a send error), with the required attributes: it succeeds exactly
// when the kernel's table allows it, and an illegal one changes nothing.
TEST(QpModify, EveryReachableTransitionFollowsTheKernelTable) {
  const QpState reachable[] = {QpState::kReset, QpState::kInit, QpState::kRtr,
                               QpState::kRts,   QpState::kSqd,  QpState::kErr};
  const QpState all[] = {QpState::kReset, QpState::kInit, QpState::kRtr, QpState::kRts,
                         QpState::kSqd,   QpState::kSqe,  QpState::kErr};
  for (QpType t : {QpType::kRc, QpType::kUc, QpType::kUd}) {
    for (QpState cur : reachable) {
      for (QpState next : all) {
        Fixture f;
        QpHandle q = f.create(t).handle;
        f.drive(q, t, cur);
        ASSERT_EQ(f.state(q), cur);
        const bool legal = verbs::qp_transition_rule(t, cur, next).valid;
        const Errc e = f.to(q, t, next);
        SCOPED_TRACE(::testing::Message()
                     << "type " << int(t) << " " << int(cur) << "->" << int(next));
        if (legal) {
          EXPECT_EQ(e, Errc::kOk);
          EXPECT_EQ(f.state(q), next);
        } else {
          EXPECT_EQ(e, Errc::kInvalidArgument);
          EXPECT_EQ(f.state(q), cur);
        }
      }
    }
  }
}

TEST(QpModify, WrongMasksAreRejectedAndChangeNothing) {
  Fixture f;
  QpHandle q = f.create(QpType::kRc).handle;
  QpAttr a = good_attr();
  a.qp_state = QpState::kInit;
  // A required attribute missing, one too many, one that no transition takes.
  EXPECT_EQ(f.dev->modify_qp(q, a, kQpState | kQpPort | kQpAccessFlags), Errc::kInvalidArgument);
  EXPECT_EQ(f.dev->modify_qp(q, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags | kQpQkey),
            Errc::kInvalidArgument);
  EXPECT_EQ(f.dev->modify_qp(q, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags | kQpCap),
            Errc::kInvalidArgument);
  EXPECT_EQ(f.state(q), QpState::kReset);
  // UD wants a Q_Key instead of access flags.
  QpHandle ud = f.create(QpType::kUd).handle;
  EXPECT_EQ(f.dev->modify_qp(ud, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags),
            Errc::kInvalidArgument);
  EXPECT_EQ(f.dev->modify_qp(ud, a, kQpState | kQpPkeyIndex | kQpPort | kQpQkey), Errc::kOk);
  // No state in the mask: attributes of the current state (INIT -> INIT).
  EXPECT_EQ(f.dev->modify_qp(ud, a, kQpQkey), Errc::kOk);
  EXPECT_EQ(f.dev->modify_qp(ud, a, kQpPathMtu), Errc::kInvalidArgument);
}

TEST(QpModify, ValuesAreCheckedAsRxeDoes) {
  Fixture f;
  QpHandle q = f.create(QpType::kRc).handle;
  auto try_init = [&](auto edit) {
    QpAttr a = good_attr();
    a.qp_state = QpState::kInit;
    edit(a);
    return f.dev->modify_qp(q, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags);
  };
  EXPECT_EQ(try_init([](QpAttr& a) { a.port_num = 2; }), Errc::kInvalidArgument);
  EXPECT_EQ(try_init([](QpAttr& a) { a.port_num = 0; }), Errc::kInvalidArgument);
  EXPECT_EQ(try_init([](QpAttr& a) { a.pkey_index = 1; }), Errc::kInvalidArgument);
  // 0x400: no such flag (bits 8 and 9 are FLUSH's placement types, QP access flags since 6.2).
  EXPECT_EQ(try_init([](QpAttr& a) { a.qp_access_flags = 0x400; }), Errc::kInvalidArgument);
  EXPECT_EQ(try_init([](QpAttr& a) { a.qp_state = static_cast<QpState>(9); }),
            Errc::kInvalidArgument);
  // The region-only bits (zero-based, on-demand, huge pages) are accepted, as the kernel's
  // IB_ACCESS_SUPPORTED accepts them (rdma-core's test_odp passes ON_DEMAND on its QPs).
  ASSERT_EQ(try_init([](QpAttr& a) {
              a.qp_access_flags =
                  kAccessRemoteWrite | kAccessOnDemand | kAccessZeroBased | kAccessHugetlb;
            }),
            Errc::kOk);

  const std::uint32_t rtr_mask =
      kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer;
  auto try_rtr = [&](auto edit, std::uint32_t extra = 0) {
    QpAttr a = good_attr();
    a.qp_state = QpState::kRtr;
    edit(a);
    return f.dev->modify_qp(q, a, rtr_mask | extra);
  };
  EXPECT_EQ(try_rtr([](QpAttr& a) { a.path_mtu = static_cast<Mtu>(6); }), Errc::kInvalidArgument);
  EXPECT_EQ(try_rtr([](QpAttr& a) { a.path_mtu = static_cast<Mtu>(0); }), Errc::kInvalidArgument);
  EXPECT_EQ(try_rtr([](QpAttr& a) { a.max_dest_rd_atomic = 129; }), Errc::kInvalidArgument);
  EXPECT_EQ(try_rtr([](QpAttr& a) { a.min_rnr_timer = 32; }), Errc::kInvalidArgument);
  EXPECT_EQ(try_rtr([](QpAttr& a) { a.dest_qp_num = 0x1000000; }), Errc::kInvalidArgument);
  EXPECT_EQ(try_rtr([](QpAttr& a) { a.ah_attr.is_global = false; }), Errc::kInvalidArgument);
  EXPECT_EQ(try_rtr([](QpAttr& a) { a.ah_attr.sgid_index = 1; }), Errc::kInvalidArgument);
  EXPECT_EQ(try_rtr([](QpAttr& a) { a.ah_attr.port_num = 2; }), Errc::kInvalidArgument);
  EXPECT_EQ(try_rtr([](QpAttr& a) { a.ah_attr.dgid = Gid{}; }), Errc::kInvalidArgument);
  // The table allows an alternate path here; RoCE does not.
  EXPECT_EQ(try_rtr([](QpAttr&) {}, kQpAltPath), Errc::kInvalidArgument);
  EXPECT_EQ(f.state(q), QpState::kInit);
  // PSNs are cut to 24 bits; the path MTU may exceed the active MTU up to the port's maximum.
  ASSERT_EQ(try_rtr([](QpAttr& a) {
              a.rq_psn = 0x1abcdef;
              a.path_mtu = Mtu::k4096;
              a.max_dest_rd_atomic = 128;
            }),
            Errc::kOk);
  EXPECT_EQ(f.dev->query_qp(q)->attr.rq_psn, 0xabcdefu);
  EXPECT_EQ(f.dev->query_qp(q)->attr.path_mtu, Mtu::k4096);

  const std::uint32_t rts_mask =
      kQpState | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpSqPsn | kQpMaxQpRdAtomic;
  auto try_rts = [&](auto edit) {
    QpAttr a = good_attr();
    a.qp_state = QpState::kRts;
    edit(a);
    return f.dev->modify_qp(q, a, rts_mask);
  };
  EXPECT_EQ(try_rts([](QpAttr& a) { a.timeout = 32; }), Errc::kInvalidArgument);
  EXPECT_EQ(try_rts([](QpAttr& a) { a.retry_cnt = 8; }), Errc::kInvalidArgument);
  EXPECT_EQ(try_rts([](QpAttr& a) { a.rnr_retry = 8; }), Errc::kInvalidArgument);
  EXPECT_EQ(try_rts([](QpAttr& a) { a.max_rd_atomic = 129; }), Errc::kInvalidArgument);
  EXPECT_EQ(f.state(q), QpState::kRtr);
  ASSERT_EQ(try_rts([](QpAttr& a) {
              a.timeout = 31;
              a.sq_psn = 0xff000001;
            }),
            Errc::kOk);
  EXPECT_EQ(f.dev->query_qp(q)->attr.sq_psn, 0x000001u);
}

TEST(QpModify, CurStateMustBeTheQpsState) {
  Fixture f;
  QpHandle q = f.create(QpType::kRc).handle;
  f.drive(q, QpType::kRc, QpState::kRts);
  QpAttr a = good_attr();
  a.qp_state = QpState::kRts;
  a.cur_qp_state = QpState::kSqd;  // SQD -> RTS accepts kQpCurState, but the QP is in RTS
  EXPECT_EQ(f.dev->modify_qp(q, a, kQpState | kQpCurState), Errc::kInvalidArgument);
  a.cur_qp_state = QpState::kRts;
  EXPECT_EQ(f.dev->modify_qp(q, a, kQpState | kQpCurState | kQpMinRnrTimer), Errc::kOk);
  a.cur_qp_state = static_cast<QpState>(12);
  EXPECT_EQ(f.dev->modify_qp(q, a, kQpState | kQpCurState), Errc::kInvalidArgument);
}

// RESET takes the QP's completions out of its CQs, as rdma-core's hardware providers do
// (verbs/qp.cc, clean_cqs_at_reset): here the flush completions of two QPs sharing a CQ, of which
// only the reset one's go, the other's keeping their place.
TEST(QpModify, ResetTakesTheQpsCompletionsOutOfItsCqsAndLeavesOthers) {
  Fixture f;
  const QpHandle q1 = f.create(QpType::kRc).handle;
  const QpInfo q2 = f.create(QpType::kRc);
  f.drive(q1, QpType::kRc, QpState::kInit);
  f.drive(q2.handle, QpType::kRc, QpState::kInit);
  RecvWr r{0, {}};
  for (std::uint64_t id : {1, 2}) {
    r.wr_id = id;
    ASSERT_EQ(f.dev->post_recv(q1, {&r, 1}, nullptr), Errc::kOk);
  }
  r.wr_id = 3;
  ASSERT_EQ(f.dev->post_recv(q2.handle, {&r, 1}, nullptr), Errc::kOk);
  ASSERT_EQ(f.to(q1, QpType::kRc, QpState::kErr), Errc::kOk);  // two flush completions
  ASSERT_EQ(f.to(q2.handle, QpType::kRc, QpState::kErr), Errc::kOk);
  ASSERT_EQ(f.to(q1, QpType::kRc, QpState::kReset), Errc::kOk);
  Wc wc[4];
  auto n = f.dev->poll_cq(f.cq, wc);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 1u);
  EXPECT_EQ(wc[0].qp_num, q2.qp_num);
  EXPECT_EQ(wc[0].wr_id, 3u);
  EXPECT_EQ(wc[0].status, WcStatus::kWrFlushErr);
}

TEST(QpModify, AddressVectorAndUdpSourcePortAsRxe) {
  Fixture f;
  QpInfo q = f.create(QpType::kRc);
  f.drive(q.handle, QpType::kRc, QpState::kInit);
  // Flow label 0: the port comes from rdma_calc_flow_label(qpn, dest_qpn), the destination QPN
  // being the one this same call sets.
  QpAttr a = good_attr(0x1234);
  a.qp_state = QpState::kRtr;
  a.ah_attr.hop_limit = 1;
  a.ah_attr.traffic_class = 0x60;
  ASSERT_EQ(f.dev->modify_qp(q.handle, a,
                             kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                 kQpMaxDestRdAtomic | kQpMinRnrTimer),
            Errc::kOk);
  const transport::AddressVector& path = f.dev->find_qp(q.qp_num)->path();
  EXPECT_EQ(path.dst, kIpB);
  EXPECT_EQ(path.hop_limit, 1);
  EXPECT_EQ(path.traffic_class, 0x60);
  EXPECT_EQ(path.udp_sport, verbs::connected_udp_sport(0, 0x11, 0x1234));
  EXPECT_EQ(path.udp_sport, 0xf570);
  f.drive(q.handle, QpType::kRc, QpState::kRts);
  ASSERT_EQ(f.to(q.handle, QpType::kRc, QpState::kSqd), Errc::kOk);
  // SQD -> SQD with a new AV and no destination QPN: the QP's own (0x1234) is used.
  a = good_attr(0x999);
  a.qp_state = QpState::kSqd;
  a.ah_attr.flow_label = 0;
  ASSERT_EQ(f.dev->modify_qp(q.handle, a, kQpState | kQpAv), Errc::kOk);
  EXPECT_EQ(f.dev->find_qp(q.qp_num)->path().udp_sport, 0xf570);
  // A nonzero flow label gives the port directly.
  a.ah_attr.flow_label = 0x12345;
  ASSERT_EQ(f.dev->modify_qp(q.handle, a, kQpState | kQpAv), Errc::kOk);
  EXPECT_EQ(f.dev->find_qp(q.qp_num)->path().udp_sport, 0xe341);
  EXPECT_EQ(f.dev->query_qp(q.handle)->attr.ah_attr.flow_label, 0x12345u);
  EXPECT_EQ(f.dev->query_qp(q.handle)->attr.dest_qp_num, 0x1234u);
}

// Selective repeat (docs/ARCHITECTURE.md, "Negotiation"): an RC QP moved to RTR uses it when the
// device allows it and the peer is uroce, as the CM says (kQpSelectiveRepeat) or the device's
// peer list (sr_peers, sr_all_peers) does.
bool rc_to_rtr_uses_sr(const DeviceConfig& c, const wire::IpAddress& peer, bool cm_says) {
  Fixture f(c);
  const QpInfo q = f.create(QpType::kRc);
  f.drive(q.handle, QpType::kRc, QpState::kInit);
  QpAttr a = good_attr();
  a.ah_attr = ah_to(peer);
  a.qp_state = QpState::kRtr;
  a.selective_repeat = cm_says;
  const std::uint32_t mask =
      kQpState | verbs::qp_transition_rule(QpType::kRc, QpState::kInit, QpState::kRtr).required |
      (cm_says ? kQpSelectiveRepeat : 0u);
  EXPECT_EQ(f.dev->modify_qp(q.handle, a, mask), Errc::kOk);
  EXPECT_EQ(f.to(q.handle, QpType::kRc, QpState::kRts, a), Errc::kOk);
  return f.dev->query_qp(q.handle)->attr.selective_repeat;
}

TEST(QpSelectiveRepeat, OnTowardsPeersTheCmOrTheConfigurationNamesUroce) {
  const wire::IpAddress kIpC = wire::IpAddress::v4(0x0a000003);
  DeviceConfig c = test_config();
  EXPECT_FALSE(rc_to_rtr_uses_sr(c, kIpB, false));  // nobody said the peer is uroce
  EXPECT_TRUE(rc_to_rtr_uses_sr(c, kIpB, true));    // the CM did
  c.sr_peers = {kIpB};
  EXPECT_TRUE(rc_to_rtr_uses_sr(c, kIpB, false));
  EXPECT_FALSE(rc_to_rtr_uses_sr(c, kIpC, false));
  c.sr_peers.clear();
  c.sr_all_peers = true;
  EXPECT_TRUE(rc_to_rtr_uses_sr(c, kIpC, false));
  // UROCE_SR=0: never, whatever the CM or the peer list say.
  c.selective_repeat = false;
  c.sr_peers = {kIpB};
  EXPECT_FALSE(rc_to_rtr_uses_sr(c, kIpB, false));
  EXPECT_FALSE(rc_to_rtr_uses_sr(c, kIpB, true));
  EXPECT_FALSE(rc_to_rtr_uses_sr(c, kIpC, true));
}

TEST(QpSelectiveRepeat, TheBitIsRcInitToRtrOnlyAndEveryConnectionDecidesAgain) {
  DeviceConfig c = test_config();
  c.sr_peers = {kIpB};
  Fixture f(c);
  // UC and UD QPs, and RC transitions other than INIT -> RTR, refuse the bit.
  for (QpType t : {QpType::kUc, QpType::kUd}) {
    const QpInfo q = f.create(t);
    f.drive(q.handle, t, QpState::kInit);
    const QpState next = QpState::kRtr;
    QpAttr a = good_attr();
    a.qp_state = next;
    a.selective_repeat = true;
    const std::uint32_t mask =
        kQpState | verbs::qp_transition_rule(t, QpState::kInit, next).required;
    EXPECT_EQ(f.dev->modify_qp(q.handle, a, mask | kQpSelectiveRepeat), Errc::kInvalidArgument);
    EXPECT_EQ(f.dev->modify_qp(q.handle, a, mask), Errc::kOk);
    EXPECT_FALSE(f.dev->query_qp(q.handle)->attr.selective_repeat);  // sr_peers: RC only
  }
  const QpInfo q = f.create(QpType::kRc);
  QpAttr a = good_attr();
  a.qp_state = QpState::kInit;
  EXPECT_EQ(
      f.dev->modify_qp(q.handle, a,
                       kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags | kQpSelectiveRepeat),
      Errc::kInvalidArgument);
  f.drive(q.handle, QpType::kRc, QpState::kRts);  // towards kIpB, a listed peer
  EXPECT_TRUE(f.dev->query_qp(q.handle)->attr.selective_repeat);
  a.qp_state = QpState::kRts;
  EXPECT_EQ(f.dev->modify_qp(q.handle, a, kQpState | kQpSelectiveRepeat), Errc::kInvalidArgument);
  // Reset and connected to a peer nobody named: go-back-N again.
  a.qp_state = QpState::kReset;
  ASSERT_EQ(f.dev->modify_qp(q.handle, a, kQpState), Errc::kOk);
  QpAttr other = good_attr();
  other.ah_attr = ah_to(wire::IpAddress::v4(0x0a000009));
  f.drive(q.handle, QpType::kRc, QpState::kInit);
  ASSERT_EQ(f.to(q.handle, QpType::kRc, QpState::kRtr, other), Errc::kOk);
  EXPECT_FALSE(f.dev->query_qp(q.handle)->attr.selective_repeat);
}

TEST(QpQuery, ReturnsAttributesAndInitAttributes) {
  Fixture f;
  QpInitAttr i = f.init(QpType::kUc, {8, 8, 1, 1, 0});
  i.sq_sig_all = true;
  QpInfo q = *f.dev->create_qp(f.pd, i);
  f.drive(q.handle, QpType::kUc, QpState::kRts);
  auto r = f.dev->query_qp(q.handle);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->attr.qp_state, QpState::kRts);
  EXPECT_EQ(r->attr.dest_qp_num, 0x22u);
  EXPECT_EQ(r->attr.sq_psn, 0x100u);
  EXPECT_EQ(r->attr.rq_psn, 0x200u);
  EXPECT_EQ(r->attr.path_mtu, Mtu::k1024);
  EXPECT_EQ(r->attr.ah_attr.dgid, good_attr().ah_attr.dgid);
  EXPECT_EQ(r->init_attr.qp_type, QpType::kUc);
  EXPECT_TRUE(r->init_attr.sq_sig_all);
  EXPECT_EQ(r->init_attr.send_cq, f.cq);
  EXPECT_EQ(r->init_attr.cap.max_send_wr, 15u);
}

TEST(QpPost, BadWrPointsAtTheFirstFailureAndEarlierOnesArePosted) {
  Fixture f;
  QpInfo q = f.create(QpType::kRc);
  f.drive(q.handle, QpType::kRc, QpState::kRts);
  std::vector<std::byte> buf(64);
  auto mr = f.dev->reg_mr(f.pd, buf.data(), buf.size(), kAccessLocalWrite);
  Sge sge{mr->iova, 8, mr->lkey};
  Sge three[3] = {sge, sge, sge};  // more than max_send_sge (2)
  SendWr wrs[3];
  wrs[0].sg_list = {&sge, 1};
  wrs[1].sg_list = three;
  wrs[2].sg_list = {&sge, 1};
  const SendWr* bad = nullptr;
  EXPECT_EQ(f.dev->post_send(q.handle, wrs, &bad), Errc::kInvalidArgument);
  EXPECT_EQ(bad, &wrs[1]);
  EXPECT_EQ(f.dev->find_qp(q.qp_num)->outstanding_send_wqes(), 1u);
  EXPECT_EQ(f.dev->post_send(q.handle, {&wrs[2], 1}, &bad), Errc::kOk);
  EXPECT_EQ(bad, nullptr);
  // An opcode uroce does not know.
  SendWr odd;
  odd.opcode = static_cast<WrOpcode>(8);
  EXPECT_EQ(f.dev->post_send(q.handle, {&odd, 1}, &bad), Errc::kInvalidArgument);
  EXPECT_EQ(bad, &odd);

  RecvWr rwrs[2] = {{1, {&sge, 1}}, {2, three}};
  const RecvWr* rbad = nullptr;
  EXPECT_EQ(f.dev->post_recv(q.handle, rwrs, &rbad), Errc::kInvalidArgument);
  EXPECT_EQ(rbad, &rwrs[1]);
}

TEST(QpPost, ReceivesGoToTheSrqNotTheQp) {
  Fixture f;
  QpInitAttr i = f.init(QpType::kRc);
  i.srq = f.dev->create_srq(f.pd, SrqAttr{8, 1, 0})->handle;
  QpHandle q = f.dev->create_qp(f.pd, i)->handle;
  f.drive(q, QpType::kRc, QpState::kInit);
  RecvWr r{1, {}};
  const RecvWr* bad = nullptr;
  EXPECT_EQ(f.dev->post_recv(q, {&r, 1}, &bad), Errc::kInvalidArgument);
  EXPECT_EQ(bad, &r);
}

TEST(QpPost, UdNeedsALiveAh) {
  Fixture f;
  QpInfo q = f.create(QpType::kUd);
  f.drive(q.handle, QpType::kUd, QpState::kRts);
  SendWr wr;
  const SendWr* bad = nullptr;
  EXPECT_EQ(f.dev->post_send(q.handle, {&wr, 1}, &bad), Errc::kInvalidArgument);
  AhHandle ah = *f.dev->create_ah(f.pd, ah_to(kIpB));
  ASSERT_EQ(f.dev->destroy_ah(ah), Errc::kOk);
  wr.ud.ah = ah;
  EXPECT_EQ(f.dev->post_send(q.handle, {&wr, 1}, &bad), Errc::kInvalidArgument);
  wr.ud.ah = *f.dev->create_ah(f.pd, ah_to(kIpB));
  EXPECT_EQ(f.dev->post_send(q.handle, {&wr, 1}, &bad), Errc::kOk);
}

// Which opcodes each QP type posts through the verbs (transport/wr_opcodes.def), written out: UD
// SEND and SEND with Immediate only; UC also RDMA WRITE; RC also READ, the atomics and SEND with
// Invalidate, ATOMIC WRITE, FLUSH and LOCAL_INV (executed later, when it reaches the head of the
// queue); none an opcode uroce does not know, nor a BIND_MW without a window (RC and UC post
// it with one: MemoryWindow.*). A refused WR changes nothing.
TEST(QpPost, EachQpTypePostsTheOperationsItsTransportCarries) {
  const std::vector<WrOpcode> ud = {WrOpcode::kSend, WrOpcode::kSendWithImm};
  std::vector<WrOpcode> uc = ud;
  uc.insert(uc.end(), {WrOpcode::kRdmaWrite, WrOpcode::kRdmaWriteWithImm});
  std::vector<WrOpcode> rc = uc;
  rc.insert(rc.end(), {WrOpcode::kRdmaRead, WrOpcode::kAtomicCmpAndSwp,
                       WrOpcode::kAtomicFetchAndAdd, WrOpcode::kSendWithInv, WrOpcode::kFlush,
                       WrOpcode::kAtomicWrite, WrOpcode::kLocalInv});
  const std::map<QpType, std::vector<WrOpcode>> allowed = {
      {QpType::kRc, rc}, {QpType::kUc, uc}, {QpType::kUd, ud}};
  for (const auto& [type, ops] : allowed) {
    Fixture f;
    QpInfo q = f.create(type);
    f.drive(q.handle, type, QpState::kRts);
    std::vector<std::byte> buf(64);
    auto mr = f.dev->reg_mr(f.pd, buf.data(), buf.size(), kAccessLocalWrite);
    Sge sge{mr->iova, 8, mr->lkey};
    const AhHandle ah = *f.dev->create_ah(f.pd, ah_to(kIpB));
    std::uint32_t posted = 0;
    for (unsigned v = 0; v < 16; ++v) {
      const auto op = static_cast<WrOpcode>(v);
      SendWr wr;
      wr.opcode = op;
      wr.sg_list = {&sge, 1};
      wr.rdma = {0x10000, 1};
      wr.atomic.remote_addr = 0x10000;
      wr.flush.placement = 1;  // global visibility
      wr.ud.ah = ah;
      const SendWr* bad = nullptr;
      const bool ok = std::find(ops.begin(), ops.end(), op) != ops.end();
      EXPECT_EQ(f.dev->post_send(q.handle, {&wr, 1}, &bad), ok ? Errc::kOk : Errc::kInvalidArgument)
          << static_cast<int>(type) << " " << v;
      EXPECT_EQ(bad, ok ? nullptr : &wr);
      if (ok) ++posted;
      EXPECT_EQ(f.dev->find_qp(q.qp_num)->outstanding_send_wqes(), posted);
    }
    EXPECT_EQ(posted, ops.size());
    EXPECT_EQ(f.state(q.handle), QpState::kRts);
  }
}

TEST(QpEvents, TransportEventsBecomeQpAsyncEvents) {
  Fixture f;
  QpInfo q = f.create(QpType::kRc);
  DeviceTestAccess::state(*f.dev).qp_event(q.qp_num, AsyncEventType::kCommEst);
  auto ev = f.dev->get_async_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->type, AsyncEventType::kCommEst);
  EXPECT_EQ(ev->qp, q.handle);
  EXPECT_EQ(ev->qp_num, q.qp_num);
}

// ---- two devices back to back ----

// Moves every packet from every QP of one device to the QP it is addressed to, until quiet.
class Wire {
 public:
  Wire(Device& a, Device& b) : devs_{&a, &b} {}
  std::vector<std::uint16_t> sports;  // UDP source port of every packet

  void run() {
    for (int round = 0; round < 1000; ++round) {
      bool moved = false;
      for (int from = 0; from < 2; ++from) {
        Device& src = *devs_[from];
        Device& dst = *devs_[1 - from];
        const std::vector<transport::Qp*> qps(src.live_qps().begin(), src.live_qps().end());
        for (transport::Qp* qp : qps) {
          transport::TxPacket tx;
          while (qp->poll_transmit(now_, tx)) {
            moved = true;
            deliver(src, dst, tx);
          }
        }
      }
      if (!moved) return;
      now_ = now_ + Duration::us(1);
    }
    ADD_FAILURE() << "the wire did not go quiet";
  }

 private:
  void deliver(Device& src, Device& dst, const transport::TxPacket& tx) {
    EXPECT_EQ(tx.av.dst, dst.local_ip());
    sports.push_back(tx.av.udp_sport);
    std::vector<std::byte> udp(tx.header_span().begin(), tx.header_span().end());
    for (ConstBytes piece : tx.payload()) udp.insert(udp.end(), piece.begin(), piece.end());
    udp.resize(udp.size() + wire::pad_for(tx.payload_bytes) + wire::kIcrcBytes);
    auto pkt = wire::parse_roce(udp);
    ASSERT_TRUE(pkt.ok());
    transport::Qp* to = dst.find_qp(pkt->bth().dest_qpn());
    ASSERT_NE(to, nullptr);
    transport::PacketInfo info;
    info.src = src.local_ip();
    info.src_port = tx.av.udp_sport;
    to->handle_packet(now_, *pkt, info);
  }
  Device* devs_[2];
  Instant now_ = Instant::from_ns(1'000'000);
};

struct Side {
  explicit Side(const wire::IpAddress& ip)
      : f([&] {
          DeviceConfig c = test_config(ip.bytes[3]);
          c.ip = ip;
          return c;
        }()) {
    buf.resize(4096);
    mr = *f.dev->reg_mr(f.pd, buf.data(), buf.size(),
                        kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
  }
  std::vector<Wc> poll() {
    Wc out[16];
    auto n = f.dev->poll_cq(f.cq, out);
    EXPECT_TRUE(n.ok());
    return std::vector<Wc>(out, out + (n.ok() ? *n : 0));
  }
  Fixture f;
  std::vector<std::byte> buf;
  MrInfo mr;
};

// Creates an RC QP on each side and connects them (RESET -> RTS); a's QP signals all WRs.
std::pair<QpInfo, QpInfo> connect_rc(Side& a, Side& b) {
  QpInitAttr ia = a.f.init(QpType::kRc);
  ia.sq_sig_all = true;
  QpInfo qa = *a.f.dev->create_qp(a.f.pd, ia);
  QpInfo qb = b.f.create(QpType::kRc);
  QpAttr to_b = good_attr(qb.qp_num);
  QpAttr to_a = good_attr(qa.qp_num);
  to_a.ah_attr = ah_to(a.f.dev->local_ip());
  std::swap(to_a.rq_psn, to_a.sq_psn);
  a.f.drive(qa.handle, QpType::kRc, QpState::kInit);
  b.f.drive(qb.handle, QpType::kRc, QpState::kInit);
  EXPECT_EQ(a.f.to(qa.handle, QpType::kRc, QpState::kRtr, to_b), Errc::kOk);
  EXPECT_EQ(a.f.to(qa.handle, QpType::kRc, QpState::kRts, to_b), Errc::kOk);
  EXPECT_EQ(b.f.to(qb.handle, QpType::kRc, QpState::kRtr, to_a), Errc::kOk);
  EXPECT_EQ(b.f.to(qb.handle, QpType::kRc, QpState::kRts, to_a), Errc::kOk);
  return {qa, qb};
}

TEST(QpTraffic, RcSendWriteAndReadBetweenTwoDevices) {
  Side a(kIpA), b(kIpB);
  const auto [qa, qb] = connect_rc(a, b);

  std::memcpy(a.buf.data(), "hello, rxe", 10);
  std::memcpy(b.buf.data() + 2048, "remote data", 11);
  Sge recv_sge{b.mr.iova, 64, b.mr.lkey};
  RecvWr rwr{7, {&recv_sge, 1}};
  ASSERT_EQ(b.f.dev->post_recv(qb.handle, {&rwr, 1}, nullptr), Errc::kOk);

  Sge send_sge{a.mr.iova, 10, a.mr.lkey};
  Sge read_sge{a.mr.iova + 512, 11, a.mr.lkey};
  SendWr wrs[3];
  wrs[0].wr_id = 1;  // unsignaled, but the QP signals all
  wrs[0].sg_list = {&send_sge, 1};
  wrs[1].wr_id = 2;
  wrs[1].opcode = WrOpcode::kRdmaWrite;
  wrs[1].sg_list = {&send_sge, 1};
  wrs[1].rdma = {b.mr.iova + 1024, b.mr.rkey};
  wrs[2].wr_id = 3;
  wrs[2].opcode = WrOpcode::kRdmaRead;
  wrs[2].sg_list = {&read_sge, 1};
  wrs[2].rdma = {b.mr.iova + 2048, b.mr.rkey};
  ASSERT_EQ(a.f.dev->post_send(qa.handle, wrs, nullptr), Errc::kOk);

  Wire w(*a.f.dev, *b.f.dev);
  w.run();

  const auto b_wcs = b.poll();
  ASSERT_EQ(b_wcs.size(), 1u);
  EXPECT_EQ(b_wcs[0].wr_id, 7u);
  EXPECT_EQ(b_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(b_wcs[0].opcode, WcOpcode::kRecv);
  EXPECT_EQ(b_wcs[0].byte_len, 10u);
  EXPECT_EQ(std::memcmp(b.buf.data(), "hello, rxe", 10), 0);
  EXPECT_EQ(std::memcmp(b.buf.data() + 1024, "hello, rxe", 10), 0);
  EXPECT_EQ(std::memcmp(a.buf.data() + 512, "remote data", 11), 0);
  const auto a_wcs = a.poll();
  ASSERT_EQ(a_wcs.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a_wcs[i].wr_id, i + 1);
    EXPECT_EQ(a_wcs[i].status, WcStatus::kSuccess);
  }
  EXPECT_EQ(a_wcs[2].opcode, WcOpcode::kRdmaRead);
  // Every packet of the connection carries the port rxe derives from the two QPNs.
  ASSERT_FALSE(w.sports.empty());
  for (std::uint16_t p : w.sports) {
    EXPECT_EQ(p, verbs::connected_udp_sport(0, qa.qp_num, qb.qp_num));  // lqpn*rqpn: symmetric
  }
}

TEST(QpTraffic, RcWriteToAMissingKeyIsRefusedByTheResolver) {
  Side a(kIpA), b(kIpB);
  const auto [qa, qb] = connect_rc(a, b);
  const std::uint32_t stale_rkey = b.mr.rkey;
  ASSERT_EQ(b.f.dev->dereg_mr(b.mr.handle), Errc::kOk);
  Sge sge{a.mr.iova, 8, a.mr.lkey};
  SendWr wr;
  wr.wr_id = 9;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.send_flags = kSendSignaled;
  wr.sg_list = {&sge, 1};
  wr.rdma = {b.mr.iova, stale_rkey};
  ASSERT_EQ(a.f.dev->post_send(qa.handle, {&wr, 1}, nullptr), Errc::kOk);
  Wire(*a.f.dev, *b.f.dev).run();
  const auto a_wcs = a.poll();
  ASSERT_FALSE(a_wcs.empty());
  EXPECT_EQ(a_wcs[0].wr_id, 9u);
  EXPECT_EQ(a_wcs[0].status, WcStatus::kRemAccessErr);
  // The responder reported it as an access error on its QP.
  auto ev = b.f.dev->get_async_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->type, AsyncEventType::kQpAccessErr);
  EXPECT_EQ(ev->qp, qb.handle);
}

// ibv_rereg_mr moves the MR to another PD: the next WRITE naming its unchanged rkey comes from
// a QP of the old PD and is NAKed Remote Access Error (the requester's WQE completes with
// REM_ACCESS_ERR); a WRITE before the change is placed.
TEST(QpTraffic, RcWriteAfterReregToAnotherPdIsARemoteAccessError) {
  Side a(kIpA), b(kIpB);
  const auto [qa, qb] = connect_rc(a, b);
  std::memcpy(a.buf.data(), "before!!", 8);
  Sge sge{a.mr.iova, 8, a.mr.lkey};
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.send_flags = kSendSignaled;
  wr.sg_list = {&sge, 1};
  wr.rdma = {b.mr.iova, b.mr.rkey};
  ASSERT_EQ(a.f.dev->post_send(qa.handle, {&wr, 1}, nullptr), Errc::kOk);
  Wire(*a.f.dev, *b.f.dev).run();
  auto a_wcs = a.poll();
  ASSERT_EQ(a_wcs.size(), 1u);
  EXPECT_EQ(a_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(b.buf.data(), "before!!", 8), 0);

  PdHandle other = *b.f.dev->alloc_pd();
  auto r = b.f.dev->rereg_mr(b.mr.handle, kReregPd, other, nullptr, 0, 0);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->rkey, b.mr.rkey);
  std::memcpy(a.buf.data(), "after!!!", 8);
  wr.wr_id = 2;
  ASSERT_EQ(a.f.dev->post_send(qa.handle, {&wr, 1}, nullptr), Errc::kOk);
  Wire(*a.f.dev, *b.f.dev).run();
  a_wcs = a.poll();
  ASSERT_FALSE(a_wcs.empty());
  EXPECT_EQ(a_wcs[0].wr_id, 2u);
  EXPECT_EQ(a_wcs[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(std::memcmp(b.buf.data(), "before!!", 8), 0);
  auto ev = b.f.dev->get_async_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->type, AsyncEventType::kQpAccessErr);
}

// rdma-core's test_mr_rereg_pd over two devices: after a SEND whose receive WQE names a region
// now in another PD (the responder: LOC_PROT_ERR and NAK Remote Operational Error, rxe's
// class A; the requester: REM_OP_ERR first, then its receive flushed), the application reads
// only that first completion, moves both QPs through RESET back to RTS and sends again. The
// first completion on each side is then the new traffic's: RESET took the failed run's
// leftovers (the flushes, the responder's error) out of the CQs.
TEST(QpTraffic, AfterAFailedSendResetLeavesNoStaleCompletionsForTheNextTraffic) {
  Side a(kIpA), b(kIpB);
  const auto [qa, qb] = connect_rc(a, b);
  Sge a_recv{a.mr.iova + 1024, 64, a.mr.lkey};
  Sge b_recv{b.mr.iova, 64, b.mr.lkey};
  RecvWr arwr{10, {&a_recv, 1}};
  RecvWr brwr{20, {&b_recv, 1}};
  ASSERT_EQ(a.f.dev->post_recv(qa.handle, {&arwr, 1}, nullptr), Errc::kOk);
  ASSERT_EQ(b.f.dev->post_recv(qb.handle, {&brwr, 1}, nullptr), Errc::kOk);
  ASSERT_EQ(b.f.dev->post_recv(qb.handle, {&brwr, 1}, nullptr), Errc::kOk);
  const PdHandle other = *b.f.dev->alloc_pd();
  ASSERT_TRUE(b.f.dev->rereg_mr(b.mr.handle, kReregPd, other, nullptr, 0, 0).ok());
  Sge sge{a.mr.iova, 8, a.mr.lkey};
  SendWr wr;
  wr.wr_id = 1;
  wr.sg_list = {&sge, 1};
  ASSERT_EQ(a.f.dev->post_send(qa.handle, {&wr, 1}, nullptr), Errc::kOk);
  Wire(*a.f.dev, *b.f.dev).run();
  Wc first;
  auto n = a.f.dev->poll_cq(a.f.cq, {&first, 1});
  ASSERT_TRUE(n.ok() && *n == 1u);
  EXPECT_EQ(first.wr_id, 1u);
  EXPECT_EQ(first.status, WcStatus::kRemOpErr);

  ASSERT_TRUE(b.f.dev->rereg_mr(b.mr.handle, kReregPd, b.f.pd, nullptr, 0, 0).ok());
  for (Side* s : {&a, &b}) {
    const QpHandle q = s == &a ? qa.handle : qb.handle;
    ASSERT_EQ(s->f.to(q, QpType::kRc, QpState::kReset), Errc::kOk);
  }
  QpAttr to_b = good_attr(qb.qp_num);
  QpAttr to_a = good_attr(qa.qp_num);
  to_a.ah_attr = ah_to(a.f.dev->local_ip());
  std::swap(to_a.rq_psn, to_a.sq_psn);
  for (QpState st : {QpState::kInit, QpState::kRtr, QpState::kRts}) {
    ASSERT_EQ(a.f.to(qa.handle, QpType::kRc, st, to_b), Errc::kOk);
    ASSERT_EQ(b.f.to(qb.handle, QpType::kRc, st, to_a), Errc::kOk);
  }
  brwr.wr_id = 21;
  ASSERT_EQ(b.f.dev->post_recv(qb.handle, {&brwr, 1}, nullptr), Errc::kOk);
  wr.wr_id = 2;
  ASSERT_EQ(a.f.dev->post_send(qa.handle, {&wr, 1}, nullptr), Errc::kOk);
  Wire(*a.f.dev, *b.f.dev).run();
  for (const auto& [side, id] : {std::pair{&a, 2u}, std::pair{&b, 21u}}) {
    const auto wcs = side->poll();  // the new traffic's completion, and nothing else
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].wr_id, id);
    EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  }
}

// SEND with Invalidate naming an ordinary MR (IBTA o10-37; rxe_invalidate_mr() refuses any MR
// but a fast-register one): the responder NAKs Invalid Request, its receive WQE completes with
// REM_INV_REQ_ERR and its QP enters the error state (class C); the requester's WQE completes
// with REM_INV_REQ_ERR. The MR stays valid: another QP pair WRITEs into it afterwards.
TEST(QpTraffic, SendWithInvalidateOfAnOrdinaryMrIsAnInvalidRequestAndTheMrStaysValid) {
  Side a(kIpA), b(kIpB);
  const auto [qa, qb] = connect_rc(a, b);
  const MrInfo victim =
      *b.f.dev->reg_mr(b.f.pd, b.buf.data() + 2048, 1024, kAccessLocalWrite | kAccessRemoteWrite);
  Sge recv_sge{b.mr.iova, 64, b.mr.lkey};
  RecvWr rwr{7, {&recv_sge, 1}};
  ASSERT_EQ(b.f.dev->post_recv(qb.handle, {&rwr, 1}, nullptr), Errc::kOk);
  std::memcpy(a.buf.data(), "invalidate", 10);
  Sge sge{a.mr.iova, 10, a.mr.lkey};
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::kSendWithInv;
  wr.sg_list = {&sge, 1};
  wr.invalidate_rkey = victim.rkey;
  ASSERT_EQ(a.f.dev->post_send(qa.handle, {&wr, 1}, nullptr), Errc::kOk);
  Wire(*a.f.dev, *b.f.dev).run();

  const auto a_wcs = a.poll();
  ASSERT_EQ(a_wcs.size(), 1u);
  EXPECT_EQ(a_wcs[0].wr_id, 1u);
  EXPECT_EQ(a_wcs[0].status, WcStatus::kRemInvReqErr);
  EXPECT_EQ(a.f.state(qa.handle), QpState::kErr);
  const auto b_wcs = b.poll();
  ASSERT_EQ(b_wcs.size(), 1u);
  EXPECT_EQ(b_wcs[0].wr_id, 7u);
  EXPECT_EQ(b_wcs[0].status, WcStatus::kRemInvReqErr);
  EXPECT_EQ(b.f.state(qb.handle), QpState::kErr);
  auto ev = b.f.dev->get_async_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->type, AsyncEventType::kQpReqErr);
  EXPECT_EQ(ev->qp, qb.handle);

  // The region is as valid as before: a new pair WRITEs into it through its rkey.
  const auto [qa2, qb2] = connect_rc(a, b);
  SendWr write;
  write.wr_id = 2;
  write.opcode = WrOpcode::kRdmaWrite;
  write.sg_list = {&sge, 1};
  write.rdma = {victim.iova + 100, victim.rkey};
  ASSERT_EQ(a.f.dev->post_send(qa2.handle, {&write, 1}, nullptr), Errc::kOk);
  Wire(*a.f.dev, *b.f.dev).run();
  const auto a2_wcs = a.poll();
  ASSERT_EQ(a2_wcs.size(), 1u);
  EXPECT_EQ(a2_wcs[0].wr_id, 2u);
  EXPECT_EQ(a2_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(b.buf.data() + 2048 + 100, "invalidate", 10), 0);
}

// LOCAL_INV of an ordinary MR: only fast-register MRs and type 2 windows can be invalidated, so
// it fails when it executes (rxe_do_local_ops(): IBV_WC_LOC_QP_OP_ERR, the QP to error), after
// the WRITE before it completed; the region stays valid.
TEST(QpPost, LocalInvalidateOfAnOrdinaryMrFailsTheQp) {
  Side a(kIpA), b(kIpB);
  const auto [qa, qb] = connect_rc(a, b);
  Sge sge{a.mr.iova, 4, a.mr.lkey};
  SendWr wrs[2];
  wrs[0].wr_id = 1;
  wrs[0].opcode = WrOpcode::kRdmaWrite;
  wrs[0].sg_list = {&sge, 1};
  wrs[0].rdma = {b.mr.iova, b.mr.rkey};
  wrs[1].wr_id = 2;
  wrs[1].opcode = WrOpcode::kLocalInv;
  wrs[1].invalidate_rkey = a.mr.rkey;
  ASSERT_EQ(a.f.dev->post_send(qa.handle, wrs, nullptr), Errc::kOk);
  Wire(*a.f.dev, *b.f.dev).run();
  const auto a_wcs = a.poll();
  ASSERT_EQ(a_wcs.size(), 2u);
  EXPECT_EQ(a_wcs[0].wr_id, 1u);
  EXPECT_EQ(a_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(a_wcs[1].wr_id, 2u);
  EXPECT_EQ(a_wcs[1].status, WcStatus::kLocQpOpErr);
  EXPECT_EQ(a_wcs[1].opcode, WcOpcode::kLocalInv);
  EXPECT_EQ(a.f.state(qa.handle), QpState::kErr);
  const std::uint32_t pd_id =
      DeviceTestAccess::state(*a.f.dev).pds.get(verbs::detail::to_raw(a.f.pd))->id;
  EXPECT_TRUE(a.f.dev->memory().resolve(pd_id, 0, a.mr.lkey, false, a.mr.iova, 4, 0).ok());
}

TEST(QpTraffic, UdSendThroughAnAhWithTheQpsPortAndTheSrqLimitEvent) {
  Side a(kIpA), b(kIpB);
  QpInfo qa = a.f.create(QpType::kUd);
  QpInitAttr ib = b.f.init(QpType::kUd);
  SrqHandle srq = b.f.dev->create_srq(b.f.pd, SrqAttr{7, 1, 0})->handle;
  ib.srq = srq;
  QpInfo qb = *b.f.dev->create_qp(b.f.pd, ib);
  a.f.drive(qa.handle, QpType::kUd, QpState::kRts);
  b.f.drive(qb.handle, QpType::kUd, QpState::kRts);
  Sge rsge[2] = {{b.mr.iova, 256, b.mr.lkey}, {b.mr.iova + 256, 256, b.mr.lkey}};
  RecvWr rwrs[2] = {{1, {&rsge[0], 1}}, {2, {&rsge[1], 1}}};
  ASSERT_EQ(b.f.dev->post_srq_recv(srq, rwrs, nullptr), Errc::kOk);
  ASSERT_EQ(b.f.dev->modify_srq(srq, SrqAttr{0, 0, 2}, kSrqLimit), Errc::kOk);

  AhHandle ah = *a.f.dev->create_ah(a.f.pd, ah_to(kIpB));
  Sge sge{a.mr.iova, 32, a.mr.lkey};
  SendWr wr;
  wr.wr_id = 5;
  wr.send_flags = kSendSignaled;
  wr.sg_list = {&sge, 1};
  wr.ud = {ah, qb.qp_num, 0x11111111};
  ASSERT_EQ(a.f.dev->post_send(qa.handle, {&wr, 1}, nullptr), Errc::kOk);
  Wire w(*a.f.dev, *b.f.dev);
  w.run();

  const auto b_wcs = b.poll();
  ASSERT_EQ(b_wcs.size(), 1u);
  EXPECT_EQ(b_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(b_wcs[0].src_qp, qa.qp_num);
  EXPECT_EQ(b_wcs[0].byte_len, 32u + transport::kGrhBytes);
  ASSERT_EQ(w.sports.size(), 1u);
  EXPECT_EQ(w.sports[0], verbs::rxe_default_udp_sport(qa.qp_num));  // flow label 0: the QP's
  // One of two receive WQEs used: below the limit of 2.
  auto ev = b.f.dev->get_async_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->type, AsyncEventType::kSrqLimitReached);
  EXPECT_EQ(ev->srq, srq);
  EXPECT_FALSE(b.f.dev->has_async_event());
}

// ---- memory windows (rxe_mw.c) ----

// b's side of the window tests: a region that windows may be bound to, on b's QP.
struct WindowSide {
  explicit WindowSide(Side& s)
      : side(s),
        mr(*s.f.dev->reg_mr(s.f.pd, s.buf.data(), s.buf.size(),
                            kAccessLocalWrite | kAccessRemoteWrite | kAccessMwBind)) {}
  // Posts a signaled BIND_MW of a type 2 window on `qp` and runs the wire.
  void bind2(QpHandle qp, const MwInfo& mw, std::uint32_t new_rkey, std::uint64_t offset,
             std::uint64_t length, std::uint32_t access) {
    SendWr wr;
    wr.wr_id = 0xb1;
    wr.opcode = WrOpcode::kBindMw;
    wr.send_flags = kSendSignaled;
    wr.bind_mw.mw = mw.handle;
    wr.bind_mw.rkey = new_rkey;
    wr.bind_mw.bind_info = MwBindInfo{mr.handle, mr.iova + offset, length, access};
    ASSERT_EQ(side.f.dev->post_send(qp, {&wr, 1}, nullptr), Errc::kOk);
  }
  Side& side;
  MrInfo mr;
};

// Two connected sides, b with a region windows may be bound to and a window of `type`.
struct WindowPair {
  explicit WindowPair(MwType type) : w(b), mw(*b.f.dev->alloc_mw(b.f.pd, type)) {
    std::tie(qa, qb) = connect_rc(a, b);
  }
  Side a{kIpA}, b{kIpB};
  QpInfo qa, qb;
  WindowSide w;
  MwInfo mw;
};

// a WRITEs `len` bytes at `va` under `rkey` on qa; the status of its completion.
WcStatus write_through(Side& a, Side& b, QpHandle qa, std::uint64_t va, std::uint32_t rkey,
                       std::uint32_t len) {
  Sge sge{a.mr.iova, len, a.mr.lkey};
  SendWr wr;
  wr.wr_id = 0x77;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.sg_list = {&sge, 1};
  wr.rdma = {va, rkey};
  EXPECT_EQ(a.f.dev->post_send(qa, {&wr, 1}, nullptr), Errc::kOk);
  Wire(*a.f.dev, *b.f.dev).run();
  const auto wcs = a.poll();
  EXPECT_EQ(wcs.size(), 1u);
  return wcs.empty() ? WcStatus::kGeneralErr : wcs.back().status;
}

// Hands a forged request to QP `qpn` of `dst` (from `src`, UDP port `sport`: the peer's, once the
// QP has learned it) and returns the headers of everything the QP answers with.
std::vector<wire::TransportHeaders> forge(Device& dst, std::uint32_t qpn,
                                          const wire::IpAddress& src,
                                          const wire::TransportHeaders& h, ConstBytes payload,
                                          std::uint16_t sport = 4791) {
  const wire::OpcodeInfo& op = wire::opcode_info(static_cast<wire::Opcode>(h.bth.opcode));
  std::vector<std::byte> udp(wire::roce_size(op, payload.size()));
  wire::write_roce(udp, h, payload);
  auto pkt = wire::parse_roce(udp);
  EXPECT_TRUE(pkt.ok());
  std::vector<wire::TransportHeaders> out;
  transport::Qp* qp = dst.find_qp(qpn);
  if (!pkt.ok() || qp == nullptr) return out;
  transport::PacketInfo info;
  info.src = src;
  info.src_port = sport;
  const Instant now = Instant::from_ns(5'000'000);
  qp->handle_packet(now, *pkt, info);
  transport::TxPacket tx;
  while (qp->poll_transmit(now, tx)) {
    std::vector<std::byte> bytes(tx.header_span().begin(), tx.header_span().end());
    for (ConstBytes piece : tx.payload()) bytes.insert(bytes.end(), piece.begin(), piece.end());
    bytes.resize(bytes.size() + wire::pad_for(tx.payload_bytes) + wire::kIcrcBytes);
    auto answer = wire::parse_roce(bytes);
    EXPECT_TRUE(answer.ok());
    if (answer.ok()) out.push_back(wire::decode_headers(*answer));
  }
  return out;
}

// A forged RDMA WRITE Only of 8 bytes at the responder's next PSN (0x100: connect_rc swaps the
// PSNs of good_attr for b).
wire::TransportHeaders forged_write(std::uint32_t dest_qpn, std::uint64_t va, std::uint32_t rkey,
                                    std::uint32_t psn = 0x100) {
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcRdmaWriteOnly);
  h.bth.dest_qpn = dest_qpn;
  h.bth.psn = psn;
  h.bth.ack_req = true;
  h.reth = wire::Reth{va, rkey, 8};
  return h;
}

const std::array<std::byte, 8> kEight{};  // a forged WRITE's payload

bool is_nak(const std::vector<wire::TransportHeaders>& answers, wire::NakCode code) {
  return answers.size() == 1 &&
         answers[0].bth.opcode == static_cast<std::uint8_t>(wire::Opcode::kRcAcknowledge) &&
         wire::aeth_type(answers[0].aeth.syndrome) == wire::AethType::kNak &&
         wire::aeth_value(answers[0].aeth.syndrome) == static_cast<std::uint8_t>(code);
}

TEST(MemoryWindow, AllocGivesAKeyOfItsOwnAndHoldsThePd) {
  Side b(kIpB);
  Device& dev = *b.f.dev;
  const MwInfo w1 = *dev.alloc_mw(b.f.pd, MwType::kType1);
  const MwInfo w2 = *dev.alloc_mw(b.f.pd, MwType::kType2);
  EXPECT_EQ(w1.type, MwType::kType1);
  EXPECT_EQ(w2.type, MwType::kType2);
  EXPECT_NE(w1.rkey >> 8, w2.rkey >> 8);
  EXPECT_NE(w1.rkey >> 8, b.mr.rkey >> 8);
  EXPECT_EQ(dev.alloc_mw(PdHandle{}, MwType::kType1).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev.alloc_mw(b.f.pd, static_cast<MwType>(3)).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev.dereg_mr(b.mr.handle), Errc::kOk);
  EXPECT_EQ(dev.dealloc_pd(b.f.pd), Errc::kBusy);  // the windows hold it
  EXPECT_EQ(dev.dealloc_mw(w1.handle), Errc::kOk);
  EXPECT_EQ(dev.dealloc_mw(w1.handle), Errc::kInvalidArgument);
  EXPECT_EQ(dev.query_mw(w2.handle)->rkey, w2.rkey);
  EXPECT_EQ(dev.dealloc_mw(w2.handle), Errc::kOk);
  EXPECT_EQ(dev.dealloc_pd(b.f.pd), Errc::kOk);
  // Unbound windows grant nothing.
  EXPECT_FALSE(dev.memory().resolve(1, 0, w2.rkey, true, 0, 1, 0).ok());
}

// Type 1: ibv_bind_mw posts a BIND_MW and returns the key with its byte incremented; a WRITE
// through the window lands, one that runs past the window's end (still inside the region) is a
// remote access error, and so is the old key.
TEST(MemoryWindow, Type1BindThenAccessIsCheckedAgainstTheWindow) {
  WindowPair p(MwType::kType1);
  auto& [a, b, qa, qb, w, mw] = p;
  auto rkey = b.f.dev->bind_mw(qb.handle, mw.handle, 0x51, kSendSignaled,
                               MwBindInfo{w.mr.handle, w.mr.iova + 1024, 512, kAccessRemoteWrite});
  ASSERT_TRUE(rkey.ok());
  EXPECT_EQ(*rkey, (mw.rkey & ~0xffu) | ((mw.rkey + 1) & 0xffu));
  Wire(*a.f.dev, *b.f.dev).run();
  const auto bound = b.poll();
  ASSERT_EQ(bound.size(), 1u);
  EXPECT_EQ(bound[0].wr_id, 0x51u);
  EXPECT_EQ(bound[0].opcode, WcOpcode::kBindMw);
  EXPECT_EQ(bound[0].status, WcStatus::kSuccess);
  EXPECT_EQ(b.f.dev->query_mw(mw.handle)->rkey, *rkey);

  std::memcpy(a.buf.data(), "windowed", 8);
  EXPECT_EQ(write_through(a, b, qa.handle, w.mr.iova + 1024 + 504, *rkey, 8), WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(b.buf.data() + 1024 + 504, "windowed", 8), 0);
  // Bound windows keep their region registered (rxe_dereg_mr: -EINVAL).
  EXPECT_EQ(b.f.dev->dereg_mr(w.mr.handle), Errc::kInvalidArgument);
  EXPECT_EQ(write_through(a, b, qa.handle, w.mr.iova + 1024 + 505, *rkey, 8),
            WcStatus::kRemAccessErr);
}

TEST(MemoryWindow, Type1WrongKeyAndWrongAccessAreRemoteAccessErrors) {
  WindowPair p(MwType::kType1);
  auto& [a, b, qa, qb, w, mw] = p;
  const std::uint32_t rkey = *b.f.dev->bind_mw(
      qb.handle, mw.handle, 1, 0, MwBindInfo{w.mr.handle, w.mr.iova, 256, kAccessRemoteRead});
  Wire(*a.f.dev, *b.f.dev).run();
  // A read-only window refuses a WRITE: a forged one gets NAK Remote Access Error.
  EXPECT_TRUE(
      is_nak(forge(*b.f.dev, qb.qp_num, kIpA, forged_write(qb.qp_num, w.mr.iova, rkey), kEight),
             wire::NakCode::kRemoteAccessError));
  (void)qa;
}

TEST(MemoryWindow, Type1OldKeyIsRefused) {
  WindowPair p(MwType::kType1);
  auto& [a, b, qa, qb, w, mw] = p;
  const MwBindInfo bind{w.mr.handle, w.mr.iova, 256, kAccessRemoteWrite};
  const std::uint32_t first = *b.f.dev->bind_mw(qb.handle, mw.handle, 1, 0, bind);
  const std::uint32_t second = *b.f.dev->bind_mw(qb.handle, mw.handle, 2, 0, bind);
  EXPECT_NE(first, second);
  Wire(*a.f.dev, *b.f.dev).run();
  EXPECT_EQ(b.f.dev->query_mw(mw.handle)->rkey, second);
  EXPECT_EQ(write_through(a, b, qa.handle, w.mr.iova, first, 8), WcStatus::kRemAccessErr);
}

// An unbind (length 0) of a type 1 window: its key grants nothing after it, and the region can
// be deregistered.
TEST(MemoryWindow, Type1UnbindReleasesTheRegion) {
  WindowPair p(MwType::kType1);
  auto& [a, b, qa, qb, w, mw] = p;
  const std::uint32_t rkey = *b.f.dev->bind_mw(
      qb.handle, mw.handle, 1, 0, MwBindInfo{w.mr.handle, w.mr.iova, 256, kAccessRemoteWrite});
  const std::uint32_t unbound = *b.f.dev->bind_mw(qb.handle, mw.handle, 2, 0, MwBindInfo{});
  Wire(*a.f.dev, *b.f.dev).run();
  EXPECT_FALSE(b.f.dev->memory().resolve(1, qb.qp_num, rkey, true, w.mr.iova, 8, 0).ok());
  EXPECT_FALSE(b.f.dev->memory().resolve(1, qb.qp_num, unbound, true, w.mr.iova, 8, 0).ok());
  EXPECT_EQ(b.f.dev->dereg_mr(w.mr.handle), Errc::kOk);
  (void)qa;
}

// ibv_bind_mw's own checks (rdma-core's rxe provider): type 1 only, no range without a region,
// no zero-based window, the region in the window's PD.
TEST(MemoryWindow, BindMwChecksItsArguments) {
  Side b(kIpB);
  QpInfo q = b.f.create(QpType::kRc);
  b.f.drive(q.handle, QpType::kRc, QpState::kRts);
  WindowSide w(b);
  const MwInfo t1 = *b.f.dev->alloc_mw(b.f.pd, MwType::kType1);
  const MwInfo t2 = *b.f.dev->alloc_mw(b.f.pd, MwType::kType2);
  const MwBindInfo good{w.mr.handle, w.mr.iova, 64, kAccessRemoteRead};
  EXPECT_EQ(b.f.dev->bind_mw(q.handle, t2.handle, 1, 0, good).error(), Errc::kInvalidArgument);
  EXPECT_EQ(b.f.dev->bind_mw(q.handle, t1.handle, 1, 0, MwBindInfo{{}, 0, 64, 0}).error(),
            Errc::kInvalidArgument);
  MwBindInfo zero_based = good;
  zero_based.access |= kAccessZeroBased;
  EXPECT_EQ(b.f.dev->bind_mw(q.handle, t1.handle, 1, 0, zero_based).error(),
            Errc::kInvalidArgument);
  const PdHandle other = *b.f.dev->alloc_pd();
  const MrInfo elsewhere =
      *b.f.dev->reg_mr(other, b.buf.data(), 64, kAccessLocalWrite | kAccessMwBind);
  EXPECT_EQ(
      b.f.dev
          ->bind_mw(q.handle, t1.handle, 1, 0, MwBindInfo{elsewhere.handle, elsewhere.iova, 64, 0})
          .error(),
      Errc::kPermission);
  EXPECT_EQ(b.f.dev->find_qp(q.qp_num)->outstanding_send_wqes(), 0u);  // none posted
}

// A bind the requester cannot execute (rxe_check_bind_mw): a region without MW_BIND, a range
// outside the region, a writable window on a region without local write. Each completes with
// IBV_WC_MW_BIND_ERR and puts the QP in error; the window stays unbound.
TEST(MemoryWindow, BadBindsCompleteWithMwBindErr) {
  struct Case {
    const char* what;
    std::uint32_t mr_access;
    std::uint64_t offset, length;
    std::uint32_t access;
  };
  const Case cases[] = {
      {"no MW_BIND", kAccessLocalWrite, 0, 64, kAccessRemoteRead},
      {"past the region", kAccessLocalWrite | kAccessMwBind, 4096 - 32, 64, kAccessRemoteRead},
      {"writable, no local write", kAccessMwBind, 0, 64, kAccessRemoteWrite},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Side b(kIpB);
    QpInfo q = b.f.create(QpType::kRc);
    b.f.drive(q.handle, QpType::kRc, QpState::kRts);
    const MrInfo mr = *b.f.dev->reg_mr(b.f.pd, b.buf.data(), b.buf.size(), c.mr_access);
    const MwInfo mw = *b.f.dev->alloc_mw(b.f.pd, MwType::kType2);
    SendWr wr;
    wr.wr_id = 9;
    wr.opcode = WrOpcode::kBindMw;
    wr.bind_mw.mw = mw.handle;
    wr.bind_mw.rkey = mw.rkey + 1;
    wr.bind_mw.bind_info = MwBindInfo{mr.handle, mr.iova + c.offset, c.length, c.access};
    ASSERT_EQ(b.f.dev->post_send(q.handle, {&wr, 1}, nullptr), Errc::kOk);
    Wire(*b.f.dev, *b.f.dev).run();
    const auto wcs = b.poll();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::kMwBindErr);
    EXPECT_EQ(wcs[0].opcode, WcOpcode::kBindMw);
    EXPECT_EQ(b.f.state(q.handle), QpState::kErr);
    EXPECT_EQ(b.f.dev->dereg_mr(mr.handle), Errc::kOk);  // nothing bound to it
  }
}

// Type 2: bound by a work request to the QP that posted it. The peer WRITEs through it; a SEND
// with Invalidate of its key completes the receive WITH_INV (the key in invalidated_rkey) and
// leaves the key granting nothing: a WRITE after it is a remote access error. The region can
// be deregistered then.
TEST(MemoryWindow, Type2BindWriteThenSendWithInvalidate) {
  WindowPair p(MwType::kType2);
  auto& [a, b, qa, qb, w, mw] = p;
  const std::uint32_t rkey = (mw.rkey & ~0xffu) | 0x5a;
  w.bind2(qb.handle, mw, rkey, 2048, 1024, kAccessRemoteWrite);
  Wire(*a.f.dev, *b.f.dev).run();
  const auto bound = b.poll();
  ASSERT_EQ(bound.size(), 1u);
  EXPECT_EQ(bound[0].status, WcStatus::kSuccess);
  EXPECT_EQ(bound[0].opcode, WcOpcode::kBindMw);
  EXPECT_EQ(b.f.dev->query_mw(mw.handle)->rkey, rkey);

  std::memcpy(a.buf.data(), "type two", 8);
  EXPECT_EQ(write_through(a, b, qa.handle, w.mr.iova + 2048, rkey, 8), WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(b.buf.data() + 2048, "type two", 8), 0);

  Sge recv_sge{w.mr.iova, 64, w.mr.lkey};
  RecvWr rwr{7, {&recv_sge, 1}};
  ASSERT_EQ(b.f.dev->post_recv(qb.handle, {&rwr, 1}, nullptr), Errc::kOk);
  Sge sge{a.mr.iova, 8, a.mr.lkey};
  SendWr inv;
  inv.wr_id = 3;
  inv.opcode = WrOpcode::kSendWithInv;
  inv.sg_list = {&sge, 1};
  inv.invalidate_rkey = rkey;
  ASSERT_EQ(a.f.dev->post_send(qa.handle, {&inv, 1}, nullptr), Errc::kOk);
  Wire(*a.f.dev, *b.f.dev).run();
  const auto a_wcs = a.poll();
  ASSERT_EQ(a_wcs.size(), 1u);
  EXPECT_EQ(a_wcs[0].status, WcStatus::kSuccess);
  const auto b_wcs = b.poll();
  ASSERT_EQ(b_wcs.size(), 1u);
  EXPECT_EQ(b_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(b_wcs[0].opcode, WcOpcode::kRecv);
  EXPECT_NE(b_wcs[0].wc_flags & kWcWithInv, 0u);
  EXPECT_EQ(b_wcs[0].imm_data, rkey);
  // Invalidated: a forged WRITE under the key is NAKed Remote Access Error.
  const std::uint32_t next_psn = 0x100 + 2;  // the WRITE and the SEND took 0x100 and 0x101
  EXPECT_TRUE(is_nak(
      forge(*b.f.dev, qb.qp_num, kIpA, forged_write(qb.qp_num, w.mr.iova + 2048, rkey, next_psn),
            kEight, a.f.dev->find_qp(qa.qp_num)->path().udp_sport),
      wire::NakCode::kRemoteAccessError));
  EXPECT_EQ(b.f.dev->dereg_mr(w.mr.handle), Errc::kOk);  // nothing bound to it any more
}

// A type 2 window bound on one QP is out of reach through another QP of the same PD, and a
// SEND with Invalidate through that other QP is an invalid request.
TEST(MemoryWindow, Type2WindowIsBoundToItsQp) {
  WindowPair p(MwType::kType2);
  auto& [a, b, qa, qb, w, mw] = p;
  const auto [qa2, qb2] = connect_rc(a, b);
  const std::uint32_t rkey = mw.rkey + 1;
  w.bind2(qb2.handle, mw, rkey, 0, 4096, kAccessRemoteWrite);  // bound to qb2
  Wire(*a.f.dev, *b.f.dev).run();
  ASSERT_EQ(b.poll().size(), 1u);
  EXPECT_TRUE(
      is_nak(forge(*b.f.dev, qb.qp_num, kIpA, forged_write(qb.qp_num, w.mr.iova, rkey), kEight),
             wire::NakCode::kRemoteAccessError));
  EXPECT_EQ(write_through(a, b, qa2.handle, w.mr.iova, rkey, 8), WcStatus::kSuccess);
  (void)qa;
}

// SEND with Invalidate of a key that names nothing: NAK Invalid Request.
TEST(MemoryWindow, SendWithInvalidateOfAnUnknownKeyIsAnInvalidRequest) {
  Side a(kIpA), b(kIpB);
  const auto [qa, qb] = connect_rc(a, b);
  Sge recv_sge{b.mr.iova, 64, b.mr.lkey};
  RecvWr rwr{7, {&recv_sge, 1}};
  ASSERT_EQ(b.f.dev->post_recv(qb.handle, {&rwr, 1}, nullptr), Errc::kOk);
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcSendOnlyInv);
  h.bth.dest_qpn = qb.qp_num;
  h.bth.psn = 0x100;
  h.bth.ack_req = true;
  h.ieth_rkey = 0xdead00ef;
  const std::array<std::byte, 4> payload{};
  EXPECT_TRUE(is_nak(forge(*b.f.dev, qb.qp_num, kIpA, h, payload), wire::NakCode::kInvalidRequest));
  (void)qa;
}

// LOCAL_INV: a type 2 window's key grants nothing after it; a type 1 window cannot be
// invalidated (o10-37.2.26): IBV_WC_LOC_QP_OP_ERR.
TEST(MemoryWindow, LocalInvalidateOfType2AndType1) {
  WindowPair p(MwType::kType2);
  auto& [a, b, qa, qb, w, mw] = p;
  const std::uint32_t rkey = mw.rkey + 1;
  w.bind2(qb.handle, mw, rkey, 0, 4096, kAccessRemoteWrite);
  SendWr inv;
  inv.wr_id = 0x11;
  inv.opcode = WrOpcode::kLocalInv;
  inv.send_flags = kSendSignaled;
  inv.invalidate_rkey = rkey;
  ASSERT_EQ(b.f.dev->post_send(qb.handle, {&inv, 1}, nullptr), Errc::kOk);
  Wire(*a.f.dev, *b.f.dev).run();
  const auto wcs = b.poll();
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[1].opcode, WcOpcode::kLocalInv);
  EXPECT_EQ(wcs[1].status, WcStatus::kSuccess);
  EXPECT_EQ(write_through(a, b, qa.handle, w.mr.iova, rkey, 8), WcStatus::kRemAccessErr);
  EXPECT_EQ(b.f.dev->dereg_mr(w.mr.handle), Errc::kOk);

  Side c(kIpB);
  QpInfo q = c.f.create(QpType::kRc);
  c.f.drive(q.handle, QpType::kRc, QpState::kRts);
  const MwInfo t1 = *c.f.dev->alloc_mw(c.f.pd, MwType::kType1);
  inv.invalidate_rkey = t1.rkey;
  ASSERT_EQ(c.f.dev->post_send(q.handle, {&inv, 1}, nullptr), Errc::kOk);
  Wire(*c.f.dev, *c.f.dev).run();
  const auto c_wcs = c.poll();
  ASSERT_EQ(c_wcs.size(), 1u);
  EXPECT_EQ(c_wcs[0].status, WcStatus::kLocQpOpErr);
}

// Destroying the QP a type 2 window is bound to leaves the window bound to nothing: the region
// can go, and a QP given the same number later reaches nothing.
TEST(MemoryWindow, DestroyingItsQpUnbindsAType2Window) {
  Side b(kIpB);
  QpInfo q = b.f.create(QpType::kRc);
  b.f.drive(q.handle, QpType::kRc, QpState::kRts);
  WindowSide w(b);
  const MwInfo mw = *b.f.dev->alloc_mw(b.f.pd, MwType::kType2);
  w.bind2(q.handle, mw, mw.rkey + 1, 0, 64, kAccessRemoteWrite);
  Wire(*b.f.dev, *b.f.dev).run();
  ASSERT_EQ(b.poll().size(), 1u);
  EXPECT_EQ(b.f.dev->dereg_mr(w.mr.handle), Errc::kInvalidArgument);
  EXPECT_EQ(b.f.dev->destroy_qp(q.handle), Errc::kOk);
  EXPECT_EQ(b.f.dev->dereg_mr(w.mr.handle), Errc::kOk);
}

}  // namespace
}  // namespace uroce

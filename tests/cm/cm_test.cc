// One or two CM endpoints fed crafted MADs with an explicit `now`: the happy paths, duplicates,
// stale MADs, every timeout, as cm.c answers them.
#include "cm/cm.h"

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <vector>

#include "kernel_rping.h"
#include "support/golden.h"
#include "wire/packet.h"

namespace uroce::cm {
namespace {

using wire::CmAttr;
using wire::CmRejReason;

constexpr std::uint64_t kService = wire::rdma_service_id(wire::RdmaPortSpace::kTcp, 7471);

CmPeer peer(std::uint8_t last) {
  CmPeer p;
  p.gid = wire::ipv4_mapped_gid(0x0a000000u | last);
  return p;
}

CmAttr attr_of(const CmOutMad& m) {
  return static_cast<CmAttr>(load_be16(m.mad, wire::kMadOffAttrId));
}

template <class M>
M message_of(const CmOutMad& m) {
  auto parsed = wire::parse_cm_mad(m.mad);
  UROCE_CHECK(parsed.ok());
  return std::get<M>(parsed->message);
}

// Two endpoints A (10.0.0.1) and B (10.0.0.2) and a wire between them that the test drives.
class CmPair : public ::testing::Test {
 protected:
  CmPair() : a_(config(1)), b_(config(2)) {}

  static CmConfig config(std::uint64_t seed) {
    CmConfig c;
    c.seed = seed;
    c.local_ca_guid = 0x0200000000000000ull + seed;
    return c;
  }

  // A peer that sends MRAs, as cma.c does for user-space IDs.
  static CmConfig mra_config(std::uint64_t seed) {
    CmConfig c = config(seed);
    c.send_mra = true;
    return c;
  }

  std::vector<CmOutMad> drain(CmEndpoint& e) {
    std::vector<CmOutMad> out;
    while (auto m = e.poll_transmit()) out.push_back(*m);
    return out;
  }
  std::vector<CmEvent> events(CmEndpoint& e) {
    std::vector<CmEvent> out;
    while (auto ev = e.poll_event()) out.push_back(*ev);
    return out;
  }
  // Delivers everything A and B have to send, both ways, until quiet; `keep` may drop a MAD.
  void pump(std::function<bool(const CmOutMad&, bool from_a)> keep = nullptr) {
    for (int round = 0; round < 32; ++round) {
      auto from_a = drain(a_);
      auto from_b = drain(b_);
      if (from_a.empty() && from_b.empty()) return;
      for (const auto& m : from_a) {
        if (!keep || keep(m, true)) (void)b_.handle_mad(now_, peer(1), m.mad);
      }
      for (const auto& m : from_b) {
        if (!keep || keep(m, false)) (void)a_.handle_mad(now_, peer(2), m.mad);
      }
    }
    FAIL() << "the CM did not go quiet";
  }

  // `mad` delivered to `e` again is a duplicate that `e` answers with `want` again, byte for byte.
  void expect_answered_again(CmEndpoint& e, const CmPeer& from, ConstBytes mad,
                             const CmOutMad& want) {
    EXPECT_EQ(e.handle_mad(now_, from, mad), CmRx::kDuplicate);
    auto again = drain(e);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].mad, want.mad);
  }

  // `e` learns that `gone` has no CM any more (an ICMP port unreachable from its host): it sends
  // nothing more, retransmits nothing, and reports one event, `want` for `id`; that event.
  CmEvent expect_ended_when_gone(CmEndpoint& e, const CmPeer& gone, CmEventType want, ConnId id) {
    e.handle_peer_unreachable(now_, gone);
    EXPECT_TRUE(drain(e).empty());
    EXPECT_FALSE(e.retransmitting());
    const auto evs = events(e);
    EXPECT_EQ(evs.size(), 1u);
    if (evs.empty()) return CmEvent{};
    EXPECT_EQ(evs[0].type, want);
    EXPECT_EQ(evs[0].id, id);
    return evs[0];
  }

  ConnectParams connect_params() {
    ConnectParams p;
    p.peer = peer(2);
    p.local_gid = peer(1).gid;
    p.service_id = kService;
    p.local_qpn = 0x11;
    p.starting_psn = 0xabcdef;
    p.responder_resources = 4;
    p.initiator_depth = 8;
    p.retry_count = 6;
    p.rnr_retry_count = 5;
    p.path_mtu = 3;
    return p;
  }
  AcceptParams accept_params() {
    AcceptParams p;
    p.local_qpn = 0x22;
    p.starting_psn = 0x123456;
    p.responder_resources = 16;  // clamped to the REQ's initiator depth (8)
    p.initiator_depth = 2;
    p.rnr_retry_count = 4;
    return p;
  }

  // Connects A to B up to B's REP (B accepted); returns (A's ID, B's ID).
  std::pair<ConnId, ConnId> up_to_rep(bool deliver_rep = true) {
    EXPECT_TRUE(b_.listen(kService).ok());
    const std::vector<std::byte> pd = {std::byte{1}, std::byte{2}, std::byte{3}};
    auto p = connect_params();
    p.private_data = pd;
    auto a_id = a_.connect(now_, p);
    EXPECT_TRUE(a_id.ok());
    pump();
    auto evs = events(b_);
    EXPECT_EQ(evs.size(), 1u);
    EXPECT_EQ(evs[0].type, CmEventType::kConnectRequest);
    EXPECT_EQ(evs[0].private_data_bytes, 92u);
    EXPECT_EQ(evs[0].private_data[2], 3);
    EXPECT_EQ(evs[0].offered_initiator_depth, 8);
    const ConnId b_id = evs[0].id;
    EXPECT_TRUE(b_.accept(now_, b_id, accept_params()).ok());
    if (deliver_rep) pump();
    return {*a_id, b_id};
  }

  std::pair<ConnId, ConnId> establish() {
    auto [a_id, b_id] = up_to_rep();
    auto evs = events(a_);
    EXPECT_EQ(evs.size(), 1u);
    EXPECT_EQ(evs[0].type, CmEventType::kConnectResponse);
    EXPECT_TRUE(a_.establish(now_, a_id).ok());
    pump();
    return {a_id, b_id};
  }

  Instant now_ = Instant::from_ns(1'000'000'000);
  CmEndpoint a_;
  CmEndpoint b_;
};

TEST_F(CmPair, ConnectNegotiatesMatchingQpAttributes) {
  auto [a_id, b_id] = up_to_rep();
  auto a_evs = events(a_);
  ASSERT_EQ(a_evs.size(), 1u);
  ASSERT_TRUE(a_.establish(now_, a_id).ok());
  pump();
  a_evs = events(a_);
  auto b_evs = events(b_);
  ASSERT_EQ(a_evs.size(), 1u);
  ASSERT_EQ(b_evs.size(), 1u);
  EXPECT_EQ(a_evs[0].type, CmEventType::kEstablished);
  EXPECT_EQ(b_evs[0].type, CmEventType::kEstablished);
  const QpAttributes& qa = a_evs[0].qp;
  const QpAttributes& qb = b_evs[0].qp;
  EXPECT_EQ(qa.local_qpn, 0x11u);
  EXPECT_EQ(qa.remote_qpn, 0x22u);
  EXPECT_EQ(qb.local_qpn, 0x22u);
  EXPECT_EQ(qb.remote_qpn, 0x11u);
  EXPECT_EQ(qa.sq_psn, qb.rq_psn);
  EXPECT_EQ(qa.rq_psn, qb.sq_psn);
  EXPECT_EQ(qb.max_dest_rd_atomic, 8);  // min(16, REQ initiator depth 8)
  EXPECT_EQ(qb.max_rd_atomic, 2);       // min(2, REQ responder resources 4)
  EXPECT_EQ(qa.max_rd_atomic, qb.max_dest_rd_atomic);
  EXPECT_EQ(qa.max_dest_rd_atomic, qb.max_rd_atomic);
  EXPECT_EQ(qa.path_mtu, 3);
  EXPECT_EQ(qb.path_mtu, 3);
  EXPECT_EQ(qa.retry_count, 6);
  EXPECT_EQ(qb.retry_count, 6);
  EXPECT_EQ(qa.rnr_retry, 4);
  EXPECT_EQ(qb.rnr_retry, 4);
  // cm_ack_timeout(15, 18) = 19 on both sides (rxe's ACK delay 15, IBoE lifetime 18).
  EXPECT_EQ(qa.ack_timeout, 19);
  EXPECT_EQ(qb.ack_timeout, 19);
  EXPECT_EQ(a_.poll_timeout(), Instant::never());
  EXPECT_EQ(b_.poll_timeout(), Instant::never());
}

TEST_F(CmPair, ReqCarriesTheKernelsTimeoutsAndRoceLids) {
  ASSERT_TRUE(a_.connect(now_, connect_params()).ok());
  auto out = drain(a_);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(attr_of(out[0]), CmAttr::kReq);
  const auto req = message_of<wire::CmReq>(out[0]);
  EXPECT_EQ(req.remote_cm_response_timeout, 20);
  EXPECT_EQ(req.local_cm_response_timeout, 20);
  EXPECT_EQ(req.max_cm_retries, 15);
  EXPECT_EQ(req.primary_local_lid, 0xffff);
  EXPECT_EQ(req.primary_remote_lid, 0xffff);
  EXPECT_EQ(req.service_id, kService);
  // 2 * 2^(18-8) + 2^(20-8) ms.
  EXPECT_EQ(a_.poll_timeout(), now_ + Duration::ms(2 * 1024 + 4096));
}

TEST_F(CmPair, NoListenerIsRejectedWithInvalidServiceId) {
  ASSERT_TRUE(a_.connect(now_, connect_params()).ok());
  pump();
  auto evs = events(a_);
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].type, CmEventType::kRejected);
  EXPECT_EQ(evs[0].reason, CmRejReason::kInvalidServiceId);
  EXPECT_EQ(a_.connection_count(), 0u);
  EXPECT_EQ(b_.connection_count(), 0u);
}

TEST_F(CmPair, ConsumerRejectReachesTheActiveSideAndAnswersARetransmittedReq) {
  ASSERT_TRUE(b_.listen(kService).ok());
  ASSERT_TRUE(a_.connect(now_, connect_params()).ok());
  auto req = drain(a_);
  ASSERT_EQ(b_.handle_mad(now_, peer(1), req[0].mad), CmRx::kAccepted);
  const ConnId b_id = events(b_)[0].id;
  const std::vector<std::byte> why = {std::byte{0x42}};
  ASSERT_TRUE(b_.reject(now_, b_id, why).ok());
  auto rej = drain(b_);
  ASSERT_EQ(rej.size(), 1u);
  ASSERT_EQ(attr_of(rej[0]), CmAttr::kRej);
  // The REQ again (the REJ was lost): the same REJ again.
  expect_answered_again(b_, peer(1), req[0].mad, rej[0]);
  ASSERT_EQ(a_.handle_mad(now_, peer(2), rej[0].mad), CmRx::kAccepted);
  auto evs = events(a_);
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].type, CmEventType::kRejected);
  EXPECT_EQ(evs[0].reason, CmRejReason::kConsumerDefined);
  EXPECT_EQ(evs[0].private_data[0], 0x42);
}

TEST_F(CmPair, RetransmittedReqGetsTheSameRep) {
  ASSERT_TRUE(b_.listen(kService).ok());
  ASSERT_TRUE(a_.connect(now_, connect_params()).ok());
  auto req = drain(a_);
  ASSERT_EQ(b_.handle_mad(now_, peer(1), req[0].mad), CmRx::kAccepted);
  // Before accept(), a duplicate is dropped (the user has the request).
  EXPECT_EQ(b_.handle_mad(now_, peer(1), req[0].mad), CmRx::kDuplicate);
  EXPECT_TRUE(drain(b_).empty());
  ASSERT_TRUE(b_.accept(now_, events(b_)[0].id, accept_params()).ok());
  auto rep = drain(b_);
  ASSERT_EQ(rep.size(), 1u);
  expect_answered_again(b_, peer(1), req[0].mad, rep[0]);
  EXPECT_EQ(b_.connection_count(), 1u);
}

TEST_F(CmPair, DuplicateRepGetsTheRtuAgain) {
  auto [a_id, b_id] = up_to_rep(false);
  auto rep = drain(b_);
  ASSERT_EQ(rep.size(), 1u);
  ASSERT_EQ(a_.handle_mad(now_, peer(2), rep[0].mad), CmRx::kAccepted);
  EXPECT_EQ(a_.handle_mad(now_, peer(2), rep[0].mad), CmRx::kDuplicate);  // before the RTU
  EXPECT_TRUE(drain(a_).empty());
  ASSERT_TRUE(a_.establish(now_, a_id).ok());
  auto rtu = drain(a_);
  ASSERT_EQ(rtu.size(), 1u);
  ASSERT_EQ(attr_of(rtu[0]), CmAttr::kRtu);
  expect_answered_again(a_, peer(2), rep[0].mad, rtu[0]);
  (void)b_id;
}

TEST_F(CmPair, ReqForAConnectionInTimewaitGetsStaleConnection) {
  auto [a_id, b_id] = establish();
  ASSERT_TRUE(a_.disconnect(now_, a_id, {}).ok());
  pump();
  for (const auto& e : events(b_)) {
    if (e.type == CmEventType::kDisconnected) {
      ASSERT_TRUE(b_.disconnect(now_, b_id, {}).ok());
    }
  }
  pump();
  (void)events(a_);
  // B is in timewait; A's old REQ shows up late.
  wire::CmReq req;
  req.local_comm_id = a_id.value;
  req.service_id = kService;
  req.local_qpn = 0x11;
  req.path_mtu = 3;
  auto bytes = wire::build_cm_mad(wire::CmMad{7, req});
  EXPECT_EQ(b_.handle_mad(now_, peer(1), bytes), CmRx::kDuplicate);
  auto out = drain(b_);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(attr_of(out[0]), CmAttr::kRej);
  const auto rej = message_of<wire::CmRej>(out[0]);
  EXPECT_EQ(rej.reason, static_cast<std::uint16_t>(CmRejReason::kStaleConn));
  EXPECT_EQ(rej.remote_comm_id, a_id.value);
}

TEST_F(CmPair, NewReqFromAConnectedQpIsStale) {
  auto [a_id, b_id] = establish();
  // Another REQ from A's QP 0x11, under a new communication ID, while B is connected to it.
  auto other = a_.connect(now_, connect_params());
  ASSERT_TRUE(other.ok());
  pump();
  bool rejected = false;
  for (const auto& e : events(a_)) {
    if (e.id == *other && e.type == CmEventType::kRejected) {
      EXPECT_EQ(e.reason, CmRejReason::kStaleConn);
      rejected = true;
    }
  }
  EXPECT_TRUE(rejected);
  EXPECT_EQ(b_.connection_count(), 1u);
  (void)a_id;
  (void)b_id;
}

TEST_F(CmPair, StaleMadsForUnknownIdsAreAnsweredAsCmDoes) {
  wire::CmRep rep;
  rep.local_comm_id = 0x1234;
  rep.remote_comm_id = 0x5678;
  EXPECT_EQ(a_.handle_mad(now_, peer(2), wire::build_cm_mad(wire::CmMad{1, rep})), CmRx::kAnswered);
  auto out = drain(a_);
  ASSERT_EQ(out.size(), 1u);
  const auto rej = message_of<wire::CmRej>(out[0]);
  EXPECT_EQ(rej.reason, static_cast<std::uint16_t>(CmRejReason::kInvalidCommId));
  EXPECT_EQ(rej.local_comm_id, 0x5678u);
  EXPECT_EQ(rej.remote_comm_id, 0x1234u);

  wire::CmDreq dreq;
  dreq.local_comm_id = 0x1234;
  dreq.remote_comm_id = 0x5678;
  EXPECT_EQ(a_.handle_mad(now_, peer(2), wire::build_cm_mad(wire::CmMad{2, dreq})),
            CmRx::kAnswered);
  out = drain(a_);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(attr_of(out[0]), CmAttr::kDrep);
  EXPECT_EQ(message_of<wire::CmDrep>(out[0]).remote_comm_id, 0x1234u);

  for (const wire::CmMessage& m : std::vector<wire::CmMessage>{
           wire::CmRtu{1, 2, {}}, wire::CmDrep{1, 2, {}}, wire::CmMra{1, 2, 0, 24, {}},
           wire::CmRej{}, wire::CmSidrRep{}}) {
    EXPECT_EQ(a_.handle_mad(now_, peer(2), wire::build_cm_mad(wire::CmMad{3, m})), CmRx::kDropped);
  }
  EXPECT_TRUE(drain(a_).empty());
  EXPECT_TRUE(events(a_).empty());
  EXPECT_EQ(a_.connection_count(), 0u);
}

TEST_F(CmPair, MalformedMadsAreCounted) {
  std::array<std::byte, 100> junk{};
  EXPECT_EQ(a_.handle_mad(now_, peer(2), junk), CmRx::kMalformed);
  auto m = wire::build_cm_mad(wire::CmMad{1, wire::CmRtu{}});
  m[2] = std::byte{1};
  EXPECT_EQ(a_.handle_mad(now_, peer(2), m), CmRx::kMalformed);
  EXPECT_EQ(a_.counters().rx_malformed, 2u);
}

TEST_F(CmPair, ReqRetriesFifteenTimesThenUnreachable) {
  ASSERT_TRUE(a_.connect(now_, connect_params()).ok());
  ASSERT_EQ(drain(a_).size(), 1u);
  int retransmits = 0;
  for (;;) {
    const Instant t = a_.poll_timeout();
    ASSERT_FALSE(t.is_never());
    EXPECT_EQ(t - now_, Duration::ms(6144));
    now_ = t;
    a_.handle_timeout(now_);
    auto out = drain(a_);
    ASSERT_EQ(out.size(), 1u);
    if (attr_of(out[0]) == CmAttr::kRej) {
      EXPECT_EQ(message_of<wire::CmRej>(out[0]).reason,
                static_cast<std::uint16_t>(CmRejReason::kTimeout));
      break;
    }
    ASSERT_EQ(attr_of(out[0]), CmAttr::kReq);
    ++retransmits;
  }
  EXPECT_EQ(retransmits, 15);
  auto evs = events(a_);
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].type, CmEventType::kUnreachable);
  EXPECT_EQ(a_.connection_count(), 0u);
}

TEST_F(CmPair, RepTimeoutRejectsAndTheActiveSideLeavesToo) {
  auto [a_id, b_id] = up_to_rep();
  ASSERT_TRUE(a_.establish(now_, a_id).ok());
  (void)drain(a_);  // every RTU is lost
  (void)events(a_);
  int reps = 0;
  while (!b_.poll_timeout().is_never()) {
    now_ = b_.poll_timeout();
    b_.handle_timeout(now_);
    for (const auto& m : drain(b_)) {
      if (attr_of(m) == CmAttr::kRep) ++reps;
      if (attr_of(m) == CmAttr::kRej) {
        EXPECT_EQ(a_.handle_mad(now_, peer(2), m.mad), CmRx::kAccepted);
      }
    }
    if (b_.connection_count() == 0) break;
  }
  EXPECT_EQ(reps, 15);
  auto b_evs = events(b_);
  ASSERT_EQ(b_evs.size(), 2u);
  EXPECT_EQ(b_evs[0].type, CmEventType::kUnreachable);
  EXPECT_EQ(b_evs[1].type, CmEventType::kTimewaitExit);
  auto a_evs = events(a_);
  ASSERT_EQ(a_evs.size(), 1u);
  EXPECT_EQ(a_evs[0].type, CmEventType::kDisconnected);
  (void)b_id;
}

TEST_F(CmPair, CommEstablishedBeforeTheRtu) {
  auto [a_id, b_id] = up_to_rep();
  ASSERT_TRUE(b_.handle_comm_established(now_, b_id).ok());
  auto evs = events(b_);
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].type, CmEventType::kEstablished);
  EXPECT_EQ(b_.poll_timeout(), Instant::never());
  ASSERT_TRUE(a_.establish(now_, a_id).ok());
  pump();
  EXPECT_TRUE(events(b_).empty());  // the late RTU is a duplicate
}

TEST_F(CmPair, MraStretchesTheReqTimer) {
  CmEndpoint b(mra_config(2));
  ASSERT_TRUE(b.listen(kService).ok());
  ASSERT_TRUE(a_.connect(now_, connect_params()).ok());
  auto req = drain(a_);
  ASSERT_EQ(b.handle_mad(now_, peer(1), req[0].mad), CmRx::kAccepted);
  auto mra = drain(b);
  ASSERT_EQ(mra.size(), 1u);
  ASSERT_EQ(attr_of(mra[0]), CmAttr::kMra);
  EXPECT_EQ(message_of<wire::CmMra>(mra[0]).service_timeout, 24);
  ASSERT_EQ(a_.handle_mad(now_, peer(2), mra[0].mad), CmRx::kAccepted);
  // 2^(24-8) + 2^(19-8) ms.
  EXPECT_EQ(a_.poll_timeout(), now_ + Duration::ms(65536 + 2048));
  // A duplicate REQ gets the MRA again.
  expect_answered_again(b, peer(1), req[0].mad, mra[0]);
}

TEST_F(CmPair, DisconnectBothWaysAndTimewaitExit) {
  auto [a_id, b_id] = establish();
  (void)events(a_);
  (void)events(b_);
  ASSERT_TRUE(a_.disconnect(now_, a_id, {}).ok());
  pump();
  auto b_evs = events(b_);
  ASSERT_EQ(b_evs.size(), 1u);
  EXPECT_EQ(b_evs[0].type, CmEventType::kDisconnected);
  EXPECT_EQ(b_.disconnect(now_, a_id, {}).ok(), false);
  ASSERT_TRUE(b_.disconnect(now_, b_id, {}).ok());
  pump();
  auto a_evs = events(a_);
  ASSERT_EQ(a_evs.size(), 1u);
  EXPECT_EQ(a_evs[0].type, CmEventType::kDisconnected);
  // TIMEWAIT: 2^(18+1-8) ms.
  EXPECT_EQ(a_.poll_timeout(), now_ + Duration::ms(2048));
  now_ = now_ + Duration::ms(2048);
  a_.handle_timeout(now_);
  auto a_exit = events(a_);
  ASSERT_EQ(a_exit.size(), 1u);
  EXPECT_EQ(a_exit[0].type, CmEventType::kTimewaitExit);
  // The passive side stays until A's REQ could no longer be retransmitted: 16 REQ timeouts of
  // 2 * 2^(18-8) + 2^(20-8) ms from the REQ, plus two lifetimes.
  EXPECT_EQ(b_.poll_timeout(), Instant::from_ns(1'000'000'000) + Duration::ms(16 * 6144 + 2048));
  now_ = b_.poll_timeout();
  b_.handle_timeout(now_);
  auto b_exit = events(b_);
  ASSERT_EQ(b_exit.size(), 1u);
  EXPECT_EQ(b_exit[0].type, CmEventType::kTimewaitExit);
  EXPECT_EQ(a_.connection_count() + b_.connection_count(), 0u);
}

TEST_F(CmPair, SimultaneousDisconnect) {
  auto [a_id, b_id] = establish();
  (void)events(a_);
  (void)events(b_);
  ASSERT_TRUE(a_.disconnect(now_, a_id, {}).ok());
  ASSERT_TRUE(b_.disconnect(now_, b_id, {}).ok());
  pump();
  EXPECT_EQ(events(a_).at(0).type, CmEventType::kDisconnected);
  EXPECT_EQ(events(b_).at(0).type, CmEventType::kDisconnected);
  now_ = now_ + Duration::s(120);
  a_.handle_timeout(now_);
  b_.handle_timeout(now_);
  EXPECT_EQ(a_.connection_count() + b_.connection_count(), 0u);
}

TEST_F(CmPair, SidrResolvesAndUnknownServiceIsUnsupported) {
  const std::uint64_t udp = wire::rdma_service_id(wire::RdmaPortSpace::kUdp, 5);
  ASSERT_TRUE(b_.listen(udp).ok());
  SidrParams p;
  p.peer = peer(2);
  p.service_id = udp;
  ASSERT_TRUE(a_.sidr_resolve(now_, p).ok());
  auto req = drain(a_);
  ASSERT_EQ(b_.handle_mad(now_, peer(1), req[0].mad), CmRx::kAccepted);
  EXPECT_EQ(b_.handle_mad(now_, peer(1), req[0].mad), CmRx::kDuplicate);
  auto evs = events(b_);
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].type, CmEventType::kSidrRequest);
  ASSERT_TRUE(
      b_.sidr_reply(now_, evs[0].id, wire::SidrStatus::kSuccess, 0x77, 0x11111111, {}).ok());
  pump();
  auto a_evs = events(a_);
  ASSERT_EQ(a_evs.size(), 1u);
  EXPECT_EQ(a_evs[0].type, CmEventType::kSidrReply);
  EXPECT_EQ(a_evs[0].sidr_qpn, 0x77u);
  EXPECT_EQ(a_evs[0].sidr_qkey, 0x11111111u);

  p.service_id = udp + 1;
  ASSERT_TRUE(a_.sidr_resolve(now_, p).ok());
  pump();
  a_evs = events(a_);
  ASSERT_EQ(a_evs.size(), 1u);
  EXPECT_EQ(a_evs[0].sidr_status, wire::SidrStatus::kUnsupported);
}

TEST_F(CmPair, DestroyWhileConnectingRejectsTheRequest) {
  ASSERT_TRUE(b_.listen(kService).ok());
  auto a_id = a_.connect(now_, connect_params());
  ASSERT_TRUE(a_id.ok());
  pump();
  auto b_evs = events(b_);
  ASSERT_EQ(b_evs.size(), 1u);
  ASSERT_TRUE(a_.destroy(now_, *a_id).ok());
  EXPECT_EQ(a_.connection_count(), 0u);
  pump();
  // REJ Timeout, found by the active side's ID although B never told A its own.
  b_evs = events(b_);
  ASSERT_EQ(b_evs.size(), 1u);
  EXPECT_EQ(b_evs[0].type, CmEventType::kRejected);
  EXPECT_EQ(b_evs[0].reason, CmRejReason::kTimeout);
  EXPECT_EQ(b_.accept(now_, b_evs[0].id, accept_params()).error(), CmError::kInvalidState);
  EXPECT_TRUE(events(a_).empty());
  EXPECT_EQ(a_.destroy(now_, *a_id).error(), CmError::kUnknownId);
}

TEST_F(CmPair, DestroyWhenEstablishedDisconnectsSilently) {
  auto [a_id, b_id] = establish();
  (void)events(a_);
  (void)events(b_);
  ASSERT_TRUE(a_.destroy(now_, a_id).ok());
  EXPECT_EQ(a_.disconnect(now_, a_id, {}).error(), CmError::kUnknownId);
  pump();
  auto b_evs = events(b_);
  ASSERT_EQ(b_evs.size(), 1u);
  EXPECT_EQ(b_evs[0].type, CmEventType::kDisconnected);
  ASSERT_TRUE(b_.destroy(now_, b_id).ok());  // sends the DREP
  pump();
  now_ = now_ + Duration::s(200);
  a_.handle_timeout(now_);
  b_.handle_timeout(now_);
  EXPECT_TRUE(events(a_).empty());
  EXPECT_TRUE(events(b_).empty());
  EXPECT_EQ(a_.connection_count() + b_.connection_count(), 0u);
}

// Random MADs (a valid header, any attribute, any data) at endpoints with connections in many
// states, half of them naming a live communication ID: never a crash or an assertion, and the
// endpoints still drain to nothing.
TEST_F(CmPair, RandomMadsNeverBreakTheMachine) {
  Prng prng(7);
  ASSERT_TRUE(b_.listen(kService).ok());
  std::vector<std::uint32_t> ids;
  for (std::uint32_t i = 0; i < 6; ++i) {
    auto p = connect_params();
    p.local_qpn = 0x100 + i;
    auto a_id = a_.connect(now_, p);
    ASSERT_TRUE(a_id.ok());
    ids.push_back(a_id->value);
    pump();
    for (const auto& e : events(b_)) {
      ids.push_back(e.id.value);
      if (i > 0) {  // connection 0 stays in REQ_RCVD
        ASSERT_TRUE(b_.accept(now_, e.id, accept_params()).ok());
      }
    }
    pump();
    for (const auto& e : events(a_)) {
      if (i % 2 == 0) {  // odd ones stay in REP_RCVD
        ASSERT_TRUE(a_.establish(now_, e.id).ok());
      }
    }
    pump();
    (void)events(b_);
  }
  for (int i = 0; i < 20000; ++i) {
    std::array<std::byte, wire::kMadBytes> mad{};
    for (auto& b : mad) b = std::byte(prng.below(256));
    mad[0] = std::byte{1};
    mad[1] = std::byte{0x07};
    mad[2] = std::byte{2};
    mad[3] = std::byte{0x03};
    mad[16] = std::byte{0};
    mad[17] = std::byte(0x10 + prng.below(9));
    if (prng.below(2) == 0) {
      store_be32(mad, wire::kMadHeaderBytes + (prng.below(2) == 0 ? 0 : 4),
                 ids[prng.below(ids.size())]);
    }
    now_ = now_ + Duration::ms(static_cast<std::int64_t>(prng.below(50)));
    CmEndpoint& to = prng.below(2) == 0 ? a_ : b_;
    (void)to.handle_mad(now_, prng.below(2) == 0 ? peer(1) : peer(2), mad);
    to.handle_timeout(now_);
    (void)drain(to);
    for (const auto& e : events(to)) {
      if (e.type == CmEventType::kDisconnected) (void)to.disconnect(now_, e.id, {});
      if (e.type == CmEventType::kConnectRequest || e.type == CmEventType::kConnectResponse ||
          e.type == CmEventType::kSidrRequest) {
        (void)to.destroy(now_, e.id);
      }
    }
  }
  // Everything ends: the established connections by disconnect, the rest by their timers.
  for (std::uint32_t id : ids) {
    (void)a_.destroy(now_, ConnId{id});
    (void)b_.destroy(now_, ConnId{id});
  }
  for (int i = 0; i < 10000 && !(a_.poll_timeout().is_never() && b_.poll_timeout().is_never());
       ++i) {
    now_ = earliest(a_.poll_timeout(), b_.poll_timeout());
    a_.handle_timeout(now_);
    b_.handle_timeout(now_);
    pump();
    (void)events(a_);
    (void)events(b_);
  }
  EXPECT_EQ(a_.connection_count(), 0u);
  EXPECT_EQ(b_.connection_count(), 0u);
}

TEST_F(CmPair, DreqRetriesThenDisconnectedAndTimewait) {
  auto [a_id, b_id] = establish();
  (void)events(a_);
  ASSERT_TRUE(a_.disconnect(now_, a_id, {}).ok());
  int dreqs = 0;
  while (a_.connection_count() > 0) {
    for (const auto& m : drain(a_)) dreqs += attr_of(m) == CmAttr::kDreq ? 1 : 0;  // all lost
    ASSERT_FALSE(a_.poll_timeout().is_never());
    now_ = a_.poll_timeout();
    a_.handle_timeout(now_);
  }
  EXPECT_EQ(dreqs, 16);  // the first and 15 retries
  auto evs = events(a_);
  ASSERT_EQ(evs.size(), 2u);
  EXPECT_EQ(evs[0].type, CmEventType::kDisconnected);
  EXPECT_EQ(evs[1].type, CmEventType::kTimewaitExit);
  (void)b_id;
}

// retransmitting(): a request waits for its answer (the coordinator stays up while it does, even
// when every process is gone); a connection that is up, or in timewait, has nothing of its own to
// send.
TEST_F(CmPair, RetransmittingWhileARequestWaitsForItsAnswer) {
  EXPECT_FALSE(a_.retransmitting());
  auto [a_id, b_id] = up_to_rep(false);
  EXPECT_TRUE(a_.retransmitting());  // REQ_SENT
  EXPECT_TRUE(b_.retransmitting());  // REP_SENT
  pump();
  EXPECT_FALSE(a_.retransmitting());  // REP_RCVD: the user establishes
  ASSERT_TRUE(a_.establish(now_, a_id).ok());
  pump();
  EXPECT_FALSE(b_.retransmitting());  // ESTABLISHED
  ASSERT_TRUE(a_.disconnect(now_, a_id, {}).ok());
  EXPECT_TRUE(a_.retransmitting());  // DREQ_SENT
  pump();
  EXPECT_FALSE(b_.retransmitting());                // DREQ_RCVD: its user answers
  ASSERT_TRUE(b_.disconnect(now_, b_id, {}).ok());  // the DREP, lost
  ASSERT_EQ(drain(b_).size(), 1u);
  EXPECT_TRUE(a_.retransmitting());
  now_ = a_.poll_timeout();
  a_.handle_timeout(now_);  // the DREQ again, answered from B's timewait
  pump();
  EXPECT_FALSE(a_.retransmitting());  // TIMEWAIT
  EXPECT_FALSE(b_.retransmitting());
  EXPECT_EQ(a_.connection_count(), 1u);
}

// retransmitting_count() follows connections into and out of the states that retransmit, many
// at once (it is a count kept on each change, not a walk over the connections): REQ_SENT until
// the REP or a destroy, REP_SENT until the RTU, DREQ_SENT until the DREP.
TEST_F(CmPair, TheRetransmittingCountFollowsEveryConnection) {
  constexpr std::size_t kConns = 40;
  ASSERT_TRUE(b_.listen(kService).ok());
  std::vector<ConnId> mine;
  for (std::size_t i = 0; i < kConns; ++i) {
    auto p = connect_params();
    p.local_qpn = 0x100 + static_cast<std::uint32_t>(i);
    auto id = a_.connect(now_, p);
    ASSERT_TRUE(id.ok());
    mine.push_back(*id);
    EXPECT_EQ(a_.retransmitting_count(), i + 1);
  }
  pump();
  auto reqs = events(b_);
  ASSERT_EQ(reqs.size(), kConns);
  EXPECT_EQ(b_.retransmitting_count(), 0u);  // REQ_RCVD: its user answers
  // B accepts the first half; A destroys the other half before any REP (REJ Timeout to B).
  for (std::size_t i = 0; i < kConns / 2; ++i) {
    ASSERT_TRUE(b_.accept(now_, reqs[i].id, accept_params()).ok());
  }
  EXPECT_EQ(b_.retransmitting_count(), kConns / 2);
  for (std::size_t i = kConns / 2; i < kConns; ++i) ASSERT_TRUE(a_.destroy(now_, mine[i]).ok());
  EXPECT_EQ(a_.retransmitting_count(), kConns / 2);
  pump();  // the REPs: A's REQs are answered
  EXPECT_EQ(a_.retransmitting_count(), 0u);
  EXPECT_FALSE(a_.retransmitting());
  for (std::size_t i = 0; i < kConns / 2; ++i) ASSERT_TRUE(a_.establish(now_, mine[i]).ok());
  pump();
  EXPECT_EQ(b_.retransmitting_count(), 0u);
  (void)events(a_);
  (void)events(b_);
  for (std::size_t i = 0; i < kConns / 2; ++i) {
    ASSERT_TRUE(a_.disconnect(now_, mine[i], {}).ok());
    EXPECT_EQ(a_.retransmitting_count(), i + 1);
  }
  pump();  // B's users answer below; until then A waits
  EXPECT_EQ(a_.retransmitting_count(), kConns / 2);
  for (const auto& e : events(b_)) ASSERT_TRUE(b_.disconnect(now_, e.id, {}).ok());
  pump();
  EXPECT_EQ(a_.retransmitting_count(), 0u);
  EXPECT_EQ(a_.connection_count(), kConns / 2);  // in timewait
}

// The peer's CM has gone (an ICMP port unreachable from its host): a DREQ outstanding to it ends
// at once, as if its DREP had come, instead of after 15 retries; nothing more is sent there.
TEST_F(CmPair, AnUnreachablePeerEndsADreqAsItsDrepWould) {
  auto [a_id, b_id] = establish();
  (void)events(a_);
  ASSERT_TRUE(a_.disconnect(now_, a_id, {}).ok());
  ASSERT_EQ(drain(a_).size(), 1u);  // the DREQ, lost: B's coordinator has exited
  EXPECT_TRUE(a_.retransmitting());
  now_ = a_.poll_timeout();
  a_.handle_timeout(now_);
  ASSERT_EQ(drain(a_).size(), 1u);  // its first retry draws the ICMP
  expect_ended_when_gone(a_, peer(2), CmEventType::kDisconnected, a_id);
  EXPECT_EQ(a_.counters().retransmits, 1u);
  EXPECT_EQ(a_.counters().peer_unreachable, 1u);
  EXPECT_EQ(a_.counters().unreachable_ended, 1u);
  EXPECT_EQ(a_.counters().dreq_timeouts, 0u);
  // Timewait as after a DREP, then gone.
  EXPECT_EQ(a_.poll_timeout(), now_ + Duration::ms(2048));
  now_ = a_.poll_timeout();
  a_.handle_timeout(now_);
  const auto evs = events(a_);
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].type, CmEventType::kTimewaitExit);
  EXPECT_EQ(a_.connection_count(), 0u);
  EXPECT_TRUE(drain(a_).empty());
  (void)b_id;
}

// A REQ to a peer with no CM fails at once as its last retry would (rdma_cm's UNREACHABLE), with
// no REJ sent after it; a REP waiting for its RTU likewise (UNREACHABLE, timewait). The same
// input for a peer with nothing outstanding is only counted.
TEST_F(CmPair, AnUnreachablePeerFailsAReqAndARepAtOnce) {
  const auto req = a_.connect(now_, connect_params());
  ASSERT_TRUE(req.ok());
  ASSERT_EQ(drain(a_).size(), 1u);
  EXPECT_EQ(expect_ended_when_gone(a_, peer(2), CmEventType::kUnreachable, *req).reason,
            CmRejReason::kTimeout);
  EXPECT_EQ(a_.connection_count(), 0u);
  EXPECT_TRUE(a_.poll_timeout().is_never());

  auto [a_id, b_id] = up_to_rep(false);  // B's REP waits for the RTU
  (void)drain(b_);
  EXPECT_TRUE(b_.retransmitting());
  expect_ended_when_gone(b_, peer(1), CmEventType::kUnreachable, b_id);
  EXPECT_EQ(b_.connection_count(), 1u);  // timewait: a late REQ still gets REJ Stale Connection
  b_.handle_peer_unreachable(now_, peer(1));
  EXPECT_TRUE(events(b_).empty());
  EXPECT_EQ(b_.counters().peer_unreachable, 2u);
  EXPECT_EQ(b_.counters().unreachable_ended, 1u);
  (void)a_id;
}

// Only the unreachable peer's requests end: another peer's REQ keeps its retries, and a
// connection that is up with the unreachable peer stays up (its QP's timeouts end it).
TEST_F(CmPair, AnUnreachablePeerLeavesOtherExchangesAlone) {
  const ConnId up_id = establish().first;  // stays up
  auto p = connect_params();
  p.local_qpn = 0x33;
  auto down = a_.connect(now_, p);
  ASSERT_TRUE(down.ok());
  const ConnId down_id = *down;
  pump();
  std::optional<ConnId> b_down;
  for (const auto& e : events(b_)) {
    if (e.type == CmEventType::kConnectRequest) b_down = e.id;
  }
  ASSERT_TRUE(b_down.has_value());
  ASSERT_TRUE(b_.accept(now_, *b_down, accept_params()).ok());
  pump();
  ASSERT_TRUE(a_.establish(now_, down_id).ok());
  pump();
  (void)events(a_);
  ASSERT_TRUE(a_.disconnect(now_, down_id, {}).ok());  // DREQ_SENT to B
  p.peer = peer(3);
  p.local_qpn = 0x44;
  auto other = a_.connect(now_, p);  // REQ_SENT to a third peer
  ASSERT_TRUE(other.ok());
  (void)drain(a_);
  EXPECT_EQ(a_.retransmitting_count(), 2u);
  a_.handle_peer_unreachable(now_, peer(2));
  auto evs = events(a_);
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].type, CmEventType::kDisconnected);
  EXPECT_EQ(evs[0].id, down_id);
  EXPECT_EQ(a_.retransmitting_count(), 1u);
  EXPECT_EQ(a_.connection_count(), 3u);  // up, timewait, and the REQ to peer 3
  // The REQ to peer 3 is retried on its timer (the timewait has ended by then).
  now_ = now_ + Duration::ms(6144);
  a_.handle_timeout(now_);
  auto out = drain(a_);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(attr_of(out[0]), CmAttr::kReq);
  EXPECT_EQ(out[0].to, peer(3));
  // The connection that is up still is: a DREQ for it goes out as ever.
  ASSERT_TRUE(a_.disconnect(now_, up_id, {}).ok());
  out = drain(a_);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(attr_of(out[0]), CmAttr::kDreq);
}

TEST_F(CmPair, ReqsTheCmCannotServeAreRejected) {
  ASSERT_TRUE(b_.listen(kService).ok());
  wire::CmReq req;
  req.local_comm_id = 99;
  req.service_id = kService;
  req.path_mtu = 3;
  req.transport_service_type = 1;  // UC
  EXPECT_EQ(b_.handle_mad(now_, peer(1), wire::build_cm_mad(wire::CmMad{1, req})), CmRx::kAnswered);
  req.transport_service_type = 0;
  req.path_mtu = 7;
  EXPECT_EQ(b_.handle_mad(now_, peer(1), wire::build_cm_mad(wire::CmMad{2, req})), CmRx::kAnswered);
  auto out = drain(b_);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(message_of<wire::CmRej>(out[0]).reason,
            static_cast<std::uint16_t>(CmRejReason::kInvalidTransportType));
  EXPECT_EQ(message_of<wire::CmRej>(out[1]).reason,
            static_cast<std::uint16_t>(CmRejReason::kInvalidMtu));
  EXPECT_EQ(message_of<wire::CmRej>(out[1]).remote_comm_id, 99u);
  EXPECT_TRUE(events(b_).empty());
  EXPECT_EQ(b_.connection_count(), 0u);
}

TEST_F(CmPair, RejNamingAnotherPeerIdIsDropped) {
  auto [a_id, b_id] = up_to_rep();
  wire::CmRej rej;
  rej.local_comm_id = b_id.value + 1;  // not B's ID
  rej.remote_comm_id = a_id.value;
  rej.reason = static_cast<std::uint16_t>(CmRejReason::kConsumerDefined);
  EXPECT_EQ(a_.handle_mad(now_, peer(2), wire::build_cm_mad(wire::CmMad{1, rej})), CmRx::kDropped);
  EXPECT_EQ(a_.handle_mad(now_, peer(3), wire::build_cm_mad(wire::CmMad{1, rej})),
            CmRx::kDropped);         // nor from another peer
  ASSERT_EQ(events(a_).size(), 1u);  // only the connect response
}

TEST_F(CmPair, MraOnRepAndADuplicateRepGetsTheMraAgain) {
  CmEndpoint a(mra_config(1));
  ASSERT_TRUE(b_.listen(kService).ok());
  ASSERT_TRUE(a.connect(now_, connect_params()).ok());
  auto req = drain(a);
  ASSERT_EQ(b_.handle_mad(now_, peer(1), req[0].mad), CmRx::kAccepted);
  ASSERT_TRUE(b_.accept(now_, events(b_)[0].id, accept_params()).ok());
  auto rep = drain(b_);
  ASSERT_EQ(a.handle_mad(now_, peer(2), rep[0].mad), CmRx::kAccepted);
  auto mra = drain(a);
  ASSERT_EQ(mra.size(), 1u);
  ASSERT_EQ(attr_of(mra[0]), CmAttr::kMra);
  EXPECT_EQ(message_of<wire::CmMra>(mra[0]).message_mraed, 1);  // the REP
  expect_answered_again(a, peer(2), rep[0].mad, mra[0]);
  // B waits the MRA's service timeout before resending the REP.
  ASSERT_EQ(b_.handle_mad(now_, peer(1), mra[0].mad), CmRx::kAccepted);
  EXPECT_EQ(b_.poll_timeout(), now_ + Duration::ms(65536 + 2048));
}

// With send_mra_on_rep off (the coordinator's CM), a REP gets no MRA: the passive side keeps its
// REP timer, the REQ's response timeout, and a REP again after it draws the RTU once the
// application has established the connection.
TEST_F(CmPair, NoMraOnRepWhenOnlyReqsAreMraed) {
  CmConfig c = mra_config(1);
  c.send_mra_on_rep = false;
  CmEndpoint a(c);
  ASSERT_TRUE(b_.listen(kService).ok());
  auto a_id = a.connect(now_, connect_params());
  ASSERT_TRUE(a_id.ok());
  auto req = drain(a);
  ASSERT_EQ(b_.handle_mad(now_, peer(1), req[0].mad), CmRx::kAccepted);
  ASSERT_TRUE(b_.accept(now_, events(b_)[0].id, accept_params()).ok());
  auto rep = drain(b_);
  ASSERT_EQ(a.handle_mad(now_, peer(2), rep[0].mad), CmRx::kAccepted);
  EXPECT_TRUE(drain(a).empty());  // no MRA
  EXPECT_EQ(b_.poll_timeout(), now_ + Duration::ms(4096));
  ASSERT_TRUE(a.establish(now_, *a_id).ok());
  auto rtu = drain(a);
  ASSERT_EQ(rtu.size(), 1u);
  EXPECT_EQ(attr_of(rtu[0]), CmAttr::kRtu);
  // The RTU was lost: B's REP again is answered with it.
  now_ = b_.poll_timeout();
  b_.handle_timeout(now_);
  auto rep_again = drain(b_);
  ASSERT_EQ(rep_again.size(), 1u);
  ASSERT_EQ(attr_of(rep_again[0]), CmAttr::kRep);
  expect_answered_again(a, peer(2), rep_again[0].mad, rtu[0]);
}

// Thousands of connections, each armed at its own time: poll_timeout() is always the earliest
// armed deadline, and handle_timeout() serves exactly the connections that are due (each
// retransmits its REQ once), whatever order they were armed in; the others wait.
TEST_F(CmPair, TimersOfManyConnectionsAreServedByDeadline) {
  constexpr int kConns = 3000;
  const Instant start = now_;
  for (int i = 0; i < kConns; ++i) {
    // Armed out of order: connection i at start + ((i * 7919) % kConns) us.
    now_ = start + Duration::us((i * 7919) % kConns);
    ASSERT_TRUE(a_.connect(now_, connect_params()).ok());
  }
  EXPECT_EQ(drain(a_).size(), static_cast<std::size_t>(kConns));
  EXPECT_EQ(a_.poll_timeout(), start + Duration::ms(6144));
  // Half of them are due.
  now_ = start + Duration::ms(6144) + Duration::us(kConns / 2 - 1);
  a_.handle_timeout(now_);
  auto out = drain(a_);
  EXPECT_EQ(out.size(), static_cast<std::size_t>(kConns / 2));
  for (const auto& m : out) EXPECT_EQ(attr_of(m), CmAttr::kReq);
  EXPECT_EQ(a_.poll_timeout(), start + Duration::ms(6144) + Duration::us(kConns / 2));
  // The rest, and the first half not again until their next round (armed when served).
  const Instant first_half_served = now_;
  now_ = start + Duration::ms(6144) + Duration::us(kConns);
  a_.handle_timeout(now_);
  EXPECT_EQ(drain(a_).size(), static_cast<std::size_t>(kConns / 2));
  EXPECT_EQ(a_.poll_timeout(), first_half_served + Duration::ms(6144));
  EXPECT_EQ(a_.connection_count(), static_cast<std::size_t>(kConns));
}

// Which side sends from which Starting PSN, as two rxe hosts did it (the golden rping capture):
// the active side's first RC packet carries the REP's Starting PSN, the passive side's the
// REQ's; and the QP attributes the CM gives each side say the same.
TEST_F(CmPair, StartingPsnsAreUsedAsLinuxUsesThem) {
  std::optional<wire::CmReq> req;
  std::optional<wire::CmRep> rep;
  wire::IpAddress active_ip;
  std::optional<std::uint32_t> first_from_active;
  std::optional<std::uint32_t> first_from_passive;
  for (const auto& fr : test::load_frames(test::data_dir() + "/golden/rping.pcap")) {
    auto f = wire::parse_frame(wire::LinkType::kEthernet, fr.view());
    ASSERT_TRUE(f.ok());
    const auto bth = f->roce.bth().decode();
    if (bth.dest_qpn == wire::kGsiQpn) {
      auto mad = wire::parse_cm_mad(f->roce.payload);
      ASSERT_TRUE(mad.ok());
      if (auto* q = std::get_if<wire::CmReq>(&mad->message); q != nullptr && !req) {
        req = *q;
        active_ip = f->ipv4.src;
      }
      if (auto* r = std::get_if<wire::CmRep>(&mad->message); r != nullptr && !rep) rep = *r;
      continue;
    }
    if (!req || !rep || (bth.opcode & 0x1f) > 0x10) continue;  // requests only, not ACKs
    if (bth.opcode == 0x11 || bth.opcode == 0x10) continue;
    if (f->ipv4.src == active_ip) {
      if (!first_from_active) first_from_active = bth.psn;
    } else if (!first_from_passive) {
      first_from_passive = bth.psn;
    }
  }
  ASSERT_TRUE(req && rep && first_from_active && first_from_passive);
  EXPECT_EQ(*first_from_active, rep->starting_psn);
  EXPECT_EQ(*first_from_passive, req->starting_psn);

  // The same from uroce's CM: a connects with the REQ's PSN, b accepts with the REP's.
  ASSERT_TRUE(b_.listen(kService).ok());
  ConnectParams p = connect_params();
  p.starting_psn = req->starting_psn;
  ASSERT_TRUE(a_.connect(now_, p).ok());
  for (const auto& m : drain(a_)) (void)b_.handle_mad(now_, peer(1), m.mad);
  auto evs = events(b_);
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].qp.sq_psn, req->starting_psn);
  AcceptParams ap = accept_params();
  ap.starting_psn = rep->starting_psn;
  auto qb = b_.accept(now_, evs[0].id, ap);
  ASSERT_TRUE(qb.ok());
  EXPECT_EQ(qb->sq_psn, req->starting_psn);
  EXPECT_EQ(qb->rq_psn, rep->starting_psn);
  for (const auto& m : drain(b_)) (void)a_.handle_mad(now_, peer(2), m.mad);
  auto ea = events(a_);
  ASSERT_EQ(ea.size(), 1u);
  ASSERT_EQ(ea[0].type, CmEventType::kConnectResponse);
  EXPECT_EQ(ea[0].qp.sq_psn, rep->starting_psn);
  EXPECT_EQ(ea[0].qp.rq_psn, req->starting_psn);
}

// The kernel's REQ from rping (tests/data/golden/rping.pcap) at a uroce listener: a connect
// request with its rdma_cm header, and a REP that answers that REQ's IDs and offers. And given
// the kernel's parameters, uroce's REQ and REP are the kernel's bytes but for the local ID.
TEST_F(CmPair, KernelRpingReqIsServedAndOurReqAndRepAreTheKernels) {
  const auto mads = test::kernel_rping_mads();
  ASSERT_TRUE(mads.contains(CmAttr::kReq) && mads.contains(CmAttr::kRep));
  const std::vector<std::byte>* req_bytes = &mads.at(CmAttr::kReq);
  const std::vector<std::byte>* rep_bytes = &mads.at(CmAttr::kRep);
  const auto req = std::get<wire::CmReq>(wire::parse_cm_mad(*req_bytes)->message);
  ASSERT_TRUE(b_.listen(req.service_id).ok());
  CmPeer kernel;
  kernel.gid = req.primary_local_gid;
  ASSERT_EQ(b_.handle_mad(now_, kernel, *req_bytes), CmRx::kAccepted);
  auto evs = events(b_);
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].type, CmEventType::kConnectRequest);
  EXPECT_TRUE(wire::parse_cma_header(as_bytes(evs[0].private_data.data(), 92)).ok());
  EXPECT_EQ(evs[0].qp.remote_qpn, req.local_qpn);
  // Linux's convention (ConnectParams::starting_psn): the passive side sends from the REQ's.
  EXPECT_EQ(evs[0].qp.sq_psn, req.starting_psn);
  ASSERT_TRUE(b_.accept(now_, evs[0].id, accept_params()).ok());
  auto out = drain(b_);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to, kernel);
  const auto rep = message_of<wire::CmRep>(out[0]);
  EXPECT_EQ(rep.remote_comm_id, req.local_comm_id);
  EXPECT_EQ(load_be64(out[0].mad, wire::kMadOffTransactionId),
            load_be64(*req_bytes, wire::kMadOffTransactionId));
  EXPECT_LE(rep.responder_resources, req.initiator_depth);
  EXPECT_LE(rep.initiator_depth, req.responder_resources);
  // The kernel's REQ again: the same REP.
  expect_answered_again(b_, kernel, *req_bytes, out[0]);

  // uroce's REP from the kernel's passive side's parameters is the kernel's REP, byte for byte
  // but for the communication ID.
  const auto krep = std::get<wire::CmRep>(wire::parse_cm_mad(*rep_bytes)->message);
  CmConfig pcfg = config(10);
  pcfg.local_ca_guid = krep.local_ca_guid;
  CmEndpoint passive(pcfg);
  ASSERT_TRUE(passive.listen(req.service_id).ok());
  ASSERT_EQ(passive.handle_mad(now_, kernel, *req_bytes), CmRx::kAccepted);
  AcceptParams ap;
  ap.local_qpn = krep.local_qpn;
  ap.starting_psn = krep.starting_psn;
  ap.responder_resources = krep.responder_resources;
  ap.initiator_depth = krep.initiator_depth;
  ap.rnr_retry_count = krep.rnr_retry_count;
  ap.private_data = as_bytes(krep.private_data.data(), krep.private_data.size());
  ASSERT_TRUE(passive.accept(now_, passive.poll_event()->id, ap).ok());
  auto our_rep_mad = drain(passive).at(0).mad;
  store_be32(our_rep_mad, wire::kMadHeaderBytes, krep.local_comm_id);
  for (std::size_t i = 0; i < wire::kMadBytes; ++i) {
    EXPECT_EQ(our_rep_mad[i], (*rep_bytes)[i]) << "REP byte " << i;
  }

  // uroce's REQ from the same parameters is the kernel's, field for field, but for the
  // communication ID (each side draws its own).
  CmConfig cfg = config(9);
  cfg.local_ca_guid = req.local_ca_guid;
  CmEndpoint a(cfg);
  ASSERT_TRUE(a.connect(now_, test::connect_params_of(req)).ok());
  auto ours = message_of<wire::CmReq>(drain(a).at(0));
  ours.local_comm_id = req.local_comm_id;
  EXPECT_TRUE(ours == req);
  const auto ours_bytes = wire::build_cm_mad(wire::CmMad{0, ours});
  const auto theirs = wire::build_cm_mad(wire::CmMad{0, req});
  for (std::size_t i = 0; i < wire::kMadBytes; ++i) {
    EXPECT_EQ(ours_bytes[i], theirs[i]) << "MAD byte " << i;
  }
}

TEST_F(CmPair, BadArgumentsAreErrors) {
  std::vector<std::byte> big(93);
  auto p = connect_params();
  p.private_data = big;
  EXPECT_EQ(a_.connect(now_, p).error(), CmError::kInvalidArgument);
  p = connect_params();
  p.retry_count = 8;
  EXPECT_EQ(a_.connect(now_, p).error(), CmError::kInvalidArgument);
  EXPECT_EQ(a_.establish(now_, ConnId{42}).error(), CmError::kUnknownId);
  auto id = a_.connect(now_, connect_params());
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(a_.accept(now_, *id, accept_params()).error(), CmError::kInvalidState);
  EXPECT_EQ(a_.disconnect(now_, *id, {}).error(), CmError::kInvalidState);
  ASSERT_TRUE(b_.listen(kService).ok());
  EXPECT_EQ(b_.listen(kService).error(), CmError::kBusy);
}

}  // namespace
}  // namespace uroce::cm

// Selective repeat negotiated through the CM (docs/ARCHITECTURE.md, "Selective repeat",
// "Negotiation"): two uroce ends, whose node GUIDs carry uroce's mark, turn it on for the QPs they
// connect, each from the GUID in the other's REQ or REP; a peer whose GUID lacks the mark (the
// kernel's REQ and REP in the golden rping capture, or a crafted GUID), a CM that does not take
// it, and a device configured without it (UROCE_SR=0) leave it off. The QPs are moved to RTR and
// RTS as the drop-in librdmacm moves them (compat/rdmacm/cma.cc: kQpSelectiveRepeat at RTR).
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "cm/cm.h"
#include "kernel_rping.h"
#include "uroce/verbs.h"
#include "verbs/address.h"
#include "verbs/connect.h"
#include "wire/packet.h"

namespace uroce::cm {
namespace {

constexpr std::uint64_t kService = wire::rdma_service_id(wire::RdmaPortSpace::kTcp, 7471);
const wire::IpAddress kIpA = wire::IpAddress::v4(0x0a000001);
const wire::IpAddress kIpB = wire::IpAddress::v4(0x0a000002);
// rxe's GUID for 10.0.0.1 (the EUI-64 of the MAC 02:00:0a:00:00:01): no mark.
constexpr std::uint64_t kRxeGuid = 0x00000afffe000001ull;
const std::uint64_t kGuidA = verbs::node_guid_from_ip(kIpA);
const std::uint64_t kGuidB = verbs::node_guid_from_ip(kIpB);

CmPeer peer_at(const wire::IpAddress& ip) {
  CmPeer p;
  p.gid = wire::ipv4_mapped_gid(ip.v4_host_order());
  return p;
}

CmConfig cm_config(std::uint64_t seed, std::uint64_t guid, bool sr = true) {
  CmConfig c;
  c.seed = seed;
  c.local_ca_guid = guid;
  c.selective_repeat = sr;
  return c;
}

// A device with one RC QP that a CM connection sets up.
struct End {
  End(const wire::IpAddress& ip, bool sr_allowed) {
    DeviceConfig c;
    c.ip = ip;
    c.selective_repeat = sr_allowed;
    dev = std::move(Device::create(c)).value();
    pd = *dev->alloc_pd();
    cq = dev->create_cq(CqInitAttr{255, 0, 0})->handle;
    QpInitAttr init;
    init.qp_type = QpType::kRc;
    init.send_cq = cq;
    init.recv_cq = cq;
    init.cap = QpCap{16, 16, 1, 1, 0};
    qp = *dev->create_qp(pd, init);
  }
  // INIT, RTR and RTS with what the CM negotiated, as the drop-in librdmacm does.
  void connect(const QpAttributes& q) {
    verbs::RcConnection c;
    uroce::Gid gid;
    gid.raw = q.remote_gid;
    c.peer_ip = *verbs::ip_from_gid(gid);
    c.peer_qpn = q.remote_qpn;
    c.path_mtu = static_cast<Mtu>(q.path_mtu);
    c.sq_psn = q.sq_psn;
    c.rq_psn = q.rq_psn;
    c.timeout = q.ack_timeout;
    c.retry_cnt = q.retry_count;
    c.rnr_retry = q.rnr_retry;
    c.max_rd_atomic = q.max_rd_atomic;
    c.max_dest_rd_atomic = q.max_dest_rd_atomic;
    c.selective_repeat = q.selective_repeat;
    ASSERT_EQ(verbs::connect_rc_qp(*dev, qp.handle, c), Errc::kOk);
  }
  bool selective_repeat() const { return dev->query_qp(qp.handle)->attr.selective_repeat; }

  std::unique_ptr<Device> dev;
  PdHandle pd;
  CqHandle cq;
  QpInfo qp;
};

struct Negotiated {
  QpAttributes active;   // A's, from B's REP
  QpAttributes passive;  // B's, from A's REQ
};

// A (10.0.0.1) connects to B (10.0.0.2), B accepts: what each side's CM gives its QP.
// A's CM has GUID guid_a, B's guid_b (and selective repeat unless !sr_b).
std::optional<Negotiated> negotiate(std::uint64_t guid_a, std::uint64_t guid_b, bool sr_b = true,
                                    std::uint32_t qpn_a = 0x11, std::uint32_t qpn_b = 0x11) {
  CmEndpoint a(cm_config(1, guid_a));
  CmEndpoint b(cm_config(2, guid_b, sr_b));
  const Instant now = Instant::from_ns(0);
  if (!b.listen(kService).ok()) return std::nullopt;
  ConnectParams p;
  p.peer = peer_at(kIpB);
  p.local_gid = peer_at(kIpA).gid;
  p.service_id = kService;
  p.local_qpn = qpn_a;
  p.starting_psn = 0x100;
  p.responder_resources = 4;
  p.initiator_depth = 4;
  if (!a.connect(now, p).ok()) return std::nullopt;
  while (auto m = a.poll_transmit()) (void)b.handle_mad(now, peer_at(kIpA), m->mad);
  const auto req = b.poll_event();
  if (!req || req->type != CmEventType::kConnectRequest) return std::nullopt;
  AcceptParams ap;
  ap.local_qpn = qpn_b;
  ap.starting_psn = 0x200;
  ap.responder_resources = 4;
  ap.initiator_depth = 4;
  auto passive = b.accept(now, req->id, ap);
  if (!passive.ok()) return std::nullopt;
  EXPECT_EQ(passive->selective_repeat, req->qp.selective_repeat);  // as the REQ's event said
  while (auto m = b.poll_transmit()) (void)a.handle_mad(now, peer_at(kIpB), m->mad);
  const auto rep = a.poll_event();
  if (!rep || rep->type != CmEventType::kConnectResponse) return std::nullopt;
  return Negotiated{rep->qp, *passive};
}

TEST(CmSelectiveRepeat, TwoUroceEndsTurnItOnForBothQps) {
  End ea(kIpA, true), eb(kIpB, true);
  const auto n = negotiate(kGuidA, kGuidB, true, ea.qp.qp_num, eb.qp.qp_num);
  ASSERT_TRUE(n);
  EXPECT_TRUE(n->active.selective_repeat);
  EXPECT_TRUE(n->passive.selective_repeat);
  EXPECT_FALSE(ea.selective_repeat());  // nothing before RTR
  ea.connect(n->active);
  eb.connect(n->passive);
  EXPECT_TRUE(ea.selective_repeat());
  EXPECT_TRUE(eb.selective_repeat());
}

TEST(CmSelectiveRepeat, APeerGuidWithoutTheMarkLeavesItOff) {
  // B is uroce, A's GUID is rxe's: B's QP stays go-back-N (and so would A's, were it rxe).
  {
    End eb(kIpB, true);
    const auto n = negotiate(kRxeGuid, kGuidB, true, 0x11, eb.qp.qp_num);
    ASSERT_TRUE(n);
    EXPECT_FALSE(n->passive.selective_repeat);
    eb.connect(n->passive);
    EXPECT_FALSE(eb.selective_repeat());
  }
  // A is uroce, B answers with an unmarked GUID: A's QP stays go-back-N.
  {
    End ea(kIpA, true);
    // B's GUID is locally administered, without the mark.
    const auto n = negotiate(kGuidA, 0x0200000000000002ull, true, ea.qp.qp_num);
    ASSERT_TRUE(n);
    EXPECT_FALSE(n->active.selective_repeat);
    ea.connect(n->active);
    EXPECT_FALSE(ea.selective_repeat());
  }
}

// The kernel's REQ and REP from rping between two rxe hosts (tests/data/golden/rping.pcap): a
// uroce listener given the REQ, and a uroce active side given the REP, keep go-back-N.
TEST(CmSelectiveRepeat, TheKernelsReqAndRepLeaveItOff) {
  const auto mads = test::kernel_rping_mads();
  ASSERT_TRUE(mads.contains(wire::CmAttr::kReq) && mads.contains(wire::CmAttr::kRep));
  const std::vector<std::byte>* req_bytes = &mads.at(wire::CmAttr::kReq);
  const std::vector<std::byte>* rep_bytes = &mads.at(wire::CmAttr::kRep);
  const Instant now = Instant::from_ns(0);
  const auto req = std::get<wire::CmReq>(wire::parse_cm_mad(*req_bytes)->message);
  auto rep = std::get<wire::CmRep>(wire::parse_cm_mad(*rep_bytes)->message);
  EXPECT_FALSE(wire::is_uroce_guid(req.local_ca_guid));
  EXPECT_FALSE(wire::is_uroce_guid(rep.local_ca_guid));

  CmEndpoint passive(cm_config(3, kGuidB));
  ASSERT_TRUE(passive.listen(req.service_id).ok());
  CmPeer kernel;
  kernel.gid = req.primary_local_gid;
  ASSERT_EQ(passive.handle_mad(now, kernel, *req_bytes), CmRx::kAccepted);
  const auto ev = passive.poll_event();
  ASSERT_TRUE(ev && ev->type == CmEventType::kConnectRequest);
  EXPECT_FALSE(ev->qp.selective_repeat);
  AcceptParams ap;
  ap.local_qpn = 0x11;
  auto q = passive.accept(now, ev->id, ap);
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->selective_repeat);

  // The kernel's REP, addressed to a uroce active side's connection.
  CmEndpoint active(cm_config(4, kGuidA));
  ASSERT_TRUE(active.connect(now, test::connect_params_of(req)).ok());
  const auto ours = std::get<wire::CmReq>(wire::parse_cm_mad(active.poll_transmit()->mad)->message);
  rep.remote_comm_id = ours.local_comm_id;
  const auto rep_mad = wire::build_cm_mad(wire::CmMad{0, rep});
  CmPeer rep_from;
  rep_from.gid = req.primary_remote_gid;
  ASSERT_EQ(active.handle_mad(now, rep_from, rep_mad), CmRx::kAccepted);
  const auto response = active.poll_event();
  ASSERT_TRUE(response && response->type == CmEventType::kConnectResponse);
  EXPECT_FALSE(response->qp.selective_repeat);
}

TEST(CmSelectiveRepeat, SwitchedOffItStaysOff) {
  // B's CM does not take selective repeat: B's QP is go-back-N. (A, which sees B's mark, may
  // turn it on for its own: a peer that ignores kBthSrKeptBit makes both go back N, docs.)
  {
    const auto n = negotiate(kGuidA, kGuidB, false);
    ASSERT_TRUE(n);
    EXPECT_FALSE(n->passive.selective_repeat);
    EXPECT_TRUE(n->active.selective_repeat);
  }
  // Both CMs say yes, but B's device is configured without it (UROCE_SR=0): B's QP stays off.
  End ea(kIpA, true), eb(kIpB, false);
  const auto n = negotiate(kGuidA, kGuidB, true, ea.qp.qp_num, eb.qp.qp_num);
  ASSERT_TRUE(n);
  EXPECT_TRUE(n->passive.selective_repeat);
  ea.connect(n->active);
  eb.connect(n->passive);
  EXPECT_TRUE(ea.selective_repeat());
  EXPECT_FALSE(eb.selective_repeat());
}

}  // namespace
}  // namespace uroce::cm

// The CM MADs of the kernel's rping over Soft-RoCE (tests/data/golden/rping.pcap): REQ, REP, RTU,
// DREQ, DREP as cm.c and cma.c build them. Each parses, rebuilds to the same bytes, and carries
// the values roce-facts.md records.
#include <gtest/gtest.h>

#include <vector>

#include "support/golden.h"
#include "wire/cm_mad.h"
#include "wire/packet.h"

namespace uroce::wire {
namespace {

struct CapturedMad {
  std::vector<std::byte> bytes;
  CmMad mad;
};

std::vector<CapturedMad> rping_mads() {
  std::vector<CapturedMad> out;
  for (const auto& fr : test::load_frames(test::data_dir() + "/golden/rping.pcap")) {
    auto f = parse_frame(LinkType::kEthernet, fr.view());
    UROCE_CHECK(f.ok());
    if (f->roce.bth().decode().dest_qpn != kGsiQpn) continue;
    EXPECT_EQ(f->roce.op->opcode(), Opcode::kUdSendOnly);
    EXPECT_EQ(f->roce.deth().qkey(), kGsiQkey);
    EXPECT_EQ(f->roce.deth().src_qpn(), kGsiQpn);
    auto parsed = parse_cm_mad(f->roce.payload);
    EXPECT_TRUE(parsed.ok()) << "frame " << fr.index;
    if (!parsed.ok()) continue;
    out.push_back({{f->roce.payload.begin(), f->roce.payload.end()}, *parsed});
  }
  return out;
}

TEST(CmGolden, KernelMadsParseAndRebuildByteForByte) {
  const auto mads = rping_mads();
  ASSERT_EQ(mads.size(), 5u);
  const CmAttr want[] = {CmAttr::kReq, CmAttr::kRep, CmAttr::kRtu, CmAttr::kDreq, CmAttr::kDrep};
  for (std::size_t i = 0; i < mads.size(); ++i) {
    EXPECT_EQ(cm_attr_of(mads[i].mad.message), want[i]);
    const auto rebuilt = build_cm_mad(mads[i].mad);
    EXPECT_TRUE(
        std::equal(rebuilt.begin(), rebuilt.end(), mads[i].bytes.begin(), mads[i].bytes.end()))
        << cm_attr_name(want[i]) << " does not rebuild to the kernel's bytes";
  }
}

TEST(CmGolden, KernelReqCarriesRdmaCmConventions) {
  const auto mads = rping_mads();
  ASSERT_GE(mads.size(), 5u);
  const auto& req = std::get<CmReq>(mads[0].mad.message);
  const auto sid = parse_rdma_ip_service_id(req.service_id);
  ASSERT_TRUE(sid.has_value());
  EXPECT_EQ(sid->port_space, RdmaPortSpace::kTcp);
  EXPECT_EQ(req.remote_cm_response_timeout, 20);  // CMA_CM_RESPONSE_TIMEOUT
  EXPECT_EQ(req.local_cm_response_timeout, 20);
  EXPECT_EQ(req.max_cm_retries, 15);  // CMA_MAX_CM_RETRIES
  EXPECT_EQ(req.transport_service_type, 0);
  EXPECT_EQ(req.partition_key, 0xffff);
  EXPECT_EQ(req.primary_local_lid, 0xffff);  // RoCE: permissive LIDs
  EXPECT_EQ(req.primary_remote_lid, 0xffff);
  auto hdr = parse_cma_header(as_bytes(req.private_data.data(), req.private_data.size()));
  ASSERT_TRUE(hdr.ok()) << cma_header_error_name(hdr.error());
  EXPECT_EQ(hdr->ip_version, 4);
  // The cma_hdr's addresses are the two sides' IPv4 addresses, as the REQ's GIDs map them.
  for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(hdr->src_addr[i], 0) << i;
  for (std::size_t i = 12; i < 16; ++i) {
    EXPECT_EQ(hdr->src_addr[i], req.primary_local_gid[i]);
    EXPECT_EQ(hdr->dst_addr[i], req.primary_remote_gid[i]);
  }
  EXPECT_EQ(req.primary_local_gid[10], 0xff);  // ::ffff:a.b.c.d
  EXPECT_EQ(req.primary_local_gid[11], 0xff);
  EXPECT_EQ(sid->port, 7174);  // rping's default port
  EXPECT_NE(hdr->src_port, 0);
}

TEST(CmGolden, KernelRepRtuDreqDrepNameEachOther) {
  const auto mads = rping_mads();
  ASSERT_GE(mads.size(), 5u);
  const auto& req = std::get<CmReq>(mads[0].mad.message);
  const auto& rep = std::get<CmRep>(mads[1].mad.message);
  const auto& rtu = std::get<CmRtu>(mads[2].mad.message);
  EXPECT_EQ(rep.remote_comm_id, req.local_comm_id);
  EXPECT_EQ(mads[1].mad.transaction_id, mads[0].mad.transaction_id);  // a reply keeps the TID
  EXPECT_EQ(rtu.local_comm_id, req.local_comm_id);
  EXPECT_EQ(rtu.remote_comm_id, rep.local_comm_id);
  EXPECT_LE(rep.responder_resources, req.initiator_depth);
  EXPECT_LE(rep.initiator_depth, req.responder_resources);
  const auto& dreq = std::get<CmDreq>(mads[3].mad.message);
  const auto& drep = std::get<CmDrep>(mads[4].mad.message);
  EXPECT_EQ(drep.local_comm_id, dreq.remote_comm_id);
  EXPECT_EQ(drep.remote_comm_id, dreq.local_comm_id);
  // The DREQ names the receiver's QP.
  const bool from_active = dreq.local_comm_id == req.local_comm_id;
  EXPECT_EQ(dreq.remote_qpn_eecn, from_active ? rep.local_qpn : req.local_qpn);
}

}  // namespace
}  // namespace uroce::wire

#include "wire/cm_mad.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <vector>

namespace uroce::wire {
namespace {

std::uint8_t at(const std::array<std::byte, kMadBytes>& m, std::size_t data_off) {
  return static_cast<std::uint8_t>(m[kMadHeaderBytes + data_off]);
}

std::array<std::uint8_t, 16> gid(std::uint8_t first) {
  std::array<std::uint8_t, 16> g{};
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<std::uint8_t>(first + i);
  return g;
}

CmReq sample_req() {
  CmReq r;
  r.local_comm_id = 0x11223344;
  r.service_id = rdma_service_id(RdmaPortSpace::kTcp, 7471);
  r.local_ca_guid = 0x0102030405060708;
  r.local_qkey = 0;
  r.local_qpn = 0xabcdef;
  r.responder_resources = 4;
  r.local_eecn = 0;
  r.initiator_depth = 3;
  r.remote_eecn = 0;
  r.remote_cm_response_timeout = 20;
  r.transport_service_type = 0;  // RC
  r.end_to_end_flow_control = 1;
  r.starting_psn = 0x123456;
  r.local_cm_response_timeout = 20;
  r.retry_count = 7;
  r.partition_key = 0xffff;
  r.path_mtu = 3;  // IB_MTU_1024
  r.rdc_exists = 0;
  r.rnr_retry_count = 6;
  r.max_cm_retries = 15;
  r.srq = 1;
  r.extended_transport_type = 0;
  r.primary_local_lid = 0xffff;
  r.primary_remote_lid = 0xffff;
  r.primary_local_gid = gid(0xa0);
  r.primary_remote_gid = gid(0xb0);
  r.primary_flow_label = 0xabcde;
  r.primary_packet_rate = 0x2a;
  r.primary_traffic_class = 0x11;
  r.primary_hop_limit = 64;
  r.primary_sl = 5;
  r.primary_subnet_local = 1;
  r.primary_local_ack_timeout = 19;
  for (std::size_t i = 0; i < r.private_data.size(); ++i) {
    r.private_data[i] = static_cast<std::uint8_t>(i + 1);
  }
  return r;
}

TEST(CmMad, HeaderIsClassCmVersion2Send) {
  const auto m = build_cm_mad(CmMad{0x0000000100000002, CmRtu{}});
  EXPECT_EQ(static_cast<std::uint8_t>(m[0]), 1);     // base version
  EXPECT_EQ(static_cast<std::uint8_t>(m[1]), 0x07);  // CM
  EXPECT_EQ(static_cast<std::uint8_t>(m[2]), 2);     // class version
  EXPECT_EQ(static_cast<std::uint8_t>(m[3]), 0x03);  // Send
  for (std::size_t i = 4; i < 8; ++i) EXPECT_EQ(static_cast<std::uint8_t>(m[i]), 0) << i;
  const std::uint8_t tid[8] = {0, 0, 0, 1, 0, 0, 0, 2};
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(static_cast<std::uint8_t>(m[8 + i]), tid[i]);
  EXPECT_EQ(static_cast<std::uint8_t>(m[16]), 0x00);
  EXPECT_EQ(static_cast<std::uint8_t>(m[17]), 0x14);  // RTU
  for (std::size_t i = 18; i < 24; ++i) EXPECT_EQ(static_cast<std::uint8_t>(m[i]), 0) << i;
}

// Every REQ field at its byte offset (IBTA table 106 / ibta_vol1_c12.h), computed by hand.
TEST(CmMad, ReqFieldsAtTheirOffsets) {
  const auto m = build_cm_mad(CmMad{1, sample_req()});
  EXPECT_EQ(static_cast<std::uint8_t>(m[17]), 0x10);
  const std::vector<std::pair<std::size_t, std::uint8_t>> want = {
      {0, 0x11},
      {1, 0x22},
      {2, 0x33},
      {3, 0x44},  // local comm ID
      {4, 0},
      {5, 0},
      {6, 0},
      {7, 0},  // reserved
      {8, 0x00},
      {9, 0x00},
      {10, 0x00},
      {11, 0x00},  // service ID
      {12, 0x01},
      {13, 0x06},
      {14, 0x1d},
      {15, 0x2f},  //   0x106 << 16 | 7471
      {16, 0x01},
      {17, 0x02},
      {22, 0x07},
      {23, 0x08},  // local CA GUID
      {24, 0},
      {27, 0},  // reserved
      {28, 0},
      {31, 0},  // Q_Key
      {32, 0xab},
      {33, 0xcd},
      {34, 0xef},
      {35, 4},  // QPN, responder resources
      {36, 0},
      {38, 0},
      {39, 3},  // EECN, initiator depth
      {40, 0},
      {42, 0},
      {43, (20 << 3) | (0 << 1) | 1},  // remote resp timeout|TST|E2E
      {44, 0x12},
      {45, 0x34},
      {46, 0x56},
      {47, (20 << 3) | 7},  // PSN, local timeout|retry
      {48, 0xff},
      {49, 0xff},
      {50, (3 << 4) | (0 << 3) | 6},   // P_Key, MTU|RDC|RNR retry
      {51, (15 << 4) | (1 << 3) | 0},  // max CM retries|SRQ|XRC
      {52, 0xff},
      {53, 0xff},
      {54, 0xff},
      {55, 0xff},  // LIDs
      {56, 0xa0},
      {71, 0xaf},
      {72, 0xb0},
      {87, 0xbf},  // GIDs
      {88, 0xab},
      {89, 0xcd},
      {90, 0xe0},
      {91, 0x2a},  // flow label, rate
      {92, 0x11},
      {93, 64},
      {94, (5 << 4) | (1 << 3)},
      {95, 19 << 3},  // TC, hop, SL|SL, ack
      {96, 0},
      {139, 0},  // alternate path absent
      {140, 1},
      {141, 2},
      {231, 92},  // private data
  };
  for (const auto& [off, v] : want) EXPECT_EQ(at(m, off), v) << "data byte " << off;
}

// Every REP field at its byte offset (IBTA table 110).
TEST(CmMad, RepFieldsAtTheirOffsets) {
  CmRep r;
  r.local_comm_id = 0xdeadbeef;
  r.remote_comm_id = 0x01020304;
  r.local_qkey = 0x0a0b0c0d;
  r.local_qpn = 0x000123;
  r.local_eecn = 0;
  r.starting_psn = 0xfedcba;
  r.responder_resources = 16;
  r.initiator_depth = 8;
  r.target_ack_delay = 15;
  r.failover_accepted = 3;
  r.end_to_end_flow_control = 1;
  r.rnr_retry_count = 7;
  r.srq = 1;
  r.local_ca_guid = 0x1112131415161718;
  r.private_data[0] = 0x55;
  r.private_data[195] = 0x66;
  const auto m = build_cm_mad(CmMad{9, r});
  EXPECT_EQ(static_cast<std::uint8_t>(m[17]), 0x13);
  const std::vector<std::pair<std::size_t, std::uint8_t>> want = {
      {0, 0xde},
      {3, 0xef},
      {4, 0x01},
      {7, 0x04},
      {8, 0x0a},
      {9, 0x0b},
      {10, 0x0c},
      {11, 0x0d},
      {12, 0x00},
      {13, 0x01},
      {14, 0x23},
      {15, 0},  // QPN, reserved
      {16, 0},
      {19, 0},  // EECN, reserved
      {20, 0xfe},
      {21, 0xdc},
      {22, 0xba},
      {23, 0},  // PSN, reserved
      {24, 16},
      {25, 8},
      {26, (15 << 3) | (3 << 1) | 1},  // ack delay|failover|E2E
      {27, (7 << 5) | (1 << 4)},       // RNR retry|SRQ
      {28, 0x11},
      {35, 0x18},  // CA GUID
      {36, 0x55},
      {231, 0x66},  // private data
  };
  for (const auto& [off, v] : want) EXPECT_EQ(at(m, off), v) << "data byte " << off;
}

template <class M>
void expect_round_trip(const M& msg) {
  const CmMad mad{0x1234567890abcdef, msg};
  const auto bytes = build_cm_mad(mad);
  auto parsed = parse_cm_mad(bytes);
  ASSERT_TRUE(parsed.ok()) << cm_parse_error_name(parsed.error());
  EXPECT_EQ(parsed->transaction_id, mad.transaction_id);
  ASSERT_TRUE(std::holds_alternative<M>(parsed->message)) << cm_attr_name(M::kAttr);
  EXPECT_TRUE(std::get<M>(parsed->message) == msg) << cm_attr_name(M::kAttr);
  EXPECT_EQ(build_cm_mad(*parsed), bytes);
}

// Every field of every attribute set to an all-ones value (so a misplaced or overlapping field
// shows), round-tripped.
TEST(CmMad, RoundTripEveryAttribute) {
  expect_round_trip(sample_req());
  CmMra mra{1, 2, 1, 24, {}};
  mra.private_data[221] = 9;
  expect_round_trip(mra);
  CmRej rej;
  rej.local_comm_id = 5;
  rej.remote_comm_id = 6;
  rej.message_rejected = 2;
  rej.rejected_info_length = 72;
  rej.reason = static_cast<std::uint16_t>(CmRejReason::kConsumerDefined);
  rej.ari[71] = 0xee;
  rej.private_data[147] = 0xdd;
  expect_round_trip(rej);
  CmRep rep;
  rep.local_qpn = 0xffffff;
  rep.starting_psn = 0xffffff;
  rep.target_ack_delay = 31;
  rep.failover_accepted = 3;
  rep.end_to_end_flow_control = 1;
  rep.rnr_retry_count = 7;
  rep.srq = 1;
  expect_round_trip(rep);
  expect_round_trip(CmRtu{7, 8, {}});
  expect_round_trip(CmDreq{7, 8, 0xffffff, {}});
  expect_round_trip(CmDrep{7, 8, {}});
  CmSidrReq sreq{0xffffffff, 0xffff, rdma_service_id(RdmaPortSpace::kUdp, 1), {}};
  sreq.private_data[215] = 1;
  expect_round_trip(sreq);
  CmSidrRep srep{3, 0, 72, 0xffffff, ~std::uint64_t{0}, 0xffffffff, {}, {}};
  srep.additional_information[0] = 1;
  srep.private_data[135] = 1;
  expect_round_trip(srep);
}

TEST(CmMad, EveryFieldSurvivesAllOnes) {
  CmReq r = sample_req();
#define UROCE_ALL_ONES(m, byte, bit, bits) \
  r.m = static_cast<decltype(r.m)>(bits == 64 ? ~0ull : (1ull << bits) - 1);
#define UROCE_ALL_ONES_BYTES(m, byte, n) r.m.fill(0xff);
  UROCE_CM_REQ_FIELDS(UROCE_ALL_ONES, UROCE_ALL_ONES_BYTES)
#undef UROCE_ALL_ONES
#undef UROCE_ALL_ONES_BYTES
  expect_round_trip(r);
}

std::array<std::byte, kMadBytes> valid_mad() { return build_cm_mad(CmMad{1, sample_req()}); }

TEST(CmMad, MalformedHeadersAreErrors) {
  auto m = valid_mad();
  for (std::size_t n : {0u, 1u, 23u, 24u, 255u}) {
    auto r = parse_cm_mad(ConstBytes(m.data(), n));
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.error(), CmParseError::kBadLength);
  }
  std::vector<std::byte> longer(m.begin(), m.end());
  longer.push_back(std::byte{0});
  EXPECT_EQ(parse_cm_mad(longer).error(), CmParseError::kBadLength);

  const std::vector<std::tuple<std::size_t, std::uint8_t, CmParseError>> cases = {
      {0, 2, CmParseError::kBadBaseVersion},
      {1, 0x81, CmParseError::kNotCm},
      {1, 0x03, CmParseError::kNotCm},
      {2, 1, CmParseError::kBadClassVersion},
      {2, 3, CmParseError::kBadClassVersion},
      {3, 0x83, CmParseError::kBadMethod},
      {3, 0x01, CmParseError::kBadMethod},
      {17, 0x00, CmParseError::kUnknownAttribute},
      {17, 0x1b, CmParseError::kUnknownAttribute},
      {17, 0x19, CmParseError::kUnsupportedAttribute},
      {17, 0x1a, CmParseError::kUnsupportedAttribute},
      {16, 0x01, CmParseError::kUnknownAttribute},
  };
  for (const auto& [off, v, want] : cases) {
    auto bad = valid_mad();
    bad[off] = std::byte{v};
    auto r = parse_cm_mad(bad);
    ASSERT_FALSE(r.ok()) << off;
    EXPECT_EQ(r.error(), want) << "byte " << off << " = " << int{v};
  }
}

TEST(CmMad, InfoLengthsOverTheAreaAreErrors) {
  CmRej rej;
  auto m = build_cm_mad(CmMad{1, rej});
  m[kMadHeaderBytes + 9] = std::byte{73 << 1};
  EXPECT_EQ(parse_cm_mad(m).error(), CmParseError::kBadInfoLength);
  m[kMadHeaderBytes + 9] = std::byte{72 << 1};
  EXPECT_TRUE(parse_cm_mad(m).ok());
  auto s = build_cm_mad(CmMad{1, CmSidrRep{}});
  s[kMadHeaderBytes + 5] = std::byte{200};
  EXPECT_EQ(parse_cm_mad(s).error(), CmParseError::kBadInfoLength);
}

// Every byte string of a wrong header must fail cleanly, whatever the rest holds (no crash, no
// out-of-bounds read under ASan).
TEST(CmMad, NoCrashOnAnyAttributeOrGarbage) {
  auto m = valid_mad();
  for (unsigned attr = 0; attr < 0x30; ++attr) {
    for (unsigned fill : {0x00u, 0xffu, 0x5au}) {
      for (std::size_t i = kMadHeaderBytes; i < kMadBytes; ++i) m[i] = std::byte(fill);
      m[16] = std::byte{0};
      m[17] = std::byte(attr);
      auto r = parse_cm_mad(m);
      if (r.ok()) {
        EXPECT_EQ(static_cast<unsigned>(cm_attr_of(r->message)), attr);
      }
    }
  }
}

TEST(CmMad, PrivateDataLimits) {
  CmReq r;
  std::vector<std::byte> user(92, std::byte{1});
  EXPECT_TRUE(set_private_data(r.private_data, user));
  user.push_back(std::byte{1});
  EXPECT_FALSE(set_private_data(r.private_data, user));
}

TEST(CmaHeader, Ipv4RoundTripAndLayout) {
  CmaHeader h;
  h.ip_version = 4;
  h.src_port = 0x1d2f;
  h.src_addr = cma_ipv4_addr(0xc0a80001);
  h.dst_addr = cma_ipv4_addr(0xc0a80002);
  CmReq r;
  std::vector<std::byte> user(56, std::byte{0x77});
  auto n = encode_cma_private_data(h, user, as_mut_bytes(r.private_data.data(), 92));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 92u);
  EXPECT_EQ(r.private_data[0], 0x00);
  EXPECT_EQ(r.private_data[1], 0x40);
  EXPECT_EQ(r.private_data[2], 0x1d);
  EXPECT_EQ(r.private_data[3], 0x2f);
  for (std::size_t i = 4; i < 16; ++i) EXPECT_EQ(r.private_data[i], 0) << i;
  EXPECT_EQ(r.private_data[16], 0xc0);
  EXPECT_EQ(r.private_data[19], 0x01);
  EXPECT_EQ(r.private_data[35], 0x02);
  EXPECT_EQ(r.private_data[36], 0x77);
  auto back = parse_cma_header(as_bytes(r.private_data.data(), 92));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, h);
  user.push_back(std::byte{0});
  EXPECT_EQ(encode_cma_private_data(h, user, as_mut_bytes(r.private_data.data(), 92)).error(),
            CmaHeaderError::kPrivateDataTooLong);
}

TEST(CmaHeader, Ipv6AndErrors) {
  CmaHeader h;
  h.ip_version = 6;
  h.src_addr = gid(0x20);
  h.dst_addr = gid(0x30);
  std::array<std::byte, 216> area{};
  ASSERT_TRUE(encode_cma_private_data(h, {}, area).ok());
  EXPECT_EQ(static_cast<std::uint8_t>(area[1]), 0x60);
  EXPECT_EQ(*parse_cma_header(area), h);
  EXPECT_EQ(parse_cma_header(ConstBytes(area.data(), 35)).error(), CmaHeaderError::kShort);
  area[0] = std::byte{1};
  EXPECT_EQ(parse_cma_header(area).error(), CmaHeaderError::kBadVersion);
  area[0] = std::byte{0};
  area[1] = std::byte{0x50};
  EXPECT_EQ(parse_cma_header(area).error(), CmaHeaderError::kBadIpVersion);
}

// The visitor yields every field of cm_mad.def, in its order, at its location, with the
// message's value; the private data is not among them.
TEST(CmMad, FieldVisitorYieldsEveryFieldInTableOrder) {
  const CmReq r = sample_req();
  std::vector<CmFieldView> seen;
  for_each_cm_field(r, [&](const CmFieldView& f) { seen.push_back(f); });
  ASSERT_EQ(seen.size(), std::size(kCmReqFields));
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].byte, kCmReqFields[i].byte) << seen[i].name;
    EXPECT_EQ(seen[i].bit, kCmReqFields[i].bit) << seen[i].name;
    EXPECT_EQ(seen[i].bits, kCmReqFields[i].bits) << seen[i].name;
  }
  EXPECT_EQ(seen.front().name, "local_comm_id");
  EXPECT_EQ(seen.front().value, r.local_comm_id);
  EXPECT_EQ(seen.back().name, "sap_supported");
  const auto qpn = std::find_if(seen.begin(), seen.end(),
                                [](const CmFieldView& f) { return f.name == "local_qpn"; });
  ASSERT_NE(qpn, seen.end());
  EXPECT_EQ(qpn->value, r.local_qpn);
  EXPECT_FALSE(qpn->is_bytes());
  const auto gid = std::find_if(seen.begin(), seen.end(),
                                [](const CmFieldView& f) { return f.name == "primary_local_gid"; });
  ASSERT_NE(gid, seen.end());
  ASSERT_TRUE(gid->is_bytes());
  ASSERT_EQ(gid->bytes.size(), 16u);
  EXPECT_EQ(static_cast<std::uint8_t>(gid->bytes[15]), r.primary_local_gid[15]);
  const ConstBytes pd = cm_private_data(r);
  EXPECT_EQ(pd.size(), CmReq::kPrivateDataBytes);
  EXPECT_EQ(static_cast<const void*>(pd.data()), static_cast<const void*>(r.private_data.data()));

  // Every attribute: as many fields as its table lists.
  std::size_t n = 0;
#define UROCE_COUNT_FIELDS(T, id, name, fields, pd_off, pd_bytes) \
  n = 0;                                                          \
  for_each_cm_field(Cm##T{}, [&](const CmFieldView&) { ++n; });   \
  EXPECT_EQ(n, std::size(kCm##T##Fields)) << name;
  UROCE_CM_ATTRS(UROCE_COUNT_FIELDS)
#undef UROCE_COUNT_FIELDS
}

TEST(CmMad, ValueNames) {
  EXPECT_EQ(cm_rej_reason_name(28), "consumer_defined");
  EXPECT_EQ(cm_rej_reason_name(static_cast<std::uint16_t>(CmRejReason::kStaleConn)), "stale_conn");
  EXPECT_EQ(cm_rej_reason_name(18), "invalid_alt_gid");
  EXPECT_EQ(cm_rej_reason_name(34), std::nullopt);
  EXPECT_EQ(cm_rej_reason_name(0), std::nullopt);
  EXPECT_EQ(cm_msg_response_name(1), "REP");
  EXPECT_EQ(cm_msg_response_name(3), std::nullopt);
  EXPECT_EQ(sidr_status_name(3), "no_qp");
  EXPECT_EQ(sidr_status_name(6), std::nullopt);
}

TEST(RdmaServiceId, PortSpaces) {
  EXPECT_EQ(rdma_service_id(RdmaPortSpace::kTcp, 7471), 0x0000000001061d2full);
  EXPECT_EQ(rdma_service_id(RdmaPortSpace::kUdp, 1), 0x0000000001110001ull);
  auto t = parse_rdma_ip_service_id(0x0000000001061d2full);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->port_space, RdmaPortSpace::kTcp);
  EXPECT_EQ(t->port, 7471);
  EXPECT_EQ(parse_rdma_ip_service_id(0x00000000013f0001ull), std::nullopt);
  EXPECT_EQ(parse_rdma_ip_service_id(0x0000000101060001ull), std::nullopt);

  // Any of the four port spaces, as rdma_get_service_id() forms an IP-addressed ID's.
  for (const auto ps :
       {RdmaPortSpace::kIpoib, RdmaPortSpace::kTcp, RdmaPortSpace::kUdp, RdmaPortSpace::kIb}) {
    const auto sid = parse_rdma_service_id(rdma_service_id(ps, 4791));
    ASSERT_TRUE(sid.has_value());
    EXPECT_EQ(sid->port_space, ps);
    EXPECT_EQ(sid->port, 4791);
  }
  EXPECT_EQ(rdma_port_space_name(RdmaPortSpace::kIb), "RDMA_PS_IB");
  EXPECT_EQ(rdma_port_space_name(RdmaPortSpace::kIpoib), "RDMA_PS_IPOIB");
  EXPECT_EQ(parse_rdma_service_id(0x0000000001070001ull), std::nullopt);
  EXPECT_EQ(parse_rdma_service_id(0x0000000101060001ull), std::nullopt);
}

// A CM MAD's BTH and DETH: UD SEND Only (0x64) from QP 1 to QP 1, P_Key 0xffff, the GSI's
// Q_Key 0x80010000, the PSN given (24 bits), no pad for the 256-byte MAD.
TEST(GsiMadHeaders, AreAUdSendOnlyFromQp1ToQp1) {
  std::array<std::byte, 32> out{};
  ASSERT_EQ(write_gsi_mad_headers(MutBytes(out), 0x1abcdef), 20u);
  const std::array<std::uint8_t, 20> want = {0x64, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00,
                                             0x01, 0x00, 0xab, 0xcd, 0xef, 0x80, 0x01,
                                             0x00, 0x00, 0x00, 0x00, 0x00, 0x01};
  for (std::size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(static_cast<std::uint8_t>(out[k]), want[k]) << "byte " << k;
  }
}

}  // namespace
}  // namespace uroce::wire

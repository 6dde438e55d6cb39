#include "tools/pcap_cmd.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "capture/pcap_file.h"
#include "devd/cm_keys.h"
#include "support/golden.h"
#include "wire/builder.h"
#include "wire/cm_mad.h"

namespace uroce::tools {
namespace {

// Captures what a command prints to a FILE*.
class Output {
 public:
  Output() : f_(open_memstream(&buf_, &len_)) {}
  ~Output() {
    if (f_ != nullptr) std::fclose(f_);
    std::free(buf_);
  }
  std::FILE* file() { return f_; }
  std::string text() {
    std::fflush(f_);
    return std::string(buf_, len_);
  }

 private:
  char* buf_ = nullptr;
  std::size_t len_ = 0;
  std::FILE* f_;
};

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("uroce_tools_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

void write_pcap(const std::string& path, const std::vector<std::vector<std::byte>>& frames,
                int link_type = 1) {
  auto w = capture::PcapWriter::open(path, link_type);
  ASSERT_TRUE(w.ok());
  for (const auto& f : frames) w->write(f, 0);
}

TEST(PcapCheck, EveryGoldenCaptureIsValid) {
  Output out, err;
  EXPECT_EQ(pcap_check(test::golden_files(), out.file(), err.file()), kExitOk);
  const std::string text = out.text();
  EXPECT_NE(text.find("total: 6828 frames, 6828 valid RoCEv2, 0 invalid, 0 other traffic"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("0x14 RC Fetch & Add"), std::string::npos);
  EXPECT_NE(text.find("0x12 RC Atomic Acknowledge"), std::string::npos);
  EXPECT_EQ(err.text(), "");
}

TEST(PcapCheck, CorruptedPacketFailsWithItsFrameAndReason) {
  auto frames = test::load_frames(test::data_dir() + "/golden/rdma_write_bw.pcap");
  std::vector<std::vector<std::byte>> bytes;
  for (const auto& f : frames) bytes.push_back(f.bytes);
  bytes[4][100] ^= std::byte{0x01};      // payload bit of frame 5
  bytes[6].resize(bytes[6].size() - 3);  // frame 7 cut short, as if truncated in flight
  const std::string path = temp_path("corrupt.pcap");
  write_pcap(path, bytes);
  Output out, err;
  EXPECT_EQ(pcap_check({path}, out.file(), err.file()), kExitInvalidPackets);
  const std::string text = out.text();
  EXPECT_NE(text.find("frame 5: invalid: bad_icrc (ICRC mismatch)"), std::string::npos) << text;
  EXPECT_NE(text.find("frame 7: invalid: bad_ip_length"), std::string::npos) << text;
  EXPECT_NE(text.find("250 frames, 248 valid RoCEv2, 2 invalid"), std::string::npos) << text;
  std::filesystem::remove(path);
}

TEST(PcapCheck, OtherTrafficIsCountedNotFailed) {
  auto frames = test::load_frames(test::data_dir() + "/golden/rc_send_only.pcap");
  std::vector<std::byte> arp(60, std::byte{0});
  store_be16(arp, 12, 0x0806);
  std::vector<std::byte> dns = frames[0].bytes;
  store_be16(dns, 36, 53);  // UDP destination port
  const std::string path = temp_path("mixed.pcap");
  write_pcap(path, {frames[0].bytes, arp, dns});
  Output out, err;
  EXPECT_EQ(pcap_check({path}, out.file(), err.file()), kExitOk);
  EXPECT_NE(out.text().find("3 frames, 1 valid RoCEv2, 0 invalid, 2 other traffic"),
            std::string::npos)
      << out.text();
  std::filesystem::remove(path);
}

TEST(PcapCheck, SnaplenCutFramesAreUnverifiableAndFail) {
  auto frames = test::load_frames(test::data_dir() + "/golden/rc_send_multi.pcap");
  const std::string path = temp_path("cut.pcap");
  {
    auto w = capture::PcapWriter::open(path);
    ASSERT_TRUE(w.ok());
    const auto& f = frames[0].bytes;
    w->write(ConstBytes(f).first(64), 0, static_cast<std::uint32_t>(f.size()));
  }
  Output out, err;
  EXPECT_EQ(pcap_check({path}, out.file(), err.file()), kExitInvalidPackets);
  EXPECT_NE(out.text().find("cut by the capture"), std::string::npos) << out.text();
  std::filesystem::remove(path);
}

TEST(PcapCheck, FileErrors) {
  Output out, err;
  EXPECT_EQ(pcap_check({"/nonexistent.pcap"}, out.file(), err.file()), kExitFileError);
  EXPECT_NE(err.text().find("/nonexistent.pcap"), std::string::npos);
  const std::string path = temp_path("wifi.pcap");
  write_pcap(path, {std::vector<std::byte>(40)}, 105);  // IEEE 802.11
  Output out2, err2;
  EXPECT_EQ(pcap_check({path}, out2.file(), err2.file()), kExitFileError);
  EXPECT_NE(err2.text().find("unsupported link type 105"), std::string::npos) << err2.text();
  std::filesystem::remove(path);
}

TEST(PcapCheck, RawIpAndIpv6Captures) {
  wire::OuterHeaders o;
  o.ethernet = false;
  o.src.v6 = o.dst.v6 = true;
  o.src.bytes[15] = 1;
  o.dst.bytes[15] = 2;
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kCnp);
  h.bth.becn = true;
  std::vector<std::byte> frame(256);
  frame.resize(wire::build_frame(frame, o, h, {}));
  const std::string path = temp_path("raw6.pcap");
  write_pcap(path, {frame}, 101);
  Output out, err;
  EXPECT_EQ(pcap_check({path}, out.file(), err.file()), kExitOk);
  EXPECT_NE(out.text().find("0x81 CNP"), std::string::npos) << out.text();
  Output dump, derr;
  EXPECT_EQ(pcap_dump(path, dump.file(), derr.file()), kExitOk);
  EXPECT_NE(dump.text().find("[::1]:49152 -> [::2]:4791"), std::string::npos) << dump.text();
  EXPECT_NE(dump.text().find("CNP (congestion notification)"), std::string::npos);
  EXPECT_NE(dump.text().find("BECN 1"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(PcapDump, DecodesEveryHeaderAndSyndrome) {
  Output out, err;
  EXPECT_EQ(pcap_dump(test::data_dir() + "/golden/atomic_fadd.pcap", out.file(), err.file()),
            kExitOk);
  std::string text = out.text();
  EXPECT_NE(text.find("#1 "), std::string::npos);
  EXPECT_NE(text.find("10.99.0.12:50052 -> 10.99.0.11:4791"), std::string::npos) << text;
  EXPECT_NE(text.find("BTH  RC Fetch & Add (0x14) QPN 0x00001e"), std::string::npos);
  EXPECT_NE(text.find("AtomicETH VA 0x00005578fd017000 R_Key 0x00000c91 SwapAdd "
                      "0x0000000000000001"),
            std::string::npos);
  EXPECT_NE(text.find("AtomicAckETH OrigRemDt"), std::string::npos);
  EXPECT_NE(text.find("ICRC 0x0d0ddd31 ok"), std::string::npos);
  EXPECT_EQ(text.find("BAD"), std::string::npos);

  Output loss, lerr;
  EXPECT_EQ(pcap_dump(test::data_dir() + "/golden/loss_write_bw.pcap", loss.file(), lerr.file()),
            kExitOk);
  EXPECT_NE(loss.text().find("AETH syndrome 0x60 NAK PSN sequence error"), std::string::npos);
  EXPECT_NE(loss.text().find("RETH VA 0x"), std::string::npos);

  Output rnr, rerr;
  EXPECT_EQ(pcap_dump(test::data_dir() + "/golden/rnr_send.pcap", rnr.file(), rerr.file()),
            kExitOk);
  EXPECT_NE(rnr.text().find("AETH syndrome 0x2c RNR NAK timer=12 (0.64 ms)"), std::string::npos);

  Output ud, uerr;
  EXPECT_EQ(pcap_dump(test::data_dir() + "/golden/ud_send.pcap", ud.file(), uerr.file()), kExitOk);
  EXPECT_NE(ud.text().find("DETH Q_Key 0x11111111"), std::string::npos);
}

TEST(PcapDump, ShowsBadIcrcWithTheExpectedValue) {
  auto frames = test::load_frames(test::data_dir() + "/golden/rc_send_only.pcap");
  std::vector<std::byte> f = frames[0].bytes;
  f[60] ^= std::byte{0x80};
  std::vector<std::byte> runt(20, std::byte{0});
  store_be16(runt, 12, 0x0800);
  const std::string path = temp_path("bad.pcap");
  write_pcap(path, {f, runt});
  Output out, err;
  EXPECT_EQ(pcap_dump(path, out.file(), err.file()), kExitInvalidPackets);
  EXPECT_NE(out.text().find("BAD (expected 0x"), std::string::npos) << out.text();
  EXPECT_NE(out.text().find("#2 t=0.000000000 len 20 INVALID: truncated_ip"), std::string::npos)
      << out.text();
  std::filesystem::remove(path);
}

// IBTA 1.5: a FLUSH's FETH and RETH, an ATOMIC WRITE's RETH and its 8 bytes.
TEST(PcapDump, DecodesFlushAndAtomicWrite) {
  wire::OuterHeaders o;
  o.src = wire::IpAddress::v4(0x0a000001);
  o.dst = wire::IpAddress::v4(0x0a000002);
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcFlush);
  h.bth.dest_qpn = 0x11;
  h.feth = wire::Feth{wire::kFlushGlobal, wire::kFlushMr};
  h.reth = wire::Reth{0x7f0000001000, 0x1234, 4096};
  std::vector<std::byte> flush(256);
  flush.resize(wire::build_frame(flush, o, h, {}));
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcAtomicWrite);
  h.reth.dma_length = 8;
  const std::vector<std::byte> value(8, std::byte{0x5a});
  std::vector<std::byte> aw(256);
  aw.resize(wire::build_frame(aw, o, h, value));
  const std::string path = temp_path("ibta15.pcap");
  write_pcap(path, {flush, aw});
  Output out, err;
  EXPECT_EQ(pcap_dump(path, out.file(), err.file()), kExitOk);
  const std::string text = out.text();
  EXPECT_NE(text.find("BTH  RC FLUSH (0x1c)"), std::string::npos) << text;
  EXPECT_NE(text.find("FETH placement 0x1 global selectivity 1 (memory region)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("RETH VA 0x00007f0000001000 R_Key 0x00001234 DMA length 4096"),
            std::string::npos);
  EXPECT_NE(text.find("BTH  RC ATOMIC WRITE (0x1d)"), std::string::npos);
  EXPECT_NE(text.find("payload 8 bytes, pad 0"), std::string::npos);
  EXPECT_EQ(text.find("BAD"), std::string::npos);
  std::filesystem::remove(path);
}

// ---- QP 1: CM MADs ----

// The frame of a datagram to QP 1 from QP 1 carrying `payload` (a MAD, or not quite one).
std::vector<std::byte> gsi_frame(ConstBytes payload, std::uint32_t qkey = wire::kGsiQkey,
                                 wire::Opcode op = wire::Opcode::kUdSendOnly) {
  wire::OuterHeaders o;
  o.src = wire::IpAddress::v4(0x0a000001);
  o.dst = wire::IpAddress::v4(0x0a000002);
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(op);
  h.bth.dest_qpn = wire::kGsiQpn;
  h.bth.pkey = 0xffff;
  h.deth.qkey = qkey;
  h.deth.src_qpn = wire::kGsiQpn;
  std::vector<std::byte> frame(payload.size() + 128);
  frame.resize(wire::build_frame(frame, o, h, payload));
  return frame;
}

// A REQ as rdma_cm sends it: RDMA_PS_TCP service ID and a cma_hdr in front of the user's data.
wire::CmReq rdma_cm_req() {
  wire::CmReq req;
  req.local_comm_id = 0x01020304;
  req.service_id = wire::rdma_service_id(wire::RdmaPortSpace::kTcp, 7174);
  req.local_qpn = 0x000123;
  req.path_mtu = 5;
  wire::CmaHeader h;
  h.src_port = 40000;
  h.src_addr = wire::cma_ipv4_addr(0x0a000001);
  h.dst_addr = wire::cma_ipv4_addr(0x0a000002);
  const std::uint8_t user[] = {0xde, 0xad, 0xbe, 0xef};
  auto used = wire::encode_cma_private_data(h, as_bytes(user, sizeof user),
                                            as_mut_bytes(req.private_data.data(), 92));
  UROCE_CHECK(used.ok());
  return req;
}

// The value printed after `name ` in the first line of `text` at or after `from` that has it.
std::string field_after(const std::string& text, const std::string& name, std::size_t from = 0) {
  const std::size_t at = text.find(name + " ", from);
  if (at == std::string::npos) return "";
  const std::size_t begin = at + name.size() + 1;
  return text.substr(begin, text.find_first_of(" \n", begin) - begin);
}

TEST(PcapDump, KernelRdmaCmMadsDecodeEveryField) {
  Output out, err;
  ASSERT_EQ(pcap_dump(test::data_dir() + "/golden/rping.pcap", out.file(), err.file()), kExitOk);
  const std::string text = out.text();
  const std::size_t req = text.find("  CM   REQ (0x0010) TID 0x");
  const std::size_t rep = text.find("  CM   REP (0x0013) TID 0x");
  const std::size_t rtu = text.find("  CM   RTU (0x0014) TID 0x");
  const std::size_t dreq = text.find("  CM   DREQ (0x0015) TID 0x");
  const std::size_t drep = text.find("  CM   DREP (0x0016) TID 0x");
  ASSERT_NE(req, std::string::npos) << text;
  ASSERT_NE(drep, std::string::npos) << text;
  EXPECT_TRUE(req < rep && rep < rtu && rtu < dreq && dreq < drep);
  EXPECT_NE(text.find("  MAD  base 1 class 0x07 (CM) version 2 method 0x03 status 0x0000"),
            std::string::npos);
  // The REQ: rping's port 7174 in RDMA_PS_TCP, the kernel's CM constants, the IP-mapped GIDs
  // and the cma_hdr naming the same two addresses.
  EXPECT_EQ(field_after(text, "service_id", req), "0x0000000001061c06");
  EXPECT_NE(text.find("service_id 0x0000000001061c06 (RDMA_PS_TCP port 7174)", req),
            std::string::npos);
  EXPECT_EQ(field_after(text, "max_cm_retries", req), "15");
  EXPECT_EQ(field_after(text, "remote_cm_response_timeout", req), "20");
  EXPECT_EQ(field_after(text, "primary_local_lid", req), "0xffff");
  EXPECT_EQ(field_after(text, "primary_local_gid", req), "::ffff:10.99.0.12");
  EXPECT_EQ(field_after(text, "primary_remote_gid", req), "::ffff:10.99.0.11");
  EXPECT_EQ(field_after(text, "sap_supported", req), "0");  // the REQ's last field
  EXPECT_NE(text.find("cma_hdr version 0 IPv4 port ", req), std::string::npos);
  EXPECT_LT(text.find(" src 10.99.0.12 dst 10.99.0.11\n", req), rep);
  EXPECT_LT(text.find("user private_data 56 bytes: all zero", req), rep);
  // Every MAD of the exchange keeps the REQ's transaction ID.
  const std::string tid = field_after(text, "TID", req);
  for (const std::size_t at : {rep, rtu, dreq, drep}) EXPECT_EQ(field_after(text, "TID", at), tid);
  // The comm IDs name each other.
  const std::string active_id = field_after(text, "local_comm_id", req);
  EXPECT_EQ(field_after(text, "remote_comm_id", rep), active_id);
  EXPECT_EQ(field_after(text, "local_comm_id", rtu), active_id);
  // The REP's QPN is the one the active side's RC packets then target, and the REQ's the one the
  // passive side's target.
  const std::string rep_qpn = field_after(text, "local_qpn", rep);
  const std::string req_qpn = field_after(text, "local_qpn", req);
  EXPECT_EQ(rep_qpn.size(), 8u) << rep_qpn;
  const std::regex rc(
      R"(10\.99\.0\.(\d+):\d+ -> 10\.99\.0\.\d+:4791\n.*\n  BTH  RC [^\n]* QPN (0x[0-9a-f]{6}) )");
  int rc_packets = 0;
  for (std::sregex_iterator it(text.begin() + static_cast<std::ptrdiff_t>(rtu), text.end(), rc),
       end;
       it != end; ++it) {
    ++rc_packets;
    EXPECT_EQ((*it)[2].str(), (*it)[1].str() == "12" ? rep_qpn : req_qpn) << (*it)[0].str();
  }
  EXPECT_EQ(rc_packets, 60);
  EXPECT_EQ(field_after(text, "remote_qpn_eecn", dreq).size(), 8u);
  EXPECT_NE(text.find("private_data 196 bytes: all zero", rep), std::string::npos);
  EXPECT_EQ(text.find("INVALID"), std::string::npos);
}

TEST(PcapCheck, KernelRdmaCmMadsAreValidAndCountedPerAttribute) {
  Output out, err;
  EXPECT_EQ(pcap_check({test::data_dir() + "/golden/rping.pcap"}, out.file(), err.file()), kExitOk);
  const std::string text = out.text();
  EXPECT_NE(text.find("65 frames, 65 valid RoCEv2, 0 invalid, 0 other traffic"), std::string::npos)
      << text;
  for (const char* line : {"  CM   0x0010 REQ", "  CM   0x0013 REP", "  CM   0x0014 RTU",
                           "  CM   0x0015 DREQ", "  CM   0x0016 DREP"}) {
    const std::size_t at = text.find(line);
    ASSERT_NE(at, std::string::npos) << line << "\n" << text;
    EXPECT_EQ(text.substr(text.find('\n', at) - 2, 2), " 1") << line;
  }
  EXPECT_EQ(text.find("invalid:"), std::string::npos);
}

TEST(PcapCheck, MalformedMadsToQp1AreInvalidWithTheirReason) {
  const auto good = wire::build_cm_mad(wire::CmMad{7, rdma_cm_req()});
  auto with = [&](std::size_t off, std::uint8_t v) {
    auto m = good;
    m[off] = std::byte{v};
    return m;
  };
  auto attr = [&](std::uint16_t id) {
    auto m = good;
    store_be16(m, wire::kMadOffAttrId, id);
    return m;
  };
  std::array<std::byte, wire::kMadBytes> garbage;
  for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = std::byte(i * 37 + 11);
  auto other_class = good;
  other_class[wire::kMadOffMgmtClass] = std::byte{0x04};  // Performance Management
  const std::vector<std::vector<std::byte>> frames = {
      gsi_frame(good),                                                // 1: valid REQ
      gsi_frame(attr(0x0042)),                                        // 2
      gsi_frame(with(wire::kMadOffClassVersion, 1)),                  // 3
      gsi_frame(ConstBytes(good).first(200)),                         // 4: truncated
      gsi_frame(good, 0x11111111),                                    // 5: wrong Q_Key
      gsi_frame(good, wire::kGsiQkey, wire::Opcode::kUdSendOnlyImm),  // 6
      gsi_frame(attr(0x0019)),                                        // 7: LAP
      gsi_frame(with(wire::kMadOffBaseVersion, 2)),                   // 8
      gsi_frame(with(wire::kMadOffMethod, 0x01)),                     // 9: Get
      gsi_frame(garbage),                                             // 10
      gsi_frame(other_class),                                         // 11: valid, not CM
      gsi_frame({}),                                                  // 12: empty
  };
  const std::string path = temp_path("bad_mads.pcap");
  write_pcap(path, frames);
  Output out, err;
  EXPECT_EQ(pcap_check({path}, out.file(), err.file()), kExitInvalidPackets);
  const std::string text = out.text();
  const char* want[] = {
      "frame 2: invalid: bad_cm_mad (unknown CM attribute; got 0x0042)",
      "frame 3: invalid: bad_cm_mad (CM class version is not 2; got 1)",
      "frame 4: invalid: bad_cm_mad (MAD is not 256 bytes; got 200)",
      "frame 5: invalid: bad_gsi_qkey (Q_Key 0x11111111 to QP 1 is not GSI_QKEY 0x80010000)",
      "frame 6: invalid: bad_gsi_opcode (QP 1 takes UD SEND Only, not UD SEND Only with "
      "Immediate)",
      "frame 7: invalid: bad_cm_mad (unsupported CM attribute (LAP/APR); got 0x0019)",
      "frame 8: invalid: bad_cm_mad (MAD base version is not 1; got 2)",
      "frame 9: invalid: bad_cm_mad (method is not Send; got 0x01)",
      "frame 10: invalid: bad_cm_mad (",
      "frame 12: invalid: bad_cm_mad (MAD is not 256 bytes; got 0)",
      "12 frames, 2 valid RoCEv2, 10 invalid, 0 other traffic",
      "  CM   0x0010 REQ ",
      "  MAD  class 0x04 (not CM) ",
  };
  for (const char* w : want) EXPECT_NE(text.find(w), std::string::npos) << w << "\n" << text;
  EXPECT_EQ(text.find("frame 1:"), std::string::npos) << text;
  EXPECT_EQ(text.find("frame 11:"), std::string::npos) << text;

  Output dump, derr;
  EXPECT_EQ(pcap_dump(path, dump.file(), derr.file()), kExitInvalidPackets);
  const std::string d = dump.text();
  EXPECT_NE(d.find("  MAD  INVALID: bad_cm_mad (unknown CM attribute; got 0x0042)"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("(not CM: not decoded)"), std::string::npos) << d;
  EXPECT_EQ(err.text() + derr.text(), "");
  std::filesystem::remove(path);
}

// uroce's key extension (devd/cm_keys.h) of `version` after `mad`: magic, version, three zero
// bytes, a public value (and for version 2 a MAC), each byte of the value/MAC `fill`.
std::vector<std::byte> with_extension(ConstBytes mad, std::uint8_t version,
                                      std::uint8_t fill = 0x5a) {
  std::vector<std::byte> p(mad.begin(), mad.end());
  const std::size_t n = version == engine::kAuthExtensionVersion ? engine::kAuthExtensionBytes
                                                                 : engine::kExtensionBytes;
  for (std::uint8_t c : engine::kExtensionMagic) p.push_back(std::byte{c});
  p.push_back(std::byte{version});
  p.resize(p.size() + 3, std::byte{0});
  p.resize(mad.size() + n, std::byte{fill});
  return p;
}

TEST(PcapCheck, ARepOrRtuWithUroceKeyExtensionIsValidAndAnythingElseAfterAMadIsNot) {
  const auto rep = wire::build_cm_mad(wire::CmMad{8, wire::CmRep{}});
  const auto rtu = wire::build_cm_mad(wire::CmMad{9, wire::CmRtu{}});
  const auto req = wire::build_cm_mad(wire::CmMad{7, rdma_cm_req()});
  auto bad_magic = with_extension(rep, engine::kExtensionVersion);
  bad_magic[wire::kMadBytes] = std::byte{'x'};
  auto v2_short = with_extension(rtu, engine::kAuthExtensionVersion);
  v2_short.resize(wire::kMadBytes + engine::kExtensionBytes);  // version 2 needs its MAC
  const std::vector<std::vector<std::byte>> frames = {
      gsi_frame(with_extension(rep, engine::kExtensionVersion)),      // 1: valid
      gsi_frame(with_extension(rtu, engine::kAuthExtensionVersion)),  // 2: valid
      gsi_frame(with_extension(req, engine::kExtensionVersion)),      // 3: not after a REQ
      gsi_frame(bad_magic),                                           // 4
      gsi_frame(v2_short),                                            // 5
  };
  const std::string path = temp_path("key_extension.pcap");
  write_pcap(path, frames);
  Output out, err;
  EXPECT_EQ(pcap_check({path}, out.file(), err.file()), kExitInvalidPackets);
  const std::string text = out.text();
  const std::string got = std::to_string(wire::kMadBytes + engine::kExtensionBytes);
  const std::string want[] = {
      "frame 3: invalid: bad_cm_mad (a key extension after a REQ (only a REP or RTU carries one))",
      "frame 4: invalid: bad_cm_mad (MAD is not 256 bytes; got " + got + ")",
      "frame 5: invalid: bad_cm_mad (MAD is not 256 bytes; got " + got + ")",
      "5 frames, 2 valid RoCEv2, 3 invalid, 0 other traffic",
  };
  for (const std::string& w : want) EXPECT_NE(text.find(w), std::string::npos) << w << "\n" << text;
  EXPECT_EQ(text.find("frame 1:"), std::string::npos) << text;
  EXPECT_EQ(text.find("frame 2:"), std::string::npos) << text;

  Output dump, derr;
  EXPECT_EQ(pcap_dump(path, dump.file(), derr.file()), kExitInvalidPackets);
  const std::string d = dump.text();
  EXPECT_NE(d.find("  CM   key extension (uroce) version 1: X25519 public value\n"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("  CM   key extension (uroce) version 2: X25519 public value and transcript "
                   "MAC (pre-shared key)\n"),
            std::string::npos)
      << d;
  EXPECT_EQ(err.text() + derr.text(), "");
  std::filesystem::remove(path);
}

TEST(PcapDump, CmValuesByNameAndPrivateDataAsHex) {
  wire::CmRej rej;
  rej.message_rejected = static_cast<std::uint8_t>(wire::CmMsgResponse::kReq);
  rej.reason = static_cast<std::uint16_t>(wire::CmRejReason::kConsumerDefined);
  rej.rejected_info_length = 2;
  rej.ari[0] = 0xab;
  rej.ari[1] = 0xcd;
  rej.private_data[0] = 0x01;
  rej.private_data[17] = 0x02;
  wire::CmSidrReq sidr;
  sidr.service_id = wire::rdma_service_id(wire::RdmaPortSpace::kUdp, 4791);
  wire::CmaHeader h6;
  h6.ip_version = 6;
  h6.src_port = 5000;
  h6.src_addr[0] = 0xfe;
  h6.src_addr[1] = 0x80;
  h6.src_addr[15] = 1;
  h6.dst_addr = h6.src_addr;
  h6.dst_addr[15] = 2;
  ASSERT_TRUE(
      wire::encode_cma_private_data(h6, {}, as_mut_bytes(sidr.private_data.data(), 216)).ok());
  wire::CmSidrRep sidr_rep;
  sidr_rep.status = static_cast<std::uint8_t>(wire::SidrStatus::kNoQp);
  wire::CmReq no_hdr = rdma_cm_req();
  no_hdr.private_data[0] = 0x01;  // cma_version 1: no rdma_cm header after all
  wire::CmMra mra;
  mra.message_mraed = static_cast<std::uint8_t>(wire::CmMsgResponse::kRep);
  mra.service_timeout = 24;
  std::vector<std::vector<std::byte>> frames;
  for (const wire::CmMessage& m : std::vector<wire::CmMessage>{rej, sidr, sidr_rep, no_hdr, mra}) {
    frames.push_back(gsi_frame(wire::build_cm_mad(wire::CmMad{9, m})));
  }
  const std::string path = temp_path("cm_values.pcap");
  write_pcap(path, frames);
  Output out, err;
  EXPECT_EQ(pcap_dump(path, out.file(), err.file()), kExitOk);
  const std::string text = out.text();
  const char* want[] = {
      "  CM   REJ (0x0012) TID 0x0000000000000009 attr_mod 0x00000000",
      "message_rejected 0 (REQ)",
      "reason 0x001c (consumer_defined)",
      "    ari 72 bytes:\n      0000  ab cd\n      + 70 zero bytes\n",
      "    private_data 148 bytes:\n      0000  01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00\n"
      "      0010  00 02\n      + 130 zero bytes\n",
      "  CM   SIDR_REQ (0x0017)",
      "service_id 0x00000000011112b7 (RDMA_PS_UDP port 4791)",
      "    cma_hdr version 0 IPv6 port 5000 src fe80::1 dst fe80::2\n"
      "    user private_data 180 bytes: all zero\n",
      "  CM   SIDR_REP (0x0018)",
      "status 3 (no_qp)",
      "    cma_hdr none (rdma_cm header version is not 0)\n    private_data 92 bytes:\n"
      "      0000  01 40 9c 40",
      "path_mtu 5 (4096)",
      "message_mraed 1 (REP)  service_timeout 24",
  };
  for (const char* w : want) EXPECT_NE(text.find(w), std::string::npos) << w << "\n" << text;
  for (std::size_t begin = 0, end; begin < text.size(); begin = end + 1) {
    end = text.find('\n', begin);
    if (text.compare(begin, 4, "    ") == 0) {
      EXPECT_LE(end - begin, 100u) << text.substr(begin, end - begin);
    }
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace uroce::tools

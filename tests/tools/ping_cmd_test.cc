// uroce ping's wire protocol with ibv_rc_pingpong (the exchanged address string) and the
// devices/devinfo output, in-process.
#include "tools/ping_cmd.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <string>

#include "tools/devinfo_cmd.h"

namespace uroce::tools {
namespace {

Gid v4_gid(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
  Gid g;
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  g.raw[12] = a;
  g.raw[13] = b;
  g.raw[14] = c;
  g.raw[15] = d;
  return g;
}

TEST(PingDest, FormatsAsRcPingpongWithTrailingNul) {
  PingDest d;
  d.lid = 0;
  d.qpn = 0x11;
  d.psn = 0xabcdef;
  d.gid = v4_gid(10, 123, 0, 2);
  const std::string msg = format_ping_dest(d);
  ASSERT_EQ(msg.size(), 52u);
  EXPECT_EQ(msg.back(), '\0');
  // rc_pingpong: "%04x:%06x:%06x:" then the GID's 16 bytes in order as 32 hex digits.
  EXPECT_EQ(msg.substr(0, 51), "0000:000011:abcdef:00000000000000000000ffff0a7b0002");
}

TEST(PingDest, ParsesWhatRxeSends) {
  // What ibv_rc_pingpong -g 1 on rxe0 at 10.123.0.2 sent in the interop test.
  std::string msg = "0000:000012:26609d:00000000000000000000ffff0a7b0002";
  msg.push_back('\0');
  std::string why;
  auto d = parse_ping_dest(msg, &why);
  ASSERT_TRUE(d) << why;
  EXPECT_EQ(d->lid, 0u);
  EXPECT_EQ(d->qpn, 0x12u);
  EXPECT_EQ(d->psn, 0x26609du);
  EXPECT_EQ(d->gid, v4_gid(10, 123, 0, 2));
  EXPECT_EQ(gid_to_text(d->gid), "::ffff:10.123.0.2");
}

TEST(PingDest, RoundTripsIpv6Gids) {
  PingDest d;
  d.lid = 0xffff;
  d.qpn = 0xffffff;
  d.psn = 0;
  const std::uint8_t raw[16] = {0xfd, 0, 0x01, 0x23, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
  std::copy(raw, raw + 16, d.gid.raw.begin());
  std::string why;
  auto back = parse_ping_dest(format_ping_dest(d), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->lid, 0xffffu);
  EXPECT_EQ(back->qpn, 0xffffffu);
  EXPECT_EQ(back->gid, d.gid);
  EXPECT_EQ(gid_to_text(back->gid), "fd00:123::1");
}

TEST(PingDest, RejectsMalformedMessagesWithAReason) {
  std::string why;
  auto nul = [](std::string s) {
    s.push_back('\0');
    return s;
  };
  EXPECT_FALSE(parse_ping_dest("0000:000011", &why));
  EXPECT_NE(why.find("52 bytes"), std::string::npos);
  EXPECT_FALSE(parse_ping_dest(nul("zzzz:000011:000000:00000000000000000000ffff0a7b0002"), &why));
  EXPECT_NE(why.find("not hexadecimal"), std::string::npos);
  EXPECT_FALSE(parse_ping_dest(nul("0000:000011:000000:00000000000000000000ffff0a7b00g2"), &why));
  EXPECT_NE(why.find("GID"), std::string::npos);
  EXPECT_FALSE(parse_ping_dest(nul("0000-000011-000000-00000000000000000000ffff0a7b0002"), &why));
  EXPECT_NE(why.find("LID:QPN:PSN:GID"), std::string::npos);
  // 52 bytes but no NUL at the end.
  EXPECT_FALSE(parse_ping_dest("0000:000011:000000:00000000000000000000ffff0a7b00021", &why));
}

TEST(Devices, ListsTheConfiguredDevicesAsIbvDevices) {
  ::setenv("UROCE_DEVICES", "a0=127.0.0.1,b1=127.0.0.2", 1);
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* out = ::open_memstream(&buf, &len);
  EXPECT_EQ(devices_run(out, stderr), 0);
  std::fclose(out);
  const std::string text(buf, len);
  std::free(buf);
  ::unsetenv("UROCE_DEVICES");
  EXPECT_EQ(text,
            "    device          \t   node GUID\n"
            "    ------          \t----------------\n"
            "    a0              \t02007f7572000001\n"
            "    b1              \t02007f7572000002\n");
}

TEST(Devinfo, ShowsPortMtuGidTableAndLimits) {
  DevinfoOptions opt;
  opt.address = "127.0.0.1";  // lo: MTU 65536 -> active MTU 4096
  opt.verbose = true;
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* out = ::open_memstream(&buf, &len);
  EXPECT_EQ(devinfo_run(opt, out, stderr), 0);
  std::fclose(out);
  const std::string text(buf, len);
  std::free(buf);
  EXPECT_NE(text.find("hca_id:\turoce0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"), std::string::npos);
  EXPECT_NE(text.find("\t\t\tactive_mtu:\t\t4096 (5)\n"), std::string::npos);
  EXPECT_NE(text.find("\t\t\tlink_layer:\t\tEthernet\n"), std::string::npos);
  EXPECT_NE(text.find("\t\t\tGID[  0]:\t\t::ffff:127.0.0.1, RoCE v2\n"), std::string::npos);
  EXPECT_NE(text.find("\tmax_qp_wr:\t\t\t"), std::string::npos);
  EXPECT_NE(text.find("\t\t\tphys_state:\t\tLINK_UP (5)\n"), std::string::npos);
}

TEST(Devinfo, UnknownDeviceAndForeignAddressAreErrors) {
  DevinfoOptions opt;
  opt.ib_dev = "nosuchdev";
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* err = ::open_memstream(&buf, &len);
  EXPECT_EQ(devinfo_run(opt, stdout, err), 1);
  opt.ib_dev.clear();
  opt.address = "192.0.2.1";  // TEST-NET-1: on no interface here
  EXPECT_EQ(devinfo_run(opt, stdout, err), 1);
  std::fclose(err);
  const std::string text(buf, len);
  std::free(buf);
  EXPECT_NE(text.find("no device named 'nosuchdev'"), std::string::npos) << text;
  EXPECT_NE(text.find("192.0.2.1"), std::string::npos) << text;
}

}  // namespace
}  // namespace uroce::tools

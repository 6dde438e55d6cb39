// `uroce doctor`'s pure parts: the nftables rules that drop RoCEv2, read from `nft -a list
// ruleset`'s text, and the RoCE MTU problem of an interface MTU.
#include <gtest/gtest.h>

#include "tools/doctor_cmd.h"
#include "tools/doctor_probe.h"

namespace uroce::tools {
namespace {

constexpr const char* kRuleset = R"(table inet filter { # handle 1
	chain input { # handle 1
		type filter hook input priority filter; policy accept;
		ct state established,related accept # handle 4
		tcp dport 22 drop # handle 5
		udp dport 4791 drop # handle 6
		iifname "eth0" udp dport { 53, 4791 } reject # handle 7
		udp dport 4792 accept # handle 8
	}
}
table ip dr42 { # handle 2
	chain in { # handle 1
		type filter hook input priority 0; policy accept;
		meta l4proto udp counter packets 0 bytes 0 drop # handle 3
		meta l4proto udp udp sport 53 drop # handle 9
	}
}
)";

TEST(DoctorNft, FindsTheRulesThatDropUdp4791OrAllUdp) {
  const auto rules = nft_rules_dropping_4791(kRuleset);
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0].text, "udp dport 4791 drop");
  EXPECT_EQ(rules[0].delete_command, "nft delete rule inet filter input handle 6");
  EXPECT_EQ(rules[1].text, "iifname \"eth0\" udp dport { 53, 4791 } reject");
  EXPECT_EQ(rules[1].delete_command, "nft delete rule inet filter input handle 7");
  EXPECT_EQ(rules[2].text, "meta l4proto udp counter packets 0 bytes 0 drop");
  EXPECT_EQ(rules[2].delete_command, "nft delete rule ip dr42 in handle 3");
}

TEST(DoctorNft, AnEmptyOrAcceptingRulesetDropsNothing) {
  EXPECT_TRUE(nft_rules_dropping_4791("").empty());
  EXPECT_TRUE(nft_rules_dropping_4791("table inet t { # handle 1\n\tchain c { # handle 1\n"
                                      "\t\tudp dport 4791 accept # handle 2\n\t}\n}\n")
                  .empty());
}

TEST(DoctorMtu, ARoceMtuBelow1024IsAProblemWithItsFix) {
  // rxe: the largest of 256..4096 within MTU - 80.
  EXPECT_EQ(roce_mtu_problem(1500, "eth0"), std::nullopt);
  EXPECT_EQ(roce_mtu_problem(1104, "eth0"), std::nullopt);
  EXPECT_EQ(roce_mtu_problem(65536, "lo"), std::nullopt);
  const auto low = roce_mtu_problem(1103, "veth1");
  ASSERT_TRUE(low.has_value());
  EXPECT_NE(low->find("MTU 1103, which gives RoCE MTU 512"), std::string::npos) << *low;
  EXPECT_NE(low->find("fix: ip link set veth1 mtu 1500"), std::string::npos) << *low;
  const auto tiny = roce_mtu_problem(576, "veth1");
  ASSERT_TRUE(tiny.has_value());
  EXPECT_NE(tiny->find("gives RoCE MTU 256"), std::string::npos) << *tiny;
  const auto none = roce_mtu_problem(300, "veth1");
  ASSERT_TRUE(none.has_value());
  EXPECT_NE(none->find("gives no RoCE MTU"), std::string::npos) << *none;
}

}  // namespace
}  // namespace uroce::tools

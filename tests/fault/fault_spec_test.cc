// The fault grammar: every form of every value, canonical printing that parses back to the same
// spec, and a refusal naming the bad item for every way a spec can be wrong.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/prng.h"
#include "fault/fault.h"

namespace uroce::fault {
namespace {

Ratio must_ratio(std::string_view s) {
  auto r = parse_ratio(s);
  EXPECT_TRUE(r.ok()) << s << ": " << (r.ok() ? "" : r.error());
  return r.ok() ? r.value() : Ratio{};
}

FaultSpec must_parse(std::string_view s) {
  auto r = FaultSpec::parse(s);
  EXPECT_TRUE(r.ok()) << s << ": " << (r.ok() ? "" : r.error());
  return r.ok() ? r.value() : FaultSpec{};
}

std::string parse_error(std::string_view s) {
  auto r = FaultSpec::parse(s);
  EXPECT_FALSE(r.ok()) << s << " parsed as " << (r.ok() ? r->to_string() : "");
  return r.ok() ? "" : r.error();
}

TEST(FaultRatio, ParsesEveryForm) {
  EXPECT_EQ(must_ratio("1%"), (Ratio{1, 100}));
  EXPECT_EQ(must_ratio("0.5%"), (Ratio{1, 200}));
  EXPECT_EQ(must_ratio("0.0001%"), (Ratio{1, 1'000'000}));
  EXPECT_EQ(must_ratio("12.5%"), (Ratio{1, 8}));
  EXPECT_EQ(must_ratio("100%"), (Ratio{1, 1}));
  EXPECT_EQ(must_ratio("100.0000%"), (Ratio{1, 1}));
  EXPECT_EQ(must_ratio("0%"), (Ratio{}));
  EXPECT_EQ(must_ratio("0"), (Ratio{}));
  EXPECT_EQ(must_ratio("3/7"), (Ratio{3, 7}));
  EXPECT_EQ(must_ratio("2/4"), (Ratio{1, 2}));  // lowest terms
  EXPECT_EQ(must_ratio("0/9"), (Ratio{}));
  EXPECT_EQ(must_ratio("5/5"), (Ratio{1, 1}));
  EXPECT_EQ(must_ratio("4294967295/4294967295"), (Ratio{1, 1}));
  EXPECT_EQ(must_ratio("1.50000%"), (Ratio{3, 200}));  // trailing zeros are no decimals
}

TEST(FaultRatio, RefusesWithAMessageNamingTheValue) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"12x", "\"12x\": not a probability (P%, N/D or 0)"},
      {"150%", "\"150%\": more than 100%"},
      {"100.0001%", "\"100.0001%\": more than 100%"},
      {"99999999999999999999999%", "more than 100%"},
      {"-1%", "\"-1%\": negative"},
      {"-1/2", "\"-1/2\": negative"},
      {"1/0", "\"1/0\": denominator 0"},
      {"5/4", "\"5/4\": more than 100%"},
      {"0.00001%", "\"0.00001%\": more than 4 decimals"},
      {"", "\"\": not a probability"},
      {"%", "not a probability"},
      {"1.%", "not a probability"},
      {".5%", "not a probability"},
      {"1%%", "not a probability"},
      {"0.5", "not a probability"},
      {"1/", "not a probability"},
      {"/2", "not a probability"},
      {"1/2/3", "not a probability"},
      {"+1%", "not a probability"},
      {"1 %", "not a probability"},
      {"4294967296/4294967297", "not a probability"},  // beyond 32 bits
  };
  for (const auto& [text, message] : cases) {
    auto r = parse_ratio(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.error().find(message), std::string::npos) << text << ": " << r.error();
    EXPECT_EQ(r.error().rfind("\"" + text + "\"", 0), 0u) << r.error();
  }
}

TEST(FaultRatio, PrintsAsTheGrammarAndAsThePlans) {
  EXPECT_EQ(to_spec_string({1, 100}), "1%");
  EXPECT_EQ(to_spec_string({1, 8}), "12.5%");
  EXPECT_EQ(to_spec_string({1, 1'000'000}), "0.0001%");
  EXPECT_EQ(to_spec_string({37, 1000}), "3.7%");
  EXPECT_EQ(to_spec_string({1, 1}), "100%");
  EXPECT_EQ(to_spec_string({0, 5}), "0");
  EXPECT_EQ(to_spec_string({1, 3}), "1/3");
  EXPECT_EQ(to_spec_string({2, 6}), "1/3");
  EXPECT_EQ(to_spec_string({1, 7'000'000}), "1/7000000");
  EXPECT_EQ(to_string(Ratio{3, 100}), "3/100");  // the simulator's exact form, as given
  EXPECT_EQ(to_string(Ratio{0, 7}), "0");
  // Every ratio prints to a string that parses back to it in lowest terms.
  Prng rng(5);
  for (int i = 0; i < 20'000; ++i) {
    const auto den = static_cast<std::uint32_t>(i % 2 == 0 ? rng.range(1, 2'000'000)
                                                           : rng.range(1, 0xffffffffu));
    const auto num = static_cast<std::uint32_t>(rng.range(0, den));
    const Ratio r{num, den};
    const Ratio back = must_ratio(to_spec_string(r));
    ASSERT_EQ(std::uint64_t{back.num} * den, std::uint64_t{num} * back.den) << to_string(r);
    ASSERT_EQ(to_spec_string(back), to_spec_string(r));
  }
}

TEST(FaultSpec, ParsesTheHeaderExamples) {
  const FaultSpec a = must_parse("loss=1%,dup=0.5%,reorder=1%,seed=7");
  EXPECT_EQ(a.seed, 7u);
  ASSERT_EQ(a.rules.size(), 1u);
  EXPECT_EQ(a.rules[0].match, Match{});
  EXPECT_EQ(a.rules[0].faults.loss, (Ratio{1, 100}));
  EXPECT_EQ(a.rules[0].faults.duplication, (Ratio{1, 200}));
  EXPECT_EQ(a.rules[0].faults.reordering, (Ratio{1, 100}));
  EXPECT_EQ(a.rules[0].faults.reorder_packets, 3u);
  EXPECT_EQ(a.to_string(), "loss=1%,dup=0.5%,reorder=1%,seed=7");

  const FaultSpec b = must_parse("dir=tx,class=ack,loss=5%;peer=10.0.0.2,partition=2s+2s");
  EXPECT_EQ(b.seed, 1u);
  ASSERT_EQ(b.rules.size(), 2u);
  EXPECT_EQ(b.rules[0].match.dirs, 1);
  EXPECT_EQ(b.rules[0].match.classes, 1u << static_cast<unsigned>(PacketClass::kAck));
  EXPECT_EQ(b.rules[0].faults.loss, (Ratio{1, 20}));
  EXPECT_EQ(b.rules[1].match.peer, wire::IpAddress::v4(0x0a000002));
  ASSERT_EQ(b.rules[1].partitions.size(), 1u);
  EXPECT_EQ(b.rules[1].partitions[0], (Partition{2'000'000'000, 2'000'000'000, 0}));
  EXPECT_FALSE(b.rules[1].faults.any());
  EXPECT_EQ(b.to_string(), "dir=tx,class=ack,loss=5%;peer=10.0.0.2,partition=2s+2s");
}

TEST(FaultSpec, ParsesEveryKey) {
  const FaultSpec s = must_parse(
      " dir = rx , peer=fd00::1:2, qpn=0x11, class=req+read+cm, burst=1%:20%:90%:0.1%, "
      "dup=1/3, reorder=2%, reorder_by=5, delay=1.5ms, jitter=200us, corrupt=0.1%, "
      "corrupt_bits=3, rate=2.5gbit, queue=64, partition=1s+500ms/2s, partition=10s+1ns ; "
      "seed=0xff");
  EXPECT_EQ(s.seed, 255u);
  ASSERT_EQ(s.rules.size(), 1u);
  const Rule& r = s.rules[0];
  EXPECT_EQ(r.match.dirs, 2);
  wire::IpAddress fd;
  fd.v6 = true;
  fd.bytes = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2};
  EXPECT_EQ(r.match.peer, fd);
  EXPECT_EQ(r.match.qpn, 0x11u);
  EXPECT_EQ(r.match.classes, (1u << 0) | (1u << 2) | (1u << 5));
  const Faults& f = r.faults;
  ASSERT_TRUE(f.burst.has_value());
  EXPECT_EQ(*f.burst, (GilbertElliott{{1, 100}, {1, 5}, {9, 10}, {1, 1000}}));
  EXPECT_TRUE(f.loss.is_zero());
  EXPECT_EQ(f.duplication, (Ratio{1, 3}));
  EXPECT_EQ(f.reordering, (Ratio{1, 50}));
  EXPECT_EQ(f.reorder_packets, 5u);
  EXPECT_EQ(f.reorder_delay_ns, 0);
  EXPECT_EQ(f.delay_ns, 1'500'000);
  EXPECT_EQ(f.jitter_ns, 200'000);
  EXPECT_EQ(f.corruption, (Ratio{1, 1000}));
  EXPECT_EQ(f.corrupt_bits, 3u);
  EXPECT_EQ(f.rate_bps, 2'500'000'000u);
  EXPECT_EQ(f.queue_packets, 64u);
  EXPECT_EQ(r.partitions, (std::vector<Partition>{{1'000'000'000, 500'000'000, 2'000'000'000},
                                                  {10'000'000'000, 1, 0}}));
  EXPECT_EQ(s.to_string(),
            "dir=rx,peer=fd00::1:2,qpn=17,class=req+read+cm,burst=1%:20%:90%:0.1%,dup=1/3,"
            "reorder=2%,reorder_by=5,delay=1500us,jitter=200us,corrupt=0.1%,corrupt_bits=3,"
            "rate=2500mbit,queue=64,partition=1s+500ms/2s,partition=10s+1ns,seed=255");
  // reorder_by a time; the units of times and rates.
  const Faults g =
      must_parse("reorder=1%,reorder_by=2ms,delay=7ns,jitter=3s,rate=9bit").rules[0].faults;
  EXPECT_EQ(g.reorder_delay_ns, 2'000'000);
  EXPECT_EQ(g.delay_ns, 7);
  EXPECT_EQ(g.jitter_ns, 3'000'000'000);
  EXPECT_EQ(g.rate_bps, 9u);
  EXPECT_EQ(must_parse("rate=1kbit").rules[0].faults.rate_bps, 1000u);
  EXPECT_EQ(must_parse("rate=100mbit").rules[0].faults.rate_bps, 100'000'000u);
  EXPECT_EQ(must_parse("delay=0.000000001s").rules[0].faults.delay_ns, 1);
  EXPECT_EQ(must_parse("delay=3600s").rules[0].faults.delay_ns, 3'600'000'000'000);
}

TEST(FaultSpec, PrintsCanonicallyAndParsesBackToTheSameSpec) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", ""},
      {"seed=7", "seed=7"},
      {"seed=1", ""},
      {"loss=1%", "loss=1%"},
      {"  loss = 1% , dir=tx ", "dir=tx,loss=1%"},
      {"dir=both,class=all,loss=2/200", "loss=1%"},
      {"class=ack+req+req,dup=1/3", "class=req+ack,dup=1/3"},
      {"burst=1%:10%:100%:0", "burst=1%:10%"},
      {"burst=1%:10%:50%", "burst=1%:10%:50%"},
      {"burst=1%:10%:100%:1%", "burst=1%:10%:100%:1%"},
      {"reorder=1%,reorder_by=3", "reorder=1%"},
      {"reorder=1%,reorder_by=1000us", "reorder=1%,reorder_by=1ms"},
      {"corrupt=1%,corrupt_bits=1", "corrupt=1%"},
      {"rate=1000mbit,queue=1000", "rate=1gbit"},
      {"rate=1500kbit", "rate=1500kbit"},
      {"delay=1000000ns", "delay=1ms"},
      {"delay=1.5s", "delay=1500ms"},
      {"partition=0s+1s", "partition=0s+1s"},
      {"qpn=0x10,loss=1%", "qpn=16,loss=1%"},
      {"attr=drep,loss=100%", "attr=drep,loss=100%"},
      {"dir=tx,class=cm,attr=drep+dreq+drep,loss=1%", "dir=tx,class=cm,attr=dreq+drep,loss=1%"},
      {"class=cm+req,attr=apr+sidr_req+req,dup=1%", "class=req+cm,attr=req+sidr_req+apr,dup=1%"},
      {"peer=::ffff:10.0.0.1,loss=1%", "peer=::ffff:10.0.0.1,loss=1%"},
      {"peer=FD00:0:0:0:0:0:0:1,loss=1%", "peer=fd00::1,loss=1%"},
      {"peer=1:0:0:2:0:0:0:3,loss=1%", "peer=1:0:0:2::3,loss=1%"},
      {"peer=1:0:2:3:4:5:6:7,loss=1%", "peer=1:0:2:3:4:5:6:7,loss=1%"},
      {"peer=::,loss=1%", "peer=::,loss=1%"},
      // A modifier of a fault that is 0 is dropped, and so is the fault.
      {"reorder=0,reorder_by=9,loss=1%", "loss=1%"},
      {"corrupt=0,corrupt_bits=5,loss=1%", "loss=1%"},
      {"loss=1%;seed=9", "loss=1%,seed=9"},
      {"dir=tx,loss=1%;dir=rx,dup=1%,seed=3", "dir=tx,loss=1%;dir=rx,dup=1%,seed=3"},
  };
  for (const auto& [text, canonical] : cases) {
    const FaultSpec s = must_parse(text);
    EXPECT_EQ(s.to_string(), canonical) << text;
    EXPECT_EQ(must_parse(s.to_string()), s) << text;
  }
}

// Random specs of every shape (all values as parse() makes them) print and parse back equal.
TEST(FaultSpec, RandomSpecsRoundTrip) {
  Prng rng(2024);
  auto ratio = [&]() -> Ratio {
    switch (rng.below(3)) {
      case 0:
        return must_ratio(std::to_string(rng.range(1, 1'000'000)) + "/" +
                          std::to_string(rng.range(1'000'000, 4'000'000'000)));
      case 1:
        return must_ratio(std::to_string(rng.range(0, 99)) + "." +
                          std::to_string(rng.range(1, 9999)) + "%");
      default:
        return must_ratio(std::to_string(rng.range(1, 100)) + "%");
    }
  };
  auto time_ns = [&](std::int64_t max) {
    static constexpr std::int64_t kScales[] = {1, 1'000, 1'000'000, 1'000'000'000};
    const std::int64_t scale = kScales[rng.below(4)];
    return static_cast<std::int64_t>(rng.range(1, static_cast<std::uint64_t>(max / scale))) * scale;
  };
  for (int i = 0; i < 3'000; ++i) {
    FaultSpec s;
    s.seed = rng.chance(1, 2) ? 1 : rng.next();
    const std::uint64_t rules = rng.range(0, 4);
    for (std::uint64_t k = 0; k < rules; ++k) {
      Rule r;
      if (rng.chance(1, 3)) r.match.dirs = static_cast<std::uint8_t>(rng.range(1, 3));
      if (rng.chance(1, 3)) {
        wire::IpAddress a;
        a.v6 = rng.chance(1, 2);
        const std::size_t n = a.v6 ? 16 : 4;
        for (std::size_t b = 0; b < n; ++b) {
          // Runs of zeros, so that "::" is exercised.
          a.bytes[b] = rng.chance(1, 2) ? 0 : static_cast<std::uint8_t>(rng.below(256));
        }
        r.match.peer = a;
      }
      if (rng.chance(1, 3)) r.match.qpn = static_cast<std::uint32_t>(rng.below(1u << 24));
      if (rng.chance(1, 3)) r.match.classes = static_cast<std::uint32_t>(rng.range(1, 0x7f));
      if (rng.chance(1, 4)) {
        r.match.cm_attrs = static_cast<std::uint16_t>(rng.range(1, (1u << kCmAttrCount) - 1));
        r.match.classes |= 1u << static_cast<unsigned>(PacketClass::kCm);  // as parse() requires
      }
      Faults& f = r.faults;
      if (rng.chance(1, 3)) {
        GilbertElliott g;
        g.p = ratio();
        g.r = ratio();
        if (rng.chance(1, 2)) g.loss_bad = ratio();
        if (rng.chance(1, 2)) g.loss_good = ratio();
        f.burst = g;
      } else if (rng.chance(1, 2)) {
        f.loss = ratio();
      }
      if (rng.chance(1, 2)) f.duplication = ratio();
      if (rng.chance(1, 2)) {
        f.reordering = ratio();
        if (rng.chance(1, 3)) f.reorder_packets = static_cast<std::uint32_t>(rng.range(1, 100));
        if (rng.chance(1, 3)) f.reorder_delay_ns = time_ns(3'600'000'000'000);
      }
      if (rng.chance(1, 2)) f.delay_ns = time_ns(3'600'000'000'000);
      if (rng.chance(1, 2)) f.jitter_ns = time_ns(3'600'000'000'000);
      if (rng.chance(1, 2)) {
        f.corruption = ratio();
        if (rng.chance(1, 2)) f.corrupt_bits = static_cast<std::uint32_t>(rng.range(1, 64));
      }
      if (rng.chance(1, 3)) {
        f.rate_bps = rng.range(1, 100'000'000'000'000);
        if (rng.chance(1, 2)) f.queue_packets = static_cast<std::uint32_t>(rng.range(1, 1'000'000));
      }
      for (std::uint64_t p = rng.below(3); p > 0; --p) {
        Partition w;
        w.start_ns = rng.chance(1, 4) ? 0 : time_ns(1'000'000'000'000'000);
        w.length_ns = time_ns(1'000'000'000'000'000);
        if (rng.chance(1, 2)) w.period_ns = w.length_ns + time_ns(1'000'000'000'000'000);
        r.partitions.push_back(w);
      }
      // As parse() leaves them: modifiers of an off fault at their defaults, reorder by time
      // or by packets, something to do.
      if (f.reordering.is_zero()) f.reorder_packets = 3, f.reorder_delay_ns = 0;
      if (f.reorder_delay_ns > 0) f.reorder_packets = 3;
      if (f.corruption.is_zero()) f.corrupt_bits = 1;
      if (!f.any() && r.partitions.empty()) f.delay_ns = 1;
      s.rules.push_back(r);
    }
    const std::string text = s.to_string();
    const FaultSpec back = must_parse(text);
    ASSERT_EQ(back, s) << text << "\nreprinted " << back.to_string();
    ASSERT_EQ(back.to_string(), text);
  }
}

TEST(FaultSpec, EveryErrorNamesItsItem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"loss=12x", "fault spec: \"loss=12x\": not a probability (P%, N/D or 0)"},
      {"loss=150%", "fault spec: \"loss=150%\": more than 100%"},
      {"dup=-1%", "fault spec: \"dup=-1%\": negative"},
      {"reorder=1/0", "fault spec: \"reorder=1/0\": denominator 0"},
      {"corrupt=0.00001%", "fault spec: \"corrupt=0.00001%\": more than 4 decimals"},
      {"los=1%", "fault spec: \"los=1%\": unknown key \"los\""},
      {"Loss=1%", "fault spec: \"Loss=1%\": unknown key \"Loss\""},
      {"loss", "fault spec: \"loss\": not key=value"},
      {"=1%", "fault spec: \"=1%\": unknown key \"\""},
      {"loss=1%,loss=2%", "fault spec: \"loss=2%\": loss given twice in one rule"},
      {"dir=tx,dir=rx,loss=1%", "fault spec: \"dir=rx\": dir given twice in one rule"},
      {"burst=1%:10%,loss=1%", "fault spec: \"burst=1%:10%\": burst= and loss= in one rule"},
      {"dir=tx", "fault spec: rule \"dir=tx\": matches but does nothing"},
      {"peer=10.0.0.1,qpn=3", "fault spec: rule \"peer=10.0.0.1,qpn=3\": matches but does nothing"},
      {"loss=0", "fault spec: rule \"loss=0\": does nothing"},
      {"loss=1%;dir=rx,dup=0", "fault spec: rule \"dir=rx,dup=0\": matches but does nothing"},
      {"dir=up,loss=1%", "fault spec: \"dir=up\": not tx, rx or both"},
      {"peer=10.0.0.256,loss=1%", "fault spec: \"peer=10.0.0.256\": not an IPv4 or IPv6"},
      {"peer=10.0.0,loss=1%", "fault spec: \"peer=10.0.0\": not an IPv4 or IPv6"},
      {"peer=010.0.0.1,loss=1%", "fault spec: \"peer=010.0.0.1\": not an IPv4 or IPv6"},
      {"peer=fe80::1%eth0,loss=1%", "fault spec: \"peer=fe80::1%eth0\": not an IPv4 or IPv6"},
      {"peer=1::2::3,loss=1%", "fault spec: \"peer=1::2::3\": not an IPv4 or IPv6"},
      {"peer=1:2:3:4:5:6:7:8:9,loss=1%", "fault spec: \"peer=1:2:3:4:5:6:7:8:9\": not an IPv4"},
      {"peer=1:2:3:4:5:6:7::8,loss=1%", "fault spec: \"peer=1:2:3:4:5:6:7::8\": not an IPv4"},
      {"peer=12345::,loss=1%", "fault spec: \"peer=12345::\": not an IPv4 or IPv6"},
      {"peer=host.example,loss=1%", "fault spec: \"peer=host.example\": not an IPv4 or IPv6"},
      {"qpn=0x1000000,loss=1%", "fault spec: \"qpn=0x1000000\": not a QPN"},
      {"qpn=-1,loss=1%", "fault spec: \"qpn=-1\": not a QPN"},
      {"class=foo,loss=1%", "fault spec: \"class=foo\": unknown class \"foo\""},
      {"class=req+,loss=1%", "fault spec: \"class=req+\": unknown class \"\""},
      {"attr=DREP,loss=1%", "fault spec: \"attr=DREP\": unknown CM attribute \"DREP\""},
      {"attr=drep+,loss=1%", "fault spec: \"attr=drep+\": unknown CM attribute \"\""},
      {"attr=lap+cm,loss=1%", "fault spec: \"attr=lap+cm\": unknown CM attribute \"cm\""},
      {"class=req+ack,attr=drep,loss=1%",
       "fault spec: \"attr=drep\": attr= takes CM MADs only, and its rule's \"class=req+ack\" "
       "leaves out cm"},
      {"attr=drep", "fault spec: rule \"attr=drep\": matches but does nothing"},
      {"attr=rep,attr=rtu,loss=1%", "fault spec: \"attr=rtu\": attr given twice in one rule"},
      {"burst=1%", "fault spec: \"burst=1%\": not P:R[:H[:K]]"},
      {"burst=1%:2%:3%:4%:5%", "fault spec: \"burst=1%:2%:3%:4%:5%\": not P:R[:H[:K]]"},
      {"burst=1%:x", "fault spec: \"burst=1%:x\": R \"x\": not a probability"},
      {"burst=1%:2%:101%", "fault spec: \"burst=1%:2%:101%\": H \"101%\": more than 100%"},
      {"reorder_by=3,loss=1%", "fault spec: \"reorder_by=3\": reorder_by= without reorder="},
      {"reorder=1%,reorder_by=0", "fault spec: \"reorder_by=0\": not a number of packets"},
      {"reorder=1%,reorder_by=0s", "fault spec: \"reorder_by=0s\": 0: hold for more than 0"},
      {"reorder=1%,reorder_by=65537", "fault spec: \"reorder_by=65537\": not a number of packets"},
      {"reorder=1%,reorder_by=3x", "fault spec: \"reorder_by=3x\": not a time"},
      {"delay=5", "fault spec: \"delay=5\": not a time (a number with ns, us, ms or s)"},
      {"delay=2h", "fault spec: \"delay=2h\": not a time"},
      {"delay=3601s", "fault spec: \"delay=3601s\": more than 1 h"},
      {"delay=1.5ns", "fault spec: \"delay=1.5ns\": finer than 1 ns"},
      {"delay=0.0000000001s", "fault spec: \"delay=0.0000000001s\": finer than 1 ns"},
      {"jitter=-1ms", "fault spec: \"jitter=-1ms\": negative"},
      {"jitter=ms", "fault spec: \"jitter=ms\": not a time"},
      {"corrupt=1%,corrupt_bits=65", "fault spec: \"corrupt_bits=65\": not a number of bits"},
      {"corrupt=1%,corrupt_bits=0", "fault spec: \"corrupt_bits=0\": not a number of bits"},
      {"corrupt_bits=2,loss=1%", "fault spec: \"corrupt_bits=2\": corrupt_bits= without corrupt="},
      {"rate=10mbps", "fault spec: \"rate=10mbps\": not a rate"},
      {"rate=10", "fault spec: \"rate=10\": not a rate"},
      {"rate=0bit", "fault spec: \"rate=0bit\": 0: a rate must be more than 0"},
      {"rate=0.5bit", "fault spec: \"rate=0.5bit\": finer than 1 bit per second"},
      {"rate=200tbit", "fault spec: \"rate=200tbit\": not a rate"},
      {"rate=200000gbit", "fault spec: \"rate=200000gbit\": more than 100 tbit"},
      {"queue=5,loss=1%", "fault spec: \"queue=5\": queue= without rate="},
      {"rate=1gbit,queue=0", "fault spec: \"queue=0\": not a number of packets"},
      {"partition=2s", "fault spec: \"partition=2s\": not START+LEN[/PERIOD]"},
      {"partition=2s+0s", "fault spec: \"partition=2s+0s\": LEN 0"},
      {"partition=x+1s", "fault spec: \"partition=x+1s\": START \"x\": not a time"},
      {"partition=1s+y", "fault spec: \"partition=1s+y\": LEN \"y\": not a time"},
      {"partition=1s+2s/2s", "fault spec: \"partition=1s+2s/2s\": PERIOD must be longer than LEN"},
      {"partition=1s+2s/z", "fault spec: \"partition=1s+2s/z\": PERIOD \"z\": not a time"},
      {"partition=31d+1s", "fault spec: \"partition=31d+1s\": START \"31d\": not a time"},
      {"partition=2592001s+1s",
       "fault spec: \"partition=2592001s+1s\": START \"2592001s\": more "
       "than 30 days"},
      {"seed=x", "fault spec: \"seed=x\": not a seed"},
      {"seed=1,loss=1%;seed=2", "fault spec: \"seed=2\": seed given twice"},
      {"loss=1%;;dup=1%", "fault spec: rule 2: empty"},
      {"loss=1%;", "fault spec: rule 2: empty"},
      {";loss=1%", "fault spec: rule 1: empty"},
      {"loss=1%,,dup=1%", "fault spec: rule 1 \"loss=1%,,dup=1%\": an empty item"},
      {"loss=1%,", "fault spec: rule 1 \"loss=1%,\": an empty item"},
  };
  for (const auto& [text, message] : cases) {
    const std::string e = parse_error(text);
    EXPECT_EQ(e.rfind(message, 0), 0u) << text << "\n  got: " << e << "\n want: " << message;
  }
}

// Fuzz-ish: random and mutated specs never crash the parser, and whatever parses prints and
// parses back to the same spec.
TEST(FaultSpec, ParseNeverCrashesOnRandomOrMutatedText) {
  static const std::vector<std::string> kSeeds = {
      "loss=1%,dup=0.5%,reorder=1%,seed=7",
      "dir=tx,class=ack,loss=5%;peer=10.0.0.2,partition=2s+2s",
      "dir=rx,peer=fd00::1:2,qpn=0x11,class=req+read+cm,burst=1%:20%:90%:0.1%,dup=1/3",
      "reorder=2%,reorder_by=5,delay=1.5ms,jitter=200us,corrupt=0.1%,corrupt_bits=3",
      "rate=2.5gbit,queue=64,partition=1s+500ms/2s,partition=10s+1ns;seed=0xff",
      "peer=::ffff:10.0.0.1,reorder=1%,reorder_by=2ms",
      "dir=tx,class=cm,attr=drep+sidr_rep,loss=100%",
  };
  static constexpr std::string_view kAlphabet = "=,;:+/%.x0123456789abcdefsmunkgbitdrxpqlo ABCF-_";
  Prng rng(99);
  std::size_t parsed = 0;
  for (int i = 0; i < 30'000; ++i) {
    std::string s;
    if (i % 3 == 0) {
      const std::uint64_t n = rng.below(60);
      for (std::uint64_t k = 0; k < n; ++k) s += kAlphabet[rng.below(kAlphabet.size())];
    } else {
      s = kSeeds[rng.below(kSeeds.size())];
      for (std::uint64_t m = rng.range(1, 4); m > 0; --m) {
        const std::size_t at = s.empty() ? 0 : rng.below(s.size());
        const char c = kAlphabet[rng.below(kAlphabet.size())];
        switch (rng.below(4)) {
          case 0:
            s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), c);
            break;
          case 1:
            if (!s.empty()) s.erase(at, 1);
            break;
          case 2:
            if (!s.empty()) s[at] = c;
            break;
          default:
            if (!s.empty()) s.erase(at, rng.below(s.size() - at + 1));
            break;
        }
      }
      if (rng.chance(1, 50)) s.push_back('\0');
    }
    auto r = FaultSpec::parse(s);
    if (!r.ok()) {
      ASSERT_EQ(r.error().rfind("fault spec: ", 0), 0u) << s;
      continue;
    }
    ++parsed;
    const std::string text = r->to_string();
    const auto back = FaultSpec::parse(text);
    ASSERT_TRUE(back.ok()) << s << " -> " << text << ": " << back.error();
    ASSERT_EQ(back.value(), r.value()) << s << " -> " << text;
  }
  EXPECT_GT(parsed, 400u);  // the mutations leave many specs valid: the round trip is tested
}

}  // namespace
}  // namespace uroce::fault

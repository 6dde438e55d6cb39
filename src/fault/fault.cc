#include "fault/fault.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <utility>

#include "wire/cm_mad.h"
#include "wire/opcode.h"
#include "wire/packet.h"

namespace uroce::fault {

namespace {

constexpr std::int64_t kNsPerS = 1'000'000'000;
constexpr std::int64_t kMaxDelayNs = 3600 * kNsPerS;            // delay, jitter, reorder_by
constexpr std::int64_t kMaxPartitionNs = 30 * 86400 * kNsPerS;  // partition start, length, period
constexpr std::uint32_t kMaxReorderPackets = 1u << 16;
constexpr std::uint32_t kMaxQueuePackets = 1'000'000;
constexpr std::uint64_t kMaxRateBps = 100'000'000'000'000;  // 100 tbit
constexpr std::uint32_t kMaxQpn = 0xffffff;
constexpr std::uint32_t kPercentDen = 1'000'000;  // P% with 4 decimals: units of 1e-6
constexpr std::int64_t kReorderTimeoutNs = kNsPerS;
constexpr std::size_t kMaxEvents = 4096;
constexpr std::size_t kMaxPooledBuffers = 256;

// ---- small text helpers --------------------------------------------------------------------

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string quoted(std::string_view s) {
  std::string q = "\"";
  q.append(s);
  q += '"';
  return q;
}

// Splits on `sep`, keeping empty pieces.
std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  while (true) {
    const std::size_t at = s.find(sep);
    parts.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return parts;
    s.remove_prefix(at + 1);
  }
}

// A decimal number without sign, at most `max`.
std::optional<std::uint64_t> parse_decimal(std::string_view s, std::uint64_t max) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (!is_digit(c)) return std::nullopt;
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (max - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

// 1 to `max_digits` hexadecimal digits (either case), no prefix.
std::optional<std::uint64_t> parse_hex(std::string_view s, std::size_t max_digits) {
  if (s.empty() || s.size() > max_digits) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    unsigned d = 0;
    if (is_digit(c)) {
      d = static_cast<unsigned>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      d = static_cast<unsigned>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      d = static_cast<unsigned>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
    v = (v << 4) | d;
  }
  return v;
}

// Decimal, or hexadecimal with 0x.
std::optional<std::uint64_t> parse_integer(std::string_view s, std::uint64_t max) {
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    const auto v = parse_hex(s.substr(2), 16);
    if (!v || *v > max) return std::nullopt;
    return v;
  }
  return parse_decimal(s, max);
}

// A non-negative decimal number with up to `max_decimals` decimals, scaled by 10^max_decimals
// (so "1.5" with 3 decimals is 1500). Distinguishes the ways it can be wrong.
enum class DecimalError { kNotANumber, kNegative, kTooManyDecimals, kTooLarge };
Result<std::uint64_t, DecimalError> parse_fixed(std::string_view s, unsigned max_decimals,
                                                std::uint64_t max_scaled) {
  if (!s.empty() && s[0] == '-') return Err{DecimalError::kNegative};
  const std::size_t dot = s.find('.');
  const std::string_view whole = s.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? std::string_view{} : s.substr(dot + 1);
  if (whole.empty() || (dot != std::string_view::npos && frac.empty())) {
    return Err{DecimalError::kNotANumber};
  }
  for (char c : whole) {
    if (!is_digit(c)) return Err{DecimalError::kNotANumber};
  }
  for (char c : frac) {
    if (!is_digit(c)) return Err{DecimalError::kNotANumber};
  }
  // Trailing zeros of the fraction change nothing ("1.50000%" is 1.5%).
  while (frac.size() > max_decimals && frac.back() == '0') frac.remove_suffix(1);
  if (frac.size() > max_decimals) return Err{DecimalError::kTooManyDecimals};
  std::uint64_t scale = 1;
  for (unsigned i = 0; i < max_decimals; ++i) scale *= 10;
  const std::optional<std::uint64_t> w = parse_decimal(whole, max_scaled / scale);
  if (!w) return Err{DecimalError::kTooLarge};
  std::uint64_t f = 0;
  std::uint64_t unit = scale;
  for (char c : frac) {
    unit /= 10;
    f += static_cast<std::uint64_t>(c - '0') * unit;
  }
  const std::uint64_t v = *w * scale + f;
  if (v > max_scaled) return Err{DecimalError::kTooLarge};
  return v;
}

Ratio reduced(std::uint64_t num, std::uint64_t den) {
  if (num == 0) return Ratio{};
  const std::uint64_t g = std::gcd(num, den);
  return Ratio{static_cast<std::uint32_t>(num / g), static_cast<std::uint32_t>(den / g)};
}

// parse_ratio without the value in the message (the callers name it).
Result<Ratio, std::string> ratio_value(std::string_view s) {
  constexpr std::string_view kNot = "not a probability (P%, N/D or 0)";
  if (s == "0") return Ratio{};
  if (!s.empty() && s[0] == '-') return Err{std::string("negative")};
  if (!s.empty() && s.back() == '%') {
    auto v = parse_fixed(s.substr(0, s.size() - 1), 4, std::uint64_t{1} << 40);
    if (!v.ok()) {
      switch (v.error()) {
        case DecimalError::kTooManyDecimals:
          return Err{std::string("more than 4 decimals")};
        case DecimalError::kTooLarge:
          return Err{std::string("more than 100%")};
        case DecimalError::kNegative:
          return Err{std::string("negative")};
        case DecimalError::kNotANumber:
          break;
      }
      return Err{std::string(kNot)};
    }
    if (v.value() > kPercentDen) return Err{std::string("more than 100%")};
    return reduced(v.value(), kPercentDen);
  }
  const std::size_t slash = s.find('/');
  if (slash != std::string_view::npos) {
    const auto num = parse_decimal(s.substr(0, slash), 0xffffffffu);
    const auto den = parse_decimal(s.substr(slash + 1), 0xffffffffu);
    if (!num || !den) return Err{std::string(kNot)};
    if (*den == 0) return Err{std::string("denominator 0")};
    if (*num > *den) return Err{std::string("more than 100%")};
    return reduced(*num, *den);
  }
  return Err{std::string(kNot)};
}

// TIME: a number with ns, us, ms or s, at most max_ns.
Result<std::int64_t, std::string> time_value(std::string_view s, std::int64_t max_ns) {
  constexpr std::string_view kNot = "not a time (a number with ns, us, ms or s)";
  struct Unit {
    std::string_view suffix;
    unsigned decimals;  // decimals that still give whole nanoseconds
  };
  static constexpr Unit kUnits[] = {{"ns", 0}, {"us", 3}, {"ms", 6}, {"s", 9}};
  for (const Unit& u : kUnits) {
    if (s.size() <= u.suffix.size() || !s.ends_with(u.suffix)) continue;
    const std::string_view number = s.substr(0, s.size() - u.suffix.size());
    // "1ms" must not be read as "1m" + "s": a digit or '.' must precede the suffix.
    if (!is_digit(number.back())) continue;
    auto v = parse_fixed(number, u.decimals, static_cast<std::uint64_t>(max_ns));
    if (!v.ok()) {
      switch (v.error()) {
        case DecimalError::kTooManyDecimals:
          return Err{std::string("finer than 1 ns")};
        case DecimalError::kTooLarge:
          return Err{"more than " + std::string(max_ns == kMaxDelayNs ? "1 h" : "30 days")};
        case DecimalError::kNegative:
          return Err{std::string("negative")};
        case DecimalError::kNotANumber:
          return Err{std::string(kNot)};
      }
    }
    return static_cast<std::int64_t>(v.value());
  }
  if (!s.empty() && s[0] == '-') return Err{std::string("negative")};
  return Err{std::string(kNot)};
}

std::string time_string(std::int64_t ns) {
  struct Unit {
    std::int64_t ns;
    const char* suffix;
  };
  static constexpr Unit kUnits[] = {{kNsPerS, "s"}, {1'000'000, "ms"}, {1'000, "us"}, {1, "ns"}};
  if (ns == 0) return "0s";
  for (const Unit& u : kUnits) {
    if (ns % u.ns == 0) return std::to_string(ns / u.ns) + u.suffix;
  }
  return std::to_string(ns) + "ns";
}

// RATE: a number with bit, kbit, mbit or gbit (per second, powers of 1000 as tc's), > 0.
Result<std::uint64_t, std::string> rate_value(std::string_view s) {
  constexpr std::string_view kNot = "not a rate (a number with bit, kbit, mbit or gbit)";
  struct Unit {
    std::string_view suffix;
    std::uint64_t bps;
    unsigned decimals;
  };
  static constexpr Unit kUnits[] = {
      {"gbit", 1'000'000'000, 9}, {"mbit", 1'000'000, 6}, {"kbit", 1'000, 3}, {"bit", 1, 0}};
  for (const Unit& u : kUnits) {
    if (s.size() <= u.suffix.size() || !s.ends_with(u.suffix)) continue;
    const std::string_view number = s.substr(0, s.size() - u.suffix.size());
    if (!is_digit(number.back())) continue;
    auto v = parse_fixed(number, u.decimals, kMaxRateBps);
    if (!v.ok()) {
      switch (v.error()) {
        case DecimalError::kTooManyDecimals:
          return Err{std::string("finer than 1 bit per second")};
        case DecimalError::kTooLarge:
          return Err{std::string("more than 100 tbit")};
        case DecimalError::kNegative:
          return Err{std::string("negative")};
        case DecimalError::kNotANumber:
          return Err{std::string(kNot)};
      }
    }
    if (v.value() == 0) return Err{std::string("0: a rate must be more than 0")};
    return v.value();
  }
  if (!s.empty() && s[0] == '-') return Err{std::string("negative")};
  return Err{std::string(kNot)};
}

std::string rate_string(std::uint64_t bps) {
  struct Unit {
    std::uint64_t bps;
    const char* suffix;
  };
  static constexpr Unit kUnits[] = {
      {1'000'000'000, "gbit"}, {1'000'000, "mbit"}, {1'000, "kbit"}, {1, "bit"}};
  for (const Unit& u : kUnits) {
    if (bps % u.bps == 0) return std::to_string(bps / u.bps) + u.suffix;
  }
  return std::to_string(bps) + "bit";
}

// ---- addresses (no inet_pton: the core includes no socket header) ---------------------------

std::optional<std::array<std::uint8_t, 4>> parse_ipv4(std::string_view s) {
  const std::vector<std::string_view> parts = split(s, '.');
  if (parts.size() != 4) return std::nullopt;
  std::array<std::uint8_t, 4> a{};
  for (std::size_t i = 0; i < 4; ++i) {
    const std::string_view p = parts[i];
    // As inet_pton: 1 to 3 digits, no leading zero.
    if (p.empty() || p.size() > 3 || (p.size() > 1 && p[0] == '0')) return std::nullopt;
    const auto v = parse_decimal(p, 255);
    if (!v) return std::nullopt;
    a[i] = static_cast<std::uint8_t>(*v);
  }
  return a;
}

std::optional<std::uint16_t> parse_hex16(std::string_view s) {
  const auto v = parse_hex(s, 4);
  if (!v) return std::nullopt;
  return static_cast<std::uint16_t>(*v);
}

// The groups of one side of "::" (an IPv4 tail allowed when `last`); nullopt if malformed.
std::optional<std::vector<std::uint16_t>> ipv6_groups(std::string_view s, bool last) {
  std::vector<std::uint16_t> g;
  if (s.empty()) return g;
  const std::vector<std::string_view> parts = split(s, ':');
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (last && i + 1 == parts.size() && parts[i].find('.') != std::string_view::npos) {
      const auto v4 = parse_ipv4(parts[i]);
      if (!v4) return std::nullopt;
      g.push_back(static_cast<std::uint16_t>(((*v4)[0] << 8) | (*v4)[1]));
      g.push_back(static_cast<std::uint16_t>(((*v4)[2] << 8) | (*v4)[3]));
      continue;
    }
    const auto v = parse_hex16(parts[i]);
    if (!v) return std::nullopt;
    g.push_back(*v);
  }
  return g;
}

std::optional<wire::IpAddress> parse_ipv6(std::string_view s) {
  const std::size_t gap = s.find("::");
  std::vector<std::uint16_t> groups;
  if (gap == std::string_view::npos) {
    auto g = ipv6_groups(s, true);
    if (!g || g->size() != 8) return std::nullopt;
    groups = *g;
  } else {
    if (s.find("::", gap + 1) != std::string_view::npos) return std::nullopt;
    auto head = ipv6_groups(s.substr(0, gap), false);
    auto tail = ipv6_groups(s.substr(gap + 2), true);
    if (!head || !tail || head->size() + tail->size() > 7) return std::nullopt;
    groups = *head;
    groups.resize(8 - tail->size(), 0);
    groups.insert(groups.end(), tail->begin(), tail->end());
  }
  wire::IpAddress a;
  a.v6 = true;
  for (std::size_t i = 0; i < 8; ++i) {
    a.bytes[2 * i] = static_cast<std::uint8_t>(groups[i] >> 8);
    a.bytes[2 * i + 1] = static_cast<std::uint8_t>(groups[i]);
  }
  return a;
}

std::optional<wire::IpAddress> parse_ip(std::string_view s) {
  if (s.find(':') != std::string_view::npos) return parse_ipv6(s);
  const auto v4 = parse_ipv4(s);
  if (!v4) return std::nullopt;
  wire::IpAddress a;
  std::copy(v4->begin(), v4->end(), a.bytes.begin());
  return a;
}

std::string ipv4_string(const std::uint8_t* b) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", b[0], b[1], b[2], b[3]);
  return buf;
}

// RFC 5952: lowercase, no leading zeros, the longest run of two or more zero groups (the first
// of equal runs) as "::", an IPv4-mapped address with its IPv4 tail.
std::string ip_string(const wire::IpAddress& a) {
  if (!a.v6) return ipv4_string(a.bytes.data());
  const bool mapped =
      std::all_of(a.bytes.begin(), a.bytes.begin() + 10, [](std::uint8_t b) { return b == 0; }) &&
      a.bytes[10] == 0xff && a.bytes[11] == 0xff;
  if (mapped) return "::ffff:" + ipv4_string(a.bytes.data() + 12);
  std::array<unsigned, 8> g{};
  for (std::size_t i = 0; i < 8; ++i) g[i] = (unsigned{a.bytes[2 * i]} << 8) | a.bytes[2 * i + 1];
  std::size_t best = 8, best_len = 0;
  for (std::size_t i = 0; i < 8;) {
    if (g[i] != 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < 8 && g[j] == 0) ++j;
    if (j - i > best_len) {
      best = i;
      best_len = j - i;
    }
    i = j;
  }
  if (best_len < 2) best = 8;
  std::string s;
  char buf[8];
  for (std::size_t i = 0; i < 8; ++i) {
    if (i == best) {
      s += "::";
      i += best_len - 1;
      continue;
    }
    if (!s.empty() && s.back() != ':') s += ':';
    std::snprintf(buf, sizeof buf, "%x", g[i]);
    s += buf;
  }
  return s;
}

// ---- the grammar's keys --------------------------------------------------------------------

enum Key : unsigned {
  kKeyDir,
  kKeyPeer,
  kKeyQpn,
  kKeyClass,
  kKeyAttr,
  kKeyLoss,
  kKeyBurst,
  kKeyDup,
  kKeyReorder,
  kKeyReorderBy,
  kKeyDelay,
  kKeyJitter,
  kKeyCorrupt,
  kKeyCorruptBits,
  kKeyRate,
  kKeyQueue,
  kKeyPartition,
  kKeyCount,
};
constexpr std::string_view kKeyNames[kKeyCount] = {
    "dir",     "peer",         "qpn",     "class",      "attr",     "loss",
    "burst",   "dup",          "reorder", "reorder_by", "delay",    "jitter",
    "corrupt", "corrupt_bits", "rate",    "queue",      "partition"};
constexpr unsigned kFirstFaultKey = kKeyLoss;

std::optional<Key> key_of(std::string_view name) {
  for (unsigned k = 0; k < kKeyCount; ++k) {
    if (kKeyNames[k] == name) return static_cast<Key>(k);
  }
  return std::nullopt;
}

constexpr std::string_view kClassNames[kPacketClassCount] = {"req", "ack", "read", "atomic",
                                                             "cnp", "cm",  "other"};
constexpr std::uint32_t kAllClasses = (1u << kPacketClassCount) - 1;

Result<std::uint32_t, std::string> class_value(std::string_view s) {
  std::uint32_t classes = 0;
  for (std::string_view name : split(s, '+')) {
    if (name == "all") {
      classes = kAllClasses;
      continue;
    }
    bool found = false;
    for (std::size_t c = 0; c < kPacketClassCount; ++c) {
      if (kClassNames[c] == name) {
        classes |= 1u << c;
        found = true;
      }
    }
    if (!found) {
      return Err{"unknown class " + quoted(name) +
                 " (req, ack, read, atomic, cnp, cm, other or all, joined by +)"};
    }
  }
  return classes;
}

// attr=: the CM's attribute IDs from kFirstCmAttr on, as wire::cm_attr_name() names them.
constexpr std::string_view kCmAttrNames[kCmAttrCount] = {
    "req", "mra", "rej", "rep", "rtu", "dreq", "drep", "sidr_req", "sidr_rep", "lap", "apr"};

Result<std::uint16_t, std::string> attr_value(std::string_view s) {
  std::uint16_t attrs = 0;
  for (std::string_view name : split(s, '+')) {
    const auto* it = std::find(std::begin(kCmAttrNames), std::end(kCmAttrNames), name);
    if (it == std::end(kCmAttrNames)) {
      return Err{"unknown CM attribute " + quoted(name) +
                 " (req, mra, rej, rep, rtu, dreq, drep, sidr_req, sidr_rep, lap or apr, joined "
                 "by +)"};
    }
    attrs = static_cast<std::uint16_t>(attrs | (1u << (it - std::begin(kCmAttrNames))));
  }
  return attrs;
}

Result<GilbertElliott, std::string> burst_value(std::string_view s) {
  const std::vector<std::string_view> parts = split(s, ':');
  if (parts.size() < 2 || parts.size() > 4) {
    return Err{
        std::string("not P:R[:H[:K]] (Gilbert-Elliott: good->bad, bad->good, loss when "
                    "bad, loss when good)")};
  }
  static constexpr std::string_view kNames[] = {"P", "R", "H", "K"};
  GilbertElliott g;
  Ratio* fields[] = {&g.p, &g.r, &g.loss_bad, &g.loss_good};
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto r = ratio_value(parts[i]);
    if (!r.ok()) return Err{std::string(kNames[i]) + " " + quoted(parts[i]) + ": " + r.error()};
    *fields[i] = r.value();
  }
  return g;
}

Result<Partition, std::string> partition_value(std::string_view s) {
  constexpr std::string_view kForm = "not START+LEN[/PERIOD]";
  const std::size_t plus = s.find('+');
  if (plus == std::string_view::npos) return Err{std::string(kForm)};
  const std::string_view start = s.substr(0, plus);
  std::string_view rest = s.substr(plus + 1);
  const std::size_t slash = rest.find('/');
  const std::string_view length = rest.substr(0, slash);
  Partition p;
  auto st = time_value(start, kMaxPartitionNs);
  if (!st.ok()) return Err{"START " + quoted(start) + ": " + st.error()};
  auto len = time_value(length, kMaxPartitionNs);
  if (!len.ok()) return Err{"LEN " + quoted(length) + ": " + len.error()};
  if (len.value() == 0) return Err{std::string("LEN 0: a partition lasts more than 0")};
  p.start_ns = st.value();
  p.length_ns = len.value();
  if (slash != std::string_view::npos) {
    const std::string_view period = rest.substr(slash + 1);
    auto per = time_value(period, kMaxPartitionNs);
    if (!per.ok()) return Err{"PERIOD " + quoted(period) + ": " + per.error()};
    if (per.value() <= p.length_ns) {
      return Err{std::string("PERIOD must be longer than LEN")};
    }
    p.period_ns = per.value();
  }
  return p;
}

std::string partition_string(const Partition& p) {
  std::string s = time_string(p.start_ns);
  s += '+';
  s += time_string(p.length_ns);
  if (p.period_ns > 0) {
    s += '/';
    s += time_string(p.period_ns);
  }
  return s;
}

std::string burst_string(const GilbertElliott& g) {
  std::string s = to_spec_string(g.p);
  s += ':';
  s += to_spec_string(g.r);
  const bool k = !g.loss_good.is_zero();
  if (k || g.loss_bad != Ratio{1, 1}) {
    s += ':';
    s += to_spec_string(g.loss_bad);
  }
  if (k) {
    s += ':';
    s += to_spec_string(g.loss_good);
  }
  return s;
}

// Applies one item of a rule. The error names what is wrong with the value (the caller names the
// item).
// Long: one short case per fault key; a table of parsers would be no shorter.
Result<std::monostate, std::string> apply_item(Key key, std::string_view v, Rule& rule) {
  Faults& f = rule.faults;
  auto ratio = [&](Ratio& out) -> Result<std::monostate, std::string> {
    auto r = ratio_value(v);
    if (!r.ok()) return Err{r.error()};
    out = r.value();
    return std::monostate{};
  };
  auto delay = [&](std::int64_t& out) -> Result<std::monostate, std::string> {
    auto t = time_value(v, kMaxDelayNs);
    if (!t.ok()) return Err{t.error()};
    out = t.value();
    return std::monostate{};
  };
  switch (key) {
    case kKeyDir:
      if (v == "tx") {
        rule.match.dirs = 1;
      } else if (v == "rx") {
        rule.match.dirs = 2;
      } else if (v == "both") {
        rule.match.dirs = 3;
      } else {
        return Err{std::string("not tx, rx or both")};
      }
      return std::monostate{};
    case kKeyPeer: {
      auto a = parse_ip(v);
      if (!a) return Err{std::string("not an IPv4 or IPv6 address")};
      rule.match.peer = *a;
      return std::monostate{};
    }
    case kKeyQpn: {
      auto q = parse_integer(v, kMaxQpn);
      if (!q) return Err{std::string("not a QPN (0 to 0xffffff, decimal or 0x)")};
      rule.match.qpn = static_cast<std::uint32_t>(*q);
      return std::monostate{};
    }
    case kKeyClass: {
      auto c = class_value(v);
      if (!c.ok()) return Err{c.error()};
      rule.match.classes = c.value();
      return std::monostate{};
    }
    case kKeyAttr: {
      auto a = attr_value(v);
      if (!a.ok()) return Err{a.error()};
      rule.match.cm_attrs = a.value();
      return std::monostate{};
    }
    case kKeyLoss:
      return ratio(f.loss);
    case kKeyBurst: {
      auto g = burst_value(v);
      if (!g.ok()) return Err{g.error()};
      f.burst = g.value();
      return std::monostate{};
    }
    case kKeyDup:
      return ratio(f.duplication);
    case kKeyReorder:
      return ratio(f.reordering);
    case kKeyReorderBy: {
      if (!v.empty() && std::all_of(v.begin(), v.end(), is_digit)) {
        auto n = parse_decimal(v, kMaxReorderPackets);
        if (!n || *n == 0) {
          return Err{"not a number of packets (1 to " + std::to_string(kMaxReorderPackets) +
                     ") nor a time"};
        }
        f.reorder_packets = static_cast<std::uint32_t>(*n);
        return std::monostate{};
      }
      auto t = time_value(v, kMaxDelayNs);
      if (!t.ok()) return Err{t.error() + "; or a number of packets"};
      if (t.value() == 0) return Err{std::string("0: hold for more than 0")};
      f.reorder_delay_ns = t.value();
      return std::monostate{};
    }
    case kKeyDelay:
      return delay(f.delay_ns);
    case kKeyJitter:
      return delay(f.jitter_ns);
    case kKeyCorrupt:
      return ratio(f.corruption);
    case kKeyCorruptBits: {
      auto n = parse_decimal(v, kMaxCorruptBits);
      if (!n || *n == 0) {
        return Err{"not a number of bits (1 to " + std::to_string(kMaxCorruptBits) + ")"};
      }
      f.corrupt_bits = static_cast<std::uint32_t>(*n);
      return std::monostate{};
    }
    case kKeyRate: {
      auto r = rate_value(v);
      if (!r.ok()) return Err{r.error()};
      f.rate_bps = r.value();
      return std::monostate{};
    }
    case kKeyQueue: {
      auto n = parse_decimal(v, kMaxQueuePackets);
      if (!n || *n == 0) {
        return Err{"not a number of packets (1 to " + std::to_string(kMaxQueuePackets) + ")"};
      }
      f.queue_packets = static_cast<std::uint32_t>(*n);
      return std::monostate{};
    }
    case kKeyPartition: {
      auto p = partition_value(v);
      if (!p.ok()) return Err{p.error()};
      rule.partitions.push_back(p.value());
      return std::monostate{};
    }
    case kKeyCount:
      break;
  }
  return Err{std::string("?")};
}

std::string error(std::string_view what, std::string_view why) {
  std::string s = "fault spec: ";
  s.append(what);
  s += ": ";
  s.append(why);
  return s;
}

// Long: the item loop of a rule's grammar, with the error of each malformed item.
Result<Rule, std::string> parse_rule(std::string_view text, std::size_t index,
                                     std::optional<std::uint64_t>& seed, bool& only_seed) {
  Rule rule;
  std::array<std::string_view, kKeyCount> seen{};  // the item that gave each key
  std::array<bool, kKeyCount> given{};
  only_seed = true;
  for (std::string_view raw : split(text, ',')) {
    const std::string_view item = trim(raw);
    if (item.empty()) {
      return Err{
          error("rule " + std::to_string(index + 1) + " " + quoted(trim(text)), "an empty item")};
    }
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) return Err{error(quoted(item), "not key=value")};
    const std::string_view name = trim(item.substr(0, eq));
    const std::string_view value = trim(item.substr(eq + 1));
    if (name == "seed") {
      if (seed) return Err{error(quoted(item), "seed given twice")};
      auto s = parse_integer(value, ~std::uint64_t{0});
      if (!s) return Err{error(quoted(item), "not a seed (an integer, decimal or 0x)")};
      seed = *s;
      continue;
    }
    only_seed = false;
    const std::optional<Key> key = key_of(name);
    if (!key) {
      return Err{error(quoted(item), "unknown key " + quoted(name) +
                                         " (dir, peer, qpn, class, attr, loss, burst, dup, "
                                         "reorder, reorder_by, delay, jitter, corrupt, "
                                         "corrupt_bits, rate, queue, partition, seed)")};
    }
    if (given[*key] && *key != kKeyPartition) {
      return Err{error(quoted(item), std::string(name) + " given twice in one rule (also " +
                                         quoted(seen[*key]) + ")")};
    }
    given[*key] = true;
    seen[*key] = item;
    auto applied = apply_item(*key, value, rule);
    if (!applied.ok()) return Err{error(quoted(item), applied.error())};
  }
  if (only_seed) return rule;
  // A modifier of a fault that is off changes nothing: back to its default, so that the rule
  // prints (to_string) as it parsed.
  Faults& f = rule.faults;
  if (f.reordering.is_zero()) {
    f.reorder_packets = Faults{}.reorder_packets;
    f.reorder_delay_ns = 0;
  }
  if (f.corruption.is_zero()) f.corrupt_bits = Faults{}.corrupt_bits;
  auto needs = [&](Key k, Key on) -> std::optional<std::string> {
    if (given[k] && !given[on]) {
      return error(quoted(seen[k]), std::string(kKeyNames[k]) + "= without " +
                                        std::string(kKeyNames[on]) + "= in its rule");
    }
    return std::nullopt;
  };
  if (given[kKeyBurst] && given[kKeyLoss]) {
    return Err{error(quoted(seen[kKeyBurst]),
                     "burst= and loss= in one rule (burst= replaces loss=: give one)")};
  }
  for (auto [k, on] : {std::pair{kKeyReorderBy, kKeyReorder},
                       std::pair{kKeyCorruptBits, kKeyCorrupt}, std::pair{kKeyQueue, kKeyRate}}) {
    if (auto e = needs(k, on)) return Err{*e};
  }
  if (given[kKeyAttr] &&
      (rule.match.classes & (1u << static_cast<unsigned>(PacketClass::kCm))) == 0) {
    return Err{error(quoted(seen[kKeyAttr]), "attr= takes CM MADs only, and its rule's " +
                                                 quoted(seen[kKeyClass]) + " leaves out cm")};
  }
  const bool any_match =
      std::any_of(given.begin(), given.begin() + kFirstFaultKey, [](bool g) { return g; });
  if (!rule.faults.any() && rule.partitions.empty()) {
    const std::string what = "rule " + quoted(trim(text));
    return Err{error(what, std::string(any_match ? "matches but does nothing" : "does nothing") +
                               ": give it a fault (loss, burst, dup, reorder, delay, jitter, "
                               "corrupt, rate or partition) other than 0")};
  }
  return rule;
}

// The names of the bits set in `bits` (bit i: names[i]), joined by '+' (class=, attr=).
template <std::size_t N>
std::string joined(std::uint32_t bits, const std::string_view (&names)[N]) {
  std::string s;
  for (std::size_t i = 0; i < N; ++i) {
    if ((bits >> i) & 1u) {
      if (!s.empty()) s += '+';
      s.append(names[i]);
    }
  }
  return s;
}

std::string rule_string(const Rule& r) {
  std::string s;
  auto item = [&](std::string_view key, const std::string& value) {
    if (!s.empty()) s += ',';
    s.append(key);
    s += '=';
    s += value;
  };
  const Match& m = r.match;
  if (m.dirs == 1) item("dir", "tx");
  if (m.dirs == 2) item("dir", "rx");
  if (m.peer) item("peer", ip_string(*m.peer));
  if (m.qpn) item("qpn", std::to_string(*m.qpn));
  if ((m.classes & kAllClasses) != kAllClasses) item("class", joined(m.classes, kClassNames));
  if (m.cm_attrs != 0) item("attr", joined(m.cm_attrs, kCmAttrNames));
  const Faults& f = r.faults;
  if (f.burst) {
    item("burst", burst_string(*f.burst));
  } else if (!f.loss.is_zero()) {
    item("loss", to_spec_string(f.loss));
  }
  if (!f.duplication.is_zero()) item("dup", to_spec_string(f.duplication));
  if (!f.reordering.is_zero()) {
    item("reorder", to_spec_string(f.reordering));
    if (f.reorder_delay_ns > 0) {
      item("reorder_by", time_string(f.reorder_delay_ns));
    } else if (f.reorder_packets != Faults{}.reorder_packets) {
      item("reorder_by", std::to_string(f.reorder_packets));
    }
  }
  if (f.delay_ns > 0) item("delay", time_string(f.delay_ns));
  if (f.jitter_ns > 0) item("jitter", time_string(f.jitter_ns));
  if (!f.corruption.is_zero()) {
    item("corrupt", to_spec_string(f.corruption));
    if (f.corrupt_bits != Faults{}.corrupt_bits)
      item("corrupt_bits", std::to_string(f.corrupt_bits));
  }
  if (f.rate_bps > 0) {
    item("rate", rate_string(f.rate_bps));
    if (f.queue_packets != Faults{}.queue_packets) item("queue", std::to_string(f.queue_packets));
  }
  for (const Partition& p : r.partitions) item("partition", partition_string(p));
  return s;
}

// Floyd's sampling of `count` distinct values of [0, n): exactly `count` draws of `rng`.
std::size_t choose_bits(std::uint64_t n, std::uint32_t bits, Prng& rng,
                        std::array<std::uint64_t, kMaxCorruptBits>& chosen) {
  UROCE_CHECK(bits <= kMaxCorruptBits);
  const std::uint64_t count = std::min<std::uint64_t>(bits, n);
  std::size_t size = 0;
  for (std::uint64_t j = n - count; j < n; ++j) {
    const std::uint64_t t = rng.below(j + 1);
    const auto end = chosen.begin() + static_cast<std::ptrdiff_t>(size);
    chosen[size++] = std::find(chosen.begin(), end, t) != end ? j : t;
  }
  return size;
}

bool chance(Prng& rng, Ratio r) { return !r.is_zero() && rng.chance(r.num, r.den); }

// ---- classification ------------------------------------------------------------------------

PacketClass class_of(const wire::RocePacket& p) {
  const wire::OpcodeInfo& op = *p.op;
  if (op.is(wire::kFlagCnp)) return PacketClass::kCnp;
  const std::uint32_t dest_qpn = p.bth().dest_qpn();
  if (op.transport == wire::Transport::kUd && dest_qpn == wire::kGsiQpn) {
    return p.payload.size() == wire::kMadBytes ? PacketClass::kCm : PacketClass::kOther;
  }
  if (op.is(wire::kFlagRequest)) {
    return op.is(wire::kFlagAtomic) ? PacketClass::kAtomic : PacketClass::kRequest;
  }
  if (op.is(wire::kFlagResponse)) {
    if (op.is(wire::kFlagAck) || op.is(wire::kFlagAtomic)) return PacketClass::kAck;
    if (op.is(wire::kFlagRead)) return PacketClass::kReadResponse;
  }
  return PacketClass::kOther;
}

std::size_t dir_index(Direction d) { return d == Direction::kRx ? 1 : 0; }

}  // namespace

// ---- Ratio ---------------------------------------------------------------------------------

std::string to_string(Ratio r) {
  if (r.is_zero()) return "0";
  std::string s = std::to_string(r.num);
  s += '/';
  s += std::to_string(r.den);
  return s;
}

std::string to_spec_string(Ratio r) {
  UROCE_CHECK(r.valid());
  if (r.is_zero()) return "0";
  const std::uint64_t scaled = std::uint64_t{r.num} * kPercentDen;
  if (scaled % r.den == 0) {
    const std::uint64_t k = scaled / r.den;  // in 1/10000 %
    std::string s = std::to_string(k / 10'000);
    if (k % 10'000 != 0) {
      char frac[8];
      std::snprintf(frac, sizeof frac, "%04u", static_cast<unsigned>(k % 10'000));
      std::string_view f = frac;
      while (f.back() == '0') f.remove_suffix(1);
      s += '.';
      s.append(f);
    }
    s += '%';
    return s;
  }
  const Ratio q = reduced(r.num, r.den);
  return std::to_string(q.num) + "/" + std::to_string(q.den);
}

Result<Ratio, std::string> parse_ratio(std::string_view s) {
  auto r = ratio_value(s);
  if (!r.ok()) return Err{quoted(s) + ": " + r.error()};
  return r.value();
}

std::string address_string(const wire::IpAddress& a) { return ip_string(a); }

std::string_view to_string(PacketClass c) {
  const auto i = static_cast<std::size_t>(c);
  return i < kPacketClassCount ? kClassNames[i] : "?";
}

// ---- classification and matching ----------------------------------------------------------

PacketInfo classify(ConstBytes roce, Direction dir, const wire::IpAddress& peer) {
  PacketInfo info;
  info.dir = dir;
  info.peer = peer;
  auto parsed = wire::parse_roce(roce, true);  // sealed packets too (issue 44)
  if (!parsed.ok()) return info;
  info.cls = class_of(parsed.value());
  info.dest_qpn = parsed->bth().dest_qpn();
  const ConstBytes mad = parsed->payload;
  if (info.cls == PacketClass::kCm &&
      mad[wire::kMadOffMgmtClass] == std::byte{wire::kMgmtClassCm}) {
    info.cm_attr = load_be16(mad, wire::kMadOffAttrId);
  }
  return info;
}

bool Match::matches(const PacketInfo& p) const {
  if ((dirs & static_cast<std::uint8_t>(p.dir)) == 0) return false;
  if (((classes >> static_cast<unsigned>(p.cls)) & 1u) == 0) return false;
  if (qpn && *qpn != p.dest_qpn) return false;
  if (peer && !wire::same_host(*peer, p.peer)) return false;
  if (cm_attrs != 0) {
    // attr=: a CM MAD of one of the attributes, nothing else.
    const unsigned bit = unsigned{p.cm_attr} - unsigned{kFirstCmAttr};  // wraps below it
    if (p.cls != PacketClass::kCm || bit >= kCmAttrCount || ((cm_attrs >> bit) & 1u) == 0) {
      return false;
    }
  }
  return true;
}

bool Faults::any() const {
  return !loss.is_zero() || burst.has_value() || !duplication.is_zero() || !reordering.is_zero() ||
         delay_ns > 0 || jitter_ns > 0 || !corruption.is_zero() || rate_bps > 0;
}

bool Partition::active(std::int64_t since_start_ns) const {
  if (length_ns <= 0 || since_start_ns < start_ns) return false;
  std::int64_t into = since_start_ns - start_ns;
  if (period_ns > 0) into %= period_ns;
  return into < length_ns;
}

// ---- the grammar ---------------------------------------------------------------------------

Result<FaultSpec, std::string> FaultSpec::parse(std::string_view text) {
  FaultSpec spec;
  text = trim(text);
  if (text.empty()) return spec;
  std::optional<std::uint64_t> seed;
  const std::vector<std::string_view> rules = split(text, ';');
  for (std::size_t i = 0; i < rules.size(); ++i) {
    if (trim(rules[i]).empty()) {
      return Err{error("rule " + std::to_string(i + 1), "empty (two ';' in a row, or at an end)")};
    }
    bool only_seed = false;
    auto rule = parse_rule(rules[i], i, seed, only_seed);
    if (!rule.ok()) return Err{rule.error()};
    if (!only_seed) spec.rules.push_back(std::move(rule.value()));
  }
  if (seed) spec.seed = *seed;
  return spec;
}

std::string FaultSpec::to_string() const {
  std::string s;
  for (const Rule& r : rules) {
    if (!s.empty()) s += ';';
    s += rule_string(r);
  }
  if (seed != FaultSpec{}.seed) {
    if (!s.empty()) s += ',';
    s += "seed=" + std::to_string(seed);
  }
  return s;
}

// ---- the fate of one packet ----------------------------------------------------------------

FateState::FateState(std::uint64_t seed)
    : streams{Prng(derive_seed(seed, kLoss)), Prng(derive_seed(seed, kDuplication)),
              Prng(derive_seed(seed, kJitter)), Prng(derive_seed(seed, kReordering)),
              Prng(derive_seed(seed, kCorruption))} {}

Fate decide(const Faults& f, FateState& s, std::size_t corruptible_bytes) {
  Fate fate;
  if (f.burst) {
    // Gilbert-Elliott, as netem's gemodel: the loss of the state the packet finds, then the
    // transition.
    const GilbertElliott& g = *f.burst;
    Prng& rng = s.streams[FateState::kLoss];
    const bool lost = chance(rng, s.burst_bad ? g.loss_bad : g.loss_good);
    if (chance(rng, s.burst_bad ? g.r : g.p)) s.burst_bad = !s.burst_bad;
    if (lost) {
      fate.lost = true;
      fate.burst_loss = true;
      fate.copies = 0;
      return fate;
    }
  } else if (chance(s.streams[FateState::kLoss], f.loss)) {
    fate.lost = true;
    fate.copies = 0;
    return fate;
  }
  if (chance(s.streams[FateState::kDuplication], f.duplication)) fate.copies = 2;
  for (std::size_t i = 0; i < fate.copies; ++i) {
    CopyFate& c = fate.copy[i];
    c.extra_delay_ns = f.delay_ns;
    if (f.jitter_ns > 0) {
      c.extra_delay_ns += static_cast<std::int64_t>(
          s.streams[FateState::kJitter].range(0, static_cast<std::uint64_t>(f.jitter_ns)));
    }
    c.reordered = chance(s.streams[FateState::kReordering], f.reordering);
    if (c.reordered) c.extra_delay_ns += f.reorder_delay_ns;
    Prng& corrupt = s.streams[FateState::kCorruption];
    c.corrupted = chance(corrupt, f.corruption);
    if (c.corrupted) {
      c.corrupt_rng = corrupt;
      std::array<std::uint64_t, kMaxCorruptBits> chosen;
      choose_bits(std::uint64_t{corruptible_bytes} * 8, f.corrupt_bits, corrupt, chosen);
    }
  }
  return fate;
}

void flip_bits(MutBytes bytes, std::size_t from, std::uint32_t bits, Prng& rng) {
  UROCE_CHECK(from <= bytes.size());
  std::array<std::uint64_t, kMaxCorruptBits> chosen;
  const std::size_t n = choose_bits(std::uint64_t{bytes.size() - from} * 8, bits, rng, chosen);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t bit = chosen[i];
    bytes[from + bit / 8] ^= std::byte{static_cast<std::uint8_t>(1u << (bit % 8))};
  }
}

// ---- the stage -----------------------------------------------------------------------------

std::string_view to_string(Injected k) {
  switch (k) {
    case Injected::kLoss:
      return "loss";
    case Injected::kBurstLoss:
      return "burst_loss";
    case Injected::kPartition:
      return "partition";
    case Injected::kQueueFull:
      return "queue_full";
    case Injected::kDuplicate:
      return "duplicate";
    case Injected::kReorder:
      return "reorder";
    case Injected::kDelay:
      return "delay";
    case Injected::kCorrupt:
      return "corrupt";
  }
  return "?";
}

struct FaultStage::Held {
  Out out;
};

struct FaultStage::Impl {
  // Held copies by (due, order): order is the submit order, except for a copy released from a
  // reorder by packets, which is ordered as of its release.
  using Key = std::pair<Instant, std::uint64_t>;
  struct ReorderWait {
    std::uint64_t release_at = 0;  // the rule and direction's submitted count that releases it
    Key key;
    Instant earliest;  // its departure plus its delay
  };
  // One rule in one direction.
  struct Lane {
    std::uint64_t submitted = 0;
    Instant tx_busy_until;
    std::deque<Instant> tx_ends;  // packets not completely serialized, by serialization end
    std::deque<ReorderWait> reorder;
  };
  std::map<Key, Held> held;
  std::uint64_t next_order = 0;
  std::vector<Lane> lanes;  // [2 * rule + direction]
  std::deque<FaultEvent> events;
  std::vector<std::vector<std::byte>> pool;
  Instant last_now;

  std::vector<std::byte> buffer(ConstBytes contents) {
    std::vector<std::byte> b;
    if (!pool.empty()) {
      b = std::move(pool.back());
      pool.pop_back();
    }
    b.assign(contents.begin(), contents.end());
    return b;
  }
  void recycle(std::vector<std::byte>&& b) {
    b.clear();
    if (b.capacity() > 0 && pool.size() < kMaxPooledBuffers) pool.push_back(std::move(b));
  }
};

namespace {

// ceil(8 * bytes * 1e9 / rate_bps).
Duration serialization_time(std::size_t bytes, std::uint64_t rate_bps) {
  const unsigned __int128 bits_ns = static_cast<unsigned __int128>(bytes) * 8 * 1'000'000'000u;
  return Duration::ns(static_cast<std::int64_t>((bits_ns + rate_bps - 1) / rate_bps));
}

bool valid(const Faults& f) {
  const bool ratios = f.loss.valid() && f.duplication.valid() && f.reordering.valid() &&
                      f.corruption.valid() &&
                      (!f.burst || (f.burst->p.valid() && f.burst->r.valid() &&
                                    f.burst->loss_bad.valid() && f.burst->loss_good.valid()));
  auto in = [](std::int64_t v, std::int64_t max) { return v >= 0 && v <= max; };
  return ratios && in(f.delay_ns, kMaxDelayNs) && in(f.jitter_ns, kMaxDelayNs) &&
         in(f.reorder_delay_ns, kMaxDelayNs) && f.reorder_packets >= 1 && f.corrupt_bits >= 1 &&
         f.corrupt_bits <= kMaxCorruptBits && f.queue_packets >= 1 && f.rate_bps <= kMaxRateBps;
}

}  // namespace

FaultStage::FaultStage(FaultSpec spec, Instant start)
    : spec_(std::move(spec)), start_(start), impl_(std::make_unique<Impl>()) {
  states_.reserve(2 * spec_.rules.size());
  for (std::size_t r = 0; r < spec_.rules.size(); ++r) {
    const Rule& rule = spec_.rules[r];
    UROCE_CHECK(valid(rule.faults));
    for (const Partition& p : rule.partitions) {
      UROCE_CHECK(p.start_ns >= 0 && p.length_ns > 0 &&
                  (p.period_ns == 0 || p.period_ns > p.length_ns));
    }
    const std::uint64_t rule_seed = derive_seed(spec_.seed, r);
    states_.emplace_back(derive_seed(rule_seed, 0));  // tx
    states_.emplace_back(derive_seed(rule_seed, 1));  // rx
  }
  impl_->lanes.resize(2 * spec_.rules.size());
  impl_->last_now = start;
}

FaultStage::~FaultStage() = default;
FaultStage::FaultStage(FaultStage&&) noexcept = default;
FaultStage& FaultStage::operator=(FaultStage&&) noexcept = default;

// Long: one packet through a rule (partition, rate, fate, copies); lambdas share state.
FaultStage::Verdict FaultStage::submit(Instant now, const PacketInfo& info, ConstBytes packet) {
  Impl& m = *impl_;
  now = std::max(now, m.last_now);
  m.last_now = now;
  const std::size_t d = dir_index(info.dir);
  const std::uint64_t number = ++seen_[d];
  std::size_t r = 0;
  while (r < spec_.rules.size() && !spec_.rules[r].match.matches(info)) ++r;
  if (r == spec_.rules.size()) return Verdict::kPass;

  const Rule& rule = spec_.rules[r];
  const Faults& f = rule.faults;
  Impl::Lane& lane = m.lanes[2 * r + d];
  StageCounters& counters = counters_[d];
  ++counters.packets;
  ++lane.submitted;
  auto event = [&](Injected kind) {
    ++counters.injected[static_cast<std::size_t>(kind)];
    if (m.events.size() >= kMaxEvents) {
      m.events.pop_front();
      ++events_lost_;
    }
    m.events.push_back(FaultEvent{now, kind, info, number, r});
  };
  // The releases this packet triggers come after it: they are made once it has been handled.
  auto release = [&]() {
    while (!lane.reorder.empty() && lane.reorder.front().release_at <= lane.submitted) {
      const Impl::ReorderWait w = lane.reorder.front();
      lane.reorder.pop_front();
      auto node = m.held.extract(w.key);
      if (node.empty()) continue;  // released by its timeout already
      node.key() = Impl::Key{std::max(w.earliest, now), m.next_order++};
      m.held.insert(std::move(node));
    }
  };

  const std::int64_t since_start_ns = (now - start_).count_ns();
  for (const Partition& p : rule.partitions) {
    if (p.active(since_start_ns)) {
      event(Injected::kPartition);
      release();
      return Verdict::kTaken;
    }
  }
  Instant departure = now;
  if (f.rate_bps > 0) {
    while (!lane.tx_ends.empty() && lane.tx_ends.front() <= now) lane.tx_ends.pop_front();
    if (lane.tx_ends.size() >= f.queue_packets) {
      event(Injected::kQueueFull);
      release();
      return Verdict::kTaken;
    }
    departure = std::max(now, lane.tx_busy_until);
    lane.tx_busy_until = departure + serialization_time(packet.size(), f.rate_bps);
    lane.tx_ends.push_back(lane.tx_busy_until);
  }
  Fate fate = decide(f, states_[2 * r + d], packet.size());
  if (fate.lost) {
    event(fate.burst_loss ? Injected::kBurstLoss : Injected::kLoss);
    release();
    return Verdict::kTaken;
  }
  const CopyFate& first = fate.copy[0];
  if (fate.copies == 1 && departure == now && first.extra_delay_ns == 0 && !first.reordered &&
      !first.corrupted) {
    release();
    return Verdict::kPass;
  }
  for (std::size_t i = 0; i < fate.copies; ++i) {
    CopyFate& c = fate.copy[i];
    if (m.held.size() >= kMaxHeldPackets) {
      event(Injected::kQueueFull);
      continue;
    }
    if (i == 1) event(Injected::kDuplicate);
    const bool by_packets = c.reordered && f.reorder_delay_ns == 0;
    const std::int64_t reorder_ns = c.reordered ? f.reorder_delay_ns : 0;
    if (c.reordered) event(Injected::kReorder);
    if (c.extra_delay_ns - reorder_ns > 0) event(Injected::kDelay);
    Held h;
    h.out.info = info;
    h.out.bytes = m.buffer(packet);
    h.out.duplicate = i == 1;
    if (c.corrupted) {
      flip_bits(h.out.bytes, 0, f.corrupt_bits, *c.corrupt_rng);
      h.out.corrupted = true;
      event(Injected::kCorrupt);
    }
    const Instant due = departure + Duration::ns(c.extra_delay_ns);
    if (by_packets) {
      const Impl::Key key{std::max(due, now + Duration::ns(kReorderTimeoutNs)), m.next_order++};
      m.held.emplace(key, std::move(h));
      lane.reorder.push_back(Impl::ReorderWait{lane.submitted + f.reorder_packets, key, due});
    } else {
      m.held.emplace(Impl::Key{due, m.next_order++}, std::move(h));
    }
  }
  release();
  return Verdict::kTaken;
}

bool FaultStage::poll(Instant now, Out& out) {
  Impl& m = *impl_;
  now = std::max(now, m.last_now);
  m.last_now = now;
  if (m.held.empty() || m.held.begin()->first.first > now) return false;
  auto node = m.held.extract(m.held.begin());
  Out& h = node.mapped().out;
  out.info = h.info;
  out.duplicate = h.duplicate;
  out.corrupted = h.corrupted;
  std::swap(out.bytes, h.bytes);
  m.recycle(std::move(h.bytes));
  return true;
}

Instant FaultStage::next_deadline() const {
  return impl_->held.empty() ? Instant::never() : impl_->held.begin()->first.first;
}

std::size_t FaultStage::held() const { return impl_->held.size(); }

std::optional<FaultEvent> FaultStage::poll_event() {
  if (impl_->events.empty()) return std::nullopt;
  FaultEvent e = impl_->events.front();
  impl_->events.pop_front();
  return e;
}

const StageCounters& FaultStage::counters(Direction d) const { return counters_[dir_index(d)]; }

}  // namespace uroce::fault

#include "device/device_config.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/assert.h"
#include "fault/fault.h"

namespace uroce::engine {

namespace {

constexpr const char* kDefaultConfigFile = "/etc/uroce/devices.conf";

bool name_byte_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

bool valid_name(const std::string& n) {
  return !n.empty() && n.size() <= 63 && std::all_of(n.begin(), n.end(), name_byte_ok);
}

std::string describe(const std::vector<DeviceSpec>& list) {
  std::string s;
  for (const auto& d : list) {
    if (!s.empty()) s += ", ";
    s += d.name + " on " + ip_to_string(d.ip);
  }
  return s.empty() ? "none" : s;
}

Result<std::vector<DeviceSpec>, std::string> check_unique(std::vector<DeviceSpec> list) {
  for (std::size_t i = 0; i < list.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (list[i].name == list[j].name) return Err{"device name '" + list[i].name + "' repeats"};
      if (list[i].ip == list[j].ip) {
        return Err{"address " + ip_to_string(list[i].ip) + " is given to two devices"};
      }
    }
  }
  return list;
}

// The entries of a list separated by commas, spaces, tabs or newlines.
std::vector<std::string> list_items(const std::string& text) {
  std::string norm = text;
  for (char& c : norm) {
    if (c == ',' || c == '\t' || c == '\n') c = ' ';
  }
  std::istringstream in(norm);
  std::vector<std::string> items;
  std::string item;
  while (in >> item) items.push_back(item);
  return items;
}

Result<DeviceSpec, std::string> parse_entry(const std::string& name, const std::string& addr,
                                            std::size_t position) {
  auto ip = parse_ip(addr);
  if (!ip.ok()) return Err{ip.error()};
  DeviceSpec d;
  d.name = name.empty() ? "uroce" + std::to_string(position) : name;
  if (!valid_name(d.name)) {
    return Err{"invalid device name '" + d.name + "' (1-63 of A-Z a-z 0-9 _ - .)"};
  }
  d.ip = ip.value();
  return d;
}

// An IPv6 address a device can bind without a scope: not link-local (fe80::/10), not multicast.
bool usable_v6(const wire::IpAddress& ip) {
  const bool link_local = ip.bytes[0] == 0xfe && (ip.bytes[1] & 0xc0) == 0x80;
  return !link_local && ip.bytes[0] != 0xff;
}

}  // namespace

std::vector<DeviceSpec> interface_devices(const std::vector<InterfaceAddress>& interfaces,
                                          const std::vector<DeviceSpec>& taken) {
  // Each interface that is up and not loopback, with its chosen address.
  struct Candidate {
    std::string ifname;
    std::optional<wire::IpAddress> v4, v6;
  };
  std::vector<Candidate> found;
  for (const InterfaceAddress& a : interfaces) {
    if (a.name.empty() || a.loopback || !a.up || !a.ip) continue;
    auto it = std::find_if(found.begin(), found.end(),
                           [&](const Candidate& c) { return c.ifname == a.name; });
    if (it == found.end()) it = found.insert(found.end(), Candidate{a.name, {}, {}});
    if (!a.ip->v6 && !it->v4) it->v4 = a.ip;
    if (a.ip->v6 && !it->v6 && usable_v6(*a.ip)) it->v6 = a.ip;
  }
  std::sort(found.begin(), found.end(),
            [](const Candidate& x, const Candidate& y) { return x.ifname < y.ifname; });
  std::vector<std::string> names;
  std::vector<wire::IpAddress> addresses;
  for (const DeviceSpec& t : taken) {
    names.push_back(t.name);
    addresses.push_back(t.ip);
  }
  const auto name_taken = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  // Pass 0 names the interfaces whose names are usable as they are, pass 1 the others.
  constexpr std::string_view kPrefix = "uroce_";
  constexpr std::size_t kMaxName = 63;
  std::vector<std::optional<DeviceSpec>> chosen(found.size());
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t i = 0; i < found.size(); ++i) {
      const Candidate& c = found[i];
      const std::optional<wire::IpAddress> ip = c.v4 ? c.v4 : c.v6;
      if (!ip) continue;
      std::string base = std::string(kPrefix) + c.ifname;
      const bool as_is =
          base.size() <= kMaxName && std::all_of(c.ifname.begin(), c.ifname.end(), name_byte_ok);
      if (as_is != (pass == 0)) continue;
      if (std::find(addresses.begin(), addresses.end(), *ip) != addresses.end()) continue;
      for (char& ch : base) {
        if (!name_byte_ok(ch)) ch = '_';
      }
      if (base.size() > kMaxName) base.resize(kMaxName);
      std::string name = base;
      for (int n = 2; name_taken(name); ++n) {
        std::string suffix(1, '_');  // not "_" + to_string(n): GCC 12's -Wrestrict misfires
        suffix += std::to_string(n);
        name = base.substr(0, kMaxName - suffix.size());
        name += suffix;
      }
      UROCE_ASSERT(valid_name(name) && !name_taken(name));  // what a config could name
      DeviceSpec d;
      d.name = name;
      d.ip = *ip;
      names.push_back(name);
      addresses.push_back(*ip);
      chosen[i] = d;
    }
  }
  std::vector<DeviceSpec> out;
  for (auto& d : chosen) {
    if (d) out.push_back(std::move(*d));
  }
  return out;
}

Result<wire::IpAddress, std::string> parse_ip(const std::string& text) {
  wire::IpAddress a;
  if (::inet_pton(AF_INET, text.c_str(), a.bytes.data()) == 1) {
    if (a.v4_host_order() == 0) return Err{"0.0.0.0 cannot be a device address"};
    return a;
  }
  a = wire::IpAddress{};
  a.v6 = true;
  if (::inet_pton(AF_INET6, text.c_str(), a.bytes.data()) == 1) {
    if (a == wire::IpAddress{.v6 = true}) return Err{":: cannot be a device address"};
    return a;
  }
  return Err{"'" + text + "' is not an IPv4 or IPv6 address"};
}

std::string ip_to_string(const wire::IpAddress& ip) {
  char buf[INET6_ADDRSTRLEN] = {};
  [[maybe_unused]] const char* text =
      ::inet_ntop(ip.v6 ? AF_INET6 : AF_INET, ip.bytes.data(), buf, sizeof buf);
  UROCE_ASSERT(text != nullptr);  // every address fits INET6_ADDRSTRLEN
  return buf;
}

Result<SrPeers, std::string> parse_sr_peers(const std::string& text) {
  SrPeers peers;
  for (const std::string& item : list_items(text)) {
    if (item == "all") {
      peers.all = true;
      continue;
    }
    auto ip = parse_ip(item);
    if (!ip.ok()) return Err{"'" + item + "' is neither 'all' nor an IPv4 or IPv6 address"};
    peers.addresses.push_back(ip.value());
  }
  return peers;
}

Result<std::vector<DeviceSpec>, std::string> parse_device_list(const std::string& text) {
  std::vector<DeviceSpec> out;
  for (const std::string& item : list_items(text)) {
    const auto eq = item.find('=');
    const std::string name = eq == std::string::npos ? "" : item.substr(0, eq);
    const std::string addr = eq == std::string::npos ? item : item.substr(eq + 1);
    auto d = parse_entry(name, addr, out.size());
    if (!d.ok()) return Err{"UROCE_DEVICES entry '" + item + "': " + d.error()};
    out.push_back(d.value());
  }
  if (out.empty()) return Err{std::string("UROCE_DEVICES names no device")};
  return check_unique(std::move(out));
}

// Long: one branch per key a device's line may have, each with its own error.
Result<std::vector<DeviceSpec>, std::string> parse_device_file(const std::string& text,
                                                               const std::string& path) {
  std::vector<DeviceSpec> out;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::vector<std::string> w;
    std::string word;
    while (words >> word) w.push_back(word);
    if (w.empty()) continue;
    const std::string where = path + ":" + std::to_string(lineno) + ": ";
    constexpr const char* kExpected =
        "expected 'name address [faults=SPEC] [cc=NAME] [sr=0|1] [sr_peers=PEERS] "
        "[rxe_flush_peers=PEERS] [recovery=0|1] [aead=MODE] [psk=HEX]'";
    if (w.size() < 2 || w.size() > 10) return Err{where + kExpected};
    auto d = parse_entry(w[0], w[1], out.size());
    if (!d.ok()) return Err{where + d.error()};
    bool have_faults = false;
    std::optional<std::string> aead;
    std::optional<std::string> psk;
    for (std::size_t i = 2; i < w.size(); ++i) {
      if (w[i].starts_with("faults=") && !have_faults) {
        have_faults = true;
        d.value().faults = w[i].substr(std::string_view("faults=").size());
        auto f = fault::FaultSpec::parse(d.value().faults);
        if (!f.ok()) return Err{where + f.error()};
      } else if (w[i].starts_with("cc=") && !d.value().congestion_control) {
        const std::string name = w[i].substr(std::string_view("cc=").size());
        d.value().congestion_control = congestion_control_from_name(name);
        if (!d.value().congestion_control) {
          return Err{where + "cc= must be none, dcqcn, aimd or dcqcn-aimd, not '" + name + "'"};
        }
      } else if ((w[i] == "sr=0" || w[i] == "sr=1") && !d.value().selective_repeat) {
        d.value().selective_repeat = w[i] == "sr=1";
      } else if (w[i].starts_with("sr=")) {
        return Err{where + "sr= must be 0 or 1, not '" + w[i].substr(3) + "'"};
      } else if ((w[i] == "recovery=0" || w[i] == "recovery=1") && !d.value().adaptive_recovery) {
        d.value().adaptive_recovery = w[i] == "recovery=1";
      } else if (w[i].starts_with("recovery=")) {
        return Err{where + "recovery= must be 0 or 1, not '" + w[i].substr(9) + "'"};
      } else if (w[i].starts_with("sr_peers=") && !d.value().sr_peers) {
        auto peers = parse_sr_peers(w[i].substr(std::string_view("sr_peers=").size()));
        if (!peers.ok()) return Err{where + "sr_peers=: " + peers.error()};
        d.value().sr_peers = peers.value();
      } else if (w[i].starts_with("rxe_flush_peers=") && !d.value().rxe_flush_peers) {
        auto peers = parse_sr_peers(w[i].substr(std::string_view("rxe_flush_peers=").size()));
        if (!peers.ok()) return Err{where + "rxe_flush_peers=: " + peers.error()};
        d.value().rxe_flush_peers = peers.value();
      } else if (w[i].starts_with("aead=") && !aead) {
        aead = w[i].substr(std::string_view("aead=").size());
      } else if (w[i].starts_with("psk=") && !psk) {
        psk = w[i].substr(std::string_view("psk=").size());
      } else {
        return Err{where + kExpected};
      }
    }
    if (aead || psk) {
      auto s = seal::parse_settings(aead.value_or("off"), psk.value_or(""));
      if (!s.ok()) return Err{where + s.error()};
      d.value().seal = s.value();
    }
    out.push_back(d.value());
  }
  if (out.empty()) return out;  // comments only: the caller's default list
  auto unique = check_unique(std::move(out));
  if (!unique.ok()) return Err{path + ": " + unique.error()};
  return unique;
}

Result<std::vector<DeviceSpec>, std::string> configured_devices(const DeviceSource& source) {
  if (source.devices && !source.devices->empty()) return parse_device_list(*source.devices);
  const bool named = !source.config_path.empty();
  const std::string path = named ? source.config_path : std::string(kDefaultConfigFile);
  std::ifstream f(path);
  if (f) {
    std::stringstream ss;
    ss << f.rdbuf();
    auto listed = parse_device_file(ss.str(), path);
    // A file that names no device (the package's /etc/uroce/devices.conf as shipped, all
    // comments) leaves the default list in place.
    if (!listed.ok() || !listed.value().empty()) return listed;
  } else if (named) {
    return Err{"cannot read UROCE_CONFIG file " + path};
  }
  DeviceSpec d;
  d.name = "uroce0";
  d.ip = wire::IpAddress::v4(0x7f000001);
  std::vector<DeviceSpec> list{d};
  if (source.interfaces) {
    for (DeviceSpec& i : interface_devices(*source.interfaces, list)) list.push_back(i);
  }
  // interface_devices() avoids the names and addresses taken.
  UROCE_ASSERT(check_unique(list).ok());
  return list;
}

Result<DeviceSpec, std::string> resolve_device(const DeviceSelection& sel,
                                               const DeviceSource& source) {
  if (!sel.ip.empty()) {
    auto ip = parse_ip(sel.ip);
    if (!ip.ok()) return Err{ip.error()};
    DeviceSpec d;
    d.ip = ip.value();
    d.name = sel.name;
    if (d.name.empty()) {
      d.name = "uroce0";
      if (auto list = configured_devices(source); list.ok()) {
        for (const auto& c : list.value()) {
          if (c.ip == d.ip) d.name = c.name;
        }
      }
    }
    if (!valid_name(d.name)) return Err{"invalid device name '" + d.name + "'"};
    return d;
  }
  auto list = configured_devices(source);
  if (!list.ok()) return Err{list.error()};
  UROCE_ASSERT(!list.value().empty());  // both parsers refuse a list that names no device
  if (sel.name.empty()) return list.value().front();
  for (const auto& c : list.value()) {
    if (c.name == sel.name) return c;
  }
  return Err{"no device named '" + sel.name + "' (configured: " + describe(list.value()) + ")"};
}

std::uint32_t host_num_comp_vectors() {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  return cpus > 0 ? static_cast<std::uint32_t>(cpus) : 1;
}

}  // namespace uroce::engine

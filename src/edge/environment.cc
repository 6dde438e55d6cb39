#include "edge/environment.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "datapath/udp.h"
#include "edge/interfaces.h"

namespace uroce::edge {

namespace {

// The value of `name` in `env` (the first, as getenv(3)), or nullptr.
const char* lookup(const char* const* env, std::string_view name) {
  if (env == nullptr) return nullptr;
  for (const char* const* e = env; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.size() > name.size() && entry.starts_with(name) && entry[name.size()] == '=') {
      return *e + name.size() + 1;
    }
  }
  return nullptr;
}

// A "0" or "1", unset (or empty), or an error message for anything else.
Result<std::optional<bool>, std::string> switch_of(const char* const* env, const char* name) {
  const char* v = lookup(env, name);
  if (v == nullptr || *v == '\0') return std::optional<bool>{};
  if (std::strcmp(v, "0") == 0) return std::optional<bool>{false};
  if (std::strcmp(v, "1") == 0) return std::optional<bool>{true};
  return Err{std::string(name) + " must be 0 or 1, not '" + v + "'"};
}

}  // namespace

const char* const* process_environment() { return environ; }

engine::DeviceSource device_source(const char* const* env) {
  engine::DeviceSource s;
  if (const char* d = lookup(env, "UROCE_DEVICES")) s.devices = std::string(d);
  if (const char* c = lookup(env, "UROCE_CONFIG"); c != nullptr && *c != '\0') s.config_path = c;
  if (!s.devices || s.devices->empty()) s.interfaces = host_interfaces();  // for the default
  return s;
}

Result<engine::devd::DevdOptions, std::string> devd_options(const char* const* env) {
  engine::devd::DevdOptions o;
  if (const char* p = lookup(env, "UROCE_DEVD"); p != nullptr && *p != '\0') o.path = p;
  if (const char* l = lookup(env, "UROCE_DEVD_LINGER_MS"); l != nullptr && *l != '\0') {
    o.linger_ms = std::strtoll(l, nullptr, 10);  // as uroce-devd read its --linger-ms text
  }
  if (const char* s = lookup(env, "UROCE_SHARE")) o.any_user = std::strcmp(s, "all") == 0;
  if (const char* l = lookup(env, "UROCE_DEVD_LOG")) o.log_path = l;
  if (const char* p = lookup(env, "UROCE_DEVD_PCAP")) o.capture_path = p;
  if (const char* f = lookup(env, "UROCE_FAULTS")) o.faults = f;
  if (const char* g = lookup(env, "UROCE_CM_LISTEN_GRACE_MS"); g != nullptr && *g != '\0') {
    char* end = nullptr;
    const long long ms = std::strtoll(g, &end, 10);
    if (*end != '\0' || ms < 0 || ms > engine::devd::DevdOptions::kMaxCmListenGraceMs) {
      return Err{"UROCE_CM_LISTEN_GRACE_MS must be a number from 0 to " +
                 std::to_string(engine::devd::DevdOptions::kMaxCmListenGraceMs) + ", not '" + g +
                 "'"};
    }
    o.cm_listen_grace_ms = ms;
  }
  return o;
}

Result<engine::DeviceOptions, std::string> device_options(const char* const* env) {
  engine::DeviceOptions o;
  auto devd = devd_options(env);
  if (!devd.ok()) return Err{devd.error()};
  o.devd = devd.value();
  o.source = device_source(env);
  auto gso = switch_of(env, "UROCE_UDP_GSO");
  if (!gso.ok()) return Err{gso.error()};
  o.udp_gso = gso.value();
  auto gro = switch_of(env, "UROCE_UDP_GRO");
  if (!gro.ok()) return Err{gro.error()};
  o.udp_gro = gro.value();
  if (const char* b = lookup(env, "UROCE_UDP_BATCH"); b != nullptr && *b != '\0') {
    constexpr std::size_t kMax = datapath::UdpDatapath::kMaxBatch;
    char* end = nullptr;
    const unsigned long n = std::strtoul(b, &end, 10);
    if (*end != '\0' || n < 1 || n > kMax) {
      return Err{"UROCE_UDP_BATCH must be a number from 1 to " + std::to_string(kMax) + ", not '" +
                 b + "'"};
    }
    o.udp_batch = n;
  }
  if (const char* s = lookup(env, "UROCE_SHARED")) o.shared = std::string_view(s) != "0";
  if (const char* p = lookup(env, "UROCE_PCAP")) o.capture_path = p;
  if (const char* h = lookup(env, "UROCE_HOLD_ACKS")) o.acks.hold = std::string_view(h) != "0";
  if (const char* d = lookup(env, "UROCE_DEFER_ACKS")) o.acks.defer = std::string_view(d) != "0";
  if (const char* r = lookup(env, "UROCE_RECOVERY"))
    o.adaptive_recovery = std::string_view(r) != "0";
  if (const char* s = lookup(env, "UROCE_STATS_FILE")) o.stats_file = s;
  if (const char* f = lookup(env, "UROCE_FAULTS")) o.faults = std::string(f);
  constexpr std::string_view kPerDevice = "UROCE_FAULTS_";
  for (const char* const* e = env; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos || !entry.starts_with(kPerDevice)) continue;
    const std::string key(entry.substr(kPerDevice.size(), eq - kPerDevice.size()));
    o.device_faults.emplace(key, std::string(entry.substr(eq + 1)));  // the first, as getenv
  }
  auto sr = switch_of(env, "UROCE_SR");
  if (!sr.ok()) return Err{sr.error()};
  o.selective_repeat = sr.value();
  if (const char* p = lookup(env, "UROCE_SR_PEERS")) {
    auto peers = engine::parse_sr_peers(p);
    if (!peers.ok()) return Err{"UROCE_SR_PEERS: " + peers.error()};
    o.sr_peers = peers.value();
  }
  if (const char* p = lookup(env, "UROCE_RXE_FLUSH_PEERS")) {
    auto peers = engine::parse_sr_peers(p);
    if (!peers.ok()) return Err{"UROCE_RXE_FLUSH_PEERS: " + peers.error()};
    o.rxe_flush_peers = peers.value();
  }
  if (const char* cc = lookup(env, "UROCE_CC"); cc != nullptr && *cc != '\0') {
    o.congestion_control = congestion_control_from_name(cc);
    if (!o.congestion_control) {
      return Err{std::string("UROCE_CC must be none, dcqcn, aimd or dcqcn-aimd, not '") + cc + "'"};
    }
  }
  return o;
}

}  // namespace uroce::edge

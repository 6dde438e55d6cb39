// Which devices this host serves, and opening one by name: the configuration every uroce
// tool (and later the drop-in libibverbs.so.1) shares.
//
// A device is one local IP address served on UDP port 4791, as rxe0 is one netdev. The list
// comes from the first of:
//   1. the environment variable UROCE_DEVICES: entries separated by commas or spaces, each
//      `name=address` or a bare `address` (named uroce0, uroce1, ... by position);
//   2. the file named by UROCE_CONFIG, else /etc/uroce/devices.conf if it exists: one device
//      per line, `name address [faults=SPEC] [cc=NAME] [sr=0|1] [sr_peers=PEERS]
//      [rxe_flush_peers=PEERS] [aead=MODE] [psk=HEX]` (SPEC: fault/fault.h's grammar, no spaces;
//      NAME: the congestion control, as UROCE_CC names it; sr and sr_peers: selective repeat, as
//      UROCE_SR and UROCE_SR_PEERS give it; rxe_flush_peers: as UROCE_RXE_FLUSH_PEERS; MODE: off,
//      authenticate, encrypt or require, and HEX its pre-shared AES-GCM key of 32 or 64 hex digits,
//      docs/SECURITY.md); `#` starts a comment; a file that names no device (the package's, as
//      shipped: comments only) counts as none;
//   3. the default: uroce0 on 127.0.0.1, first (index 0, what a program that takes the first
//      device gets), then one device per interface of this host that is up and has an address,
//      as rxe puts a device on a netdev (host_interface_devices below; docs/CONFIGURATION.md).
// Two processes on one host use different devices by giving each its own list (for example
// UROCE_DEVICES=127.0.0.2 in the second one) or by naming an address on the command line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "seal/aead.h"
#include "uroce/verbs.h"
#include "wire/ip.h"

namespace uroce::engine {

// A set of peers: every peer, or a list of addresses. Those known to run uroce, with which RC QPs
// connected without rdma_cm use selective repeat (DeviceConfig::sr_peers); those sent FLUSH with
// rxe's ICRC (DeviceSpec::rxe_flush_peers).
struct SrPeers {
  bool all = false;
  std::vector<wire::IpAddress> addresses;
};
// `all`, or IPv4/IPv6 addresses separated by commas or spaces (UROCE_SR_PEERS, sr_peers=,
// UROCE_RXE_FLUSH_PEERS, rxe_flush_peers=; an empty text is an empty list). An error message names
// the entry that is not an address.
Result<SrPeers, std::string> parse_sr_peers(const std::string& text);

struct DeviceSpec {
  std::string name;
  wire::IpAddress ip;
  std::string faults;  // the config file's faults= (checked when read), "" for none
  // The config file's cc= (UROCE_CC, when set, wins); unset: the DeviceConfig's.
  std::optional<DeviceConfig::CongestionControl> congestion_control;
  // The config file's sr= and sr_peers= (UROCE_SR and UROCE_SR_PEERS, when set, win); unset:
  // the DeviceConfig's.
  std::optional<bool> selective_repeat;
  std::optional<SrPeers> sr_peers;
  // The config file's rxe_flush_peers= (UROCE_RXE_FLUSH_PEERS, when set, wins): peers sent
  // FLUSH with rxe's ICRC (docs/INTEROP.md, "FLUSH and rxe"); unset: none.
  std::optional<SrPeers> rxe_flush_peers;
  // The config file's recovery=0|1 (UROCE_RECOVERY, when set, wins); unset: the DeviceConfig's.
  std::optional<bool> adaptive_recovery;
  // The config file's aead=MODE and psk=HEX (docs/SECURITY.md); unset: off.
  std::optional<seal::Settings> seal;
};

// Parses an IPv4 or IPv6 address in text form; an error message when it is not one.
Result<wire::IpAddress, std::string> parse_ip(const std::string& text);
std::string ip_to_string(const wire::IpAddress& ip);

// Parses a UROCE_DEVICES value or a config file's text. Errors name the offending entry/line.
// A UROCE_DEVICES value must name a device; a file may name none (an empty list).
Result<std::vector<DeviceSpec>, std::string> parse_device_list(const std::string& text);
Result<std::vector<DeviceSpec>, std::string> parse_device_file(const std::string& text,
                                                               const std::string& path);

// One entry of the host's interface list, as getifaddrs(3) gives it (the edge, src/edge, reads
// it): an interface's name and flags with one of its addresses, or with none (an interface
// without an IP address appears once, with `ip` unset).
struct InterfaceAddress {
  std::string name;
  bool up = false;        // IFF_UP: administratively up (carrier not required)
  bool loopback = false;  // IFF_LOOPBACK
  std::optional<wire::IpAddress> ip;
};

// The devices the default list adds after uroce0, one per interface, pure (tests feed it fake
// lists):
//   - skipped: loopback interfaces (uroce0 serves 127.0.0.1), interfaces that are down, and
//     interfaces without a usable address;
//   - the address: the interface's first IPv4 address in the list's (the kernel's) order, else
//     its first IPv6 address that is neither link-local (fe80::/10, which needs a scope) nor
//     multicast; an address an earlier device already has is skipped;
//   - the name: `uroce_<interface>`, each byte outside A-Z a-z 0-9 _ - . replaced by `_`, cut
//     to 63 bytes; a name an earlier device has (only after such a replacement or cut) gets
//     `_2`, `_3`, ... until it is free. Interfaces whose names need no replacement are named
//     first, so each of them always gets exactly `uroce_<interface>`;
//   - the order: by interface name (bytewise), not by index, so that it does not depend on
//     the order in which interfaces were created.
// `taken` names and addresses (uroce0's) are never given out.
std::vector<DeviceSpec> interface_devices(const std::vector<InterfaceAddress>& interfaces,
                                          const std::vector<DeviceSpec>& taken = {});

// Where the device list comes from, as the edge (src/edge) read it from the environment and
// the host: nothing below the edge reads UROCE_DEVICES or UROCE_CONFIG, or lists interfaces.
struct DeviceSource {
  std::optional<std::string> devices;  // UROCE_DEVICES, when set (used when not empty)
  std::string config_path;             // UROCE_CONFIG, when set and not empty
  // The host's interfaces (getifaddrs), read by the edge when no UROCE_DEVICES is set; unset
  // (a DeviceSource built by hand, in tests): the default list is uroce0 alone.
  std::optional<std::vector<InterfaceAddress>> interfaces;
};

// The configured devices (see above) from `source`. An error message for a malformed
// configuration.
Result<std::vector<DeviceSpec>, std::string> configured_devices(const DeviceSource& source);

// DeviceConfig::num_comp_vectors for a device of this host: one per online CPU, as rxe has
// one per CPU (num_possible_cpus()). The drop-in and `uroce devinfo` both report it.
std::uint32_t host_num_comp_vectors();

// What a tool asks for: a device by name (empty: the first configured one), or an address
// (then the device is named `name`, or after its position in the list when it is configured,
// or uroce0).
struct DeviceSelection {
  std::string name;
  std::string ip;
  std::string capture_path;  // empty: UROCE_PCAP, if set
  std::uint16_t port = wire::kRoceV2Port;
  std::uint64_t seed = 0;  // MR keys: 0 from the kernel's CSPRNG, else reproducible
};

// Resolves `sel` against the configuration. Messages say what was wrong and what exists.
Result<DeviceSpec, std::string> resolve_device(const DeviceSelection& sel,
                                               const DeviceSource& source);

}  // namespace uroce::engine

#pragma once
// The knobs of a UdpDevice that a program sets from outside: its environment, read once at the
// edge (src/edge/environment.h, called by src/tools and src/compat) and passed down, or filled
// by a test. Nothing in device/ or below reads the environment (scripts/check-edge). A default
// DeviceOptions is the device with no variable set.

#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "device/device_config.h"
#include "engine/ack_policy.h"
#include "proto/devd_options.h"
#include "seal/aead.h"
#include "uroce/verbs.h"

namespace uroce::engine {

struct DeviceOptions {
  // The UDP datapath's switches (UROCE_UDP_GSO, UROCE_UDP_GRO: 0 or 1; UROCE_UDP_BATCH: 1 to
  // UdpDatapath::kMaxBatch). Unset: datapath::UdpOptions' defaults. GSO asked for by name is
  // trusted on hardware that segments UDP too.
  std::optional<bool> udp_gso;
  std::optional<bool> udp_gro;
  std::optional<std::size_t> udp_batch;
  // UdpDevice::Sharing::kDefault means shared unless this is false (UROCE_SHARED=0).
  bool shared = true;
  // A pcap file of every packet, when open() is given none (UROCE_PCAP; empty: none).
  std::string capture_path;
  // ACK holding and deferral (UROCE_HOLD_ACKS, UROCE_DEFER_ACKS: anything but "0" is on; the
  // hold's length is the policy's default). The defaults are the device's.
  AckPolicyConfig acks;
  // RC loss recovery: adaptive RTO, tail-loss probe, BDP window (UROCE_RECOVERY=0 turns it off:
  // IBTA's ACK timeout and a 128-PSN window only). Unset: the config file's recovery= for the
  // device, else the DeviceConfig's.
  std::optional<bool> adaptive_recovery;
  // A file that gets one counters line per device when it closes or the process exits
  // (UROCE_STATS_FILE; empty: none).
  std::string stats_file;
  // The fault spec: per device (UROCE_FAULTS_<NAME>, keyed by <NAME>: the device's name with
  // every character but letters and digits as '_'), else for every device (UROCE_FAULTS), else
  // the configuration file's faults= for the device.
  std::map<std::string, std::string> device_faults;
  std::optional<std::string> faults;
  // The congestion control of the device's QPs (UROCE_CC=none|dcqcn|aimd|dcqcn-aimd); unset:
  // the config file's cc= for the device, else the DeviceConfig's.
  std::optional<DeviceConfig::CongestionControl> congestion_control;
  // Selective repeat with peers known to be uroce (UROCE_SR=0|1: 0 turns it off everywhere) and
  // the peers known to be uroce without rdma_cm (UROCE_SR_PEERS=all|ADDRESS,...); unset: the
  // config file's sr= and sr_peers= for the device, else the DeviceConfig's.
  std::optional<bool> selective_repeat;
  std::optional<SrPeers> sr_peers;
  // The peers whose FLUSH packets carry the kernel's Soft-RoCE's form of the ICRC
  // (UROCE_RXE_FLUSH_PEERS=all|ADDRESS,...: datapath::UdpOptions::rxe_icrc_peers); unset: the
  // config file's rxe_flush_peers= for the device, else none (the IBTA's ICRC to everyone).
  std::optional<SrPeers> rxe_flush_peers;
  // Authenticated or encrypted packets between uroce peers (docs/SECURITY.md); unset: the config
  // file's aead= and psk= for the device, else off.
  std::optional<seal::Settings> seal;
  // What a shared device's coordinator that this device starts is told (UROCE_DEVD,
  // UROCE_DEVD_LINGER_MS, UROCE_SHARE, UROCE_DEVD_LOG, UROCE_DEVD_PCAP, UROCE_FAULTS,
  // UROCE_CM_LISTEN_GRACE_MS).
  devd::DevdOptions devd;
  // Where the device list, and the config file's faults=, come from (UROCE_DEVICES,
  // UROCE_CONFIG).
  DeviceSource source;
};

// The key of `device_faults` for a device's name.
inline std::string fault_key(const std::string& device_name) {
  std::string key;
  for (char c : device_name) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    key += alnum ? c : '_';
  }
  return key;
}

}  // namespace uroce::engine

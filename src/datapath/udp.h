// datapath/udp: RoCEv2 over an ordinary UDP socket, the default datapath (no root needed).
//
// One socket bound to the device's local address and port 4791 (IPv4 or IPv6). The kernel
// builds the IP and UDP headers; uroce computes the ICRC over the headers the kernel will write
// (roce-facts.md): an unconnected socket with IP_PMTUDISC_DO sends DF=1 and identification 0,
// TOS/TTL/UDP checksum are masked, and the UDP source port is the bound port. Payload is sent
// straight from registered memory (sendmsg with an iovec per piece): no copy on the send side.
//
// On receive the ICRC is verified for every packet; a packet whose ICRC is wrong is dropped and
// counted (bad_icrc). The one header field a UDP socket does not show is the IPv4
// identification: uroce's senders use 0; a nonzero one (rxe's) is recovered from the ICRC
// itself, which still rejects a corrupted packet with probability 1 - 2^-16 (counted as
// rx_icrc_id_recovered).
//
// Not thread-safe: one engine thread owns a UdpDatapath.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "datapath/datapath.h"
#include "wire/builder.h"
#include "wire/ip.h"
#include "wire/packet.h"

namespace uroce::datapath {

struct UdpOptions {
  wire::IpAddress local;
  std::uint16_t port = wire::kRoceV2Port;
};

// What the receiver knows of a datagram's outer headers.
struct RxMeta {
  wire::IpAddress src;
  std::uint16_t src_port = 0;
  std::uint8_t tos = 0;  // IPv4 TOS / IPv6 traffic class (DSCP and ECN)
  std::uint8_t ttl = 0;
  bool icrc_verified = false;
  ConstBytes ip_header;  // reconstructed (20 or 40 bytes), for a UD receive's GRH area;
                         // valid during the handler call only
};

struct UdpCounters {
  std::uint64_t tx_packets = 0;
  std::uint64_t tx_bytes = 0;
  std::uint64_t tx_errors = 0;  // sendmsg failures other than EAGAIN
  std::uint64_t rx_packets = 0;
  std::uint64_t rx_bytes = 0;
  // IPv4 packets from senders with a nonzero identification (rxe), accepted because their ICRC
  // is valid for some identification (a 16-bit check instead of 32).
  std::uint64_t rx_icrc_id_recovered = 0;
  std::array<std::uint64_t, wire::kDropReasonCount> rx_drops{};
};

// The MTU of the network interface that holds `local` (SIOCGIFMTU), or an error message when no
// interface has that address.
Result<std::uint32_t, std::string> interface_mtu(const wire::IpAddress& local);

class UdpDatapath final : public Datapath {
 public:
  static constexpr std::size_t kMaxPieces = 64;  // payload pieces per packet (SGEs)
  // A clear message on failure (address not local, port in use, ...).
  static Result<std::unique_ptr<UdpDatapath>, std::string> open(const UdpOptions& options);
  ~UdpDatapath() override;
  UdpDatapath(const UdpDatapath&) = delete;
  UdpDatapath& operator=(const UdpDatapath&) = delete;

  int fd() const { return fd_; }
  std::uint16_t port() const { return port_; }
  const UdpCounters& counters() const { return counters_; }

  bool send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
            std::span<const ConstBytes> payload) override;

  // Capture: every packet sent and received, as the Ethernet frame it was (reconstructed: the
  // kernel builds the real headers; MACs are 02:00 followed by the IPv4 address or the last 4
  // bytes of the IPv6 one; a received IPv4 packet shows the identification recovered from its
  // ICRC).
  using FrameTap = std::function<void(ConstBytes frame, bool sent)>;
  void set_tap(FrameTap tap) { tap_ = std::move(tap); }

  using RxHandler = std::function<void(const wire::RocePacket&, const RxMeta&)>;
  // Receives what is waiting, up to `max` datagrams, without blocking. Returns how many were
  // read (valid or not).
  std::size_t receive(std::size_t max, const RxHandler& handler);

 private:
  UdpDatapath(int fd, const wire::IpAddress& local, std::uint16_t port);
  // The outer headers the kernel puts on a datagram (ICRC input; with an Ethernet header,
  // the capture's frame).
  static wire::OuterHeaders outer(const wire::IpAddress& src, const wire::IpAddress& dst,
                                  std::uint16_t sport, std::uint16_t dport, std::uint8_t tos,
                                  std::uint8_t ttl);

  int fd_;
  wire::IpAddress local_;
  std::uint16_t port_;
  UdpCounters counters_;
  FrameTap tap_;
  std::vector<std::byte> tap_buf_;
  std::array<std::byte, 65536> rx_buf_;
};

}  // namespace uroce::datapath

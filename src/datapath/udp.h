// datapath/udp: RoCEv2 over an ordinary UDP socket, the default datapath (no root needed).
//
// One socket bound to the device's local address and port 4791 (IPv4 or IPv6). The kernel
// builds the IP and UDP headers; uroce computes the ICRC over the headers the kernel will write
// (roce-facts.md): an unconnected socket with IP_PMTUDISC_DO sends DF=1 and identification 0,
// TOS/TTL/UDP checksum are masked, and the UDP source port is the bound port. send() copies
// each packet whole (headers, payload, pad) into the staging ring, where consecutive packets lie
// one after the other, the copy fused with the ICRC's CRC, which reads the payload anyway (a small
// packet, at most kInlinePayload payload bytes, is copied and then CRC'd in one call over all its
// bytes). So a packet leaves with exactly the bytes its ICRC covers
// (what a READ response needs, whose payload is the responder's memory that its application may
// rewrite at any time: tx_snapshots counts them), it keeps its bytes while it waits for room in
// the socket, a capture tap sees those bytes, and a GSO datagram goes to the kernel as one iovec
// (which the kernel copies up to 1.5x faster than three per packet: docs/PERFORMANCE.md).
//
// Batching. send() queues the packet and flush() hands the queue to the kernel in one sendmmsg
// call. Runs of consecutive packets to the same destination with the same TOS whose sizes are equal
// (the last may be shorter), such as RDMA WRITE Middle packets, go out as one UDP GSO datagram
// (UDP_SEGMENT): the kernel, or the NIC, cuts it into the packets. With an unconnected socket and
// DF the first segment carries identification 0 and the kernel's software segmentation numbers the
// others 1, 2, ... (inet_gso_segment for SKB_GSO_UDP_L4 is not fixed-id); each segment's ICRC is
// computed for the id it will carry (wire::Ipv4IdIcrcDelta) and stored behind the packet when it is
// handed over. When the socket has no room (EAGAIN), the unsent packets go first at the next send()
// or flush(): nothing is lost or sent twice.
//
// On receive, recvmmsg reads a batch of datagrams into a ring of buffers; with UDP_GRO the kernel
// may coalesce consecutive packets of one flow into one buffer, which is split by the gso_size it
// reports. The ICRC is verified for every packet, before its headers are parsed; a packet whose
// ICRC is wrong is dropped and counted (bad_icrc), whichever of its bits are wrong. Except with
// set_deferred_icrc (the engine's mode, issue 14): a message continuation that parses reaches the
// handler unverified, which checks it in the pass that places its payload; and with
// set_accept_sealed, a sealed RC or UC packet, whose AEAD tag makes the check unneeded unless the
// tag fails (seal/sealed_datapath.h). The one header
// field a UDP socket does not show is the IPv4 identification: a packet whose ICRC does not match
// with identification 0 (uroce's GSO segments, rxe's packets) has its identification recovered from
// the ICRC itself, which still rejects a corrupted packet with probability 1 - 2^-16 (counted as
// rx_icrc_id_recovered). The DF flag is not shown either: a packet whose ICRC fits no
// identification with DF set is tried with DF clear (as a socket with IP_PMTUDISC_DONT sends),
// again solving for the identification (counted as rx_icrc_df_clear; with both tries a corrupted
// packet passes with probability 2^-15). A UD receive's GRH area shows the header so recovered
// (identification, DF).
//
// Switches: UdpOptions (gso, gro, tx_batch: packets queued before the datapath flushes by
// itself; 1 sends each packet at once, as an unbatched datapath). A device fills them from its
// DeviceOptions, which the edge reads from UROCE_UDP_GSO=0|1, UROCE_UDP_GRO=0|1 and
// UROCE_UDP_BATCH=N. IPv4 GSO stays off where the NIC segments UDP in hardware (its
// identifications could not be checked) unless gso_on_hardware asks for it (UROCE_UDP_GSO=1).
//
// Faults (set_faults, fault/fault.h): a FaultStage on transmit, between send() and the socket, and
// one on receive, between the socket and the ICRC check, so that what a rule corrupts on either
// side is caught as a bad ICRC. A packet that no rule matches goes its way untouched; one that a
// rule holds back (delay, reordering, the rate limit's queue) leaves the stage when due, from
// flush(now) on transmit and receive(now, ...) on receive, and next_deadline() says when that is.
// A transmitted packet that a rule matches is built whole (headers, payload, pad, ICRC) and sent
// as it comes out of the stage, without GSO.
//
// Not thread-safe: one engine thread owns a UdpDatapath.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/result.h"
#include "datapath/datapath.h"
#include "fault/fault.h"
#include "wire/builder.h"
#include "wire/icrc.h"
#include "wire/ip.h"
#include "wire/packet.h"

namespace uroce::datapath {

struct UdpOptions {
  UdpOptions() = default;
  UdpOptions(const wire::IpAddress& address, std::uint16_t udp_port = wire::kRoceV2Port)
      : local(address), port(udp_port) {}
  wire::IpAddress local;
  std::uint16_t port = wire::kRoceV2Port;  // 0: one the kernel picks (not with bound_fd)
  bool gso = true;                         // UDP_SEGMENT for runs of equal-size packets
  bool gro = true;                         // UDP_GRO on receive
  std::size_t tx_batch = 64;               // packets queued before flushing by itself
  std::size_t rx_batch = 16;               // datagrams per recvmmsg call (each buffer is 64 KiB)
  // Socket receive buffer: the kernel's default (about 208 KiB) overflows under a window of
  // 128 packets of 4 KiB from several QPs, and each loss costs a retransmission timeout. Root
  // gets it whole (SO_RCVBUFFORCE); others get up to net.core.rmem_max. 0: the default.
  std::size_t rcvbuf_bytes = 16u << 20;
  // IPv4 GSO stays off where the interface segments UDP in hardware (its identifications are
  // unverified) unless this is set.
  bool gso_on_hardware = false;
  // A socket already bound to local:port (a shared device's, from its coordinator; IPv6 ones
  // with IPV6_V6ONLY set): the datapath sets its options and owns it from open() on, failed
  // opens included. -1: the datapath creates and binds its own.
  int bound_fd = -1;
  // The socket's own IPv4 TOS / IPv6 traffic class (IP_TOS / IPV6_TCLASS, set once): a packet
  // whose TOS differs is sent with a control message that says its own. The device sets ECT(0)
  // here when its congestion control marks every packet ECN-capable, so that those packets need
  // no per-packet control message (about 3% of a loopback round trip). Every process of a
  // shared device has a socket of its own in the group: the value is never another's.
  std::uint8_t default_tos = 0;
  // IP_RECVERR (IPV6_RECVERR): the ICMP errors that sent datagrams draw (port unreachable: no
  // socket at the destination's address and port) queue on the socket, for receive_errors().
  // Such an error also fails the socket's next send once, which then sends again. A socket of a
  // shared device's group does not want this: the kernel hands an ICMP error to a member of the
  // group chosen by the addresses' hash, not to the one that sent the datagram.
  bool recv_errors = false;
  // Peers that compute a FLUSH's ICRC as the kernel's Soft-RoCE does (wire::icrc_rxe_continue;
  // docs/INTEROP.md, "FLUSH and rxe"): FLUSH packets to one of `rxe_icrc_peers`, or to any peer
  // with rxe_icrc_all_peers, carry rxe's ICRC, which rxe checks, instead of the IBTA's, which it
  // drops. Every other opcode, and every other peer, keeps the IBTA's. Receiving needs no
  // setting: a FLUSH is accepted with either ICRC from anyone (counted in rx_rxe_flush_icrc).
  bool rxe_icrc_all_peers = false;
  std::vector<wire::IpAddress> rxe_icrc_peers;
  // Test seam: replaces sendmmsg(2) (same arguments and result, errno on failure), to inject
  // backpressure. Empty: the system call.
  std::function<int(int fd, mmsghdr* msgvec, unsigned vlen)> sendmmsg_hook;
};

struct UdpCounters {
  std::uint64_t tx_packets = 0;
  std::uint64_t tx_bytes = 0;
  std::uint64_t tx_errors = 0;         // packets lost to send failures other than EAGAIN
  std::uint64_t tx_calls = 0;          // sendmmsg calls that sent something
  std::uint64_t tx_datagrams = 0;      // datagrams handed to the kernel (a GSO run is one)
  std::uint64_t tx_gso_datagrams = 0;  // of which GSO datagrams (two or more packets)
  std::uint64_t tx_gso_packets = 0;    // packets sent inside GSO datagrams
  std::uint64_t tx_blocked = 0;        // flushes that stopped on EAGAIN/ENOBUFS
  std::uint64_t tx_snapshots = 0;      // READ responses whose payload was copied at send()
  std::uint64_t tx_gso_fallbacks = 0;  // GSO sends the kernel refused: GSO switched off
  std::uint64_t rx_packets = 0;
  std::uint64_t rx_bytes = 0;
  // IPv4 packets with a nonzero identification (uroce's GSO segments, rxe's packets), accepted
  // because their ICRC is valid for some identification (a 16-bit check instead of 32).
  std::uint64_t rx_icrc_id_recovered = 0;
  // IPv4 packets sent with DF clear (a sender with IP_PMTUDISC_DONT; its kernel picks the
  // identification), accepted because their ICRC is valid for DF=0 and some identification.
  std::uint64_t rx_icrc_df_clear = 0;
  // FLUSH packets accepted with rxe's ICRC (wire::icrc_rxe_continue: the kernel's Soft-RoCE
  // sends no other), and FLUSH packets given it for a peer of UdpOptions::rxe_icrc_peers.
  std::uint64_t rx_rxe_flush_icrc = 0;
  std::uint64_t tx_rxe_flush_icrc = 0;
  std::uint64_t rx_calls = 0;          // recvmmsg calls that returned datagrams
  std::uint64_t rx_datagrams = 0;      // datagrams (buffers) read
  std::uint64_t rx_gro_datagrams = 0;  // of which coalesced by GRO (two or more packets)
  std::uint64_t rx_gro_packets = 0;    // packets split out of them
  std::array<std::uint64_t, wire::kDropReasonCount> rx_drops{};
  // UdpOptions::recv_errors: ICMP port unreachables read from the error queue, other errors
  // read there, and sends that failed on an earlier datagram's error and went again.
  std::uint64_t rx_port_unreachable = 0;
  std::uint64_t rx_other_errors = 0;
  std::uint64_t tx_error_retries = 0;
};

// An error the kernel queued for a datagram this socket sent (UdpOptions::recv_errors).
struct SendError {
  wire::IpAddress dst;  // the datagram's destination
  std::uint16_t dst_port = 0;
  // An ICMP (or ICMPv6) port unreachable: nothing listens at dst:dst_port.
  bool port_unreachable = false;
};

// `ip`:`port` as a socket address.
// A socket for a shared device's SO_REUSEPORT group: UDP, nonblocking, close-on-exec,
// SO_REUSEPORT (IPV6_V6ONLY for IPv6), bound to ip:port. The fd, or -errno. The device
// (src/device/shared_port.cc) makes the group's first one, the sink, and hands it to the
// coordinator (src/devd).
int make_group_socket(const wire::IpAddress& ip, std::uint16_t port);

void to_sockaddr(const wire::IpAddress& ip, std::uint16_t port, sockaddr_storage& ss,
                 socklen_t& len);

// The MTU of the network interface that holds `local` (SIOCGIFMTU), or an error message when no
// interface has that address.
Result<std::uint32_t, Error> interface_mtu(const wire::IpAddress& local);
// The speed in Mb/s of the network interface that holds `local`, for the port's active width
// and speed (link_rate_for_eth_speed in <uroce/verbs.h>): the kernel's
// (/sys/class/net/NAME/speed, what ethtool shows) when it knows one. A loopback interface has
// none; there uroce moves data at memory-copy speed, measured at 26-33 Gb/s for 64 KiB RDMA
// WRITEs (docs/PERFORMANCE.md), so it reads as 25000 (1X EDR). Any other interface without one
// (some virtual NICs): 0, unknown.
std::uint32_t interface_speed_mbps(const wire::IpAddress& local);
// The name of the network interface that holds `local` (any 127/8 address: lo).
Result<std::string, Error> interface_name(const wire::IpAddress& local);
// Whether `ifname` has tx-udp-segmentation on (ethtool's feature), if that can be read.
std::optional<bool> udp_segmentation_feature(const std::string& ifname);
// True when `ifname` is backed by a device (/sys/class/net/NAME/device) with
// tx-udp-segmentation on: the NIC, not the kernel, cuts GSO datagrams into packets.
bool hardware_udp_segmentation(const std::string& ifname);

class UdpDatapath final : public Datapath {
 public:
  static constexpr std::size_t kMaxHeaderBytes = 64;  // transport headers (BTH on) per packet
  // A packet with at most this many payload bytes is copied whole and then CRC'd in one call
  // (an ACK, a short message); a larger one's payload by the fused copy-and-CRC kernel.
  static constexpr std::size_t kInlinePayload = 64;
  static constexpr std::size_t kMaxBatch = 256;  // tx_batch and rx_batch are capped here
  // Packets in one GSO datagram: below the kernel's UDP_MAX_SEGMENTS (64 or 128 by version),
  // and the ids a receiver tries (Ipv4IdIcrcDelta::find) stay below 128.
  static constexpr std::size_t kMaxGsoSegments = 64;
  // Every packet is copied at send() into the staging ring, so that the packets of a GSO
  // datagram lie one after the other and leave as one iovec. A packet with more than
  // kStagePayload (no path MTU carries that much, and no receiver takes it) is lost, counted in
  // tx_errors.
  // A sealed packet (BTH TVer not 0: seal/sealed_datapath.h) may carry its trailer on top.
  static constexpr std::size_t kStagePayload = wire::kMaxPayloadBytes;
  static constexpr std::size_t kStagePacket =
      kMaxHeaderBytes + kStagePayload + wire::kSealTrailerBytes + 8;
  // A clear message on failure (address not local, port in use, ...).
  static Result<std::unique_ptr<UdpDatapath>, Error> open(const UdpOptions& options);
  ~UdpDatapath() override;
  UdpDatapath(const UdpDatapath&) = delete;
  UdpDatapath& operator=(const UdpDatapath&) = delete;

  int fd() const { return fd_; }
  // The bound port (the kernel's choice when UdpOptions::port was 0).
  std::uint16_t port() const { return port_; }
  const UdpCounters& counters() const { return counters_; }
  // What is in effect (the options and what the kernel supports).
  bool gso() const { return gso_; }
  bool gro() const { return gro_; }
  std::size_t tx_batch() const { return tx_batch_; }
  // Why GSO is on or off ("on", "off", or the reason it was switched off at open).
  const std::string& gso_note() const { return gso_note_; }

  // Queues the packet; flushes by itself when tx_batch packets are queued. Returns false only
  // when the queue is full and the socket has no room.
  bool send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
            std::span<const ConstBytes> payload) override;
  // The body written straight into the staging ring, the ICRC computed over it as written.
  // nullopt (the caller builds the packet and calls send()) while faults are set.
  std::optional<bool> send_built(Instant now, const wire::OuterHeaders& o,
                                 ConstBytes transport_headers, std::size_t body_bytes,
                                 BodyWriter& writer) override;
  void flush(Instant now) override;
  bool tx_queued() const override { return queued_ != 0; }
  std::size_t queued() const { return queued_; }

  // Capture: every packet sent and received, as the Ethernet frame it was (reconstructed: the
  // kernel builds the real headers; MACs are 02:00 followed by the IPv4 address or the last 4
  // bytes of the IPv6 one; a received IPv4 packet shows the identification recovered from its
  // ICRC; a sent GSO segment the identification the kernel gives it).
  using FrameTap = std::function<void(ConstBytes frame, bool sent)>;
  void set_tap(FrameTap tap) { tap_ = std::move(tap); }

  // One pass over the payload on receive (issue 14): the ICRC of a packet that
  // wire::icrc_deferrable() allows and that parses is left to the handler (RxMeta::pending),
  // with the same identification and DF recovery as here (counted the same). Off by default:
  // only a handler that checks it may turn it on. Not while a tap is set (a capture shows
  // received packets as verified).
  void set_deferred_icrc(bool on) { defer_icrc_ = on; }
  // RxMeta::ip_header only for UD packets (the only ones whose receive reads it, for the GRH
  // area) and with a tap set: a packet's ICRC does not need its IP header written (issue 14).
  // Off by default: every verified packet shows it.
  void set_ip_header_for_ud_only(bool on) { ip_header_ud_only_ = on; }
  // Sealed packets (wire/packet.h) reach the handler, which must open them
  // (seal::SealedDatapath); off by default: they are dropped as bad_tver. Unless a tap is set,
  // a sealed RC or UC packet that parses reaches it with its ICRC unchecked (RxMeta::pending):
  // its tag covers the same bytes, and the handler checks the ICRC only when the tag fails
  // (a failed check is counted here, as bad_icrc).
  void set_accept_sealed(bool on) { accept_sealed_ = on; }

  // Faults from `spec` from now on (an empty spec: none); `start` is the origin of its
  // partition windows. The receive stage draws from the spec's seed mixed with a constant, so
  // the two directions' choices are independent and both follow from the one seed.
  void set_faults(const fault::FaultSpec& spec, Instant start);
  bool has_faults() const { return tx_faults_ != nullptr; }
  // The spec in effect (empty when none).
  const fault::FaultSpec& fault_spec() const;
  // The stage's counters of direction `d` (zero when there are no faults).
  fault::StageCounters fault_counters(fault::Direction d) const;
  // Every fault injected, as it is: for a capture's companion log.
  using FaultEventSink = std::function<void(const fault::FaultEvent&)>;
  void set_fault_events(FaultEventSink sink) { fault_events_ = std::move(sink); }
  // When a held packet is next due (Instant::never() without one).
  Instant next_deadline() const override;

  // Receives what is waiting, up to `max` datagrams, without blocking. Returns how many packets
  // were read (valid or not; a GRO datagram holds several).
  std::size_t receive(std::size_t max, const RxHandler& handler) {
    return receive(rx_now_, max, handler);
  }
  // The same at `now`: received packets that the receive stage holds leave it when due, before
  // the socket is read (counted in the result too).
  std::size_t receive(Instant now, std::size_t max, const RxHandler& handler) override;
  // UdpOptions::recv_errors: reads up to `max` errors from the socket's error queue, without
  // blocking (poll shows a waiting one as POLLERR); how many.
  std::size_t receive_errors(std::size_t max, const std::function<void(const SendError&)>& handler);

 private:
  struct TxSlot;
  struct RxRing;
  struct TxScratch;
  UdpDatapath(int fd, const UdpOptions& options);
  static Result<std::unique_ptr<UdpDatapath>, Error> open_socket(const UdpOptions& options);
  // The outer headers the kernel puts on a datagram (ICRC input; with an Ethernet header,
  // the capture's frame).
  static wire::OuterHeaders outer(const wire::IpAddress& src, const wire::IpAddress& dst,
                                  std::uint16_t sport, std::uint16_t dport, std::uint8_t tos,
                                  std::uint8_t ttl);

  // Sends queued packets until the queue is empty or the socket is full.
  void drain();
  // How many queued packets from `first` can go in one GSO datagram.
  std::size_t run_length(std::size_t first, std::size_t available) const;
  // The staging ring's write position, the ring started over first when no packet is queued:
  // a raw packet's stage_off (it does not use the ring), and stage()'s starting point.
  std::uint32_t stage_mark();
  // `n` (at most kStagePacket) contiguous bytes of the staging ring for the packet being queued,
  // at `off`; null never (the ring holds tx_batch of the largest packets and one more, and a
  // packet's bytes are free once the kernel has taken it: tests/datapath/udp_test.cc).
  std::byte* stage(std::size_t n, std::uint32_t& off);
  // A queued packet's bytes, BTH through ICRC.
  std::byte* tx_bytes(TxSlot& t);
  void tap_sent(TxSlot& slot, std::uint16_t ipv4_id);
  void handle_packet(ConstBytes roce, const RxMeta& base, const RxHandler& handler);
  // handle_packet after the receive stage (which may take the packet).
  void receive_packet(ConstBytes roce, const RxMeta& base, const RxHandler& handler);
  // Queues a packet built whole (BTH to ICRC) as one datagram: the transmit stage's output.
  bool queue_raw(const fault::PacketInfo& info, ConstBytes roce);
  // Moves the transmit stage's due packets to the queue (false: the queue is full).
  bool release_tx_faults(Instant now);
  // Hands the receive stage's due packets to handle_packet; how many.
  std::size_t release_rx_faults(Instant now, const RxHandler& handler);
  void drain_fault_events();
  Instant fault_clock(Instant now);
  const wire::Ipv4IdIcrcDelta& id_delta(std::size_t roce_bytes);
  // What the outer headers of a packet of `roce_bytes` (BTH through ICRC) between this socket
  // and `peer`:`peer_port`, sent (`sent`) or received, owe its ICRC with identification 0 and DF
  // set (wire::icrc_outer_state): kept for the last few peers and lengths, so that a packet's
  // ICRC does not write and read its IP and UDP headers again.
  std::uint32_t outer_icrc(bool sent, const wire::IpAddress& peer, std::uint16_t peer_port,
                           std::size_t roce_bytes);
  // Whether an IPv4 identification (DF set) or, failing that, DF clear and an identification
  // explains `delta` (the stored ICRC ^ the one computed with identification 0, DF set) for a
  // packet of `roce_bytes`; counts which, and writes it into `h` when given. `likely_id` (the
  // packet's RxMeta::gro_index) is tried first: an identification that explains `delta` is the
  // only one that does, so trying one first accepts no packet the solve would not.
  bool explain_icrc(std::size_t roce_bytes, std::uint32_t delta, std::uint16_t likely_id,
                    wire::OuterHeaders* h);
  // The ICRC check of a packet (BTH through ICRC) checked here, not deferred: the IBTA's with
  // identification 0 and DF set, else with an identification and DF that explain_icrc finds,
  // else, for an opcode with wire::kFlagRxeIcrc (RC FLUSH), rxe's form the same two ways
  // (counted in rx_rxe_flush_icrc). `found` gets the identification and DF (when not 0 and set).
  bool verify_icrc(ConstBytes roce, std::uint32_t outer_state, std::uint16_t likely_id,
                   wire::OuterHeaders& found);
  // The opcode of a packet to `dst` that leaves with rxe's ICRC (UdpOptions::rxe_icrc_peers),
  // else null.
  const wire::OpcodeInfo* rxe_icrc_for(const wire::IpAddress& dst,
                                       ConstBytes transport_headers) const;
  // The same, as the check of a deferred ICRC (RxMeta::pending).
  struct DeferredCheck final : wire::IcrcCheck {
    UdpDatapath* dp = nullptr;
    std::uint16_t likely_id = 0;
    bool accepts(std::size_t roce_bytes, std::uint32_t computed, std::uint32_t stored) override {
      return dp->explain_icrc(roce_bytes, computed ^ stored, likely_id, nullptr);
    }
  };

  int fd_;
  std::uint8_t socket_tos_;  // UdpOptions::default_tos, set on the socket
  wire::IpAddress local_;
  std::uint16_t port_;
  bool gso_;
  std::string gso_note_;
  bool gro_;
  std::size_t tx_batch_;
  std::size_t rx_batch_;
  std::function<int(int, mmsghdr*, unsigned)> sendmmsg_hook_;
  bool recv_errors_;  // UdpOptions::recv_errors
  UdpCounters counters_;
  FrameTap tap_;
  std::vector<std::byte> tap_buf_;
  // The transmit queue: a ring of tx_batch slots, queued_ of them in use from head_.
  std::vector<TxSlot> slots_;
  std::size_t head_ = 0;
  std::size_t queued_ = 0;
  std::unique_ptr<TxScratch> tx_scratch_;
  // The staging ring: queued packets' bytes in queue order, from the head slot's stage_off to
  // stage_w_ (wrapping at most once; reset when the queue is empty).
  std::vector<std::byte> stage_;
  std::size_t stage_w_ = 0;
  std::unique_ptr<RxRing> rx_;
  // The ICRC deltas of the last few packet lengths seen (full-size packets, short last ones;
  // a table costs about a microsecond to compute).
  std::array<std::optional<wire::Ipv4IdIcrcDelta>, 4> deltas_;
  std::size_t next_delta_ = 0;
  struct OuterIcrc {
    // The length, the peer's port and the direction in one word (outer_icrc_key), compared
    // before the address; 0: unused (no packet is that short).
    std::uint64_t key = 0;
    wire::IpAddress peer;
    std::uint32_t state = 0;
  };
  static std::uint64_t outer_icrc_key(bool sent, std::uint16_t peer_port, std::size_t roce_bytes) {
    return (std::uint64_t{roce_bytes} << 17) | (std::uint64_t{peer_port} << 1) | (sent ? 1 : 0);
  }
  std::array<OuterIcrc, 8> outer_icrc_{};
  std::size_t next_outer_icrc_ = 0;
  std::size_t last_outer_icrc_ = 0;  // the entry found last: looked at first
  // Faults: the two stages (both or neither), a packet being built or released, the time of
  // the last receive(now, ...).
  std::unique_ptr<fault::FaultStage> tx_faults_;
  std::unique_ptr<fault::FaultStage> rx_faults_;
  std::vector<std::byte> fault_build_;
  fault::FaultStage::Out fault_out_;
  fault::FaultStage::Out fault_out_rx_;
  bool fault_out_pending_ = false;  // fault_out_ holds a transmit packet the queue had no room for
  FaultEventSink fault_events_;
  Instant rx_now_{};
  Instant fault_now_{};  // the latest time the stages have seen
  bool defer_icrc_ = false;
  bool ip_header_ud_only_ = false;
  bool accept_sealed_ = false;
  bool rxe_icrc_all_peers_;
  std::vector<wire::IpAddress> rxe_icrc_peers_;
  DeferredCheck deferred_check_;
};

}  // namespace uroce::datapath

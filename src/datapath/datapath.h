// The datapath interface: the only code that makes system calls on the packet path lives behind
// it (datapath/udp, and later raw sockets and AF_XDP); the simulator has one too. It depends on
// base, wire and fault only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "base/bytes.h"
#include "base/time.h"
#include "wire/builder.h"
#include "wire/icrc.h"
#include "wire/ip.h"
#include "wire/packet.h"

namespace uroce::datapath {

// What the receiver knows of a packet's outer headers (its IP and UDP headers, which the
// datapath has read or reconstructed).
struct RxMeta {
  wire::IpAddress src;
  std::uint16_t src_port = 0;
  std::uint8_t tos = 0;  // IPv4 TOS / IPv6 traffic class (DSCP and ECN)
  std::uint8_t ttl = 0;
  bool icrc_verified = false;
  // The packet's place in the GRO buffer it came in (0 for a datagram of its own). A uroce
  // sender's GSO segment k carries IPv4 identification k, which a UDP socket does not show: the
  // ICRC check tries it before solving for any identification (the same packets pass either way).
  std::uint16_t gro_index = 0;
  // With set_deferred_icrc(true): a packet whose ICRC is not checked yet (icrc_verified false),
  // for the handler to check, in the same pass as it places the payload, before anything else
  // reads the packet (engine::Engine::handle_rx does). Null otherwise. Valid during the handler
  // call only, which must finish() it. With a sealing handler (UdpDatapath::set_accept_sealed)
  // also a sealed RC or UC packet, whose AEAD tag covers every byte its ICRC does but the outer
  // headers': the handler (seal::SealedDatapath) skip()s the check once the tag verified and
  // finish()es it only to tell a corrupted packet from a forged one (docs/SECURITY.md).
  wire::PendingIcrc* pending = nullptr;
  ConstBytes ip_header;  // reconstructed (20 or 40 bytes), for a UD receive's GRH area;
                         // valid during the handler call only (set_ip_header_for_ud_only)
  // False for a packet a sealing datapath (seal::SealedDatapath) took without a tag that
  // verified, a plain one under aead=authenticate or encrypt: anyone may have sent it, so source
  // pinning must not learn the peer's port from it (transport::PacketInfo::may_teach_port).
  bool may_teach_port = true;
};

// Writes the body of a packet in place, for Datapath::send_built().
class BodyWriter {
 public:
  virtual ~BodyWriter() = default;
  // Fills all of `body`; false when it cannot (the packet is then not sent).
  virtual bool write(MutBytes body) = 0;
};

// A network interface as the engine sees it: packets go out through send() and flush(), and
// come in through receive(), which hands each to a handler (the engine's) in the caller's
// thread. The real device's datapath is datapath/udp; each simulator has its own, over its
// simulated network (sim/cluster.cc, sim/progress_sim.cc). All three are driven by the same
// engine::Engine::round.
class Datapath {
 public:
  using RxHandler = std::function<void(const wire::RocePacket&, const RxMeta&)>;

  virtual ~Datapath() = default;
  // Hands up to `max` received datagrams (or simulated frames) that wait now to `handler`, one
  // packet at a time, without blocking; packets a fault stage holds back that fall due by `now`
  // go first. A packet that fails a check the datapath makes (the ICRC, unless deferred to the
  // handler through RxMeta::pending; the headers) is dropped and counted here and never reaches
  // the handler. Returns how many packets were read, valid or not.
  virtual std::size_t receive(Instant now, std::size_t max, const RxHandler& handler) = 0;
  // Transmits one packet: `o` says where to (the datapath fills in what it owns, such as
  // MAC addresses), `transport_headers` is BTH plus extension headers (copied), `payload` is
  // gathered from registered memory. The datapath adds pad and ICRC. A datapath may queue the
  // packet and read `payload` later, up to the next flush(): the caller keeps that memory as it
  // is until then. Except READ responses: their payload is the responder's registered memory,
  // which its application may rewrite at any moment, so a datapath must read it once and send
  // the bytes its ICRC covers (datapath/udp copies it at send()). Returns false when it has no
  // room now (the caller retries later).
  virtual bool send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
                    std::span<const ConstBytes> payload) = 0;
  // send() of a packet whose body (everything between the transport headers and the ICRC: the
  // payload, its pad, a sealed packet's trailer; `body_bytes`, a multiple of 4) `writer` writes
  // straight into the datapath's own buffer for the packet: a sealing datapath encrypts into the
  // UDP datapath's staging ring in one pass instead of into a buffer of its own that send()
  // copies again (issue 44). The datapath computes the ICRC over the bytes written. Returns as
  // send() does; when `writer` fails, nothing is sent and the result is true (the caller counts
  // it). nullopt, without calling `writer`, from a datapath that has no such buffer (the
  // default): the caller then builds the packet itself and calls send().
  virtual std::optional<bool> send_built(Instant /*now*/, const wire::OuterHeaders& /*o*/,
                                         ConstBytes /*transport_headers*/,
                                         std::size_t /*body_bytes*/, BodyWriter& /*writer*/) {
    return std::nullopt;
  }
  // Puts queued packets on the wire. Afterwards no queued packet refers to the caller's memory
  // any more: what the network cannot take now (backpressure) the datapath has copied and
  // sends on a later send() or flush(). The engine calls it at the end of every flush_tx.
  virtual void flush(Instant /*now*/) {}
  // True while packets wait in the datapath for room on the network (see flush()).
  virtual bool tx_queued() const { return false; }
  // When the datapath next has something to do by itself (a packet its fault stage holds back
  // falls due): the engine's next timeout includes it, and its flush(now) and receive at that
  // time do it. Instant::never() when nothing waits.
  virtual Instant next_deadline() const { return Instant::never(); }
};

}  // namespace uroce::datapath

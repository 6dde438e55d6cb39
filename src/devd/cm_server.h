// The device's connection manager, in its coordinator (uroce-devd): the IB CM (cm/cm.h) on QP 1,
// and rdma_cm's IDs, addresses and port spaces for the drop-in librdmacm's event channels
// (devd_cm_protocol.h). This is what the kernel's cm.c, cma.c and ucma.c are for a kernel
// device, in one place: every process of the device reaches it, so listeners in different
// processes each get their own connections, and when a process goes its IDs are torn down as the
// kernel does when the rdma_cm file is closed.
//
// QP 1 is the group's sink socket (index 0, where the steering program sends DestQP 1 and every
// QPN no context owns): CmServer reads it, hands CM MADs to the CM and counts the rest
// (`unsteered`). It sends the CM's MADs, UD SEND Only packets from QP 1 to QP 1 with Q_Key
// 0x80010000, from a socket of their own (the MAD socket: the device's address, a port the
// kernel picks, as RoCEv2 source ports are any), outside the group, with IP_RECVERR: when a
// peer's host answers a MAD with an ICMP port unreachable, nothing listens at its port 4791, its
// coordinator has gone, and the CM ends what it still retransmits there at once
// (cm::CmEndpoint::handle_peer_unreachable) instead of retrying into the void for a minute.
// The kernel gives a group's ICMP errors to the member the addresses hash to, so the sink could
// not count on getting them.
//
// Single-threaded: the coordinator's loop calls it when its fds are readable or writable or its
// deadline has come; it never blocks. What a client's socket does not take waits in a queue of
// its own (its commands are not read meanwhile); a listener's CONNECT_REQUESTs in that queue are
// bounded by its listen's backlog, and REQs past it are dropped for the peer to retransmit, as the
// kernel's ucma does. Only a client whose queue outgrows kMaxQueued, or whose socket fails, is
// dropped.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "base/source_budget.h"
#include "base/time.h"
#include "capture/pcap_file.h"
#include "cm/cm.h"
#include "datapath/udp.h"
#include "devd/cm_keys.h"
#include "proto/devd_cm_protocol.h"
#include "proto/devd_protocol.h"
#include "transport/closed_qps.h"
#include "wire/cm_mad.h"
#include "wire/ip.h"

namespace uroce::engine {

struct CmServerCounters {
  std::uint64_t rx_mads = 0;    // CM MADs handed to the CM
  std::uint64_t rx_not_cm = 0;  // QP 1 packets that are not CM MADs (other classes, sizes)
  std::uint64_t rx_bad = 0;     // QP 1 packets with a bad ICRC, opcode or Q_Key
  std::uint64_t unsteered = 0;  // packets for a QPN nobody owns
  std::uint64_t tx_mads = 0;
  std::uint64_t tx_failed = 0;          // MADs the socket did not take
  std::uint64_t client_drops = 0;       // clients dropped (closed, or not reading their events)
  std::uint64_t req_backlog_drops = 0;  // REQs dropped: their listener's backlog was full
  // REQs dropped: their source (IP address) held its share of the listener's backlog already,
  // all of it but the kReqReserve kept for other sources (docs/SECURITY.md).
  std::uint64_t req_src_limited = 0;
  std::uint64_t req_held = 0;        // REQs that came for a port before its listen
  std::uint64_t closed_qp_acks = 0;  // duplicates acknowledged for a closed context's QPs
  // Packets for a QPN nobody owns dropped unlooked-at: their source (address and UDP port) was
  // out of its budget (kUnknownQpnBurst, kUnknownQpnPerSecond; docs/SECURITY.md).
  std::uint64_t unknown_qpn_src_limited = 0;
};

class CmServer {
 public:
  // `sink_fd`: the group's first socket (owned from here on). `seed`: the CM's IDs and the
  // ephemeral ports' start. `capture_path`: a pcap file for every packet the sink sends and
  // receives (empty: none), written until the server is destroyed. `listen_grace`: how long a
  // REQ (or SIDR_REQ) for an rdma_cm port nobody listens on yet waits for a listen before it is
  // REJected (Invalid Service ID, which the kernel answers at once). Programs whose server lets
  // its peer connect before it has listened (Debian 12's qperf 0.4.11 and perftest -R) count on
  // the listen coming before the REQ.
  static Result<std::unique_ptr<CmServer>, Error> open(const wire::IpAddress& ip,
                                                       std::uint16_t port, int sink_fd,
                                                       std::uint64_t seed,
                                                       const std::string& capture_path = {},
                                                       Duration listen_grace = Duration::ms(100));
  ~CmServer();
  CmServer(const CmServer&) = delete;
  CmServer& operator=(const CmServer&) = delete;

  int sink_fd() const { return dp_->fd(); }
  // The MAD socket (its errors show as POLLERR): on_mad_socket() when it is ready.
  int mad_fd() const { return mad_dp_->fd(); }

  // A connection that said kCmHello (and got kWelcome): an event channel of process `pid`.
  void add_client(int fd, pid_t pid);
  bool has_clients() const { return !clients_.empty(); }
  // The CM still retransmits a request (cm::CmEndpoint::retransmitting): a DREQ of a process
  // that has gone, a REP waiting for its RTU. The coordinator stays up until it is answered or
  // its retries run out, as the kernel's CM does.
  bool retransmitting() const { return cm_.retransmitting(); }
  void add_pollfds(std::vector<pollfd>& fds) const;
  // Whether `fd` is one of its clients'.
  bool owns(int fd) const { return clients_.count(fd) != 0; }

  void on_sink_readable(Instant now);
  void on_mad_socket(Instant now);
  void on_client_readable(Instant now, int fd);
  void on_timeout(Instant now);
  // When on_timeout() is next due (Instant::never() when nothing waits), or a closed QP expires.
  Instant next_deadline() const;
  // A context destroyed an RC QP (devd kClosedQp): once the context has gone and the QP's block
  // is unsteered, its peer's retransmissions of requests it executed reach this socket and are
  // acknowledged (transport/closed_qps.h) until `until`.
  void keep_closed_qp(const transport::ClosedQp& q) { closed_.add(q); }
  // Closed QPs still answered at `now`: the coordinator stays while there are any.
  bool keeps_closed_qps(Instant now) { return closed_.live(now) != 0; }
  std::size_t closed_qps(Instant now) { return closed_.live(now); }
  // Faults on the CM's own packets (the coordinator applies UROCE_FAULTS of the process that
  // started it, so that class=cm rules reach the CM MADs); "" clears them.
  Result<fault::FaultSpec, std::string> set_faults(const std::string& text, Instant now);

  const CmServerCounters& counters() const { return counters_; }
  // What the coordinator's socket received and no one took: packets for a QPN nobody owns
  // (CmServerCounters::unsteered) and those its datapath dropped before looking at the QPN
  // (malformed, too short for a BTH, a bad ICRC). `uroce stats`: unsteered_pkts.
  std::uint64_t dropped() const;
  // `uroce stats`: one kCmId per ID, then a kCmStats.
  void list(const std::function<void(const devd::Msg&)>& send) const;
  const cm::CmCounters& cm_counters() const { return cm_.counters(); }
  const CmKeyCounters& key_counters() const { return keys_.counters(); }

 private:
  // list(): one kCmId per ID.
  void list_ids(const std::function<void(const devd::Msg&)>& send) const;
  struct Id {
    std::uint32_t number = 0;
    int client = -1;  // the channel connection that gets its events
    std::uint32_t ps = 0;
    std::uint32_t qp_type = 0;
    devd::CmAddr src;
    devd::CmAddr dst;
    bool bound = false;  // holds (ps, src.port)
    bool listening = false;
    cm::ListenId listen{};
    bool has_conn = false;
    cm::ConnId conn{};
    bool active = false;
    std::uint32_t listener = 0;               // a passive connection's listener
    std::uint32_t qkey = 0;                   // UD: the Q_Key of its QP
    std::uint32_t backlog = 0;                // a listener's: its CONNECT_REQUESTs queued at most
    seal::Mode seal_mode = seal::Mode::kOff;  // its device's aead= (listen, connect, accept)
    std::optional<seal::CmPsk> psk;           // from its device's psk= (seal::cm_psk_from)
  };
  using Source = std::array<std::uint8_t, 16>;  // a REQ's IP source, as the CM's GID
  struct Client {
    pid_t pid = 0;
    std::deque<devd::CmMsg> out;  // what its socket has not taken yet, in order
    std::map<std::uint32_t, std::uint32_t> queued_requests;  // listener -> its requests in `out`
    // (listener, the REQ's source address) -> its requests in `out`; `out_source` holds each
    // queued message's source, in `out`'s order (none for other messages).
    std::map<std::pair<std::uint32_t, Source>, std::uint32_t> queued_from;
    std::deque<std::optional<Source>> out_source;
  };
  // Of a listener's backlog, the requests one source may not take (when the backlog has
  // 2 * kReqReserve or more; else half of it): a flood of REQs from one address leaves the others
  // room to connect.
  static constexpr std::uint32_t kReqReserve = 16;
  // A client's queue at most (each under 1 KiB): past it the client is dropped.
  static constexpr std::size_t kMaxQueued = 16384;
  // rdma_listen's backlog when it gives none or more (the kernel's net.rdma_ucm.max_backlog).
  static constexpr std::uint32_t kMaxBacklog = 1024;
  // Per source: packets for QPNs nobody owns (closed contexts' QPs, or none) that it may send at
  // once and per second after, as a context's engine allows (engine/engine.h).
  static constexpr std::uint32_t kUnknownQpnBurst = 256;
  static constexpr std::uint32_t kUnknownQpnPerSecond = 256;

  CmServer(const wire::IpAddress& ip, std::uint16_t port, std::unique_ptr<datapath::UdpDatapath> dp,
           std::unique_ptr<datapath::UdpDatapath> mad_dp, std::uint64_t seed,
           Duration listen_grace);

  // Reads what `dp` (the sink or the MAD socket) received and serves it, then what follows.
  void receive_from(Instant now, datapath::UdpDatapath& dp);
  // One packet read: a CM MAD to the CM, a closed QP's packet to `acks`, the rest counted.
  void on_packet(Instant now, const wire::RocePacket& pkt, const datapath::RxMeta& meta,
                 std::vector<transport::TxPacket>& acks);

  // The reply to a command (nullopt: already sent, with what follows it).
  std::optional<devd::CmMsg> handle(Instant now, int fd, const devd::CmMsg& m);
  // handle()'s steps, each given the reply `r` to fill (its status set on an error).
  devd::CmMsg create_id(int fd, const devd::CmMsg& m, devd::CmMsg r);
  devd::CmMsg migrate_id(int fd, const devd::CmMsg& m, devd::CmMsg r);
  std::optional<devd::CmMsg> handle_on_id(Instant now, int fd, Id& id, const devd::CmMsg& m,
                                          devd::CmMsg r);
  devd::CmMsg bind_command(Id& id, const devd::CmMsg& m, devd::CmMsg r);
  std::optional<devd::CmMsg> resolve_addr_command(int fd, Id& id, const devd::CmMsg& m,
                                                  devd::CmMsg r);
  devd::CmMsg listen_command(Instant now, Id& id, std::int32_t backlog, devd::CmMsg r);
  devd::CmMsg connect_command(Instant now, Id& id, const devd::CmMsg& m, bool ud, devd::CmMsg r);
  devd::CmMsg accept_command(Instant now, Id& id, const devd::CmMsg& m, bool ud, devd::CmMsg r);
  // Address and route resolution: the command's reply, then its event for `id`.
  void reply_then_event(int fd, const devd::CmMsg& reply, const Id& id, std::uint32_t event);
  int bind_id(Id& id, std::uint16_t port);
  void destroy_id(Instant now, Id& id);
  void drop_client(Instant now, int fd);
  // Drops the clients a send found unable to take a message (pending_drops_).
  void flush_drops(Instant now);
  // Destroys the IDs of clients whose connection the peer has closed (dropped after the call).
  void reap_closed_clients();
  void pump(Instant now);  // the CM's events to clients, its MADs to the wire
  void deliver(const cm::CmEvent& e);
  void deliver_request(const cm::CmEvent& e);  // a REQ or SIDR_REQ for a listener
  void deliver_conn_event(const cm::CmEvent& e);
  void refuse_response(Id& id, devd::CmMsg& ev, Refusal why);
  const Id& add_passive_id(const cm::CmEvent& e, const Id& listener, const wire::CmaHeader& h);
  void send(int fd, const devd::CmMsg& m);
  // Hands the client's socket what it takes of its queue; false when the socket failed.
  bool flush_out(int fd, Client& c);
  // A REQ or SIDR_REQ for a listener whose queued requests fill its backlog: true (and counted)
  // when `mad` is one, to be dropped unanswered.
  bool over_backlog(ConstBytes mad, const Source& from);
  Id* id_of(int fd, std::uint32_t number);
  Id* id_by_conn(cm::ConnId c);
  devd::CmAddr local_addr(std::uint16_t port) const;
  // A REQ or SIDR_REQ for a port nobody listens on waits for a listen, up to listen_grace_
  // (see cm_server.cc): true when `mad` is one and is now held.
  bool hold_for_listen(Instant now, const cm::CmPeer& from, ConstBytes mad);
  // Hands the held requests for (ps, port), or all those due by `now` when ps is 0, to the CM.
  void release_held(Instant now, std::uint32_t ps, std::uint16_t port);
  cm::Gid gid_of(const devd::CmAddr& a) const;

  wire::IpAddress ip_;
  std::uint16_t port_;
  std::unique_ptr<capture::PcapWriter> capture_;   // before dp_, whose tap writes to it
  std::unique_ptr<datapath::UdpDatapath> dp_;      // the sink
  std::unique_ptr<datapath::UdpDatapath> mad_dp_;  // the MAD socket
  cm::CmEndpoint cm_;
  CmKeys keys_;  // per-connection keys with uroce peers (cm_keys.h)
  std::uint32_t psn_ = 0;
  std::map<int, Client> clients_;
  std::vector<int> pending_drops_;  // clients whose socket was full, dropped after the call
  Instant reap_now_{};              // the time of the command being handled
  Instant event_now_{};             // the time of the CM events being delivered (pump)
  SourceBudget unknown_qpn_budget_{kUnknownQpnBurst, kUnknownQpnPerSecond};
  std::map<std::uint32_t, Id> ids_;
  std::uint32_t next_id_ = 1;
  std::map<std::uint32_t, std::uint32_t> by_conn_;           // ConnId -> ID
  std::map<std::uint32_t, std::uint32_t> by_listen_;         // ListenId -> ID
  std::set<std::pair<std::uint32_t, std::uint16_t>> ports_;  // (ps, port) bound
  std::uint16_t next_ephemeral_;
  struct HeldReq {
    Instant until;
    cm::CmPeer from;
    std::uint32_t ps = 0;
    std::uint16_t port = 0;
    std::array<std::byte, wire::kMadBytes> mad{};
  };
  std::vector<HeldReq> held_;  // at most kMaxHeld, oldest first
  Duration listen_grace_;
  CmServerCounters counters_;
  // The source of the REQ whose CONNECT_REQUEST is being sent (deliver_request); none
  // otherwise.
  std::optional<Source> sending_from_;
  transport::ClosedQps closed_;
  static constexpr std::size_t kMaxClosedAcks = 64;  // per receive batch
  void send_closed_qp_ack(Instant now, const transport::TxPacket& ack);
};

}  // namespace uroce::engine

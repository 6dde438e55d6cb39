// The IB Communication Manager (IBTA vol. 1, chapter 12) as a sans-I/O state machine, speaking
// to the kernel's cm.c / cma.c over QP 1. One CmEndpoint serves one port (one GID): it owns the
// connection IDs of both sides (active and passive), their timers and retransmissions.
//
// Contract (single-threaded, like the transport): inputs carry `now` (handle_mad, handle_timeout,
// connect, accept, ...); outputs are polled: poll_transmit() gives MADs to send (each to QP 1 of
// its peer, Q_Key 0x80010000), poll_event() gives events for the user, poll_timeout() the next
// deadline. Nothing here reads a clock, opens a socket or draws unseeded randomness: local
// communication IDs come from CmConfig::seed, as cm.c's come from a random operand.
//
// Connection states (cm.c's enum ib_cm_state; MRA states only with CmConfig::send_mra or a peer
// that sends MRA):
//
//   active                                      passive
//   connect() --REQ--> REQ_SENT                 LISTEN --REQ--> REQ_RCVD [--MRA--> MRA_REQ_SENT]
//     MRA <-- MRA_REQ_RCVD                        accept() --REP--> REP_SENT
//     REP --> REP_RCVD [--MRA--> MRA_REP_SENT]      MRA --> MRA_REP_RCVD
//     establish() --RTU--> ESTABLISHED              RTU --> ESTABLISHED
//
//   ESTABLISHED --disconnect()/DREQ--> DREQ_SENT --DREP or retries out--> TIMEWAIT --> gone
//   ESTABLISHED --DREQ received--> DREQ_RCVD --disconnect()/DREP--> TIMEWAIT --> gone
//   REQ retries out: REJ Timeout, gone (kUnreachable). REP retries out: REJ Timeout, TIMEWAIT
//   (kUnreachable). REJ received while connecting: gone or TIMEWAIT (kRejected); once up:
//   TIMEWAIT (kDisconnected). The peer's CM gone (handle_peer_unreachable): every request
//   retransmitted to it ends as if its retries were out, with nothing more sent.
//   SIDR: sidr_resolve() --SIDR_REQ--> SIDR_REQ_SENT --SIDR_REP--> gone (kSidrReply)
//         SIDR_REQ --> SIDR_REQ_RCVD --sidr_reply()--> TIMEWAIT (answers duplicates with the
//         same SIDR_REP until the requester's retries are over) --> gone
//
// Timers (cm.c): REQ every 2 * 2^(packet_life_time-8) + 2^(remote_cm_response_timeout-8) ms,
// REP every 2^(local_cm_response_timeout-8) ms of the REQ, DREQ like the side's first message;
// each retried max_cm_retries times (15 from rdma_cm). An MRA stretches the wait to its service
// timeout plus the packet lifetime. TIMEWAIT lasts 2^(packet_life_time+1-8) ms; on the passive
// side at least until the active side's last REQ retransmission has come and gone, so that a REQ
// the passive side has already rejected or given up on gets a REJ again instead of starting a new
// connection (cm.c forgets such a REQ at once and would offer it to the user again).
//
// Duplicates and stale MADs (cm.c's answers unless said otherwise):
//   REQ again: dropped in REQ_RCVD; the MRA again in MRA_REQ_SENT; the same REP again in
//     REP_SENT (cm.c drops it and waits for its REP timer); the consumer's REJ again, or REJ Stale
//     Connection, in TIMEWAIT. A new REQ from a QP connected here: REJ Stale Connection. No
//     listener: REJ Invalid Service ID.
//   REP again: the RTU again when ESTABLISHED, the MRA again in MRA_REP_SENT; a REP for no ID:
//     REJ Invalid Communication ID.
//   DREQ for no ID, or in TIMEWAIT: a DREP. SIDR_REQ for no listener: SIDR_REP Unsupported.
//   RTU, DREP, MRA, REJ, SIDR_REP for no ID: dropped. Anything that does not parse: counted.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include "base/bytes.h"
#include "base/prng.h"
#include "base/result.h"
#include "base/time.h"
#include "wire/cm_mad.h"

namespace uroce::cm {

using Gid = std::array<std::uint8_t, 16>;

// The remote end of a MAD: the peer port's GID (on RoCEv2 an IP-mapped address). The engine maps
// it to an address handle for the peer's QP 1.
struct CmPeer {
  Gid gid{};
  auto operator<=>(const CmPeer&) const = default;
};

struct CmConfig {
  std::uint64_t seed = 1;                 // derives the local communication IDs and transaction IDs
  std::uint64_t local_ca_guid = 0;        // REQ/REP Local CA GUID (the device's node GUID)
  std::uint8_t packet_life_time = 18;     // IBoE path lifetime (cma.c CMA_IBOE_PACKET_LIFETIME)
  std::uint8_t cm_response_timeout = 20;  // CMA_CM_RESPONSE_TIMEOUT: 2^(20-8) ms = 4096 ms
  std::uint8_t max_cm_retries = 15;       // CMA_MAX_CM_RETRIES
  std::uint8_t ca_ack_delay = 15;         // local CA ACK delay (rxe's RXE_LOCAL_CA_ACK_DELAY)
  // Selective repeat with a peer whose Local CA GUID (REQ or REP) carries uroce's mark
  // (wire::is_uroce_guid): QpAttributes::selective_repeat. False: never.
  bool selective_repeat = true;
  // Send an MRA on every REQ (passive) and REP (active) received, as cma.c does for user-space
  // IDs (CMA_CM_MRA_SETTING: service timeout 24).
  bool send_mra = false;
  // With send_mra, on REPs too. An MRA on a REP makes the passive side wait its service timeout
  // (about a minute) before it sends the REP again, which a lost RTU then costs.
  bool send_mra_on_rep = true;
  std::uint8_t mra_service_timeout = 24;
  // Bound of the ID table (a REQ over it is REJected No Resources). Timewait entries count:
  // a passive one stays until the peer's REQ retransmissions are over (about 100 s by default).
  std::size_t max_connections = 65536;
  std::size_t max_tx_queue = 4096;  // MADs not yet polled; more are dropped (and counted)
};

// 2^(iba_time - 8) ms, at least 1 ms: cm.c's cm_convert_to_ms (4.096 us * 2^t, rounded).
Duration cm_time_to_duration(std::uint8_t iba_time);
// The QP's local ACK timeout from the peer's CA ACK delay and the path lifetime (cm.c's
// cm_ack_timeout).
std::uint8_t cm_ack_timeout(std::uint8_t ca_ack_delay, std::uint8_t packet_life_time);

struct ConnId {
  std::uint32_t value = 0;  // the local communication ID
  auto operator<=>(const ConnId&) const = default;
};
struct ListenId {
  std::uint32_t value = 0;
  auto operator<=>(const ListenId&) const = default;
};

// What the CM negotiated for the QP (ibv_modify_qp to RTR and RTS), from this side's view.
struct QpAttributes {
  std::uint32_t local_qpn = 0;
  std::uint32_t remote_qpn = 0;         // dest_qp_num
  std::uint32_t sq_psn = 0;             // the first PSN we send (the peer's Starting PSN)
  std::uint32_t rq_psn = 0;             // the first PSN we receive (our Starting PSN)
  std::uint8_t max_rd_atomic = 0;       // our initiator depth
  std::uint8_t max_dest_rd_atomic = 0;  // our responder resources
  std::uint8_t path_mtu = 0;            // IB MTU enum (1 = 256 ... 5 = 4096)
  std::uint8_t ack_timeout = 0;         // local ACK timeout exponent
  std::uint8_t retry_count = 0;
  std::uint8_t rnr_retry = 0;
  bool srq = false;  // the peer uses an SRQ
  std::uint16_t pkey = 0xffff;
  Gid remote_gid{};
  std::uint32_t flow_label = 0;
  std::uint8_t traffic_class = 0;
  std::uint8_t hop_limit = 0;
  std::uint8_t sl = 0;
  // Both ends are uroce (the peer's Local CA GUID in its REQ or REP carries uroce's mark) and
  // CmConfig::selective_repeat allows it: the QP recovers losses by selective repeat
  // (transport::Qp::set_selective_repeat; the verbs layer has the last word, DeviceConfig).
  bool selective_repeat = false;
  // The peer's Local CA GUID (REQ or REP) carries uroce's mark, whatever CmConfig says.
  bool peer_uroce = false;
  // Passive: the REQ's Local CA GUID also offers a per-connection key (wire::offers_key; the
  // active side's ID seals, ConnectParams::offer_key).
  bool peer_offers_key = false;
  // The connection's AEAD key (docs/SECURITY.md, "Per-connection keys"): agreed by the
  // coordinator (devd/cm_keys.h) between two uroce peers whose devices seal; 0 bytes: none.
  // The CM itself never sets it.
  std::array<std::uint8_t, 32> seal_key{};
  std::uint8_t seal_key_bytes = 0;
  bool operator==(const QpAttributes&) const = default;
};

struct ConnectParams {
  CmPeer peer;
  Gid local_gid{};
  std::uint64_t service_id = 0;
  std::uint32_t local_qpn = 0;
  // The REQ's (and AcceptParams': the REP's) Starting PSN. Linux's cm.c takes each side's
  // Starting PSN as the first PSN that side *receives*: the active side sends from the REP's and
  // the passive side from the REQ's (ib_send_cm_req keeps the REQ's as rq_psn, cm_rep_handler
  // the REP's as sq_psn; the golden rping capture between two rxe hosts shows it on the wire).
  std::uint32_t starting_psn = 0;
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t retry_count = 7;      // <= 7
  std::uint8_t rnr_retry_count = 7;  // <= 7
  std::uint8_t path_mtu = 3;         // 1..5
  bool srq = false;
  bool flow_control = false;  // rdma_conn_param.flow_control (End-to-End Flow Control)
  // The REQ's Local CA GUID offers a per-connection key (wire::kUroceGuidKeyOffer), when it is a
  // uroce GUID: the coordinator's ID seals (devd/cm_keys.h).
  bool offer_key = false;
  std::uint16_t pkey = 0xffff;
  std::uint32_t flow_label = 0;
  std::uint8_t traffic_class = 0;
  std::uint8_t hop_limit = 64;
  std::uint8_t sl = 0;
  ConstBytes private_data;  // <= 92 bytes (the rdma_cm header included)
};

struct AcceptParams {
  std::uint32_t local_qpn = 0;
  std::uint32_t starting_psn = 0;
  // Clamped to what the REQ offers: responder resources to its initiator depth, initiator
  // depth to its responder resources (IBTA 12.7.29-30; librdmacm's rdma_accept does the same).
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t rnr_retry_count = 7;
  bool srq = false;
  bool flow_control = false;
  ConstBytes private_data;  // <= 196 bytes
};

struct SidrParams {
  CmPeer peer;
  std::uint64_t service_id = 0;
  std::uint16_t pkey = 0xffff;
  ConstBytes private_data;  // <= 216 bytes
};

enum class CmError : std::uint8_t {
  kInvalidArgument,  // private data too long, a count out of range (EINVAL)
  kUnknownId,        // no such connection or listener (ENOENT)
  kInvalidState,     // the call does not fit the connection's state (EINVAL in cm.c)
  kBusy,             // service ID already listened on (EBUSY) / ID table full (ENOMEM)
};

enum class CmEventType : std::uint8_t {
  kConnectRequest,   // passive: a REQ for a listener; accept() or reject()
  kConnectResponse,  // active: the REP; set the QP to RTR/RTS, then establish() or reject()
  kEstablished,      // both: the connection is up (active after RTU, passive on RTU)
  kRejected,         // a REJ before the connection was up (reason, private data)
  kUnreachable,      // REQ, REP or SIDR_REQ retries exhausted (rdma_cm's UNREACHABLE)
  kDisconnected,     // DREQ received, DREP received, DREQ retries exhausted or REJ once up
  kTimewaitExit,     // the ID is gone; a new connection may reuse its QP
  kSidrRequest,      // passive: a SIDR_REQ for a listener; sidr_reply()
  kSidrReply,        // active: the SIDR_REP (status, QPN, Q_Key)
};
std::string_view cm_event_name(CmEventType t);

struct CmEvent {
  CmEventType type = CmEventType::kEstablished;
  ConnId id;
  ListenId listener;  // kConnectRequest, kSidrRequest
  CmPeer peer;
  std::uint64_t service_id = 0;
  wire::CmRejReason reason = wire::CmRejReason::kConsumerDefined;  // kRejected, kUnreachable
  QpAttributes qp;  // kConnectRequest (what the REQ offers), kConnectResponse, kEstablished
  // kConnectRequest: what the REQ offers (the peer's resources).
  std::uint8_t offered_responder_resources = 0;
  std::uint8_t offered_initiator_depth = 0;
  // kSidrReply
  wire::SidrStatus sidr_status = wire::SidrStatus::kSuccess;
  std::uint32_t sidr_qpn = 0;
  std::uint32_t sidr_qkey = 0;
  // The received message's whole private data area (its size depends on the attribute).
  std::array<std::uint8_t, 224> private_data{};
  std::size_t private_data_bytes = 0;
};

struct CmOutMad {
  CmPeer to;
  std::array<std::byte, wire::kMadBytes> mad{};
};

// What handle_mad() did with a MAD (also counted in CmCounters).
enum class CmRx : std::uint8_t {
  kAccepted,   // changed a connection's state or created one
  kDuplicate,  // a retransmission: answered again or dropped, as cm.c does
  kAnswered,   // a MAD for no connection, answered (REJ, DREP, SIDR_REP)
  kDropped,    // a MAD for no connection or the wrong state, dropped
  kMalformed,  // did not parse
};

struct CmCounters {
  std::uint64_t rx_accepted = 0;
  std::uint64_t rx_duplicate = 0;
  std::uint64_t rx_answered = 0;
  std::uint64_t rx_dropped = 0;
  std::uint64_t rx_malformed = 0;
  std::uint64_t tx = 0;
  std::uint64_t tx_dropped = 0;  // the transmit queue was full (nobody polls it)
  std::uint64_t retransmits = 0;
  // handle_peer_unreachable() calls (`uroce stats`: peer_unreachable), and the requests they
  // ended (unreachable_ended).
  std::uint64_t peer_unreachable = 0;
  std::uint64_t unreachable_ended = 0;
  // DREQs whose retries ran out unanswered (DISCONNECTED all the same).
  std::uint64_t dreq_timeouts = 0;
};

class CmEndpoint {
 public:
  explicit CmEndpoint(const CmConfig& config);

  Result<ListenId, CmError> listen(std::uint64_t service_id);
  Result<ListenId, CmError> stop_listen(ListenId id);

  Result<ConnId, CmError> connect(Instant now, const ConnectParams& p);
  // Sends the REP; returns the QP attributes (the QP goes to RTR and RTS before the RTU comes).
  Result<QpAttributes, CmError> accept(Instant now, ConnId id, const AcceptParams& p);
  // REJ (Consumer Defined) of a REQ (passive, before accept) or of a REP (active, before
  // establish).
  Result<ConnId, CmError> reject(Instant now, ConnId id, ConstBytes private_data);
  // Active, after kConnectResponse: sends the RTU.
  Result<ConnId, CmError> establish(Instant now, ConnId id);
  // ESTABLISHED: sends a DREQ. DREQ_RCVD: sends the DREP.
  Result<ConnId, CmError> disconnect(Instant now, ConnId id, ConstBytes private_data);

  // rdma_destroy_id: the ID is the user's no more (no further events; calls on it give
  // kUnknownId), and the CM does what cm.c's cm_destroy_id does for its state: REJ Timeout in
  // REQ_SENT, REJ Consumer Defined while connecting, DREQ when established, DREP when a DREQ
  // came, SIDR_REP Reject for a SIDR request; a connection that still has a DREQ or a timewait
  // to go through finishes it silently.
  Result<ConnId, CmError> destroy(Instant now, ConnId id);

  // The QP received its first packet before the RTU (ib_cm_notify(IB_EVENT_COMM_EST)): a
  // passive side in REP_SENT is established as if the RTU had come (cm.c cm_establish).
  // kInvalidState in any other state but ESTABLISHED (which is a no-op).
  Result<ConnId, CmError> handle_comm_established(Instant now, ConnId id);

  Result<ConnId, CmError> sidr_resolve(Instant now, const SidrParams& p);
  Result<ConnId, CmError> sidr_reply(Instant now, ConnId id, wire::SidrStatus status,
                                     std::uint32_t qpn, std::uint32_t qkey,
                                     ConstBytes private_data);

  CmRx handle_mad(Instant now, const CmPeer& from, ConstBytes mad);
  void handle_timeout(Instant now);
  // Nothing listens at the peer's CM any more: its host answered a MAD sent to it with an ICMP
  // port unreachable (the coordinator's socket reads it from its error queue). The kernel's CM
  // is always there, and a uroce peer's coordinator while any of its programs is, so this means
  // that the peer's device has gone (its coordinator exited), with every ID it had. Each request
  // still retransmitted to it ends at once as its last retry would, without sending anything
  // more there: a DREQ as if its DREP had come (DISCONNECTED, timewait), a REQ (or SIDR_REQ)
  // UNREACHABLE, a REP UNREACHABLE and timewait. Connections that are up or in timewait are left
  // alone (their QPs' own timeouts end the first), and so are other peers'. An ICMP that is lost
  // just leaves the retries to run their course.
  void handle_peer_unreachable(Instant now, const CmPeer& peer);

  std::optional<CmOutMad> poll_transmit();
  std::optional<CmEvent> poll_event();
  Instant poll_timeout() const;

  const CmCounters& counters() const { return counters_; }
  std::size_t connection_count() const { return conns_.size(); }
  // Whether a connection still has a request of its own to retransmit (a REQ, REP, DREQ or
  // SIDR_REQ waiting for its answer, MRA waits included): the CM has work left that no peer will
  // start for it. Timewait entries do not count: they only answer what comes. The coordinator
  // stays up while this holds, as the kernel's CM outlives the process that disconnected.
  // O(1): the coordinator asks on every round.
  bool retransmitting() const { return !retrying_.empty(); }
  // How many connections retransmit a request (retransmitting()).
  std::size_t retransmitting_count() const { return retrying_.size(); }

 private:
  enum class State : std::uint8_t {
    kReqSent,
    kMraReqRcvd,
    kReqRcvd,
    kMraReqSent,
    kRepSent,
    kMraRepRcvd,
    kRepRcvd,
    kMraRepSent,
    kEstablished,
    kDreqSent,
    kDreqRcvd,
    kTimewait,
    kSidrReqSent,
    kSidrReqRcvd,
  };
  struct Conn {
    State state = State::kReqSent;
    bool active = false;
    bool sidr = false;       // a SIDR exchange, not a connection
    bool destroyed = false;  // the user let go of it: no events
    std::uint32_t local_id = 0;
    std::uint32_t remote_id = 0;
    CmPeer peer;
    ListenId listener;
    std::uint64_t service_id = 0;
    std::uint64_t tid = 0;
    QpAttributes qp;
    std::uint8_t offered_responder_resources = 0;  // passive: from the REQ
    std::uint8_t offered_initiator_depth = 0;
    std::uint8_t peer_rnr_retry = 0;
    Duration timeout;  // base retransmission timeout
    std::uint8_t max_retries = 0;
    std::uint8_t retries_left = 0;
    Instant deadline = Instant::never();
    // Passive: until when the active side may still retransmit its REQ or SIDR_REQ (see
    // enter_timewait).
    Instant req_retransmits_end;
    // The last request (REQ, REP, DREQ, SIDR_REQ) for retransmission, and the last reply
    // (MRA, RTU, DREP, REJ, SIDR_REP) for answering duplicates.
    std::optional<std::array<std::byte, wire::kMadBytes>> request;
    std::optional<std::array<std::byte, wire::kMadBytes>> reply;
  };

  CmRx on_req(Instant now, const CmPeer& from, std::uint64_t tid, const wire::CmReq& m);
  wire::CmReq format_req(const Conn& c, const ConnectParams& p) const;
  void on_dup_req(Conn& c, std::uint64_t tid, const wire::CmReq& m);
  void start_passive(Instant now, Conn& c, const CmPeer& from, std::uint64_t tid,
                     const wire::CmReq& m);
  CmRx on_mra(Instant now, const CmPeer& from, const wire::CmMra& m);
  CmRx on_rej(Instant now, const CmPeer& from, const wire::CmRej& m);
  CmRx on_rep(Instant now, const CmPeer& from, std::uint64_t tid, const wire::CmRep& m);
  CmRx on_rtu(Instant now, const CmPeer& from, const wire::CmRtu& m);
  CmRx on_dreq(Instant now, const CmPeer& from, std::uint64_t tid, const wire::CmDreq& m);
  CmRx on_drep(Instant now, const CmPeer& from, const wire::CmDrep& m);
  CmRx on_sidr_req(Instant now, const CmPeer& from, std::uint64_t tid, const wire::CmSidrReq& m);
  CmRx on_sidr_rep(Instant now, const CmPeer& from, const wire::CmSidrRep& m);
  void on_timeout(Instant now, Conn& c);
  // A request's retries are over (`peer_gone`: handle_peer_unreachable, which sends nothing
  // more to the peer): the connection ends as cm.c ends it when they run out.
  void give_up(Instant now, Conn& c, bool peer_gone);
  // The states that retransmit their request when the timer fires.
  static bool retries_request(State s);
  void send_req_timeout_rej(const Conn& c);

  // A connection that a MAD from `from` refers to by our local ID, or nullptr.
  Conn* find(std::uint32_t local_id, const CmPeer& from);
  Conn* find_mut(ConnId id);
  // A passive connection (or SIDR request) by the peer's ID for it.
  Conn* find_passive(bool sidr, const CmPeer& from, std::uint32_t remote_id);
  void forget_remote_qpn(const Conn& c);
  Result<Conn*, CmError> new_conn();
  std::uint64_t new_tid(std::uint32_t local_id);

  // Sends a MAD and returns its bytes (to keep for retransmission or duplicates).
  std::array<std::byte, wire::kMadBytes> send(const CmPeer& to, const wire::CmMad& mad);
  void resend(const CmPeer& to, const std::array<std::byte, wire::kMadBytes>& mad);
  void send_rej(const CmPeer& to, std::uint64_t tid, std::uint32_t local_id,
                std::uint32_t remote_id, wire::CmMsgResponse what, wire::CmRejReason reason,
                ConstBytes private_data, std::array<std::byte, wire::kMadBytes>* keep);
  std::array<std::byte, wire::kMadBytes> send_drep(const CmPeer& to, std::uint64_t tid,
                                                   std::uint32_t local_id, std::uint32_t remote_id,
                                                   ConstBytes private_data);
  std::array<std::byte, wire::kMadBytes> send_mra(const Conn& c, wire::CmMsgResponse what);
  // Every change of a connection's state goes through here, which keeps retrying_ in step.
  void set_state(Conn& c, State s);
  // Every change of a connection's deadline goes through here, which keeps timers_ in step.
  void set_deadline(Conn& c, Instant when);
  void stop_timer(Conn& c);
  void arm(Instant now, Conn& c, Duration timeout, std::uint8_t retries);
  void enter_timewait(Instant now, Conn& c);
  void erase(Conn& c);
  void emit(CmEvent e);
  CmEvent event_for(CmEventType t, const Conn& c) const;

  CmConfig config_;
  Prng prng_;
  std::uint32_t id_operand_ = 0;
  std::uint32_t next_id_ = 0;
  std::uint32_t next_tid_ = 0;
  std::uint32_t next_listen_ = 0;
  std::map<std::uint32_t, Conn> conns_;  // by local communication ID
  // The armed deadlines, earliest first: poll_timeout() and handle_timeout() cost what is due,
  // not a walk over every connection (thousands of rdma_cm connections, issue 43).
  std::set<std::pair<Instant, std::uint32_t>> timers_;
  // The connections in a state that retransmits its request (retries_request), by peer:
  // retransmitting() in O(1), and a peer's requests found without a walk over every connection.
  std::set<std::pair<CmPeer, std::uint32_t>> retrying_;
  // Passive connections and SIDR requests by the peer's ID (cm.c's remote ID and remote SIDR
  // tables), and passive connections not yet in timewait by the peer's QPN (remote QPN table).
  struct RemoteKey {
    bool sidr = false;
    CmPeer peer;
    std::uint32_t remote_id = 0;
    auto operator<=>(const RemoteKey&) const = default;
  };
  std::map<RemoteKey, std::uint32_t> by_remote_;
  std::map<std::pair<CmPeer, std::uint32_t>, std::uint32_t> by_remote_qpn_;
  std::map<std::uint64_t, ListenId> listeners_;  // by service ID
  std::deque<CmOutMad> tx_;
  std::deque<CmEvent> events_;
  CmCounters counters_;
};

}  // namespace uroce::cm

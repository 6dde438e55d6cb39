#include "cm/cm.h"

#include <algorithm>
#include <vector>

namespace uroce::cm {

using wire::CmMad;
using wire::CmMsgResponse;
using wire::CmRejReason;

Duration cm_time_to_duration(std::uint8_t iba_time) {
  // cm.c cm_convert_to_ms: 4.096 us * 2^t is about 2^(t-8) ms.
  const int shift = std::max(static_cast<int>(iba_time) - 8, 0);
  return Duration::ms(std::int64_t{1} << std::min(shift, 31));
}

std::uint8_t cm_ack_timeout(std::uint8_t ca_ack_delay, std::uint8_t packet_life_time) {
  // cm.c cm_ack_timeout: the larger of the two, plus one if they are within one of each other;
  // the lifetime counts twice (round trip), hence its + 1.
  int ack_timeout = packet_life_time + 1;
  if (ack_timeout >= ca_ack_delay) {
    ack_timeout += (ca_ack_delay >= ack_timeout - 1) ? 1 : 0;
  } else {
    ack_timeout = ca_ack_delay + ((ack_timeout >= ca_ack_delay - 1) ? 1 : 0);
  }
  return static_cast<std::uint8_t>(std::min(31, ack_timeout));
}

std::string_view cm_event_name(CmEventType t) {
  switch (t) {
    case CmEventType::kConnectRequest:
      return "connect request";
    case CmEventType::kConnectResponse:
      return "connect response";
    case CmEventType::kEstablished:
      return "established";
    case CmEventType::kRejected:
      return "rejected";
    case CmEventType::kUnreachable:
      return "unreachable";
    case CmEventType::kDisconnected:
      return "disconnected";
    case CmEventType::kTimewaitExit:
      return "timewait exit";
    case CmEventType::kSidrRequest:
      return "SIDR request";
    case CmEventType::kSidrReply:
      return "SIDR reply";
  }
  return "unknown";
}

namespace {

template <std::size_t N>
void copy_private_data(CmEvent& e, const std::array<std::uint8_t, N>& pd) {
  static_assert(N <= sizeof(e.private_data));
  std::copy(pd.begin(), pd.end(), e.private_data.begin());
  e.private_data_bytes = N;
}

}  // namespace

CmEndpoint::CmEndpoint(const CmConfig& config) : config_(config), prng_(config.seed) {
  UROCE_CHECK(config_.max_cm_retries <= 15 && config_.max_connections > 0 &&
              config_.max_tx_queue > 0);
  // cm.c: local IDs are an allocation index XORed with a random operand, so that IDs of a
  // restarted CM differ from the last run's (stale MADs then miss).
  id_operand_ = static_cast<std::uint32_t>(prng_.next());
  next_tid_ = static_cast<std::uint32_t>(prng_.next());
}

Result<ListenId, CmError> CmEndpoint::listen(std::uint64_t service_id) {
  if (listeners_.contains(service_id)) return Err{CmError::kBusy};
  const ListenId id{++next_listen_};
  listeners_.emplace(service_id, id);
  return id;
}

Result<ListenId, CmError> CmEndpoint::stop_listen(ListenId id) {
  for (auto it = listeners_.begin(); it != listeners_.end(); ++it) {
    if (it->second == id) {
      listeners_.erase(it);
      return id;
    }
  }
  return Err{CmError::kUnknownId};
}

Result<CmEndpoint::Conn*, CmError> CmEndpoint::new_conn() {
  if (conns_.size() >= config_.max_connections) return Err{CmError::kBusy};
  for (;;) {
    const std::uint32_t id = (++next_id_) ^ id_operand_;
    if (id != 0 && !conns_.contains(id)) {
      Conn& c = conns_[id];
      c.local_id = id;
      return &c;
    }
  }
}

std::uint64_t CmEndpoint::new_tid(std::uint32_t local_id) {
  // cm.c cm_form_tid: the MAD agent's high half and the local ID; ours counts instead.
  return (std::uint64_t{++next_tid_} << 32) | local_id;
}

CmEndpoint::Conn* CmEndpoint::find(std::uint32_t local_id, const CmPeer& from) {
  auto it = conns_.find(local_id);
  if (it == conns_.end() || it->second.peer != from) return nullptr;
  return &it->second;
}

CmEndpoint::Conn* CmEndpoint::find_mut(ConnId id) {
  auto it = conns_.find(id.value);
  return it == conns_.end() || it->second.destroyed ? nullptr : &it->second;
}

std::array<std::byte, wire::kMadBytes> CmEndpoint::send(const CmPeer& to, const CmMad& mad) {
  CmOutMad out{to, {}};
  wire::build_cm_mad(mad, out.mad);
  resend(to, out.mad);
  return out.mad;
}

void CmEndpoint::resend(const CmPeer& to, const std::array<std::byte, wire::kMadBytes>& mad) {
  // A MAD is a datagram: one that finds the queue full is lost like one lost on the wire, and
  // the retransmission timers recover it.
  if (tx_.size() >= config_.max_tx_queue) {
    ++counters_.tx_dropped;
    return;
  }
  tx_.push_back(CmOutMad{to, mad});
  ++counters_.tx;
}

void CmEndpoint::send_rej(const CmPeer& to, std::uint64_t tid, std::uint32_t local_id,
                          std::uint32_t remote_id, CmMsgResponse what, CmRejReason reason,
                          ConstBytes private_data, std::array<std::byte, wire::kMadBytes>* keep) {
  wire::CmRej rej;
  rej.local_comm_id = local_id;
  rej.remote_comm_id = remote_id;
  rej.message_rejected = static_cast<std::uint8_t>(what);
  rej.reason = static_cast<std::uint16_t>(reason);
  const bool fits = wire::set_private_data(rej.private_data, private_data);
  UROCE_CHECK(fits);
  const auto bytes = send(to, CmMad{tid, rej});
  if (keep != nullptr) *keep = bytes;
}

std::array<std::byte, wire::kMadBytes> CmEndpoint::send_drep(const CmPeer& to, std::uint64_t tid,
                                                             std::uint32_t local_id,
                                                             std::uint32_t remote_id,
                                                             ConstBytes private_data) {
  wire::CmDrep drep;
  drep.local_comm_id = local_id;
  drep.remote_comm_id = remote_id;
  const bool fits = wire::set_private_data(drep.private_data, private_data);
  UROCE_CHECK(fits);
  return send(to, CmMad{tid, drep});
}

std::array<std::byte, wire::kMadBytes> CmEndpoint::send_mra(const Conn& c, CmMsgResponse what) {
  wire::CmMra mra;
  mra.local_comm_id = c.local_id;
  mra.remote_comm_id = c.remote_id;
  mra.message_mraed = static_cast<std::uint8_t>(what);
  mra.service_timeout = config_.mra_service_timeout;
  return send(c.peer, CmMad{c.tid, mra});
}

void CmEndpoint::set_deadline(Conn& c, Instant when) {
  if (!c.deadline.is_never()) timers_.erase({c.deadline, c.local_id});
  c.deadline = when;
  if (!when.is_never()) timers_.insert({when, c.local_id});
}

void CmEndpoint::stop_timer(Conn& c) {
  c.request.reset();
  set_deadline(c, Instant::never());
}

void CmEndpoint::arm(Instant now, Conn& c, Duration timeout, std::uint8_t retries) {
  c.timeout = timeout;
  c.max_retries = retries;
  c.retries_left = retries;
  set_deadline(c, now + timeout);
}

void CmEndpoint::enter_timewait(Instant now, Conn& c) {
  // cm.c cm_enter_timewait: wait 2^(av.timeout-8) ms, av.timeout being the lifetime + 1.
  set_state(c, State::kTimewait);
  c.request.reset();
  forget_remote_qpn(c);  // the QP may connect again: a new REQ from it is no longer stale
  Instant until =
      now + cm_time_to_duration(static_cast<std::uint8_t>(config_.packet_life_time + 1));
  if (!c.active) until = std::max(until, c.req_retransmits_end);
  set_deadline(c, until);
}

void CmEndpoint::set_state(Conn& c, State s) {
  // The index of retransmitting connections follows the state: the connection's peer and ID
  // never change while it is in it.
  if (retries_request(c.state)) retrying_.erase({c.peer, c.local_id});
  c.state = s;
  if (retries_request(s)) retrying_.insert({c.peer, c.local_id});
}

void CmEndpoint::erase(Conn& c) {
  retrying_.erase({c.peer, c.local_id});
  if (!c.active) {
    const auto it = by_remote_.find(RemoteKey{c.sidr, c.peer, c.remote_id});
    if (it != by_remote_.end() && it->second == c.local_id) by_remote_.erase(it);
    forget_remote_qpn(c);
  }
  set_deadline(c, Instant::never());
  conns_.erase(c.local_id);
}

void CmEndpoint::forget_remote_qpn(const Conn& c) {
  if (c.active || c.sidr) return;
  const auto it = by_remote_qpn_.find({c.peer, c.qp.remote_qpn});
  if (it != by_remote_qpn_.end() && it->second == c.local_id) by_remote_qpn_.erase(it);
}

CmEndpoint::Conn* CmEndpoint::find_passive(bool sidr, const CmPeer& from, std::uint32_t remote_id) {
  const auto it = by_remote_.find(RemoteKey{sidr, from, remote_id});
  if (it == by_remote_.end()) return nullptr;
  auto c = conns_.find(it->second);
  UROCE_ASSERT(c != conns_.end());
  return &c->second;
}

void CmEndpoint::emit(CmEvent e) {
  auto it = conns_.find(e.id.value);
  if (it != conns_.end() && it->second.destroyed) return;
  events_.push_back(e);
}

CmEvent CmEndpoint::event_for(CmEventType t, const Conn& c) const {
  CmEvent e;
  e.type = t;
  e.id = ConnId{c.local_id};
  e.listener = c.listener;
  e.peer = c.peer;
  e.service_id = c.service_id;
  e.qp = c.qp;
  return e;
}

// ---- user calls ----

// cm.c cm_format_req with cma.c's parameters, RoCE style: permissive LIDs.
wire::CmReq CmEndpoint::format_req(const Conn& c, const ConnectParams& p) const {
  wire::CmReq req;
  req.local_comm_id = c.local_id;
  req.service_id = p.service_id;
  req.local_ca_guid = config_.local_ca_guid;
  if (p.offer_key && wire::is_uroce_guid(req.local_ca_guid)) {
    req.local_ca_guid |= wire::kUroceGuidKeyOffer;
  }
  req.local_qpn = p.local_qpn;
  req.responder_resources = p.responder_resources;
  req.initiator_depth = p.initiator_depth;
  req.remote_cm_response_timeout = config_.cm_response_timeout;
  req.transport_service_type = 0;  // RC
  req.end_to_end_flow_control = p.flow_control ? 1 : 0;
  req.starting_psn = p.starting_psn;
  req.local_cm_response_timeout = config_.cm_response_timeout;
  req.retry_count = p.retry_count;
  req.partition_key = p.pkey;
  req.path_mtu = p.path_mtu;
  req.rnr_retry_count = p.rnr_retry_count;
  req.max_cm_retries = config_.max_cm_retries;
  req.srq = p.srq ? 1 : 0;
  req.primary_local_lid = 0xffff;
  req.primary_remote_lid = 0xffff;
  req.primary_local_gid = p.local_gid;
  req.primary_remote_gid = p.peer.gid;
  req.primary_flow_label = p.flow_label;
  req.primary_traffic_class = p.traffic_class;
  req.primary_hop_limit = p.hop_limit;
  req.primary_sl = p.sl;
  req.primary_subnet_local = p.hop_limit <= 1 ? 1 : 0;  // cm.c cm_format_req
  req.primary_local_ack_timeout = cm_ack_timeout(config_.ca_ack_delay, config_.packet_life_time);
  const bool fits = wire::set_private_data(req.private_data, p.private_data);
  UROCE_CHECK(fits);
  return req;
}

Result<ConnId, CmError> CmEndpoint::connect(Instant now, const ConnectParams& p) {
  if (p.private_data.size() > wire::CmReq::kPrivateDataBytes || p.retry_count > 7 ||
      p.rnr_retry_count > 7 || p.path_mtu < 1 || p.path_mtu > 5 || p.local_qpn > 0xffffff ||
      p.starting_psn > 0xffffff || p.flow_label > 0xfffff || p.sl > 15) {
    return Err{CmError::kInvalidArgument};
  }
  auto made = new_conn();
  if (!made.ok()) return Err{made.error()};
  Conn& c = **made;
  c.active = true;
  c.peer = p.peer;
  c.service_id = p.service_id;
  c.tid = new_tid(c.local_id);
  c.qp.local_qpn = p.local_qpn;
  // The REQ's Starting PSN is the first PSN the active side receives (cm.c's
  // ib_send_cm_req keeps it as rq_psn; see ConnectParams).
  c.qp.rq_psn = p.starting_psn;
  c.qp.max_rd_atomic = p.initiator_depth;
  c.qp.max_dest_rd_atomic = p.responder_resources;
  c.qp.path_mtu = p.path_mtu;
  c.qp.retry_count = p.retry_count;
  c.qp.pkey = p.pkey;
  c.qp.remote_gid = p.peer.gid;
  c.qp.flow_label = p.flow_label;
  c.qp.traffic_class = p.traffic_class;
  c.qp.hop_limit = p.hop_limit;
  c.qp.sl = p.sl;

  c.request = send(c.peer, CmMad{c.tid, format_req(c, p)});
  set_state(c, State::kReqSent);
  // cm.c ib_send_cm_req: twice the path lifetime plus the peer's response time.
  const Duration timeout = cm_time_to_duration(config_.packet_life_time) * 2 +
                           cm_time_to_duration(config_.cm_response_timeout);
  arm(now, c, timeout, config_.max_cm_retries);
  return ConnId{c.local_id};
}

Result<QpAttributes, CmError> CmEndpoint::accept(Instant now, ConnId id, const AcceptParams& p) {
  Conn* c = find_mut(id);
  if (c == nullptr) return Err{CmError::kUnknownId};
  if (c->state != State::kReqRcvd && c->state != State::kMraReqSent) {
    return Err{CmError::kInvalidState};
  }
  if (p.private_data.size() > wire::CmRep::kPrivateDataBytes || p.rnr_retry_count > 7 ||
      p.local_qpn > 0xffffff || p.starting_psn > 0xffffff) {
    return Err{CmError::kInvalidArgument};
  }
  c->qp.local_qpn = p.local_qpn;
  c->qp.rq_psn = p.starting_psn;  // the REP's Starting PSN: what the passive side receives
  c->qp.max_dest_rd_atomic = std::min(p.responder_resources, c->offered_initiator_depth);
  c->qp.max_rd_atomic = std::min(p.initiator_depth, c->offered_responder_resources);
  c->qp.rnr_retry = p.rnr_retry_count;  // cm.c ib_send_cm_rep keeps the REP's count

  wire::CmRep rep;
  rep.local_comm_id = c->local_id;
  rep.remote_comm_id = c->remote_id;
  rep.local_qpn = p.local_qpn;
  rep.starting_psn = p.starting_psn;
  rep.responder_resources = c->qp.max_dest_rd_atomic;
  rep.initiator_depth = c->qp.max_rd_atomic;
  rep.target_ack_delay = config_.ca_ack_delay;
  rep.failover_accepted = 0;
  rep.end_to_end_flow_control = p.flow_control ? 1 : 0;
  rep.rnr_retry_count = p.rnr_retry_count;
  rep.srq = p.srq ? 1 : 0;
  rep.local_ca_guid = config_.local_ca_guid;
  const bool fits = wire::set_private_data(rep.private_data, p.private_data);
  UROCE_CHECK(fits);
  c->request = send(c->peer, CmMad{c->tid, rep});
  c->reply.reset();
  set_state(*c, State::kRepSent);
  // The REP's timer and retries come from the REQ (cm.c cm_req_handler), set on receipt.
  c->retries_left = c->max_retries;
  set_deadline(*c, now + c->timeout);
  return c->qp;
}

Result<ConnId, CmError> CmEndpoint::reject(Instant now, ConnId id, ConstBytes private_data) {
  Conn* c = find_mut(id);
  if (c == nullptr) return Err{CmError::kUnknownId};
  if (private_data.size() > wire::CmRej::kPrivateDataBytes) return Err{CmError::kInvalidArgument};
  switch (c->state) {
    case State::kReqRcvd:
    case State::kMraReqSent: {
      // cm.c cm_format_rej: a REQ_RCVD REJ carries local ID 0. The REJ stays (timewait) to
      // answer a retransmitted REQ with the same REJ.
      const std::uint32_t local = c->state == State::kReqRcvd ? 0 : c->local_id;
      std::array<std::byte, wire::kMadBytes> kept{};
      send_rej(c->peer, c->tid, local, c->remote_id, CmMsgResponse::kReq,
               CmRejReason::kConsumerDefined, private_data, &kept);
      enter_timewait(now, *c);
      c->reply = kept;
      return id;
    }
    case State::kRepRcvd:
    case State::kMraRepSent:
      send_rej(c->peer, c->tid, c->local_id, c->remote_id, CmMsgResponse::kRep,
               CmRejReason::kConsumerDefined, private_data, nullptr);
      erase(*c);
      return id;
    default:
      return Err{CmError::kInvalidState};
  }
}

Result<ConnId, CmError> CmEndpoint::establish(Instant now, ConnId id) {
  (void)now;
  Conn* c = find_mut(id);
  if (c == nullptr) return Err{CmError::kUnknownId};
  if (c->state != State::kRepRcvd && c->state != State::kMraRepSent) {
    return Err{CmError::kInvalidState};
  }
  wire::CmRtu rtu;
  rtu.local_comm_id = c->local_id;
  rtu.remote_comm_id = c->remote_id;
  c->reply = send(c->peer, CmMad{c->tid, rtu});
  set_state(*c, State::kEstablished);
  set_deadline(*c, Instant::never());
  emit(event_for(CmEventType::kEstablished, *c));
  return id;
}

Result<ConnId, CmError> CmEndpoint::disconnect(Instant now, ConnId id, ConstBytes private_data) {
  Conn* c = find_mut(id);
  if (c == nullptr) return Err{CmError::kUnknownId};
  if (c->state == State::kEstablished) {
    if (private_data.size() > wire::CmDreq::kPrivateDataBytes) {
      return Err{CmError::kInvalidArgument};
    }
    wire::CmDreq dreq;
    dreq.local_comm_id = c->local_id;
    dreq.remote_comm_id = c->remote_id;
    dreq.remote_qpn_eecn = c->qp.remote_qpn;
    const bool fits = wire::set_private_data(dreq.private_data, private_data);
    UROCE_CHECK(fits);
    c->tid = new_tid(c->local_id);
    c->request = send(c->peer, CmMad{c->tid, dreq});
    set_state(*c, State::kDreqSent);
    // cm.c ib_send_cm_dreq: the ID's response timeout, max_cm_retries.
    arm(now, *c, c->timeout, config_.max_cm_retries);
    return id;
  }
  if (c->state == State::kDreqRcvd) {
    if (private_data.size() > wire::CmDrep::kPrivateDataBytes) {
      return Err{CmError::kInvalidArgument};
    }
    const auto bytes = send_drep(c->peer, c->tid, c->local_id, c->remote_id, private_data);
    enter_timewait(now, *c);
    c->reply = bytes;
    return id;
  }
  return Err{CmError::kInvalidState};
}

void CmEndpoint::send_req_timeout_rej(const Conn& c) {
  // REJ Timeout of our REQ with our CA GUID as its ARI, by which a passive side that never told
  // us its ID finds its connection (cm.c cm_acquire_rejected_id).
  wire::CmRej rej;
  rej.local_comm_id = c.local_id;
  rej.remote_comm_id = c.remote_id;
  rej.message_rejected = static_cast<std::uint8_t>(CmMsgResponse::kReq);
  rej.reason = static_cast<std::uint16_t>(CmRejReason::kTimeout);
  rej.rejected_info_length = 8;
  store_be64(as_mut_bytes(rej.ari.data(), rej.ari.size()), 0, config_.local_ca_guid);
  send(c.peer, CmMad{c.tid, rej});
}

Result<ConnId, CmError> CmEndpoint::destroy(Instant now, ConnId id) {
  Conn* c = find_mut(id);
  if (c == nullptr) return Err{CmError::kUnknownId};
  switch (c->state) {
    case State::kReqSent:
    case State::kMraReqRcvd:
      send_req_timeout_rej(*c);
      erase(*c);
      return id;
    case State::kSidrReqSent:
      erase(*c);
      return id;
    case State::kReqRcvd:
    case State::kMraReqSent:
    case State::kRepRcvd:
    case State::kMraRepSent:
      (void)reject(now, id, {});
      break;
    case State::kRepSent:
    case State::kMraRepRcvd:
      send_rej(c->peer, c->tid, c->local_id, c->remote_id, CmMsgResponse::kOther,
               CmRejReason::kConsumerDefined, {}, nullptr);
      enter_timewait(now, *c);
      break;
    case State::kEstablished:
    case State::kDreqRcvd:
      (void)disconnect(now, id, {});
      break;
    case State::kSidrReqRcvd:
      (void)sidr_reply(now, id, wire::SidrStatus::kReject, 0, 0, {});
      break;
    case State::kDreqSent:
    case State::kTimewait:
      break;
  }
  if (Conn* left = find_mut(id)) left->destroyed = true;
  return id;
}

Result<ConnId, CmError> CmEndpoint::handle_comm_established(Instant now, ConnId id) {
  (void)now;
  Conn* c = find_mut(id);
  if (c == nullptr) return Err{CmError::kUnknownId};
  if (c->state == State::kEstablished) return id;
  if (c->state != State::kRepSent && c->state != State::kMraRepRcvd) {
    return Err{CmError::kInvalidState};
  }
  set_state(*c, State::kEstablished);
  stop_timer(*c);
  emit(event_for(CmEventType::kEstablished, *c));
  return id;
}

Result<ConnId, CmError> CmEndpoint::sidr_resolve(Instant now, const SidrParams& p) {
  if (p.private_data.size() > wire::CmSidrReq::kPrivateDataBytes) {
    return Err{CmError::kInvalidArgument};
  }
  auto made = new_conn();
  if (!made.ok()) return Err{made.error()};
  Conn& c = **made;
  c.active = true;
  c.sidr = true;
  c.peer = p.peer;
  c.service_id = p.service_id;
  c.tid = new_tid(c.local_id);
  wire::CmSidrReq req;
  req.request_id = c.local_id;
  req.partition_key = p.pkey;
  req.service_id = p.service_id;
  const bool fits = wire::set_private_data(req.private_data, p.private_data);
  UROCE_CHECK(fits);
  c.request = send(c.peer, CmMad{c.tid, req});
  set_state(c, State::kSidrReqSent);
  // cma.c cma_resolve_ib_udp: 2^(CMA_CM_RESPONSE_TIMEOUT-8) ms, CMA_MAX_CM_RETRIES.
  arm(now, c, cm_time_to_duration(config_.cm_response_timeout), config_.max_cm_retries);
  return ConnId{c.local_id};
}

Result<ConnId, CmError> CmEndpoint::sidr_reply(Instant now, ConnId id, wire::SidrStatus status,
                                               std::uint32_t qpn, std::uint32_t qkey,
                                               ConstBytes private_data) {
  Conn* c = find_mut(id);
  if (c == nullptr) return Err{CmError::kUnknownId};
  if (c->state != State::kSidrReqRcvd) return Err{CmError::kInvalidState};
  if (private_data.size() > wire::CmSidrRep::kPrivateDataBytes || qpn > 0xffffff) {
    return Err{CmError::kInvalidArgument};
  }
  wire::CmSidrRep rep;
  rep.request_id = c->remote_id;
  rep.status = static_cast<std::uint8_t>(status);
  rep.qpn = qpn;
  rep.service_id = c->service_id;
  rep.qkey = qkey;
  const bool fits = wire::set_private_data(rep.private_data, private_data);
  UROCE_CHECK(fits);
  const auto bytes = send(c->peer, CmMad{c->tid, rep});
  // cm.c forgets the request at once; keeping the reply through a timewait answers a
  // retransmitted SIDR_REQ with the same SIDR_REP instead of a second request to the user.
  enter_timewait(now, *c);
  c->reply = bytes;
  return id;
}

// ---- MADs ----

CmRx CmEndpoint::handle_mad(Instant now, const CmPeer& from, ConstBytes bytes) {
  auto parsed = wire::parse_cm_mad(bytes);
  if (!parsed.ok()) {
    ++counters_.rx_malformed;
    return CmRx::kMalformed;
  }
  const std::uint64_t tid = parsed->transaction_id;
  const CmRx rx = std::visit(
      [&](const auto& m) -> CmRx {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, wire::CmReq>) return on_req(now, from, tid, m);
        if constexpr (std::is_same_v<M, wire::CmMra>) return on_mra(now, from, m);
        if constexpr (std::is_same_v<M, wire::CmRej>) return on_rej(now, from, m);
        if constexpr (std::is_same_v<M, wire::CmRep>) return on_rep(now, from, tid, m);
        if constexpr (std::is_same_v<M, wire::CmRtu>) return on_rtu(now, from, m);
        if constexpr (std::is_same_v<M, wire::CmDreq>) return on_dreq(now, from, tid, m);
        if constexpr (std::is_same_v<M, wire::CmDrep>) return on_drep(now, from, m);
        if constexpr (std::is_same_v<M, wire::CmSidrReq>) return on_sidr_req(now, from, tid, m);
        if constexpr (std::is_same_v<M, wire::CmSidrRep>) return on_sidr_rep(now, from, m);
      },
      parsed->message);
  switch (rx) {
    case CmRx::kAccepted:
      ++counters_.rx_accepted;
      break;
    case CmRx::kDuplicate:
      ++counters_.rx_duplicate;
      break;
    case CmRx::kAnswered:
      ++counters_.rx_answered;
      break;
    case CmRx::kDropped:
      ++counters_.rx_dropped;
      break;
    case CmRx::kMalformed:
      ++counters_.rx_malformed;
      break;
  }
  return rx;
}

void CmEndpoint::on_dup_req(Conn& c, std::uint64_t tid, const wire::CmReq& m) {
  switch (c.state) {
    case State::kMraReqSent:
      resend(c.peer, *c.reply);  // cm_dup_req_handler: the MRA again
      return;
    case State::kRepSent:
    case State::kMraRepRcvd:
      // The same REP again. cm.c drops it and lets the REP's own timer resend; answering at
      // once recovers a lost REP sooner and the active side ignores the duplicate.
      resend(c.peer, *c.request);
      return;
    case State::kTimewait:
      if (c.reply.has_value() && load_be16(*c.reply, wire::kMadOffAttrId) ==
                                     static_cast<std::uint16_t>(wire::CmAttr::kRej)) {
        resend(c.peer, *c.reply);  // the consumer's REJ again
      } else {
        // cm_dup_req_handler: a REQ for a connection in timewait is stale.
        send_rej(c.peer, tid, c.local_id, m.local_comm_id, CmMsgResponse::kReq,
                 CmRejReason::kStaleConn, {}, nullptr);
      }
      return;
    default:
      return;  // REQ_RCVD (the user has it), ESTABLISHED and later: dropped
  }
}

// A passive connection from a REQ: what the QP takes from it, and the REP's timer.
void CmEndpoint::start_passive(Instant now, Conn& c, const CmPeer& from, std::uint64_t tid,
                               const wire::CmReq& m) {
  c.active = false;
  c.peer = from;
  c.service_id = m.service_id;
  c.remote_id = m.local_comm_id;
  c.tid = tid;
  c.offered_responder_resources = m.responder_resources;
  c.offered_initiator_depth = m.initiator_depth;
  c.qp.remote_qpn = m.local_qpn;
  c.qp.sq_psn = m.starting_psn;  // the passive side sends from the REQ's Starting PSN
  c.qp.path_mtu = m.path_mtu;
  c.qp.ack_timeout = m.primary_local_ack_timeout;
  c.qp.retry_count = m.retry_count;
  c.qp.srq = m.srq != 0;
  c.qp.pkey = m.partition_key;
  c.qp.remote_gid = from.gid;
  c.qp.flow_label = m.primary_flow_label;
  c.qp.traffic_class = m.primary_traffic_class;
  c.qp.hop_limit = m.primary_hop_limit;
  c.qp.sl = m.primary_sl;
  c.qp.selective_repeat = config_.selective_repeat && wire::is_uroce_guid(m.local_ca_guid);
  c.qp.peer_uroce = wire::is_uroce_guid(m.local_ca_guid);
  c.qp.peer_offers_key = wire::offers_key(m.local_ca_guid);
  c.peer_rnr_retry = m.rnr_retry_count;
  // cm.c cm_req_handler: the REP waits the REQ's local response timeout, retried the REQ's
  // max CM retries.
  c.timeout = cm_time_to_duration(m.local_cm_response_timeout);
  c.max_retries = m.max_cm_retries;
  set_state(c, State::kReqRcvd);
  // How long the active side may go on retransmitting this REQ: its retries times its timeout
  // (twice the path lifetime, which cm.c derives from the REQ's ACK timeout, plus our response
  // time; an MRA's service timeout instead when we send one), plus one more lifetime in flight.
  const auto life = static_cast<std::uint8_t>(
      m.primary_local_ack_timeout > 0 ? m.primary_local_ack_timeout - 1 : 0);
  Duration req_timeout =
      cm_time_to_duration(life) * 2 + cm_time_to_duration(m.remote_cm_response_timeout);
  if (config_.send_mra) {
    req_timeout =
        std::max(req_timeout,
                 cm_time_to_duration(config_.mra_service_timeout) +
                     cm_time_to_duration(static_cast<std::uint8_t>(config_.packet_life_time + 1)));
  }
  c.req_retransmits_end =
      now + req_timeout * (std::int64_t{m.max_cm_retries} + 1) + cm_time_to_duration(life) * 2;
  by_remote_[RemoteKey{false, from, m.local_comm_id}] = c.local_id;
  by_remote_qpn_[{from, m.local_qpn}] = c.local_id;
}

CmRx CmEndpoint::on_req(Instant now, const CmPeer& from, std::uint64_t tid, const wire::CmReq& m) {
  // cm.c cm_match_req: the same remote ID from the same peer is a retransmission.
  if (Conn* c = find_passive(false, from, m.local_comm_id)) {
    on_dup_req(*c, tid, m);
    return CmRx::kDuplicate;
  }
  // cm.c cm_insert_remote_qpn: a new REQ from a QP that is still connected here is stale.
  if (by_remote_qpn_.contains({from, m.local_qpn})) {
    send_rej(from, tid, 0, m.local_comm_id, CmMsgResponse::kReq, CmRejReason::kStaleConn, {},
             nullptr);
    return CmRx::kAnswered;
  }
  auto listener = listeners_.find(m.service_id);
  if (listener == listeners_.end()) {
    // cm.c cm_req_handler: no listener, REJ Invalid Service ID.
    send_rej(from, tid, 0, m.local_comm_id, CmMsgResponse::kReq, CmRejReason::kInvalidServiceId, {},
             nullptr);
    return CmRx::kAnswered;
  }
  if (m.transport_service_type != 0 || m.path_mtu < 1 || m.path_mtu > 5) {
    send_rej(from, tid, 0, m.local_comm_id, CmMsgResponse::kReq,
             m.transport_service_type != 0 ? CmRejReason::kInvalidTransportType
                                           : CmRejReason::kInvalidMtu,
             {}, nullptr);
    return CmRx::kAnswered;
  }
  auto made = new_conn();
  if (!made.ok()) {
    send_rej(from, tid, 0, m.local_comm_id, CmMsgResponse::kReq, CmRejReason::kNoResources, {},
             nullptr);
    return CmRx::kAnswered;
  }
  Conn& c = **made;
  start_passive(now, c, from, tid, m);
  c.listener = listener->second;
  if (config_.send_mra) {
    c.reply = send_mra(c, CmMsgResponse::kReq);
    set_state(c, State::kMraReqSent);
  }
  CmEvent e = event_for(CmEventType::kConnectRequest, c);
  e.offered_responder_resources = m.responder_resources;
  e.offered_initiator_depth = m.initiator_depth;
  copy_private_data(e, m.private_data);
  emit(e);
  return CmRx::kAccepted;
}

CmRx CmEndpoint::on_mra(Instant now, const CmPeer& from, const wire::CmMra& m) {
  Conn* c = find(m.remote_comm_id, from);
  if (c == nullptr) return CmRx::kDropped;
  const auto what = static_cast<CmMsgResponse>(m.message_mraed);
  const bool for_req = what == CmMsgResponse::kReq && c->state == State::kReqSent;
  const bool for_rep =
      what == CmMsgResponse::kRep && c->state == State::kRepSent && m.local_comm_id == c->remote_id;
  if (!for_req && !for_rep) {
    return (c->state == State::kMraReqRcvd || c->state == State::kMraRepRcvd) ? CmRx::kDuplicate
                                                                              : CmRx::kDropped;
  }
  if (for_req) c->remote_id = m.local_comm_id;
  set_state(*c, for_req ? State::kMraReqRcvd : State::kMraRepRcvd);
  // cm.c cm_mra_handler: wait the service timeout plus the path's timeout before the next try.
  set_deadline(*c,
               now + cm_time_to_duration(m.service_timeout) +
                   cm_time_to_duration(static_cast<std::uint8_t>(config_.packet_life_time + 1)));
  return CmRx::kAccepted;
}

CmRx CmEndpoint::on_rej(Instant now, const CmPeer& from, const wire::CmRej& m) {
  Conn* c = find(m.remote_comm_id, from);
  if (c == nullptr && m.reason == static_cast<std::uint16_t>(CmRejReason::kTimeout) &&
      m.remote_comm_id == 0) {
    // cm.c cm_acquire_rejected_id: a REJ Timeout of a REQ names the connection by the sender's
    // ID (and its CA GUID in the ARI; the peer's GID stands in for it here).
    c = find_passive(false, from, m.local_comm_id);
  }
  if (c == nullptr) return CmRx::kDropped;
  // cm.c cm_acquire_rejected_id: once the peer's ID is known, the REJ must carry it (a REJ of a
  // REQ may carry 0, a timewait one the peer's ID).
  if (c->remote_id != 0 && m.local_comm_id != 0 && m.local_comm_id != c->remote_id) {
    return CmRx::kDropped;
  }
  CmEvent e = event_for(CmEventType::kRejected, *c);
  e.reason = static_cast<CmRejReason>(m.reason);
  copy_private_data(e, m.private_data);
  switch (c->state) {
    case State::kReqSent:
    case State::kMraReqRcvd:
    case State::kRepRcvd:
    case State::kMraRepSent:
      emit(e);
      erase(*c);
      return CmRx::kAccepted;
    case State::kReqRcvd:
    case State::kMraReqSent:
    case State::kRepSent:
    case State::kMraRepRcvd:
      emit(e);
      enter_timewait(now, *c);
      return CmRx::kAccepted;
    case State::kEstablished:
      // cm.c cm_rej_handler: a REJ once up ends the connection (timewait).
      e.type = CmEventType::kDisconnected;
      emit(e);
      enter_timewait(now, *c);
      return CmRx::kAccepted;
    default:
      return CmRx::kDropped;
  }
}

CmRx CmEndpoint::on_rep(Instant now, const CmPeer& from, std::uint64_t tid, const wire::CmRep& m) {
  (void)now;
  Conn* c = find(m.remote_comm_id, from);
  if (c == nullptr || !c->active) {
    // cm.c cm_rep_handler: a REP for no ID gets REJ Invalid Communication ID.
    send_rej(from, tid, m.remote_comm_id, m.local_comm_id, CmMsgResponse::kOther,
             CmRejReason::kInvalidCommId, {}, nullptr);
    return CmRx::kAnswered;
  }
  switch (c->state) {
    case State::kReqSent:
    case State::kMraReqRcvd:
      break;
    case State::kMraRepSent:
      if (m.local_comm_id == c->remote_id) resend(c->peer, *c->reply);  // cm_dup_rep_handler
      return CmRx::kDuplicate;
    case State::kEstablished:
      if (m.local_comm_id == c->remote_id) resend(c->peer, *c->reply);  // the RTU again
      return CmRx::kDuplicate;
    case State::kRepRcvd:
      return CmRx::kDuplicate;
    default:
      return CmRx::kDropped;
  }
  c->remote_id = m.local_comm_id;
  c->qp.remote_qpn = m.local_qpn;
  c->qp.sq_psn = m.starting_psn;  // the active side sends from the REP's Starting PSN
  // cm.c cm_rep_handler: our initiator depth is the peer's responder resources and vice versa.
  c->qp.max_rd_atomic = m.responder_resources;
  c->qp.max_dest_rd_atomic = m.initiator_depth;
  c->qp.rnr_retry = m.rnr_retry_count;
  c->qp.srq = m.srq != 0;
  c->qp.ack_timeout = cm_ack_timeout(m.target_ack_delay, config_.packet_life_time);
  c->qp.selective_repeat = config_.selective_repeat && wire::is_uroce_guid(m.local_ca_guid);
  c->qp.peer_uroce = wire::is_uroce_guid(m.local_ca_guid);
  stop_timer(*c);
  set_state(*c, State::kRepRcvd);
  if (config_.send_mra && config_.send_mra_on_rep) {
    c->reply = send_mra(*c, CmMsgResponse::kRep);
    set_state(*c, State::kMraRepSent);
  }
  CmEvent e = event_for(CmEventType::kConnectResponse, *c);
  copy_private_data(e, m.private_data);
  emit(e);
  return CmRx::kAccepted;
}

CmRx CmEndpoint::on_rtu(Instant now, const CmPeer& from, const wire::CmRtu& m) {
  (void)now;
  Conn* c = find(m.remote_comm_id, from);
  if (c == nullptr || m.local_comm_id != c->remote_id) return CmRx::kDropped;
  if (c->state != State::kRepSent && c->state != State::kMraRepRcvd) return CmRx::kDuplicate;
  set_state(*c, State::kEstablished);
  stop_timer(*c);
  emit(event_for(CmEventType::kEstablished, *c));
  return CmRx::kAccepted;
}

CmRx CmEndpoint::on_dreq(Instant now, const CmPeer& from, std::uint64_t tid,
                         const wire::CmDreq& m) {
  Conn* c = find(m.remote_comm_id, from);
  if (c == nullptr || m.local_comm_id != c->remote_id) {
    // cm.c cm_dreq_handler -> cm_issue_drep: a DREQ for no ID gets a DREP anyway, so that the
    // peer leaves DREQ_SENT at once.
    send_drep(from, tid, m.remote_comm_id, m.local_comm_id, {});
    return CmRx::kAnswered;
  }
  if (m.remote_qpn_eecn != c->qp.local_qpn) return CmRx::kDropped;  // cm.c: not our QP
  switch (c->state) {
    case State::kRepSent:
    case State::kMraRepRcvd:
    case State::kEstablished: {
      stop_timer(*c);
      c->tid = tid;
      set_state(*c, State::kDreqRcvd);
      CmEvent e = event_for(CmEventType::kDisconnected, *c);
      copy_private_data(e, m.private_data);
      emit(e);
      return CmRx::kAccepted;
    }
    case State::kDreqSent: {
      // Both sides disconnect at once: answer, and the DREQ we sent ends too.
      const auto bytes = send_drep(from, tid, c->local_id, c->remote_id, {});
      enter_timewait(now, *c);
      c->reply = bytes;
      CmEvent e = event_for(CmEventType::kDisconnected, *c);
      copy_private_data(e, m.private_data);
      emit(e);
      return CmRx::kAccepted;
    }
    case State::kTimewait:
      // cm.c cm_dreq_handler: in timewait, the DREP again (also after a REP timeout or a REJ,
      // so that the peer's DREQ_SENT ends at once).
      send_drep(from, tid, c->local_id, c->remote_id, {});
      return CmRx::kDuplicate;
    case State::kDreqRcvd:
      return CmRx::kDuplicate;
    default:
      return CmRx::kDropped;
  }
}

CmRx CmEndpoint::on_drep(Instant now, const CmPeer& from, const wire::CmDrep& m) {
  Conn* c = find(m.remote_comm_id, from);
  if (c == nullptr) return CmRx::kDropped;
  if (c->state != State::kDreqSent) return CmRx::kDuplicate;
  CmEvent e = event_for(CmEventType::kDisconnected, *c);
  copy_private_data(e, m.private_data);
  emit(e);
  enter_timewait(now, *c);
  return CmRx::kAccepted;
}

CmRx CmEndpoint::on_sidr_req(Instant now, const CmPeer& from, std::uint64_t tid,
                             const wire::CmSidrReq& m) {
  if (Conn* c = find_passive(true, from, m.request_id)) {
    if (c->state == State::kTimewait && c->reply.has_value()) resend(from, *c->reply);
    return CmRx::kDuplicate;  // cm.c cm_insert_remote_sidr: dropped
  }
  auto listener = listeners_.find(m.service_id);
  auto made =
      listener == listeners_.end() ? Result<Conn*, CmError>(Err{CmError::kUnknownId}) : new_conn();
  if (!made.ok()) {
    // cm.c cm_sidr_req_handler: no listener, SIDR_REP Unsupported.
    wire::CmSidrRep rep;
    rep.request_id = m.request_id;
    rep.status = static_cast<std::uint8_t>(wire::SidrStatus::kUnsupported);
    rep.service_id = m.service_id;
    send(from, CmMad{tid, rep});
    return CmRx::kAnswered;
  }
  Conn& c = **made;
  c.active = false;
  c.sidr = true;
  c.peer = from;
  c.listener = listener->second;
  c.service_id = m.service_id;
  c.remote_id = m.request_id;
  c.tid = tid;
  c.qp.pkey = m.partition_key;
  set_state(c, State::kSidrReqRcvd);
  // A SIDR_REQ does not say how long its sender retries; assume rdma_cm's (and ours): max CM
  // retries of 2^(CMA_CM_RESPONSE_TIMEOUT-8) ms, plus two lifetimes in flight.
  c.req_retransmits_end = now +
                          cm_time_to_duration(config_.cm_response_timeout) *
                              (std::int64_t{config_.max_cm_retries} + 1) +
                          cm_time_to_duration(config_.packet_life_time) * 2;
  by_remote_[RemoteKey{true, from, m.request_id}] = c.local_id;
  CmEvent e = event_for(CmEventType::kSidrRequest, c);
  copy_private_data(e, m.private_data);
  emit(e);
  return CmRx::kAccepted;
}

CmRx CmEndpoint::on_sidr_rep(Instant now, const CmPeer& from, const wire::CmSidrRep& m) {
  (void)now;
  Conn* c = find(m.request_id, from);
  if (c == nullptr || c->state != State::kSidrReqSent) return CmRx::kDropped;
  CmEvent e = event_for(CmEventType::kSidrReply, *c);
  e.sidr_status = static_cast<wire::SidrStatus>(m.status);
  e.sidr_qpn = m.qpn;
  e.sidr_qkey = m.qkey;
  copy_private_data(e, m.private_data);
  emit(e);
  erase(*c);
  return CmRx::kAccepted;
}

// ---- time ----

Instant CmEndpoint::poll_timeout() const {
  return timers_.empty() ? Instant::never() : timers_.begin()->first;
}

void CmEndpoint::handle_timeout(Instant now) {
  // Collect first (the timer index, earliest first): a timeout may erase its connection or
  // arm it again.
  std::vector<std::uint32_t> due;
  for (auto it = timers_.begin(); it != timers_.end() && it->first <= now; ++it) {
    due.push_back(it->second);
  }
  for (std::uint32_t id : due) {
    auto it = conns_.find(id);
    if (it != conns_.end()) on_timeout(now, it->second);
  }
}

bool CmEndpoint::retries_request(State s) {
  return s == State::kReqSent || s == State::kMraReqRcvd || s == State::kRepSent ||
         s == State::kMraRepRcvd || s == State::kDreqSent || s == State::kSidrReqSent;
}

void CmEndpoint::handle_peer_unreachable(Instant now, const CmPeer& peer) {
  ++counters_.peer_unreachable;
  // Collected first: giving up erases connections or moves them out of the index.
  std::vector<std::uint32_t> ids;
  for (auto it = retrying_.lower_bound({peer, 0u}); it != retrying_.end() && it->first == peer;
       ++it) {
    ids.push_back(it->second);
  }
  for (std::uint32_t id : ids) {
    auto it = conns_.find(id);
    UROCE_ASSERT(it != conns_.end());
    ++counters_.unreachable_ended;
    give_up(now, it->second, true);
  }
}

void CmEndpoint::on_timeout(Instant now, Conn& c) {
  if (retries_request(c.state) && c.retries_left > 0) {
    UROCE_ASSERT(c.request.has_value());
    --c.retries_left;
    resend(c.peer, *c.request);
    ++counters_.retransmits;
    set_deadline(c, now + c.timeout);
    return;
  }
  if (retries_request(c.state)) {
    give_up(now, c, false);
    return;
  }
  if (c.state == State::kTimewait) {
    // A SIDR reply's tombstone ends silently: its user has been done with it since the reply.
    if (!c.sidr) emit(event_for(CmEventType::kTimewaitExit, c));
    erase(c);
    return;
  }
  UROCE_ASSERT(false);  // no other state arms a timer
  set_deadline(c, Instant::never());
}

void CmEndpoint::give_up(Instant now, Conn& c, bool peer_gone) {
  switch (c.state) {
    case State::kReqSent:
    case State::kMraReqRcvd: {
      // cm.c: IB_CM_REQ_ERROR (rdma_cm: UNREACHABLE); destroying the ID then sends REJ Timeout.
      if (!peer_gone) send_req_timeout_rej(c);
      CmEvent e = event_for(CmEventType::kUnreachable, c);
      e.reason = CmRejReason::kTimeout;
      emit(e);
      erase(c);
      return;
    }
    case State::kRepSent:
    case State::kMraRepRcvd: {
      // No RTU. cm.c reports IB_CM_REP_ERROR and forgets the ID; uroce also sends REJ Timeout,
      // so that an active side that got a REP does not stay up alone, and keeps a timewait that
      // answers a late REQ with REJ Stale Connection.
      if (!peer_gone) {
        send_rej(c.peer, c.tid, c.local_id, c.remote_id, CmMsgResponse::kOther,
                 CmRejReason::kTimeout, {}, nullptr);
      }
      CmEvent e = event_for(CmEventType::kUnreachable, c);
      e.reason = CmRejReason::kTimeout;
      emit(e);
      enter_timewait(now, c);
      return;
    }
    case State::kDreqSent:
      // cm.c: IB_CM_DREQ_ERROR, timewait; rdma_cm reports DISCONNECTED. With the peer gone
      // (no CM left there to answer) the same: a DREP would have said no more.
      if (!peer_gone) ++counters_.dreq_timeouts;
      emit(event_for(CmEventType::kDisconnected, c));
      enter_timewait(now, c);
      return;
    case State::kSidrReqSent: {
      CmEvent e = event_for(CmEventType::kUnreachable, c);
      e.reason = CmRejReason::kTimeout;
      emit(e);
      erase(c);
      return;
    }
    default:
      UROCE_ASSERT(false);  // retries_request() states only
      return;
  }
}

std::optional<CmOutMad> CmEndpoint::poll_transmit() {
  if (tx_.empty()) return std::nullopt;
  CmOutMad out = tx_.front();
  tx_.pop_front();
  return out;
}

std::optional<CmEvent> CmEndpoint::poll_event() {
  if (events_.empty()) return std::nullopt;
  CmEvent e = events_.front();
  events_.pop_front();
  return e;
}

}  // namespace uroce::cm

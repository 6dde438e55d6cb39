#include "devd/cm_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "verbs/address.h"
#include "wire/builder.h"
#include "wire/cm_mad.h"
#include "wire/opcode.h"

namespace uroce::engine {

namespace {

// rdma_cm's event types and values (rdma_cma.h; the header is not needed here).
enum : std::uint32_t {
  kAddrResolved = 0,
  kAddrError = 1,
  kRouteResolved = 2,
  kConnectRequest = 4,
  kConnectResponse = 5,
  kUnreachable = 7,
  kRejected = 8,
  kEstablished = 9,
  kDisconnected = 10,
  kTimewaitExit = 15,
};
constexpr std::uint32_t kQptUd = 4;                 // IBV_QPT_UD
constexpr std::uint32_t kRdmaUdpQkey = 0x01234567;  // RDMA_UDP_QKEY
// The kernel's ephemeral port range (net.ipv4.ip_local_port_range's default).
constexpr std::uint16_t kEphemeralFirst = 32768;
constexpr std::uint16_t kEphemeralLast = 60999;

bool is_port_space(std::uint32_t ps) {
  return ps == static_cast<std::uint32_t>(wire::RdmaPortSpace::kTcp) ||
         ps == static_cast<std::uint32_t>(wire::RdmaPortSpace::kUdp) ||
         ps == static_cast<std::uint32_t>(wire::RdmaPortSpace::kIpoib) ||
         ps == static_cast<std::uint32_t>(wire::RdmaPortSpace::kIb);
}

std::uint64_t service_of(std::uint32_t ps, std::uint16_t port) {
  return wire::rdma_service_id(static_cast<wire::RdmaPortSpace>(ps), port);
}

bool is_unspecified(const devd::CmAddr& a) {
  for (std::uint8_t b : a.bytes) {
    if (b != 0) return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<CmServer>, Error> CmServer::open(const wire::IpAddress& ip,
                                                        std::uint16_t port, int sink_fd,
                                                        std::uint64_t seed,
                                                        const std::string& capture_path,
                                                        Duration listen_grace) {
  datapath::UdpOptions o(ip, port);
  o.bound_fd = sink_fd;
  o.gso = false;
  o.gro = false;
  o.rcvbuf_bytes = 0;
  o.tx_batch = 16;
  auto dp = datapath::UdpDatapath::open(o);
  if (!dp.ok()) return Err{dp.error()};
  // The CM's MADs leave from a socket of their own, outside the group, on a port the kernel
  // picks: an ICMP port unreachable that one draws comes back to it (to the group, it would go
  // to whichever member the addresses hash to: a context's socket, which ignores it).
  datapath::UdpOptions mo(ip, 0);
  mo.gso = false;
  mo.gro = false;
  mo.rcvbuf_bytes = 0;
  mo.tx_batch = 16;
  mo.recv_errors = true;
  auto mad_dp = datapath::UdpDatapath::open(mo);
  if (!mad_dp.ok()) return Err{mad_dp.error()};
  std::unique_ptr<CmServer> s(
      new CmServer(ip, port, std::move(dp.value()), std::move(mad_dp.value()), seed, listen_grace));
  if (!capture_path.empty()) {
    // Another device's coordinator may have been started with the same UROCE_DEVD_PCAP.
    std::string chosen;
    auto w = capture::PcapWriter::open_unshared(capture_path, &chosen);
    if (!w.ok()) return Err{Error(EIO, "capture: " + w.error())};
    if (chosen != capture_path) {
      std::fprintf(stderr, "uroce-devd: %s is another capture's; capturing to %s\n",
                   capture_path.c_str(), chosen.c_str());
    }
    s->capture_ = std::make_unique<capture::PcapWriter>(std::move(w.value()));
    capture::PcapWriter* writer = s->capture_.get();
    const auto tap = [writer](ConstBytes frame, bool) {
      // Wall-clock timestamps, as a device's capture has (udp_device.cc): they line up.
      const auto t = std::chrono::system_clock::now().time_since_epoch();
      writer->write(frame, std::chrono::duration_cast<std::chrono::nanoseconds>(t).count());
    };
    s->dp_->set_tap(tap);
    s->mad_dp_->set_tap(tap);
  }
  return s;
}

namespace {
cm::CmConfig config_for(const wire::IpAddress& ip, std::uint64_t seed) {
  cm::CmConfig c;
  c.seed = seed;
  c.local_ca_guid = verbs::node_guid_from_ip(ip);
  // As cma.c does for a user-space ID: an MRA on every REQ received, so that the peer waits for
  // an application that takes its time to accept (cmtime -c 10000: without it the active side
  // retransmitted thousands of REQs). cma.c sends one on REPs too; uroce does not: the passive
  // side would then wait the MRA's service timeout (about a minute) to send the REP again when
  // the RTU was lost, where without it a REP again after the REQ's response timeout draws the
  // RTU (ucmatose -c 300 under 3% CM MAD loss: 138 s with it).
  c.send_mra = true;
  c.send_mra_on_rep = false;
  return c;
}

// The CM's secret from a message's pre-shared key (CmMsg::psk): none without one.
std::optional<seal::CmPsk> psk_of(const devd::CmMsg& m) {
  if (m.seal_mode == 0 || (m.psk_bytes != 16 && m.psk_bytes != 32)) return std::nullopt;
  seal::Key k;
  k.size = m.psk_bytes;
  std::memcpy(k.bytes.data(), m.psk, m.psk_bytes);
  auto c = seal::cm_psk_from(k);
  k.bytes.fill(std::byte{0});
  if (!c.ok()) return std::nullopt;
  return c.value();
}

// Per-connection keys (cm_keys.h): connections keyed, left plain, refused under require.
std::string key_stats(const CmKeyCounters& k) {
  return "keys_agreed " + std::to_string(k.agreed) + " keys_plain " +
         std::to_string(k.plain_peers) + " keys_refused " + std::to_string(k.refused) +
         " keys_auth_failed " + std::to_string(k.auth_failed) + " keys_failed " +
         std::to_string(k.failures) + " keys_bad_extension " + std::to_string(k.bad_extension);
}

// The rdma_cm port space and port a REQ or SIDR_REQ asks for; nullopt for any other MAD.
std::optional<wire::RdmaServiceId> requested_service(ConstBytes mad) {
  auto m = wire::parse_cm_mad(mad);
  if (!m.ok()) return std::nullopt;
  if (const auto* req = std::get_if<wire::CmReq>(&m->message)) {
    return wire::parse_rdma_ip_service_id(req->service_id);
  }
  if (const auto* sidr = std::get_if<wire::CmSidrReq>(&m->message)) {
    return wire::parse_rdma_ip_service_id(sidr->service_id);
  }
  return std::nullopt;
}
}  // namespace

CmServer::CmServer(const wire::IpAddress& ip, std::uint16_t port,
                   std::unique_ptr<datapath::UdpDatapath> dp,
                   std::unique_ptr<datapath::UdpDatapath> mad_dp, std::uint64_t seed,
                   Duration listen_grace)
    : ip_(ip),
      port_(port),
      dp_(std::move(dp)),
      mad_dp_(std::move(mad_dp)),
      cm_(config_for(ip, seed)),
      keys_(verbs::gid_from_ip(ip).raw),
      psn_(static_cast<std::uint32_t>(seed) & 0xffffff),
      next_ephemeral_(static_cast<std::uint16_t>(
          kEphemeralFirst + (seed >> 24) % (kEphemeralLast - kEphemeralFirst + 1))),
      listen_grace_(listen_grace) {}

CmServer::~CmServer() {
  for (const auto& [fd, c] : clients_) ::close(fd);
}

void CmServer::add_client(int fd, pid_t pid) {
  Client c;
  c.pid = pid;
  clients_[fd] = std::move(c);
}

void CmServer::add_pollfds(std::vector<pollfd>& fds) const {
  // A client with a queue is not read until its socket has taken it (a hang-up is reported
  // either way).
  for (const auto& [fd, c] : clients_) {
    fds.push_back({fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
  }
}

devd::CmAddr CmServer::local_addr(std::uint16_t port) const {
  devd::CmAddr a;
  a.family = ip_.v6 ? 6 : 4;
  std::memcpy(a.bytes, ip_.bytes.data(), 16);
  a.port = port;
  return a;
}

cm::Gid CmServer::gid_of(const devd::CmAddr& a) const {
  wire::IpAddress ip;
  ip.v6 = a.family == 6;
  std::memcpy(ip.bytes.data(), a.bytes, 16);
  const uroce::Gid g = verbs::gid_from_ip(ip);
  cm::Gid out{};
  std::memcpy(out.data(), g.raw.data(), 16);
  return out;
}

CmServer::Id* CmServer::id_of(int fd, std::uint32_t number) {
  auto it = ids_.find(number);
  if (it == ids_.end() || it->second.client != fd) return nullptr;
  return &it->second;
}

CmServer::Id* CmServer::id_by_conn(cm::ConnId c) {
  auto it = by_conn_.find(c.value);
  if (it == by_conn_.end()) return nullptr;
  auto id = ids_.find(it->second);
  return id == ids_.end() ? nullptr : &id->second;
}

int CmServer::bind_id(Id& id, std::uint16_t port) {
  if (id.bound) return EINVAL;
  if (port == 0) {
    const std::uint32_t span = kEphemeralLast - kEphemeralFirst + 1;
    for (std::uint32_t i = 0; i < span; ++i) {
      const std::uint16_t p = next_ephemeral_;
      next_ephemeral_ = p == kEphemeralLast ? kEphemeralFirst : static_cast<std::uint16_t>(p + 1);
      if (ports_.count({id.ps, p}) == 0) {
        port = p;
        break;
      }
    }
    if (port == 0) return EADDRNOTAVAIL;
  } else if (ports_.count({id.ps, port}) != 0) {
    // Perhaps held by an ID of a process that has exited (its server, restarted at once):
    // reap the clients whose connection is closed, as the kernel has by then.
    reap_closed_clients();
    if (ports_.count({id.ps, port}) != 0) return EADDRINUSE;
  }
  ports_.insert({id.ps, port});
  id.bound = true;
  id.src.port = port;
  return 0;
}

void CmServer::destroy_id(Instant now, Id& id) {
  if (id.has_conn) {
    (void)cm_.destroy(now, id.conn);
    by_conn_.erase(id.conn.value);
  }
  if (id.listening) {
    (void)cm_.stop_listen(id.listen);
    by_listen_.erase(id.listen.value);
  }
  if (id.bound && id.listener == 0) ports_.erase({id.ps, id.src.port});
  ids_.erase(id.number);
}

void CmServer::reap_closed_clients() {
  std::vector<int> closed;
  for (const auto& [fd, c] : clients_) {
    pollfd p{fd, POLLRDHUP, 0};
    if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) != 0) {
      closed.push_back(fd);
    }
  }
  for (int fd : closed) pending_drops_.push_back(fd);
  // Their IDs go now (the ports with them); the connections are closed after the call.
  for (int fd : closed) {
    std::vector<std::uint32_t> mine;
    for (const auto& [n, id] : ids_) {
      if (id.client == fd) mine.push_back(n);
    }
    for (std::uint32_t n : mine) destroy_id(reap_now_, ids_.at(n));
  }
}

void CmServer::flush_drops(Instant now) {
  while (!pending_drops_.empty()) {
    const int fd = pending_drops_.back();
    pending_drops_.pop_back();
    if (clients_.count(fd) != 0) drop_client(now, fd);
  }
}

void CmServer::drop_client(Instant now, int fd) {
  // Its fd number is free for reuse from here on: nothing may still name it for a drop.
  pending_drops_.erase(std::remove(pending_drops_.begin(), pending_drops_.end(), fd),
                       pending_drops_.end());
  std::vector<std::uint32_t> mine;
  for (const auto& [n, id] : ids_) {
    if (id.client == fd) mine.push_back(n);
  }
  for (std::uint32_t n : mine) destroy_id(now, ids_.at(n));
  clients_.erase(fd);
  ::close(fd);
  ++counters_.client_drops;
  pump(now);
}

void CmServer::send(int fd, const devd::CmMsg& m) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  Client& c = it->second;
  // Never wait for a client: what its socket does not take waits in its queue. A client that
  // is merely slow (cmtime's server, reading a burst of 1000 CONNECT_REQUESTs) must not lose its
  // IDs; one whose socket fails, or whose queue outgrows any backlog, is dropped.
  if (c.out.empty()) {
    const ssize_t n = ::send(fd, &m, sizeof m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof m)) return;
    if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
      pending_drops_.push_back(fd);
      return;
    }
  }
  if (c.out.size() >= kMaxQueued) {
    pending_drops_.push_back(fd);
    return;
  }
  c.out.push_back(m);
  c.out_source.push_back(sending_from_);
  if (m.type == devd::CmMsgType::kEvent && m.event == kConnectRequest) {
    ++c.queued_requests[m.listen_id];
    if (sending_from_) ++c.queued_from[{m.listen_id, *sending_from_}];
  }
}

bool CmServer::flush_out(int fd, Client& c) {
  while (!c.out.empty()) {
    const devd::CmMsg& m = c.out.front();
    const ssize_t n = ::send(fd, &m, sizeof m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n != static_cast<ssize_t>(sizeof m)) return false;
    if (m.type == devd::CmMsgType::kEvent && m.event == kConnectRequest) {
      auto q = c.queued_requests.find(m.listen_id);
      if (q != c.queued_requests.end() && --q->second == 0) c.queued_requests.erase(q);
      if (const auto& from = c.out_source.front()) {
        auto f = c.queued_from.find({m.listen_id, *from});
        if (f != c.queued_from.end() && --f->second == 0) c.queued_from.erase(f);
      }
    }
    c.out.pop_front();
    c.out_source.pop_front();
  }
  return true;
}

bool CmServer::over_backlog(ConstBytes mad, const Source& from) {
  const auto sid = requested_service(mad);
  if (!sid) return false;
  const auto ps = static_cast<std::uint32_t>(sid->port_space);
  for (const auto& [listen, number] : by_listen_) {
    auto id = ids_.find(number);
    if (id == ids_.end() || id->second.ps != ps || id->second.src.port != sid->port) continue;
    auto c = clients_.find(id->second.client);
    if (c == clients_.end()) return false;
    const std::uint32_t backlog = id->second.backlog;
    auto q = c->second.queued_requests.find(number);
    if (q == c->second.queued_requests.end()) return false;
    if (q->second >= backlog) {
      ++counters_.req_backlog_drops;
      return true;
    }
    // One source's share: all but a reserve for the others.
    const std::uint32_t share = backlog - std::min(kReqReserve, backlog / 2);
    auto f = c->second.queued_from.find({number, from});
    if (f == c->second.queued_from.end() || f->second < share) return false;
    ++counters_.req_src_limited;
    return true;
  }
  return false;
}

void CmServer::on_client_readable(Instant now, int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  if (!flush_out(fd, it->second)) {
    drop_client(now, fd);
    return;
  }
  // Its commands wait until its socket has taken what is queued (their replies would queue).
  if (!it->second.out.empty()) return;
  for (int i = 0; i < 64; ++i) {
    devd::CmMsg m;
    const ssize_t n = ::recv(fd, &m, sizeof m, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    if (n != static_cast<ssize_t>(sizeof m)) {
      drop_client(now, fd);
      break;
    }
    if (const auto r = handle(now, fd, m)) send(fd, *r);
    pump(now);
    auto c = clients_.find(fd);
    if (c == clients_.end() || !c->second.out.empty()) break;
  }
  flush_drops(now);
}

void CmServer::reply_then_event(int fd, const devd::CmMsg& reply, const Id& id,
                                std::uint32_t event) {
  devd::CmMsg ev;
  ev.type = devd::CmMsgType::kEvent;
  ev.id = id.number;
  ev.event = event;
  ev.src = id.src;
  ev.dst = id.dst;
  // The reply first, then the event (the library reads them in that order).
  send(fd, reply);
  send(fd, ev);
}

namespace {

// A reply that reports errno `err`.
devd::CmMsg with_status(devd::CmMsg r, int err) {
  r.status = err;
  return r;
}

// The CM's 3-bit retry counts: a larger request is clamped to 7.
std::uint8_t retries(std::uint8_t asked) { return asked > 7 ? 7 : asked; }

// The rdma_cm header (cma_hdr) of an active ID's REQ or SIDR_REQ.
wire::CmaHeader cma_header_of(const devd::CmAddr& src, const cm::Gid& sg, const cm::Gid& dg) {
  wire::CmaHeader h;
  h.ip_version = src.family == 6 ? 6 : 4;
  h.src_port = src.port;
  std::memcpy(h.src_addr.data(), sg.data(), 16);
  std::memcpy(h.dst_addr.data(), dg.data(), 16);
  return h;
}

cm::ConnectParams connect_params(const devd::CmConnParam& c, const cm::Gid& sg, const cm::Gid& dg,
                                 std::uint64_t service_id, ConstBytes pdata) {
  cm::ConnectParams p;
  p.peer = cm::CmPeer{dg};
  p.local_gid = sg;
  p.service_id = service_id;
  p.local_qpn = c.qp_num;
  p.starting_psn = c.starting_psn & 0xffffff;
  p.responder_resources = c.responder_resources;
  p.initiator_depth = c.initiator_depth;
  p.retry_count = retries(c.retry_count);
  p.rnr_retry_count = retries(c.rnr_retry_count);
  p.path_mtu = c.path_mtu >= 1 && c.path_mtu <= 5 ? c.path_mtu : 3;
  p.srq = c.srq != 0;
  p.flow_control = c.flow_control != 0;
  p.private_data = pdata;
  return p;
}

cm::AcceptParams accept_params(const devd::CmConnParam& c, ConstBytes pdata) {
  cm::AcceptParams p;
  p.local_qpn = c.qp_num;
  p.starting_psn = c.starting_psn & 0xffffff;
  p.responder_resources = c.responder_resources;
  p.initiator_depth = c.initiator_depth;
  p.rnr_retry_count = retries(c.rnr_retry_count);
  p.srq = c.srq != 0;
  p.flow_control = c.flow_control != 0;
  p.private_data = pdata;
  return p;
}

ConstBytes private_data_of(const devd::CmConnParam& c) {
  return ConstBytes(reinterpret_cast<const std::byte*>(c.private_data), c.private_data_len);
}

}  // namespace

// A client's command: the two that name no ID of the client's (create, migrate) first, then the
// lookup of the client's ID and the command on it.
std::optional<devd::CmMsg> CmServer::handle(Instant now, int fd, const devd::CmMsg& m) {
  reap_now_ = now;
  devd::CmMsg r;
  r.type = devd::CmMsgType::kReply;
  r.id = m.id;
  if (m.type == devd::CmMsgType::kCreateId) return create_id(fd, m, r);
  if (m.type == devd::CmMsgType::kMigrate) return migrate_id(fd, m, r);
  Id* id = id_of(fd, m.id);
  if (id == nullptr) return with_status(r, ENOENT);
  return handle_on_id(now, fd, *id, m, r);
}

devd::CmMsg CmServer::create_id(int fd, const devd::CmMsg& m, devd::CmMsg r) {
  if (!is_port_space(m.ps)) return with_status(r, EPROTONOSUPPORT);
  Id id;
  id.number = next_id_++;
  if (next_id_ == 0) next_id_ = 1;
  id.client = fd;
  id.ps = m.ps;
  id.qp_type = m.qp_type;
  ids_[id.number] = id;
  r.id = id.number;
  return r;
}

// An ID moves to another channel of the same process (rdma_migrate_id).
devd::CmMsg CmServer::migrate_id(int fd, const devd::CmMsg& m, devd::CmMsg r) {
  auto it = ids_.find(m.id);
  if (it == ids_.end()) return with_status(r, ENOENT);
  auto from = clients_.find(it->second.client);
  if (from == clients_.end() || from->second.pid != clients_.at(fd).pid) {
    return with_status(r, ENOENT);
  }
  it->second.client = fd;
  return r;
}

std::optional<devd::CmMsg> CmServer::handle_on_id(Instant now, int fd, Id& id, const devd::CmMsg& m,
                                                  devd::CmMsg r) {
  const bool ud =
      id.qp_type == kQptUd || id.ps == static_cast<std::uint32_t>(wire::RdmaPortSpace::kUdp);
  if (m.type == devd::CmMsgType::kListen || m.type == devd::CmMsgType::kConnect ||
      m.type == devd::CmMsgType::kAccept) {
    id.seal_mode = static_cast<seal::Mode>(std::min<std::uint8_t>(m.seal_mode, 3));
    id.psk = psk_of(m);
  }
  switch (m.type) {
    case devd::CmMsgType::kDestroyId:
      destroy_id(now, id);
      return r;
    case devd::CmMsgType::kBind:
      return bind_command(id, m, r);
    case devd::CmMsgType::kResolveAddr:
      return resolve_addr_command(fd, id, m, r);
    case devd::CmMsgType::kResolveRoute:
      if (id.dst.family == 0) return with_status(r, EINVAL);
      reply_then_event(fd, r, id, kRouteResolved);
      return std::nullopt;
    case devd::CmMsgType::kListen:
      return listen_command(now, id, m.backlog, r);
    case devd::CmMsgType::kConnect:
      return connect_command(now, id, m, ud, r);
    case devd::CmMsgType::kAccept:
      return accept_command(now, id, m, ud, r);
    case devd::CmMsgType::kReject: {
      if (!id.has_conn) return with_status(r, EINVAL);
      const ConstBytes pdata = private_data_of(m.conn);
      if (ud && !id.active) {
        auto e = cm_.sidr_reply(now, id.conn, wire::SidrStatus::kReject, 0, 0, pdata);
        return e.ok() ? r : with_status(r, EINVAL);
      }
      auto e = cm_.reject(now, id.conn, pdata);
      return e.ok() ? r : with_status(r, EINVAL);
    }
    case devd::CmMsgType::kDisconnect: {
      if (!id.has_conn) return with_status(r, EINVAL);
      auto e = cm_.disconnect(now, id.conn, {});
      return e.ok() ? r : with_status(r, EINVAL);
    }
    case devd::CmMsgType::kNotify:
      if (!id.has_conn) return with_status(r, EINVAL);
      (void)cm_.handle_comm_established(now, id.conn);
      return r;
    default:
      return with_status(r, EINVAL);
  }
}

devd::CmMsg CmServer::bind_command(Id& id, const devd::CmMsg& m, devd::CmMsg r) {
  if (m.src.family != 0 && !is_unspecified(m.src)) {
    // Only the device's own address (or the wildcard) is bindable here.
    if (std::memcmp(m.src.bytes, ip_.bytes.data(), ip_.v6 ? 16 : 4) != 0 ||
        (m.src.family == 6) != ip_.v6) {
      return with_status(r, EADDRNOTAVAIL);
    }
  }
  id.src = m.src;
  if (const int e = bind_id(id, m.src.port); e != 0) return with_status(r, e);
  r.src = id.src;
  return r;
}

std::optional<devd::CmMsg> CmServer::resolve_addr_command(int fd, Id& id, const devd::CmMsg& m,
                                                          devd::CmMsg r) {
  if (!id.bound) {
    id.src = local_addr(0);
    if (const int e = bind_id(id, m.src.port); e != 0) return with_status(r, e);
  }
  const std::uint16_t p = id.src.port;
  id.src = local_addr(p);
  id.dst = m.dst;
  r.src = id.src;
  r.dst = id.dst;
  reply_then_event(fd, r, id, kAddrResolved);
  return std::nullopt;
}

devd::CmMsg CmServer::listen_command(Instant now, Id& id, std::int32_t backlog, devd::CmMsg r) {
  // ucma_listen: none, or more than max_backlog, is max_backlog.
  id.backlog = backlog > 0 && static_cast<std::uint32_t>(backlog) < kMaxBacklog
                   ? static_cast<std::uint32_t>(backlog)
                   : kMaxBacklog;
  if (id.listening) return r;  // the kernel accepts a second listen (a new backlog)
  if (!id.bound) {
    id.src = local_addr(0);
    if (const int e = bind_id(id, 0); e != 0) return with_status(r, e);
  }
  auto l = cm_.listen(service_of(id.ps, id.src.port));
  if (!l.ok()) return with_status(r, EADDRINUSE);
  id.listening = true;
  id.listen = l.value();
  by_listen_[l.value().value] = id.number;
  r.src = id.src;
  // Their events follow the reply (pump).
  release_held(now, id.ps, id.src.port);
  return r;
}

// rdma_connect: the rdma_cm header and the user's private data, then a REQ (RC) or a SIDR_REQ
// (UD) to the ID's destination.
devd::CmMsg CmServer::connect_command(Instant now, Id& id, const devd::CmMsg& m, bool ud,
                                      devd::CmMsg r) {
  if (id.has_conn || id.listening || id.dst.family == 0) return with_status(r, EINVAL);
  const cm::Gid sg = gid_of(id.src);
  const cm::Gid dg = gid_of(id.dst);
  std::array<std::uint8_t, wire::CmSidrReq::kPrivateDataBytes> pd{};
  const std::size_t user_max =
      ud ? wire::kCmaSidrReqUserPrivateDataBytes : wire::kCmaReqUserPrivateDataBytes;
  if (m.conn.private_data_len > user_max) return with_status(r, EINVAL);
  auto enc =
      wire::encode_cma_private_data(cma_header_of(id.src, sg, dg), private_data_of(m.conn),
                                    MutBytes(reinterpret_cast<std::byte*>(pd.data()), pd.size()));
  if (!enc.ok()) return with_status(r, EINVAL);
  const ConstBytes pdata(reinterpret_cast<const std::byte*>(pd.data()), enc.value());
  const std::uint64_t service_id = service_of(id.ps, id.dst.port);
  Result<cm::ConnId, cm::CmError> c = Err{cm::CmError::kInvalidArgument};
  if (ud) {
    cm::SidrParams p;
    p.peer = cm::CmPeer{dg};
    p.service_id = service_id;
    p.private_data = pdata;
    c = cm_.sidr_resolve(now, p);
  } else {
    cm::ConnectParams p = connect_params(m.conn, sg, dg, service_id, pdata);
    p.offer_key = id.seal_mode != seal::Mode::kOff;  // the REQ's GUID says it (cm_keys.h)
    c = cm_.connect(now, p);
  }
  if (!c.ok()) return with_status(r, c.error() == cm::CmError::kBusy ? ENOMEM : EINVAL);
  id.has_conn = true;
  id.conn = c.value();
  id.active = true;
  by_conn_[c.value().value] = id.number;
  return r;
}

// rdma_accept: the active side's RTU after a REP, a passive UD ID's SIDR_REP, or a passive RC
// ID's REP.
devd::CmMsg CmServer::accept_command(Instant now, Id& id, const devd::CmMsg& m, bool ud,
                                     devd::CmMsg r) {
  if (!id.has_conn) return with_status(r, EINVAL);
  const ConstBytes pdata = private_data_of(m.conn);
  if (id.active) {
    auto e = cm_.establish(now, id.conn);
    return e.ok() ? r : with_status(r, EINVAL);
  }
  if (ud) {
    const std::uint32_t qkey = m.conn.qkey != 0 ? m.conn.qkey : kRdmaUdpQkey;
    auto e = cm_.sidr_reply(now, id.conn, wire::SidrStatus::kSuccess, m.conn.qp_num, qkey, pdata);
    return e.ok() ? r : with_status(r, EINVAL);
  }
  auto q = cm_.accept(now, id.conn, accept_params(m.conn, pdata));
  if (!q.ok()) return with_status(r, EINVAL);
  keys_.on_accept(id.conn, q.value(), id.seal_mode, id.psk);  // its public value follows the REP
  r.qp = q.value();
  return r;
}

// The CM's events to the clients: a request for a listener makes a new passive ID; the others
// belong to an ID's connection.
void CmServer::deliver(const cm::CmEvent& e) {
  if (e.type == cm::CmEventType::kConnectRequest || e.type == cm::CmEventType::kSidrRequest) {
    deliver_request(e);
  } else {
    deliver_conn_event(e);
  }
}

void CmServer::deliver_request(const cm::CmEvent& e) {
  auto l = by_listen_.find(e.listener.value);
  Id* lid = nullptr;
  if (l != by_listen_.end()) {
    auto it = ids_.find(l->second);
    if (it != ids_.end()) lid = &it->second;
  }
  const ConstBytes pd(reinterpret_cast<const std::byte*>(e.private_data.data()),
                      e.private_data_bytes);
  auto h = wire::parse_cma_header(pd);
  if (lid != nullptr && h.ok()) {
    const Refusal why = keys_.on_request(e.qp, lid->seal_mode, lid->psk.has_value());
    if (why != Refusal::kNone) {
      const std::string_view text = refusal_text(why);
      (void)cm_.reject(Instant{}, e.id, as_bytes(text.data(), text.size()));
      return;
    }
  }
  if (lid == nullptr || !h.ok()) {
    // A listener gone, or a REQ that is not rdma_cm's: refuse it (cma.c rejects a REQ whose
    // private data has no valid cma_hdr).
    if (e.type == cm::CmEventType::kSidrRequest) {
      (void)cm_.sidr_reply(Instant{}, e.id, wire::SidrStatus::kReject, 0, 0, {});
    } else {
      (void)cm_.reject(Instant{}, e.id, {});
    }
    return;
  }
  const Id& id = add_passive_id(e, *lid, h.value());
  devd::CmMsg ev;
  ev.type = devd::CmMsgType::kEvent;
  ev.id = id.number;
  ev.listen_id = lid->number;
  ev.event = kConnectRequest;
  ev.src = id.src;
  ev.dst = id.dst;
  const std::size_t user = e.private_data_bytes - wire::kCmaHeaderBytes;
  std::memcpy(ev.conn.private_data, e.private_data.data() + wire::kCmaHeaderBytes, user);
  ev.conn.private_data_len = static_cast<std::uint8_t>(user);
  ev.conn.responder_resources = e.offered_responder_resources;
  ev.conn.initiator_depth = e.offered_initiator_depth;
  ev.conn.retry_count = e.qp.retry_count;
  ev.conn.rnr_retry_count = e.qp.rnr_retry;
  ev.conn.srq = e.qp.srq ? 1 : 0;
  ev.conn.qp_num = e.qp.remote_qpn;
  ev.qp = e.qp;
  Source src;  // the REQ's, for its source's share of the backlog (over_backlog)
  std::memcpy(src.data(), e.peer.gid.data(), src.size());
  sending_from_ = src;
  send(id.client, ev);
  sending_from_.reset();
}

// The passive ID of a request to `listener`, its addresses from the request's rdma_cm header.
const CmServer::Id& CmServer::add_passive_id(const cm::CmEvent& e, const Id& listener,
                                             const wire::CmaHeader& h) {
  Id id;
  id.number = next_id_++;
  if (next_id_ == 0) next_id_ = 1;
  id.client = listener.client;
  id.ps = listener.ps;
  id.qp_type = listener.qp_type;
  id.has_conn = true;
  id.conn = e.id;
  id.listener = listener.number;
  id.seal_mode = listener.seal_mode;
  id.psk = listener.psk;
  id.bound = true;
  const std::uint8_t fam = h.ip_version == 6 ? 6 : 4;
  id.src.family = fam;
  id.dst.family = fam;
  const std::size_t off = fam == 6 ? 0 : 12;
  const std::size_t len = fam == 6 ? 16 : 4;
  std::memcpy(id.src.bytes, h.dst_addr.data() + off, len);
  std::memcpy(id.dst.bytes, h.src_addr.data() + off, len);
  id.src.port = listener.src.port;
  id.dst.port = h.src_port;
  by_conn_[e.id.value] = id.number;
  return ids_[id.number] = id;
}

namespace {
// What every event of an ID's connection carries: the ID, its addresses, the QP's attributes and
// the MAD's private data.
devd::CmMsg conn_event(std::uint32_t id, const devd::CmAddr& src, const devd::CmAddr& dst,
                       const cm::CmEvent& e) {
  devd::CmMsg ev;
  ev.type = devd::CmMsgType::kEvent;
  ev.id = id;
  ev.src = src;
  ev.dst = dst;
  ev.qp = e.qp;
  const std::size_t n = std::min<std::size_t>(e.private_data_bytes, sizeof ev.conn.private_data);
  std::memcpy(ev.conn.private_data, e.private_data.data(), n);
  ev.conn.private_data_len = static_cast<std::uint8_t>(n);
  return ev;
}
}  // namespace

void CmServer::deliver_conn_event(const cm::CmEvent& e) {
  Id* id = id_by_conn(e.id);
  if (id == nullptr) return;
  devd::CmMsg ev = conn_event(id->number, id->src, id->dst, e);
  bool forget = false;  // the CM is done with the connection
  switch (e.type) {
    case cm::CmEventType::kConnectResponse:
      if (const Refusal why = keys_.on_connect_response(e.id, ev.qp, id->seal_mode, id->psk);
          why != Refusal::kNone) {
        return refuse_response(*id, ev, why);
      }
      ev.event = kConnectResponse;
      ev.conn.responder_resources = e.qp.max_dest_rd_atomic;
      ev.conn.initiator_depth = e.qp.max_rd_atomic;
      ev.conn.rnr_retry_count = e.qp.rnr_retry;
      ev.conn.srq = e.qp.srq ? 1 : 0;
      ev.conn.qp_num = e.qp.remote_qpn;
      break;
    case cm::CmEventType::kEstablished:
      // The active side's librdmacm reports ESTABLISHED itself once it has sent the RTU
      // (ucma_process_conn_resp); the kernel sends no second one.
      if (id->active) return;
      if (!keys_.on_established(e.id, ev.qp)) {
        // No key where one is needed: the RTU's public value did not authenticate under the
        // pre-shared key, or there was none (cm_keys.h). Too late for a REJ: the QP gets no key
        // and the connection a DREQ.
        (void)cm_.disconnect(event_now_, e.id, {});
      }
      ev.event = kEstablished;
      break;
    case cm::CmEventType::kRejected:
      ev.event = kRejected;
      ev.status = static_cast<std::int32_t>(e.reason);
      break;
    case cm::CmEventType::kUnreachable:
      ev.event = kUnreachable;
      ev.status = -ETIMEDOUT;
      break;
    case cm::CmEventType::kDisconnected:
      ev.event = kDisconnected;
      break;
    case cm::CmEventType::kTimewaitExit:
      ev.event = kTimewaitExit;
      forget = true;
      break;
    case cm::CmEventType::kSidrReply:
      forget = true;
      if (e.sidr_status != wire::SidrStatus::kSuccess) {
        ev.event = kUnreachable;
        ev.status = static_cast<std::int32_t>(e.sidr_status);
        break;
      }
      ev.event = kEstablished;
      ev.conn.qp_num = e.sidr_qpn;
      ev.conn.qkey = e.sidr_qkey;
      break;
    default:
      return;
  }
  if (forget || e.type == cm::CmEventType::kRejected || e.type == cm::CmEventType::kUnreachable) {
    // The ID may connect again (rdma_connect after a REJ is allowed by rdma_cm only on a new
    // ID; keeping it simple: the connection is over).
    keys_.forget(id->conn);
    by_conn_.erase(id->conn.value);
    id->has_conn = false;
  }
  send(id->client, ev);
}

// Policy `require` and a REP without a key (cm_keys.h): a REJ to the peer, REJECTED (Consumer
// Defined, with the reason as private data) to the ID's client.
void CmServer::refuse_response(Id& id, devd::CmMsg& ev, Refusal reason) {
  const std::string_view text = refusal_text(reason);
  const ConstBytes why = as_bytes(text.data(), text.size());
  keys_.count_refused();
  keys_.forget(id.conn);
  (void)cm_.reject(Instant{}, id.conn, why);
  ev.event = kRejected;
  ev.status = static_cast<std::int32_t>(wire::CmRejReason::kConsumerDefined);
  ev.qp = cm::QpAttributes{};
  std::memset(ev.conn.private_data, 0, sizeof ev.conn.private_data);
  std::memcpy(ev.conn.private_data, why.data(), why.size());
  ev.conn.private_data_len = static_cast<std::uint8_t>(why.size());
  by_conn_.erase(id.conn.value);
  id.has_conn = false;
  send(id.client, ev);
}

void CmServer::pump(Instant now) {
  event_now_ = now;
  while (auto e = cm_.poll_event()) deliver(*e);
  while (auto out = cm_.poll_transmit()) {
    std::array<std::byte, 32> hdr{};
    const std::size_t hn = wire::write_gsi_mad_headers(MutBytes(hdr), psn_);
    psn_ = (psn_ + 1) & 0xffffff;
    wire::OuterHeaders o;
    o.src = ip_;
    auto peer = verbs::ip_from_gid(uroce::Gid{out->to.gid});
    if (!peer) {
      ++counters_.tx_failed;
      continue;
    }
    o.dst = *peer;
    o.src_port = verbs::rxe_default_udp_sport(wire::kGsiQpn);
    o.dst_port = port_;
    o.ethernet = false;
    // A REP or RTU to a uroce peer may carry this side's public value after the MAD.
    const auto ext = keys_.extension_for(ConstBytes(out->mad));
    const ConstBytes payload[2] = {ConstBytes(out->mad), ext ? ext->view() : ConstBytes()};
    if (mad_dp_->send(now, o, ConstBytes(hdr).first(hn), std::span(payload, ext ? 2 : 1))) {
      ++counters_.tx_mads;
    } else {
      ++counters_.tx_failed;
    }
    // The datapath reads the payload until its flush: the MAD lives in this iteration only.
    mad_dp_->flush(now);
  }
}

std::uint64_t CmServer::dropped() const {
  std::uint64_t n = counters_.unsteered + counters_.unknown_qpn_src_limited;
  for (const auto* dp : {dp_.get(), mad_dp_.get()}) {
    for (std::uint64_t d : dp->counters().rx_drops) n += d;
  }
  return n;
}

void CmServer::on_mad_socket(Instant now) {
  // ICMP errors of the MADs sent: a port unreachable from a peer's RoCEv2 port says that its
  // CM has gone (cm::CmEndpoint::handle_peer_unreachable).
  mad_dp_->receive_errors(64, [&](const datapath::SendError& e) {
    if (!e.port_unreachable || e.dst_port != port_) return;
    const uroce::Gid g = verbs::gid_from_ip(e.dst);
    cm::CmPeer peer;
    std::memcpy(peer.gid.data(), g.raw.data(), 16);
    cm_.handle_peer_unreachable(now, peer);
  });
  // What a peer sends to this port (none do: replies go to port 4791) is served as the sink's.
  receive_from(now, *mad_dp_);
}

void CmServer::on_sink_readable(Instant now) { receive_from(now, *dp_); }

void CmServer::receive_from(Instant now, datapath::UdpDatapath& dp) {
  std::vector<transport::TxPacket> acks;  // for closed QPs, sent once the batch is read
  dp.receive(now, 64, [&](const wire::RocePacket& pkt, const datapath::RxMeta& meta) {
    on_packet(now, pkt, meta, acks);
  });
  for (const transport::TxPacket& ack : acks) send_closed_qp_ack(now, ack);
  if (!acks.empty()) dp_->flush(now);
  pump(now);
  flush_drops(now);
}

void CmServer::on_packet(Instant now, const wire::RocePacket& pkt, const datapath::RxMeta& meta,
                         std::vector<transport::TxPacket>& acks) {
  const wire::BthView bth = pkt.bth();
  if (bth.dest_qpn() != wire::kGsiQpn) {
    const SourceKey source{meta.src.bytes, meta.src_port};
    if (!unknown_qpn_budget_.allows(source, now)) {
      ++counters_.unknown_qpn_src_limited;
      return;
    }
    unknown_qpn_budget_.charge(source, now);
    transport::TxPacket ack;
    if (meta.icrc_verified && acks.size() < kMaxClosedAcks &&
        closed_.answer(now, pkt, meta.src, ack)) {
      acks.push_back(ack);
      return;
    }
    ++counters_.unsteered;
    return;
  }
  if (!meta.icrc_verified || pkt.op->opcode() != wire::Opcode::kUdSendOnly ||
      pkt.deth().qkey() != wire::kGsiQkey) {
    ++counters_.rx_bad;
    return;
  }
  // A MAD, or a REP or RTU with the peer's public value after it (cm_keys.h).
  const std::optional<ConstBytes> mad = keys_.on_receive(pkt.payload);
  if (!mad || static_cast<std::uint8_t>((*mad)[wire::kMadOffMgmtClass]) != wire::kMgmtClassCm) {
    ++counters_.rx_not_cm;
    return;
  }
  const uroce::Gid g = verbs::gid_from_ip(meta.src);
  cm::CmPeer from;
  std::memcpy(from.gid.data(), g.raw.data(), 16);
  ++counters_.rx_mads;
  if (hold_for_listen(now, from, *mad)) return;
  Source src;
  std::memcpy(src.data(), g.raw.data(), src.size());
  if (over_backlog(*mad, src)) return;
  (void)cm_.handle_mad(now, from, *mad);
}

void CmServer::send_closed_qp_ack(Instant now, const transport::TxPacket& ack) {
  wire::OuterHeaders o = transport::outer_headers(ip_, ack.av);
  o.dst_port = port_;
  o.ethernet = false;
  if (dp_->send(now, o, ack.header_span(), {})) {
    ++counters_.closed_qp_acks;
  } else {
    ++counters_.tx_failed;
  }
}

void CmServer::list_ids(const std::function<void(const devd::Msg&)>& send) const {
  for (const auto& [n, id] : ids_) {
    devd::Msg m;
    m.type = devd::MsgType::kCmId;
    auto c = clients_.find(id.client);
    m.pid = c == clients_.end() ? 0 : c->second.pid;
    m.index = id.ps;
    m.value = id.src.port;
    std::string state = id.listening  ? "listening"
                        : id.has_conn ? (id.active ? "connecting_or_connected" : "passive")
                        : id.bound    ? "bound"
                                      : "idle";
    if (id.dst.family != 0) {
      wire::IpAddress ip;
      ip.v6 = id.dst.family == 6;
      std::memcpy(ip.bytes.data(), id.dst.bytes, 16);
      char buf[64];
      std::snprintf(buf, sizeof buf, " peer_port %u", id.dst.port);
      state += buf;
    }
    devd::set_text(m.text, state);
    send(m);
  }
}

void CmServer::list(const std::function<void(const devd::Msg&)>& send) const {
  list_ids(send);
  const cm::CmCounters& c = cm_.counters();
  char text[256];
  std::snprintf(text, sizeof text,
                "cm_ids %zu cm_connections %zu rx_mads %llu rx_malformed %llu rx_duplicate %llu "
                "rx_dropped %llu tx_mads %llu retransmits %llu qp1_bad %llu qp1_not_cm %llu "
                "req_held %llu closed_qp_acks %llu",
                ids_.size(), cm_.connection_count(),
                static_cast<unsigned long long>(counters_.rx_mads),
                static_cast<unsigned long long>(c.rx_malformed),
                static_cast<unsigned long long>(c.rx_duplicate),
                static_cast<unsigned long long>(c.rx_dropped),
                static_cast<unsigned long long>(counters_.tx_mads),
                static_cast<unsigned long long>(c.retransmits),
                static_cast<unsigned long long>(counters_.rx_bad),
                static_cast<unsigned long long>(counters_.rx_not_cm),
                static_cast<unsigned long long>(counters_.req_held),
                static_cast<unsigned long long>(counters_.closed_qp_acks));
  devd::Msg m;
  m.type = devd::MsgType::kCmStats;
  devd::set_text(m.text, text);
  send(m);
  std::snprintf(text, sizeof text,
                "client_drops %llu req_backlog_drops %llu req_src_limited %llu "
                "unknown_qpn_src_limited %llu peer_unreachable %llu unreachable_ended %llu "
                "dreq_timeouts %llu",
                static_cast<unsigned long long>(counters_.client_drops),
                static_cast<unsigned long long>(counters_.req_backlog_drops),
                static_cast<unsigned long long>(counters_.req_src_limited),
                static_cast<unsigned long long>(counters_.unknown_qpn_src_limited),
                static_cast<unsigned long long>(c.peer_unreachable),
                static_cast<unsigned long long>(c.unreachable_ended),
                static_cast<unsigned long long>(c.dreq_timeouts));
  devd::set_text(m.text, text);
  send(m);
  devd::set_text(m.text, key_stats(keys_.counters()));
  send(m);
  if (dp_->has_faults()) {
    std::string line;
    // What the fault stage did to the CM's own packets (class=cm rules, UROCE_FAULTS).
    for (const auto d : {fault::Direction::kTx, fault::Direction::kRx}) {
      // The sink's stage (what the CM receives, closed QPs' ACKs) and the MAD socket's.
      fault::StageCounters c = dp_->fault_counters(d);
      const fault::StageCounters m = mad_dp_->fault_counters(d);
      c.packets += m.packets;
      for (std::size_t k = 0; k < fault::kInjectedCount; ++k) c.injected[k] += m.injected[k];
      const char* dir = d == fault::Direction::kTx ? "tx" : "rx";
      line += std::string(line.empty() ? "" : " ") + "fault_" + dir + "_packets " +
              std::to_string(c.packets);
      for (std::size_t k = 0; k < fault::kInjectedCount; ++k) {
        if (c.injected[k] == 0) continue;
        line += std::string(" fault_") + dir + "_" +
                std::string(fault::to_string(static_cast<fault::Injected>(k))) + " " +
                std::to_string(c.injected[k]);
      }
    }
    devd::set_text(m.text, line);
    send(m);
  }
}

Instant CmServer::next_deadline() const {
  Instant t = std::min(
      {cm_.poll_timeout(), dp_->next_deadline(), mad_dp_->next_deadline(), closed_.last_until()});
  return held_.empty() ? t : std::min(t, held_.front().until);
}

Result<fault::FaultSpec, std::string> CmServer::set_faults(const std::string& text, Instant now) {
  auto spec = fault::FaultSpec::parse(text);
  if (!spec.ok()) return Err{spec.error()};
  dp_->set_faults(spec.value(), now);
  mad_dp_->set_faults(spec.value(), now);
  return spec;
}

// A REQ that comes before the listen of the port it names. The kernel REJects it at once
// (Invalid Service ID); a program whose server tells its peer to connect before it has listened
// then fails whenever the peer is quicker: Debian 12's qperf sends the port between
// rdma_bind_addr and rdma_listen, perftest -R's client connects its data QPs as soon as the
// control connection has told it to, while the server creates, binds and listens on a new ID
// (the client's retry then reuses destroyed IDs). On the kernel the server's system calls
// nearly always win; through the coordinator they take a few round trips. Such a REQ waits here
// for listen_grace_ at most: a listen on its port hands it to the CM as if it had just come,
// and otherwise it is REJected as the kernel does, listen_grace_ late.
bool CmServer::hold_for_listen(Instant now, const cm::CmPeer& from, ConstBytes mad) {
  if (listen_grace_ <= Duration::zero()) return false;
  const auto sid = requested_service(mad);
  if (!sid) return false;
  const auto ps = static_cast<std::uint32_t>(sid->port_space);
  for (const auto& [n, id] : ids_) {
    if (id.listening && id.ps == ps && id.src.port == sid->port) return false;
  }
  constexpr std::size_t kMaxHeld = 64;
  if (held_.size() >= kMaxHeld) return false;  // answered at once, as the kernel does
  HeldReq h;
  h.until = now + listen_grace_;
  h.from = from;
  h.ps = ps;
  h.port = sid->port;
  std::memcpy(h.mad.data(), mad.data(), wire::kMadBytes);
  held_.push_back(h);
  ++counters_.req_held;
  return true;
}

void CmServer::release_held(Instant now, std::uint32_t ps, std::uint16_t port) {
  // Taken out first: handle_mad may not hold them again (a listener is there, or they are due).
  std::vector<HeldReq> go;
  for (auto it = held_.begin(); it != held_.end();) {
    const bool take = ps == 0 ? it->until <= now : it->ps == ps && it->port == port;
    if (take) {
      go.push_back(*it);
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
  for (const HeldReq& h : go) (void)cm_.handle_mad(now, h.from, ConstBytes(h.mad));
}

void CmServer::on_timeout(Instant now) {
  // The closed QPs' expiry is one of next_deadline()'s times: once it is served it must move on,
  // or the coordinator's poll would return at once for as long as a context stays connected
  // (only its idle check, skipped while there are contexts, forgot expired entries before).
  closed_.expire(now);
  release_held(now, 0, 0);
  cm_.handle_timeout(now);
  if (dp_->has_faults()) {
    // What the fault stage held that is due: received MADs to the CM, sent ones to the wire.
    on_sink_readable(now);
    dp_->flush(now);
    mad_dp_->flush(now);
  }
  pump(now);
  flush_drops(now);
}

}  // namespace uroce::engine

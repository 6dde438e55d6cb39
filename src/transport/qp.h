// A queue pair's transport: the requester, completer and responder of RC, UC and UD as RoCEv2
// carries them (IBTA vol. 1 chapter 9; rxe's req.c, comp.c and resp.c), sans-I/O.
//
//   inputs                                   outputs (polled)
//   modify(attr, mask)                       poll_transmit(now, TxPacket&)  packets to send
//   post_send(SendRequest) / post_recv(...)  poll_timeout()                 next deadline
//   handle_packet(now, RocePacket, info)     completions -> CompletionSink, events -> EventSink
//   handle_timeout(now)
//
// The QP reads no clock: `now` comes with every input. It makes no system call and allocates
// only at construction (queues are sized by the QP's capabilities).
//
// State machine (IBTA 10.3.1; verbs/ checks which transitions and attribute masks are legal):
//
//   RESET -> INIT -> RTR -> RTS <-> SQD
//     ^                      |
//     +---- any state -> ERR (flushes)     RTS -> SQE (UC/UD send error) -> RTS
//
// Memory is reached only through MemoryResolver, on every access.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/bytes.h"
#include "base/ring.h"
#include "base/time.h"
#include "cc/congestion_control.h"
#include "transport/ack_state.h"
#include "transport/interfaces.h"
#include "transport/recv_queue.h"
#include "transport/wr_opcode.h"
#include "uroce/types.h"
#include "wire/builder.h"
#include "wire/icrc.h"
#include "wire/ip.h"
#include "wire/packet.h"

namespace uroce::transport {

enum class ScatterResult : std::uint8_t;  // transport/sgl.h

// Limits (the kernel's Soft-RoCE values, roce-facts.md).
inline constexpr std::uint32_t kMaxQpWr = 16384;
inline constexpr std::uint32_t kMaxSge = 32;
inline constexpr std::uint32_t kMaxInlineData = 400;
inline constexpr std::uint32_t kMaxRdAtomic = 128;
inline constexpr std::uint64_t kMaxMessageBytes = 1ull << 31;
// rxe: at most 128 unacknowledged PSNs, AckReq at least every 64 packets.
inline constexpr std::uint32_t kMaxUnackedPsns = 128;
inline constexpr std::uint32_t kMaxPacketsPerAck = 64;
// uroce's own: a READ may start while fewer than this many PSNs are outstanding (requester.cc).
inline constexpr std::uint32_t kMaxUnackedReadPsns = 256;
// While going back, a response at most this many PSNs past the one awaited, below the last
// seen, starts a replay that lost its first packets (Qp::implied_nak).
inline constexpr std::int32_t kReplayStartSlack = 4;
// The most PSNs outstanding at once for 24-bit PSN comparisons to hold (wire/psn.h): what one
// READ of kMaxMessageBytes at MTU 256 needs.
inline constexpr std::uint64_t kMaxPsnSpan = 1u << 23;
// The GRH area at the start of a UD receive buffer.
inline constexpr std::uint32_t kGrhBytes = 40;
// Selective repeat (selective_repeat.cc): how far beyond its expected PSN a responder keeps
// out-of-order requests. At least rxe's window (kMaxUnackedPsns), but below what loss recovery's
// BDP window may reach (kMaxBdpWindow): a request further on is not kept and cuts the run, so the
// requester goes back N from the first packet not kept (the plain sequence NAK after the hole is
// filled). Safe, never relied on: the requester resends what no marked NAK names.
inline constexpr std::uint32_t kSrWindow = 256;
// Selective repeat: the reserved BTH bit (byte 8, the first of the 7 reserved bits after AckReq)
// that a sequence NAK carries between two uroce peers that negotiated selective repeat, meaning
// "I keep packets beyond this PSN: resend this one only". IBTA has the sender set reserved bits
// to 0 and the receiver ignore them, so a peer that did not negotiate would read a plain
// sequence NAK and go back N, which is always safe; it is never sent to one.
inline constexpr std::byte kBthSrKeptBit{0x40};

// Loss recovery of RC requests beyond IBTA's fixed ACK timeout (issue 39; recovery.cc).
//
// The floor of the adaptive retransmission timeout. A peer that is a user-space device answers
// from its own rounds: within microseconds while its application polls, but an application that
// stops polling without a word leaves the socket to the progress thread only after its lease and
// timer slack (engine::SchedulerConfig: 200 us + 2 ms), an ACK held for a request may wait
// 2.3 ms, a deferred one about 4 ms (AckState::kMinTimeoutToHoldAck's comment), and a descheduled
// process on a busy host loses a scheduler slice (milliseconds). A timeout below these would go
// back N for packets the peer has received. 5 ms covers them; it is still 13 times shorter than
// perftest's ACK timeout (exponent 14, 67 ms) and 200 times shorter than rdma_cm's (18, 1.07 s).
inline constexpr Duration kMinRto = Duration::ms(5);
// A tail-loss probe waits 2 * SRTT and this much for the ACK it would reveal: twice the
// engine's hold of an ACK that waits for a request (AckPolicyConfig::hold_for, 100 us). A probe
// that was not needed costs one duplicate packet, which the peer re-ACKs at once.
inline constexpr Duration kProbeAckAllowance = Duration::us(200);
// Probes per stall (until progress): the newest packet, then the oldest unacknowledged one.
inline constexpr std::uint32_t kMaxProbes = 2;
// The window sized to the bandwidth-delay product: kBdpWindowGain times the delivery rate
// measured over each timed packet's round trip (a max filter) times the minimum RTT seen (kept
// kMinRttLifetime), at most kMaxBdpWindow PSNs and at least kMaxUnackedPsns, or kMinBdpWindow
// for kLossyRtts smoothed RTTs after a loss (a go-back-N). Before the first RTT sample the
// window is kMaxUnackedPsns, as rxe's.
//  - Gain 2 (BBR's cwnd gain): a window that limits the rate measures its own rate, so the window
//    doubles per round trip until the RTT is twice the minimum, leaving one BDP of queue to
//    absorb the ACK's batching.
//  - Floor 128 while nothing is lost: a user-space device's round trip varies with its peer's
//    scheduling (rounds, batches, a descheduled process), which the minimum RTT, taken from the
//    luckiest packet, does not see; below rxe's 128 such a path would be held back for nothing
//    (loopback on a busy host measured a minimum RTT of 46 us against an SRTT of 300 us).
//  - Floor 32 after a loss: go-back-N resends everything behind a lost packet, so on a lossy path
//    the window is what each loss costs; 32 PSNs keep the AckReq interval (half the window,
//    below) at 16 packets and let an application-limited QP (a ping-pong measures a low rate)
//    start a stream above a handful of packets.
//  - Ceiling 1024 (4 MiB at MTU 4096, 1 MiB at 1024): a 10 Gb/s path with 3 ms of RTT, far above
//    what a LAN needs, and far below the 2^23 PSNs 24-bit comparisons allow (kMaxPsnSpan).
//    Above 128 PSNs a peer's responder (rxe's accepts any in-order PSN) is only ever sent what
//    it was measured to deliver: the window grows with the rate its ACKs show.
inline constexpr std::uint32_t kBdpWindowGain = 2;
inline constexpr std::uint32_t kMinBdpWindow = 32;
inline constexpr std::int64_t kLossyRtts = 256;
inline constexpr std::uint32_t kMaxBdpWindow = 1024;
inline constexpr Duration kMinRttLifetime = Duration::s(10);

// The switches and parameters of the recovery (QpEnv::recovery; DeviceConfig::adaptive_recovery
// turns all three off). Off, each rule is exactly IBTA's and rxe's: the full ACK timeout, no
// probe, a window of kMaxUnackedPsns.
struct RecoveryParams {
  bool adaptive_rto = true;  // RTO from measured RTTs, within [min_rto, ack_timeout()]
  bool tail_probe = true;    // a tail-loss probe after about 2 * SRTT
  bool bdp_window = true;    // a window sized to the bandwidth-delay product
  Duration min_rto = kMinRto;
  // AckReq on every packet until the first RTT sample: before one only the IBTA timer runs, and
  // a first window whose AckReq packets were dropped would wait it out (an incast's start). Off
  // here, so that a QP's packets carry AckReq where IBTA's requesters put it; a device with the
  // adaptive recovery turns it on (verbs/qp.cc).
  bool ack_req_until_sampled = false;
  static RecoveryParams off() { return RecoveryParams{false, false, false, kMinRto, false}; }
};

// The resolved path of a connected QP or of a UD address handle.
struct AddressVector {
  wire::IpAddress dst;
  std::uint8_t traffic_class = 0;
  std::uint8_t hop_limit = 64;
  std::uint32_t flow_label = 0;
  std::uint16_t udp_sport = 0xc000;
  bool operator==(const AddressVector&) const = default;
};

// The outer headers of a packet from `local` along `av` (the datapath adds the rest).
inline wire::OuterHeaders outer_headers(const wire::IpAddress& local, const AddressVector& av) {
  wire::OuterHeaders o;
  o.src = local;
  o.dst = av.dst;
  o.src.v6 = av.dst.v6;
  o.src_port = av.udp_sport;
  o.traffic_class = av.traffic_class;
  o.ttl = av.hop_limit;
  o.flow_label = av.flow_label;
  return o;
}

// A send work request as the transport takes it (verbs resolved the AH of a UD request).
struct SendRequest {
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  std::uint32_t send_flags = 0;
  std::span<const Sge> sges;   // gathered at transmit time (unless inline)
  std::uint32_t imm_data = 0;  // ImmDt value, or the rkey to invalidate (SEND with Inv, LOCAL_INV)
  std::uint64_t remote_addr = 0;  // RDMA and atomics; BIND_MW: the window's address
  std::uint32_t rkey = 0;         // BIND_MW: the window's new key
  std::uint64_t compare_add = 0;  // atomics
  std::uint64_t swap = 0;
  std::uint32_t flush_length = 0;        // FLUSH: the RETH's length
  std::uint8_t flush_placement = 0;      // FLUSH: the FETH (wire::kFlushGlobal ...)
  std::uint8_t flush_selectivity = 0;    // FLUSH: wire::kFlushRange or wire::kFlushMr
  const AddressVector* ud_av = nullptr;  // UD: destination (copied at post)
  std::uint32_t remote_qpn = 0;          // UD
  std::uint32_t remote_qkey = 0;         // UD; high bit set: use the QP's Q_Key
  std::uint32_t xrc_srqn = 0;            // XRC_SEND: the remote XRC SRQ (the XRCETH)
  struct {
    std::uint32_t mw_rkey = 0;  // the window's key as the poster knew it
    std::uint32_t mr_lkey = 0;  // the region behind it
    std::uint64_t length = 0;   // 0: unbind (type 1)
    std::uint32_t access = 0;   // remote access it grants
  } bind;                       // BIND_MW
};

// What the receiver learnt from the outer headers of a packet.
struct PacketInfo {
  wire::IpAddress src;
  std::uint16_t src_port = 0;
  std::uint8_t ecn = 0;  // IP ECN bits (3 = CE)
  ConstBytes ip_header;  // for a UD receive's GRH area (20 or 40 bytes; may be empty)
  // The packet's ICRC is not checked yet: the engine checks it, in the same pass as it places
  // the payload where Qp::one_pass_target() says, before the QP sees the packet. Null: the
  // receiver verified it already (every receiver but the engine's deferred path).
  wire::PendingIcrc* pending = nullptr;
  // The payload is in place already (at the destination one_pass_target() gave, just before
  // this handle_packet() call): the QP does everything else as usual but does not copy it.
  bool payload_placed = false;
  // False: the packet may not teach a connected QP its peer's UDP port (set_peer_udp_port's
  // learning), though it passes every check: a plain packet on a device that seals, whose
  // sealed packets alone prove their sender (docs/SECURITY.md).
  bool may_teach_port = true;
};

// A packet to transmit: transport headers built, payload gathered by reference (the spans stay
// valid until the next call into the QP: the QP copies nothing). The engine adds the outer
// headers, pad and ICRC; datapath/udp copies the payload once, fused with its CRC, into the
// buffer the packet leaves from.
struct TxPacket {
  static constexpr std::size_t kMaxHeaderBytes = 48;
  static constexpr std::size_t kMaxPieces = kMaxSge;
  AddressVector av;
  std::array<std::byte, kMaxHeaderBytes> header{};
  std::uint32_t header_bytes = 0;
  std::array<ConstBytes, kMaxPieces> pieces{};
  std::uint32_t num_pieces = 0;
  std::uint32_t payload_bytes = 0;
  ConstBytes header_span() const { return ConstBytes(header).first(header_bytes); }
  std::span<const ConstBytes> payload() const { return std::span(pieces).first(num_pieces); }
};

// Counters of one QP (shown by `uroce stats`, in the spirit of rdma statistic).
struct QpCounters {
  std::uint64_t packets_sent = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t packets_received = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t retransmitted_packets = 0;
  std::uint64_t timeouts = 0;
  std::uint64_t rnr_naks_received = 0;
  std::uint64_t rnr_naks_sent = 0;
  std::uint64_t seq_naks_received = 0;
  std::uint64_t seq_naks_sent = 0;
  // A READ response or atomic ACK beyond the expected PSN made the requester go back at once
  // (an implied NAK; ConnectX's implied_nak_seq_err) instead of waiting for its ACK timeout.
  std::uint64_t implied_naks = 0;
  std::uint64_t other_naks_received = 0;
  std::uint64_t other_naks_sent = 0;
  std::uint64_t duplicate_requests = 0;
  std::uint64_t out_of_sequence = 0;
  std::uint64_t dropped = 0;  // packets a QP ignored: wrong state, wrong transport, stale response
  std::uint64_t qkey_violations = 0;
  std::uint64_t ud_no_wqe_drops = 0;
  // A WQE failed because retry_cnt (ACK timeouts, sequence NAKs) or rnr_retry ran out: rxe's
  // RXE_CNT_RETRY_EXCEEDED and RXE_CNT_RNR_RETRY_EXCEEDED.
  std::uint64_t retry_exceeded = 0;
  std::uint64_t rnr_retry_exceeded = 0;
  // RC/UC packets whose IP source is not the QP's path (rxe's check_addr()): dropped before they
  // touch any state, CNPs and ECN marks included.
  std::uint64_t src_addr_mismatch = 0;
  // RC/UC packets from the path's address but not from the peer's UDP source port (source
  // pinning, Qp::set_peer_udp_port): dropped as early, so a co-located user who binds the peer's
  // address on another port cannot inject.
  std::uint64_t src_port_mismatch = 0;
  // A held ACK left without the request it waited for (only_ack_to_send): the engine's hold ran
  // out, or it flushed the ACK because the application blocked or a QP changed. This QP then
  // stops holding ACKs of that kind of message until its application answers one.
  std::uint64_t acks_held_unanswered = 0;
  // A deferred ACK (Qp::defer_ack) left alone: the peer waited for it instead of sending its
  // next request. This QP then stops deferring ACKs of that kind of message.
  std::uint64_t acks_deferred_unanswered = 0;
  // Congestion notification, with mlx5's names: CE-marked packets received (the notification
  // point's input), CNPs this QP sent for them, CNPs it received (the reaction point's input).
  std::uint64_t np_ecn_marked_roce_packets = 0;
  std::uint64_t np_cnp_sent = 0;
  std::uint64_t rp_cnp_handled = 0;
  // Loss recovery (recovery.cc): retransmission timeouts that fired before the IBTA ACK timeout
  // (from the RTT; they spend no retry_cnt), and tail-loss probes sent. `timeouts` counts the
  // IBTA timer's expiries only (ConnectX: local_ack_timeout_err).
  std::uint64_t adaptive_timeouts = 0;
  std::uint64_t tail_probes = 0;
  // Adaptive timeouts found spurious: the first progress after one came sooner than the minimum
  // RTT after it, so it acknowledged packets sent before the timeout (the RTO backs off).
  std::uint64_t spurious_timeouts = 0;
  // Selective repeat (negotiated between uroce peers): packets the requester resent alone for a
  // responder that kept what followed them, and out-of-order requests this responder kept.
  std::uint64_t selective_retransmits = 0;
  std::uint64_t out_of_order_kept = 0;
  // XRC_RECV: requests whose XRCETH named no XRC SRQ of the QP's XRC domain (unknown, or
  // another domain's), answered with a NAK (Invalid Request) and not executed.
  std::uint64_t xrc_bad_srqn = 0;
  // Messages, to compare the two ends of a connection once it is idle: work requests this
  // requester completed successfully after sending them (signaled or not), and requests this
  // responder executed in order (each once: the MSN's steps). A connected pair that has gone
  // quiet has one side's messages_completed equal to the other's messages_executed, minus what
  // the responder executed and the requester never heard (an ACK lost on a QP that then failed).
  std::uint64_t messages_completed = 0;
  std::uint64_t messages_executed = 0;

  // Adds every counter of `o` (a device's sums over its QPs, live and destroyed).
  QpCounters& operator+=(const QpCounters& o) {
    packets_sent += o.packets_sent;
    bytes_sent += o.bytes_sent;
    packets_received += o.packets_received;
    bytes_received += o.bytes_received;
    retransmitted_packets += o.retransmitted_packets;
    timeouts += o.timeouts;
    rnr_naks_received += o.rnr_naks_received;
    rnr_naks_sent += o.rnr_naks_sent;
    seq_naks_received += o.seq_naks_received;
    seq_naks_sent += o.seq_naks_sent;
    implied_naks += o.implied_naks;
    other_naks_received += o.other_naks_received;
    other_naks_sent += o.other_naks_sent;
    duplicate_requests += o.duplicate_requests;
    out_of_sequence += o.out_of_sequence;
    dropped += o.dropped;
    qkey_violations += o.qkey_violations;
    ud_no_wqe_drops += o.ud_no_wqe_drops;
    retry_exceeded += o.retry_exceeded;
    rnr_retry_exceeded += o.rnr_retry_exceeded;
    src_addr_mismatch += o.src_addr_mismatch;
    src_port_mismatch += o.src_port_mismatch;
    acks_held_unanswered += o.acks_held_unanswered;
    acks_deferred_unanswered += o.acks_deferred_unanswered;
    np_ecn_marked_roce_packets += o.np_ecn_marked_roce_packets;
    np_cnp_sent += o.np_cnp_sent;
    rp_cnp_handled += o.rp_cnp_handled;
    adaptive_timeouts += o.adaptive_timeouts;
    tail_probes += o.tail_probes;
    spurious_timeouts += o.spurious_timeouts;
    selective_retransmits += o.selective_retransmits;
    out_of_order_kept += o.out_of_order_kept;
    xrc_bad_srqn += o.xrc_bad_srqn;
    messages_completed += o.messages_completed;
    messages_executed += o.messages_executed;
    return *this;
  }
};

// XRC (IBTA 9.8.1.1 / 11.2.5): a QP of RC's protocol whose packets carry XRC opcodes. The
// requester half (XRC_SEND, the initiator) names the remote XRC SRQ in each request's XRCETH and
// has no receive side; the responder half (XRC_RECV, the target) has no send queue and takes
// each request's receive WQE, CQ and PD from the XRC SRQ its XRCETH names.
enum class XrcRole : std::uint8_t { kNone, kSend, kRecv };

struct QpEnv {
  MemoryResolver* memory = nullptr;
  CompletionSink* send_cq = nullptr;
  CompletionSink* recv_cq = nullptr;
  RecvQueue* rq = nullptr;  // the QP's own RQ or its SRQ
  bool rq_is_srq = false;
  EventSink* events = nullptr;
  cc::CongestionControl* cc = nullptr;
  std::uint32_t pd = 0;
  std::uint32_t port_mtu_bytes = 1024;  // UD messages are limited by the port MTU
  RecoveryParams recovery;              // RC loss recovery (recovery.cc)
  // XRC (type kRc): the role, and for kRecv the XRC domain and its SRQs. An XRC_RECV QP's rq
  // is an empty placeholder (rq_is_srq set): each request binds the SRQ it names.
  XrcRole xrc = XrcRole::kNone;
  std::uint32_t xrcd = 0;
  XrcSrqTable* xrc_srqs = nullptr;
};

class Qp {
 public:
  Qp(std::uint32_t qpn, QpType type, const QpCap& cap, const QpEnv& env);
  Qp(const Qp&) = delete;
  Qp& operator=(const Qp&) = delete;

  std::uint32_t qpn() const { return qpn_; }
  QpType type() const { return type_; }
  QpState state() const { return state_; }
  const QpAttr& attr() const { return attr_; }
  const QpCap& cap() const { return cap_; }
  const QpCounters& counters() const { return counters_; }
  const AddressVector& path() const { return path_; }
  // The responder's next expected PSN and its MSN (ClosedQps keeps them when the QP goes).
  std::uint32_t responder_psn() const { return resp_.psn; }
  std::uint32_t responder_msn() const { return resp_.msn; }
  // The requester's next PSN to send and the completer's oldest unacknowledged one (`uroce stats
  // --qp`: a stalled connection shows which side waits for what).
  std::uint32_t requester_psn() const { return req_.psn; }
  std::uint32_t completer_psn() const { return comp_.psn; }
  // True while the responder has an ACK, NAK or READ/atomic response waiting to be sent.
  bool responses_waiting() const { return !responses_.empty(); }
  // The local ACK timeout, 4.096 us * 2^timeout (infinite for timeout 0).
  Duration ack_timeout() const;
  // Loss recovery's state (recovery.cc), for `uroce stats`: the smoothed RTT and the minimum RTT
  // (zero before the first sample), the retransmission timeout in force (backoff included) and
  // the PSN window of SENDs, WRITEs and atomics (congestion control's included).
  Duration srtt() const { return rec_.srtt; }
  Duration min_rtt() const { return rec_.samples == 0 ? Duration::zero() : rec_.min_rtt; }
  Duration rto() const;
  std::uint32_t send_window() const;
  // Changes the recovery's switches (QpEnv::recovery gave them at construction).
  void set_recovery(const RecoveryParams& p) { env_.recovery = p; }
  // What the QP's congestion control holds now (`uroce stats --qp`).
  cc::CcState cc_state() const { return env_.cc->state(); }

  // Applies attributes; verbs validated the transition and mask. `path` is the resolved form of
  // attr.ah_attr when mask has kQpAv. Moving to ERR flushes; to RESET clears all state.
  void modify(const QpAttr& attr, std::uint32_t mask, const AddressVector& path);

  // Errc::kInvalidArgument for a bad request or state, kNoMemory when the send queue is full.
  Errc post_send(const SendRequest& wr);
  // For a QP with its own RQ: posts to it (flushed at once in ERR).
  Errc post_recv(std::uint64_t wr_id, std::span<const Sge> sges);

  void handle_packet(Instant now, const wire::RocePacket& pkt, const PacketInfo& info);
  // One pass over the payload on receive (issue 14). For a packet whose ICRC is not checked yet:
  // when it, if intact, would be placed by handle_packet() as it is, at a destination that this
  // QP's state alone chose, fills `out` (kMaxSge entries) with that destination, resolved with
  // the same checks handle_packet() makes, in payload order, and returns how many pieces; else 0.
  // That is the next expected PSN of a message in progress that a verified packet started: RC
  // SEND and WRITE Middle/Last at the responder's ePSN (the receive WQE at recv_offset, the
  // WRITE at write_va, its length exactly as execute_request() requires), and RC READ response
  // Middle/Last at the completer's PSN inside an open response stream (wire::icrc_deferrable:
  // not UC, which retransmits nothing). A corrupted packet placed there writes only bytes that
  // the retransmission of its PSN rewrites (RDMA leaves them undefined until the operation
  // completes; a SEND's, whose length the responder learns only at its Last, may run up to a
  // path MTU past the message's end inside the receive buffer); nothing of its own headers
  // picks the place.
  // Changes nothing. The caller, after copying, calls handle_packet() with payload_placed set
  // (if the ICRC holds) before anything else reaches this QP.
  std::size_t one_pass_target(const wire::RocePacket& pkt, const PacketInfo& info,
                              std::span<MutBytes> out) const;
  void handle_timeout(Instant now);
  bool poll_transmit(Instant now, TxPacket& out);
  // The earliest time handle_timeout() or poll_transmit() has work (never() when idle).
  Instant poll_timeout() const;
  // True when poll_transmit() would give a packet now (ignoring congestion-control pacing).
  bool has_transmit_work() const;
  // The ACK-hold and deferral policy's calls (engine/ack_policy.h); the rules are AckState's
  // (transport/ack_state.h). only_ack_to_send: all poll_transmit() would give now is one
  // positive ACK that may wait for a request (AckState::may_hold).
  bool only_ack_to_send(std::uint32_t max_outstanding = 1) const {
    return acks_.may_hold(ack_facts(), max_outstanding);
  }
  static constexpr std::uint8_t kMinTimeoutToHoldAck = AckState::kMinTimeoutToHoldAck;
  // The engine held this QP's ACK: a request ready with it goes out first.
  void note_ack_held() {
    UROCE_ASSERT(type_ == QpType::kRc);  // only RC answers with ACKs
    acks_.held(sq_count_);
  }
  // Right after poll_transmit gave the request that overtook a held ACK: that ACK may stay
  // behind it (AckState::may_defer); defer_ack() keeps it there, still held.
  bool ack_deferrable() const { return acks_.may_defer(ack_facts()); }
  void defer_ack() {
    UROCE_ASSERT(ack_deferrable());
    acks_.defer();
  }

  // Selective repeat with this QP's peer (RC only; off by default, and never towards a peer that
  // is not uroce): the responder keeps verified out-of-order requests whose place validated
  // state fixes, and the requester resends only what a NAK marked with kBthSrKeptBit names.
  // Set by whatever negotiated it (verbs, from the CM or the device's configuration; the
  // simulator and tests directly), before the QP carries traffic: turning it on allocates its
  // slots (kSrWindow of them), once. docs/ARCHITECTURE.md, "Selective repeat".
  void set_selective_repeat(bool on);
  bool selective_repeat() const { return sr_.on; }

  // Source pinning (connected QPs): the UDP source port the peer's packets must come from, on
  // top of the path's address. `port` when it is known before any packet: a uroce peer sends
  // everything from the port it is bound to, 4791, which another user of its host cannot bind.
  // nullopt: learn it, the port of the first packet from the path's address that passes the
  // PSN checks (a request at the ePSN, a response to an outstanding PSN), for rxe (which sends
  // every packet of a QP from rdma_get_udp_sport()) and hardware. A learned port is forgotten
  // when the path changes and at RESET; a known one at RESET only. CNPs are held to a known port
  // only: ConnectX sends its CNPs from port 0 (roce-facts.md). Set by verbs at INIT -> RTR;
  // learning is the default.
  void set_peer_udp_port(std::optional<std::uint16_t> port);
  // The port packets must come from now; nullopt while it is still to be learned.
  std::optional<std::uint16_t> peer_udp_port() const {
    if (!sport_pinned_) return std::nullopt;
    return sport_;
  }

  // Testing hook: number of send WQEs not yet completed.
  std::uint32_t outstanding_send_wqes() const { return sq_count_; }
  // Testing hook: the send queue, empty and with nothing outstanding, numbers its next WQE
  // `index` (the ring's 32-bit indices wrap after 2^32 WQEs).
  void start_send_queue_at_for_testing(std::uint32_t index);

 private:
  // ---- send queue ----
  enum class WqeState : std::uint8_t { kPosted, kSending, kPending, kDone };
  struct SendWqe {
    std::uint64_t wr_id = 0;
    const WrOpcodeInfo* wr_op = nullptr;  // its opcode's row of the work-request table
    std::uint32_t send_flags = 0;
    std::uint32_t imm_data = 0;
    std::uint64_t remote_addr = 0;
    std::uint32_t rkey = 0;
    std::uint64_t compare_add = 0;
    std::uint64_t swap = 0;
    std::uint32_t flush_length = 0;
    std::uint8_t flush_placement = 0;
    std::uint8_t flush_selectivity = 0;
    std::uint32_t bind_mw_rkey = 0;  // BIND_MW (SendRequest::bind)
    std::uint32_t bind_mr_lkey = 0;
    std::uint64_t bind_length = 0;
    std::uint32_t bind_access = 0;
    AddressVector ud_av;
    std::uint32_t remote_qpn = 0;
    std::uint32_t remote_qkey = 0;
    std::uint32_t xrc_srqn = 0;  // XRC_SEND
    std::uint32_t num_sge = 0;
    bool is_inline = false;
    std::uint64_t length = 0;  // total message bytes
    WqeState state = WqeState::kPosted;
    // Its first packet was sent. Unlike `state`, this survives a go-back-N: SQD lets a started
    // WQE finish, retransmissions included.
    bool started = false;
    std::uint32_t first_psn = 0;
    std::uint32_t last_psn = 0;
    std::uint64_t sent_bytes = 0;  // bytes already packetized (resume point)
    std::uint64_t read_bytes = 0;  // RDMA READ: bytes of response placed
    // RDMA READ: PSN of the latest READ request sent for this WQE (the first one or a
    // re-request of the rest after a retry). The response packet at this PSN starts a response
    // stream whatever its opcode: a fresh request gets First/Only, but rxe answers a re-request
    // that starts mid-message by continuing the original opcode sequence (Middle/Last).
    std::uint32_t read_req_psn = 0;
    WcStatus error = WcStatus::kSuccess;  // set when this WQE failed; flushed with this status
  };
  // `i` is a ring index within the queue's window (from sq_tail_): an older one would name a
  // slot that a newer WQE reuses.
  SendWqe& sq_at(std::uint32_t i) {
    UROCE_ASSERT(i - sq_tail_ < sq_capacity_);
    return sq_[i & sq_mask_];
  }
  const SendWqe& sq_at(std::uint32_t i) const {
    UROCE_ASSERT(i - sq_tail_ < sq_capacity_);
    return sq_[i & sq_mask_];
  }
  std::span<Sge> sges_of(std::uint32_t index);
  std::span<const Sge> sges_of(std::uint32_t index) const;
  std::span<std::byte> inline_of(std::uint32_t index);

  // ---- requester (requester.cc) ----
  bool poll_request(Instant now, TxPacket& out);
  // Executes the local operation (LOCAL_INV, BIND_MW) at the head of the send queue and
  // completes it; false when it failed (the QP is in error then).
  bool run_local_op();
  // Runs the local operations at the head of the send queue, if every WQE before them is
  // complete (request_ready); false when one failed.
  bool run_local_ops();
  // A local operation is at the head of the send queue with nothing before it (run_local_ops'
  // own test, in line: every packet's poll asks it).
  bool local_op_at_head() const {
    return req_.next_wqe == sq_tail_ && sq_count_ > 0 && sq_at(sq_tail_).wr_op->is_local();
  }
  // The next request may go, apart from an RNR wait and congestion control.
  bool request_ready() const;
  void build_request_packet(SendWqe& w, std::uint32_t index, TxPacket& out);
  // The next packet of a SEND or an RDMA WRITE; false when a bad local key failed the WQE.
  bool build_message_packet(SendWqe& w, std::uint32_t index, std::uint32_t psn,
                            std::uint32_t dest_qpn, TxPacket& out);
  // The headers and payload of the packet of a SEND or WRITE at `psn` (byte `offset`); false
  // when a local key does not resolve. Changes no requester state.
  bool fill_message_packet(const SendWqe& w, std::uint32_t index, std::uint32_t psn,
                           std::uint64_t offset, bool ack_req, std::uint32_t dest_qpn,
                           TxPacket& out);
  bool gather(const SendWqe& w, std::uint32_t index, std::uint64_t offset, std::uint32_t len,
              TxPacket& out);
  void retry_from(std::uint32_t psn);
  // The responder has every PSN up to `through`, some of them sent before a go-back-N rewound
  // the requester and not sent again since: the requester moves past them without resending.
  void skip_acknowledged(std::uint32_t through);
  void complete_unreliable_sends();

  // ---- completer (completer.cc) ----
  void handle_response(Instant now, const wire::RocePacket& pkt, bool placed);
  // The parts of handle_response() for the WQE at `index` (the oldest), answered at `psn`.
  void handle_ack(Instant now, std::uint32_t index, std::uint32_t psn);
  void handle_nak(Instant now, std::uint32_t index, std::uint32_t psn, std::uint8_t syndrome);
  void handle_atomic_ack(Instant now, const wire::RocePacket& pkt, std::uint32_t index,
                         std::uint32_t psn);
  void handle_read_response(Instant now, const wire::RocePacket& pkt, std::uint32_t index,
                            std::uint32_t psn, bool placed);
  void complete_send(std::uint32_t index, WcStatus status);
  void complete_acked_through(std::uint32_t psn);
  bool scatter_read_response(SendWqe& w, std::uint32_t index, std::uint64_t offset,
                             ConstBytes data);
  std::size_t read_response_target(const wire::RocePacket& pkt, std::span<MutBytes> out) const;
  void fail_wqe(std::uint32_t index, WcStatus status);
  void reset_retry_counters();
  void note_progress(Instant now);
  // Tells congestion control what the completer's progress acknowledged (note_progress).
  void report_ack(Instant now);
  void handle_retry_timeout(Instant now);
  // A go-back-N is under way and the completer has not passed the PSN it went back to.
  bool going_back() const;
  // Go back N from `psn`, unless going_back() (or `restart`).
  bool start_retry(std::uint32_t psn, bool restart = false);
  void implied_nak(Instant now, std::uint32_t psn);

  // ---- loss recovery (recovery.cc) ----
  // A request packet left (after its counters): times it if it may be, cancels a timing that a
  // retransmission made ambiguous (Karn), arms the retransmission timer and the probe.
  void note_request_sent(Instant now, std::uint32_t psn, bool fresh, bool ack_req);
  // The completer acknowledged `acked` more PSNs (report_ack): the RTT sample of the timed
  // packet if this covers it (else zero), the delivery rate and window, timers re-armed.
  Duration note_acked(Instant now, std::uint32_t acked);
  // A sequence NAK at `psn` made the requester go back N: the responder discarded every packet
  // after `psn` it received, so the ACK of a retransmission beyond it answers that copy.
  void note_nak_go_back(Instant now, std::uint32_t psn);
  // A go-back-N at `now`: the window follows the BDP below kMaxUnackedPsns for a while.
  void note_loss(Instant now);
  std::uint64_t go_backs() const;  // timeouts of both kinds and implied NAKs, so far
  // A retransmission at `psn` whose ACK can only answer this copy (note_nak_go_back).
  bool unambiguous(std::uint32_t psn) const;
  // The IBTA ACK timer expired (handle_retry_timeout ran): the adaptive timer stands down.
  void note_ibta_timeout(Instant now);
  // The first progress after an adaptive timeout: spurious if sooner than the minimum RTT.
  void note_first_ack_after_rto(Instant now);
  // A packet at `psn` was sent again (note_request_sent, sr_poll_resend).
  void note_resent(std::uint32_t psn);
  // The adaptive retransmission timer or the probe's timer is due (handle_timeout).
  void handle_recovery_timeout(Instant now);
  // The packet a tail-loss probe would resend (its PSN and WQE), if there is one.
  bool probe_target(std::uint32_t& psn, std::uint32_t& index) const;
  // Sends the tail-loss probe that handle_recovery_timeout() asked for.
  bool poll_probe(Instant now, TxPacket& out);
  // The PSN window the requester keeps (before congestion control's), given congestion
  // control's window_packets() (read once by the caller: a virtual call per packet sent).
  std::uint32_t recovery_window(std::uint32_t cc_window) const;
  // ... without the restart after a stall (Recovery::restart_window).
  std::uint32_t steady_window(std::uint32_t cc_window) const;
  // A timeout found no progress since the last one (note_ibta_timeout, handle_recovery_timeout):
  // the go-back-N restarts from a small window.
  void note_stall();
  // AckReq on every this-many packets of a message (kMaxPacketsPerAck, or half a smaller window,
  // so that a window below 64 PSNs is acknowledged before it is full).
  std::uint32_t ack_req_interval() const;
  // RecoveryParams::ack_req_until_sampled is on and there is no RTT sample yet.
  bool awaiting_first_rtt_sample() const;
  // The adaptive timeout before backoff; ack_timeout() without a sample or with adaptive_rto off.
  Duration base_rto() const;
  Duration probe_timeout() const;
  void arm_recovery_timers(Instant now, bool restart_rto);

  // ---- responder (responder.cc) ----
  void handle_request(Instant now, const wire::RocePacket& pkt, const PacketInfo& info);
  void handle_rc_request(const wire::RocePacket& pkt, bool placed);
  enum class RespStatus : std::uint8_t {
    kOk,
    kRnr,               // no receive WQE
    kInvalidRequest,    // class C: NAK invalid request
    kAccessError,       // class A: NAK remote access error
    kOperationalError,  // local QP failure: NAK remote operational error
    kLengthError,       // receive buffer too small: NAK invalid request, LOC_LEN_ERR locally
    kBusy,              // no room for the response now: drop, the requester retries
  };
  // The answer to an RC request executed in order (an ACK, an RNR NAK, an error NAK).
  void answer_request(const wire::RocePacket& pkt, RespStatus s);
  void handle_uc_request(const wire::RocePacket& pkt, bool placed);
  std::size_t request_target(const wire::RocePacket& pkt, std::span<MutBytes> out) const;
  void handle_ud_request(const wire::RocePacket& pkt, const PacketInfo& info);
  void handle_duplicate(const wire::RocePacket& pkt);
  void drop_responses_from(std::uint32_t psn);
  bool poll_response(TxPacket& out);
  // `placed`: the payload is in place already (PacketInfo::payload_placed).
  RespStatus execute_request(const wire::RocePacket& pkt, bool placed);
  // execute_request()'s steps.
  RespStatus check_request(const wire::RocePacket& pkt) const;
  RespStatus execute_send(const wire::RocePacket& pkt, bool placed);
  RespStatus execute_write(const wire::RocePacket& pkt, bool placed);
  RespStatus execute_read(const wire::RocePacket& pkt);
  RespStatus execute_atomic(const wire::RocePacket& pkt);
  RespStatus execute_atomic_write(const wire::RocePacket& pkt);
  RespStatus execute_flush(const wire::RocePacket& pkt);
  bool take_recv_wqe();
  RespStatus scatter_into_recv(std::uint64_t offset, ConstBytes data);
  void complete_recv(WcStatus status, std::uint32_t byte_len, std::uint32_t wc_flags,
                     std::uint32_t imm, WcOpcode opcode, bool solicited, std::uint32_t src_qp,
                     NetworkHdr network_hdr = NetworkHdr::kNone);
  void queue_ack(std::uint8_t syndrome, std::uint32_t psn, AckFor ack_for = AckFor::kNone);
  void responder_error(std::uint8_t nak_syndrome, WcStatus status, std::uint32_t psn);

  // ---- state ----
  void enter_error();
  void update_drain();
  void flush();
  void reset_state();
  // The CNP owed to the peer's QP: BTH opcode 0x81, P_Key 0xffff, BECN set, the peer's QPN,
  // PSN 0, 16 reserved zero bytes (roce-facts.md, IBTA Annex A17), in DSCP 48 (np_cnp_dscp).
  void build_cnp(TxPacket& out);
  // poll_transmit's packets other than a CNP: a held ACK's request, responses, requests.
  bool poll_packet(Instant now, TxPacket& out);
  static constexpr std::uint8_t kEct0 = wire::kEcnEct0;
  static constexpr std::uint8_t kCnpDscp = 48;  // mlx5 np_cnp_dscp's default
  // Writes the BTH (and the XRCETH, with `xrc_srqn`, of an XRC request) of `op`, an RC, UC or UD
  // opcode: an XRC QP sends the XRC opcode of the same operation. Returns the opcode written.
  const wire::OpcodeInfo& build_bth(TxPacket& out, wire::Opcode op, std::uint32_t dest_qpn,
                                    std::uint32_t psn, bool ack_req, bool solicited,
                                    std::uint32_t payload_bytes, std::uint32_t xrc_srqn = 0);
  // The transport of the requests this QP takes (none for an XRC_SEND QP: kCnp never matches a
  // request) and of the responses it takes.
  wire::Transport request_transport() const;
  wire::Transport response_transport() const;
  // XRC_RECV: points the responder at the XRC SRQ the request's XRCETH names (its RQ, CQ, PD).
  bool bind_xrc_srq(const wire::RocePacket& pkt);
  // XRC_RECV: lets go of the SRQ an earlier request bound if the table no longer has it
  // (destroyed), dropping the message in progress into it; see responder.cc.
  void drop_stale_xrc_srq();
  // XRC_RECV: back to no SRQ (the placeholders QpEnv gave), forgetting any message in progress.
  void unbind_xrc_srq();
  // Source pinning: whether `pkt` may come from `info`'s UDP port (set_peer_udp_port), and
  // whether it passes the PSN checks that let its port be learned.
  bool from_peer_port(const wire::RocePacket& pkt, const PacketInfo& info) const;
  bool pins_port(const wire::RocePacket& pkt) const;

  std::uint32_t qpn_;
  QpType type_;
  QpCap cap_;
  QpEnv env_;
  // XRC_RECV: the receive queue and CQ placeholders QpEnv gave (the QP's own when no SRQ is
  // bound), and the number and serial (XrcSrqTarget) of the SRQ bound, whose queue and CQ are
  // env_.rq and env_.recv_cq while it is.
  struct {
    RecvQueue* idle_rq = nullptr;
    CompletionSink* idle_cq = nullptr;
    std::uint32_t srqn = 0;
    std::uint64_t serial = 0;
  } xrc_;
  QpState state_ = QpState::kReset;
  QpAttr attr_;
  AddressVector path_;
  // Source pinning (set_peer_udp_port): the port, whether there is one, and whether it was
  // known before any packet (kept across path changes, and CNPs held to it) or learned.
  std::uint16_t sport_ = 0;
  bool sport_pinned_ = false;
  bool sport_known_ = false;
  std::uint32_t mtu_bytes_ = 1024;
  QpCounters counters_;

  // Send queue ring: [sq_tail_, sq_tail_ + sq_count_) are posted and not yet completed, at most
  // sq_capacity_ (max_send_wr) of them. Index i lives in slot i & sq_mask_, of a power-of-two
  // number of slots: a mask, not a division, per look-up, and the same slots on both sides of the
  // 32-bit indices' wrap (with i % max_send_wr, 2^k - 1 slots, index 0 after 2^32 - 1 would
  // take a slot that an outstanding WQE holds).
  std::uint32_t sq_capacity_;
  std::uint32_t sq_mask_;
  std::vector<SendWqe> sq_;
  std::vector<Sge> sq_sges_;
  std::vector<std::byte> sq_inline_;
  std::uint32_t sq_tail_ = 0;
  std::uint32_t sq_count_ = 0;

  // Requester.
  struct Requester {
    std::uint32_t next_wqe = 0;  // ring index of the WQE being sent / to send next
    std::uint32_t psn = 0;       // next PSN to send
    std::uint32_t noack_packets = 0;
    std::uint32_t rd_atomic_inflight = 0;
    Instant rnr_resume = Instant::never();  // waiting out an RNR NAK until then
    Instant pace_until = Instant::never();  // congestion control holds the next packet
    std::uint32_t max_sent_psn = 0;         // highest PSN sent, to count retransmissions
    // One past the last PSN any request took (a READ takes its responses' PSNs): what `psn`
    // reached before a go-back-N rewound it. Responses below it answer requests that were sent.
    std::uint32_t psn_end = 0;
    bool sent_any = false;
    bool draining_done_event = false;
  } req_;

  // Completer.
  struct Completer {
    std::uint32_t psn = 0;  // oldest PSN not yet acknowledged
    std::uint32_t retry_cnt = 0;
    std::uint32_t rnr_retry = 0;
    Instant deadline = Instant::never();  // local ACK timeout
    bool read_stream_open = false;        // inside First..Last of READ responses
    // A go-back-N started by a NAK or a lost response is not started again by the responses to
    // packets sent before it, until the completer makes progress (rxe: started_retry, cleared
    // by reset_retry_counters).
    bool retry_started = false;
    std::uint32_t retry_psn = 0;
    // While going back: the PSN of the last response seen beyond the gap (implied_nak).
    std::uint32_t stream_psn = 0;
    // The PSN of the last stale response (below psn): handle_response.
    std::uint32_t stale_psn = 0;
    // The PSN up to which congestion control has heard of acknowledgements (report_ack).
    std::uint32_t reported_psn = 0;
  } comp_;

  // Loss recovery (recovery.cc): RTT samples (RFC 6298), the adaptive retransmission timer, the
  // tail-loss probe and the BDP window.
  struct Recovery {
    bool timing = false;          // a packet is timed
    std::uint32_t timed_psn = 0;  // its (first) PSN
    Instant timed_at;
    std::uint64_t delivered_at_send = 0;  // `delivered` when it left
    std::uint64_t delivered = 0;          // PSNs acknowledged in all
    std::uint32_t samples = 0;
    Duration srtt = Duration::zero();
    Duration rttvar = Duration::zero();
    Duration min_rtt = Duration::infinite();
    Instant min_rtt_at;
    double rate_pps = 0;       // delivery rate, packets per second (max filter, slow decay)
    std::uint32_t window = 0;  // the BDP window; 0 before the first sample
    bool lossy = false;        // a go-back-N came less than kLossyRtts SRTTs ago
    Instant lossy_until;
    std::uint32_t backoff = 0;  // adaptive timeouts since the last progress (RTO doubles)
    // After a timeout without progress (note_stall): the window, from kMinBdpWindow, growing by
    // each PSN acknowledged, until it reaches steady_window(); 0: none.
    std::uint32_t restart_window = 0;
    // Raised by each spurious adaptive timeout (twice the RTO that fired, at most the ACK
    // timeout), for the QP's life: base_rto() never goes below it.
    Duration rto_floor = Duration::zero();
    // The last adaptive timeout, until the first progress after it says whether it was spurious.
    bool rto_check = false;
    Instant rto_fired_at;
    // A retransmission (a go-back-N's, a probe, a selective resend) not yet acknowledged: the
    // highest PSN resent. Its ACK could come at any time, so a timeout then is not tested.
    bool resent_unacked = false;
    std::uint32_t resent_psn = 0;
    Duration rto_fired = Duration::zero();  // the RTO that expired
    Instant rto_deadline = Instant::never();
    Instant probe_deadline = Instant::never();
    std::uint32_t probes = 0;    // probes sent since the last progress (kMaxProbes at most)
    bool probe_due = false;      // poll_transmit sends the probe next
    bool force_ack_req = false;  // the packet being built carries AckReq (the probe)
    // The go-back-N a sequence NAK started (note_nak_go_back): its PSN, and the count of other
    // go-backs (timeouts, implied NAKs) then, which a newer one changes.
    bool nak_go_back = false;
    std::uint32_t nak_psn = 0;
    std::uint64_t go_backs = 0;
  } rec_;

  // Responder.
  enum class MsgKind : std::uint8_t { kNone, kSend, kWrite };
  struct Responder {
    std::uint32_t psn = 0;          // expected PSN (ePSN)
    std::uint32_t unacked_psn = 0;  // the first PSN no positive ACK this QP sent covers
    std::uint32_t msn = 0;
    bool nak_sent = false;                // one NAK per out-of-sequence run
    MsgKind in_message = MsgKind::kNone;  // inside a multi-packet SEND or WRITE
    bool uc_drop_until_first = false;
    // Current receive WQE (taken at the first packet of a SEND / WRITE with immediate).
    bool has_wqe = false;
    std::uint64_t wqe_id = 0;
    std::array<Sge, kMaxSge> wqe_sges{};
    std::uint32_t wqe_num_sge = 0;
    std::uint64_t recv_offset = 0;
    // Current RDMA WRITE.
    std::uint64_t write_va = 0;
    std::uint32_t write_rkey = 0;
    std::uint64_t write_resid = 0;
    std::uint64_t write_length = 0;
    bool goto_error = false;
  } resp_;

  // READ and atomic responder resources (max_dest_rd_atomic of them, reused oldest first).
  struct RdAtomicResource {
    bool valid = false;
    bool is_read = false;
    std::uint32_t first_psn = 0;
    std::uint32_t last_psn = 0;
    std::uint64_t va = 0;
    std::uint32_t rkey = 0;
    std::uint64_t length = 0;
    std::uint64_t orig = 0;  // atomic: the value before the operation
    std::uint32_t msn = 0;
    // The PD its keys were checked against (accept_rd_atomic sets it): an XRC target's changes
    // with the SRQ each request names, and replays and responses sent later use this one.
    std::uint32_t pd = 0;
  };
  std::vector<RdAtomicResource> resources_;
  void accept_rd_atomic(const RdAtomicResource& saved);
  void queue_rd_atomic_response(std::uint32_t resource, std::uint32_t psn, std::uint64_t va,
                                std::uint64_t length, std::uint32_t rkey);
  std::uint32_t next_resource_ = 0;

  // Responses waiting to be sent, in PSN order: READ responses and atomic ACKs, each followed by
  // at most one ACK or NAK (queue_ack coalesces), so the ring (3 * max_dest_rd_atomic + 4, see
  // qp.cc) never has to drop an ACK or a NAK.
  struct Response {
    enum class Kind : std::uint8_t { kAck, kRead, kAtomic } kind = Kind::kAck;
    std::uint8_t syndrome = 0;
    std::uint32_t psn = 0;  // ACK: acknowledged PSN; READ: next response PSN
    std::uint32_t msn = 0;
    std::uint64_t offset = 0;  // READ: bytes already sent
    std::uint64_t va = 0;      // READ: where this (possibly replayed) response starts
    std::uint64_t length = 0;
    std::uint32_t rkey = 0;
    std::uint64_t orig = 0;  // atomic: the original value, computed when the atomic executed
    std::uint32_t pd = 0;    // READ: its resource's PD (RdAtomicResource::pd)
    // ACK: the kind of message whose last packet it acknowledges (a SEND or WRITE executed in
    // order), kNone for any other (a mid-message ACK, requested every kMaxPacketsPerAck
    // packets, opens the peer's window for the rest of the message and is never held; a
    // duplicate's re-ACK answers a retry).
    AckFor ack_for = AckFor::kNone;
    bool sr_kept = false;  // a sequence NAK with kBthSrKeptBit (selective repeat)
  };
  BoundedRing<Response> responses_;

  // ---- selective repeat (selective_repeat.cc) ----
  // One out-of-order request the responder keeps: its headers (BTH and extension headers, then
  // 4 zero bytes where the ICRC was), replayed through execute_request() when its PSN comes up;
  // its payload, if any, is in place already.
  struct SrSlot {
    bool held = false;
    std::uint32_t psn = 0;
    std::uint16_t payload_bytes = 0;
    std::array<std::byte, 44> header{};
    // Where its payload went (host addresses): a packet kept before an earlier one that writes
    // the same bytes wins over it (sr_copy), as it would in order.
    std::uint8_t pieces = 0;
    std::array<std::uintptr_t, 2> piece_at{};
    std::array<std::uint16_t, 2> piece_len{};
  };
  static constexpr std::size_t kSrPieces = 2;
  // kSrWindow of them, indexed by PSN, once selective repeat is turned on (empty before).
  std::vector<SrSlot> sr_slots_;
  struct SelectiveRepeat {
    bool on = false;
    // Responder.
    std::uint32_t held = 0;     // slots held, all beyond resp_.psn
    bool cut = false;           // a verified out-of-order request could not be kept ...
    std::uint32_t cut_psn = 0;  // ... at this PSN: nothing at or beyond it is kept
    bool told_kept = false;     // the last NAK of this run carried kBthSrKeptBit
    bool draining = false;      // execute_request() replays a kept request
    // Requester.
    bool resend_pending = false;  // resend the packet at resend_psn alone
    bool resend_active = false;   // it went out; naks_left more NAKs of it are expected
    std::uint32_t resend_psn = 0;
    std::uint32_t naks_left = 0;
    std::uint32_t naks_seen = 0;  // NAKs of resend_psn since it was first reported
    // A resend that brings no progress within sr_rto() goes again (sr_resend_timeout): the
    // NAKs that would tell of its loss need new packets, and a full window sends none.
    Instant resend_deadline = Instant::never();
    std::uint32_t resends = 0;             // of this hole
    Instant resent_at = Instant::never();  // its first resend, for an RTT sample
    Duration srtt = Duration::ns(0);       // smoothed from those samples (0: none yet)
  } sr_;
  Duration sr_rto() const;
  // retry_from(psn) with selective repeat on: everything from psn goes again, and a NAK with
  // kBthSrKeptBit at psn after those of the packets sent before means it was lost again.
  void sr_going_back(std::uint32_t psn);
  void sr_after_response(Instant now);
  void sr_resend_timeout(Instant now);
  SrSlot& sr_slot(std::uint32_t psn) { return sr_slots_[psn % kSrWindow]; }
  bool sr_holds(std::uint32_t psn) const {
    const SrSlot& s = sr_slots_[psn % kSrWindow];
    return s.held && s.psn == psn;
  }
  // Responder: an out-of-order request (past resp_.psn); the one after an in-order request.
  void sr_out_of_order(const wire::RocePacket& pkt);
  void sr_after_in_order(std::uint32_t psn, RespStatus s);
  // Keeps an out-of-order request when its place and effect are certain already: the steps
  // below, in order. False (nothing kept) otherwise.
  bool sr_keep(const wire::RocePacket& pkt);
  // The checks that do not depend on order: within the window, a kind that may be kept, the QP's
  // access flags, and a payload size its opcode allows.
  bool sr_keepable(const wire::RocePacket& pkt) const;
  // The nearest kept First below `psn`, past the ePSN; resp_.psn when there is none.
  std::uint32_t sr_message_start(std::uint32_t psn) const;
  // Where a WRITE whose validated RETH covers a PSN puts that PSN's payload.
  struct SrWrite {
    bool in_write = false;
    std::uint64_t va = 0;     // the address of the packet at the PSN
    std::uint64_t resid = 0;  // the bytes of that WRITE from there on
    std::uint32_t rkey = 0;
  };
  // The WRITE, started at `start` (a kept First, or the message in progress at resp_.psn),
  // that covers `psn`; in_write false when there is none.
  SrWrite sr_write_at(std::uint32_t psn, std::uint32_t start) const;
  // Resolve where a kept WRITE's or SEND's payload goes, as execute_request() would, appending
  // to pieces[n..]; false when it would not be accepted in order either.
  bool sr_write_targets(const wire::RocePacket& pkt, const SrWrite& w, std::span<MutBytes> pieces,
                        std::size_t& n) const;
  bool sr_send_targets(const wire::RocePacket& pkt, std::uint32_t start, std::span<MutBytes> pieces,
                       std::size_t& n) const;
  // Stores the packet in its slot: its payload copied to `pieces`, its headers kept.
  void sr_hold(const wire::RocePacket& pkt, std::span<const MutBytes> pieces);
  // The receive WQE (its position in the RQ) that a SEND starting at `psn`, past the ePSN, will
  // take when its turn comes; -1 when that is not known yet (an SRQ, a PSN before it not kept).
  int sr_recv_wqe_index(std::uint32_t psn) const;
  // Every PSN in (from, to) is a kept SEND Middle or a missing one that must be a Middle of the
  // same SEND (never two in a row; from_missing: the packet at `from` is missing).
  bool sr_send_run(std::uint32_t from, std::uint32_t to, bool from_missing) const;
  bool sr_slot_is(std::uint32_t psn, std::uint32_t flag) const;  // kept, its opcode has `flag`
  // Whether a packet at `psn` (past the ePSN) that writes `pieces` may do so now: every PSN
  // before it is kept or certain to be part of a message whose place is known, and no kept READ
  // or atomic before it reads those bytes. send_continuation: it is a SEND Middle or Last.
  bool sr_order_allows(std::uint32_t psn, bool send_continuation,
                       std::span<const MutBytes> pieces) const;
  // Copies the payload of the packet at `psn` to `pieces`, except the bytes that a kept packet
  // past it placed already. The responder places every request payload through this while it
  // keeps packets (sr_.held), in order or not.
  void sr_copy(std::uint32_t psn, std::span<const MutBytes> pieces, ConstBytes src);
  ScatterResult sr_scatter(std::uint32_t psn, std::span<const Sge> sges, std::uint64_t offset,
                           ConstBytes data);
  void sr_drain();
  void sr_forget(std::uint32_t from, std::uint32_t to);  // slots in [from, to)
  void sr_release_from(std::uint32_t psn);               // slots at or beyond psn
  void sr_queue_seq_nak(bool kept);
  // Requester: a NAK with kBthSrKeptBit; false when it must be taken as a plain sequence NAK.
  bool sr_handle_nak(Instant now, std::uint32_t index, std::uint32_t psn);
  bool sr_poll_resend(Instant now, TxPacket& out);
  // What AckState's decisions read of this QP.
  AckFacts ack_facts() const;

  // A responder error moved the QP to ERR: the responses queued before it, and its NAK last,
  // still leave; then nothing.
  bool drain_responses_in_error_ = false;
  // A CE-marked packet arrived and congestion control asked for a CNP (take_cnp): it leaves
  // before anything else this QP sends (build_cnp).
  bool cnp_owed_ = false;
  // Whether to hold and defer ACKs (transport/ack_state.h): fed events here, asked by the
  // engine through only_ack_to_send and ack_deferrable.
  AckState acks_;
};

}  // namespace uroce::transport

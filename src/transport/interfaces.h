// What the transport needs from the layers around it, as interfaces: the transport owns no
// memory regions, completion queues or receive queues of its own.
//
// All calls happen on the thread that drives the QP (the engine's), during handle_* or
// poll_* calls; implementations must not call back into the QP.
#pragma once

#include <cstdint>
#include <optional>

#include "base/bytes.h"
#include "base/result.h"
#include "uroce/types.h"

namespace uroce::transport {

// Why a memory access was refused. Each maps to one NAK or completion status.
enum class AccessError : std::uint8_t {
  kInvalidKey,        // no such lkey/rkey (or deregistered, or invalidated)
  kWrongPd,           // the key belongs to another protection domain
  kNoPermission,      // the region lacks the access flag
  kOutOfBounds,       // [addr, addr+length) is not inside the region
  kNotInvalidatable,  // invalidate(): an ordinary MR or a type 1 window (IBTA o10-37.2.26)
  kWrongQp,           // a type 2 memory window bound to another QP
  kNotMapped,         // an on-demand region's pages are not mapped with the access asked for
};

// A memory window bind (IBV_WR_BIND_MW, and ibv_bind_mw for a type 1 window), as the requester
// executes it when the work request reaches the head of the send queue (rxe_bind_mw()).
struct MwBindRequest {
  std::uint32_t pd = 0;        // the posting QP's protection domain
  std::uint32_t qpn = 0;       // the posting QP (a type 2 window is bound to it)
  std::uint32_t mw_rkey = 0;   // the window's key when the bind was posted
  std::uint32_t new_rkey = 0;  // its low 8 bits become the window's key byte
  std::uint32_t mr_lkey = 0;   // the region the window opens (length 0: none, an unbind)
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  std::uint32_t access = 0;  // the remote access the window grants (IBV_ACCESS_REMOTE_*)
};

// Memory protection in one place (implemented by verbs/). Keys are resolved on every access,
// so that a region deregistered while operations are in flight is never touched again.
class MemoryResolver {
 public:
  virtual ~MemoryResolver() = default;
  // The bytes of [addr, addr + length) under `key` (an lkey when !remote, an rkey when remote),
  // for QP `qpn` in protection domain `pd`, with `access` (AccessFlag bits) all granted. A local
  // key always grants local read. An rkey may name a memory window: its range, access and PD
  // count, and a type 2 window's QP. Zero-length accesses are not resolved by the transport (a
  // zero-length RDMA operation checks no key).
  virtual Result<MutBytes, AccessError> resolve(std::uint32_t pd, std::uint32_t qpn,
                                                std::uint32_t key, bool remote, std::uint64_t addr,
                                                std::uint64_t length, std::uint32_t access) = 0;
  // The whole region (or window) under `rkey` for QP `qpn` in `pd`, with `access` all granted
  // (a FLUSH of a memory region, IBTA 1.5: no range to check).
  virtual Result<MutBytes, AccessError> resolve_region(std::uint32_t pd, std::uint32_t qpn,
                                                       std::uint32_t rkey,
                                                       std::uint32_t access) = 0;
  // Invalidates `rkey`: SEND with Invalidate received by QP `qpn` (remote), or LOCAL_INV posted
  // on it. Returns why it cannot be, if it cannot; the region or window is then unchanged (the
  // responder NAKs Invalid Request, IBTA o10-37; the requester fails the LOCAL_INV).
  virtual Result<bool, AccessError> invalidate(std::uint32_t pd, std::uint32_t qpn,
                                               std::uint32_t rkey, bool remote) = 0;
  // Binds a memory window (or unbinds a type 1 window: length 0). The window is unchanged on
  // an error (the bind completes with IBV_WC_MW_BIND_ERR).
  virtual Result<bool, AccessError> bind_mw(const MwBindRequest& bind) = 0;
};

// A completion queue, as the transport sees it. The queue handles its own overflow (verbs: the
// CQ enters error and raises an async event; the completion is lost).
class CompletionSink {
 public:
  virtual ~CompletionSink() = default;
  virtual void push(const Wc& wc, bool solicited) = 0;
};

// The XRC SRQs of a device (IBTA 9.8.1.1, XRC): where an XRC_RECV QP's requests land. An XRC
// request names its SRQ in the XRCETH; the responder takes the receive WQE from it, completes
// into its CQ and checks keys against its PD.
class RecvQueue;
struct XrcSrqTarget {
  RecvQueue* rq = nullptr;
  CompletionSink* cq = nullptr;
  std::uint32_t pd = 0;
  // Distinct for every SRQ the table ever held: a QP that bound an SRQ knows it from one that
  // took its number (and perhaps its memory) after it was destroyed.
  std::uint64_t serial = 0;
};
class XrcSrqTable {
 public:
  virtual ~XrcSrqTable() = default;
  // The XRC SRQ numbered `srqn` in XRC domain `xrcd`, or nothing: no such SRQ, or it belongs to
  // another domain (the responder NAKs Invalid Request either way). An SRQ may leave the table
  // while a QP has bound it (destroyed): the QP asks again before it touches the SRQ's queue or
  // CQ, and lets go of them when the answer is not the SRQ it bound (Qp::drop_stale_xrc_srq).
  virtual std::optional<XrcSrqTarget> xrc_srq(std::uint32_t xrcd, std::uint32_t srqn) = 0;
};

// Asynchronous events of a QP (IBV_EVENT_QP_FATAL, _SQ_DRAINED, _QP_LAST_WQE_REACHED ...).
class RecvQueue;
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void qp_event(std::uint32_t qpn, AsyncEventType type) = 0;
  // An SRQ's armed limit was crossed (IBV_EVENT_SRQ_LIMIT_REACHED).
  virtual void srq_limit_reached(RecvQueue* srq) = 0;
};

}  // namespace uroce::transport

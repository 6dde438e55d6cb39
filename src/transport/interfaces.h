// What the transport needs from the layers around it, as interfaces: the transport owns no
// memory regions, completion queues or receive queues of its own.
//
// All calls happen on the thread that drives the QP (the engine's), during handle_* or
// poll_* calls; implementations must not call back into the QP.
#pragma once

#include <cstdint>

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
  kNotInvalidatable,  // invalidate(): an ordinary MR (only fast-register MRs and MWs can be)
};

// Memory protection in one place (implemented by verbs/). Keys are resolved on every access,
// so that a region deregistered while operations are in flight is never touched again.
class MemoryResolver {
 public:
  virtual ~MemoryResolver() = default;
  // The bytes of [addr, addr + length) under `key` (an lkey when !remote, an rkey when remote),
  // for a QP in protection domain `pd`, with `access` (AccessFlag bits) all granted. A local key
  // always grants local read. Zero-length accesses are not resolved by the transport (a
  // zero-length RDMA operation checks no key).
  virtual Result<MutBytes, AccessError> resolve(std::uint32_t pd, std::uint32_t key, bool remote,
                                                std::uint64_t addr, std::uint64_t length,
                                                std::uint32_t access) = 0;
  // The whole region under `rkey` for a QP in `pd`, with `access` all granted (a FLUSH of a
  // memory region, IBTA 1.5: no range to check).
  virtual Result<MutBytes, AccessError> resolve_region(std::uint32_t pd, std::uint32_t rkey,
                                                       std::uint32_t access) = 0;
  // Invalidates `rkey` (SEND with Invalidate). Returns why it cannot be, if it cannot; the
  // region is then unchanged (the responder NAKs Invalid Request, IBTA o10-37).
  virtual Result<bool, AccessError> invalidate(std::uint32_t pd, std::uint32_t rkey) = 0;
};

// A completion queue, as the transport sees it. The queue handles its own overflow (verbs: the
// CQ enters error and raises an async event; the completion is lost).
class CompletionSink {
 public:
  virtual ~CompletionSink() = default;
  virtual void push(const Wc& wc, bool solicited) = 0;
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

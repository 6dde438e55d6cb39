// The datapath interface: the only code that makes system calls on the packet path lives behind
// it (datapath/udp, and later raw sockets and AF_XDP); the simulator has one too. It depends on
// base, wire and fault only.
#pragma once

#include <span>

#include "base/bytes.h"
#include "base/time.h"
#include "wire/builder.h"

namespace uroce::datapath {

class Datapath {
 public:
  virtual ~Datapath() = default;
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

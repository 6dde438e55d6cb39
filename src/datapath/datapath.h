// The datapath interface: the only code that makes system calls on the packet path lives behind
// it (datapath/udp, and later raw sockets and AF_XDP); the simulator has one too. It depends on
// base and wire only.
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
  // MAC addresses), `transport_headers` is BTH plus extension headers, `payload` is gathered
  // from registered memory (valid for this call only). The datapath adds pad and ICRC.
  // Returns false when it has no room now (the caller retries later).
  virtual bool send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
                    std::span<const ConstBytes> payload) = 0;
};

}  // namespace uroce::datapath

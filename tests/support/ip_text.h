// Test support: an IPv4 address from its dotted text, for tests that name loopback addresses.
#pragma once

#include <arpa/inet.h>

#include "wire/ip.h"

namespace uroce::test {

inline wire::IpAddress v4(const char* s) {
  wire::IpAddress a;
  ::inet_pton(AF_INET, s, a.bytes.data());
  return a;
}

}  // namespace uroce::test

#include "edge/interfaces.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstring>

namespace uroce::edge {

std::vector<engine::InterfaceAddress> host_interfaces() {
  std::vector<engine::InterfaceAddress> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_name == nullptr) continue;
    engine::InterfaceAddress a;
    a.name = i->ifa_name;
    a.up = (i->ifa_flags & IFF_UP) != 0;
    a.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    const sockaddr* sa = i->ifa_addr;
    if (sa != nullptr && sa->sa_family == AF_INET) {
      wire::IpAddress ip;
      std::memcpy(ip.bytes.data(), &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, 4);
      a.ip = ip;
    } else if (sa != nullptr && sa->sa_family == AF_INET6) {
      wire::IpAddress ip;
      ip.v6 = true;
      std::memcpy(ip.bytes.data(), &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, 16);
      a.ip = ip;
    }
    out.push_back(std::move(a));
  }
  ::freeifaddrs(list);
  return out;
}

}  // namespace uroce::edge

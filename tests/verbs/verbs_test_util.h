// Helpers shared by the verbs tests.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "uroce/verbs.h"

namespace uroce::testing {

inline DeviceConfig test_config(std::uint64_t seed = 1) {
  DeviceConfig c;
  c.name = "uroce0";
  c.ip = wire::IpAddress::v4(0x0a000001);  // 10.0.0.1
  c.netdev_mtu = 1500;
  c.seed = seed;
  return c;
}

inline std::unique_ptr<Device> make_device(const DeviceConfig& c = test_config()) {
  auto d = Device::create(c);
  EXPECT_TRUE(d.ok());
  return std::move(d).value();
}

inline AhAttr ah_to(const wire::IpAddress& ip) {
  AhAttr a;
  a.is_global = true;
  a.port_num = 1;
  a.sgid_index = 0;
  if (ip.v6) {
    a.dgid.raw = ip.bytes;
  } else {
    a.dgid.raw[10] = 0xff;
    a.dgid.raw[11] = 0xff;
    for (int i = 0; i < 4; ++i) a.dgid.raw[12 + i] = ip.bytes[i];
  }
  return a;
}

}  // namespace uroce::testing

#include "wire/aeth.h"

#include <cstdio>

namespace uroce::wire {

std::string_view nak_code_name(std::uint8_t value) {
  switch (value) {
    case 0:
      return "PSN sequence error";
    case 1:
      return "invalid request";
    case 2:
      return "remote access error";
    case 3:
      return "remote operational error";
    case 4:
      return "invalid RD request";
    default:
      return "reserved NAK code";
  }
}

std::string describe_syndrome(std::uint8_t syndrome) {
  char buf[96];
  const std::uint8_t v = aeth_value(syndrome);
  switch (aeth_type(syndrome)) {
    case AethType::kAck:
      if (v == kAethCreditsInvalid) {
        std::snprintf(buf, sizeof buf, "ACK (no credit count)");
      } else {
        std::snprintf(buf, sizeof buf, "ACK credits=%u", unsigned{v});
      }
      break;
    case AethType::kRnrNak: {
      const std::uint32_t us = rnr_timer_us(v);
      std::snprintf(buf, sizeof buf, "RNR NAK timer=%u (%u.%02u ms)", unsigned{v}, us / 1000,
                    (us % 1000) / 10);
      break;
    }
    case AethType::kNak:
      std::snprintf(buf, sizeof buf, "NAK %.*s", static_cast<int>(nak_code_name(v).size()),
                    nak_code_name(v).data());
      break;
    case AethType::kReserved:
      std::snprintf(buf, sizeof buf, "reserved syndrome 0x%02x", unsigned{syndrome});
      break;
  }
  return buf;
}

}  // namespace uroce::wire

// AETH syndrome encoding (IBTA vol. 1, 9.7.5.1, tables 43-45).
//
//   bits 7..5  type: 000 ACK, 001 RNR NAK, 011 NAK (010 reserved, 1xx reserved)
//   bits 4..0  ACK: credit count (0x1f = no credit information)
//              RNR NAK: RNR timer code
//              NAK: 0 PSN sequence error, 1 invalid request, 2 remote access error,
//                   3 remote operational error, 4 invalid RD request
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace uroce::wire {

enum class AethType : std::uint8_t { kAck, kRnrNak, kNak, kReserved };

enum class NakCode : std::uint8_t {
  kPsnSequenceError = 0,
  kInvalidRequest = 1,
  kRemoteAccessError = 2,
  kRemoteOperationalError = 3,
  kInvalidRdRequest = 4,
};

inline constexpr std::uint8_t kAethCreditsInvalid = 0x1f;

constexpr AethType aeth_type(std::uint8_t syndrome) {
  switch (syndrome >> 5) {
    case 0:
      return AethType::kAck;
    case 1:
      return AethType::kRnrNak;
    case 3:
      return AethType::kNak;
    default:
      return AethType::kReserved;
  }
}
constexpr std::uint8_t aeth_value(std::uint8_t syndrome) {
  return static_cast<std::uint8_t>(syndrome & 0x1fu);
}

constexpr std::uint8_t make_ack_syndrome(std::uint8_t credits = kAethCreditsInvalid) {
  return static_cast<std::uint8_t>(credits & 0x1fu);
}
constexpr std::uint8_t make_rnr_nak_syndrome(std::uint8_t timer_code) {
  return static_cast<std::uint8_t>(0x20u | (timer_code & 0x1fu));
}
constexpr std::uint8_t make_nak_syndrome(NakCode code) {
  return static_cast<std::uint8_t>(0x60u | static_cast<std::uint8_t>(code));
}

// RNR NAK timer codes to microseconds (IBTA table 45). Code 0 is the longest, 655.36 ms.
inline constexpr std::array<std::uint32_t, 32> kRnrTimerUs = {
    655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
    480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
    20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};

constexpr std::uint32_t rnr_timer_us(std::uint8_t code) { return kRnrTimerUs[code & 0x1fu]; }

std::string_view nak_code_name(std::uint8_t value);
// Human-readable syndrome: "ACK credits=31", "RNR NAK timer=12 (0.64 ms)", "NAK PSN sequence
// error".
std::string describe_syndrome(std::uint8_t syndrome);

}  // namespace uroce::wire

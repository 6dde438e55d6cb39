#include "wire/opcode.h"

namespace uroce::wire {

std::string_view transport_name(Transport t) {
  switch (t) {
    case Transport::kRc:
      return "RC";
    case Transport::kUc:
      return "UC";
    case Transport::kUd:
      return "UD";
    case Transport::kCnp:
      return "CNP";
    case Transport::kXrc:
      return "XRC";
  }
  return "?";
}

std::string_view ext_header_name(ExtHeader h) {
  switch (h) {
    case ExtHeader::kDeth:
      return "DETH";
    case ExtHeader::kXrcEth:
      return "XRCETH";
    case ExtHeader::kFeth:
      return "FETH";
    case ExtHeader::kReth:
      return "RETH";
    case ExtHeader::kAtomicEth:
      return "AtomicETH";
    case ExtHeader::kAeth:
      return "AETH";
    case ExtHeader::kAtomicAckEth:
      return "AtomicAckETH";
    case ExtHeader::kImmDt:
      return "ImmDt";
    case ExtHeader::kIeth:
      return "IETH";
    case ExtHeader::kCnpReserved:
      return "CNP reserved";
  }
  return "?";
}

}  // namespace uroce::wire

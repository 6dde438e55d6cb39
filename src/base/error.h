// Error: what went wrong, as a code a caller can act on and text for a person. Callers branch on
// `code`, an errno value (EADDRINUSE, ENODEV, ...; uroce::Errc's values are errno values too),
// and never look into `text`. The text says what failed, with context added at each level
// ("cannot bind 127.0.0.1 port 4791: port in use by ..."), for the message the edge prints.
#pragma once

#include <cstring>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace uroce {

struct Error {
  int code = 0;  // an errno value
  std::string text;

  Error(int errno_value, std::string t) : code(errno_value), text(std::move(t)) {}
  // A system call failed with errno value `err`: the code is that errno, the text `what: reason`.
  static Error system(int err, std::string_view what) {
    return Error(err, std::string(what) + ": " + std::strerror(err));
  }
  // The same error, its text led by `context` ("context: text").
  Error within(std::string_view context) const {
    return Error(code, std::string(context) + ": " + text);
  }
};

inline std::ostream& operator<<(std::ostream& os, const Error& e) { return os << e.text; }

}  // namespace uroce

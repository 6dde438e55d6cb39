// Time as the protocol core sees it: values passed in, never read from a clock.
//
// Instant is a point on some monotonic timeline (the engine's clock in production, the
// simulator's manual clock in tests); Duration is a signed span. Both count nanoseconds.
#pragma once

#include <compare>
#include <cstdint>
#include <limits>

namespace uroce {

class Duration {
 public:
  constexpr Duration() = default;
  static constexpr Duration ns(std::int64_t v) { return Duration(v); }
  static constexpr Duration us(std::int64_t v) { return Duration(v * 1000); }
  static constexpr Duration ms(std::int64_t v) { return Duration(v * 1000 * 1000); }
  static constexpr Duration s(std::int64_t v) { return Duration(v * 1000 * 1000 * 1000); }
  static constexpr Duration zero() { return Duration(0); }
  static constexpr Duration infinite() {
    return Duration(std::numeric_limits<std::int64_t>::max());
  }

  constexpr std::int64_t count_ns() const { return ns_; }
  constexpr bool is_infinite() const { return ns_ == std::numeric_limits<std::int64_t>::max(); }

  constexpr auto operator<=>(const Duration&) const = default;
  constexpr Duration operator+(Duration o) const { return Duration(ns_ + o.ns_); }
  constexpr Duration operator-(Duration o) const { return Duration(ns_ - o.ns_); }
  constexpr Duration operator*(std::int64_t k) const { return Duration(ns_ * k); }
  constexpr Duration operator/(std::int64_t k) const { return Duration(ns_ / k); }
  constexpr Duration& operator+=(Duration o) {
    ns_ += o.ns_;
    return *this;
  }

 private:
  constexpr explicit Duration(std::int64_t v) : ns_(v) {}
  std::int64_t ns_ = 0;
};

class Instant {
 public:
  constexpr Instant() = default;
  static constexpr Instant from_ns(std::int64_t v) { return Instant(v); }
  // A time later than any real one: "no deadline".
  static constexpr Instant never() { return Instant(std::numeric_limits<std::int64_t>::max()); }

  constexpr std::int64_t ns() const { return ns_; }
  constexpr bool is_never() const { return ns_ == std::numeric_limits<std::int64_t>::max(); }

  constexpr auto operator<=>(const Instant&) const = default;
  // Saturates at never(): adding an infinite duration gives no deadline.
  constexpr Instant operator+(Duration d) const {
    if (is_never() || d.is_infinite()) return never();
    return Instant(ns_ + d.count_ns());
  }
  constexpr Duration operator-(Instant o) const { return Duration::ns(ns_ - o.ns_); }

 private:
  constexpr explicit Instant(std::int64_t v) : ns_(v) {}
  std::int64_t ns_ = 0;
};

constexpr Instant earliest(Instant a, Instant b) { return a < b ? a : b; }

}  // namespace uroce

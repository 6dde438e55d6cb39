// Result<T, E>: a value or an error, without exceptions (library code throws nothing).
//
// Construct the error side with `Err{e}` so that T and E may be the same type. Accessing the
// wrong side is a programming error and asserts.
#pragma once

#include <utility>
#include <variant>

#include "base/assert.h"

namespace uroce {

template <class E>
struct Err {
  E error;
};
template <class E>
Err(E) -> Err<E>;

template <class T, class E>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  template <class E2>
  Result(Err<E2> err) : v_(std::in_place_index<1>, E(std::move(err.error))) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    UROCE_CHECK(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    UROCE_CHECK(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    UROCE_CHECK(ok());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const E& error() const {
    UROCE_CHECK(!ok());
    return std::get<1>(v_);
  }

 private:
  std::variant<T, E> v_;
};

}  // namespace uroce

// Assertions for our own bugs (never for bad input: input errors are values, see design.md).
//
// UROCE_ASSERT is checked in debug, sanitizer and simulation builds and compiled out in release
// builds (NDEBUG). UROCE_CHECK is always checked. Both abort with file, line and the expression.
#pragma once

namespace uroce::detail {
[[noreturn]] void assert_fail(const char* expr, const char* file, int line);
}  // namespace uroce::detail

#define UROCE_CHECK(expr) \
  ((expr) ? static_cast<void>(0) : ::uroce::detail::assert_fail(#expr, __FILE__, __LINE__))

#ifdef NDEBUG
#define UROCE_ASSERT(expr) static_cast<void>(0)
#else
#define UROCE_ASSERT(expr) UROCE_CHECK(expr)
#endif

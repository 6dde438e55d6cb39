// Byte spans and big-endian field access.
//
// Every packet field in uroce is read and written through these helpers: no packed structs, no
// bitfields, no reinterpret_cast of packet memory. Offsets are checked against the span in debug
// builds (UROCE_ASSERT); callers are responsible for having validated lengths beforehand, which is
// what the wire parser does before it hands out header views.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "base/assert.h"

namespace uroce {

using ConstBytes = std::span<const std::byte>;
using MutBytes = std::span<std::byte>;

inline ConstBytes as_bytes(const void* data, std::size_t size) {
  return {static_cast<const std::byte*>(data), size};
}
inline MutBytes as_mut_bytes(void* data, std::size_t size) {
  return {static_cast<std::byte*>(data), size};
}

inline std::uint8_t load_u8(ConstBytes b, std::size_t off) {
  UROCE_ASSERT(off < b.size());
  return static_cast<std::uint8_t>(b[off]);
}

namespace detail {

// A 16-, 32- or 64-bit field copied from or to memory as one word and put into or out of network
// byte order: one load or store and a byte swap, where byte-by-byte shifts made the compiler
// write each byte on its own (a RETH's eight address bytes took 60 instructions: issue 40).
template <class T>
T big_endian(T v) {
  if constexpr (std::endian::native == std::endian::big) {
    return v;
  } else if constexpr (sizeof(T) == 2) {
    return __builtin_bswap16(v);
  } else if constexpr (sizeof(T) == 4) {
    return __builtin_bswap32(v);
  } else {
    return __builtin_bswap64(v);
  }
}

template <class T>
T load_be(ConstBytes b, std::size_t off) {
  UROCE_ASSERT(off + sizeof(T) <= b.size());
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return big_endian(v);
}

template <class T>
void store_be(MutBytes b, std::size_t off, T v) {
  UROCE_ASSERT(off + sizeof(T) <= b.size());
  v = big_endian(v);
  std::memcpy(b.data() + off, &v, sizeof(T));
}

}  // namespace detail

inline std::uint16_t load_be16(ConstBytes b, std::size_t off) {
  return detail::load_be<std::uint16_t>(b, off);
}

inline std::uint32_t load_be24(ConstBytes b, std::size_t off) {
  UROCE_ASSERT(off + 3 <= b.size());
  return (static_cast<std::uint32_t>(b[off]) << 16) |
         (static_cast<std::uint32_t>(b[off + 1]) << 8) | static_cast<std::uint32_t>(b[off + 2]);
}

inline std::uint32_t load_be32(ConstBytes b, std::size_t off) {
  return detail::load_be<std::uint32_t>(b, off);
}

inline std::uint64_t load_be64(ConstBytes b, std::size_t off) {
  return detail::load_be<std::uint64_t>(b, off);
}

inline std::uint32_t load_le32(ConstBytes b, std::size_t off) {
  UROCE_ASSERT(off + 4 <= b.size());
  return static_cast<std::uint32_t>(b[off]) | (static_cast<std::uint32_t>(b[off + 1]) << 8) |
         (static_cast<std::uint32_t>(b[off + 2]) << 16) |
         (static_cast<std::uint32_t>(b[off + 3]) << 24);
}

inline void store_u8(MutBytes b, std::size_t off, std::uint8_t v) {
  UROCE_ASSERT(off < b.size());
  b[off] = static_cast<std::byte>(v);
}

inline void store_be16(MutBytes b, std::size_t off, std::uint16_t v) {
  detail::store_be<std::uint16_t>(b, off, v);
}

inline void store_be24(MutBytes b, std::size_t off, std::uint32_t v) {
  UROCE_ASSERT(off + 3 <= b.size());
  b[off] = static_cast<std::byte>(v >> 16);
  b[off + 1] = static_cast<std::byte>(v >> 8);
  b[off + 2] = static_cast<std::byte>(v);
}

inline void store_be32(MutBytes b, std::size_t off, std::uint32_t v) {
  detail::store_be<std::uint32_t>(b, off, v);
}

inline void store_be64(MutBytes b, std::size_t off, std::uint64_t v) {
  detail::store_be<std::uint64_t>(b, off, v);
}

inline void store_le32(MutBytes b, std::size_t off, std::uint32_t v) {
  UROCE_ASSERT(off + 4 <= b.size());
  b[off] = static_cast<std::byte>(v);
  b[off + 1] = static_cast<std::byte>(v >> 8);
  b[off + 2] = static_cast<std::byte>(v >> 16);
  b[off + 3] = static_cast<std::byte>(v >> 24);
}

// Bit field inside one byte: `width` bits whose least significant bit is bit `shift`.
inline std::uint8_t load_bits8(ConstBytes b, std::size_t off, unsigned shift, unsigned width) {
  return static_cast<std::uint8_t>((load_u8(b, off) >> shift) & ((1u << width) - 1u));
}

inline void store_bits8(MutBytes b, std::size_t off, unsigned shift, unsigned width,
                        std::uint8_t v) {
  const unsigned mask = ((1u << width) - 1u) << shift;
  const unsigned old = load_u8(b, off);
  store_u8(b, off, static_cast<std::uint8_t>((old & ~mask) | ((unsigned{v} << shift) & mask)));
}

}  // namespace uroce

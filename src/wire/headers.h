// Views over the InfiniBand transport headers as RoCEv2 carries them (IBTA vol. 1, 9.2-9.3).
//
// A view wraps a span that holds at least the header's size (checked at construction) and reads
// or writes each field big-endian. `FooView` is read-only; `FooMut` also has setters. Setters
// leave reserved bits as the spec requires (zero on transmit) unless a test sets them on purpose.
// The plain `Foo` structs hold decoded field values, for building packets and comparing them.
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>

#include "base/bytes.h"

namespace uroce::wire {

template <class Byte, std::size_t N>
class HeaderRef {
 public:
  static constexpr std::size_t kSize = N;
  static constexpr bool kMutable = !std::is_const_v<Byte>;

  explicit HeaderRef(std::span<Byte> b) : b_(b.data()) { UROCE_CHECK(b.size() >= N); }
  ConstBytes bytes() const { return {b_, N}; }

 protected:
  MutBytes mut() const requires kMutable { return {b_, N}; }

 private:
  Byte* b_;
};

// ---- BTH (12 bytes) -------------------------------------------------------------------------
struct Bth {
  std::uint8_t opcode = 0;
  bool solicited = false;      // SE
  bool mig_req = false;        // M
  std::uint8_t pad_count = 0;  // PadCnt, 0..3
  std::uint8_t tver = 0;
  std::uint16_t pkey = 0xffff;
  bool fecn = false;
  bool becn = false;
  std::uint32_t dest_qpn = 0;  // 24 bits
  bool ack_req = false;
  std::uint32_t psn = 0;  // 24 bits
  bool operator==(const Bth&) const = default;
};

template <class Byte>
class BasicBthRef : public HeaderRef<Byte, 12> {
  using Base = HeaderRef<Byte, 12>;

 public:
  using Base::Base;
  using Base::kMutable;
  std::uint8_t opcode() const { return load_u8(this->bytes(), 0); }
  bool solicited() const { return load_bits8(this->bytes(), 1, 7, 1) != 0; }
  bool mig_req() const { return load_bits8(this->bytes(), 1, 6, 1) != 0; }
  std::uint8_t pad_count() const { return load_bits8(this->bytes(), 1, 4, 2); }
  std::uint8_t tver() const { return load_bits8(this->bytes(), 1, 0, 4); }
  std::uint16_t pkey() const { return load_be16(this->bytes(), 2); }
  bool fecn() const { return load_bits8(this->bytes(), 4, 7, 1) != 0; }
  bool becn() const { return load_bits8(this->bytes(), 4, 6, 1) != 0; }
  std::uint32_t dest_qpn() const { return load_be24(this->bytes(), 5); }
  bool ack_req() const { return load_bits8(this->bytes(), 8, 7, 1) != 0; }
  std::uint32_t psn() const { return load_be24(this->bytes(), 9); }

  Bth decode() const {
    return Bth{opcode(), solicited(), mig_req(),  pad_count(), tver(), pkey(),
               fecn(),   becn(),      dest_qpn(), ack_req(),   psn()};
  }

  void set_opcode(std::uint8_t v) const requires kMutable { store_u8(this->mut(), 0, v); }
  void set_solicited(bool v) const requires kMutable { store_bits8(this->mut(), 1, 7, 1, v); }
  void set_mig_req(bool v) const requires kMutable { store_bits8(this->mut(), 1, 6, 1, v); }
  void set_pad_count(std::uint8_t v) const requires kMutable {
    store_bits8(this->mut(), 1, 4, 2, v);
  }
  void set_tver(std::uint8_t v) const requires kMutable { store_bits8(this->mut(), 1, 0, 4, v); }
  void set_pkey(std::uint16_t v) const requires kMutable { store_be16(this->mut(), 2, v); }
  void set_fecn(bool v) const requires kMutable { store_bits8(this->mut(), 4, 7, 1, v); }
  void set_becn(bool v) const requires kMutable { store_bits8(this->mut(), 4, 6, 1, v); }
  void set_dest_qpn(std::uint32_t v) const requires kMutable {
    store_be24(this->mut(), 5, v & 0xffffffu);
  }
  void set_ack_req(bool v) const requires kMutable { store_bits8(this->mut(), 8, 7, 1, v); }
  void set_psn(std::uint32_t v) const requires kMutable {
    store_be24(this->mut(), 9, v & 0xffffffu);
  }
  // Writes every field; reserved bits become zero. As three big-endian words (opcode, flags
  // and P_Key; FECN, BECN and the QPN; AckReq and the PSN): every packet sent writes one.
  void encode(const Bth& h) const requires kMutable {
    const std::uint32_t flags = (unsigned{h.solicited} << 7) | (unsigned{h.mig_req} << 6) |
                                ((h.pad_count & 3u) << 4) | (h.tver & 0xfu);
    store_be32(this->mut(), 0, (std::uint32_t{h.opcode} << 24) | (flags << 16) | h.pkey);
    store_be32(
        this->mut(), 4,
        (((unsigned{h.fecn} << 7) | (unsigned{h.becn} << 6)) << 24) | (h.dest_qpn & 0xffffffu));
    store_be32(this->mut(), 8, (unsigned{h.ack_req} << 31) | (h.psn & 0xffffffu));
  }
};
using BthView = BasicBthRef<const std::byte>;
using BthMut = BasicBthRef<std::byte>;

// ---- RETH (16 bytes): RDMA extended transport header -----------------------------------------
struct Reth {
  std::uint64_t va = 0;
  std::uint32_t rkey = 0;
  std::uint32_t dma_length = 0;
  bool operator==(const Reth&) const = default;
};

template <class Byte>
class BasicRethRef : public HeaderRef<Byte, 16> {
  using Base = HeaderRef<Byte, 16>;

 public:
  using Base::Base;
  using Base::kMutable;
  std::uint64_t va() const { return load_be64(this->bytes(), 0); }
  std::uint32_t rkey() const { return load_be32(this->bytes(), 8); }
  std::uint32_t dma_length() const { return load_be32(this->bytes(), 12); }
  Reth decode() const { return Reth{va(), rkey(), dma_length()}; }
  void encode(const Reth& h) const requires kMutable {
    store_be64(this->mut(), 0, h.va);
    store_be32(this->mut(), 8, h.rkey);
    store_be32(this->mut(), 12, h.dma_length);
  }
};
using RethView = BasicRethRef<const std::byte>;
using RethMut = BasicRethRef<std::byte>;

// ---- AETH (4 bytes): ACK extended transport header -------------------------------------------
struct Aeth {
  std::uint8_t syndrome = 0;
  std::uint32_t msn = 0;  // 24 bits
  bool operator==(const Aeth&) const = default;
};

template <class Byte>
class BasicAethRef : public HeaderRef<Byte, 4> {
  using Base = HeaderRef<Byte, 4>;

 public:
  using Base::Base;
  using Base::kMutable;
  std::uint8_t syndrome() const { return load_u8(this->bytes(), 0); }
  std::uint32_t msn() const { return load_be24(this->bytes(), 1); }
  Aeth decode() const { return Aeth{syndrome(), msn()}; }
  void encode(const Aeth& h) const requires kMutable {
    store_u8(this->mut(), 0, h.syndrome);
    store_be24(this->mut(), 1, h.msn & 0xffffffu);
  }
};
using AethView = BasicAethRef<const std::byte>;
using AethMut = BasicAethRef<std::byte>;

// ---- AtomicETH (28 bytes) ---------------------------------------------------------------------
struct AtomicEth {
  std::uint64_t va = 0;
  std::uint32_t rkey = 0;
  std::uint64_t swap_add = 0;  // swap value (Compare&Swap) or add value (Fetch&Add)
  std::uint64_t compare = 0;
  bool operator==(const AtomicEth&) const = default;
};

template <class Byte>
class BasicAtomicEthRef : public HeaderRef<Byte, 28> {
  using Base = HeaderRef<Byte, 28>;

 public:
  using Base::Base;
  using Base::kMutable;
  std::uint64_t va() const { return load_be64(this->bytes(), 0); }
  std::uint32_t rkey() const { return load_be32(this->bytes(), 8); }
  std::uint64_t swap_add() const { return load_be64(this->bytes(), 12); }
  std::uint64_t compare() const { return load_be64(this->bytes(), 20); }
  AtomicEth decode() const { return AtomicEth{va(), rkey(), swap_add(), compare()}; }
  void encode(const AtomicEth& h) const requires kMutable {
    store_be64(this->mut(), 0, h.va);
    store_be32(this->mut(), 8, h.rkey);
    store_be64(this->mut(), 12, h.swap_add);
    store_be64(this->mut(), 20, h.compare);
  }
};
using AtomicEthView = BasicAtomicEthRef<const std::byte>;
using AtomicEthMut = BasicAtomicEthRef<std::byte>;

// ---- AtomicAckETH (8 bytes) -------------------------------------------------------------------
template <class Byte>
class BasicAtomicAckEthRef : public HeaderRef<Byte, 8> {
  using Base = HeaderRef<Byte, 8>;

 public:
  using Base::Base;
  using Base::kMutable;
  std::uint64_t orig() const { return load_be64(this->bytes(), 0); }
  void set_orig(std::uint64_t v) const requires kMutable { store_be64(this->mut(), 0, v); }
};
using AtomicAckEthView = BasicAtomicAckEthRef<const std::byte>;
using AtomicAckEthMut = BasicAtomicAckEthRef<std::byte>;

// ---- DETH (8 bytes): datagram extended transport header ---------------------------------------
struct Deth {
  std::uint32_t qkey = 0;
  std::uint32_t src_qpn = 0;  // 24 bits
  bool operator==(const Deth&) const = default;
};

template <class Byte>
class BasicDethRef : public HeaderRef<Byte, 8> {
  using Base = HeaderRef<Byte, 8>;

 public:
  using Base::Base;
  using Base::kMutable;
  std::uint32_t qkey() const { return load_be32(this->bytes(), 0); }
  std::uint32_t src_qpn() const { return load_be24(this->bytes(), 5); }
  Deth decode() const { return Deth{qkey(), src_qpn()}; }
  void encode(const Deth& h) const requires kMutable {
    store_be32(this->mut(), 0, h.qkey);
    store_u8(this->mut(), 4, 0);
    store_be24(this->mut(), 5, h.src_qpn & 0xffffffu);
  }
};
using DethView = BasicDethRef<const std::byte>;
using DethMut = BasicDethRef<std::byte>;

// ---- FETH (4 bytes): FLUSH extended transport header (IBTA 1.5, annex A19) -------------------
// Bits 3..0 the placement type, bits 5..4 the selectivity level, bits 31..6 reserved (rxe_hdr.h
// feth_plt(), feth_sel()).
inline constexpr std::uint8_t kFlushGlobal = 1;      // placement: global visibility
inline constexpr std::uint8_t kFlushPersistent = 2;  // placement: persistence
inline constexpr std::uint8_t kFlushRange = 0;       // selectivity: the RETH's range
inline constexpr std::uint8_t kFlushMr = 1;          // selectivity: the whole region of the R_Key
struct Feth {
  std::uint8_t placement = 0;    // 4 bits
  std::uint8_t selectivity = 0;  // 2 bits
  bool operator==(const Feth&) const = default;
};

template <class Byte>
class BasicFethRef : public HeaderRef<Byte, 4> {
  using Base = HeaderRef<Byte, 4>;

 public:
  using Base::Base;
  using Base::kMutable;
  std::uint8_t placement() const { return load_be32(this->bytes(), 0) & 0xfu; }
  std::uint8_t selectivity() const { return (load_be32(this->bytes(), 0) >> 4) & 0x3u; }
  std::uint32_t reserved() const { return load_be32(this->bytes(), 0) >> 6; }
  Feth decode() const { return Feth{placement(), selectivity()}; }
  void encode(const Feth& h) const requires kMutable {
    store_be32(this->mut(), 0,
               (std::uint32_t{h.selectivity} & 0x3u) << 4 | (std::uint32_t{h.placement} & 0xfu));
  }
};
using FethView = BasicFethRef<const std::byte>;
using FethMut = BasicFethRef<std::byte>;

// ---- ImmDt and IETH (4 bytes each): one 32-bit big-endian value --------------------------------
template <class Byte>
class BasicWord32Ref : public HeaderRef<Byte, 4> {
  using Base = HeaderRef<Byte, 4>;

 public:
  using Base::Base;
  using Base::kMutable;
  std::uint32_t value() const { return load_be32(this->bytes(), 0); }
  void set_value(std::uint32_t v) const requires kMutable { store_be32(this->mut(), 0, v); }
};
using ImmDtView = BasicWord32Ref<const std::byte>;  // immediate data, as the sender's host wrote it
using ImmDtMut = BasicWord32Ref<std::byte>;
using IethView = BasicWord32Ref<const std::byte>;  // R_Key to invalidate
using IethMut = BasicWord32Ref<std::byte>;

// ---- XRCETH (4 bytes, IBTA 9.3.5): 8 reserved bits, the 24-bit XRC SRQ number ------------------
template <class Byte>
class BasicXrcEthRef : public HeaderRef<Byte, 4> {
  using Base = HeaderRef<Byte, 4>;

 public:
  using Base::Base;
  using Base::kMutable;
  std::uint32_t srqn() const { return load_be32(this->bytes(), 0) & 0xffffffu; }
  std::uint8_t reserved() const {
    return static_cast<std::uint8_t>(load_be32(this->bytes(), 0) >> 24);
  }
  // The reserved byte is sent as 0 (IBTA: reserved fields are transmitted as 0).
  void set_srqn(std::uint32_t srqn) const requires kMutable {
    store_be32(this->mut(), 0, srqn & 0xffffffu);
  }
};
using XrcEthView = BasicXrcEthRef<const std::byte>;
using XrcEthMut = BasicXrcEthRef<std::byte>;

}  // namespace uroce::wire

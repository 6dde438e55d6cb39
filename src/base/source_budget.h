// base/source_budget: a bounded budget per packet source for the work that bad packets cost (a
// tag that does not verify, an unknown QPN, a CM REQ), so that one source's flood cannot take
// the work that other sources' packets need (issue 44, docs/SECURITY.md, "Denial of service").
//
// Each source has a generic cell rate budget: `burst` charges at once, then `per_second` more
// every second. A source out of budget is refused (allows() false) until it earns one again;
// its packets are then dropped before the costly step, and counted by the caller. The table is
// fixed (kSlots entries, kWays probed per source): a source that finds no free entry among its
// kWays takes the one of them with the most budget left (the least suspicious), so memory stays
// bounded however many sources there are, and a source can at worst be forgotten, never given
// more than its budget while it is remembered. Time is the caller's (deterministic under test).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "base/time.h"

namespace uroce {

// A packet's source: its IP address (IPv4-mapped or IPv6, 16 bytes) and UDP port.
struct SourceKey {
  std::array<std::uint8_t, 16> address{};
  std::uint16_t port = 0;
  bool operator==(const SourceKey&) const = default;
};

class SourceBudget {
 public:
  static constexpr std::size_t kSlots = 256;
  static constexpr std::size_t kWays = 4;

  SourceBudget(std::uint32_t burst, std::uint32_t per_second)
      : interval_(Duration::ns(1'000'000'000 / (per_second == 0 ? 1 : per_second))),
        tolerance_(interval_ * static_cast<std::int64_t>(burst)) {}

  // Whether `src` may cost one more unit now.
  bool allows(const SourceKey& src, Instant now) const {
    const Slot* s = find(src);
    return s == nullptr || spent_after(*s, now) <= tolerance_;
  }
  // Whether `src`'s budget is whole now: nothing it was charged is still to be earned back.
  bool whole(const SourceKey& src, Instant now) const {
    const Slot* s = find(src);
    return s == nullptr || s->tat <= now;
  }
  // Spends one unit of `src`'s budget (call when its packet turned out bad, or cost the work).
  void charge(const SourceKey& src, Instant now) {
    Slot* s = find(src);
    if (s == nullptr) s = &take(src, now);
    s->tat = (s->tat > now ? s->tat : now) + interval_;
  }
  // Sources remembered (at most kSlots).
  std::size_t tracked() const {
    std::size_t n = 0;
    for (const Slot& s : slots_) n += s.used ? 1 : 0;
    return n;
  }

 private:
  struct Slot {
    bool used = false;
    SourceKey key;
    Instant tat = Instant::from_ns(0);  // when the source's budget is whole again
  };

  Duration spent_after(const Slot& s, Instant now) const {
    return (s.tat > now ? s.tat : now) + interval_ - now;
  }
  static std::size_t hash(const SourceKey& k) {
    std::uint64_t h = 1469598103934665603ull ^ k.port;
    for (std::uint8_t b : k.address) h = (h ^ b) * 1099511628211ull;
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
  const Slot* find(const SourceKey& k) const {
    const std::size_t at = hash(k);
    for (std::size_t i = 0; i < kWays; ++i) {
      const Slot& s = slots_[(at + i) % kSlots];
      if (s.used && s.key == k) return &s;
    }
    return nullptr;
  }
  Slot* find(const SourceKey& k) {
    return const_cast<Slot*>(static_cast<const SourceBudget*>(this)->find(k));
  }
  Slot& take(const SourceKey& k, Instant now) {
    const std::size_t at = hash(k);
    Slot* best = &slots_[at % kSlots];
    for (std::size_t i = 0; i < kWays; ++i) {
      Slot& s = slots_[(at + i) % kSlots];
      if (!s.used) {
        best = &s;
        break;
      }
      if (s.tat < best->tat) best = &s;
    }
    *best = Slot{true, k, now};
    return *best;
  }

  Duration interval_;
  Duration tolerance_;
  std::array<Slot, kSlots> slots_{};
};

}  // namespace uroce

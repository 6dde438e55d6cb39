// ICRC throughput beside memcpy of the same bytes, measured in the same run (scripts/bench.sh
// runs it and prints the ratios; docs/PERFORMANCE.md has the results).
//
// A packet of N bytes is what icrc_compute() reads: the IPv4 header and UDP header (28 bytes),
// the BTH (12) and N - 40 bytes of payload of an RC SEND Only, built by build_frame() behind an
// Ethernet header, as a receive buffer holds it. Per size:
//   BM_Icrc       icrc_compute() over those N bytes (one masking pass of wire/crc32_fold.h's
//                 kernel where the CPU has AVX-512 VPCLMULQDQ, ISA-L otherwise)
//   BM_Memcpy     memcpy() of the same N bytes from the same source into another buffer
//   BM_Crc32      wire::crc32() over the same N bytes, no masking
//   BM_CopyCrc32  wire::copy_and_crc32(): the same copy as BM_Memcpy and the CRC, in one pass
//   BM_MemcpyThenCrc32  BM_Memcpy followed by BM_Crc32 of the copy: the two-pass equivalent
// All buffers are reused, so they stay in the L1 cache. The BM_Isal* rows call ISA-L's
// implementations directly, to see which one crc32_gzip_refl dispatches to and to compare the
// kernels; BM_IcrcIsal is icrc_compute() with no kernel selected (the fallback path).
#include <benchmark/benchmark.h>
#include <isa-l/crc.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/bytes.h"
#include "wire/builder.h"
#include "wire/crc32_fold.h"
#include "wire/icrc.h"
#include "wire/packet.h"

// ISA-L's per-ISA CRC-32 kernels (exported by libisal, declared in no public header): by8 uses
// 128-bit PCLMULQDQ (SSE), by16_10 512-bit VPCLMULQDQ (AVX-512).
extern "C" {
std::uint32_t crc32_gzip_refl_by8(std::uint32_t crc, const unsigned char* buf, std::uint64_t len);
std::uint32_t crc32_gzip_refl_by16_10(std::uint32_t crc, const unsigned char* buf,
                                      std::uint64_t len);
}

namespace {

using namespace uroce;
using namespace uroce::wire;

constexpr std::size_t kIcrcHeaderBytes = kIpv4Bytes + kUdpBytes + kBthBytes;  // 40
constexpr std::size_t kAlignBytes = 64;

// One packet in a 64-byte aligned buffer, its IP header at offset 14 as behind Ethernet.
class Packet {
 public:
  explicit Packet(std::size_t icrc_bytes)
      : storage_(kAlignBytes + kEthernetBytes + icrc_bytes + kIcrcBytes + kAlignBytes) {
    UROCE_CHECK(icrc_bytes >= kIcrcHeaderBytes && icrc_bytes % 4 == 0);
    const std::size_t payload_bytes = icrc_bytes - kIcrcHeaderBytes;
    std::vector<std::byte> payload(payload_bytes);
    std::uint32_t x = 0x12345678;  // fixed xorshift: the bytes do not matter, only the length
    for (std::byte& b : payload) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      b = static_cast<std::byte>(x);
    }
    OuterHeaders o;
    o.src = IpAddress::v4(0xc0a80101);  // 192.168.1.1
    o.dst = IpAddress::v4(0xc0a80102);
    o.src_port = 0xc123;
    TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcSendOnly);
    h.bth.dest_qpn = 0x000011;
    h.bth.ack_req = true;
    h.bth.psn = 0x123456;
    const MutBytes buf = aligned(storage_, 0);
    const std::size_t n = build_frame(buf, o, h, payload);
    frame_ = buf.first(n);
    UROCE_CHECK(n == kEthernetBytes + icrc_bytes + kIcrcBytes);
    auto parsed = parse_frame(LinkType::kEthernet, frame_);
    UROCE_CHECK(parsed.ok());
    ip_udp_ = parsed->ip_udp;
    const ConstBytes roce = parsed->roce.bytes;
    roce_ = roce.first(roce.size() - kIcrcBytes);
    icrc_ = parsed->roce.icrc();
  }
  Packet(const Packet&) = delete;  // the spans point into storage_
  Packet& operator=(const Packet&) = delete;

  ConstBytes ip_udp() const { return ip_udp_; }
  ConstBytes roce() const { return roce_; }  // BTH and payload, without the ICRC
  // The N bytes the ICRC covers (IP header through payload), contiguous in the buffer.
  ConstBytes icrc_input() const { return {ip_udp_.data(), ip_udp_.size() + roce_.size()}; }
  std::uint32_t icrc() const { return icrc_; }

  // The 64-byte aligned span of `storage` starting `offset` bytes past the alignment point.
  static MutBytes aligned(std::vector<std::byte>& storage, std::size_t offset) {
    const auto addr = reinterpret_cast<std::uintptr_t>(storage.data());
    const std::size_t skip = (kAlignBytes - addr % kAlignBytes) % kAlignBytes;
    return MutBytes(storage).subspan(skip + offset);
  }

 private:
  std::vector<std::byte> storage_;
  ConstBytes frame_;
  ConstBytes ip_udp_;
  ConstBytes roce_;
  std::uint32_t icrc_ = 0;
};

// The destination of the copies: same alignment as the source (IP header at offset 14).
class CopyDst {
 public:
  explicit CopyDst(std::size_t n) : storage_(n + 2 * kAlignBytes) {}
  MutBytes span(std::size_t n) { return Packet::aligned(storage_, kEthernetBytes).first(n); }

 private:
  std::vector<std::byte> storage_;
};

void BM_Icrc(benchmark::State& state) {
  const Packet pkt(static_cast<std::size_t>(state.range(0)));
  UROCE_CHECK(icrc_compute(pkt.ip_udp(), pkt.roce()) == pkt.icrc());
  for (auto _ : state) {
    benchmark::DoNotOptimize(icrc_compute(pkt.ip_udp(), pkt.roce()));
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_Memcpy(benchmark::State& state) {
  const Packet pkt(static_cast<std::size_t>(state.range(0)));
  const ConstBytes src = pkt.icrc_input();
  CopyDst dst_storage(src.size());
  std::byte* dst = dst_storage.span(src.size()).data();
  for (auto _ : state) {
    // The size is only known at run time, as for a received packet, so this calls libc's memcpy.
    // DoNotOptimize makes `dst` escape and ClobberMemory makes the stores observable, so the copy
    // can neither be dropped nor hoisted out of the loop.
    std::memcpy(dst, src.data(), src.size());
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_CopyCrc32(benchmark::State& state) {
  const Packet pkt(static_cast<std::size_t>(state.range(0)));
  const ConstBytes src = pkt.icrc_input();
  CopyDst dst_storage(src.size());
  const MutBytes dst = dst_storage.span(src.size());
  UROCE_CHECK(copy_and_crc32(0, dst, src) == wire::crc32(0, src));
  for (auto _ : state) {
    benchmark::DoNotOptimize(copy_and_crc32(0, dst, src));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_MemcpyThenCrc32(benchmark::State& state) {
  const Packet pkt(static_cast<std::size_t>(state.range(0)));
  const ConstBytes src = pkt.icrc_input();
  CopyDst dst_storage(src.size());
  const MutBytes dst = dst_storage.span(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(wire::crc32(0, dst));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_IcrcIsal(benchmark::State& state) {
  const Packet pkt(static_cast<std::size_t>(state.range(0)));
  const crc32_fold::Kernel before = crc32_fold::selected();
  crc32_fold::select_for_testing(crc32_fold::Kernel::kNone);
  UROCE_CHECK(icrc_compute(pkt.ip_udp(), pkt.roce()) == pkt.icrc());
  for (auto _ : state) {
    benchmark::DoNotOptimize(icrc_compute(pkt.ip_udp(), pkt.roce()));
  }
  crc32_fold::select_for_testing(before);
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_Crc32(benchmark::State& state) {
  const Packet pkt(static_cast<std::size_t>(state.range(0)));
  const ConstBytes data = pkt.icrc_input();
  for (auto _ : state) {
    benchmark::DoNotOptimize(wire::crc32(0, data));
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

template <std::uint32_t (*kCrc)(std::uint32_t, const unsigned char*, std::uint64_t)>
void BM_IsalCrc(benchmark::State& state) {
  const Packet pkt(static_cast<std::size_t>(state.range(0)));
  const ConstBytes data = pkt.icrc_input();
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  UROCE_CHECK(kCrc(0, p, data.size()) == wire::crc32(0, data));
  for (auto _ : state) {
    benchmark::DoNotOptimize(kCrc(0, p, data.size()));
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

std::uint32_t crc32_gzip_refl_dispatched(std::uint32_t crc, const unsigned char* buf,
                                         std::uint64_t len) {
  return crc32_gzip_refl(crc, buf, len);
}

std::uint32_t isal_base(std::uint32_t crc, const unsigned char* buf, std::uint64_t len) {
  return crc32_gzip_refl_base(crc, const_cast<unsigned char*>(buf), len);
}

bool have_avx512_vpclmul() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("vpclmulqdq");
}

// N bytes from the IP header to the end of the payload. 64, 1024 and 4096 are round sizes (and
// multiples of ISA-L's 256-byte fold loop); 1064 and 4136 are what an IPv4 RC SEND Only with a
// 1 KiB or 4 KiB payload (one MTU of 1024 or 4096) gives: 40 header bytes more.
void sizes(benchmark::internal::Benchmark* b) {
  b->Arg(64)->Arg(1024)->Arg(1064)->Arg(4096)->Arg(4136);
}

BENCHMARK(BM_Icrc)->Apply(sizes);
BENCHMARK(BM_Memcpy)->Apply(sizes);
BENCHMARK(BM_Crc32)->Apply(sizes);
BENCHMARK(BM_CopyCrc32)->Apply(sizes);
BENCHMARK(BM_MemcpyThenCrc32)->Apply(sizes);
BENCHMARK(BM_IcrcIsal)->Apply(sizes);

// Registered at run time: the AVX-512 kernel only where the CPU has it.
[[maybe_unused]] const bool kRegistered = [] {
  benchmark::RegisterBenchmark("BM_IsalCrc32", BM_IsalCrc<crc32_gzip_refl_dispatched>)
      ->Apply(sizes);
  benchmark::RegisterBenchmark("BM_IsalBase", BM_IsalCrc<isal_base>)->Apply(sizes);
  if (__builtin_cpu_supports("pclmul")) {
    benchmark::RegisterBenchmark("BM_IsalBy8", BM_IsalCrc<crc32_gzip_refl_by8>)->Apply(sizes);
  }
  if (have_avx512_vpclmul()) {
    benchmark::RegisterBenchmark("BM_IsalBy16", BM_IsalCrc<crc32_gzip_refl_by16_10>)->Apply(sizes);
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();

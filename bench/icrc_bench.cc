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
//
// Per kernel of wire/crc32_fold.h that the CPU can run (K = pclmul128, vpclmul256, vpclmul512),
// that kernel selected: BM_Crc32_K, BM_Icrc_K and BM_CopyCrc32_K, the rows above. And what bounds
// them, measured in the same run:
//   BM_ClmulPeak_W  independent (V)PCLMULQDQ on W-bit registers (W = 128, 256, 512), 8 chains,
//                   as fast as the CPU issues them. Folding needs one 64x64-bit product per 8
//                   input bytes, so each product counts 8 bytes: no CRC-32 by carry-less
//                   multiplication on W-bit registers can run faster than this "bytes" rate.
//   BM_Clock        a chain of dependent integer adds (one per cycle): items/s is the clock.
#include <benchmark/benchmark.h>
#include <isa-l/crc.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/bytes.h"
#include "clock_bench.h"
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
using uroce::bench::BM_Clock;

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

void BM_Crc32(benchmark::State& state) {
  const Packet pkt(static_cast<std::size_t>(state.range(0)));
  const ConstBytes data = pkt.icrc_input();
  for (auto _ : state) {
    benchmark::DoNotOptimize(wire::crc32(0, data));
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

// Selects a kernel for its lifetime, then the default one again.
class KernelScope {
 public:
  explicit KernelScope(crc32_fold::Kernel k) { crc32_fold::select_for_testing(k); }
  ~KernelScope() { crc32_fold::select_for_testing(before_); }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  const crc32_fold::Kernel before_ = crc32_fold::selected();
};

template <void (*kBench)(benchmark::State&)>
void BM_WithKernel(benchmark::State& state, crc32_fold::Kernel k) {
  const KernelScope scope(k);
  kBench(state);
}

void BM_IcrcIsal(benchmark::State& state) {
  BM_WithKernel<BM_Icrc>(state, crc32_fold::Kernel::kNone);
}

// kBody issues 8 x 64 carry-less multiplies of `bits`-bit registers per call.
template <void (*kBody)(), int kBits>
void BM_ClmulPeak(benchmark::State& state) {
  for (auto _ : state) kBody();
  // (kBits / 128) products per instruction, 8 input bytes per product.
  state.SetBytesProcessed(state.iterations() * 8 * 64 * (kBits / 128) * 8);
}

// Eight chains, x_i = x_i * k (low qwords), in registers 0..7 with k in register 8: independent
// enough to cover any current latency (3-7 cycles) at one issue per cycle. The values do not
// matter: the instruction takes as long for any. Inline assembly, so that no target flags are
// needed (each is registered only where the CPU has its instruction).
void clmul_chains_128() {
  asm volatile(
      ".rept 64\n\t"
      "pclmulqdq $0, %%xmm8, %%xmm0\n\t"
      "pclmulqdq $0, %%xmm8, %%xmm1\n\t"
      "pclmulqdq $0, %%xmm8, %%xmm2\n\t"
      "pclmulqdq $0, %%xmm8, %%xmm3\n\t"
      "pclmulqdq $0, %%xmm8, %%xmm4\n\t"
      "pclmulqdq $0, %%xmm8, %%xmm5\n\t"
      "pclmulqdq $0, %%xmm8, %%xmm6\n\t"
      "pclmulqdq $0, %%xmm8, %%xmm7\n\t"
      ".endr" ::
          : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8");
}
void clmul_chains_256() {
  asm volatile(
      ".rept 64\n\t"
      "vpclmulqdq $0, %%ymm8, %%ymm0, %%ymm0\n\t"
      "vpclmulqdq $0, %%ymm8, %%ymm1, %%ymm1\n\t"
      "vpclmulqdq $0, %%ymm8, %%ymm2, %%ymm2\n\t"
      "vpclmulqdq $0, %%ymm8, %%ymm3, %%ymm3\n\t"
      "vpclmulqdq $0, %%ymm8, %%ymm4, %%ymm4\n\t"
      "vpclmulqdq $0, %%ymm8, %%ymm5, %%ymm5\n\t"
      "vpclmulqdq $0, %%ymm8, %%ymm6, %%ymm6\n\t"
      "vpclmulqdq $0, %%ymm8, %%ymm7, %%ymm7\n\t"
      ".endr\n\t"
      "vzeroupper" ::
          : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8");
}
void clmul_chains_512() {
  asm volatile(
      ".rept 64\n\t"
      "vpclmulqdq $0, %%zmm8, %%zmm0, %%zmm0\n\t"
      "vpclmulqdq $0, %%zmm8, %%zmm1, %%zmm1\n\t"
      "vpclmulqdq $0, %%zmm8, %%zmm2, %%zmm2\n\t"
      "vpclmulqdq $0, %%zmm8, %%zmm3, %%zmm3\n\t"
      "vpclmulqdq $0, %%zmm8, %%zmm4, %%zmm4\n\t"
      "vpclmulqdq $0, %%zmm8, %%zmm5, %%zmm5\n\t"
      "vpclmulqdq $0, %%zmm8, %%zmm6, %%zmm6\n\t"
      "vpclmulqdq $0, %%zmm8, %%zmm7, %%zmm7\n\t"
      ".endr\n\t"
      "vzeroupper" ::
          : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8");
}

// wire::crc32() over N bytes of any size (no packet: longer than a packet can be), placed as a
// packet's IP header is (offset 14 from a 64-byte boundary).
void BM_Crc32Buffer(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<std::byte> storage(n + 2 * kAlignBytes + kEthernetBytes, std::byte{0x5a});
  const ConstBytes data = Packet::aligned(storage, kEthernetBytes).first(n);
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
BENCHMARK(BM_Clock);

// The per-kernel rows: the sizes above and 256 bytes (ISA-L's best case); for plain CRC-32 also
// 16 KiB (BM_Crc32Buffer), where the fixed cost of a call no longer shows.
void kernel_sizes(benchmark::internal::Benchmark* b) {
  sizes(b);
  b->Arg(256);
}

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
  using crc32_fold::Kernel;
  for (const Kernel k : crc32_fold::kKernels) {
    if (k == Kernel::kNone || !crc32_fold::supported(k)) continue;
    const std::string name = crc32_fold::kernel_name(k);
    benchmark::RegisterBenchmark(("BM_Crc32_" + name).c_str(), BM_WithKernel<BM_Crc32>, k)
        ->Apply(kernel_sizes);
    benchmark::RegisterBenchmark(("BM_Crc32_" + name).c_str(), BM_WithKernel<BM_Crc32Buffer>, k)
        ->Arg(16384);
    benchmark::RegisterBenchmark(("BM_Icrc_" + name).c_str(), BM_WithKernel<BM_Icrc>, k)
        ->Apply(kernel_sizes);
    benchmark::RegisterBenchmark(("BM_CopyCrc32_" + name).c_str(), BM_WithKernel<BM_CopyCrc32>, k)
        ->Apply(kernel_sizes);
  }
  if (crc32_fold::supported(Kernel::kPclmul128)) {
    benchmark::RegisterBenchmark("BM_ClmulPeak_128", BM_ClmulPeak<clmul_chains_128, 128>);
  }
  if (crc32_fold::supported(Kernel::kVpclmul256)) {
    benchmark::RegisterBenchmark("BM_ClmulPeak_256", BM_ClmulPeak<clmul_chains_256, 256>);
  }
  if (crc32_fold::supported(Kernel::kVpclmul512)) {
    benchmark::RegisterBenchmark("BM_ClmulPeak_512", BM_ClmulPeak<clmul_chains_512, 512>);
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();

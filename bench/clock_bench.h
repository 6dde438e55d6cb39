// BM_Clock, for benchmarks that turn their times into cycles: a chain of dependent adds runs one
// add per cycle on any current x86-64 core, so its items/s is the clock the other rows ran at.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>

namespace uroce::bench {

// 1000 dependent adds per call.
inline void BM_Clock(benchmark::State& state) {
  std::uint64_t x = 0;
  for (auto _ : state) {
    // Register operands: Golden Cove and later execute chains of adds of an immediate at rename.
    asm volatile(".rept 1000\n\tadd %1, %0\n\t.endr" : "+r"(x) : "r"(std::uint64_t{1}));
  }
  benchmark::DoNotOptimize(x);
  state.SetItemsProcessed(state.iterations() * 1000);
}

}  // namespace uroce::bench

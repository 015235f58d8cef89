// The cost of cuactor::nvtx ranges without a profiler (run it outside nsys/ncu): each form against
// an empty loop and against building the same dynamic name eagerly, which the lazy forms avoid.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include "cuactor/core/nvtx.hpp"

namespace {

using cuactor::nvtx::Range;
using cuactor::nvtx::Span;

void BM_EmptyLoop(benchmark::State& state) {
  std::uint64_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(++i);
}
BENCHMARK(BM_EmptyLoop);

void BM_RangeFixedName(benchmark::State& state) {
  std::uint64_t i = 0;
  for (auto _ : state) {
    const Range r("grouped.prepare");
    benchmark::DoNotOptimize(++i);
  }
  state.SetLabel(cuactor::nvtx::enabled() ? "profiler attached" : "no profiler");
}
BENCHMARK(BM_RangeFixedName);

void BM_RangeKindAndId(benchmark::State& state) {
  std::uint64_t id = 0;
  for (auto _ : state) {
    const Range r("fill", ++id);
    benchmark::DoNotOptimize(id);
  }
}
BENCHMARK(BM_RangeKindAndId);

void BM_RangeLazyName(benchmark::State& state) {
  std::uint64_t id = 0;
  const std::string sku = "dense_sm90a_bf16_bf16_bf16_128x256x64_1x2x1_cooperative";
  for (auto _ : state) {
    const Range r([&] { return "gemm " + sku + " #" + std::to_string(id); });
    benchmark::DoNotOptimize(++id);
  }
}
BENCHMARK(BM_RangeLazyName);

void BM_SpanKindAndId(benchmark::State& state) {
  std::uint64_t id = 0;
  for (auto _ : state) {
    Span s = Span::start("request", ++id);
    s.end();
    benchmark::DoNotOptimize(id);
  }
}
BENCHMARK(BM_SpanKindAndId);

// What the lazy form saves: the same name built on every call.
void BM_EagerNameOnly(benchmark::State& state) {
  std::uint64_t id = 0;
  const std::string sku = "dense_sm90a_bf16_bf16_bf16_128x256x64_1x2x1_cooperative";
  for (auto _ : state) {
    std::string name = "gemm " + sku + " #" + std::to_string(++id);
    benchmark::DoNotOptimize(name);
  }
}
BENCHMARK(BM_EagerNameOnly);

}  // namespace

BENCHMARK_MAIN();

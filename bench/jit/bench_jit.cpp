// JIT costs that matter per request: a plan-cache hit (target <= 1 us), a warm disk-cache load
// (target <= 5 ms), and the cold NVRTC compile they avoid.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>

#include "cuactor/gpu/device.hpp"
#include "cuactor/jit/engine.hpp"
#include "cuactor/kernels/sku.hpp"

namespace {

namespace gpu = cuactor::gpu;
namespace jit = cuactor::jit;
namespace kernels = cuactor::kernels;
using cuactor::GpuArch;

GpuArch bench_arch() {
  if (gpu::device_count() > 0)
    if (auto p = gpu::device_properties(0)) return p->arch;
  return GpuArch{9, 0, true};
}

jit::NvrtcRequest axpy(const std::string& salt) {
  jit::NvrtcRequest r;
  r.program_name = "bench_axpy.cu";
  r.arch = bench_arch();
  r.source = "// " + salt + R"(
extern "C" __global__ void axpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";
  return r;
}

std::filesystem::path bench_dir() {
  static const auto dir = std::filesystem::temp_directory_path() / ("cuactor-bench-jit-" + std::to_string(::getpid()));
  return dir;
}

std::shared_ptr<jit::JitEngine> engine() {
  jit::JitOptions o;
  o.disk.directory = bench_dir();
  auto e = jit::JitEngine::create(o);
  return e ? *e : nullptr;
}

void BM_NvrtcColdCompile(benchmark::State& state) {
  static std::atomic<int> salt{0};
  for (auto _ : state) {
    auto out = jit::nvrtc_compile(axpy("cold " + std::to_string(salt++)));
    if (!out) state.SkipWithError(out.error().to_string().c_str());
  }
}
BENCHMARK(BM_NvrtcColdCompile)->Unit(benchmark::kMillisecond)->Iterations(10);

// A fresh engine (empty plan cache) finding a warmed entry: disk read, checksum, and with a GPU
// cuLibraryLoadData of the cubin.
void BM_WarmDiskLoad(benchmark::State& state) {
  const auto req = axpy("warm");
  auto e = engine();
  if (!e || !e->warm(req)) return state.SkipWithError("warm failed");
  const bool gpu = gpu::device_count() > 0;
  for (auto _ : state) {
    auto fresh = engine();
    if (gpu) {
      const auto& m = fresh->module(req).get();
      if (!m || !(*m)->from_disk()) state.SkipWithError("load failed or recompiled");
    } else {
      auto a = fresh->disk_cache().load(jit::cache_key(req));
      if (!a || !*a) state.SkipWithError("entry missing");
    }
  }
  state.SetLabel(gpu ? "disk + cuLibraryLoadData" : "disk only (no GPU)");
}
BENCHMARK(BM_WarmDiskLoad)->Unit(benchmark::kMillisecond);

// The in-process plan cache keyed by a GemmSku (what GemmJit does per request).
void BM_PlanCacheHitBySku(benchmark::State& state) {
  jit::PlanCache<kernels::GemmSku, int> cache(64);
  kernels::GemmSku sku;
  cache.get_or_start(sku, [](jit::JitFuture<int> f) { f.set(std::make_shared<const int>(1)); });
  for (auto _ : state) benchmark::DoNotOptimize(cache.get_or_start(sku, [](jit::JitFuture<int>) {}));
}
BENCHMARK(BM_PlanCacheHitBySku);

// An NVRTC module request that hits the plan cache (its key hashes the source); needs a GPU.
void BM_PlanCacheHitNvrtcModule(benchmark::State& state) {
  if (gpu::device_count() == 0) return state.SkipWithError("no GPU");
  const auto req = axpy("hit");
  auto e = engine();
  if (!e) return state.SkipWithError("engine");
  if (!e->module(req).get()) return state.SkipWithError("first load failed");
  for (auto _ : state) benchmark::DoNotOptimize(e->module(req));
}
BENCHMARK(BM_PlanCacheHitNvrtcModule);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  std::filesystem::remove_all(bench_dir(), ec);
  return 0;
}

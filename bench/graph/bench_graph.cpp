// bench_graph (issue 4): the host cost of one graph replay, and a sequence of 200 small kernels
// launched eagerly (through cuactor's validated launch and through raw <<<>>>) versus replayed from a
// captured graph. PyTorch on an H200 for scale: 200 tiny kernels 1452 us eager vs 229 us replayed; one
// replay costs the host 2.6 us.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "bench_raw_launch.hpp"
#include "cuactor/cuda/device.hpp"
#include "cuactor/cuda/memory.hpp"
#include "cuactor/cuda/module.hpp"
#include "cuactor/cuda/stream.hpp"
#include "cuactor/graph/capture.hpp"

namespace cuactor {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kKernels = 200;
constexpr int kElements = 128;
constexpr int kSyncEvery = 256;  // launches queued before an (untimed) synchronisation

/// Everything the benchmarks share: the tiny kernel, a stream, a buffer and the captured graphs.
struct Fixture {
  cuda::Library library;
  cuda::Kernel kernel;
  cuda::Stream stream;
  cuda::MemPool pool;
  cuda::DeviceBuffer buffer;
  std::unique_ptr<graph::CapturedGraph> one;       // one kernel
  std::unique_ptr<graph::CapturedGraph> sequence;  // kKernels kernels

  Status launch_cuactor() const {
    cuda::LaunchConfig cfg;
    cfg.grid = dim3(1);
    cfg.block = dim3(kElements);
    cfg.stream = stream.get();
    return cuda::launch(kernel, cfg, buffer.data_as<float>(), kElements);
  }

  Result<graph::CapturedGraph> capture(int kernels) const {
    auto session = graph::begin_capture(stream.get(), graph::CaptureMode::global);
    if (!session) return fail(session.error());
    for (int i = 0; i < kernels; ++i) CUACTOR_TRY(launch_cuactor());
    auto g = session->end_capture();
    if (!g) return fail(g.error());
    CUACTOR_TRY(g->upload(stream.get()));
    return g;
  }

  static Result<std::unique_ptr<Fixture>> make() {
    auto f = std::make_unique<Fixture>();
    auto lib = cuda::Library::load_file(CUACTOR_BENCH_GRAPH_PTX);
    if (!lib) return fail(lib.error());
    f->library = std::move(*lib);
    auto k = f->library.kernel("cuactor_bench_tiny");
    if (!k) return fail(k.error());
    f->kernel = std::move(*k);
    auto s = cuda::Stream::create(0);
    if (!s) return fail(s.error());
    f->stream = std::move(*s);
    auto p = cuda::MemPool::device_default(0);
    if (!p) return fail(p.error());
    f->pool = std::move(*p);
    auto b = cuda::DeviceBuffer::allocate(f->pool, kElements * sizeof(float), f->stream.get());
    if (!b) return fail(b.error());
    f->buffer = std::move(*b);
    std::vector<float> init(kElements, 1.0f);
    CUACTOR_TRY(cuda::copy_async(f->buffer.data(), init.data(), sizeof(float) * kElements, f->stream.get()));
    auto one = f->capture(1);
    if (!one) return fail(one.error());
    f->one = std::make_unique<graph::CapturedGraph>(std::move(*one));
    auto seq = f->capture(kKernels);
    if (!seq) return fail(seq.error());
    f->sequence = std::make_unique<graph::CapturedGraph>(std::move(*seq));
    CUACTOR_TRY(f->stream.synchronize());
    return f;
  }
};

Fixture* fixture(benchmark::State& state) {
  static Result<std::unique_ptr<Fixture>> f = [] {
    if (cuda::device_count() == 0) return Result<std::unique_ptr<Fixture>>(fail(errc::no_device, "no CUDA device"));
    return Fixture::make();
  }();
  if (!f) {
    state.SkipWithError(f.error().to_string().c_str());
    return nullptr;
  }
  return f->get();
}

bool ok_or_skip(benchmark::State& state, const Status& s) {
  if (s) return true;
  state.SkipWithError(s.error().to_string().c_str());
  return false;
}

/// Host time of graph.launch() alone (queueing the replay), synchronising outside the timed region.
void host_cost_of_replay(benchmark::State& state, bool long_graph) {
  Fixture* f = fixture(state);
  if (!f) return;
  graph::CapturedGraph& g = long_graph ? *f->sequence : *f->one;
  int queued = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    const Status s = g.launch(f->stream.get());
    const auto t1 = Clock::now();
    if (!ok_or_skip(state, s)) return;
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    if (++queued == (long_graph ? 8 : kSyncEvery)) {
      if (!ok_or_skip(state, f->stream.synchronize())) return;
      queued = 0;
    }
  }
  (void)f->stream.synchronize();
}

void BM_ReplayHostCost(benchmark::State& state) {
  host_cost_of_replay(state, false);
}
BENCHMARK(BM_ReplayHostCost)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.5);

void BM_ReplayHostCost200Kernels(benchmark::State& state) {
  host_cost_of_replay(state, true);
}
BENCHMARK(BM_ReplayHostCost200Kernels)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.5);

/// Host time of one eager cuactor launch (cuda::launch validates argument count and sizes).
void BM_EagerLaunchHostCost(benchmark::State& state) {
  Fixture* f = fixture(state);
  if (!f) return;
  int queued = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    const Status s = f->launch_cuactor();
    const auto t1 = Clock::now();
    if (!ok_or_skip(state, s)) return;
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    if (++queued == kSyncEvery) {
      if (!ok_or_skip(state, f->stream.synchronize())) return;
      queued = 0;
    }
  }
  (void)f->stream.synchronize();
}
BENCHMARK(BM_EagerLaunchHostCost)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.5);

void set_per_kernel(benchmark::State& state, double total_seconds) {
  const double iterations = static_cast<double>(state.iterations());
  state.counters["us_per_kernel"] = total_seconds / iterations / kKernels * 1e6;
}

/// 200 tiny kernels through cuactor's launch, then a synchronisation: end-to-end time.
void BM_Sequence200Eager(benchmark::State& state) {
  Fixture* f = fixture(state);
  if (!f) return;
  double total = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kKernels; ++i)
      if (!ok_or_skip(state, f->launch_cuactor())) return;
    if (!ok_or_skip(state, f->stream.synchronize())) return;
    total += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  set_per_kernel(state, total);
}
BENCHMARK(BM_Sequence200Eager)->Unit(benchmark::kMicrosecond)->MinTime(0.5);

/// The same 200 kernels with raw <<<>>> launches (the floor of eager launching).
void BM_Sequence200EagerRawCuda(benchmark::State& state) {
  Fixture* f = fixture(state);
  if (!f) return;
  double total = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kKernels; ++i)
      if (bench_launch_tiny_raw(f->buffer.data_as<float>(), kElements, f->stream.get()) != cudaSuccess) {
        state.SkipWithError("raw launch failed");
        return;
      }
    if (!ok_or_skip(state, f->stream.synchronize())) return;
    total += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  set_per_kernel(state, total);
}
BENCHMARK(BM_Sequence200EagerRawCuda)->Unit(benchmark::kMicrosecond)->MinTime(0.5);

/// The same 200 kernels replayed from one captured graph, then a synchronisation.
void BM_Sequence200Replayed(benchmark::State& state) {
  Fixture* f = fixture(state);
  if (!f) return;
  double total = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    if (!ok_or_skip(state, f->sequence->launch(f->stream.get()))) return;
    if (!ok_or_skip(state, f->stream.synchronize())) return;
    total += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  set_per_kernel(state, total);
}
BENCHMARK(BM_Sequence200Replayed)->Unit(benchmark::kMicrosecond)->MinTime(0.5);

}  // namespace
}  // namespace cuactor

BENCHMARK_MAIN();

// bench_graph (issue 4): the host cost of one graph replay, and a sequence of 200 small kernels
// launched eagerly (through cuactor's validated launch, through the device actor, and through raw
// <<<>>>) versus replayed from a captured graph (directly and as a device-actor operation). PyTorch on
// an H200 for scale: 200 tiny kernels 1452 us eager vs 229 us replayed; one replay costs the host 2.6 us.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <memory>
#include <tuple>
#include <vector>

#include "actor_vs_raw.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/module.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/graph/actor_capture.hpp"
#include "cuactor/graph/capture.hpp"
#include "cuactor/runtime/device_actor.hpp"
#include "tiny_kernel.hpp"

namespace cuactor {
namespace {

using Clock = std::chrono::steady_clock;
namespace asio = boost::asio;

constexpr int kKernels = 200;
constexpr int kElements = 128;
constexpr int kSyncEvery = 256;  // launches queued before an (untimed) synchronisation

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Everything the benchmarks share: the tiny kernel, a stream, a buffer, a device actor and the
/// captured graphs.
struct Fixture {
  std::shared_ptr<gpu::Library> library;
  gpu::Kernel kernel;
  gpu::Stream stream;
  gpu::MemPool pool;
  gpu::DeviceBuffer buffer;
  std::unique_ptr<graph::CapturedGraph> one;       // one kernel
  std::unique_ptr<graph::CapturedGraph> sequence;  // kKernels kernels
  std::unique_ptr<runtime::DeviceActor> actor;
  runtime::GpuRef<float> actor_buffer;
  std::shared_ptr<graph::CapturedGraph> actor_sequence;  // kKernels actor launches, captured
  mutable std::uint64_t submit_ns = 0;                   // the caller's time in run_actor_sequence()'s submits

  Status launch_cuactor() const {
    gpu::LaunchConfig cfg;
    cfg.grid = dim3(1);
    cfg.block = dim3(kElements);
    cfg.stream = stream.get();
    return gpu::launch(kernel, cfg, buffer.data_as<float>(), kElements);
  }

  /// Submits one launch of the tiny kernel to the actor.
  template <class Token>
  auto launch_on_actor(Token&& token) const {
    runtime::LaunchShape shape;
    shape.block = dim3(kElements);
    return actor->launch(library, kernel, shape, runtime::KernelArgs::make(actor_buffer, kElements),
                         std::forward<Token>(token));
  }

  /// kKernels raw <<<>>> launches of the tiny kernel, then a synchronisation (the floor of eager launching).
  Status run_raw_sequence() const {
    for (int i = 0; i < kKernels; ++i)
      CUACTOR_CUDA_TRY(bench_launch_tiny_raw(buffer.data_as<float>(), kElements, stream.get()));
    return stream.synchronize();
  }

  /// Submits kKernels launches to the actor and waits for the last reply (the actor's stream runs them
  /// in order, so the last reply means all ran).
  Status run_actor_sequence() const {
    std::atomic<int> failures{0};
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kKernels - 1; ++i)
      launch_on_actor([&failures](std::error_code ec, std::monostate) {
        if (ec) failures.fetch_add(1);
      });
    auto done_future = launch_on_actor(asio::use_future);
    submit_ns += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    auto [ec, done] = done_future.get();
    if (ec || failures.load() != 0)
      return fail(errc::internal, "actor launch failed: " + (ec ? ec.message() : std::string("earlier launch")));
    return ok();
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

  Result<graph::CapturedGraph> capture_on_actor() const {
    auto capture = graph::ActorCapture::begin(*actor, graph::CaptureMode::global);
    if (!capture) return fail(capture.error());
    CUACTOR_TRY(run_actor_sequence());
    return capture->end_capture();
  }

  static Result<std::unique_ptr<Fixture>> make() {
    auto f = std::make_unique<Fixture>();
    auto lib = gpu::Library::load_file(CUACTOR_BENCH_GRAPH_PTX);
    if (!lib) return fail(lib.error());
    f->library = std::make_shared<gpu::Library>(std::move(*lib));
    auto k = f->library->kernel("cuactor_bench_tiny");
    if (!k) return fail(k.error());
    f->kernel = std::move(*k);
    auto s = gpu::Stream::create(0);
    if (!s) return fail(s.error());
    f->stream = std::move(*s);
    auto p = gpu::MemPool::device_default(0);
    if (!p) return fail(p.error());
    f->pool = std::move(*p);
    auto b = gpu::DeviceBuffer::allocate(f->pool, kElements * sizeof(float), f->stream.get());
    if (!b) return fail(b.error());
    f->buffer = std::move(*b);
    std::vector<float> init(kElements, 1.0f);
    CUACTOR_TRY(gpu::copy_async(f->buffer.data(), init.data(), sizeof(float) * kElements, f->stream.get()));
    auto one = f->capture(1);
    if (!one) return fail(one.error());
    f->one = std::make_unique<graph::CapturedGraph>(std::move(*one));
    auto seq = f->capture(kKernels);
    if (!seq) return fail(seq.error());
    f->sequence = std::make_unique<graph::CapturedGraph>(std::move(*seq));
    CUACTOR_TRY(f->stream.synchronize());

    auto actor = runtime::DeviceActor::create(0);
    if (!actor) return fail(actor.error());
    f->actor = std::make_unique<runtime::DeviceActor>(std::move(*actor));
    auto [ea, ref] = f->actor->allocate<float>(kElements, asio::use_future).get();
    if (ea) return fail(Error(ea, "actor allocate"));
    f->actor_buffer = ref;
    if (auto [ef, filled] = f->actor->fill(ref, 1.0f, asio::use_future).get(); ef) return fail(Error(ef, "actor fill"));
    auto captured = f->capture_on_actor();
    if (!captured) return fail(captured.error());
    f->actor_sequence = std::make_shared<graph::CapturedGraph>(std::move(*captured));
    return f;
  }
};

/// The shared fixture, made on first use; released explicitly before exit (see main).
Result<std::unique_ptr<Fixture>>& fixture_slot() {
  static Result<std::unique_ptr<Fixture>> f = [] {
    if (gpu::device_count() == 0) return Result<std::unique_ptr<Fixture>>(fail(errc::no_device, "no CUDA device"));
    return Fixture::make();
  }();
  return f;
}

Fixture* fixture(benchmark::State& state) {
  auto& f = fixture_slot();
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

/// Host time of `enqueue()` alone; the stream is synchronised, untimed, every `sync_every` calls.
template <class Enqueue>
void time_host_cost(benchmark::State& state, const Fixture& f, int sync_every, Enqueue enqueue) {
  int queued = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    const Status s = enqueue();
    state.SetIterationTime(seconds_since(t0));
    if (!ok_or_skip(state, s)) return;
    if (++queued == sync_every) {
      if (!ok_or_skip(state, f.stream.synchronize())) return;
      queued = 0;
    }
  }
  (void)f.stream.synchronize();
}

/// End-to-end time of `run()` (enqueue and wait for kKernels kernels), reported per kernel too.
template <class Run>
void time_sequence(benchmark::State& state, Run run) {
  double total = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    if (!ok_or_skip(state, run())) return;
    total += seconds_since(t0);
  }
  state.counters["us_per_kernel"] = total / static_cast<double>(state.iterations()) / kKernels * 1e6;
}

void BM_ReplayHostCost(benchmark::State& state) {
  if (Fixture* f = fixture(state))
    time_host_cost(state, *f, kSyncEvery, [f] { return f->one->launch(f->stream.get()); });
}
BENCHMARK(BM_ReplayHostCost)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.5);

void BM_ReplayHostCost200Kernels(benchmark::State& state) {
  if (Fixture* f = fixture(state)) time_host_cost(state, *f, 8, [f] { return f->sequence->launch(f->stream.get()); });
}
BENCHMARK(BM_ReplayHostCost200Kernels)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.5);

/// Host time of one eager cuactor launch (gpu::launch checks argument count and sizes).
void BM_EagerLaunchHostCost(benchmark::State& state) {
  if (Fixture* f = fixture(state)) time_host_cost(state, *f, kSyncEvery, [f] { return f->launch_cuactor(); });
}
BENCHMARK(BM_EagerLaunchHostCost)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.5);

/// 200 tiny kernels through cuactor's direct launch, then a synchronisation.
void BM_Sequence200Eager(benchmark::State& state) {
  Fixture* f = fixture(state);
  if (!f) return;
  time_sequence(state, [f]() -> Status {
    for (int i = 0; i < kKernels; ++i) CUACTOR_TRY(f->launch_cuactor());
    return f->stream.synchronize();
  });
}
BENCHMARK(BM_Sequence200Eager)->Unit(benchmark::kMicrosecond)->MinTime(0.5);

/// The same 200 kernels with raw <<<>>> launches (the floor of eager launching).
void BM_Sequence200EagerRawCuda(benchmark::State& state) {
  Fixture* f = fixture(state);
  if (!f) return;
  time_sequence(state, [f] { return f->run_raw_sequence(); });
}
BENCHMARK(BM_Sequence200EagerRawCuda)->Unit(benchmark::kMicrosecond)->MinTime(0.5);

/// The same 200 kernels as device-actor requests (validated, ordered, completed), waiting for the last.
void BM_Sequence200EagerActor(benchmark::State& state) {
  Fixture* f = fixture(state);
  if (!f) return;
  const auto before = f->actor->stats();
  const std::uint64_t submit_before = f->submit_ns;
  time_sequence(state, [f] { return f->run_actor_sequence(); });
  // The actor thread's share per kernel (validation, leases, the launch, batching) and the submitting
  // thread's (building and posting requests): what is left of us_per_kernel beyond the larger of the
  // two is the reply path or the GPU.
  const auto after = f->actor->stats();
  const double kernels = static_cast<double>(state.iterations()) * kKernels;
  state.counters["dispatch_us_per_kernel"] =
      static_cast<double>(after.dispatch_ns - before.dispatch_ns) / 1e3 / kernels;
  state.counters["submit_us_per_kernel"] = static_cast<double>(f->submit_ns - submit_before) / 1e3 / kernels;
  state.counters["kernels_per_batch"] = static_cast<double>(after.completed - before.completed) /
                                        static_cast<double>(std::max<std::uint64_t>(1, after.batches - before.batches));
}
BENCHMARK(BM_Sequence200EagerActor)->Unit(benchmark::kMicrosecond)->MinTime(0.5);

/// The eager sequence through the actor against raw <<<>>> launches, interleaved: per iteration the raw
/// sequence and its synchronisation, then the actor's. Samples are microseconds per kernel. The two
/// benchmarks above run one after the other, and the driver's launch cost drifts between them by up to a
/// third on a virtual machine; interleaving is what makes their ratio a measurement.
void BM_Sequence200EagerActorVsRaw(benchmark::State& state) {
  Fixture* f = fixture(state);
  if (!f) return;
  std::vector<double> raw, actor;
  for (auto _ : state) {
    auto t0 = Clock::now();
    if (!ok_or_skip(state, f->run_raw_sequence())) return;
    raw.push_back(seconds_since(t0) * 1e6 / kKernels);
    t0 = Clock::now();
    if (!ok_or_skip(state, f->run_actor_sequence())) return;
    actor.push_back(seconds_since(t0) * 1e6 / kKernels);
  }
  report_actor_vs_raw(state, raw, actor);
}
BENCHMARK(BM_Sequence200EagerActorVsRaw)->Iterations(1000)->Unit(benchmark::kMicrosecond);

/// The same 200 kernels replayed from one captured graph, then a synchronisation.
void BM_Sequence200Replayed(benchmark::State& state) {
  Fixture* f = fixture(state);
  if (!f) return;
  time_sequence(state, [f]() -> Status {
    CUACTOR_TRY(f->sequence->launch(f->stream.get()));
    return f->stream.synchronize();
  });
}
BENCHMARK(BM_Sequence200Replayed)->Unit(benchmark::kMicrosecond)->MinTime(0.5);

/// The 200 actor launches captured through the actor, replayed as one actor request.
void BM_Sequence200ReplayedActor(benchmark::State& state) {
  Fixture* f = fixture(state);
  if (!f) return;
  time_sequence(state, [f]() -> Status {
    auto [ec, done] = graph::replay(*f->actor, f->actor_sequence, asio::use_future).get();
    if (ec) return fail(Error(ec, "actor replay"));
    return ok();
  });
}
BENCHMARK(BM_Sequence200ReplayedActor)->Unit(benchmark::kMicrosecond)->MinTime(0.5);

}  // namespace

/// Tears the fixture down while CUDA is still fully alive: the actor is shut down and the graphs'
/// pools are freed before static destruction begins.
void release_bench_fixture() {
  auto& f = fixture_slot();
  if (f) f->reset();
  (void)graph::wait_for_released_pools(std::chrono::seconds(10));
}

}  // namespace cuactor

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  cuactor::release_bench_fixture();
  benchmark::Shutdown();
  return 0;
}

// Device actor overheads (issue 3): round trip of a tiny kernel submitted through the actor vs the same
// kernel launched on a raw stream with a cudaLaunchHostFunc completion, and sustained throughput of
// small operations. Targets: median round trip <= 10 us, >= 200,000 small operations per second.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/runtime/device_actor.hpp"

namespace {

using cuactor::runtime::DeviceActor;
using cuactor::runtime::GpuRef;
using cuactor::runtime::OpContext;
using Clock = std::chrono::steady_clock;

/// Median and 99th percentile of per-iteration samples, in microseconds, as benchmark counters.
void report_percentiles(benchmark::State& state, std::vector<double>& us) {
  if (us.empty()) return;
  std::sort(us.begin(), us.end());
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[std::min(us.size() - 1, us.size() * 99 / 100)];
}

struct Fixture {
  DeviceActor actor;
  GpuRef<int> scratch;
};

Fixture* fixture() {
  static std::optional<Fixture> f = []() -> std::optional<Fixture> {
    auto actor = DeviceActor::create(0);
    if (!actor) return std::nullopt;
    auto [ec, ref] = actor->allocate<int>(1024, boost::asio::use_future).get();
    if (ec) return std::nullopt;
    return Fixture{std::move(*actor), ref};
  }();
  return f ? &*f : nullptr;
}

/// One tiny kernel (a 1-element fill) submitted through the actor; the caller spins on the reply.
void BM_ActorRoundTrip(benchmark::State& state) {
  Fixture* f = fixture();
  if (!f) {
    state.SkipWithError("no CUDA device");
    return;
  }
  std::vector<double> samples;
  for (auto _ : state) {
    std::atomic<bool> done{false};
    const auto t0 = Clock::now();
    f->actor.submit<int>(
        cuactor::runtime::Reads{}, cuactor::runtime::Writes{f->scratch},
        [buf = f->scratch](OpContext& ctx) -> cuactor::Result<int> {
          const int one = 1;
          CUACTOR_TRY(cuactor::runtime::enqueue_fill(buf.allocation()->data(), 1, &one, sizeof(int), ctx.stream()));
          return 0;
        },
        [&done](std::error_code, int) { done.store(true, std::memory_order_release); });
    while (!done.load(std::memory_order_acquire)) {
    }
    samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  report_percentiles(state, samples);
}
BENCHMARK(BM_ActorRoundTrip)->Iterations(20000)->UseRealTime();

void CUDART_CB set_flag(void* flag) {
  static_cast<std::atomic<bool>*>(flag)->store(true, std::memory_order_release);
}

/// The same kernel on a raw stream, completion by cudaLaunchHostFunc: the floor the actor adds to.
void BM_RawStreamRoundTrip(benchmark::State& state) {
  Fixture* f = fixture();
  if (!f) {
    state.SkipWithError("no CUDA device");
    return;
  }
  auto stream = cuactor::gpu::Stream::create(0);
  if (!stream) {
    state.SkipWithError("stream");
    return;
  }
  auto ptr = f->scratch.raw_device_ptr();
  std::vector<double> samples;
  for (auto _ : state) {
    std::atomic<bool> done{false};
    const auto t0 = Clock::now();
    const int one = 1;
    (void)cuactor::runtime::enqueue_fill(*ptr, 1, &one, sizeof(int), stream->get());
    (void)cudaLaunchHostFunc(stream->get(), set_flag, &done);
    while (!done.load(std::memory_order_acquire)) {
    }
    samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  (void)stream->synchronize();
  report_percentiles(state, samples);
}
BENCHMARK(BM_RawStreamRoundTrip)->Iterations(20000)->UseRealTime();

/// Sustained throughput: `threads` submitters keep the mailbox busy with tiny kernels (1-element
/// fills), backing off near the mailbox bound; items/s = completed replies per second.
void BM_ActorThroughput(benchmark::State& state) {
  Fixture* f = fixture();
  if (!f) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int threads = static_cast<int>(state.range(0));
  constexpr int per_thread_ops = 50000;
  std::int64_t total_ops = 0;
  for (auto _ : state) {
    std::atomic<int> replies{0}, errors{0}, submitted{0};
    std::vector<std::thread> submitters;
    for (int t = 0; t < threads; ++t)
      submitters.emplace_back([&] {
        for (int i = 0; i < per_thread_ops; ++i) {
          f->actor.submit<int>(
              cuactor::runtime::Reads{}, cuactor::runtime::Writes{f->scratch},
              [buf = f->scratch](OpContext& ctx) -> cuactor::Result<int> {
                const int v = 2;
                CUACTOR_TRY(cuactor::runtime::enqueue_fill(buf.allocation()->data(), 1, &v, sizeof(int), ctx.stream()));
                return 0;
              },
              [&](std::error_code ec, int) {
                if (ec) errors.fetch_add(1, std::memory_order_relaxed);
                replies.fetch_add(1, std::memory_order_release);
              });
          // Stay under the mailbox bound (1024) so that nothing is rejected.
          const int outstanding = submitted.fetch_add(1, std::memory_order_relaxed) + 1;
          while (outstanding - replies.load(std::memory_order_acquire) > 900) std::this_thread::yield();
        }
      });
    for (auto& s : submitters) s.join();
    while (replies.load(std::memory_order_acquire) < threads * per_thread_ops) std::this_thread::yield();
    if (errors.load() != 0) state.SkipWithError("some requests failed");
    total_ops += threads * per_thread_ops;
  }
  state.SetItemsProcessed(total_ops);
}
BENCHMARK(BM_ActorThroughput)->Arg(1)->Arg(4)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

// Device actor overheads ([R5]): round trip of a tiny kernel submitted through the actor vs the same
// kernel launched on a raw stream and synchronised (interleaved in one benchmark, so both see the same
// clocks), sustained throughput of small operations, and the CPU the actor burns while idle.
// Targets (issue 9): p50 <= 1.25x raw launch + synchronize, p99 <= 2x; >= 250,000 ops/s with 1 and 4
// submitting threads; idle actor < 1% of one core.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <optional>
#include <sys/resource.h>
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

/// Interleaved: per iteration one raw launch + cudaStreamSynchronize of the same 1-element fill on a
/// plain stream, then one actor round trip; reports both and their ratios (the anchor).
void BM_ActorVsRawSync(benchmark::State& state) {
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
  auto raw_ptr = f->scratch.raw_device_ptr();
  if (!raw_ptr) {
    state.SkipWithError("scratch pointer");
    return;
  }
  std::vector<double> raw, actor;
  for (auto _ : state) {
    const int one = 1;
    auto t0 = Clock::now();
    if (!cuactor::runtime::enqueue_fill(*raw_ptr, 1, &one, sizeof(int), stream->get()) ||
        cudaStreamSynchronize(stream->get()) != cudaSuccess) {
      state.SkipWithError("raw launch failed");
      return;
    }
    raw.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());

    std::atomic<bool> done{false};
    std::error_code failure;
    t0 = Clock::now();
    f->actor.submit<int>(
        cuactor::runtime::Reads{}, cuactor::runtime::Writes{f->scratch},
        [buf = f->scratch](OpContext& ctx) -> cuactor::Result<int> {
          const int v = 1;
          CUACTOR_TRY(cuactor::runtime::enqueue_fill(buf.allocation()->data(), 1, &v, sizeof(int), ctx.stream()));
          return 0;
        },
        [&](std::error_code ec, int) {
          failure = ec;
          done.store(true, std::memory_order_release);
        });
    while (!done.load(std::memory_order_acquire)) {
    }
    actor.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (failure) {
      state.SkipWithError("actor request failed");
      return;
    }
  }
  auto pct = [](std::vector<double>& v, std::size_t num) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, v.size() * num / 100)];
  };
  const double raw50 = pct(raw, 50), raw99 = pct(raw, 99), act50 = pct(actor, 50), act99 = pct(actor, 99);
  state.counters["raw_p50_us"] = raw50;
  state.counters["raw_p99_us"] = raw99;
  state.counters["actor_p50_us"] = act50;
  state.counters["actor_p99_us"] = act99;
  state.counters["ratio_p50"] = act50 / raw50;
  state.counters["ratio_p99"] = act99 / raw99;
}
BENCHMARK(BM_ActorVsRawSync)->Iterations(20000)->UseRealTime();

/// CPU time of the whole process (actor thread, poller, reply pool) over one idle second after a burst
/// of work: the poller must block, not spin, when nothing is in flight.
void BM_ActorIdleCpu(benchmark::State& state) {
  Fixture* f = fixture();
  if (!f) {
    state.SkipWithError("no CUDA device");
    return;
  }
  auto cpu_seconds = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
  };
  for (auto _ : state) {
    (void)f->actor.fill(f->scratch, 3, boost::asio::use_future).get();  // the poller just saw work
    const double c0 = cpu_seconds();
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    state.counters["idle_cpu_pct_of_core"] = 100.0 * (cpu_seconds() - c0) / wall;
  }
}
BENCHMARK(BM_ActorIdleCpu)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);

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

/// Sustained throughput (target >= 250k ops/s): `threads` submitters keep the mailbox busy with tiny kernels (1-element
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

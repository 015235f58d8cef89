// Device actor overheads ([R5]): round trip of a tiny kernel (bench/common) submitted through the actor
// vs the same kernel launched on a raw stream and synchronised (interleaved in one benchmark, so both see
// the same clocks), sustained throughput of small operations (tiny kernels, built-in fills), and the CPU
// the actor burns while idle.
// Targets (issue 9): p50 <= 1.25x raw launch + synchronize, p99 <= 2x; >= 250,000 ops/s with 1 and 4
// submitting threads; idle actor < 1% of one core. Isolated mode (issue 10): a tiny fill round trip
// <= 2x the in-process actor's; a 64 MiB host -> device copy >= 80% of the in-process pinned copy.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <cstring>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "actor_vs_raw.hpp"
#include "cuactor/core/driver_api.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/runtime/device_actor.hpp"
#include "tiny_kernel.hpp"

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
  GpuRef<float> scratch;  // 1024 elements; the tiny kernel works on the first
  GpuRef<float> cell;     // one element: the built-in fill's target
};

/// One launch of the tiny kernel on x[0].
cuactor::Status launch_tiny(float* x, cudaStream_t stream) {
  return cuactor::gpu::check(bench_launch_tiny_raw(x, 1, stream), "tiny kernel launch");
}

/// The tiny kernel on `buf`, as a request's function.
cuactor::Result<int> tiny_on(const GpuRef<float>& buf, OpContext& ctx) {
  CUACTOR_TRY(launch_tiny(static_cast<float*>(buf.allocation()->data()), ctx.stream()));
  return 0;
}

/// Replies with an error seen by spin_round_trip() (a benchmark must not time failures).
std::atomic<int> round_trip_errors{0};

/// Waits for the reply of `initiate(handler)` by spinning, and returns the round trip in microseconds.
template <class Initiate>
double spin_round_trip(Initiate initiate) {
  std::atomic<bool> done{false};
  const auto t0 = Clock::now();
  initiate([&done](std::error_code ec, auto&&...) {
    if (ec) round_trip_errors.fetch_add(1, std::memory_order_relaxed);
    done.store(true, std::memory_order_release);
  });
  while (!done.load(std::memory_order_acquire)) {
  }
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

/// The benchmarks' actor; `mode` picks how it detects completion (benchmarks that take it as their
/// argument compare the two: 0 = sequence word, 1 = event queries).
Fixture* fixture(cuactor::runtime::CompletionMode mode = cuactor::runtime::CompletionMode::sequence_word) {
  auto make = [](cuactor::runtime::CompletionMode m) -> std::optional<Fixture> {
    cuactor::runtime::ActorOptions o;
    o.poller.mode = m;
    auto actor = DeviceActor::create(0, o);
    if (!actor) return std::nullopt;
    auto [ec, ref] = actor->allocate<float>(1024, boost::asio::use_future).get();
    auto [ec_cell, cell] = actor->allocate<float>(1, boost::asio::use_future).get();
    if (ec || ec_cell) return std::nullopt;
    return Fixture{std::move(*actor), ref, cell};
  };
  static std::optional<Fixture> word = make(cuactor::runtime::CompletionMode::sequence_word);
  if (mode == cuactor::runtime::CompletionMode::sequence_word) return word ? &*word : nullptr;
  static std::optional<Fixture> events = make(cuactor::runtime::CompletionMode::event_query);
  return events ? &*events : nullptr;
}

/// The completion mode a benchmark's argument `index` names (0 = sequence word, 1 = event queries).
cuactor::runtime::CompletionMode mode_arg(const benchmark::State& state, int index) {
  return state.range(index) == 0 ? cuactor::runtime::CompletionMode::sequence_word
                                 : cuactor::runtime::CompletionMode::event_query;
}

/// One tiny kernel (bench/common) submitted through the actor; the caller spins on the reply.
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
        [buf = f->scratch](OpContext& ctx) { return tiny_on(buf, ctx); },
        [&done](std::error_code, int) { done.store(true, std::memory_order_release); });
    while (!done.load(std::memory_order_acquire)) {
    }
    samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  report_percentiles(state, samples);
}
BENCHMARK(BM_ActorRoundTrip)->Iterations(20000)->UseRealTime();

/// Interleaved: per iteration one raw launch + cudaStreamSynchronize of the same tiny kernel on a
/// plain stream, then one actor round trip; reports both and their ratios (the anchor).
void BM_ActorVsRawSync(benchmark::State& state) {
  Fixture* f = fixture(mode_arg(state, 0));
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
    auto t0 = Clock::now();
    if (!launch_tiny(*raw_ptr, stream->get()) || cudaStreamSynchronize(stream->get()) != cudaSuccess) {
      state.SkipWithError("raw launch failed");
      return;
    }
    raw.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());

    std::atomic<bool> done{false};
    std::error_code failure;
    t0 = Clock::now();
    f->actor.submit<int>(
        cuactor::runtime::Reads{}, cuactor::runtime::Writes{f->scratch},
        [buf = f->scratch](OpContext& ctx) { return tiny_on(buf, ctx); },
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
  report_actor_vs_raw(state, raw, actor);
}
BENCHMARK(BM_ActorVsRawSync)->Arg(0)->Arg(1)->Iterations(20000)->UseRealTime();

/// A request after an idle spell, as in a service with sporadic requests (argument: microseconds of sleep before each
/// request, untimed): by then the actor's thread, its poller and the completion pool have gone to sleep, and each
/// wake-up they need is on the round trip. Interleaved with the tiny kernel's raw launch + synchronize after the same
/// sleep; p50 and p99 of both and their ratios.
void BM_ActorColdRoundTrip(benchmark::State& state) {
  Fixture* f = fixture();
  auto stream = cuactor::gpu::Stream::create(0);
  if (!f || !stream) {
    state.SkipWithError("no CUDA device");
    return;
  }
  auto raw_ptr = f->scratch.raw_device_ptr();
  if (!raw_ptr) {
    state.SkipWithError("scratch pointer");
    return;
  }
  const auto idle = std::chrono::microseconds(state.range(0));
  std::vector<double> raw, actor;
  for (auto _ : state) {
    state.PauseTiming();
    std::this_thread::sleep_for(idle);
    state.ResumeTiming();
    const auto t0 = Clock::now();
    if (!launch_tiny(*raw_ptr, stream->get()) || cudaStreamSynchronize(stream->get()) != cudaSuccess) {
      state.SkipWithError("raw launch failed");
      return;
    }
    raw.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    state.PauseTiming();
    std::this_thread::sleep_for(idle);
    state.ResumeTiming();
    actor.push_back(spin_round_trip([&](auto h) {
      f->actor.submit<int>(
          cuactor::runtime::Reads{}, cuactor::runtime::Writes{f->scratch},
          [buf = f->scratch](OpContext& ctx) { return tiny_on(buf, ctx); }, std::move(h));
    }));
  }
  if (round_trip_errors.load() != 0) {
    state.SkipWithError("a request failed");
    return;
  }
  report_actor_vs_raw(state, raw, actor);
}
BENCHMARK(BM_ActorColdRoundTrip)->Arg(1000)->Iterations(1000)->UseRealTime();

/// Where an actor round trip's time goes, interleaved with the raw launch + synchronize it is compared
/// with (sequence-word completion). Per iteration: the raw launch and its wait, then for the actor the
/// submit call on the caller's thread, the hand-over to its thread (submit -> the request's function
/// starts), the enqueue (the function's own launch), completion (launch returned -> the handler runs:
/// the marker, the GPU, the poller and the reply hand-off) and delivery (handler -> the caller sees it).
/// Medians of each part, in microseconds.
void BM_ActorRoundTripBreakdown(benchmark::State& state) {
  Fixture* f = fixture();
  if (!f) {
    state.SkipWithError("no CUDA device");
    return;
  }
  auto stream = cuactor::gpu::Stream::create(0);
  auto raw_ptr = f->scratch.raw_device_ptr();
  if (!stream || !raw_ptr) {
    state.SkipWithError("setup failed");
    return;
  }
  std::vector<double> raw_launch, raw_wait, submit_call, hand_over, enqueue, completion, delivery;
  auto us = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  for (auto _ : state) {
    auto t0 = Clock::now();
    const bool launched = launch_tiny(*raw_ptr, stream->get()).has_value();
    const auto t1 = Clock::now();
    if (!launched || cudaStreamSynchronize(stream->get()) != cudaSuccess) {
      state.SkipWithError("raw launch failed");
      return;
    }
    raw_launch.push_back(us(t0, t1));
    raw_wait.push_back(us(t1, Clock::now()));

    std::atomic<bool> done{false};
    std::error_code failure;
    Clock::time_point started, enqueued, handled;
    t0 = Clock::now();
    f->actor.submit<int>(
        cuactor::runtime::Reads{}, cuactor::runtime::Writes{f->scratch},
        [&, buf = f->scratch](OpContext& ctx) -> cuactor::Result<int> {
          started = Clock::now();
          CUACTOR_TRY(tiny_on(buf, ctx));
          enqueued = Clock::now();
          return 0;
        },
        [&](std::error_code ec, int) {
          failure = ec;
          handled = Clock::now();
          done.store(true, std::memory_order_release);
        });
    const auto submitted = Clock::now();
    while (!done.load(std::memory_order_acquire)) {
    }
    const auto seen = Clock::now();
    if (failure) {
      state.SkipWithError("actor request failed");
      return;
    }
    submit_call.push_back(us(t0, submitted));
    hand_over.push_back(us(t0, started));
    enqueue.push_back(us(started, enqueued));
    completion.push_back(us(enqueued, handled));
    delivery.push_back(us(handled, seen));
  }
  auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  state.counters["raw_launch_us"] = median(raw_launch);
  state.counters["raw_wait_us"] = median(raw_wait);
  state.counters["submit_call_us"] = median(submit_call);
  state.counters["hand_over_us"] = median(hand_over);
  state.counters["enqueue_us"] = median(enqueue);
  state.counters["completion_us"] = median(completion);
  state.counters["delivery_us"] = median(delivery);
}
BENCHMARK(BM_ActorRoundTripBreakdown)->Iterations(20000)->UseRealTime();

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
    (void)f->actor.fill(f->scratch, 3.0f, boost::asio::use_future).get();  // the poller just saw work
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
    (void)launch_tiny(*ptr, stream->get());
    (void)cudaLaunchHostFunc(stream->get(), set_flag, &done);
    while (!done.load(std::memory_order_acquire)) {
    }
    samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  (void)stream->synchronize();
  report_percentiles(state, samples);
}
BENCHMARK(BM_RawStreamRoundTrip)->Iterations(20000)->UseRealTime();

/// Cost of one steady_clock::now() (the spinning threads read the clock; on some virtual machines it
/// is a system call).
void BM_SteadyClockNow(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(Clock::now());
}
BENCHMARK(BM_SteadyClockNow);

/// Host time of the stream calls one actor operation is made of, each alone on a raw stream (the
/// breakdown behind the actor's dispatch time): 0 = the tiny kernel's launch, 1 = cudaEventRecord (a write event),
/// 2 = cuStreamWriteValue32 (the completion marker), 3 = a 1-element fill (enqueue_fill, the built-in fill's enqueue).
/// Synchronises every 256 calls.
void BM_StreamCallHostCost(benchmark::State& state) {
  Fixture* f = fixture();
  if (!f) {
    state.SkipWithError("no CUDA device");
    return;
  }
  auto stream = cuactor::gpu::Stream::create(0);
  auto raw_ptr = f->scratch.raw_device_ptr();
  cudaEvent_t event = nullptr;
  void* word = nullptr;
  if (!stream || !raw_ptr || cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess ||
      cudaMallocHost(&word, 64) != cudaSuccess) {
    state.SkipWithError("setup failed");
    return;
  }
  void* word_device = nullptr;
  (void)cudaHostGetDevicePointer(&word_device, word, 0);
  const int which = static_cast<int>(state.range(0));
  std::uint32_t seq = 0;
  std::int64_t calls = 0;
  for (auto _ : state) {
    bool ok = true;
    switch (which) {
      case 0:
        ok = launch_tiny(*raw_ptr, stream->get()).has_value();
        break;
      case 1:
        ok = cudaEventRecord(event, stream->get()) == cudaSuccess;
        break;
      case 3: {
        const float v = 2.0f;
        ok = cuactor::runtime::enqueue_fill(*raw_ptr, 1, &v, sizeof(float), stream->get()).has_value();
        break;
      }
      default:
        ok = cuactor::driver_api().stream_write_value32 != nullptr &&
             cuactor::driver_api().stream_write_value32(stream->get(), reinterpret_cast<CUdeviceptr>(word_device),
                                                        ++seq, 0) == CUDA_SUCCESS;
    }
    if (!ok) {
      state.SkipWithError("stream call failed");
      break;
    }
    if (++calls % 256 == 0) {
      state.PauseTiming();
      (void)cudaStreamSynchronize(stream->get());
      state.ResumeTiming();
    }
  }
  (void)cudaStreamSynchronize(stream->get());
  (void)cudaEventDestroy(event);
  (void)cudaFreeHost(word);
  static constexpr const char* labels[] = {"tiny kernel launch", "cudaEventRecord", "cuStreamWriteValue32",
                                           "1-element fill (enqueue_fill)"};
  state.SetLabel(labels[which]);
}
BENCHMARK(BM_StreamCallHostCost)->Arg(0)->Arg(1)->Arg(2)->Arg(3)->Iterations(20000);

/// The operation a throughput benchmark repeats: the tiny kernel submitted as a request, or the built-in fill of one
/// element (FillCmd).
enum class SmallOp { tiny_kernel = 0, fill = 1 };

/// The same operations per second from one thread onto one plain stream, synchronised at the end: the anchor of the
/// actor's throughput (each actor operation is one such enqueue, made by the actor's one thread).
double raw_ops_per_second(const Fixture& f, SmallOp op, int count) {
  auto stream = cuactor::gpu::Stream::create(0);
  auto scratch = f.scratch.raw_device_ptr();
  auto cell = f.cell.raw_device_ptr();
  if (!stream || !scratch || !cell) return 0;
  const float v = 2.0f;
  const auto t0 = Clock::now();
  for (int i = 0; i < count; ++i) {
    const cuactor::Status st = op == SmallOp::tiny_kernel
                                   ? launch_tiny(*scratch, stream->get())
                                   : cuactor::runtime::enqueue_fill(*cell, 1, &v, sizeof(float), stream->get());
    if (!st) return 0;
  }
  if (!stream->synchronize()) return 0;
  return count / std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Sustained throughput (target >= 250k ops/s): `threads` submitters keep the mailbox busy with small operations
/// (argument 2: 0 = the tiny kernel through submit(), 1 = the built-in fill of one element), backing off near the
/// mailbox bound; items/s = completed replies per second. `raw_ops_per_s` is the same operations from one thread on a
/// plain stream, in the same process (`vs_raw` = actor / raw). Argument 1 is the completion mode.
void BM_ActorThroughput(benchmark::State& state) {
  Fixture* f = fixture(mode_arg(state, 1));
  if (!f) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int threads = static_cast<int>(state.range(0));
  const auto op = static_cast<SmallOp>(state.range(2));
  constexpr int per_thread_ops = 50000;
  std::int64_t total_ops = 0;
  Clock::duration elapsed{};
  const auto before = f->actor.stats();
  for (auto _ : state) {
    const auto t0 = Clock::now();
    std::atomic<int> replies{0}, errors{0}, submitted{0};
    auto reply = [&](std::error_code ec, auto&&...) {
      if (ec) errors.fetch_add(1, std::memory_order_relaxed);
      replies.fetch_add(1, std::memory_order_release);
    };
    std::vector<std::thread> submitters;
    for (int t = 0; t < threads; ++t)
      submitters.emplace_back([&] {
        for (int i = 0; i < per_thread_ops; ++i) {
          if (op == SmallOp::tiny_kernel)
            f->actor.submit<int>(
                cuactor::runtime::Reads{}, cuactor::runtime::Writes{f->scratch},
                [buf = f->scratch](OpContext& ctx) { return tiny_on(buf, ctx); }, reply);
          else
            f->actor.fill(f->cell, 2.0f, reply);
          // Stay under the mailbox bound (1024) so that nothing is rejected.
          const int outstanding = submitted.fetch_add(1, std::memory_order_relaxed) + 1;
          while (outstanding - replies.load(std::memory_order_acquire) > 900) std::this_thread::yield();
        }
      });
    for (auto& s : submitters) s.join();
    while (replies.load(std::memory_order_acquire) < threads * per_thread_ops) std::this_thread::yield();
    if (errors.load() != 0) state.SkipWithError("some requests failed");
    total_ops += threads * per_thread_ops;
    elapsed += Clock::now() - t0;
  }
  state.SetItemsProcessed(total_ops);
  state.SetLabel(op == SmallOp::tiny_kernel ? "tiny kernel" : "1-element fill");
  // The actor thread's share of each operation: validation, leases, the enqueue itself, batching.
  const auto after = f->actor.stats();
  state.counters["dispatch_us_per_op"] =
      static_cast<double>(after.dispatch_ns - before.dispatch_ns) / 1e3 / static_cast<double>(total_ops);
  state.counters["ops_per_batch"] = static_cast<double>(after.completed - before.completed) /
                                    static_cast<double>(std::max<std::uint64_t>(1, after.batches - before.batches));
  const double seconds = std::chrono::duration<double>(elapsed).count();
  const double raw = raw_ops_per_second(*f, op, per_thread_ops);
  state.counters["raw_ops_per_s"] = raw;
  if (raw > 0 && seconds > 0) state.counters["vs_raw"] = static_cast<double>(total_ops) / seconds / raw;
}
BENCHMARK(BM_ActorThroughput)
    ->Args({1, 0, 0})
    ->Args({4, 0, 0})
    ->Args({1, 1, 0})
    ->Args({4, 1, 0})
    ->Args({1, 0, 1})
    ->Args({4, 0, 1})
    ->Iterations(3)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

/// The isolated device of the benchmarks below (a cuactor-worker process), or null without a device.
DeviceActor* isolated_actor() {
  static std::optional<DeviceActor> a = []() -> std::optional<DeviceActor> {
    cuactor::runtime::ActorOptions o;
    o.isolation = cuactor::runtime::Isolation::worker;
    o.worker_path = CUACTOR_WORKER_EXE;
    auto actor = DeviceActor::create(0, o);
    if (!actor) return std::nullopt;
    return std::move(*actor);
  }();
  return a ? &*a : nullptr;
}

/// Isolated mode ([R10], issue 10): a tiny fill through the worker vs the same fill through the
/// in-process actor, interleaved. Target: isolated p50 <= 2x in-process.
void BM_IsolatedVsInProcessRoundTrip(benchmark::State& state) {
  Fixture* f = fixture();
  DeviceActor* iso = isolated_actor();
  if (!f || !iso) {
    state.SkipWithError("no CUDA device (or no cuactor-worker)");
    return;
  }
  auto [ec, iso_scratch] = iso->allocate<int>(1024, boost::asio::use_future).get();
  if (ec) {
    state.SkipWithError("isolated allocate failed");
    return;
  }
  std::vector<double> in_process, isolated;
  for (auto _ : state) {
    in_process.push_back(spin_round_trip([&](auto h) { f->actor.fill(f->scratch, 1.0f, std::move(h)); }));
    isolated.push_back(spin_round_trip([&](auto h) { iso->fill(iso_scratch, 1, std::move(h)); }));
  }
  std::sort(in_process.begin(), in_process.end());
  std::sort(isolated.begin(), isolated.end());
  auto p = [](const std::vector<double>& v, double q) {
    return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
  };
  state.counters["inproc_p50_us"] = p(in_process, 0.5);
  state.counters["isolated_p50_us"] = p(isolated, 0.5);
  state.counters["isolated_p99_us"] = p(isolated, 0.99);
  state.counters["ratio_p50"] = p(isolated, 0.5) / p(in_process, 0.5);
  state.counters["ratio_p99"] = p(isolated, 0.99) / p(in_process, 0.99);
}
BENCHMARK(BM_IsolatedVsInProcessRoundTrip)->Iterations(5000)->UseRealTime();

/// A 64 MiB host -> device copy, interleaved in one loop: the in-process actor from pinned memory (the
/// anchor), isolated from a shared host buffer (allocate_host: no staging, the target's path, >= 80%
/// of the anchor), and isolated from pageable memory (staged through the shared region: one host copy).
void BM_IsolatedCopy64MiB(benchmark::State& state) {
  Fixture* f = fixture();
  DeviceActor* iso = isolated_actor();
  if (!f || !iso) {
    state.SkipWithError("no CUDA device (or no cuactor-worker)");
    return;
  }
  constexpr std::size_t bytes = std::size_t{64} << 20;
  auto [ec1, iso_dst] = iso->allocate<std::byte>(bytes, boost::asio::use_future).get();
  auto [ec2, dst] = f->actor.allocate<std::byte>(bytes, boost::asio::use_future).get();
  auto pinned = cuactor::gpu::PinnedBuffer::allocate(bytes);
  if (ec1 || ec2 || !pinned) {
    state.SkipWithError("allocation failed");
    return;
  }
  auto [ec3, host] = iso->allocate_host(bytes, boost::asio::use_future).get();
  if (ec3) {
    state.SkipWithError("allocate_host failed");
    return;
  }
  std::memset(host->data(), 1, bytes);
  std::shared_ptr<const cuactor::runtime::HostBuffer> shared = host;
  auto src = std::make_shared<const cuactor::gpu::PinnedBuffer>(std::move(*pinned));
  auto pageable = std::make_shared<const std::vector<std::byte>>(bytes, std::byte{1});  // shared: not staged
  double in_process_s = 0, isolated_s = 0, staged_s = 0;
  for (auto _ : state) {
    in_process_s += spin_round_trip([&](auto h) { f->actor.copy_to_device(dst, src, std::move(h)); }) * 1e-6;
    isolated_s += spin_round_trip([&](auto h) { iso->copy_to_device(iso_dst, shared, std::move(h)); }) * 1e-6;
    staged_s += spin_round_trip([&](auto h) { iso->copy_to_device(iso_dst, pageable, std::move(h)); }) * 1e-6;
  }
  if (round_trip_errors.load() != 0) {
    state.SkipWithError("a copy failed");
    return;
  }
  const double n = static_cast<double>(state.iterations()) * static_cast<double>(bytes) / 1e9;
  state.counters["inproc_pinned_GBps"] = n / in_process_s;
  state.counters["isolated_host_buffer_GBps"] = n / isolated_s;
  state.counters["isolated_staged_GBps"] = n / staged_s;
  state.counters["ratio"] = in_process_s / isolated_s;
}
BENCHMARK(BM_IsolatedCopy64MiB)->Iterations(20)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

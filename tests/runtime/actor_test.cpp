// The device actor on a real GPU: operations, tokens, write tracking, leases, queue bounds,
// cancellation, shutdown and concurrency ([R2]-[R5], [R9]).
#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <cmath>
#include <future>
#include <latch>
#include <random>
#include <thread>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/runtime/device_actor.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::runtime {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

/// Result of a request awaited through use_future: the error code (or success) and the value.
template <class R>
std::pair<std::error_code, R> wait(std::future<std::tuple<std::error_code, R>> f) {
  auto [ec, v] = f.get();
  return {ec, std::move(v)};
}

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

class RuntimeActorGpu : public test_support::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto a = DeviceActor::create(0, options());
    ASSERT_TRUE(a.has_value()) << a.error().to_string();
    actor_.emplace(std::move(*a));
  }
  virtual ActorOptions options() { return {}; }

  template <class T>
  GpuRef<T> alloc(std::size_t n) {
    auto [ec, ref] = wait(actor_->allocate<T>(n, asio::use_future));
    EXPECT_FALSE(ec) << ec.message();
    return ref;
  }
  gpu::Library load_test_library() {
    auto lib = gpu::Library::load_file(RUNTIME_TEST_PTX);
    EXPECT_TRUE(lib.has_value()) << lib.error().to_string();
    return std::move(*lib);
  }

  // Parks the actor's thread inside an execute() until release() (returns once it is parked).
  void park() {
    parked_ = std::make_shared<std::promise<void>>();
    auto entered = std::make_shared<std::promise<void>>();
    auto gate = parked_->get_future().share();
    park_done_ = actor_->execute<int>(
        [gate, entered](OpContext&) -> Result<int> {
          entered->set_value();
          gate.wait();
          return 1;
        },
        asio::use_future);
    entered->get_future().wait();
  }
  void release() {
    parked_->set_value();
    EXPECT_EQ(std::get<1>(park_done_.get()), 1);
  }

  std::optional<DeviceActor> actor_;
  std::shared_ptr<std::promise<void>> parked_;
  std::future<std::tuple<std::error_code, int>> park_done_;
};

TEST_F(RuntimeActorGpu, StartsAtGenerationOneWithRealStats) {
  const DeviceStats s = actor_->stats();
  EXPECT_EQ(s.generation, 1u);
  EXPECT_EQ(s.circuit, CircuitState::closed);
  EXPECT_TRUE(s.accepting_ops);
  EXPECT_TRUE(s.memory_known);
  EXPECT_GT(s.total_bytes, 1ull << 30);
  EXPECT_GT(s.free_bytes, 0u);
  EXPECT_LE(s.free_bytes, s.total_bytes);
  EXPECT_EQ(s.queue_depth, 0u);
}

TEST_F(RuntimeActorGpu, PageableCopiesAndFill) {
  constexpr std::size_t n = 100003;
  auto buf = alloc<float>(n);
  ASSERT_EQ(buf.size(), n);
  EXPECT_EQ(buf.generation(), 1u);
  const auto host = random_floats(n, 1);
  auto [ec1, dst] = wait(actor_->copy_to_device(buf, host, asio::use_future));
  ASSERT_FALSE(ec1) << ec1.message();
  auto [ec2, back] = wait(actor_->copy_to_host(buf, asio::use_future));
  ASSERT_FALSE(ec2) << ec2.message();
  EXPECT_EQ(back, host);
  auto [ec3, filled] = wait(actor_->fill(buf, 3.5f, asio::use_future));
  ASSERT_FALSE(ec3) << ec3.message();
  auto [ec4, after] = wait(actor_->copy_to_host(buf, asio::use_future));
  ASSERT_FALSE(ec4);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(after[i], 3.5f) << i;
  // 2- and 8-byte fills.
  auto shorts = alloc<std::uint16_t>(999);
  ASSERT_FALSE(wait(actor_->fill(shorts, std::uint16_t{0xBEEF}, asio::use_future)).first);
  for (auto v : wait(actor_->copy_to_host(shorts, asio::use_future)).second) ASSERT_EQ(v, 0xBEEF);
  auto longs = alloc<std::uint64_t>(77);
  ASSERT_FALSE(wait(actor_->fill(longs, std::uint64_t{0x0123456789abcdefull}, asio::use_future)).first);
  for (auto v : wait(actor_->copy_to_host(longs, asio::use_future)).second) ASSERT_EQ(v, 0x0123456789abcdefull);
}

TEST_F(RuntimeActorGpu, PinnedCopies) {
  constexpr std::size_t n = 4096;
  auto buf = alloc<int>(n);
  auto src = gpu::PinnedBuffer::allocate(n * sizeof(int));
  ASSERT_TRUE(src.has_value());
  auto pinned_src = std::make_shared<gpu::PinnedBuffer>(std::move(*src));
  for (std::size_t i = 0; i < n; ++i) pinned_src->as_span<int>()[i] = static_cast<int>(i * 7 + 1);
  ASSERT_FALSE(
      wait(actor_->copy_to_device(buf, std::shared_ptr<const gpu::PinnedBuffer>(pinned_src), asio::use_future)).first);
  auto dst = gpu::PinnedBuffer::allocate(n * sizeof(int));
  ASSERT_TRUE(dst.has_value());
  auto pinned_dst = std::make_shared<gpu::PinnedBuffer>(std::move(*dst));
  for (auto& v : pinned_dst->as_span<int>()) v = -1;  // poison
  auto [ec, out] = wait(actor_->copy_to_host(buf, pinned_dst, asio::use_future));
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_EQ(out, pinned_dst);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out->as_span<int>()[i], static_cast<int>(i * 7 + 1));
}

TEST_F(RuntimeActorGpu, CopyRejectsOversizedSource) {
  auto buf = alloc<float>(10);
  std::vector<float> big(11, 1.0f);
  auto [ec, r] = wait(actor_->copy_to_device(buf, big, asio::use_future));
  EXPECT_EQ(ec, make_error_code(errc::invalid_argument));
}

TEST_F(RuntimeActorGpu, OutOfMemoryFailsOnlyTheRequest) {
  auto [ec, r] = wait(actor_->allocate<std::byte>(std::size_t{1} << 50, asio::use_future));
  EXPECT_EQ(ec, make_error_code(errc::out_of_memory));
  auto ok_ref = alloc<float>(16);
  EXPECT_EQ(ok_ref.size(), 16u);
  // The next kernel launch on the actor's thread does not report the allocation's error as its own.
  auto [ecf, filled] = wait(actor_->fill(ok_ref, 2.0f, asio::use_future));
  EXPECT_FALSE(ecf) << ecf.message();
  EXPECT_EQ(actor_->stats().circuit, CircuitState::closed);
}

TEST_F(RuntimeActorGpu, LaunchValidatesArgumentsAndMatchesReference) {
  auto lib = std::make_shared<const gpu::Library>(load_test_library());
  CUACTOR_ASSERT_OK_AND_ASSIGN(axpy, lib->kernel("cuactor_rt_axpy"));
  constexpr int n = 10000;
  const auto hx = random_floats(n, 2), hy = random_floats(n, 3);
  auto x = alloc<float>(n), y = alloc<float>(n);
  ASSERT_FALSE(wait(actor_->copy_to_device(x, hx, asio::use_future)).first);
  ASSERT_FALSE(wait(actor_->copy_to_device(y, hy, asio::use_future)).first);
  LaunchShape shape{dim3((n + 255) / 256), dim3(256), 0};
  auto [ec, done] = wait(actor_->launch(lib, axpy, shape, KernelArgs::make(2.5f, in(x), y, n), asio::use_future));
  ASSERT_FALSE(ec) << ec.message();
  auto got = wait(actor_->copy_to_host(y, asio::use_future)).second;
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = 2.5 * double(hx[i]) + double(hy[i]);
  EXPECT_LT(relative_error(got, want), 1e-6);
  EXPECT_EQ(y.last_write_stream(), x.last_write_stream());  // both last written by the actor's stream

  // Wrong argument count and wrong sizes are rejected before launch.
  auto [ec2, d2] = wait(actor_->launch(lib, axpy, shape, KernelArgs::make(2.5f, in(x), y), asio::use_future));
  EXPECT_EQ(ec2, make_error_code(errc::invalid_argument));
  auto [ec3, d3] = wait(actor_->launch(lib, axpy, shape, KernelArgs::make(2.5, in(x), y, n), asio::use_future));
  EXPECT_EQ(ec3, make_error_code(errc::invalid_argument));
  // A GpuRef of another device state is rejected as stale (wrong device / state gone).
  auto other_state = std::make_shared<DeviceState>(5);
  other_state->advance_generation();
  other_state->set_accepting_ops(true);
  GpuRef<float> foreign(
      std::make_shared<DeviceAllocation>(y.allocation()->data(), y.size_bytes(), other_state, nullptr));
  auto [ec4, d4] = wait(actor_->launch(lib, axpy, shape, KernelArgs::make(2.5f, in(x), foreign, n), asio::use_future));
  EXPECT_EQ(ec4, make_error_code(errc::stale_handle));
}

TEST_F(RuntimeActorGpu, OrderedWritersNeverRace) {
  auto lib = std::make_shared<const gpu::Library>(load_test_library());
  CUACTOR_ASSERT_OK_AND_ASSIGN(inc, lib->kernel("cuactor_rt_increment"));
  auto counter = alloc<int>(1);
  ASSERT_FALSE(wait(actor_->fill(counter, 0, asio::use_future)).first);
  constexpr int launches = 1000;  // below the default mailbox bound (1024): none is rejected queue_full
  std::vector<std::future<std::tuple<std::error_code, std::monostate>>> futures;
  for (int i = 0; i < launches; ++i)
    futures.push_back(actor_->launch(lib, inc, LaunchShape{}, KernelArgs::make(counter), asio::use_future));
  for (auto& f : futures) ASSERT_FALSE(wait(std::move(f)).first);
  EXPECT_EQ(wait(actor_->copy_to_host(counter, asio::use_future)).second.at(0), launches);
  EXPECT_EQ(counter.allocation()->lease_count(), 0);  // every lease returned
}

TEST_F(RuntimeActorGpu, WriteOnAnotherStreamIsWaitedForOnTheDevice) {
  auto lib = load_test_library();
  CUACTOR_ASSERT_OK_AND_ASSIGN(spin, lib.kernel("cuactor_rt_spin"));
  CUACTOR_ASSERT_OK_AND_ASSIGN(side, gpu::Stream::create(0));
  constexpr std::size_t n = 1 << 20;
  auto buf = alloc<std::uint8_t>(n);
  ASSERT_FALSE(wait(actor_->fill(buf, std::uint8_t{1}, asio::use_future)).first);
  // The side stream writes 0xAB after ~50 ms of spinning; the actor's read must see it.
  CUACTOR_ASSERT_OK(gpu::launch(spin, gpu::LaunchConfig{dim3(1), dim3(1), 0, side.get()}, 100'000'000ll));
  CUACTOR_ASSERT_OK_AND_ASSIGN(ptr, buf.raw_device_ptr());
  CUACTOR_ASSERT_OK(gpu::memset_async(ptr, 0xAB, n, side.get()));
  CUACTOR_ASSERT_OK(buf.record_write(side.get()));
  EXPECT_EQ(buf.last_write_stream(), side.get());
  auto got = wait(actor_->copy_to_host(buf, asio::use_future)).second;
  ASSERT_EQ(got.size(), n);
  for (std::size_t i = 0; i < n; i += 4097) ASSERT_EQ(got[i], 0xAB) << i;
  EXPECT_EQ(got[n - 1], 0xAB);
  CUACTOR_ASSERT_OK(side.synchronize());
}

TEST_F(RuntimeActorGpu, ExternalLeaseRejectsActorWriters) {
  auto buf = alloc<float>(64);
  {
    CUACTOR_ASSERT_OK_AND_ASSIGN(lease, buf.lease_write());
    EXPECT_EQ(wait(actor_->fill(buf, 1.0f, asio::use_future)).first, make_error_code(errc::invalid_argument));
    EXPECT_EQ(wait(actor_->copy_to_host(buf, asio::use_future)).first, make_error_code(errc::invalid_argument));
  }
  EXPECT_FALSE(wait(actor_->fill(buf, 1.0f, asio::use_future)).first);
}

TEST_F(RuntimeActorGpu, AllTokenKindsOnTheDevice) {
  auto buf = alloc<int>(8);
  // Callback.
  std::promise<std::error_code> cb;
  actor_->fill(buf, 5, [&](std::error_code ec, GpuRef<int>) { cb.set_value(ec); });
  EXPECT_FALSE(cb.get_future().get());
  // Deferred.
  auto deferred = actor_->copy_to_host(buf, asio::deferred);
  auto f = std::move(deferred)(asio::use_future);
  EXPECT_EQ(std::get<1>(f.get()), std::vector<int>(8, 5));
  // co_await.
  asio::io_context io;
  std::vector<int> seen;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto [ec, filled] = co_await actor_->fill(buf, 9, asio::use_awaitable);
        if (ec) co_return;
        auto [ec2, values] = co_await actor_->copy_to_host(buf, asio::use_awaitable);
        seen = std::move(values);
      },
      asio::detached);
  io.run();
  EXPECT_EQ(seen, std::vector<int>(8, 9));
}

TEST_F(RuntimeActorGpu, SubmitExtensionPointKeepsAliveAndTracksWrites) {
  auto buf = alloc<float>(256);
  std::weak_ptr<const int> watched;
  auto [ec, value] = wait(actor_->submit<int>(
      Reads{}, Writes{buf},
      [&watched, buf](OpContext& ctx) -> Result<int> {
        EXPECT_EQ(ctx.device(), 0);
        EXPECT_NE(ctx.cublas(), nullptr);
        EXPECT_FALSE(ctx.capturing());
        auto token = std::make_shared<const int>(7);
        watched = token;
        ctx.keep_alive(token);
        CUACTOR_TRY(enqueue_fill(buf.allocation()->data(), buf.size(), &*token, sizeof(float), ctx.stream()));
        return 11;
      },
      asio::use_future));
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(value, 11);
  EXPECT_TRUE(buf.last_write_stream().has_value());
  // The keep-alive object is released after the reply, on the handler's executor.
  for (int i = 0; i < 200 && !watched.expired(); ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(watched.expired());
}

TEST_F(RuntimeActorGpu, SubmitErrorIsReturned) {
  auto [ec, v] = wait(actor_->submit<int>(
      {}, {}, [](OpContext&) -> Result<int> { return fail(errc::unsupported, "fp4 on sm_90"); }, asio::use_future));
  EXPECT_EQ(ec, make_error_code(errc::unsupported));
}

class RuntimeSmallMailboxGpu : public RuntimeActorGpu {
 protected:
  ActorOptions options() override {
    ActorOptions o;
    o.mailbox_capacity = 4;
    return o;
  }
};

TEST_F(RuntimeSmallMailboxGpu, QueueFullForEveryRequestKind) {
  auto lib = std::make_shared<const gpu::Library>(load_test_library());
  CUACTOR_ASSERT_OK_AND_ASSIGN(inc, lib->kernel("cuactor_rt_increment"));
  auto buf = alloc<int>(16);
  park();
  std::vector<std::future<std::tuple<std::error_code, GpuRef<int>>>> queued;
  for (int i = 0; i < 4; ++i) queued.push_back(actor_->fill(buf, i, asio::use_future));
  EXPECT_EQ(actor_->stats().queue_depth, 4u);
  const auto full = make_error_code(errc::queue_full);
  EXPECT_EQ(wait(actor_->allocate<int>(4, asio::use_future)).first, full);
  EXPECT_EQ(wait(actor_->fill(buf, 1, asio::use_future)).first, full);
  EXPECT_EQ(wait(actor_->copy_to_device(buf, std::vector<int>(16, 1), asio::use_future)).first, full);
  EXPECT_EQ(wait(actor_->copy_to_host(buf, asio::use_future)).first, full);
  EXPECT_EQ(wait(actor_->launch(lib, inc, LaunchShape{}, KernelArgs::make(buf), asio::use_future)).first, full);
  EXPECT_EQ(wait(actor_->submit<int>(
                     {}, {}, [](OpContext&) -> Result<int> { return 1; }, asio::use_future))
                .first,
            full);
  EXPECT_EQ(wait(actor_->execute<int>([](OpContext&) -> Result<int> { return 1; }, asio::use_future)).first, full);
  EXPECT_EQ(actor_->stats().rejected_full, 7u);
  release();
  for (auto& f : queued) EXPECT_FALSE(wait(std::move(f)).first);  // the queued ones were not dropped
  EXPECT_EQ(wait(actor_->copy_to_host(buf, asio::use_future)).second, std::vector<int>(16, 3));  // FIFO: last fill wins
}

TEST_F(RuntimeActorGpu, CancelledWhileQueued) {
  auto buf = alloc<int>(4);
  park();
  asio::cancellation_signal signal;
  std::promise<std::error_code> got;
  actor_->fill(
      buf, 1, asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, GpuRef<int>) { got.set_value(ec); }));
  signal.emit(asio::cancellation_type::all);
  EXPECT_EQ(got.get_future().get(), make_error_code(errc::cancelled));
  release();
}

TEST_F(RuntimeActorGpu, ShutdownAnswersQueuedAndMakesHandlesStale) {
  auto buf = alloc<int>(4);
  park();
  std::vector<std::future<std::tuple<std::error_code, GpuRef<int>>>> queued;
  for (int i = 0; i < 10; ++i) queued.push_back(actor_->fill(buf, i, asio::use_future));
  std::thread stopper([&] { actor_->shutdown(); });
  while (actor_->stats().accepting_ops) std::this_thread::sleep_for(100us);
  release();  // the parked execute itself completes normally
  stopper.join();
  for (auto& f : queued) EXPECT_EQ(wait(std::move(f)).first, make_error_code(errc::device_shutting_down));
  auto st = buf.access();
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error(), errc::stale_handle);
  EXPECT_NE(st.error().message().find("shutting down"), std::string::npos);
  EXPECT_EQ(wait(actor_->fill(buf, 1, asio::use_future)).first, make_error_code(errc::device_shutting_down));
  actor_->shutdown();  // idempotent
}

TEST_F(RuntimeActorGpu, ManyThreadsNoReplyLostOrDoubled) {
  constexpr int threads = 8, per_thread = 1500;
  std::vector<std::atomic<int>> replies(threads * per_thread);
  std::atomic<int> total{0}, errors{0};
  auto bufs = std::vector<GpuRef<int>>();
  for (int t = 0; t < threads; ++t) bufs.push_back(alloc<int>(32));
  std::vector<std::thread> submitters;
  for (int t = 0; t < threads; ++t)
    submitters.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const int id = t * per_thread + i;
        auto on_reply = [&, id](std::error_code ec, int v) {
          if (ec || v != id) errors.fetch_add(1);
          replies[static_cast<std::size_t>(id)].fetch_add(1);
          total.fetch_add(1);
        };
        if (i % 3 == 0) {
          actor_->submit<int>(
              Reads{}, Writes{bufs[static_cast<std::size_t>(t)]},
              [id, buf = bufs[static_cast<std::size_t>(t)]](OpContext& ctx) -> Result<int> {
                CUACTOR_TRY(enqueue_fill(buf.allocation()->data(), buf.size(), &id, sizeof(int), ctx.stream()));
                return id;
              },
              on_reply);
        } else {
          actor_->submit<int>(
              {}, {}, [id](OpContext&) -> Result<int> { return id; }, on_reply);
        }
        // Back off when the mailbox is near its bound so that no request is rejected.
        while (actor_->stats().queue_depth > 900) std::this_thread::yield();
      }
    });
  for (auto& s : submitters) s.join();
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (total.load() < threads * per_thread && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  ASSERT_EQ(total.load(), threads * per_thread) << "replies lost";
  for (auto& r : replies) ASSERT_EQ(r.load(), 1);
  EXPECT_EQ(errors.load(), 0);
  std::this_thread::sleep_for(10ms);
  EXPECT_EQ(total.load(), threads * per_thread) << "replies doubled";
  const auto s = actor_->stats();
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.queue_depth, 0u);
}

}  // namespace
}  // namespace cuactor::runtime

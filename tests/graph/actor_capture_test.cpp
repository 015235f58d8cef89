// Capture and replay through the device actor: operations submitted while the actor's stream captures
// are recorded, their GpuRefs auto-registered in the pool, and the graph is bound to the generation.
#include "cuactor/graph/actor_capture.hpp"

#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::graph {
namespace {

namespace asio = boost::asio;

template <class R>
std::pair<std::error_code, R> wait(std::future<std::tuple<std::error_code, R>> f) {
  auto [ec, v] = f.get();
  return {ec, std::move(v)};
}

std::vector<float> random_floats(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

class GraphActorTest : public cuactor::test_support::GpuTest {
 protected:
  void TearDown() override {
    if (IsSkipped()) return;
    auto released = wait_for_released_pools(std::chrono::seconds(10));
    EXPECT_TRUE(released.has_value()) << released.error().to_string();
  }
};

TEST_F(GraphActorTest, GraphActorOpsAreRecordedAutoRegisteredAndReplayed) {
  constexpr int m = 64, k = 48, n = 32;
  std::mt19937 rng(7);
  CUACTOR_ASSERT_OK_AND_ASSIGN(actor, runtime::DeviceActor::create(0));
  auto [ea, a] = wait(actor.allocate<float>(std::size_t{m} * k, asio::use_future));
  auto [eb, b] = wait(actor.allocate<float>(std::size_t{k} * n, asio::use_future));
  auto [ec, c] = wait(actor.allocate<float>(std::size_t{m} * n, asio::use_future));
  ASSERT_FALSE(ea || eb || ec);
  const auto b_host = random_floats(b.size(), rng);
  ASSERT_FALSE(wait(actor.copy_to_device(b, std::span<const float>(b_host), asio::use_future)).first);

  CUACTOR_ASSERT_OK_AND_ASSIGN(capture, ActorCapture::begin(actor, CaptureMode::global));
  ASSERT_TRUE(capture.active());
  // A cuBLAS call through the actor's extension point: recorded like any other operation.
  auto [eg, gemm_c] = wait(actor.submit<runtime::GpuRef<float>>(
      runtime::Reads{a, b}, runtime::Writes{c},
      // Init-captures: clang 14 (the sanitize preset) cannot capture structured bindings directly.
      [a = a, b = b, c = c](runtime::OpContext& ctx) -> Result<runtime::GpuRef<float>> {
        const float one = 1.0f, zero = 0.0f;
        CUACTOR_TRY(gpu::check(cublasSgemm(ctx.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, *a.raw_device_ptr(),
                                           m, *b.raw_device_ptr(), k, &zero, *c.raw_device_ptr(), m),
                               "cublasSgemm"));
        return c;
      },
      asio::use_future));  // replies once recorded
  ASSERT_FALSE(eg) << eg.message();
  CUACTOR_ASSERT_OK_AND_ASSIGN(graph, capture.end_capture());
  EXPECT_FALSE(capture.active());
  EXPECT_TRUE(graph.has_pool());
  EXPECT_GE(graph.pool_buffer_count(), 3u);  // a, b, c registered automatically
  ASSERT_EQ(graph.buffers_written().size(), 1u);
  EXPECT_EQ(graph.buffers_written()[0], c.allocation());
  EXPECT_EQ(graph.buffers_read().size(), 2u);
  EXPECT_EQ(graph.generation(), std::optional<std::uint64_t>(actor.state()->generation()));

  auto shared_graph = std::make_shared<CapturedGraph>(std::move(graph));
  for (int round = 0; round < 3; ++round) {
    const auto a_host = random_floats(a.size(), rng);
    ASSERT_FALSE(wait(actor.copy_to_device(a, std::span<const float>(a_host), asio::use_future)).first);
    ASSERT_FALSE(wait(actor.fill(c, -1.0e30f, asio::use_future)).first);  // poison
    auto [er, done] = wait(replay(actor, shared_graph, asio::use_future));
    ASSERT_FALSE(er) << er.message();
    auto [eh, got] = wait(actor.copy_to_host(c, asio::use_future));
    ASSERT_FALSE(eh);
    double num = 0, den = 0;
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double want = 0;
        for (int p = 0; p < k; ++p) want += double{a_host[i + p * m]} * double{b_host[p + j * k]};
        const double d = got[i + j * m] - want;
        num += d * d;
        den += want * want;
      }
    EXPECT_LT(std::sqrt(num / den), 1e-5) << "replay " << round;
  }
  EXPECT_EQ(shared_graph->num_replays(), 3u);

  // After the actor shut down, its graphs are stale.
  actor.shutdown();
  CUACTOR_ASSERT_OK_AND_ASSIGN(stream, gpu::Stream::create(0));
  auto stale = shared_graph->launch(stream.get());
  ASSERT_FALSE(stale.has_value());
  EXPECT_TRUE(stale.error() == errc::stale_handle) << stale.error().to_string();
  shared_graph.reset();
}

TEST_F(GraphActorTest, GraphActorCaptureInvalidatedAndAbandoned) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(actor, runtime::DeviceActor::create(0));
  {
    CUACTOR_ASSERT_OK_AND_ASSIGN(capture, ActorCapture::begin(actor, CaptureMode::relaxed));
    CUACTOR_ASSERT_OK(capture.abandon());
    EXPECT_FALSE(capture.active());
  }
  // The actor still works eagerly after an abandoned capture.
  auto [ea, a] = wait(actor.allocate<int>(256, asio::use_future));
  ASSERT_FALSE(ea);
  ASSERT_FALSE(wait(actor.fill(a, 7, asio::use_future)).first);
  auto [eh, host] = wait(actor.copy_to_host(a, asio::use_future));
  ASSERT_FALSE(eh);
  EXPECT_EQ(host.front(), 7);
  EXPECT_EQ(host.back(), 7);
}

// A GpuRef whose last reference goes away while the actor's stream captures must not record its free
// (or the wait on its last write) into the graph: the free waits until the capture has ended.
TEST_F(GraphActorTest, BufferDroppedDuringCaptureIsFreedAfterTheCapture) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(actor, runtime::DeviceActor::create(0));
  auto [ea, doomed] = wait(actor.allocate<float>(std::size_t{1} << 20, asio::use_future));
  auto [eb, kept] = wait(actor.allocate<float>(1024, asio::use_future));
  ASSERT_FALSE(ea || eb);
  ASSERT_FALSE(wait(actor.fill(doomed, 1.0f, asio::use_future)).first);  // gives it a last-write event

  CUACTOR_ASSERT_OK_AND_ASSIGN(capture, ActorCapture::begin(actor, CaptureMode::global));
  doomed = {};  // the last reference: its free is deferred, not captured
  auto [ef, filled] = wait(actor.fill(kept, 2.0f, asio::use_future));
  ASSERT_FALSE(ef) << ef.message();
  CUACTOR_ASSERT_OK_AND_ASSIGN(graph, capture.end_capture());  // fails if a free had been recorded
  EXPECT_EQ(graph.buffers_written().size(), 1u);

  auto shared = std::make_shared<CapturedGraph>(std::move(graph));
  auto [er, done] = wait(replay(actor, shared, asio::use_future));
  ASSERT_FALSE(er) << er.message();
  auto [eh, host] = wait(actor.copy_to_host(filled, asio::use_future));
  ASSERT_FALSE(eh) << eh.message();
  ASSERT_EQ(host.size(), 1024u);
  for (float v : host) ASSERT_EQ(v, 2.0f);
  // A later allocation works and the device is healthy: the deferred free ran outside the capture.
  auto [el, later] = wait(actor.allocate<float>(std::size_t{1} << 20, asio::use_future));
  ASSERT_FALSE(el) << el.message();
  EXPECT_EQ(actor.stats().circuit, runtime::CircuitState::closed);
  EXPECT_EQ(actor.stats().failed, 0u);
}

// Scratch memory an operation allocates and drops while the stream captures belongs to the graph: its
// free is recorded with its allocation, so the graph can be replayed again and again.
TEST_F(GraphActorTest, ScratchAllocatedInsideTheCaptureIsFreedInsideAndReplaysRepeat) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(actor, runtime::DeviceActor::create(0));
  auto [ea, out] = wait(actor.allocate<float>(256, asio::use_future));
  ASSERT_FALSE(ea);
  CUACTOR_ASSERT_OK_AND_ASSIGN(capture, ActorCapture::begin(actor, CaptureMode::global));
  auto [es, recorded] = wait(actor.submit<int>(
      runtime::Reads{}, runtime::Writes{out},
      [out = out](runtime::OpContext& ctx) -> Result<int> {
        auto scratch = ctx.allocate_bytes(std::size_t{1} << 20);
        if (!scratch) return fail(scratch.error());
        CUACTOR_TRY(gpu::memset_async((*scratch)->data(), 0, (*scratch)->bytes(), ctx.stream()));
        CUACTOR_TRY(gpu::copy_async(out.allocation()->data(), (*scratch)->data(), 256 * sizeof(float), ctx.stream()));
        scratch->reset();  // freed in stream order inside the capture
        return 1;
      },
      asio::use_future));
  ASSERT_FALSE(es) << es.message();
  CUACTOR_ASSERT_OK_AND_ASSIGN(graph, capture.end_capture());
  auto shared = std::make_shared<CapturedGraph>(std::move(graph));
  for (int replay_index = 0; replay_index < 3; ++replay_index) {
    ASSERT_FALSE(wait(actor.fill(out, 7.0f, asio::use_future)).first);
    auto [er, done] = wait(replay(actor, shared, asio::use_future));
    ASSERT_FALSE(er) << "replay " << replay_index << ": " << er.message();
    auto [eh, host] = wait(actor.copy_to_host(out, asio::use_future));
    ASSERT_FALSE(eh) << eh.message();
    for (float v : host) ASSERT_EQ(v, 0.0f) << "replay " << replay_index;
  }
}

}  // namespace
}  // namespace cuactor::graph

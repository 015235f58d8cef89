// GPU tests of capture, replay, keep-alive pools, DeviceScalar, exec update and invalidation.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/graph/capture.hpp"
#include "cuactor/graph/device_scalar.hpp"
#include "graph/graph_kernels.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::graph {
namespace {

using test_support::launch_axpb;
using test_support::launch_increment;
using test_support::launch_write_at_position;

constexpr float kPoison = -12345.0f;

/// Relative L2 error of `got` against the fp64 reference `want`.
double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

std::vector<float> random_vector(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

class GraphGpuTest : public cuactor::test_support::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto s = gpu::Stream::create(0);
    ASSERT_TRUE(s.has_value()) << s.error().to_string();
    stream_ = std::move(*s);
    auto p = gpu::MemPool::device_default(0);
    ASSERT_TRUE(p.has_value()) << p.error().to_string();
    pool_ = std::move(*p);
  }
  void TearDown() override {
    if (!stream_) return;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    // Every graph of the test is gone: CUDA must release their pools and the reclaimer free them.
    auto released = wait_for_released_pools(std::chrono::seconds(10));
    EXPECT_TRUE(released.has_value()) << released.error().to_string();
  }

  /// A device buffer of n floats holding `values`.
  gpu::DeviceBuffer upload(const std::vector<float>& values) {
    auto b = gpu::DeviceBuffer::allocate(pool_, values.size() * sizeof(float), stream_.get());
    EXPECT_TRUE(b.has_value());
    EXPECT_TRUE(gpu::copy_async(b->data(), values.data(), values.size() * sizeof(float), stream_.get()).has_value());
    EXPECT_TRUE(stream_.synchronize().has_value());
    return std::move(*b);
  }
  std::vector<float> download(const void* device, std::size_t n, cudaStream_t stream) {
    std::vector<float> out(n);
    EXPECT_TRUE(gpu::copy_async(out.data(), device, n * sizeof(float), stream).has_value());
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    return out;
  }
  void poison(void* device, std::size_t n) {
    std::vector<float> p(n, kPoison);
    ASSERT_TRUE(gpu::copy_async(device, p.data(), n * sizeof(float), stream_.get()).has_value());
  }

  gpu::Stream stream_;
  gpu::MemPool pool_;
  std::mt19937 rng_{1234};
};

TEST_F(GraphGpuTest, GraphChainOfKernelsReplaysWithMutatedInputs) {
  constexpr int n = 3000;
  auto x = upload(random_vector(n, rng_));
  auto y = upload(std::vector<float>(n, kPoison));
  auto z = upload(std::vector<float>(n, kPoison));
  CUACTOR_ASSERT_OK_AND_ASSIGN(session, begin_capture(stream_.get(), CaptureMode::global));
  ASSERT_EQ(launch_axpb(y.data_as<float>(), x.data_as<float>(), 2.0f, 1.0f, n, stream_.get()), cudaSuccess);
  ASSERT_EQ(launch_axpb(z.data_as<float>(), y.data_as<float>(), 3.0f, -2.0f, n, stream_.get()), cudaSuccess);
  ASSERT_EQ(launch_increment(z.data_as<float>(), n, stream_.get()), cudaSuccess);
  CUACTOR_ASSERT_OK_AND_ASSIGN(status, session.status());
  EXPECT_EQ(status, CaptureStatus::active);
  CUACTOR_ASSERT_OK_AND_ASSIGN(graph, session.end_capture());
  EXPECT_FALSE(graph.has_pool());
  EXPECT_EQ(graph.pool_buffer_count(), 0u);
  CUACTOR_ASSERT_OK_AND_ASSIGN(nodes, graph.node_count());
  EXPECT_EQ(nodes, 3u);
  // Nothing ran during capture: z is still poisoned.
  EXPECT_EQ(download(z.data(), n, stream_.get())[0], kPoison);

  for (int replay = 0; replay < 4; ++replay) {
    const auto input = random_vector(n, rng_);
    CUACTOR_ASSERT_OK(gpu::copy_async(x.data(), input.data(), n * sizeof(float), stream_.get()));
    poison(z.data(), n);
    CUACTOR_ASSERT_OK(graph.launch(stream_.get()));
    const auto got = download(z.data(), n, stream_.get());
    std::vector<double> want(n);
    for (int i = 0; i < n; ++i) want[i] = 3.0 * (2.0 * input[i] + 1.0) - 2.0 + 1.0;
    EXPECT_LT(relative_error(got, want), 1e-6) << "replay " << replay;
  }
  EXPECT_EQ(graph.num_replays(), 4u);
}

TEST_F(GraphGpuTest, GraphGemmWithCublasWorkspaceFromCapturePool) {
  constexpr int m = 96, k = 64, n = 80;
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasSetStream(handle, stream_.get()), CUBLAS_STATUS_SUCCESS);
  auto a = upload(random_vector(std::size_t{m} * k, rng_));
  const auto b_host = random_vector(std::size_t{k} * n, rng_);
  auto b = upload(b_host);

  CUACTOR_ASSERT_OK_AND_ASSIGN(session, begin_capture(stream_.get(), CaptureMode::global));
  // Workspace and output come from the graph-private pool, allocated while the capture runs.
  constexpr std::size_t workspace_bytes = 4u << 20;
  CUACTOR_ASSERT_OK_AND_ASSIGN(workspace, session.allocate(workspace_bytes));
  CUACTOR_ASSERT_OK_AND_ASSIGN(c_raw, session.allocate(std::size_t{m} * n * sizeof(float)));
  auto* c = static_cast<float*>(c_raw);
  ASSERT_EQ(cublasSetWorkspace(handle, workspace, workspace_bytes), CUBLAS_STATUS_SUCCESS);
  const float alpha = 1.0f, beta = 0.0f;
  ASSERT_EQ(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a.data_as<float>(), m, b.data_as<float>(), k,
                        &beta, c, m),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(launch_increment(c, m * n, stream_.get()), cudaSuccess);
  CUACTOR_ASSERT_OK_AND_ASSIGN(graph, session.end_capture());
  ASSERT_TRUE(graph.has_pool());
  EXPECT_EQ(graph.pool_buffer_count(), 2u);
  CUACTOR_ASSERT_OK_AND_ASSIGN(used, graph.pool()->private_used_bytes());
  EXPECT_GE(used, workspace_bytes + std::size_t{m} * n * sizeof(float));

  for (int replay = 0; replay < 3; ++replay) {
    const auto a_host = random_vector(std::size_t{m} * k, rng_);
    CUACTOR_ASSERT_OK(gpu::copy_async(a.data(), a_host.data(), a_host.size() * sizeof(float), stream_.get()));
    poison(c, std::size_t{m} * n);
    CUACTOR_ASSERT_OK(graph.launch(stream_.get()));
    const auto got = download(c, std::size_t{m} * n, stream_.get());
    std::vector<double> want(std::size_t{m} * n);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double acc = 0;
        for (int p = 0; p < k; ++p) acc += double{a_host[i + p * m]} * double{b_host[p + j * k]};
        want[i + j * m] = acc + 1.0;
      }
    EXPECT_LT(relative_error(got, want), 1e-5) << "replay " << replay;
  }
  EXPECT_EQ(cublasDestroy(handle), CUBLAS_STATUS_SUCCESS);
}

TEST_F(GraphGpuTest, GraphDeviceScalarDrivesPositionOnEveryReplay) {
  constexpr int slots = 12;
  auto out = upload(std::vector<float>(slots, kPoison));
  CUACTOR_ASSERT_OK_AND_ASSIGN(position, DeviceScalar<int>::create(0, 0, stream_.get()));
  CUACTOR_ASSERT_OK_AND_ASSIGN(session, begin_capture(stream_.get(), CaptureMode::global));
  ASSERT_EQ(launch_write_at_position(out.data_as<float>(), position.device_ptr(), 100.0f, stream_.get()), cudaSuccess);
  // Setting the scalar inside the capture would bake a pinned read into the graph: rejected.
  auto inside = position.set(3, stream_.get());
  ASSERT_FALSE(inside.has_value());
  EXPECT_TRUE(inside.error() == errc::invalid_argument);
  CUACTOR_ASSERT_OK(session.keep_alive(position.storage(), position.device_ptr(), sizeof(int)));
  CUACTOR_ASSERT_OK_AND_ASSIGN(graph, session.end_capture());
  EXPECT_EQ(graph.pool_buffer_count(), 1u);

  // Queue every update and replay back to back (more than the staging ring), then check each one.
  for (int pos = 0; pos < slots; ++pos) {
    CUACTOR_ASSERT_OK(position.set(pos, stream_.get()));
    CUACTOR_ASSERT_OK(graph.launch(stream_.get()));
  }
  auto got = download(out.data(), slots, stream_.get());
  for (int pos = 0; pos < slots; ++pos) EXPECT_EQ(got[pos], 100.0f + static_cast<float>(pos)) << "position " << pos;
  // And one replay at a time, reading the result after each.
  for (int round = 0; round < 20; ++round) {
    const int pos = (round * 7) % slots;
    poison(out.data(), slots);
    CUACTOR_ASSERT_OK(position.set(pos, stream_.get()));
    CUACTOR_ASSERT_OK(graph.launch(stream_.get()));
    got = download(out.data(), slots, stream_.get());
    for (int i = 0; i < slots; ++i)
      EXPECT_EQ(got[i], i == pos ? 100.0f + static_cast<float>(pos) : kPoison) << "round " << round << " slot " << i;
  }
  EXPECT_EQ(position.value(), (19 * 7) % slots);
}

TEST_F(GraphGpuTest, GraphPoolKeepsReleasedBuffersUntilLastGraphGoes) {
  constexpr int n = 1 << 16;
  CUACTOR_ASSERT_OK_AND_ASSIGN(mine, gpu::MemPool::create(0, 0));
  const auto input = random_vector(n, rng_);
  CUACTOR_ASSERT_OK_AND_ASSIGN(x_buf, gpu::DeviceBuffer::allocate(mine, n * sizeof(float), stream_.get()));
  CUACTOR_ASSERT_OK_AND_ASSIGN(y_buf, gpu::DeviceBuffer::allocate(mine, n * sizeof(float), stream_.get()));
  CUACTOR_ASSERT_OK(gpu::copy_async(x_buf.data(), input.data(), n * sizeof(float), stream_.get()));
  CUACTOR_ASSERT_OK(stream_.synchronize());
  CUACTOR_ASSERT_OK_AND_ASSIGN(held_before, mine.used_bytes());
  EXPECT_GE(held_before, 2u * n * sizeof(float));

  CUACTOR_ASSERT_OK_AND_ASSIGN(shared, CapturePool::create(0));
  CUACTOR_ASSERT_OK_AND_ASSIGN(x_ptr, shared->adopt(std::move(x_buf)));
  CUACTOR_ASSERT_OK_AND_ASSIGN(y_ptr, shared->adopt(std::move(y_buf)));
  auto* x = static_cast<float*>(x_ptr);
  auto* y = static_cast<float*>(y_ptr);

  CUACTOR_ASSERT_OK_AND_ASSIGN(s1, begin_capture(stream_.get(), CaptureMode::global));
  ASSERT_EQ(launch_axpb(y, x, 2.0f, 1.0f, n, stream_.get()), cudaSuccess);
  CUACTOR_ASSERT_OK_AND_ASSIGN(g1, s1.end_capture_with_pool(shared));
  CUACTOR_ASSERT_OK_AND_ASSIGN(s2, begin_capture(stream_.get(), CaptureMode::global));
  ASSERT_EQ(launch_axpb(y, x, -1.0f, 0.5f, n, stream_.get()), cudaSuccess);
  CUACTOR_ASSERT_OK_AND_ASSIGN(g2, s2.end_capture_with_pool(g1.pool()));
  EXPECT_EQ(g1.pool(), g2.pool());
  EXPECT_EQ(g2.pool_buffer_count(), 2u);

  // The caller lets go of everything but the graphs.
  std::weak_ptr<CapturePool> watch = shared;
  shared.reset();
  auto g1_box = std::make_unique<CapturedGraph>(std::move(g1));

  poison(y, n);
  CUACTOR_ASSERT_OK(g1_box->launch(stream_.get()));
  auto got = download(y, n, stream_.get());
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = 2.0 * input[i] + 1.0;
  EXPECT_LT(relative_error(got, want), 1e-6);

  // Destroy the first graph right after queueing a replay: CUDA keeps the pool until it finished.
  CUACTOR_ASSERT_OK(g1_box->launch(stream_.get()));
  g1_box.reset();
  CUACTOR_ASSERT_OK(stream_.synchronize());
  CUACTOR_ASSERT_OK(drain_released_pools());
  EXPECT_FALSE(watch.expired()) << "the second graph still holds the pool";
  CUACTOR_ASSERT_OK_AND_ASSIGN(held_mid, mine.used_bytes());
  EXPECT_EQ(held_mid, held_before);

  poison(y, n);
  CUACTOR_ASSERT_OK(g2.launch(stream_.get()));
  got = download(y, n, stream_.get());
  for (int i = 0; i < n; ++i) want[i] = -1.0 * input[i] + 0.5;
  EXPECT_LT(relative_error(got, want), 1e-6);

  { CapturedGraph last = std::move(g2); }
  CUACTOR_ASSERT_OK(wait_for_released_pools(std::chrono::seconds(10)));
  EXPECT_TRUE(watch.expired());
  CUACTOR_ASSERT_OK_AND_ASSIGN(held_after, mine.used_bytes());
  EXPECT_EQ(held_after, 0u) << "buffers must be freed once the last graph is gone";
}

TEST_F(GraphGpuTest, GraphReplaysOnAnotherStreamAndUploads) {
  constexpr int n = 4096;
  const auto input = random_vector(n, rng_);
  auto x = upload(input);
  auto y = upload(std::vector<float>(n, kPoison));
  CUACTOR_ASSERT_OK_AND_ASSIGN(session, begin_capture(stream_.get(), CaptureMode::relaxed));
  ASSERT_EQ(launch_axpb(y.data_as<float>(), x.data_as<float>(), 4.0f, -3.0f, n, stream_.get()), cudaSuccess);
  CUACTOR_ASSERT_OK_AND_ASSIGN(graph, session.end_capture());
  CUACTOR_ASSERT_OK_AND_ASSIGN(other, gpu::Stream::create(0));
  EXPECT_FALSE(graph.is_uploaded());
  CUACTOR_ASSERT_OK(graph.upload(other.get()));
  EXPECT_TRUE(graph.is_uploaded());
  CUACTOR_ASSERT_OK(graph.upload(other.get()));  // no-op
  CUACTOR_ASSERT_OK(graph.launch(other.get()));
  const auto got = download(y.data(), n, other.get());
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = 4.0 * input[i] - 3.0;
  EXPECT_LT(relative_error(got, want), 1e-6);
  EXPECT_EQ(graph.num_replays(), 1u);
  x.set_free_stream(stream_.get());
  y.set_free_stream(stream_.get());
}

TEST_F(GraphGpuTest, GraphExecUpdateInPlaceThenTopologyChange) {
  constexpr int n = 2048;
  const auto input = random_vector(n, rng_);
  auto x = upload(input);
  auto y = upload(std::vector<float>(n, kPoison));
  auto capture = [&](float a, bool extra) -> Result<CaptureSession> {
    auto s = begin_capture(stream_.get(), CaptureMode::global);
    if (!s) return s;
    if (launch_axpb(y.data_as<float>(), x.data_as<float>(), a, 0.0f, n, stream_.get()) != cudaSuccess)
      return fail(errc::internal, "launch");
    if (extra && launch_increment(y.data_as<float>(), n, stream_.get()) != cudaSuccess)
      return fail(errc::internal, "launch");
    return s;
  };
  auto check = [&](double a, double b) {
    const auto got = download(y.data(), n, stream_.get());
    std::vector<double> want(n);
    for (int i = 0; i < n; ++i) want[i] = a * input[i] + b;
    EXPECT_LT(relative_error(got, want), 1e-6) << "a=" << a << " b=" << b;
  };
  CUACTOR_ASSERT_OK_AND_ASSIGN(first, capture(2.0f, false));
  CUACTOR_ASSERT_OK_AND_ASSIGN(graph, first.end_capture());
  CUACTOR_ASSERT_OK(graph.launch(stream_.get()));
  check(2.0, 0.0);

  CUACTOR_ASSERT_OK_AND_ASSIGN(same_shape, capture(5.0f, false));
  CUACTOR_ASSERT_OK_AND_ASSIGN(update, graph.update_from(std::move(same_shape)));
  EXPECT_TRUE(update.in_place);
  EXPECT_FALSE(update.topology_changed);
  poison(y.data(), n);
  CUACTOR_ASSERT_OK(graph.launch(stream_.get()));
  check(5.0, 0.0);

  CUACTOR_ASSERT_OK_AND_ASSIGN(bigger, capture(-1.0f, true));
  CUACTOR_ASSERT_OK_AND_ASSIGN(update2, graph.update_from(std::move(bigger)));
  EXPECT_FALSE(update2.in_place);
  EXPECT_TRUE(update2.topology_changed);
  EXPECT_EQ(update2.cuda_result, cudaGraphExecUpdateErrorTopologyChanged);
  poison(y.data(), n);
  CUACTOR_ASSERT_OK(graph.launch(stream_.get()));
  check(-1.0, 1.0);
  EXPECT_EQ(graph.num_replays(), 3u);
}

TEST_F(GraphGpuTest, GraphInPlaceUpdateReleasesThePreviousCapturesPool) {
  constexpr int n = 4096;
  const auto input = random_vector(n, rng_);
  auto x = upload(input);
  // Each capture writes an output allocated from its own pool while it runs.
  auto capture = [&](float a, float** out) -> Result<CaptureSession> {
    auto s = begin_capture(stream_.get(), CaptureMode::global);
    if (!s) return s;
    auto o = s->allocate(n * sizeof(float));
    if (!o) return fail(o.error());
    *out = static_cast<float*>(*o);
    if (launch_axpb(*out, x.data_as<float>(), a, 0.0f, n, stream_.get()) != cudaSuccess)
      return fail(errc::internal, "launch");
    return s;
  };
  float* out1 = nullptr;
  float* out2 = nullptr;
  CUACTOR_ASSERT_OK_AND_ASSIGN(s1, capture(3.0f, &out1));
  CUACTOR_ASSERT_OK_AND_ASSIGN(graph, s1.end_capture());
  std::weak_ptr<CapturePool> first_pool = graph.pool();
  CUACTOR_ASSERT_OK(graph.launch(stream_.get()));
  CUACTOR_ASSERT_OK_AND_ASSIGN(s2, capture(-2.0f, &out2));
  CUACTOR_ASSERT_OK_AND_ASSIGN(update, graph.update_from(std::move(s2)));
  ASSERT_TRUE(update.in_place);
  EXPECT_NE(graph.pool(), first_pool.lock());
  poison(out2, n);
  CUACTOR_ASSERT_OK(graph.launch(stream_.get()));
  const auto got = download(out2, n, stream_.get());
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = -2.0 * input[i];
  EXPECT_LT(relative_error(got, want), 1e-6);
  // The exec now holds the second capture's pool only: the first one goes once its launch finished.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!first_pool.expired() && std::chrono::steady_clock::now() < deadline) {
    CUACTOR_ASSERT_OK(drain_released_pools());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(first_pool.expired()) << "an in-place update must release the previous capture's pool";
}

TEST_F(GraphGpuTest, GraphDirectApiAutoRegistersGpuRefsAndBindsGeneration) {
  constexpr int n = 512;
  const auto input = random_vector(n, rng_);
  auto x = upload(input);
  auto y = upload(std::vector<float>(n, kPoison));
  auto state = std::make_shared<runtime::DeviceState>(0);
  state->advance_generation();
  state->set_accepting_ops(true);
  // Caller-owned memory viewed through GpuRefs (null owner: the runtime never frees it).
  runtime::GpuRef<float> x_ref(std::make_shared<runtime::DeviceAllocation>(x.data(), x.size(), state, nullptr));
  runtime::GpuRef<float> y_ref(std::make_shared<runtime::DeviceAllocation>(y.data(), y.size(), state, nullptr));
  CUACTOR_ASSERT_OK_AND_ASSIGN(not_capturing, keep_alive_if_capturing(stream_.get(), x_ref, BufferUse::read));
  EXPECT_FALSE(not_capturing);

  CUACTOR_ASSERT_OK_AND_ASSIGN(session, begin_capture(stream_.get(), CaptureMode::global));
  EXPECT_TRUE(is_capturing_session(stream_.get()));
  // What an operation does for each buffer it enqueues work on: register it with the capture.
  CUACTOR_ASSERT_OK_AND_ASSIGN(read_new, keep_alive_if_capturing(stream_.get(), x_ref, BufferUse::read));
  EXPECT_TRUE(read_new);
  CUACTOR_ASSERT_OK(keep_alive_if_capturing(stream_.get(), y_ref, BufferUse::write));
  CUACTOR_ASSERT_OK(keep_alive_if_capturing(stream_.get(), y_ref, BufferUse::read));  // stays "written"
  ASSERT_EQ(launch_axpb(y.data_as<float>(), x.data_as<float>(), 0.5f, 2.0f, n, stream_.get()), cudaSuccess);
  CUACTOR_ASSERT_OK_AND_ASSIGN(graph, session.end_capture());
  EXPECT_FALSE(is_capturing_session(stream_.get()));
  EXPECT_EQ(graph.pool_buffer_count(), 2u);
  ASSERT_EQ(graph.buffers_read().size(), 1u);
  EXPECT_EQ(graph.buffers_read()[0], x_ref.allocation());
  ASSERT_EQ(graph.buffers_written().size(), 1u);
  EXPECT_EQ(graph.buffers_written()[0], y_ref.allocation());
  EXPECT_EQ(graph.generation(), std::optional<std::uint64_t>(1));
  CUACTOR_ASSERT_OK(graph.launch(stream_.get()));
  const auto got = download(y.data(), n, stream_.get());
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = 0.5 * input[i] + 2.0;
  EXPECT_LT(relative_error(got, want), 1e-6);

  state->advance_generation();
  auto stale = graph.launch(stream_.get());
  ASSERT_FALSE(stale.has_value());
  EXPECT_TRUE(stale.error() == errc::stale_handle);
  // A capture refuses a GpuRef of an older generation.
  CUACTOR_ASSERT_OK_AND_ASSIGN(again, begin_capture(stream_.get(), CaptureMode::global));
  auto old = keep_alive_if_capturing(stream_.get(), x_ref, BufferUse::read);
  ASSERT_FALSE(old.has_value());
  EXPECT_TRUE(old.error() == errc::stale_handle) << old.error().to_string();
  CUACTOR_ASSERT_OK(again.abandon());
}

TEST_F(GraphGpuTest, GraphIllegalCallInvalidatesCaptureAndStreamRecovers) {
  constexpr int n = 1024;
  const auto input = random_vector(n, rng_);
  auto x = upload(input);
  auto y = upload(std::vector<float>(n, kPoison));
  for (CaptureMode mode : {CaptureMode::global, CaptureMode::per_thread}) {
    SCOPED_TRACE(gpu::to_string(mode));
    CUACTOR_ASSERT_OK_AND_ASSIGN(session, begin_capture(stream_.get(), mode));
    ASSERT_EQ(launch_axpb(y.data_as<float>(), x.data_as<float>(), 1.0f, 1.0f, n, stream_.get()), cudaSuccess);
    // Synchronising a capturing stream is illegal in every mode but relaxed.
    EXPECT_NE(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    CUACTOR_ASSERT_OK_AND_ASSIGN(status, session.status());
    EXPECT_EQ(status, CaptureStatus::invalidated);
    auto ended = session.end_capture();
    ASSERT_FALSE(ended.has_value());
    EXPECT_TRUE(ended.error() == errc::capture_invalidated) << ended.error().to_string();
    EXPECT_FALSE(session.active());
    // The stream works again, eagerly.
    CUACTOR_ASSERT_OK_AND_ASSIGN(capturing, stream_.is_capturing());
    EXPECT_FALSE(capturing);
    poison(y.data(), n);
    ASSERT_EQ(launch_axpb(y.data_as<float>(), x.data_as<float>(), 1.0f, 1.0f, n, stream_.get()), cudaSuccess);
    const auto got = download(y.data(), n, stream_.get());
    std::vector<double> want(n);
    for (int i = 0; i < n; ++i) want[i] = input[i] + 1.0;
    EXPECT_LT(relative_error(got, want), 1e-6);
  }
  // An allocation through cudaMalloc during a global capture invalidates it too.
  CUACTOR_ASSERT_OK_AND_ASSIGN(session, begin_capture(stream_.get(), CaptureMode::global));
  void* raw = nullptr;
  const cudaError_t illegal = cudaMalloc(&raw, 1024);
  EXPECT_NE(illegal, cudaSuccess);
  auto ended = session.end_capture();
  if (illegal == cudaSuccess) (void)cudaFree(raw);
  ASSERT_FALSE(ended.has_value());
  EXPECT_TRUE(ended.error() == errc::capture_invalidated);
  // Abandoning an active capture leaves the stream usable as well.
  {
    CUACTOR_ASSERT_OK_AND_ASSIGN(dropped, begin_capture(stream_.get(), CaptureMode::global));
    ASSERT_EQ(launch_increment(y.data_as<float>(), n, stream_.get()), cudaSuccess);
  }
  CUACTOR_ASSERT_OK_AND_ASSIGN(capturing, stream_.is_capturing());
  EXPECT_FALSE(capturing);
  CUACTOR_ASSERT_OK(stream_.synchronize());
}

TEST_F(GraphGpuTest, GraphTwoThreadsCaptureIndependentlyInThreadLocalMode) {
  constexpr int n = 8192;
  constexpr int kThreads = 2;
  std::barrier both_capturing(kThreads + 1), may_end(kThreads + 1);
  std::vector<std::vector<float>> results(kThreads);
  std::vector<std::vector<float>> inputs = {random_vector(n, rng_), random_vector(n, rng_)};
  std::vector<std::string> errors(kThreads);
  auto worker = [&](int t) {
    auto fail_with = [&](const std::string& what) {
      errors[t] = what;
      both_capturing.arrive_and_drop();
      may_end.arrive_and_drop();
    };
    auto stream = gpu::Stream::create(0);
    if (!stream) return fail_with(stream.error().to_string());
    // Inputs are placed before the capture; the intermediate is allocated while it runs.
    auto pool = CapturePool::create(0);
    if (!pool) return fail_with(pool.error().to_string());
    auto x = (*pool)->allocate(n * sizeof(float));
    auto y = (*pool)->allocate(n * sizeof(float));
    if (!x || !y) return fail_with("allocation before capture failed");
    if (!gpu::copy_async(*x, inputs[t].data(), n * sizeof(float), stream->get()) || !stream->synchronize())
      return fail_with("copy");
    auto session = begin_capture(stream->get(), CaptureMode::per_thread, *pool);
    if (!session) return fail_with(session.error().to_string());
    auto z = session->allocate(n * sizeof(float));
    if (!z) return fail_with("allocation during capture failed: " + z.error().to_string());
    if (launch_axpb(static_cast<float*>(*z), static_cast<float*>(*x), static_cast<float>(t + 2), 1.0f, n,
                    stream->get()) != cudaSuccess ||
        launch_axpb(static_cast<float*>(*y), static_cast<float*>(*z), 1.0f, 0.0f, n, stream->get()) != cudaSuccess)
      return fail_with("launch");
    both_capturing.arrive_and_wait();
    may_end.arrive_and_wait();
    auto graph = session->end_capture();
    if (!graph) {
      errors[t] = graph.error().to_string();
      return;
    }
    if (graph->pool_buffer_count() != 3) errors[t] = "pool should keep x, y and z";
    results[t].assign(n, kPoison);
    if (!graph->launch(stream->get()) || !gpu::copy_async(results[t].data(), *y, n * sizeof(float), stream->get()) ||
        !stream->synchronize())
      errors[t] = "replay failed";
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  both_capturing.arrive_and_wait();
  // A third thread (global mode, its default) makes an unsafe call while both capture: thread-local
  // captures ignore other threads, so neither is invalidated.
  void* raw = nullptr;
  EXPECT_EQ(cudaMalloc(&raw, 4096), cudaSuccess);
  may_end.arrive_and_wait();
  for (auto& th : threads) th.join();
  EXPECT_EQ(cudaFree(raw), cudaSuccess);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
    std::vector<double> want(n);
    for (int i = 0; i < n; ++i) want[i] = (t + 2.0) * inputs[t][i] + 1.0;
    EXPECT_LT(relative_error(results[t], want), 1e-6) << "thread " << t;
  }
}

TEST_F(GraphGpuTest, GraphStaleGenerationIsRejected) {
  constexpr int n = 256;
  auto x = upload(random_vector(n, rng_));
  auto y = upload(std::vector<float>(n, kPoison));
  auto state = std::make_shared<runtime::DeviceState>(0);
  state->advance_generation();
  state->set_accepting_ops(true);
  CUACTOR_ASSERT_OK_AND_ASSIGN(session, begin_capture(stream_.get(), CaptureMode::global));
  CUACTOR_ASSERT_OK(session.bind_device_state(state));
  ASSERT_EQ(launch_axpb(y.data_as<float>(), x.data_as<float>(), 1.0f, 0.0f, n, stream_.get()), cudaSuccess);
  CUACTOR_ASSERT_OK_AND_ASSIGN(graph, session.end_capture());
  EXPECT_EQ(graph.generation(), std::optional<std::uint64_t>(1));
  CUACTOR_ASSERT_OK(graph.launch(stream_.get()));
  state->advance_generation();  // the context was rebuilt
  auto stale = graph.launch(stream_.get());
  ASSERT_FALSE(stale.has_value());
  EXPECT_TRUE(stale.error() == errc::stale_handle) << stale.error().to_string();
  EXPECT_EQ(graph.num_replays(), 1u);
  auto upload_stale = graph.upload(stream_.get());
  EXPECT_FALSE(upload_stale.has_value());
  CUACTOR_ASSERT_OK(stream_.synchronize());
}

TEST_F(GraphGpuTest, GraphWritesDot) {
  constexpr int n = 64;
  auto x = upload(random_vector(n, rng_));
  CUACTOR_ASSERT_OK_AND_ASSIGN(session, begin_capture(stream_.get(), CaptureMode::global));
  ASSERT_EQ(launch_increment(x.data_as<float>(), n, stream_.get()), cudaSuccess);
  CUACTOR_ASSERT_OK_AND_ASSIGN(graph, session.end_capture());
  const std::string path = ::testing::TempDir() + "cuactor_graph_test.dot";
  CUACTOR_ASSERT_OK(graph.write_dot(path, true));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("digraph"), std::string::npos);
  EXPECT_NE(text.str().find("increment_kernel"), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace cuactor::graph

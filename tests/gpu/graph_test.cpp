#include "cuactor/gpu/graph.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::gpu {
namespace {

using CudaGraphTest = cuactor::test_support::GpuTest;

/// Captures "fill `bytes` of `dst` with `value`" (and, with `twice`, a second fill) on `stream`.
Result<Graph> capture_fill(cudaStream_t stream, void* dst, int value, std::size_t bytes, bool twice) {
  CUACTOR_TRY(begin_stream_capture(stream, CaptureMode::global));
  CUACTOR_TRY(memset_async(dst, value, bytes, stream));
  if (twice) CUACTOR_TRY(memset_async(dst, value + 1, bytes / 2, stream));
  return end_stream_capture(stream);
}

TEST_F(CudaGraphTest, GraphCapturesInstantiatesLaunchesAndUpdates) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(stream, Stream::create(0));
  CUACTOR_ASSERT_OK_AND_ASSIGN(pool, MemPool::device_default(0));
  constexpr std::size_t n = 1 << 16;
  CUACTOR_ASSERT_OK_AND_ASSIGN(buf, DeviceBuffer::allocate(pool, n, stream.get()));
  CUACTOR_ASSERT_OK(memset_async(buf.data(), 0x11, n, stream.get()));
  CUACTOR_ASSERT_OK_AND_ASSIGN(graph, capture_fill(stream.get(), buf.data(), 0x5a, n, false));
  CUACTOR_ASSERT_OK_AND_ASSIGN(nodes, graph.node_count());
  EXPECT_EQ(nodes, 1u);
  CUACTOR_ASSERT_OK_AND_ASSIGN(exec, GraphExec::instantiate(graph));
  CUACTOR_ASSERT_OK(exec.upload(stream.get()));
  CUACTOR_ASSERT_OK(exec.launch(stream.get()));
  std::vector<unsigned char> host(n, 0);
  CUACTOR_ASSERT_OK(copy_async(host.data(), buf.data(), n, stream.get()));
  CUACTOR_ASSERT_OK(stream.synchronize());
  EXPECT_EQ(host.front(), 0x5a);
  EXPECT_EQ(host.back(), 0x5a);

  // Same topology, new value: updated in place.
  CUACTOR_ASSERT_OK_AND_ASSIGN(same, capture_fill(stream.get(), buf.data(), 0x22, n, false));
  CUACTOR_ASSERT_OK_AND_ASSIGN(outcome, exec.update(same));
  EXPECT_TRUE(outcome.updated);
  CUACTOR_ASSERT_OK(exec.launch(stream.get()));
  CUACTOR_ASSERT_OK(copy_async(host.data(), buf.data(), n, stream.get()));
  CUACTOR_ASSERT_OK(stream.synchronize());
  EXPECT_EQ(host[n / 2], 0x22);

  // Another node: refused, reported as a topology change, exec unchanged.
  CUACTOR_ASSERT_OK_AND_ASSIGN(bigger, capture_fill(stream.get(), buf.data(), 0x40, n, true));
  CUACTOR_ASSERT_OK_AND_ASSIGN(refused, exec.update(bigger));
  EXPECT_FALSE(refused.updated);
  EXPECT_TRUE(refused.topology_changed);
  EXPECT_EQ(refused.result, cudaGraphExecUpdateErrorTopologyChanged);
  CUACTOR_ASSERT_OK(memset_async(buf.data(), 0, n, stream.get()));
  CUACTOR_ASSERT_OK(exec.launch(stream.get()));
  CUACTOR_ASSERT_OK(copy_async(host.data(), buf.data(), n, stream.get()));
  CUACTOR_ASSERT_OK(stream.synchronize());
  EXPECT_EQ(host[0], 0x22);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(CudaGraphTest, GraphInvalidatedCaptureEndsAndStreamRecovers) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(stream, Stream::create(0));
  CUACTOR_ASSERT_OK(begin_stream_capture(stream.get(), CaptureMode::global));
  auto again = begin_stream_capture(stream.get(), CaptureMode::global);
  ASSERT_FALSE(again.has_value());
  EXPECT_TRUE(again.error() == errc::invalid_argument);
  CUACTOR_ASSERT_OK_AND_ASSIGN(active, capture_state(stream.get()));
  EXPECT_EQ(active.status, CaptureStatus::active);
  EXPECT_NE(active.id, 0u);
  EXPECT_NE(cudaStreamSynchronize(stream.get()), cudaSuccess);  // illegal while capturing
  CUACTOR_ASSERT_OK_AND_ASSIGN(broken, capture_state(stream.get()));
  EXPECT_EQ(broken.status, CaptureStatus::invalidated);
  auto g = end_stream_capture(stream.get());
  ASSERT_FALSE(g.has_value());
  EXPECT_TRUE(g.error() == errc::capture_invalidated);
  CUACTOR_ASSERT_OK_AND_ASSIGN(after, capture_state(stream.get()));
  EXPECT_EQ(after.status, CaptureStatus::none);
  CUACTOR_ASSERT_OK(stream.synchronize());
}

TEST_F(CudaGraphTest, GraphRelaxedThreadModeAllowsUnsafeCallsDuringGlobalCapture) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(stream, Stream::create(0));
  CUACTOR_ASSERT_OK(begin_stream_capture(stream.get(), CaptureMode::global));
  void* p = nullptr;
  {
    const ScopedCaptureMode relaxed(CaptureMode::relaxed);
    EXPECT_EQ(cudaMalloc(&p, 256), cudaSuccess);
  }
  CUACTOR_ASSERT_OK_AND_ASSIGN(state, capture_state(stream.get()));
  EXPECT_EQ(state.status, CaptureStatus::active);
  CUACTOR_ASSERT_OK_AND_ASSIGN(g, end_stream_capture(stream.get()));
  EXPECT_TRUE(static_cast<bool>(g));
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

std::atomic<int> destroyed{0};
void count_destroy(void* payload) {
  destroyed.fetch_add(*static_cast<int*>(payload));
}

TEST_F(CudaGraphTest, GraphUserObjectLivesAsLongAsGraphAndExec) {
  static int weight = 1;
  destroyed = 0;
  CUACTOR_ASSERT_OK_AND_ASSIGN(graph, Graph::create());
  CUACTOR_ASSERT_OK_AND_ASSIGN(object, UserObject::create(&weight, &count_destroy));
  CUACTOR_ASSERT_OK(object.move_into(graph));
  EXPECT_FALSE(object);
  CUACTOR_ASSERT_OK_AND_ASSIGN(stream, Stream::create(0));
  CUACTOR_ASSERT_OK_AND_ASSIGN(exec, GraphExec::instantiate(graph));
  CUACTOR_ASSERT_OK(exec.launch(stream.get()));
  graph = Graph();  // the exec still holds a reference
  CUACTOR_ASSERT_OK(stream.synchronize());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(destroyed.load(), 0);
  exec = GraphExec();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (destroyed.load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(destroyed.load(), 1);
  auto empty = UserObject::create(&weight, nullptr);
  ASSERT_FALSE(empty.has_value());
  EXPECT_TRUE(empty.error() == errc::invalid_argument);
}

TEST_F(CudaGraphTest, GraphDotExport) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(graph, Graph::create());
  const std::string path = ::testing::TempDir() + "cuactor_cuda_graph.dot";
  CUACTOR_ASSERT_OK(graph.write_dot(path));
  std::remove(path.c_str());
  Graph none;
  EXPECT_FALSE(none.write_dot(path).has_value());
  EXPECT_FALSE(none.node_count().has_value());
}

}  // namespace
}  // namespace cuactor::gpu

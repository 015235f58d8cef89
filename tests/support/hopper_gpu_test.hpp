/// @file
/// Test support: the base fixture of GPU tests of sm_90a-only kernels (epilogue trees, swiglu).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::test_support {

/// Device 0's properties, a stream and the device's default pool; skips, naming the device, where
/// device 0 is not sm_90a (and like GpuTest where there is no device).
class HopperGpuTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto props = gpu::device_properties(0);
    ASSERT_TRUE(props.has_value()) << props.error().to_string();
    props_ = *props;
    if (props_.arch != GpuArch{9, 0, true})
      GTEST_SKIP() << "these kernels run on sm_90a; this device is " << props_.arch.name();
    auto stream = gpu::Stream::create(0);
    ASSERT_TRUE(stream.has_value()) << stream.error().to_string();
    stream_ = std::move(*stream);
    auto pool = gpu::MemPool::device_default(0);
    ASSERT_TRUE(pool.has_value()) << pool.error().to_string();
    pool_ = std::move(*pool);
  }

  /// `bytes` (at least 256) of device memory from the pool, ordered on stream_.
  Result<gpu::DeviceBuffer> alloc(std::size_t bytes) {
    return gpu::DeviceBuffer::allocate(pool_, std::max<std::size_t>(bytes, 256), stream_.get());
  }
  /// A buffer holding `bytes` (copy enqueued on stream_).
  Result<gpu::DeviceBuffer> upload(const std::vector<std::uint8_t>& bytes) {
    auto buf = alloc(bytes.size());
    if (!buf) return buf;
    CUACTOR_TRY(gpu::copy_async(buf->data(), bytes.data(), bytes.size(), stream_.get()));
    return buf;
  }
  /// The first `bytes` of `buf`, after stream_'s work so far.
  Result<std::vector<std::uint8_t>> download(const gpu::DeviceBuffer& buf, std::size_t bytes) {
    std::vector<std::uint8_t> host(bytes);
    CUACTOR_TRY(gpu::copy_async(host.data(), buf.data(), bytes, stream_.get()));
    CUACTOR_TRY(stream_.synchronize());
    return host;
  }

  /// The life of device-sized groups ([K6]): for routings[0], writes the cumulative end rows to
  /// `offsets`, poisons `out` (0xff bytes: NaN in every float type), runs `run` and calls
  /// `check(rows, "eager")`; then captures `run` once and, for every further routing, routes, replays
  /// the graph and checks: one captured graph must serve every routing.
  void run_eager_then_replayed(const std::vector<std::vector<int>>& routings, std::int32_t* offsets,
                               gpu::DeviceBuffer& out, const std::function<Status(cudaStream_t)>& run,
                               const std::function<void(const std::vector<int>&, const std::string&)>& check) {
    const cudaStream_t s = stream_.get();
    auto route = [&](const std::vector<int>& rows) -> Status {
      std::vector<std::int32_t> ends(rows.size());
      int total = 0;
      for (std::size_t e = 0; e < rows.size(); ++e) ends[e] = total += rows[e];
      CUACTOR_TRY(gpu::copy_async(offsets, ends.data(), ends.size() * sizeof(std::int32_t), s));
      return gpu::memset_async(out.data(), 0xff, out.size(), s);
    };
    CUACTOR_ASSERT_OK(route(routings[0]));
    CUACTOR_ASSERT_OK(run(s));
    check(routings[0], "eager");
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CUACTOR_ASSERT_OK(gpu::check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "begin capture"));
    const Status captured = run(s);
    CUACTOR_ASSERT_OK(gpu::check(cudaStreamEndCapture(s, &graph), "end capture"));
    if (!captured) cudaGraphDestroy(graph);
    CUACTOR_ASSERT_OK(captured);
    const Status instantiated = gpu::check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    cudaGraphDestroy(graph);
    CUACTOR_ASSERT_OK(instantiated);
    for (std::size_t r = 1; r < routings.size(); ++r) {
      const Status routed = route(routings[r]);
      const Status launched = routed ? gpu::check(cudaGraphLaunch(exec, s), "graph launch") : routed;
      if (!launched) {
        cudaGraphExecDestroy(exec);
        CUACTOR_ASSERT_OK(launched);
      }
      check(routings[r], "replay of routing " + std::to_string(r));
    }
    cudaGraphExecDestroy(exec);
  }

  gpu::DeviceProperties props_;
  gpu::Stream stream_;
  gpu::MemPool pool_;
};

}  // namespace cuactor::test_support

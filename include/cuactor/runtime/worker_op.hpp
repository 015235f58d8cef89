/// @file
/// Worker operations ([R10]): the isolated worker's extension point. A layer above the runtime makes a
/// request run in an isolated worker by encoding its arguments into a WorkerOpCmd (commands.hpp) with
/// runtime::wire::Writer, and by registering a handler for the same id in the worker, which decodes
/// them and does on the worker's stream what the in-process closure does on the actor's.
///
/// Handler ids by layer (each layer owns its range, so ids never collide):
///   0x0100-0x01ff  graph    (capture and replay held in the worker)
///   0x0200-0x02ff  kernels  (dense GEMM, grouped GEMM, convolution)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "cuactor/core/expected.hpp"

namespace cuactor::runtime {

class OpContext;

/// Ids of the worker operations of the layers above the runtime.
namespace worker_ops {
inline constexpr std::uint16_t capture_begin = 0x0100;              ///< graph: begin capturing the worker's stream.
inline constexpr std::uint16_t capture_end = 0x0101;                ///< graph: end it; replies the graph's id.
inline constexpr std::uint16_t capture_abandon = 0x0102;            ///< graph: end it and discard the graph.
inline constexpr std::uint16_t graph_replay = 0x0103;               ///< graph: replay a held graph.
inline constexpr std::uint16_t graph_drop = 0x0104;                 ///< graph: release a held graph.
inline constexpr std::uint16_t dense_gemm = 0x0200;                 ///< kernels: D = alpha A B + beta C.
inline constexpr std::uint16_t grouped_gemm = 0x0201;               ///< kernels: grouped GEMM, rows known on the host.
inline constexpr std::uint16_t grouped_gemm_device_sized = 0x0202;  ///< kernels: rows read from device memory.
inline constexpr std::uint16_t conv = 0x0203;                       ///< kernels: conv2d fprop / dgrad / wgrad.
}  // namespace worker_ops

/// A buffer operand as a worker handler sees it: the start of the worker's allocation and its size.
struct WorkerOpBuffer {
  void* data = nullptr;
  std::size_t bytes = 0;
};

/// Runs one worker operation on the worker actor's thread: enqueues its work on ctx.stream() (the
/// buffers were validated and ordered like any request's) and returns the reply bytes, sent once that
/// work finished. Errors name the operation, the value and the rule.
using WorkerOpHandler = std::function<Result<std::vector<std::byte>>(OpContext& ctx, std::span<const std::byte> payload,
                                                                     std::span<const WorkerOpBuffer> buffers)>;

}  // namespace cuactor::runtime

/// @file
/// Stream capture ([G1], [G5]) and replayable captured graphs ([G3]).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuactor/core/expected.hpp"
#include "cuactor/gpu/graph.hpp"
#include "cuactor/graph/capture_pool.hpp"
#include "cuactor/runtime/device_state.hpp"
#include "cuactor/runtime/gpu_ref.hpp"

namespace cuactor::graph {

using gpu::CaptureMode;
using gpu::CaptureStatus;

/// The device incarnation a graph was captured in: a graph whose generation is no longer the
/// device's current one refers to memory of a dead context and must not be launched.
struct GenerationStamp {
  std::weak_ptr<runtime::DeviceState> state;  ///< The device's state; unset when no state was bound.
  std::uint64_t generation = 0;               ///< Generation at capture time.
  int device = -1;                            ///< The state's device.
  bool bound = false;                         ///< True when a device state was bound to the capture.

  /// `stale_handle` naming `what` and the reason when the state is gone, the device stopped
  /// accepting operations, or the generation moved on; ok when unbound or current.
  Status check(std::string_view what) const;
};

namespace detail {
struct CaptureCore;
}  // namespace detail

/// How a captured operation uses a buffer: replays through a device actor order and track it so.
enum class BufferUse {
  read,   ///< Only read.
  write,  ///< Written (and possibly read).
};

class CapturedGraph;

/// What `CapturedGraph::update_from` did.
struct GraphUpdate {
  bool in_place = false;          ///< cudaGraphExecUpdate took the new capture's parameters; else re-instantiated.
  bool topology_changed = false;  ///< Nodes, edges or node types differed (why the update was not in place).
  cudaGraphExecUpdateResult cuda_result = cudaGraphExecUpdateSuccess;  ///< CUDA's verdict on the update.
};

/// A capture in progress on one stream ([G1]). While it is active every operation enqueued on the
/// stream (through cuactor's direct API or a device actor) is recorded, not run. Operations that use
/// buffers register them with the session (automatically for GpuRefs, see keep_alive_if_capturing),
/// and memory needed during capture comes from the session's pool. Destroying an active session ends
/// the capture and discards it. Move-only; end it on the thread that began it unless the mode is
/// relaxed.
class CaptureSession {
 public:
  /// Begins capture on `stream` (non-null; its device is read from CUDA) in `mode`. `pool`, when given, serves
  /// allocations and auto-registration and is attached by end_capture(); otherwise a private pool is made the first
  /// time one is needed.
  static Result<CaptureSession> begin(cudaStream_t stream, CaptureMode mode,
                                      std::shared_ptr<CapturePool> pool = nullptr);

  CaptureSession(CaptureSession&&) noexcept;
  CaptureSession& operator=(CaptureSession&&) noexcept;
  CaptureSession(const CaptureSession&) = delete;
  CaptureSession& operator=(const CaptureSession&) = delete;
  ~CaptureSession();

  /// The capturing stream.
  [[nodiscard]] cudaStream_t stream() const noexcept;
  /// The mode it captures in.
  [[nodiscard]] CaptureMode mode() const noexcept;
  /// The stream's device.
  [[nodiscard]] int device() const noexcept;
  /// True until the capture was ended (by end_capture, end_capture_with_pool or abandon).
  [[nodiscard]] bool active() const noexcept;
  /// CUDA's view of the capture: active, or already invalidated by an illegal call ([G5]).
  Result<CaptureStatus> status() const;

  /// The session's pool, made on first use when none was given.
  Result<std::shared_ptr<CapturePool>> pool();
  /// Keeps `owner` alive for the graph being captured (manual registration).
  Result<bool> keep_alive(std::shared_ptr<void> owner, const void* address, std::size_t bytes);
  /// Keeps the allocation behind `ref` alive, binds the capture to the ref's device generation and
  /// remembers how the graph uses it.
  template <class T>
  Result<bool> keep_alive(const runtime::GpuRef<T>& ref, BufferUse use = BufferUse::write) {
    if (!ref.allocation()) return fail(errc::invalid_argument, "CaptureSession::keep_alive: empty GpuRef");
    return keep_alive_allocation(ref.allocation(), use);
  }
  /// keep_alive(ref, use) for an allocation without its typed GpuRef (e.g. the buffers an actor
  /// operation recorded into this capture).
  Result<bool> keep_alive_allocation(const std::shared_ptr<runtime::DeviceAllocation>& allocation, BufferUse use);
  /// Device memory from the session's pool (safe during capture in every mode, see CapturePool).
  Result<void*> allocate(std::size_t bytes);
  /// Binds the capture to `state`'s current generation: launching the graph after the device's
  /// context was rebuilt (or its state is gone) fails with `stale_handle`.
  Status bind_device_state(const std::shared_ptr<runtime::DeviceState>& state);

  /// Ends the capture and instantiates the graph, attaching the session's pool when anything was
  /// registered or allocated. `capture_invalidated` when an illegal call broke the capture ([G5]); the
  /// stream is usable again either way.
  Result<CapturedGraph> end_capture();
  /// Ends the capture into `pool` (shared with other graphs): everything the session registered or
  /// allocated moves into it, and the graph keeps it alive.
  Result<CapturedGraph> end_capture_with_pool(std::shared_ptr<CapturePool> pool);
  /// Ends the capture and discards what was recorded; the stream is usable afterwards.
  Status abandon();

 private:
  friend class CapturedGraph;
  explicit CaptureSession(std::shared_ptr<detail::CaptureCore> core) : core_(std::move(core)) {}
  /// Ends the capture: the raw graph, its pool (user object already retained) and its generation.
  struct Ended;
  Result<Ended> finish(std::shared_ptr<CapturePool> into);

  std::shared_ptr<detail::CaptureCore> core_;
};

/// Begins a capture on `stream` in `mode` ([G1]); see CaptureSession::begin.
Result<CaptureSession> begin_capture(cudaStream_t stream, CaptureMode mode,
                                     std::shared_ptr<CapturePool> pool = nullptr);

/// True when `stream` is capturing under a CaptureSession. Every cuactor operation enqueued for a
/// stream calls this (or keep_alive_if_capturing) to learn that it is being recorded.
[[nodiscard]] bool is_capturing_session(cudaStream_t stream);
/// When `stream` captures under a CaptureSession, keeps `owner` alive in that capture's pool and
/// returns true; returns false (doing nothing) otherwise. The hook operations use for [G2]'s automatic
/// registration.
Result<bool> keep_alive_if_capturing(cudaStream_t stream, std::shared_ptr<void> owner, const void* address,
                                     std::size_t bytes);
/// The GpuRef form: also binds the capture to the ref's device generation (`stale_handle` when the
/// allocation is of an older generation) and remembers how the graph uses the buffer.
Result<bool> keep_alive_if_capturing(cudaStream_t stream, const std::shared_ptr<runtime::DeviceAllocation>& allocation,
                                     BufferUse use = BufferUse::write);
/// Typed convenience for GpuRef<T>.
template <class T>
Result<bool> keep_alive_if_capturing(cudaStream_t stream, const runtime::GpuRef<T>& ref,
                                     BufferUse use = BufferUse::write) {
  if (!ref.allocation()) return fail(errc::invalid_argument, "keep_alive_if_capturing: empty GpuRef");
  return keep_alive_if_capturing(stream, ref.allocation(), use);
}

/// An instantiated capture that can be replayed on any stream of its device ([G3]). Holds its pool
/// (host-side and through a CUDA user object retained by the graph). Move-only; not thread-safe (like
/// the cudaGraphExec_t it owns).
class CapturedGraph {
 public:
  CapturedGraph(CapturedGraph&&) noexcept = default;
  CapturedGraph& operator=(CapturedGraph&&) noexcept = default;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() = default;

  /// Enqueues one replay on `stream` (any stream of the graph's device). Update DeviceScalars and do
  /// pre-launch copies on that stream first. `stale_handle` when the graph's device generation is no
  /// longer current. Counts the replay on success.
  Status launch(cudaStream_t stream);
  /// Uploads the executable to the device on `stream` so that the first launch does not pay for it;
  /// later calls do nothing until an update changes the executable.
  Status upload(cudaStream_t stream);
  /// Number of successful launches.
  [[nodiscard]] std::uint64_t num_replays() const noexcept { return replays_; }
  /// True once upload() ran for the current executable.
  [[nodiscard]] bool is_uploaded() const noexcept { return uploaded_; }
  /// Number of buffers the graph's pool keeps alive (0 without a pool).
  [[nodiscard]] std::size_t pool_buffer_count() const { return pool_ ? pool_->buffer_count() : 0; }
  /// True when the graph holds a pool.
  [[nodiscard]] bool has_pool() const noexcept { return pool_ != nullptr; }
  /// The graph's pool (null without one); share it with end_capture_with_pool of other captures.
  [[nodiscard]] const std::shared_ptr<CapturePool>& pool() const noexcept { return pool_; }
  /// The device the graph was captured on.
  [[nodiscard]] int device() const noexcept { return device_; }
  /// The device generation the graph is bound to, if any.
  [[nodiscard]] std::optional<std::uint64_t> generation() const noexcept;
  /// ok while the graph may be launched; `stale_handle` naming the reason otherwise.
  Status check_current() const;

  /// GpuRef buffers the graph only reads (registered during capture), e.g. to order a replay after
  /// their last writes.
  [[nodiscard]] const std::vector<std::shared_ptr<runtime::DeviceAllocation>>& buffers_read() const noexcept {
    return reads_;
  }
  /// GpuRef buffers the graph writes (registered during capture), e.g. to record a replay's writes.
  [[nodiscard]] const std::vector<std::shared_ptr<runtime::DeviceAllocation>>& buffers_written() const noexcept {
    return writes_;
  }

  /// Number of top-level nodes in the captured graph.
  Result<std::size_t> node_count() const;
  /// Writes the graph as Graphviz DOT to `path` for debugging (`verbose` adds node parameters).
  Status write_dot(const std::string& path, bool verbose = false) const;

  /// Takes a new capture of the same work: when its topology matches, the executable is updated in
  /// place through cudaGraphExecUpdate (cheap, no re-instantiation); otherwise the new capture is
  /// instantiated and replaces this one, and the result says why (topology_changed, cuda_result). Either way this graph
  /// then replays the new capture and holds its pool; in-flight replays of the old one keep their
  /// buffers until they finish.
  Result<GraphUpdate> update_from(CaptureSession&& next);

 private:
  friend class CaptureSession;
  CapturedGraph() = default;

  gpu::Graph graph_;
  gpu::GraphExec exec_;
  std::shared_ptr<CapturePool> pool_;
  GenerationStamp stamp_;
  std::vector<std::shared_ptr<runtime::DeviceAllocation>> reads_;
  std::vector<std::shared_ptr<runtime::DeviceAllocation>> writes_;
  int device_ = -1;
  std::uint64_t replays_ = 0;
  bool uploaded_ = false;
};

}  // namespace cuactor::graph

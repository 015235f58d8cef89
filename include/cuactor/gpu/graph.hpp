/// @file
/// RAII over CUDA graphs: stream capture, `cudaGraph_t`, `cudaGraphExec_t` and user objects.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuactor/core/expected.hpp"

namespace cuactor::gpu {

/// How a capture interacts with potentially unsafe CUDA calls (cudaMalloc, synchronisation, ...)
/// made while it runs; the caller chooses it per capture.
enum class CaptureMode {
  global,      ///< Unsafe calls from any thread whose own mode is global invalidate the capture.
  per_thread,  ///< Only unsafe calls from the capturing thread invalidate it (cudaStreamCaptureModeThreadLocal).
  relaxed,     ///< No call is prohibited; the caller takes responsibility for what it does.
};

/// The CUDA enumerator of a CaptureMode.
cudaStreamCaptureMode to_cuda(CaptureMode mode) noexcept;
/// "global", "thread-local" or "relaxed".
const char* to_string(CaptureMode mode) noexcept;

/// Capture status of a stream as CUDA reports it.
enum class CaptureStatus {
  none,         ///< The stream is not capturing.
  active,       ///< The stream is capturing and the capture is still valid.
  invalidated,  ///< The stream is capturing, but an illegal call already invalidated the capture.
};

/// Status and unique id of the capture on `stream` (id is 0 when none).
struct CaptureState {
  CaptureStatus status = CaptureStatus::none;
  unsigned long long id = 0;
};
/// Queries cudaStreamGetCaptureInfo for `stream`.
Result<CaptureState> capture_state(cudaStream_t stream);

/// Sets the calling thread's capture interaction mode for this object's lifetime and restores the
/// previous one afterwards (push/pop of cudaThreadExchangeStreamCaptureMode).
class ScopedCaptureMode {
 public:
  /// Switches the calling thread to `mode`.
  explicit ScopedCaptureMode(CaptureMode mode) noexcept;
  ScopedCaptureMode(const ScopedCaptureMode&) = delete;
  ScopedCaptureMode& operator=(const ScopedCaptureMode&) = delete;
  ~ScopedCaptureMode();

 private:
  cudaStreamCaptureMode previous_;
  bool swapped_ = false;
};

/// Move-only owner of a `cudaGraph_t`.
class Graph {
 public:
  /// An empty graph.
  static Result<Graph> create();
  /// Takes ownership of `graph` (may be null).
  static Graph adopt(cudaGraph_t graph) noexcept;

  Graph() = default;
  Graph(Graph&& o) noexcept;
  Graph& operator=(Graph&& o) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  /// The raw handle; stays owned by this object.
  [[nodiscard]] cudaGraph_t get() const noexcept { return graph_; }
  /// True when a graph is owned.
  [[nodiscard]] explicit operator bool() const noexcept { return graph_ != nullptr; }
  /// Number of top-level nodes.
  Result<std::size_t> node_count() const;
  /// Writes the graph as Graphviz DOT to `path` (cudaGraphDebugDotPrint); `verbose` adds every
  /// node's parameters.
  Status write_dot(const std::string& path, bool verbose = false) const;

 private:
  cudaGraph_t graph_ = nullptr;
};

/// Begins capture on `stream` in `mode`; `invalid_argument` when the stream is null (the legacy
/// stream cannot capture) or already capturing.
Status begin_stream_capture(cudaStream_t stream, CaptureMode mode);
/// Ends the capture on `stream` and returns its graph. When an illegal call invalidated the capture,
/// the capture still ends (the stream is usable again) and the result is `capture_invalidated`.
Result<Graph> end_stream_capture(cudaStream_t stream);

/// What cudaGraphExecUpdate did.
struct ExecUpdateOutcome {
  bool updated = false;                                           ///< The exec now runs the new graph's parameters.
  bool topology_changed = false;                                  ///< Nodes or edges differ: re-instantiate instead.
  cudaGraphExecUpdateResult result = cudaGraphExecUpdateSuccess;  ///< CUDA's detailed verdict.
};
/// A short name for a cudaGraphExecUpdateResult ("topology changed", "parameters changed", ...).
const char* to_string(cudaGraphExecUpdateResult result) noexcept;

/// Move-only owner of an instantiated graph, `cudaGraphExec_t`.
class GraphExec {
 public:
  /// Instantiates `graph` (cudaGraphInstantiate with `flags`).
  static Result<GraphExec> instantiate(const Graph& graph, unsigned long long flags = 0);

  GraphExec() = default;
  GraphExec(GraphExec&& o) noexcept;
  GraphExec& operator=(GraphExec&& o) noexcept;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec();

  /// The raw handle; stays owned by this object.
  [[nodiscard]] cudaGraphExec_t get() const noexcept { return exec_; }
  /// True when an executable graph is owned.
  [[nodiscard]] explicit operator bool() const noexcept { return exec_ != nullptr; }
  /// Enqueues one replay on `stream`.
  Status launch(cudaStream_t stream) const;
  /// Uploads the executable's resources to the device in stream order on `stream`.
  Status upload(cudaStream_t stream) const;
  /// Takes the parameters of `graph`, which must have this exec's topology. A topology or node-type
  /// change is not an error: the outcome says `updated=false` and why, and the exec is unchanged.
  Result<ExecUpdateOutcome> update(const Graph& graph) const;

 private:
  cudaGraphExec_t exec_ = nullptr;
};

/// Move-only owner of references to a CUDA user object: an object whose destructor CUDA runs once
/// the last reference (held by this handle, graphs, executable graphs, or launches in flight) goes.
/// The destructor runs on a CUDA-internal thread and must not call CUDA.
class UserObject {
 public:
  /// Creates an object of one reference owned by this handle; `destroy(payload)` runs at the end.
  static Result<UserObject> create(void* payload, cudaHostFn_t destroy);

  UserObject() = default;
  UserObject(UserObject&& o) noexcept;
  UserObject& operator=(UserObject&& o) noexcept;
  UserObject(const UserObject&) = delete;
  UserObject& operator=(const UserObject&) = delete;
  ~UserObject();

  /// The raw handle; the reference stays owned by this object.
  [[nodiscard]] cudaUserObject_t get() const noexcept { return object_; }
  /// True while this handle owns a reference.
  [[nodiscard]] explicit operator bool() const noexcept { return object_ != nullptr; }
  /// Gives `graph` one new reference to the object (this handle keeps its own).
  Status retain_by(const Graph& graph) const;
  /// Moves this handle's reference into `graph`; the handle is empty afterwards, also on failure
  /// (then the reference was released).
  Status move_into(const Graph& graph);

 private:
  cudaUserObject_t object_ = nullptr;
};

}  // namespace cuactor::gpu

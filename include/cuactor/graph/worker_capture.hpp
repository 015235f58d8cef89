/// @file
/// Capture and replay on an isolated device ([R10], [G1]-[G3]): the requests posted to an isolated
/// actor between WorkerCapture::begin() and end_capture() are recorded by its worker into a graph that
/// the worker holds; the client holds a WorkerGraph handle and replays it as an actor request.
///
/// Same contract as ActorCapture (actor_capture.hpp): begin and end block until the worker answered,
/// so never call them from a completion handler; wait for each recorded request's reply (it comes
/// once the request is recorded) before ending. While the worker captures, copies through the shared
/// staging region are refused (the region is reused, a recording of it would replay stale bytes) and
/// so are grouped GEMMs with host-known rows (use async_grouped_gemm_device_sized). A worker lost
/// during a capture fails end_capture() with `stale_handle`; graphs of a lost worker answer
/// `stale_handle` when replayed.
///
/// Uses Boost.Asio through device_actor.hpp: include from .cpp files only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <variant>
#include <vector>

#include "cuactor/gpu/graph.hpp"
#include "cuactor/runtime/device_actor.hpp"
#include "cuactor/runtime/wire.hpp"
#include "cuactor/runtime/worker_op.hpp"

namespace cuactor::graph {

/// A graph captured and held by an isolated device's worker. The last reference releases it in
/// that worker (if it still runs).
class WorkerGraph {
 public:
  /// Handle of graph `id` of the worker at `generation`; `release` posts the drop request.
  WorkerGraph(std::uint64_t id, std::uint64_t generation, std::function<void(runtime::WorkerOpCmd)> release)
      : id_(id), generation_(generation), release_(std::move(release)) {}
  WorkerGraph(const WorkerGraph&) = delete;
  WorkerGraph& operator=(const WorkerGraph&) = delete;
  ~WorkerGraph();

  /// The worker's id of the graph.
  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  /// Generation of the worker that holds it.
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }

 private:
  std::uint64_t id_;
  std::uint64_t generation_;
  std::function<void(runtime::WorkerOpCmd)> release_;
};

/// A capture of an isolated actor's requests by its worker (see the file comment).
class WorkerCapture {
 public:
  /// Begins capturing the worker's stream in `mode`; `unsupported` on an in-process actor (use
  /// ActorCapture there).
  static Result<WorkerCapture> begin(runtime::DeviceActor& actor, gpu::CaptureMode mode = gpu::CaptureMode::global);

  WorkerCapture(WorkerCapture&& o) noexcept : actor_(std::exchange(o.actor_, nullptr)), generation_(o.generation_) {}
  WorkerCapture& operator=(WorkerCapture&& o) noexcept;
  WorkerCapture(const WorkerCapture&) = delete;
  WorkerCapture& operator=(const WorkerCapture&) = delete;
  /// Abandons a capture still active.
  ~WorkerCapture();

  /// True until ended or abandoned.
  [[nodiscard]] bool active() const noexcept { return actor_ != nullptr; }
  /// Ends the capture; the worker instantiates the graph and keeps it.
  Result<std::shared_ptr<WorkerGraph>> end_capture();
  /// Ends the capture and discards it.
  Status abandon();

 private:
  WorkerCapture(runtime::DeviceActor& actor, std::uint64_t generation) : actor_(&actor), generation_(generation) {}

  runtime::DeviceActor* actor_ = nullptr;
  std::uint64_t generation_ = 0;
};

namespace detail {
/// The worker request that replays (or drops, with runtime::worker_ops::graph_drop) `graph`.
runtime::WorkerOpCmd graph_command(std::uint16_t op, const WorkerGraph& graph);
}  // namespace detail

/// Replays `graph` in the worker that holds it, as an actor request ordered after the requests posted
/// before it; the worker validates and write-tracks the graph's buffers like its own replays. Replies
/// (std::error_code, std::monostate) once the replay finished; `stale_handle` when that worker is gone,
/// `unsupported` on an in-process actor.
template <class Token>
auto replay(runtime::DeviceActor& actor, std::shared_ptr<const WorkerGraph> graph, Token&& token) {
  runtime::WorkerOpCmd command;
  if (graph) command = detail::graph_command(runtime::worker_ops::graph_replay, *graph);
  return actor.submit_portable<std::monostate>(
      "replay(worker graph)",
      [null = !graph](runtime::OpContext&) -> Result<std::monostate> {
        return fail(null ? errc::invalid_argument : errc::unsupported,
                    null ? "replay: null WorkerGraph" : "replay: a WorkerGraph replays only on its isolated actor");
      },
      std::move(command), [](std::vector<std::byte>&&) -> Result<std::monostate> { return std::monostate{}; },
      std::forward<Token>(token));
}

}  // namespace cuactor::graph

/// @file
/// Capture and replay through a device actor ([G1]-[G3] with [R5]): the capture begins and ends on
/// the actor's thread, every operation submitted to the actor meanwhile is recorded (never run) and
/// its GpuRef buffers and keep-alive objects go into the capture's pool; replays can run as actor
/// operations, ordered and write-tracked like any other.
///
/// Uses Boost.Asio through device_actor.hpp: include from .cpp files only.
#pragma once

#include <memory>
#include <utility>
#include <variant>

#include "cuactor/graph/capture.hpp"
#include "cuactor/runtime/device_actor.hpp"

namespace cuactor::graph {

namespace detail {
struct ActorCaptureState;
}  // namespace detail

/// A capture of a device actor's stream. Blocking: begin/end wait for the actor's thread, so never call
/// them from inside an actor operation. Submit the work to record between begin() and end_capture(),
/// and wait for each submitted operation's reply (it replies once recorded) before ending.
/// Destroying an active capture abandons it.
class ActorCapture {
 public:
  /// Begins capturing the actor's stream in `mode`; the capture is bound to the actor's current
  /// generation, so its graph is rejected with `stale_handle` once the context was rebuilt.
  static Result<ActorCapture> begin(runtime::DeviceActor& actor, CaptureMode mode,
                                    std::shared_ptr<CapturePool> pool = nullptr);

  ActorCapture(ActorCapture&&) noexcept;
  ActorCapture& operator=(ActorCapture&&) noexcept;
  ActorCapture(const ActorCapture&) = delete;
  ActorCapture& operator=(const ActorCapture&) = delete;
  ~ActorCapture();

  /// True until ended or abandoned.
  [[nodiscard]] bool active() const noexcept;
  /// Ends the capture on the actor's thread and instantiates the graph (see CaptureSession::end_capture).
  Result<CapturedGraph> end_capture();
  /// Ends the capture into a shared `pool` (see CaptureSession::end_capture_with_pool).
  Result<CapturedGraph> end_capture_with_pool(std::shared_ptr<CapturePool> pool);
  /// Ends the capture on the actor's thread and discards it.
  Status abandon();

 private:
  explicit ActorCapture(runtime::DeviceActor& actor, std::shared_ptr<detail::ActorCaptureState> state)
      : actor_(&actor), state_(std::move(state)) {}
  Result<CapturedGraph> finish(std::shared_ptr<CapturePool> pool, bool keep);

  runtime::DeviceActor* actor_ = nullptr;
  std::shared_ptr<detail::ActorCaptureState> state_;
};

/// Replays `graph` on `actor`'s stream as an actor operation: the graph's generation and GpuRef
/// buffers are validated first, the stream waits for their last writes on other streams, written
/// buffers are leased and their write events recorded; replies (std::error_code, std::monostate) once
/// the replay finished on the device. The graph must not be launched concurrently from elsewhere.
template <class Token>
auto replay(runtime::DeviceActor& actor, std::shared_ptr<CapturedGraph> graph, Token&& token) {
  runtime::Reads reads;
  runtime::Writes writes;
  if (graph) {
    for (const auto& a : graph->buffers_read()) reads.add(a);
    for (const auto& a : graph->buffers_written()) writes.add(a);
  }
  return actor.submit<std::monostate>(
      std::move(reads), std::move(writes),
      [graph = std::move(graph)](runtime::OpContext& ctx) -> Result<std::monostate> {
        if (!graph) return fail(errc::invalid_argument, "replay: null CapturedGraph");
        CUACTOR_TRY(graph->launch(ctx.stream()));
        ctx.keep_alive(graph);
        return std::monostate{};
      },
      std::forward<Token>(token));
}

}  // namespace cuactor::graph

#include "cuactor/graph/actor_capture.hpp"

#include <fmt/format.h>

#include <future>
#include <mutex>
#include <optional>

namespace cuactor::graph {

namespace detail {

/// What the actor's thread and the caller share about one capture.
struct ActorCaptureState {
  std::unique_ptr<CaptureSession> session;  // touched on the actor's thread only
  std::mutex mutex;
  std::optional<Error> listener_error;  // first failure to register a recorded operation's buffers
};

}  // namespace detail

namespace {

using detail::ActorCaptureState;

/// Runs `fn(ctx)` on the actor's thread between two operations and waits for its result. The value
/// travels inside a shared Result so that its Error message survives the (error_code, R) reply.
template <class T, class Fn>
Result<T> run_on_actor(runtime::DeviceActor& actor, std::string_view what, Fn fn) {
  using Box = std::shared_ptr<Result<T>>;
  std::promise<std::pair<std::error_code, Box>> done;
  auto reply = done.get_future();
  actor.execute<Box>(
      [fn = std::move(fn)](runtime::OpContext& ctx) mutable -> Result<Box> {
        return std::make_shared<Result<T>>(fn(ctx));
      },
      [&done](std::error_code ec, Box box) {
        done.set_value({ec, std::move(box)});
      });
  auto [ec, box] = reply.get();
  if (ec) return fail(Error(ec, fmt::format("{} on device actor {}: {}", what, actor.device(), ec.message())));
  if (!box) return fail(errc::internal, fmt::format("{}: the device actor replied without a value", what));
  return std::move(*box);
}

/// Takes ownership of what a recorded actor operation uses: its GpuRefs (read or written) and its
/// keep-alive objects go into the pool of the session this capture holds (runs on the actor's
/// thread, like every other use of the session; no stream-keyed lookup).
void take_recorded_op(ActorCaptureState& state, runtime::CapturedOp&& op) {
  auto note = [&](const Status& s) {
    if (s) return;
    std::lock_guard lock(state.mutex);
    if (!state.listener_error) state.listener_error = s.error();
  };
  CaptureSession* session = state.session.get();
  if (!session || !session->active()) {
    note(fail(errc::internal, "a recorded operation arrived after the actor capture ended"));
    return;
  }
  auto keep = [&](const std::shared_ptr<runtime::DeviceAllocation>& a, BufferUse use) {
    auto r = session->keep_alive_allocation(a, use);
    note(r ? ok() : Status(fail(r.error())));
  };
  for (const auto& a : op.reads) keep(a, BufferUse::read);
  for (const auto& a : op.writes) keep(a, BufferUse::write);
  for (auto& object : op.keep_alive) {
    if (!object) continue;
    auto r = session->keep_alive(std::const_pointer_cast<void>(std::move(object)), nullptr, 0);
    note(r ? ok() : Status(fail(r.error())));
  }
}

}  // namespace

Result<ActorCapture> ActorCapture::begin(runtime::DeviceActor& actor, CaptureMode mode,
                                         std::shared_ptr<CapturePool> pool) {
  auto state = std::make_shared<ActorCaptureState>();
  auto begun = run_on_actor<bool>(
      actor, "begin_capture", [state, mode, pool = std::move(pool)](runtime::OpContext& ctx) mutable -> Result<bool> {
        auto session = CaptureSession::begin(ctx.stream(), mode, std::move(pool));
        if (!session) return fail(session.error());
        CUACTOR_TRY(session->bind_device_state(ctx.state()));
        state->session = std::make_unique<CaptureSession>(std::move(*session));
        std::weak_ptr<ActorCaptureState> weak = state;
        ctx.set_capture_listener([weak](runtime::CapturedOp&& op) {
          if (auto s = weak.lock()) take_recorded_op(*s, std::move(op));
        });
        return true;
      });
  if (!begun) return fail(begun.error());
  return ActorCapture(actor, std::move(state));
}

ActorCapture::ActorCapture(ActorCapture&&) noexcept = default;

ActorCapture& ActorCapture::operator=(ActorCapture&& o) noexcept {
  if (this != &o) {
    if (active()) (void)abandon();
    actor_ = o.actor_;
    state_ = std::move(o.state_);
  }
  return *this;
}

ActorCapture::~ActorCapture() {
  if (active()) (void)abandon();
}

bool ActorCapture::active() const noexcept {
  return state_ && state_->session && state_->session->active();
}

Result<CapturedGraph> ActorCapture::finish(std::shared_ptr<CapturePool> pool, bool keep) {
  if (!active()) return fail(errc::invalid_argument, "end_capture: the actor capture already ended");
  auto state = state_;
  auto graph = run_on_actor<std::shared_ptr<CapturedGraph>>(
      *actor_, keep ? "end_capture" : "abandon_capture",
      [state, pool = std::move(pool), keep](runtime::OpContext& ctx) mutable -> Result<std::shared_ptr<CapturedGraph>> {
        ctx.set_capture_listener({});
        auto session = std::move(state->session);
        if (!keep) {
          CUACTOR_TRY(session->abandon());
          return std::shared_ptr<CapturedGraph>();
        }
        auto g = session->end_capture_with_pool(std::move(pool));
        if (!g) return fail(g.error());
        return std::make_shared<CapturedGraph>(std::move(*g));
      });
  if (!graph) return fail(graph.error());
  {
    std::lock_guard lock(state->mutex);
    if (state->listener_error)
      return fail(Error(state->listener_error->code(),
                        "actor capture: a recorded operation's buffers could not be kept alive: " +
                            state->listener_error->message()));
  }
  if (!keep) return fail(errc::cancelled, "capture abandoned");
  return std::move(**graph);
}

Result<CapturedGraph> ActorCapture::end_capture() {
  return finish(nullptr, true);
}

Result<CapturedGraph> ActorCapture::end_capture_with_pool(std::shared_ptr<CapturePool> pool) {
  return finish(std::move(pool), true);
}

Status ActorCapture::abandon() {
  auto r = finish(nullptr, false);
  if (r || r.error() == errc::cancelled) return ok();
  return fail(r.error());
}

}  // namespace cuactor::graph

/// @file
/// Request plumbing of the device actor (internal): the type-erased request record every backend
/// sees, the Asio initiation that turns any completion token into one, and the hand-off of replies to
/// the handler's executor. Users never name anything here; read device_actor.hpp instead.
#pragma once

#include <boost/asio/any_completion_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/prefer.hpp>
#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuactor/core/expected.hpp"
#include "cuactor/core/nvtx.hpp"
#include "cuactor/runtime/commands.hpp"
#include "cuactor/runtime/detail/mpsc_queue.hpp"
#include "cuactor/runtime/detail/record_memory.hpp"
#include "cuactor/runtime/op_context.hpp"
#include "cuactor/runtime/stats.hpp"

namespace cuactor::runtime::detail {

/// Asks this CPU to start loading [p, p + bytes) into its cache, for writing; a hint that changes no
/// result (prefetching never faults).
inline void prefetch_bytes(const void* p, std::size_t bytes) noexcept {
  const auto* c = static_cast<const char*>(p);
  for (std::size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(c + offset, 1);
}

/// How an operation completes.
enum class OpKind {
  stream,     ///< Reply when the enqueued work finished on the device.
  immediate,  ///< Reply as soon as the function returned (execute()).
};

/// The type-erased part of a request, seen by the backends (the hook queues it in an actor's mailbox).
struct OpRecord : MpscHook {
  virtual ~OpRecord() = default;
  /// Runs the request on the actor's thread (in-process backends); stores its value.
  virtual Status run(OpContext& ctx) = 0;
  /// The built-in command this request carries, or null for a host closure (submit/execute), which
  /// only an in-process backend can run.
  [[nodiscard]] virtual const Command* command() const noexcept { return nullptr; }
  /// Stores the outcome of command() computed elsewhere (an isolated worker).
  virtual Status set_result(CommandResult&& result) {
    (void)result;
    return fail(errc::internal, "set_result on a request without a command");
  }
  /// Posts the reply (`ec` or the stored value) to the handler's executor. Called exactly once; `self`
  /// is this record, kept alive (with everything it holds) until the handler ran there.
  virtual void complete(std::shared_ptr<OpRecord> self, std::error_code ec) noexcept = 0;
  /// Invokes the handler on this thread, now (complete() decided that it may: a completion-pool thread
  /// for a handler without an executor of its own). `self` is this record, released on return.
  virtual void deliver(std::shared_ptr<OpRecord> self, std::error_code ec) noexcept = 0;
  /// Starts loading what running this request touches first into this CPU's cache: the record and its
  /// buffers' handles, which other threads wrote last. The actor asks it of the next request of a batch
  /// while the driver enqueues the current one, so those cache misses overlap that launch instead of
  /// following it. A hint: it changes no result.
  virtual void prefetch() const noexcept { prefetch_buffers(); }

  OpKind kind = OpKind::stream;
  std::string_view name;  ///< For messages and NVTX: "fill", "launch", "submit", ... (a literal).
  std::uint64_t id = 0;
  AllocationList reads;
  AllocationList writes;
  KeepAliveList keep_alive;
  int leases_held = 0;                    ///< Number of writes whose op lease is held.
  nvtx::Span span;                        ///< "kind #id" from acceptance to reply, when a profiler is attached ([O1]).
  std::shared_ptr<OpRecord> queued_self;  ///< Keeps the record alive while a mailbox holds it.

 protected:
  /// prefetch() of a final record type: all of it, and the buffers' handles.
  template <class Record>
  static void prefetch_record(const Record& record) noexcept {
    prefetch_bytes(&record, sizeof(Record));
    record.prefetch_buffers();
  }
  void prefetch_buffers() const noexcept {
    // An empty handle is rejected when the request runs; offsets from a null pointer are undefined.
    for (const auto& a : reads)
      if (a) prefetch_bytes(a.get(), sizeof(DeviceAllocation));
    for (const auto& a : writes)
      if (a) prefetch_bytes(a.get(), sizeof(DeviceAllocation));
  }
};

/// Backend of a DeviceActor: the in-process actor loop, or a client of an isolated worker process.
/// Every request posted is answered exactly once (complete()).
class ActorBackend {
 public:
  virtual ~ActorBackend() = default;
  /// Device ordinal.
  [[nodiscard]] virtual int device() const noexcept = 0;
  /// The device state shared with the handles minted here.
  [[nodiscard]] virtual const std::shared_ptr<DeviceState>& state() const noexcept = 0;
  /// Queues `op` or answers it at once (`queue_full`, `device_shutting_down`, `circuit_open`, ...).
  virtual void post(std::shared_ptr<OpRecord> op) = 0;
  /// Removes a still-queued request and answers it with `cancelled`.
  virtual void cancel(std::uint64_t id) noexcept = 0;
  /// A snapshot of the device ([O2]).
  [[nodiscard]] virtual DeviceStats stats() const = 0;
  /// Orderly shutdown (see DeviceActor::shutdown()); idempotent.
  virtual void shutdown() noexcept = 0;
  /// True for the client of an isolated worker.
  [[nodiscard]] virtual bool isolated() const noexcept { return false; }
};

/// True on threads where handlers must not run: the actors' and pollers' threads.
bool on_internal_thread() noexcept;
/// Marks the current thread as internal (see on_internal_thread()) while it lives.
class InternalThreadScope {
 public:
  InternalThreadScope() noexcept;
  ~InternalThreadScope();
  InternalThreadScope(const InternalThreadScope&) = delete;
  InternalThreadScope& operator=(const InternalThreadScope&) = delete;

 private:
  bool previous_;
};

/// Executor of the runtime's completion pool: runs handlers that have no executor of their own and
/// hands replies produced on a caller's thread (rejections, cancellations) to the handler's executor.
/// Its threads spin briefly before they sleep, so a hand-off costs well under a microsecond under load.
boost::asio::any_completion_executor completion_pool_executor();

/// Runs `op`'s handler (deliver()) on the completion pool: at once when called on one of its threads
/// (the reply was already handed over there, e.g. with its batch), else through one post.
void deliver_on_completion_pool(std::shared_ptr<OpRecord> op, std::error_code ec) noexcept;

/// Hands a new request to `backend` (answers `device_shutting_down` when there is none).
void post_request(const std::shared_ptr<ActorBackend>& backend, std::shared_ptr<OpRecord> op);
/// Removes a still-queued request and answers it with `cancelled`.
void cancel_request(const std::weak_ptr<ActorBackend>& backend, std::uint64_t id) noexcept;
/// A process-unique request id.
std::uint64_t next_request_id() noexcept;

/// The reply half of a request whose handler (of type Handler, stored in the record itself: no
/// second allocation for a type-erased handler) takes (std::error_code, R).
template <class R, class Handler>
class ReplyOp : public OpRecord {
 public:
  explicit ReplyOp(Handler handler) : work_(work_for(handler)), handler_(std::move(handler)) {}

  /// Stores the value sent on success.
  void set_value(R value) { value_.emplace(std::move(value)); }

  void complete(std::shared_ptr<OpRecord> self, std::error_code ec) noexcept override {
    if constexpr (kOnCompletionPool) {
      // No executor of its own: the completion pool runs it, without a type-erased function per reply.
      deliver_on_completion_pool(std::move(self), ec);
    } else {
      // execute() queues the reply on the handler's executor. Executors that run work inline (use_future's,
      // system_executor) would run it right here, on an internal thread: Deliver notices and moves itself
      // to the completion pool first.
      auto ex = std::move(work_);
      ex.execute(Deliver{std::move(self), ec});
    }
  }

  void deliver(std::shared_ptr<OpRecord> self, std::error_code ec) noexcept override { Deliver{std::move(self), ec}(); }

  /// Connects the handler's cancellation slot (if any) so that a still-queued request can be removed.
  void connect_cancellation(std::weak_ptr<ActorBackend> backend) {
    auto slot = boost::asio::get_associated_cancellation_slot(handler_);
    if (!slot.is_connected()) return;
    slot.assign([backend = std::move(backend), id = id](boost::asio::cancellation_type type) {
      if ((type & (boost::asio::cancellation_type::terminal | boost::asio::cancellation_type::partial |
                   boost::asio::cancellation_type::total)) != boost::asio::cancellation_type::none)
        cancel_request(backend, id);
    });
  }

 private:
  /// Stands for "no associated executor" in the associated_executor query below.
  struct NoExecutor {};
  static constexpr bool kOnCompletionPool =
      std::is_same_v<typename boost::asio::associated_executor<Handler, NoExecutor>::type, NoExecutor>;
  /// Outstanding work on the handler's own executor; nothing for a handler the completion pool runs.
  using Work = std::conditional_t<kOnCompletionPool, NoExecutor, boost::asio::any_completion_executor>;
  static Work work_for(const Handler& handler) {
    if constexpr (kOnCompletionPool) {
      return {};
    } else {
      return boost::asio::prefer(boost::asio::get_associated_executor(handler, completion_pool_executor()),
                                 boost::asio::execution::outstanding_work.tracked);
    }
  }

  /// Invokes the handler with the outcome; never on a runtime-internal thread.
  struct Deliver {
    std::shared_ptr<OpRecord> self;
    std::error_code ec;
    void operator()() {
      if (on_internal_thread()) {
        completion_pool_executor().execute(std::move(*this));
        return;
      }
      auto& op = static_cast<ReplyOp&>(*self);
      auto slot = boost::asio::get_associated_cancellation_slot(op.handler_);
      if (slot.is_connected()) slot.clear();
      Handler h = std::move(op.handler_);
      R value = (!ec && op.value_) ? std::move(*op.value_) : R{};
      op.value_.reset();
      std::move(h)(ec, std::move(value));
      // `self` (the record with its buffers and keep-alive objects) is released here, on the handler's
      // side, never on an internal thread that must not block on CUDA.
    }
  };

  [[no_unique_address]] Work work_;
  Handler handler_;
  std::optional<R> value_;
};

/// A request whose function runs on the actor's thread and returns Result<R>.
template <class R, class Fn, class Handler>
class TypedOp final : public ReplyOp<R, Handler> {
 public:
  TypedOp(Fn fn, Handler handler) : ReplyOp<R, Handler>(std::move(handler)), fn_(std::move(fn)) {}
  void prefetch() const noexcept override { OpRecord::prefetch_record(*this); }

  Status run(OpContext& ctx) override {
    Result<R> r = fn_(ctx);
    if (!r) return fail(std::move(r.error()));
    this->set_value(std::move(*r));
    return ok();
  }

 private:
  Fn fn_;
};

/// A request carrying a built-in Command; `Convert` turns its CommandResult into the reply value R.
template <class R, class Convert, class Handler>
class CommandOp final : public ReplyOp<R, Handler> {
 public:
  CommandOp(Command command, Convert convert, Handler handler)
      : ReplyOp<R, Handler>(std::move(handler)), command_(std::move(command)), convert_(std::move(convert)) {}

  Status run(OpContext& ctx) override {
    auto r = execute(command_, ctx);
    if (!r) return fail(std::move(r.error()));
    return set_result(std::move(*r));
  }
  [[nodiscard]] const Command* command() const noexcept override { return &command_; }
  void prefetch() const noexcept override { OpRecord::prefetch_record(*this); }
  Status set_result(CommandResult&& result) override {
    Result<R> value = convert_(std::move(result));
    if (!value) return fail(std::move(value.error()));
    this->set_value(std::move(*value));
    return ok();
  }

 private:
  Command command_;
  Convert convert_;
};

/// A request with two forms: the closure `fn(OpContext&) -> Result<R>` that the in-process actor runs,
/// and a WorkerOpCmd that an isolated backend sends to its worker, whose reply bytes `convert`
/// turns into R.
template <class R, class Fn, class Convert, class Handler>
class PortableOp final : public ReplyOp<R, Handler> {
 public:
  PortableOp(Fn fn, WorkerOpCmd worker, Convert convert, Handler handler)
      : ReplyOp<R, Handler>(std::move(handler)),
        fn_(std::move(fn)),
        command_(std::move(worker)),
        convert_(std::move(convert)) {}

  Status run(OpContext& ctx) override {
    Result<R> r = fn_(ctx);
    if (!r) return fail(std::move(r.error()));
    this->set_value(std::move(*r));
    return ok();
  }
  [[nodiscard]] const Command* command() const noexcept override { return &command_; }
  void prefetch() const noexcept override { OpRecord::prefetch_record(*this); }
  Status set_result(CommandResult&& result) override {
    auto* bytes = std::get_if<std::vector<std::byte>>(&result);
    if (!bytes) return fail(errc::internal, "worker operation: the worker's reply carried no result bytes");
    Result<R> value = convert_(std::move(*bytes));
    if (!value) return fail(std::move(value.error()));
    this->set_value(std::move(*value));
    return ok();
  }

 private:
  Fn fn_;
  Command command_;
  Convert convert_;
};

/// A request record in recycled memory (record_memory.hpp): made here, freed where it was answered.
template <class Op, class... Args>
std::shared_ptr<Op> make_record(Args&&... args) {
  return std::allocate_shared<Op>(RecordAllocator<Op>{}, std::forward<Args>(args)...);
}

/// Initiates a request for any completion token: type-erases the handler into the record built by
/// `make(handler)` and passes it to `start` (a backend, or a test's fake completion source).
template <class R, class Token, class Make, class Start>
auto initiate_record(OpKind kind, std::string_view name, Reads reads, Writes writes, Make make, Token&& token,
                     Start start) {
  static_assert(std::default_initializable<R> && std::move_constructible<R>,
                "completion values must be default-constructible (sent with errors) and movable");
  return boost::asio::async_initiate<Token, void(std::error_code, R)>(
      [kind, name, make = std::move(make), start = std::move(start)](auto handler, Reads r, Writes w) mutable {
        auto op = make(std::move(handler));
        op->kind = kind;
        op->name = name;
        op->id = next_request_id();
        op->reads = std::move(r).release();
        op->writes = std::move(w).release();
        start(std::move(op));
      },
      token, std::move(reads), std::move(writes));
}

/// initiate_record() for a request running `fn(OpContext&) -> Result<R>`.
template <class R, class Token, class Fn, class Start>
auto initiate_op(OpKind kind, std::string_view name, Reads reads, Writes writes, Fn&& fn, Token&& token, Start start) {
  using F = std::decay_t<Fn>;
  static_assert(std::is_invocable_r_v<Result<R>, F&, OpContext&>, "fn must be callable as Result<R>(OpContext&)");
  return initiate_record<R>(
      kind, name, std::move(reads), std::move(writes),
      [f = F(std::forward<Fn>(fn))](auto handler) mutable {
        return make_record<TypedOp<R, F, decltype(handler)>>(std::move(f), std::move(handler));
      },
      std::forward<Token>(token), std::move(start));
}

/// The `start` function that posts to `backend`.
inline auto post_to(std::shared_ptr<ActorBackend> backend) {
  return [backend = std::move(backend)](auto op) {
    op->connect_cancellation(backend);
    post_request(backend, std::move(op));
  };
}

/// Starts a closure request on `backend`.
template <class R, class Token, class Fn>
auto initiate(std::shared_ptr<ActorBackend> backend, OpKind kind, std::string_view name, Reads reads, Writes writes,
              Fn&& fn, Token&& token) {
  return initiate_op<R>(kind, name, std::move(reads), std::move(writes), std::forward<Fn>(fn),
                        std::forward<Token>(token), post_to(std::move(backend)));
}

/// Starts a command request on `backend`; `convert(CommandResult&&) -> Result<R>` builds the reply.
template <class R, class Token, class Convert>
auto initiate_command(std::shared_ptr<ActorBackend> backend, std::string_view name, Reads reads, Writes writes,
                      Command command, Convert convert, Token&& token) {
  return initiate_record<R>(
      OpKind::stream, name, std::move(reads), std::move(writes),
      [command = std::move(command), convert = std::move(convert)](auto handler) mutable {
        return make_record<CommandOp<R, Convert, decltype(handler)>>(std::move(command), std::move(convert),
                                                                     std::move(handler));
      },
      std::forward<Token>(token), post_to(std::move(backend)));
}

/// Starts a request with an in-process closure and a worker form (see PortableOp) on `backend`.
template <class R, class Token, class Fn, class Convert>
auto initiate_portable(std::shared_ptr<ActorBackend> backend, std::string_view name, Reads reads, Writes writes,
                       Fn&& fn, WorkerOpCmd worker, Convert convert, Token&& token) {
  using F = std::decay_t<Fn>;
  static_assert(std::is_invocable_r_v<Result<R>, F&, OpContext&>, "fn must be callable as Result<R>(OpContext&)");
  return initiate_record<R>(
      OpKind::stream, name, std::move(reads), std::move(writes),
      [f = F(std::forward<Fn>(fn)), worker = std::move(worker), convert = std::move(convert)](auto handler) mutable {
        return make_record<PortableOp<R, F, Convert, decltype(handler)>>(std::move(f), std::move(worker),
                                                                         std::move(convert), std::move(handler));
      },
      std::forward<Token>(token), post_to(std::move(backend)));
}

}  // namespace cuactor::runtime::detail

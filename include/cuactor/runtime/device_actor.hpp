/// @file
/// The device actor ([R5]-[R9]): one executor thread per device owns the CUDA context, its stream,
/// memory pool and cuBLAS handle; requests go through a bounded FIFO mailbox and complete through
/// Boost.Asio completion tokens with the signature `void(std::error_code, R)`.
///
/// Extension point for other layers (graph capture, CUTLASS GEMM, ...): `DeviceActor::submit<R>()`
/// adds any stream operation without editing the actor and gets every guarantee of the built-in ones:
///
///     actor.submit<int>(Reads{a, b}, Writes{c},
///                       [=](OpContext& ctx) -> Result<int> {
///                         // a, b, c were validated (generation, device, leases) before this runs, and
///                         // ctx.stream() already waits for their last writes on other streams.
///                         CUACTOR_TRY(my_kernel(ctx.stream(), ...));
///                         ctx.keep_alive(workspace);  // lives until the work completed
///                         return 42;
///                       },
///                       token);
///
/// The function runs on the actor's thread and only enqueues work on ctx.stream(); the reply is sent
/// when that work has finished on the device (cudaLaunchHostFunc), or with `context_poisoned` exactly
/// once if the context dies first. Buffers in Writes get a write lease while the operation is in flight
/// and their write event recorded on the stream afterwards. `execute<R>()` runs a function on the
/// actor's thread between two operations and replies as soon as it returns (e.g. to begin or end a
/// stream capture on ctx.stream()). While the stream captures, submitted operations are recorded, reply
/// as soon as they are recorded, and hand their buffers and keep-alive objects to the capture listener
/// set with OpContext::set_capture_listener().
///
/// Replies carry `std::error_code` (cuactor's own category or a CUDA one); since Asio turns only
/// boost::system::error_code into exceptions, `use_future` yields std::future<std::tuple<std::error_code,
/// R>> and `co_await ... use_awaitable` yields std::tuple<std::error_code, R>: errors are values, never
/// exceptions. Handlers without an associated executor run on the runtime's completion pool.
///
/// This header uses Boost.Asio: include it from .cpp files only (never from .cu files).
#pragma once

#include <cublas_api.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <boost/asio/any_completion_executor.hpp>
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/prefer.hpp>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "cuactor/core/expected.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/module.hpp"
#include "cuactor/runtime/device_state.hpp"
#include "cuactor/runtime/gpu_ref.hpp"

namespace cuactor::runtime {

/// State of a device's circuit breaker ([R8], [R9]).
enum class CircuitState {
  closed,      ///< Normal operation.
  recovering,  ///< A poisoning is being handled (reset + canary); queued requests wait.
  open,        ///< The device rejects every request with `circuit_open`.
};
/// "closed", "recovering", "open".
std::string_view to_string(CircuitState state) noexcept;

/// Circuit breaker thresholds ([R9]): more than `max_poisonings` within `window` opens the circuit.
struct BreakerOptions {
  int max_poisonings = 3;
  std::chrono::steady_clock::duration window = std::chrono::seconds(60);
};

/// Called (on the actor's thread) when the circuit opens, with the device and the cause; e.g. a
/// service restarts its worker process here ([R8]).
using EscalationHook = std::function<void(int device, const Error& cause)>;

/// Configuration of a DeviceActor.
struct ActorOptions {
  std::size_t mailbox_capacity = 1024;                ///< Queued requests beyond this get `queue_full` ([R5]).
  std::size_t max_in_flight = 4096;                   ///< Operations on the stream before the actor stops dequeuing.
  std::size_t max_batch = 64;                         ///< Operations sharing one completion host function.
  std::chrono::microseconds watchdog_interval{500};   ///< Poll period for poisoning while ops are in flight.
  std::chrono::microseconds idle_spin{50};            ///< Busy-wait for new work before sleeping (latency).
  std::chrono::milliseconds shutdown_timeout{10000};  ///< Wait for in-flight work at shutdown, then `timeout`.
  BreakerOptions breaker;
  bool recover_in_process = true;  ///< Attempt reset + canary after a poisoning; false opens the circuit.
  EscalationHook on_escalation;    ///< Fired once each time the circuit opens.
  int stream_priority = 0;         ///< Priority of the actor's stream (see gpu::Stream::create).
};

/// A snapshot of a device actor ([R9]).
struct DeviceStats {
  int device = -1;                              ///< Device ordinal.
  bool memory_known = false;                    ///< False while the context is being rebuilt or is unusable.
  std::size_t free_bytes = 0;                   ///< cudaMemGetInfo free bytes.
  std::size_t total_bytes = 0;                  ///< cudaMemGetInfo total bytes.
  std::size_t queue_depth = 0;                  ///< Requests waiting in the mailbox.
  std::size_t in_flight = 0;                    ///< Operations submitted to the stream, not yet completed.
  std::uint64_t generation = 0;                 ///< DeviceState generation (1 = first context).
  CircuitState circuit = CircuitState::closed;  ///< Circuit breaker state.
  bool accepting_ops = false;                   ///< DeviceState::accepting_ops().
  std::uint64_t completed = 0;                  ///< Requests answered with success.
  std::uint64_t failed = 0;                     ///< Requests answered with an error (any code).
  std::uint64_t poisonings = 0;                 ///< Poisonings detected since start.
  std::uint64_t rejected_full = 0;              ///< Requests answered `queue_full`.
};

/// A list of buffers an operation uses with one kind of access (see Reads and Writes).
template <class Access>
class BufferList {
 public:
  BufferList() = default;
  /// BufferList{a, b, c} for GpuRefs of any element types.
  template <class... T>
  BufferList(const GpuRef<T>&... refs) : items_{refs.allocation()...} {}  // NOLINT(google-explicit-constructor)
  /// Adds one more buffer.
  template <class T>
  BufferList& add(const GpuRef<T>& ref) {
    items_.push_back(ref.allocation());
    return *this;
  }
  /// Adds one more allocation.
  BufferList& add(std::shared_ptr<DeviceAllocation> allocation) {
    items_.push_back(std::move(allocation));
    return *this;
  }
  /// The allocations.
  [[nodiscard]] const std::vector<std::shared_ptr<DeviceAllocation>>& items() const noexcept { return items_; }

 private:
  std::vector<std::shared_ptr<DeviceAllocation>> items_;
};

/// Tag of read access.
struct ReadAccess {};
/// Tag of write access.
struct WriteAccess {};
/// Buffers an operation reads: validated before it runs; its stream waits for their last writes.
using Reads = BufferList<ReadAccess>;
/// Buffers an operation writes: like Reads, plus a write lease while in flight and a recorded write
/// event afterwards.
using Writes = BufferList<WriteAccess>;

/// What the capture listener receives for each operation recorded while the actor's stream captures:
/// the buffers it uses and the objects it asked to keep alive (the listener owns them from now on, e.g.
/// to tie them to the graph's lifetime).
struct CapturedOp {
  std::vector<std::shared_ptr<DeviceAllocation>> reads;
  std::vector<std::shared_ptr<DeviceAllocation>> writes;
  std::vector<std::shared_ptr<const void>> keep_alive;
};
/// Receives every operation recorded during a capture (called on the actor's thread).
using CaptureListener = std::function<void(CapturedOp&&)>;

namespace detail {
class ActorCore;
struct OpRecord;
}  // namespace detail

/// What an operation's function sees on the actor's thread: the device, the stream to enqueue on, the
/// cuBLAS handle bound to that stream, the device's memory pool, and a keep-alive list.
class OpContext {
 public:
  /// Device ordinal.
  [[nodiscard]] int device() const noexcept;
  /// The actor's stream; enqueue the operation's work here (never synchronise it).
  [[nodiscard]] cudaStream_t stream() const noexcept;
  /// cuBLAS handle owned by the actor, already bound to stream().
  [[nodiscard]] cublasHandle_t cublas() const noexcept;
  /// The device's stream-ordered memory pool.
  [[nodiscard]] const gpu::MemPool& pool() const noexcept;
  /// The device state (generation, accepting_ops).
  [[nodiscard]] const std::shared_ptr<DeviceState>& state() const noexcept;
  /// Current generation.
  [[nodiscard]] std::uint64_t generation() const noexcept;
  /// True while stream() is capturing a graph.
  [[nodiscard]] bool capturing() const noexcept;

  /// Keeps `object` alive until the operation's work finished on the device (or, under capture, hands
  /// it to the capture listener).
  void keep_alive(std::shared_ptr<const void> object);
  /// Moves `value` into the keep-alive list.
  template <class T>
  void keep_alive_value(T value) {
    keep_alive(std::make_shared<const T>(std::move(value)));
  }
  /// Allocates `bytes` in stream order on stream() from the device's pool, minted at the current
  /// generation (`out_of_memory` when the pool cannot serve it).
  Result<std::shared_ptr<DeviceAllocation>> allocate_bytes(std::size_t bytes);
  /// Allocates `count` elements of T.
  template <class T>
  Result<GpuRef<T>> allocate(std::size_t count) {
    if (count > SIZE_MAX / sizeof(T))
      return fail(errc::invalid_argument, "allocate: " + std::to_string(count) + " elements overflow size_t");
    auto a = allocate_bytes(count * sizeof(T));
    if (!a) return fail(a.error());
    return GpuRef<T>(std::move(*a));
  }
  /// Sets (or, with an empty function, clears) the listener that receives operations recorded during a
  /// capture of stream(); use from an execute() function that begins/ends the capture.
  void set_capture_listener(CaptureListener listener);

 private:
  friend class detail::ActorCore;
  OpContext(detail::ActorCore& core, detail::OpRecord* op) noexcept : core_(&core), op_(op) {}
  detail::ActorCore* core_;
  detail::OpRecord* op_;
};

namespace detail {

/// How an operation completes.
enum class OpKind {
  stream,     ///< Reply when the enqueued work finished on the device.
  immediate,  ///< Reply as soon as the function returned (execute()).
};

/// The type-erased part of a request, seen by the actor (in .cpp).
struct OpRecord {
  virtual ~OpRecord() = default;
  /// Runs the request's function on the actor's thread; stores its value.
  virtual Status run(OpContext& ctx) = 0;
  /// Posts the reply (`ec` or the stored value) to the handler's executor. Called exactly once; `self`
  /// is this record, kept alive (with everything it holds) until the handler ran there.
  virtual void complete(std::shared_ptr<OpRecord> self, std::error_code ec) noexcept = 0;

  OpKind kind = OpKind::stream;
  std::string name;  ///< For messages: "fill", "gemm", "submit", ...
  std::uint64_t id = 0;
  std::vector<std::shared_ptr<DeviceAllocation>> reads;
  std::vector<std::shared_ptr<DeviceAllocation>> writes;
  std::vector<std::shared_ptr<const void>> keep_alive;
  int leases_held = 0;  ///< Number of writes whose op lease is held.
};

/// True on threads where handlers must not run: CUDA's host-function thread and the actors' threads.
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
boost::asio::any_completion_executor completion_pool_executor();

/// Hands a new request to the actor: queues it or answers it at once (`queue_full`,
/// `device_shutting_down`, `circuit_open`).
void post_request(const std::shared_ptr<ActorCore>& core, std::shared_ptr<OpRecord> op);
/// Removes a still-queued request and answers it with `cancelled`.
void cancel_request(const std::weak_ptr<ActorCore>& core, std::uint64_t id) noexcept;
/// A process-unique request id.
std::uint64_t next_request_id() noexcept;

/// A request whose function returns Result<R> and whose handler takes (std::error_code, R).
template <class R, class Fn>
class TypedOp final : public OpRecord {
 public:
  using Handler = boost::asio::any_completion_handler<void(std::error_code, R)>;

  TypedOp(Fn fn, Handler handler)
      : fn_(std::move(fn)),
        work_(boost::asio::prefer(boost::asio::get_associated_executor(handler, completion_pool_executor()),
                                  boost::asio::execution::outstanding_work.tracked)),
        handler_(std::move(handler)) {}

  Status run(OpContext& ctx) override {
    Result<R> r = fn_(ctx);
    if (!r) return fail(std::move(r.error()));
    value_.emplace(std::move(*r));
    return ok();
  }

  /// Stores the value sent on success (for completion sources that produce it without run()).
  void set_value(R value) { value_.emplace(std::move(value)); }

  void complete(std::shared_ptr<OpRecord> self, std::error_code ec) noexcept override {
    // execute() queues the reply on the handler's executor. Executors that run work inline (use_future's,
    // system_executor) would run it right here, on CUDA's host-function thread or the actor's thread:
    // Deliver notices and moves itself to the completion pool first.
    auto ex = std::move(work_);
    ex.execute(Deliver{std::move(self), ec});
  }

  /// Connects the handler's cancellation slot (if any) so that a still-queued request can be removed.
  void connect_cancellation(std::weak_ptr<ActorCore> core) {
    auto slot = handler_.get_cancellation_slot();
    if (!slot.is_connected()) return;
    slot.assign([core = std::move(core), id = id](boost::asio::cancellation_type type) {
      if (type != boost::asio::cancellation_type::none) cancel_request(core, id);
    });
  }

 private:
  /// Invokes the handler with the outcome; never on a runtime-internal thread.
  struct Deliver {
    std::shared_ptr<OpRecord> self;
    std::error_code ec;
    void operator()() {
      if (on_internal_thread()) {
        completion_pool_executor().execute(std::move(*this));
        return;
      }
      auto& op = static_cast<TypedOp&>(*self);
      auto slot = op.handler_.get_cancellation_slot();
      if (slot.is_connected()) slot.clear();
      Handler h = std::move(op.handler_);
      R value = (!ec && op.value_) ? std::move(*op.value_) : R{};
      op.value_.reset();
      std::move(h)(ec, std::move(value));
      // `self` (the record with its buffers and keep-alive objects) is released here, never on CUDA's
      // host-function thread (where freeing a buffer would call into CUDA).
    }
  };

  Fn fn_;
  boost::asio::any_completion_executor work_;
  Handler handler_;
  std::optional<R> value_;
};

/// Initiates a request for any completion token: type-erases the handler into a TypedOp and passes it
/// to `start` (the actor's mailbox, or a test's fake completion source).
template <class R, class Token, class Fn, class Start>
auto initiate_op(OpKind kind, std::string_view name, Reads reads, Writes writes, Fn&& fn, Token&& token, Start start) {
  static_assert(std::default_initializable<R> && std::move_constructible<R>,
                "completion values must be default-constructible (sent with errors) and movable");
  using F = std::decay_t<Fn>;
  static_assert(std::is_invocable_r_v<Result<R>, F&, OpContext&>, "fn must be callable as Result<R>(OpContext&)");
  return boost::asio::async_initiate<Token, void(std::error_code, R)>(
      [kind, name = std::string(name), start = std::move(start)](auto handler, Reads r, Writes w, F f) mutable {
        auto op = std::make_shared<TypedOp<R, F>>(std::move(f), typename TypedOp<R, F>::Handler(std::move(handler)));
        op->kind = kind;
        op->name = std::move(name);
        op->id = next_request_id();
        op->reads = r.items();
        op->writes = w.items();
        start(std::move(op));
      },
      token, std::move(reads), std::move(writes), F(std::forward<Fn>(fn)));
}

/// Starts a request on the actor `core`.
template <class R, class Token, class Fn>
auto initiate(std::shared_ptr<ActorCore> core, OpKind kind, std::string_view name, Reads reads, Writes writes, Fn&& fn,
              Token&& token) {
  return initiate_op<R>(kind, name, std::move(reads), std::move(writes), std::forward<Fn>(fn),
                        std::forward<Token>(token), [core = std::move(core)](auto op) {
                          op->connect_cancellation(core);
                          post_request(core, std::move(op));
                        });
}

}  // namespace detail

/// Pointer argument of a kernel launch that the kernel only reads (`in(x)`); a plain GpuRef argument
/// is treated as read and written.
template <class T>
struct InArg {
  GpuRef<T> ref;
};
/// Marks `ref` as read-only for KernelArgs.
template <class T>
InArg<T> in(GpuRef<T> ref) {
  return {std::move(ref)};
}

/// Arguments of a kernel launch: GpuRefs (validated on the actor's thread and passed as T*) and
/// trivially copyable values, each checked against the kernel's parameter sizes.
class KernelArgs {
 public:
  /// Builds the argument list in parameter order.
  template <class... A>
  static KernelArgs make(const A&... args) {
    KernelArgs k;
    (k.push(args), ...);
    return k;
  }
  /// Appends a read-write buffer argument.
  template <class T>
  void push(const GpuRef<T>& ref) {
    push_buffer(ref.allocation(), true);
  }
  /// Appends a read-only buffer argument.
  template <class T>
  void push(const InArg<T>& arg) {
    push_buffer(arg.ref.allocation(), false);
  }
  /// Appends a value argument.
  template <class T>
  requires std::is_trivially_copyable_v<T>
  void push(const T& value) { push_value(&value, sizeof(T), alignof(T)); }

  /// Where one argument lives in storage().
  struct Slot {
    std::size_t offset = 0;  ///< Byte offset in storage().
    std::size_t size = 0;    ///< Bytes (sizeof(void*) for buffers).
    int buffer = -1;         ///< Index into buffers(), or -1 for a value.
  };
  /// Argument slots in parameter order.
  [[nodiscard]] const std::vector<Slot>& slots() const noexcept { return slots_; }
  /// Buffer arguments and whether each is written.
  [[nodiscard]] const std::vector<std::pair<std::shared_ptr<DeviceAllocation>, bool>>& buffers() const noexcept {
    return buffers_;
  }
  /// Packed argument bytes (buffer slots filled in at launch).
  [[nodiscard]] std::vector<std::byte>& storage() noexcept { return storage_; }

 private:
  void push_buffer(std::shared_ptr<DeviceAllocation> allocation, bool written);
  void push_value(const void* value, std::size_t size, std::size_t align);

  std::vector<Slot> slots_;
  std::vector<std::pair<std::shared_ptr<DeviceAllocation>, bool>> buffers_;
  std::vector<std::byte> storage_;
};

/// Grid, block and dynamic shared memory of a launch on the actor's stream.
struct LaunchShape {
  dim3 grid{1, 1, 1};
  dim3 block{1, 1, 1};
  unsigned shared_bytes = 0;
};

/// cuBLAS GEMM, column-major as cuBLAS: C = alpha * op(A) * op(B) + beta * C with op(A) m×k, op(B)
/// k×n, C m×n. T is float, double, __half or __nv_bfloat16 (the last two accumulate in fp32).
template <class T>
struct GemmRequest {
  bool transpose_a = false;        ///< op(A) = A^T.
  bool transpose_b = false;        ///< op(B) = B^T.
  int m = 0, n = 0, k = 0;         ///< Problem size.
  double alpha = 1.0, beta = 0.0;  ///< Scalars (fp32 for float/half/bf16, fp64 for double).
  GpuRef<T> a;                     ///< A, column-major.
  int lda = 0;                     ///< Leading dimension of A (>= its rows).
  GpuRef<T> b;                     ///< B, column-major.
  int ldb = 0;                     ///< Leading dimension of B.
  GpuRef<T> c;                     ///< C (read when beta != 0, written).
  int ldc = 0;                     ///< Leading dimension of C (>= m).
};

/// Untyped form of GemmRequest used by the actor's .cpp.
struct GemmDesc {
  bool transpose_a = false, transpose_b = false;  ///< See GemmRequest; the rest mirrors it untyped.
  int m = 0, n = 0, k = 0;
  double alpha = 1.0, beta = 0.0;
  cudaDataType_t type = CUDA_R_32F;
  std::size_t element_bytes = 4;
  std::shared_ptr<DeviceAllocation> a, b, c;
  int lda = 0, ldb = 0, ldc = 0;
};
/// Validates `desc` (shapes, leading dimensions, buffer sizes) and enqueues it with cuBLAS on ctx.
Status enqueue_gemm(OpContext& ctx, const GemmDesc& desc);
/// cudaDataType_t of T for GEMM, or nullopt if unsupported.
template <class T>
std::optional<cudaDataType_t> gemm_data_type() {
  if constexpr (std::is_same_v<T, float>)
    return CUDA_R_32F;
  else if constexpr (std::is_same_v<T, double>)
    return CUDA_R_64F;
  else if constexpr (std::is_same_v<T, __half>)
    return CUDA_R_16F;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return CUDA_R_16BF;
  else
    return std::nullopt;
}

/// Enqueues a fill of `count` elements of `element_bytes` bytes with the pattern at `value`
/// (1, 2, 4, 8 or 16 bytes) on `stream`.
Status enqueue_fill(void* dst, std::size_t count, const void* value, std::size_t element_bytes, cudaStream_t stream);

/// One actor per device: owns its CUDA context (primary context), stream, memory pool and cuBLAS
/// handle on a dedicated thread; requests are queued in a bounded FIFO mailbox and answered through
/// completion tokens (callback, use_future, use_awaitable, deferred, ...) with (std::error_code, R).
/// Errors are typed codes (see classify()); the message of a failed request goes to the log sink.
/// Destroying the actor shuts it down (see shutdown()).
class DeviceActor {
 public:
  /// Starts the actor of device `ordinal`: creates its thread, context resources and generation 1.
  static Result<DeviceActor> create(int ordinal, ActorOptions options = {});

  DeviceActor(DeviceActor&&) noexcept = default;
  DeviceActor& operator=(DeviceActor&& o) noexcept;
  DeviceActor(const DeviceActor&) = delete;
  DeviceActor& operator=(const DeviceActor&) = delete;
  ~DeviceActor();

  /// Device ordinal.
  [[nodiscard]] int device() const noexcept;
  /// The device state shared with every GpuRef minted here.
  [[nodiscard]] std::shared_ptr<DeviceState> state() const noexcept;
  /// Snapshot: memory, queue depth, in-flight count, generation, circuit state, counters.
  [[nodiscard]] DeviceStats stats() const;
  /// Orderly shutdown: stops accepting (accepting_ops=false first), answers every queued request with
  /// `device_shutting_down`, waits up to shutdown_timeout for in-flight work (then fails it with
  /// `timeout`), joins the thread. Idempotent.
  void shutdown();

  /// Generic stream operation (the extension point; see the file comment). `fn(OpContext&)` returns
  /// Result<R> and runs on the actor's thread after `reads` and `writes` were validated and ordered.
  template <class R, class Fn, class Token>
  auto submit(Reads reads, Writes writes, Fn&& fn, Token&& token) {
    return detail::initiate<R>(core_, detail::OpKind::stream, "submit", std::move(reads), std::move(writes),
                               std::forward<Fn>(fn), std::forward<Token>(token));
  }
  /// Runs `fn(OpContext&)` on the actor's thread between two operations and replies as soon as it
  /// returns, without waiting for the stream (e.g. begin/end capture on ctx.stream()).
  template <class R, class Fn, class Token>
  auto execute(Fn&& fn, Token&& token) {
    return detail::initiate<R>(core_, detail::OpKind::immediate, "execute", {}, {}, std::forward<Fn>(fn),
                               std::forward<Token>(token));
  }

  /// Allocates `count` elements of T (stream-ordered from the device pool); replies with the GpuRef.
  template <class T, class Token>
  auto allocate(std::size_t count, Token&& token) {
    return detail::initiate<GpuRef<T>>(
        core_, detail::OpKind::stream, "allocate", {}, {},
        [count](OpContext& ctx) -> Result<GpuRef<T>> { return ctx.allocate<T>(count); }, std::forward<Token>(token));
  }

  /// Copies pageable host data to `dst` (the data is copied at the call, so `src` may be reused at once);
  /// `src.size()` must not exceed dst.size(). Replies with dst.
  template <class T, class Token>
  requires std::is_trivially_copyable_v<T>
  auto copy_to_device(GpuRef<T> dst, std::span<const T> src, Token&& token) {
    auto staged = std::make_shared<const std::vector<T>>(src.begin(), src.end());
    return detail::initiate<GpuRef<T>>(
        core_, detail::OpKind::stream, "copy_to_device", {}, Writes{dst},
        [dst, staged](OpContext& ctx) -> Result<GpuRef<T>> {
          CUACTOR_TRY(copy_checked(ctx, dst.allocation()->data(), dst.size_bytes(), staged->data(),
                                   staged->size() * sizeof(T), "copy_to_device"));
          ctx.keep_alive(staged);
          return dst;
        },
        std::forward<Token>(token));
  }
  /// Copies a host vector to `dst` (pageable; copied at the call). Replies with dst.
  template <class T, class Token>
  requires std::is_trivially_copyable_v<T>
  auto copy_to_device(GpuRef<T> dst, const std::vector<T>& src, Token&& token) {
    return copy_to_device(std::move(dst), std::span<const T>(src), std::forward<Token>(token));
  }
  /// Copies min(src->size(), dst bytes) bytes from pinned host memory to `dst` asynchronously; the pinned buffer
  /// stays alive until the copy finished. Replies with dst.
  template <class T, class Token>
  auto copy_to_device(GpuRef<T> dst, std::shared_ptr<const gpu::PinnedBuffer> src, Token&& token) {
    return detail::initiate<GpuRef<T>>(
        core_, detail::OpKind::stream, "copy_to_device(pinned)", {}, Writes{dst},
        [dst, src](OpContext& ctx) -> Result<GpuRef<T>> {
          if (!src) return fail(errc::invalid_argument, "copy_to_device: null pinned buffer");
          CUACTOR_TRY(copy_checked(ctx, dst.allocation()->data(), dst.size_bytes(), src->data(),
                                   std::min(src->size(), dst.size_bytes()), "copy_to_device(pinned)"));
          ctx.keep_alive(src);
          return dst;
        },
        std::forward<Token>(token));
  }
  /// Copies `src` to a new host vector. Pageable memory: the driver stages the copy and the actor's
  /// thread waits for it; prefer the pinned overload for asynchrony.
  template <class T, class Token>
  requires std::is_trivially_copyable_v<T>
  auto copy_to_host(GpuRef<T> src, Token&& token) {
    return detail::initiate<std::vector<T>>(
        core_, detail::OpKind::stream, "copy_to_host", Reads{src}, {},
        [src](OpContext& ctx) -> Result<std::vector<T>> {
          std::vector<T> out(src.size());
          CUACTOR_TRY(copy_checked(ctx, out.data(), out.size() * sizeof(T), src.allocation()->data(), src.size_bytes(),
                                   "copy_to_host"));
          return out;
        },
        std::forward<Token>(token));
  }
  /// Copies `src` into pinned host memory `dst` asynchronously (min of both sizes); replies with dst once
  /// the data has arrived.
  template <class T, class Token>
  auto copy_to_host(GpuRef<T> src, std::shared_ptr<gpu::PinnedBuffer> dst, Token&& token) {
    return detail::initiate<std::shared_ptr<gpu::PinnedBuffer>>(
        core_, detail::OpKind::stream, "copy_to_host(pinned)", Reads{src}, {},
        [src, dst](OpContext& ctx) -> Result<std::shared_ptr<gpu::PinnedBuffer>> {
          if (!dst) return fail(errc::invalid_argument, "copy_to_host: null pinned buffer");
          CUACTOR_TRY(copy_checked(ctx, dst->data(), dst->size(), src.allocation()->data(),
                                   std::min(src.size_bytes(), dst->size()), "copy_to_host(pinned)"));
          return dst;
        },
        std::forward<Token>(token));
  }
  /// Fills every element of `dst` with `value` (sizeof(T) of 1, 2, 4, 8 or 16). Replies with dst.
  template <class T, class Token>
  requires std::is_trivially_copyable_v<T>
  auto fill(GpuRef<T> dst, T value, Token&& token) {
    return detail::initiate<GpuRef<T>>(
        core_, detail::OpKind::stream, "fill", {}, Writes{dst},
        [dst, value](OpContext& ctx) -> Result<GpuRef<T>> {
          CUACTOR_TRY(enqueue_fill(dst.allocation()->data(), dst.size(), &value, sizeof(T), ctx.stream()));
          return dst;
        },
        std::forward<Token>(token));
  }
  /// Launches `kernel` with `args` on the actor's stream: every GpuRef argument is validated, ordered
  /// after its last write and (unless wrapped in in()) leased and recorded as written; argument count
  /// and sizes are checked against the kernel. `library` (may be null) is kept alive until completion;
  /// otherwise the caller keeps the kernel's Library alive.
  template <class Token>
  auto launch(std::shared_ptr<const gpu::Library> library, gpu::Kernel kernel, LaunchShape shape, KernelArgs args,
              Token&& token) {
    Reads r;
    Writes w;
    for (const auto& [allocation, written] : args.buffers())
      written ? (void)w.add(allocation) : (void)r.add(allocation);
    return detail::initiate<std::monostate>(
        core_, detail::OpKind::stream, "launch", std::move(r), std::move(w),
        [library = std::move(library), kernel = std::move(kernel), shape,
         args = std::move(args)](OpContext& ctx) mutable -> Result<std::monostate> {
          CUACTOR_TRY(launch_kernel(ctx, kernel, shape, args));
          if (library) ctx.keep_alive(library);
          return std::monostate{};
        },
        std::forward<Token>(token));
  }
  /// cuBLAS GEMM on the actor's stream (see GemmRequest); replies with C.
  template <class T, class Token>
  auto gemm(GemmRequest<T> req, Token&& token) {
    GemmDesc d{req.transpose_a,
               req.transpose_b,
               req.m,
               req.n,
               req.k,
               req.alpha,
               req.beta,
               gemm_data_type<T>().value_or(CUDA_R_32F),
               sizeof(T),
               req.a.allocation(),
               req.b.allocation(),
               req.c.allocation(),
               req.lda,
               req.ldb,
               req.ldc};
    static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "GEMM element type");
    return detail::initiate<GpuRef<T>>(
        core_, detail::OpKind::stream, "gemm", Reads{req.a, req.b}, Writes{req.c},
        [d, c = req.c](OpContext& ctx) -> Result<GpuRef<T>> {
          if (!gemm_data_type<T>()) return fail(errc::unsupported, "gemm: element type not supported by cuBLAS path");
          CUACTOR_TRY(enqueue_gemm(ctx, d));
          return c;
        },
        std::forward<Token>(token));
  }

 private:
  explicit DeviceActor(std::shared_ptr<detail::ActorCore> core) : core_(std::move(core)) {}
  static Status copy_checked(OpContext& ctx, void* dst, std::size_t dst_bytes, const void* src, std::size_t bytes,
                             std::string_view what);
  static Status launch_kernel(OpContext& ctx, const gpu::Kernel& kernel, const LaunchShape& shape, KernelArgs& args);

  std::shared_ptr<detail::ActorCore> core_;
};

}  // namespace cuactor::runtime

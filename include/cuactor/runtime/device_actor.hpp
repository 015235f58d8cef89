/// @file
/// The device actor ([R5]-[R10]): one executor per device owns the CUDA context, its stream, memory
/// pool and cuBLAS handle; requests go through a bounded FIFO mailbox and complete through Boost.Asio
/// completion tokens with the signature `void(std::error_code, R)`, so one API serves callbacks,
/// `use_future`, `use_awaitable` and `deferred`.
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
/// when that work has finished on the device — detected by the device's completion poller, which
/// watches a sequence number the stream writes into pinned memory — or with `context_poisoned` exactly
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

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "cuactor/core/expected.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/module.hpp"
#include "cuactor/runtime/commands.hpp"
#include "cuactor/runtime/detail/request.hpp"
#include "cuactor/runtime/device_state.hpp"
#include "cuactor/runtime/gpu_ref.hpp"
#include "cuactor/runtime/op_context.hpp"
#include "cuactor/runtime/stats.hpp"

namespace cuactor::runtime {

/// Circuit breaker thresholds ([R9]): more than `max_poisonings` within `window` opens the circuit.
struct BreakerOptions {
  int max_poisonings = 3;
  std::chrono::steady_clock::duration window = std::chrono::seconds(60);
};

/// Called when the circuit opens, with the device and the cause; e.g. a service moves work to
/// another device here ([R8]). Runs on the actor's thread: it must not block on the actor.
using EscalationHook = std::function<void(int device, const Error& cause)>;

/// Tuning of the completion poller ([R5]): it spins while work is in flight, then backs off with
/// growing sleeps, and blocks when the device is idle.
struct PollerOptions {
  CompletionMode mode = CompletionMode::sequence_word;  ///< event_query is used where stream memory ops are missing.
  std::chrono::microseconds spin{100};                  ///< Busy-poll this long after the last progress.
  std::chrono::microseconds max_backoff{200};           ///< Longest sleep between polls of a long-running batch.
  std::chrono::microseconds idle_spin{50};              ///< Keep polling this long after the device went idle.
};

/// Where a device's context lives ([R10]).
enum class Isolation {
  in_process,  ///< In this process, on the actor's thread (fastest; a poisoned context ends the device).
  worker,      ///< In a supervised `cuactor-worker` child process that is replaced when it faults.
};

/// Configuration of a DeviceActor.
struct ActorOptions {
  std::size_t mailbox_capacity = 1024;                ///< Queued requests beyond this get `queue_full` ([R5]).
  std::size_t max_in_flight = 4096;                   ///< Operations on the stream before the actor stops dequeuing.
  std::size_t max_batch = 64;                         ///< Operations sharing one completion record.
  std::chrono::microseconds watchdog_interval{500};   ///< Query the stream for poisoning after a batch is this late.
  std::chrono::microseconds idle_spin{50};            ///< Busy-wait for new work before sleeping (latency).
  std::chrono::milliseconds shutdown_timeout{10000};  ///< Wait for in-flight work at shutdown, then `timeout`.
  PollerOptions poller;
  BreakerOptions breaker;
  bool recover_in_process = true;  ///< Attempt reset + canary after a poisoning; false opens the circuit.
  EscalationHook on_escalation;    ///< Fired once each time the circuit opens.
  /// Fired once at each poisoning of an in-process context, on the actor's thread, after the
  /// in-flight requests were failed and before the context is reset: abort here what else uses the
  /// device's context in this process, e.g. its NCCL communicators (parallel::Communicator::abort),
  /// whose resources die with the reset. Must not block on the actor; exceptions are swallowed.
  EscalationHook on_poisoned;
  int stream_priority = 0;  ///< Priority of the actor's stream (see gpu::Stream::create).

  // Isolated mode ([R10]); the breaker above counts worker losses there and `on_escalation` fires
  // when it trips. Host closures (submit, execute) answer `unsupported` in that mode.
  Isolation isolation = Isolation::in_process;  ///< worker: the context lives in a child process.
  std::string worker_path;  ///< cuactor-worker executable; empty: $CUACTOR_WORKER, else next to this program.
  std::chrono::milliseconds request_deadline{120000};     ///< A request unanswered this long kills the worker.
  std::chrono::milliseconds worker_start_timeout{60000};  ///< A new worker must be ready within this.
  std::size_t shared_bytes = std::size_t{64} << 20;       ///< Shared region for copies (larger copies are chunked).
};

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
    return detail::initiate<R>(backend_, detail::OpKind::stream, "submit", std::move(reads), std::move(writes),
                               std::forward<Fn>(fn), std::forward<Token>(token));
  }
  /// A stream operation with an isolated form ([R10]): in-process, `fn(OpContext&) -> Result<R>` runs
  /// as with submit(); in isolated mode `worker` goes to the worker's handler for worker.op
  /// (runtime/worker_op.hpp) and `convert(std::vector<std::byte>&&) -> Result<R>` turns its reply into
  /// R. Reads and writes are worker.buffers' (a `true` flag means written). This is how GEMM, grouped
  /// GEMM and capture requests work in both modes behind one call.
  template <class R, class Fn, class Convert, class Token>
  auto submit_portable(std::string_view name, Fn&& fn, WorkerOpCmd worker, Convert convert, Token&& token) {
    Reads r;
    Writes w;
    for (const auto& [allocation, written] : worker.buffers)
      written ? (void)w.add(allocation) : (void)r.add(allocation);
    return detail::initiate_portable<R>(backend_, name, std::move(r), std::move(w), std::forward<Fn>(fn),
                                        std::move(worker), std::move(convert), std::forward<Token>(token));
  }
  /// Where this actor's context lives.
  [[nodiscard]] Isolation isolation() const noexcept {
    return backend_ && backend_->isolated() ? Isolation::worker : Isolation::in_process;
  }
  /// Posts `worker` to this actor without waiting for or reporting its outcome, as long as the actor
  /// exists: returns a function that does so, for destructors of handles to worker objects (graphs).
  [[nodiscard]] std::function<void(WorkerOpCmd)> detached_poster() const;

  /// Runs `fn(OpContext&)` on the actor's thread between two operations and replies as soon as it
  /// returns, without waiting for the stream (e.g. begin/end capture on ctx.stream()).
  template <class R, class Fn, class Token>
  auto execute(Fn&& fn, Token&& token) {
    return detail::initiate<R>(backend_, detail::OpKind::immediate, "execute", {}, {}, std::forward<Fn>(fn),
                               std::forward<Token>(token));
  }

  /// Allocates `count` elements of T (stream-ordered from the device pool); replies with the GpuRef.
  template <class T, class Token>
  auto allocate(std::size_t count, Token&& token) {
    const std::size_t bytes = count > SIZE_MAX / sizeof(T) ? SIZE_MAX : count * sizeof(T);
    return detail::initiate_command<GpuRef<T>>(
        backend_, "allocate", {}, {}, AllocateCmd{bytes},
        [](CommandResult&& r) -> Result<GpuRef<T>> {
          auto* a = std::get_if<std::shared_ptr<DeviceAllocation>>(&r);
          if (!a) return fail(errc::internal, "allocate: no allocation in the result");
          return GpuRef<T>(std::move(*a));
        },
        std::forward<Token>(token));
  }

  /// Allocates `bytes` of page-locked host memory for copies on this actor without staging (see
  /// HostBuffer): pinned in-process, shared with the worker and pinned there in isolated mode.
  template <class Token>
  auto allocate_host(std::size_t bytes, Token&& token) {
    return detail::initiate_command<std::shared_ptr<HostBuffer>>(
        backend_, "allocate_host", {}, {}, AllocateHostCmd{bytes},
        [](CommandResult&& r) -> Result<std::shared_ptr<HostBuffer>> {
          auto* h = std::get_if<std::shared_ptr<HostBuffer>>(&r);
          if (!h) return fail(errc::internal, "allocate_host: no host buffer in the result");
          return std::move(*h);
        },
        std::forward<Token>(token));
  }
  /// Copies min(src->size(), dst bytes) bytes of a host buffer of this actor to `dst` as one DMA
  /// transfer (no host copy, in isolated mode too); `src` stays alive and must not change until the
  /// reply. Replies with dst.
  template <class T, class Token>
  auto copy_to_device(GpuRef<T> dst, std::shared_ptr<const HostBuffer> src, Token&& token) {
    const HostBuffer* h = src.get();
    HostSource source{src, h ? h->data() : nullptr, h ? std::min(h->size(), dst.size_bytes()) : 0, true, h};
    return copy_in(std::move(dst), std::move(source), "copy_to_device(host buffer)", std::forward<Token>(token));
  }
  /// Copies min(src bytes, dst->size()) bytes of `src` into a host buffer of this actor as one DMA
  /// transfer; replies with dst once the data has arrived.
  template <class T, class Token>
  auto copy_to_host(GpuRef<T> src, std::shared_ptr<HostBuffer> dst, Token&& token) {
    HostBuffer* h = dst.get();
    HostSink sink{dst, h ? h->data() : nullptr, h ? h->size() : 0, true, h};
    return detail::initiate_command<std::shared_ptr<HostBuffer>>(
        backend_, "copy_to_host(host buffer)", Reads{src}, {}, CopyToHostCmd{src.allocation(), std::move(sink)},
        [dst](CommandResult&&) -> Result<std::shared_ptr<HostBuffer>> { return dst; }, std::forward<Token>(token));
  }

  /// Copies pageable host data to `dst` (the data is copied at the call, so `src` may be reused at once);
  /// `src.size()` must not exceed dst.size(). Replies with dst.
  template <class T, class Token>
  requires std::is_trivially_copyable_v<T>
  auto copy_to_device(GpuRef<T> dst, std::span<const T> src, Token&& token) {
    auto staged = std::make_shared<const std::vector<T>>(src.begin(), src.end());
    HostSource source{staged, staged->data(), staged->size() * sizeof(T), false};
    return copy_in(std::move(dst), std::move(source), "copy_to_device", std::forward<Token>(token));
  }
  /// Copies a shared host vector to `dst` without copying it at the call: `src` is kept alive and must
  /// not change until the reply. In isolated mode this is the copy with one host memcpy (into the
  /// shared region) on top of the device copy. Replies with dst.
  template <class T, class Token>
  requires std::is_trivially_copyable_v<T>
  auto copy_to_device(GpuRef<T> dst, std::shared_ptr<const std::vector<T>> src, Token&& token) {
    HostSource source{src, src ? src->data() : nullptr, src ? src->size() * sizeof(T) : 0, false};
    return copy_in(std::move(dst), std::move(source), "copy_to_device", std::forward<Token>(token));
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
    HostSource source{src, src ? src->data() : nullptr, src ? std::min(src->size(), dst.size_bytes()) : 0, true};
    return copy_in(std::move(dst), std::move(source), "copy_to_device(pinned)", std::forward<Token>(token));
  }
  /// Copies `src` to a new host vector. Pageable memory: the driver stages the copy and the actor's
  /// thread waits for it; prefer the pinned overload for asynchrony.
  template <class T, class Token>
  requires std::is_trivially_copyable_v<T>
  auto copy_to_host(GpuRef<T> src, Token&& token) {
    auto out = std::make_shared<std::vector<T>>(src.size());
    HostSink sink{out, out->data(), out->size() * sizeof(T), false};
    return detail::initiate_command<std::vector<T>>(
        backend_, "copy_to_host", Reads{src}, {}, CopyToHostCmd{src.allocation(), std::move(sink)},
        [out](CommandResult&&) -> Result<std::vector<T>> { return std::move(*out); }, std::forward<Token>(token));
  }
  /// Copies `src` into pinned host memory `dst` asynchronously (min of both sizes); replies with dst once
  /// the data has arrived.
  template <class T, class Token>
  auto copy_to_host(GpuRef<T> src, std::shared_ptr<gpu::PinnedBuffer> dst, Token&& token) {
    HostSink sink{dst, dst ? dst->data() : nullptr, dst ? dst->size() : 0, true};
    return detail::initiate_command<std::shared_ptr<gpu::PinnedBuffer>>(
        backend_, "copy_to_host(pinned)", Reads{src}, {}, CopyToHostCmd{src.allocation(), std::move(sink)},
        [dst](CommandResult&&) -> Result<std::shared_ptr<gpu::PinnedBuffer>> { return dst; },
        std::forward<Token>(token));
  }
  /// Fills every element of `dst` with `value` (sizeof(T) of 1, 2, 4, 8 or 16). Replies with dst.
  template <class T, class Token>
  requires std::is_trivially_copyable_v<T>
  auto fill(GpuRef<T> dst, T value, Token&& token) {
    return detail::initiate_command<GpuRef<T>>(
        backend_, "fill", {}, Writes{dst}, make_fill(dst.allocation(), dst.size(), value),
        [dst](CommandResult&&) -> Result<GpuRef<T>> { return dst; }, std::forward<Token>(token));
  }
  /// Launches `kernel` with `args` on the actor's stream: every GpuRef argument is validated, ordered
  /// after its last write and (unless wrapped in in()) leased and recorded as written; argument count
  /// and sizes are checked against the kernel. `library` (may be null) is kept alive until completion;
  /// otherwise the caller keeps the kernel's Library alive.
  template <class Token>
  auto launch(std::shared_ptr<const gpu::Library> library, gpu::Kernel kernel, LaunchShape shape, KernelArgs args,
              Token&& token) {
    return launch_request(LaunchCmd{std::move(library), std::move(kernel), shape, std::move(args)},
                          std::forward<Token>(token));
  }
  /// Launches kernel `kernel` of `module` (loaded once per process or worker) with `args`: the form of
  /// launch that isolated mode supports, with the same argument checks as the other overload.
  template <class Token>
  auto launch(std::shared_ptr<const ModuleImage> module, std::string kernel, LaunchShape shape, KernelArgs args,
              Token&& token) {
    return launch_request(LaunchModuleCmd{std::move(module), std::move(kernel), shape, std::move(args)},
                          std::forward<Token>(token));
  }
  /// An actor over `backend` (the in-process loop or an isolated worker's client).
  explicit DeviceActor(std::shared_ptr<detail::ActorBackend> backend) : backend_(std::move(backend)) {}

 private:
  /// A launch command (LaunchCmd or LaunchModuleCmd): its buffer arguments are read, or read and written.
  template <class Launch, class Token>
  auto launch_request(Launch command, Token&& token) {
    Reads r;
    Writes w;
    for (const auto& [allocation, written] : command.args.buffers())
      written ? (void)w.add(allocation) : (void)r.add(allocation);
    return detail::initiate_command<std::monostate>(
        backend_, "launch", std::move(r), std::move(w), Command(std::move(command)),
        [](CommandResult&&) -> Result<std::monostate> { return std::monostate{}; }, std::forward<Token>(token));
  }
  template <class T, class Token>
  auto copy_in(GpuRef<T> dst, HostSource src, std::string_view name, Token&& token) {
    return detail::initiate_command<GpuRef<T>>(
        backend_, name, {}, Writes{dst}, CopyToDeviceCmd{dst.allocation(), std::move(src)},
        [dst](CommandResult&&) -> Result<GpuRef<T>> { return dst; }, std::forward<Token>(token));
  }

  std::shared_ptr<detail::ActorBackend> backend_;
};

}  // namespace cuactor::runtime

#include "cuactor/runtime/device_actor.hpp"

#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_set>

#include "cuactor/core/log.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/runtime/circuit_breaker.hpp"
#include "runtime/inflight_registry.hpp"
#include "runtime/kernels.hpp"
#include "runtime/mailbox.hpp"

namespace cuactor::runtime {

std::string_view to_string(CircuitState state) noexcept {
  switch (state) {
    case CircuitState::closed:
      return "closed";
    case CircuitState::recovering:
      return "recovering";
    case CircuitState::open:
      return "open";
  }
  return "unknown";
}

namespace detail {
namespace {

/// Counters and the wake-up of one actor, shared with its registry entries so that completion host
/// functions never touch (or keep alive) the actor itself.
struct ActorSignals {
  std::mutex mutex;
  std::condition_variable wake;
  bool sleeping = false;                 // guarded by mutex
  std::atomic<bool> wants_slots{false};  // the actor waits for in-flight operations to finish
  std::atomic<std::size_t> queued{0};    // mirror of the mailbox size for the lock-free spin
  std::atomic<std::size_t> in_flight{0};
  std::atomic<std::uint64_t> completed{0};
  std::atomic<std::uint64_t> failed{0};
};

/// Operations sharing one completion host function.
struct Batch {
  std::shared_ptr<ActorSignals> signals;
  std::vector<std::shared_ptr<OpRecord>> ops;
};

InFlightRegistry<Batch>& registry() {
  static InFlightRegistry<Batch> r;
  return r;
}

std::atomic<std::uint64_t> g_next_id{1};
thread_local bool t_internal_thread = false;

boost::asio::thread_pool& completion_pool() {
  // Two threads: handlers without an executor of their own run here, never on CUDA's host-function
  // thread (where releasing a buffer would call into CUDA).
  static boost::asio::thread_pool pool(2);
  return pool;
}

/// Answers `op` exactly once: returns its leases, counts it, posts the reply.
void finish(ActorSignals& signals, std::shared_ptr<OpRecord> op, std::error_code ec) noexcept {
  for (int i = 0; i < op->leases_held; ++i) op->writes[static_cast<std::size_t>(i)]->release_op_lease();
  op->leases_held = 0;
  (ec ? signals.failed : signals.completed).fetch_add(1, std::memory_order_relaxed);
  auto* raw = op.get();
  raw->complete(std::move(op), ec);
}

/// Answers `op` with `error`, logging its message (the reply carries only the code).
void finish_error(ActorSignals& signals, std::shared_ptr<OpRecord> op, const Error& error) noexcept {
  if (log_enabled(LogLevel::debug))
    log(LogLevel::debug, fmt::format("request '{}' #{} failed: {}", op->name, op->id, error.to_string()));
  finish(signals, std::move(op), error.code());
}

/// Answers `op` with `error` from the completion pool: for replies decided on a caller's thread, which may
/// be the handler's own executor thread (a reply must never run inside the initiating call).
void finish_error_from_pool(std::shared_ptr<ActorSignals> signals, std::shared_ptr<OpRecord> op, Error error) {
  boost::asio::post(completion_pool(),
                    [signals = std::move(signals), op = std::move(op), error = std::move(error)]() mutable {
                      finish_error(*signals, std::move(op), error);
                    });
}

/// cudaLaunchHostFunc callback: only hands results to the handlers' executors (no CUDA calls here).
void CUDART_CB on_batch_done(void* user) {
  const InternalThreadScope internal;
  auto batch = registry().take(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(user)));
  if (!batch) return;  // the supervisor already failed it after a poisoning
  auto& signals = *batch->signals;
  const std::size_t n = batch->ops.size();
  for (auto& op : batch->ops) finish(signals, std::move(op), {});
  signals.in_flight.fetch_sub(n, std::memory_order_acq_rel);
  if (signals.wants_slots.load(std::memory_order_acquire)) {
    std::lock_guard lock(signals.mutex);
    signals.wake.notify_one();
  }
}

/// The stream, pool and cuBLAS handle of one incarnation of the device's context. Allocations hold it
/// so that the stream they are freed on outlives them; after a reset its handles are abandoned.
class Incarnation final : public AllocationOwner {
 public:
  static Result<std::shared_ptr<Incarnation>> create(int ordinal, int priority) {
    auto inc = std::make_shared<Incarnation>();
    auto stream = gpu::Stream::create(ordinal, priority);
    if (!stream) return fail(stream.error());
    inc->stream_ = std::make_unique<gpu::Stream>(std::move(*stream));
    auto pool = gpu::MemPool::create(ordinal);
    if (!pool) return fail(pool.error());
    inc->pool_ = std::make_unique<gpu::MemPool>(std::move(*pool));
    CUACTOR_TRY(gpu::check(cublasCreate(&inc->blas_), fmt::format("cublasCreate(device {})", ordinal)));
    CUACTOR_TRY(gpu::check(cublasSetStream(inc->blas_, inc->stream_->get()), "cublasSetStream"));
    // A workspace of our own keeps cuBLAS from allocating during stream capture (its recommendation
    // for graphs; 32 MiB covers Hopper's largest kernels).
    auto workspace = gpu::DeviceBuffer::allocate(*inc->pool_, kCublasWorkspaceBytes, inc->stream_->get());
    if (!workspace) return fail(workspace.error());
    inc->blas_workspace_ = std::move(*workspace);
    CUACTOR_TRY(gpu::check(cublasSetWorkspace(inc->blas_, inc->blas_workspace_.data(), kCublasWorkspaceBytes),
                            "cublasSetWorkspace"));
    return inc;
  }

  ~Incarnation() override {
    if (lost_.load(std::memory_order_acquire)) {
      // The context these handles belonged to was reset: destroying them would act on dead (or,
      // worse, recycled) driver objects, so they are deliberately leaked.
      (void)stream_.release();
      (void)pool_.release();
      (void)blas_workspace_.release();
      return;
    }
    if (blas_) (void)cublasDestroy(blas_);
    flush_deferred_frees();
  }

  // Called from whichever thread dropped the last reference. While the stream captures, the free of
  // memory allocated before the capture (and the wait on its last write) would be recorded into the
  // graph instead of running, so it is deferred until the capture has ended. Memory the capture itself
  // allocated is freed inside the capture: the graph's free node pairs its allocation node.
  void deallocate(void* ptr, std::size_t, cudaEvent_t last_write) noexcept override {
    if (lost_.load(std::memory_order_acquire)) return;
    std::lock_guard lock(free_mutex_);
    const bool allocated_in_capture = captured_allocations_.erase(ptr) > 0;
    if (stream_capturing() && !allocated_in_capture) {
      deferred_frees_.push_back({ptr, last_write});
      return;
    }
    for (const auto& f : deferred_frees_) free_now(f.ptr, f.last_write);
    deferred_frees_.clear();
    free_now(ptr, last_write);
  }

  /// Remembers that `ptr` was allocated while the stream captured (called on the actor's thread).
  void note_captured_allocation(void* ptr) {
    std::lock_guard lock(free_mutex_);
    captured_allocations_.insert(ptr);
  }

  /// Frees what was deferred during a capture; the actor calls it when it sees the capture end.
  void flush_deferred_frees() noexcept {
    std::lock_guard lock(free_mutex_);
    if (!stream_capturing()) captured_allocations_.clear();  // later frees of those run outside the graph
    if (deferred_frees_.empty() || stream_capturing()) return;
    for (const auto& f : deferred_frees_) free_now(f.ptr, f.last_write);
    deferred_frees_.clear();
  }
  [[nodiscard]] bool context_lost() const noexcept override { return lost_.load(std::memory_order_acquire); }
  void mark_lost() noexcept { lost_.store(true, std::memory_order_release); }

  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_->get(); }
  [[nodiscard]] const gpu::MemPool& pool() const noexcept { return *pool_; }
  [[nodiscard]] cublasHandle_t blas() const noexcept { return blas_; }

 private:
  std::unique_ptr<gpu::Stream> stream_;
  static constexpr std::size_t kCublasWorkspaceBytes = std::size_t{32} << 20;

  struct DeferredFree {
    void* ptr;
    cudaEvent_t last_write;  // owned here since deallocate()
  };

  [[nodiscard]] bool stream_capturing() const noexcept {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(stream_->get(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone;
  }
  void free_now(void* ptr, cudaEvent_t last_write) noexcept {
    if (last_write) {
      (void)cudaStreamWaitEvent(stream_->get(), last_write, 0);
      (void)cudaEventDestroy(last_write);  // the enqueued wait keeps what it needs
    }
    (void)cudaFreeAsync(ptr, stream_->get());
  }

  std::unique_ptr<gpu::MemPool> pool_;
  cublasHandle_t blas_ = nullptr;
  gpu::DeviceBuffer blas_workspace_;
  std::atomic<bool> lost_{false};
  std::mutex free_mutex_;
  std::vector<DeferredFree> deferred_frees_;
  std::unordered_set<void*> captured_allocations_;
};

}  // namespace

/// The actor: mailbox, executor thread, supervision. Everything here except post/cancel/stats/
/// shutdown runs on the actor's own thread.
class ActorCore : public std::enable_shared_from_this<ActorCore> {
 public:
  ActorCore(int ordinal, ActorOptions options)
      : ordinal_(ordinal),
        options_(std::move(options)),
        state_(std::make_shared<DeviceState>(ordinal)),
        signals_(std::make_shared<ActorSignals>()),
        mailbox_(options_.mailbox_capacity),
        breaker_(options_.breaker.max_poisonings, options_.breaker.window) {}

  ~ActorCore() { shutdown(); }

  Status start() {
    // Shared: the thread may still be inside set_value() when start() returns.
    auto ready = std::make_shared<std::promise<Status>>();
    auto started = ready->get_future();
    thread_ = std::thread([this, ready] { thread_main(*ready); });
    Status st = started.get();
    if (!st) thread_.join();
    return st;
  }

  void post(std::shared_ptr<OpRecord> op) {
    Error rejection;
    {
      std::lock_guard lock(signals_->mutex);
      if (stopping_) {
        rejection =
            Error(errc::device_shutting_down,
                  fmt::format("device {}: request '{}' rejected: the actor is shutting down", ordinal_, op->name));
      } else if (circuit_state() == CircuitState::open) {
        rejection = Error(errc::circuit_open,
                          fmt::format("device {}: request '{}' rejected: the circuit is open", ordinal_, op->name));
      } else if (!mailbox_.push(op)) {
        rejected_full_.fetch_add(1, std::memory_order_relaxed);
        rejection = Error(errc::queue_full, fmt::format("device {}: request '{}' rejected: mailbox full ({} queued)",
                                                        ordinal_, op->name, mailbox_.capacity()));
      } else {
        signals_->queued.store(mailbox_.size(), std::memory_order_release);
        if (signals_->sleeping) signals_->wake.notify_one();
        return;
      }
    }
    finish_error_from_pool(signals_, std::move(op), std::move(rejection));
  }

  void cancel(std::uint64_t id) {
    std::optional<std::shared_ptr<OpRecord>> op;
    {
      std::lock_guard lock(signals_->mutex);
      op = mailbox_.remove_first([id](const std::shared_ptr<OpRecord>& o) { return o->id == id; });
      signals_->queued.store(mailbox_.size(), std::memory_order_release);
    }
    if (op)
      finish_error_from_pool(signals_, std::move(*op),
                             Error(errc::cancelled, fmt::format("request #{} cancelled before it ran", id)));
  }

  DeviceStats stats() const {
    DeviceStats s;
    s.device = ordinal_;
    {
      std::lock_guard lock(signals_->mutex);
      s.queue_depth = mailbox_.size();
      s.circuit = circuit_state();
    }
    s.accepting_ops = state_->accepting_ops();
    s.in_flight = signals_->in_flight.load(std::memory_order_acquire);
    s.generation = state_->generation();
    s.completed = signals_->completed.load(std::memory_order_relaxed);
    s.failed = signals_->failed.load(std::memory_order_relaxed);
    s.poisonings = poisonings_.load(std::memory_order_relaxed);
    s.rejected_full = rejected_full_.load(std::memory_order_relaxed);
    if (s.circuit == CircuitState::closed) {
      // Never query a context while the actor resets it.
      std::shared_lock context(context_mutex_, std::try_to_lock);
      if (context.owns_lock() && !context_dead_) {
        if (auto mem = gpu::memory_info(ordinal_)) {
          s.memory_known = true;
          s.free_bytes = mem->free;
          s.total_bytes = mem->total;
        }
      }
    }
    return s;
  }

  void shutdown() {
    std::vector<std::shared_ptr<OpRecord>> queued;
    {
      std::lock_guard lock(signals_->mutex);
      if (!stopping_) {
        stopping_ = true;
        state_->set_accepting_ops(false);  // first: every handle is stale from here on
        queued = mailbox_.take_all();
        signals_->queued.store(0, std::memory_order_release);
        signals_->wake.notify_one();
      }
    }
    for (auto& op : queued) {
      const Error e(errc::device_shutting_down,
                    fmt::format("device {}: request '{}' not run: the actor shut down", ordinal_, op->name));
      finish_error_from_pool(signals_, std::move(op), e);
    }
    std::lock_guard join_lock(join_mutex_);
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  }

  [[nodiscard]] int device() const noexcept { return ordinal_; }
  [[nodiscard]] const std::shared_ptr<DeviceState>& state() const noexcept { return state_; }

  // OpContext services (actor thread).
  [[nodiscard]] cudaStream_t stream() const noexcept { return inc_->stream(); }
  [[nodiscard]] cublasHandle_t blas() const noexcept { return inc_->blas(); }
  [[nodiscard]] const gpu::MemPool& pool() const noexcept { return inc_->pool(); }
  [[nodiscard]] bool capturing() const noexcept { return capturing_; }
  void set_capture_listener(CaptureListener listener) { capture_listener_ = std::move(listener); }

  Result<std::shared_ptr<DeviceAllocation>> allocate_bytes(std::size_t bytes) {
    void* ptr = nullptr;
    if (bytes > 0) {
      const cudaError_t e = cudaMallocFromPoolAsync(&ptr, bytes, inc_->pool().get(), inc_->stream());
      if (e != cudaSuccess) {
        Error err = gpu::make_error(e, fmt::format("cudaMallocFromPoolAsync({} bytes on device {})", bytes, ordinal_));
        if (e == cudaErrorMemoryAllocation) err = Error(errc::out_of_memory, err.message());
        return fail(std::move(err));
      }
    }
    // Memory allocated inside a capture is the graph's: its free must be recorded in the same capture.
    if (ptr && capturing_) inc_->note_captured_allocation(ptr);
    auto allocation = std::make_shared<DeviceAllocation>(ptr, bytes, state_, inc_);
    // Other streams must not use the memory before its stream-ordered allocation happened.
    if (bytes > 0 && !capturing_) CUACTOR_TRY(allocation->record_write(inc_->stream()));
    return allocation;
  }

 private:
  void thread_main(std::promise<Status>& ready) {
    const InternalThreadScope internal;
    auto init = [&]() -> Status {
      CUACTOR_TRY(gpu::check_ordinal(ordinal_));
      CUACTOR_TRY(gpu::check(cudaSetDevice(ordinal_), fmt::format("cudaSetDevice({})", ordinal_)));
      auto inc = Incarnation::create(ordinal_, options_.stream_priority);
      if (!inc) return fail(inc.error());
      inc_ = std::move(*inc);
      return ok();
    }();
    if (!init) {
      ready.set_value(init);
      return;
    }
    state_->advance_generation();  // generation 1: the first usable context
    state_->set_accepting_ops(true);
    ready.set_value(ok());
    run_loop();
    drain_at_shutdown();
    std::lock_guard context(context_mutex_);
    capture_listener_ = {};
    capture_keep_alive_.clear();
    inc_.reset();
  }

  // Waits for work or for the watchdog period; returns false when the actor must stop.
  bool next_batch(std::vector<std::shared_ptr<OpRecord>>& batch) {
    const auto spin_until = std::chrono::steady_clock::now() + options_.idle_spin;
    // A short lock-free spin saves the futex round trip when requests arrive back to back.
    while (signals_->queued.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < spin_until)
      std::this_thread::yield();
    std::unique_lock lock(signals_->mutex);
    for (;;) {
      if (stopping_) return false;
      const std::size_t in_flight = signals_->in_flight.load(std::memory_order_acquire);
      const bool slots = in_flight < options_.max_in_flight;
      if (!mailbox_.empty() && slots && circuit_state() != CircuitState::recovering) {
        const std::size_t room = std::min(options_.max_batch, options_.max_in_flight - in_flight);
        mailbox_.pop_batch(batch, room);
        signals_->queued.store(mailbox_.size(), std::memory_order_release);
        return true;
      }
      signals_->sleeping = true;
      if (in_flight > 0) {
        signals_->wants_slots.store(!slots, std::memory_order_release);
        signals_->wake.wait_for(lock, options_.watchdog_interval);
        signals_->sleeping = false;
        signals_->wants_slots.store(false, std::memory_order_release);
        return true;  // time for the watchdog
      }
      signals_->wake.wait(lock);
      signals_->sleeping = false;
    }
  }

  void run_loop() {
    std::vector<std::shared_ptr<OpRecord>> batch;
    while (next_batch(batch)) {
      if (!batch.empty()) process(batch);
      batch.clear();
      if (signals_->in_flight.load(std::memory_order_acquire) > 0 && circuit_state() == CircuitState::closed)
        watchdog();
    }
  }

  CircuitState circuit_state() const { return circuit_.load(std::memory_order_acquire); }

  // Poisoning after submission: host functions never fire after a context error, so the stream is
  // polled while operations are in flight ([R7]).
  void watchdog() {
    if (capturing_) return;  // querying a capturing stream would invalidate the capture
    const cudaError_t e = cudaStreamQuery(inc_->stream());
    if (e == cudaSuccess || e == cudaErrorNotReady) return;
    poison(gpu::make_error(e, fmt::format("watchdog: cudaStreamQuery(device {} actor stream)", ordinal_)), {});
  }

  // Validates buffers, takes leases and orders the stream after other streams' writes.
  Status prepare(OpRecord& op) {
    for (const auto& a : op.reads) {
      if (!a) return fail(errc::invalid_argument, fmt::format("request '{}': empty GpuRef among its reads", op.name));
      CUACTOR_TRY(a->access(ordinal_));
      if (a->lease_count() < 0)
        return fail(errc::invalid_argument,
                    fmt::format("request '{}': {} is leased for writing outside the actor", op.name, a->describe()));
    }
    for (const auto& a : op.writes) {
      if (!a) return fail(errc::invalid_argument, fmt::format("request '{}': empty GpuRef among its writes", op.name));
      CUACTOR_TRY(a->access(ordinal_));
      CUACTOR_TRY(a->acquire_op_lease());
      ++op.leases_held;
    }
    if (capturing_) return ok();  // a graph is ordered by the stream it is launched on
    for (const auto& a : op.reads) CUACTOR_TRY(a->wait_for_last_write(inc_->stream()));
    for (const auto& a : op.writes) CUACTOR_TRY(a->wait_for_last_write(inc_->stream()));
    return ok();
  }

  // Registers the operations enqueued so far and puts their completion host function on the stream.
  void flush(std::vector<std::shared_ptr<OpRecord>>& pending) {
    if (pending.empty()) return;
    // One write event per buffer and batch: others learn of a write only through its reply, which
    // comes after this point, so recording at the end of the batch orders them just as well.
    Status recorded = ok();
    for (DeviceAllocation* a : unrecorded_writes_)
      if (recorded) recorded = a->record_write(inc_->stream());
    unrecorded_writes_.clear();
    if (!recorded && classify(recorded.error().code()) == FailureClass::context_poisoned) {
      poison(recorded.error(), std::move(pending));
      pending.clear();
      return;
    }
    if (!recorded)
      log(LogLevel::warn, fmt::format("device {}: write tracking: {}", ordinal_, recorded.error().to_string()));
    const std::uint64_t id = next_request_id();
    const std::size_t n = pending.size();
    signals_->in_flight.fetch_add(n, std::memory_order_acq_rel);
    registry().add(id, signals_.get(), Batch{signals_, std::move(pending)});
    pending.clear();
    const cudaError_t e =
        cudaLaunchHostFunc(inc_->stream(), on_batch_done, reinterpret_cast<void*>(static_cast<std::uintptr_t>(id)));
    if (e == cudaSuccess) return;
    Error err = gpu::make_error(e, fmt::format("cudaLaunchHostFunc(device {} completion)", ordinal_));
    if (classify(err.code()) == FailureClass::context_poisoned) {
      poison(err, {});
      return;
    }
    if (auto b = registry().take(id)) {
      for (auto& op : b->ops) finish_error(*signals_, std::move(op), err);
      signals_->in_flight.fetch_sub(n, std::memory_order_acq_rel);
    }
  }

  void process(std::vector<std::shared_ptr<OpRecord>>& batch) {
    std::vector<std::shared_ptr<OpRecord>> pending;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      auto& op = batch[i];
      if (circuit_state() == CircuitState::open) {
        const Error e(errc::circuit_open,
                      fmt::format("device {}: request '{}' not run: the circuit is open", ordinal_, op->name));
        finish_error(*signals_, std::move(op), e);
        continue;
      }
      if (op->kind == OpKind::immediate) flush(pending);  // e.g. a capture must not swallow earlier completions
      Status st = prepare(*op);
      if (st) {
        OpContext ctx(*this, op.get());
        st = op->run(ctx);
      }
      if (st && op->kind == OpKind::stream && !capturing_)
        for (const auto& a : op->writes)
          if (std::find(unrecorded_writes_.begin(), unrecorded_writes_.end(), a.get()) == unrecorded_writes_.end())
            unrecorded_writes_.push_back(a.get());
      if (!st) {
        if (classify(st.error().code()) == FailureClass::context_poisoned) {
          // The rest of the batch was never submitted: it goes back to the head of the mailbox.
          std::vector<std::shared_ptr<OpRecord>> rest(std::make_move_iterator(batch.begin() + static_cast<long>(i) + 1),
                                                      std::make_move_iterator(batch.end()));
          {
            std::lock_guard lock(signals_->mutex);
            mailbox_.push_front(rest);
            signals_->queued.store(mailbox_.size(), std::memory_order_release);
          }
          pending.push_back(std::move(op));
          poison(st.error(), std::move(pending));
          return;
        }
        finish_error(*signals_, std::move(op), st.error());
        continue;
      }
      if (op->kind == OpKind::immediate) {
        refresh_capturing();
        finish(*signals_, std::move(op), {});
        continue;
      }
      if (capturing_) {
        hand_to_capture(*op);
        finish(*signals_, std::move(op), {});
        continue;
      }
      pending.push_back(std::move(op));
    }
    flush(pending);
  }

  void refresh_capturing() {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    capturing_ =
        cudaStreamIsCapturing(inc_->stream(), &status) == cudaSuccess && status == cudaStreamCaptureStatusActive;
    if (!capturing_) inc_->flush_deferred_frees();
    if (!capturing_ && !capture_listener_) capture_keep_alive_.clear();
  }

  void hand_to_capture(OpRecord& op) {
    CapturedOp captured{op.reads, op.writes, std::move(op.keep_alive)};
    op.keep_alive.clear();
    if (capture_listener_) {
      capture_listener_(std::move(captured));
      return;
    }
    // Nobody took ownership: keep everything until the actor's context goes away.
    for (auto& a : captured.reads) capture_keep_alive_.push_back(a);
    for (auto& a : captured.writes) capture_keep_alive_.push_back(a);
    for (auto& k : captured.keep_alive) capture_keep_alive_.push_back(std::move(k));
  }

  // [R7]: fail every in-flight operation once, bump the generation, keep the queue, then recover or open
  // the circuit ([R8], [R9]).
  void poison(const Error& cause, std::vector<std::shared_ptr<OpRecord>> unsubmitted) {
    log(LogLevel::error, fmt::format("device {}: context poisoned: {}", ordinal_, cause.to_string()));
    {
      std::lock_guard lock(signals_->mutex);
      circuit_.store(CircuitState::recovering, std::memory_order_release);
    }
    state_->advance_generation();  // every outstanding GpuRef is stale from here on
    poisonings_.fetch_add(1, std::memory_order_relaxed);
    const Error poisoned(errc::context_poisoned,
                         fmt::format("device {}: the context was poisoned while the request was in flight ({})",
                                     ordinal_, cause.message()));
    for (auto& batch : registry().take_owner(signals_.get())) {
      const std::size_t n = batch.ops.size();
      for (auto& op : batch.ops) finish_error(*signals_, std::move(op), poisoned);
      signals_->in_flight.fetch_sub(n, std::memory_order_acq_rel);
    }
    unrecorded_writes_.clear();
    for (auto& op : unsubmitted) finish_error(*signals_, std::move(op), poisoned);
    capturing_ = false;
    capture_listener_ = {};
    const bool tripped = breaker_.record(CircuitBreaker::Clock::now());
    Status recovered = fail(errc::circuit_open, fmt::format("device {}: in-process recovery disabled", ordinal_));
    if (tripped)
      recovered =
          fail(errc::circuit_open,
               fmt::format("device {}: more than {} poisonings within {} ms", ordinal_, options_.breaker.max_poisonings,
                           std::chrono::duration_cast<std::chrono::milliseconds>(options_.breaker.window).count()));
    else if (options_.recover_in_process)
      recovered = recover();
    if (!recovered) {
      open_circuit(recovered.error());
      return;
    }
    log(LogLevel::warn,
        fmt::format("device {}: recovered (reset + canary), generation {}", ordinal_, state_->generation()));
    std::lock_guard lock(signals_->mutex);
    circuit_.store(CircuitState::closed, std::memory_order_release);
  }

  // Reset + canary kernel on a fresh incarnation.
  Status recover() {
    std::lock_guard context(context_mutex_);
    context_dead_ = true;
    inc_->mark_lost();
    capture_keep_alive_.clear();
    inc_.reset();
    CUACTOR_TRY(gpu::check(cudaDeviceReset(), fmt::format("cudaDeviceReset(device {})", ordinal_)));
    CUACTOR_TRY(gpu::check(cudaSetDevice(ordinal_), fmt::format("cudaSetDevice({}) after reset", ordinal_)));
    auto inc = Incarnation::create(ordinal_, options_.stream_priority);
    if (!inc) return fail(inc.error());
    CUACTOR_TRY(run_canary(**inc));
    inc_ = std::move(*inc);
    context_dead_ = false;
    return ok();
  }

  Status run_canary(Incarnation& inc) {
    void* out = nullptr;
    const auto bytes = kernels::canary_elements * sizeof(std::uint32_t);
    CUACTOR_CUDA_TRY(cudaMallocFromPoolAsync(&out, bytes, inc.pool().get(), inc.stream()));
    const std::uint32_t seed = 0x5eed0000u ^ static_cast<std::uint32_t>(state_->generation());
    std::array<std::uint32_t, kernels::canary_elements> host{};
    Status st =
        gpu::check(kernels::launch_canary(static_cast<std::uint32_t*>(out), seed, inc.stream()), "canary kernel");
    if (st)
      st = gpu::check(cudaMemcpyAsync(host.data(), out, bytes, cudaMemcpyDeviceToHost, inc.stream()), "canary copy");
    (void)cudaFreeAsync(out, inc.stream());
    if (st) st = gpu::check(cudaStreamSynchronize(inc.stream()), "canary synchronize");
    CUACTOR_TRY(st);
    for (std::uint32_t i = 0; i < kernels::canary_elements; ++i)
      if (host[i] != kernels::canary_value(i, seed))
        return fail(errc::circuit_open, fmt::format("device {}: canary element {} is {:#x}, expected {:#x}", ordinal_,
                                                    i, host[i], kernels::canary_value(i, seed)));
    return ok();
  }

  void open_circuit(const Error& cause) {
    std::vector<std::shared_ptr<OpRecord>> queued;
    {
      std::lock_guard lock(signals_->mutex);
      circuit_.store(CircuitState::open, std::memory_order_release);
      queued = mailbox_.take_all();
      signals_->queued.store(0, std::memory_order_release);
    }
    state_->set_accepting_ops(false);
    if (inc_) {
      // The context is poisoned and will not be reset here: never touch its memory or handles again.
      std::lock_guard context(context_mutex_);
      context_dead_ = true;
      inc_->mark_lost();
    }
    log(LogLevel::error, fmt::format("device {}: circuit open: {}", ordinal_, cause.to_string()));
    const Error rejected(errc::circuit_open, fmt::format("device {}: the circuit opened before the request ran ({})",
                                                         ordinal_, cause.message()));
    for (auto& op : queued) finish_error(*signals_, std::move(op), rejected);
    if (options_.on_escalation) options_.on_escalation(ordinal_, Error(errc::circuit_open, cause.message()));
  }

  // Shutdown: wait (bounded) for in-flight work; fail what never finishes, exactly once.
  void drain_at_shutdown() {
    const auto deadline = std::chrono::steady_clock::now() + options_.shutdown_timeout;
    Error reason(errc::timeout,
                 fmt::format("device {}: in-flight work did not finish within the shutdown timeout of {} ms", ordinal_,
                             options_.shutdown_timeout.count()));
    while (inc_ && signals_->in_flight.load(std::memory_order_acquire) > 0 && circuit_state() != CircuitState::open) {
      const cudaError_t e = cudaStreamQuery(inc_->stream());
      if (e != cudaSuccess && e != cudaErrorNotReady) {
        reason = Error(errc::context_poisoned,
                       fmt::format("device {}: the context was poisoned while the request was in flight ({})", ordinal_,
                                   gpu::make_error(e, "cudaStreamQuery at shutdown").message()));
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    for (auto& batch : registry().take_owner(signals_.get())) {
      const std::size_t n = batch.ops.size();
      for (auto& op : batch.ops) finish_error(*signals_, std::move(op), reason);
      signals_->in_flight.fetch_sub(n, std::memory_order_acq_rel);
    }
  }

  const int ordinal_;
  const ActorOptions options_;
  const std::shared_ptr<DeviceState> state_;
  const std::shared_ptr<ActorSignals> signals_;

  // Guarded by signals_->mutex.
  Mailbox<std::shared_ptr<OpRecord>> mailbox_;
  std::atomic<CircuitState> circuit_{CircuitState::closed};  // written under the mutex, read anywhere
  bool stopping_ = false;

  std::atomic<std::uint64_t> poisonings_{0};
  std::atomic<std::uint64_t> rejected_full_{0};

  // Actor thread only (stats() reads memory under context_mutex_).
  mutable std::shared_mutex context_mutex_;
  bool context_dead_ = false;
  std::shared_ptr<Incarnation> inc_;
  CircuitBreaker breaker_;
  bool capturing_ = false;
  std::vector<DeviceAllocation*> unrecorded_writes_;  // written by pending (unflushed) operations
  CaptureListener capture_listener_;
  std::vector<std::shared_ptr<const void>> capture_keep_alive_;

  std::mutex join_mutex_;
  std::thread thread_;
};

void post_request(const std::shared_ptr<ActorCore>& core, std::shared_ptr<OpRecord> op) {
  if (!core) {
    boost::asio::post(completion_pool(), [op = std::move(op)]() mutable {
      OpRecord* raw = op.get();
      raw->complete(std::move(op), make_error_code(errc::device_shutting_down));
    });
    return;
  }
  core->post(std::move(op));
}

void cancel_request(const std::weak_ptr<ActorCore>& core, std::uint64_t id) noexcept {
  if (auto c = core.lock()) c->cancel(id);
}

bool on_internal_thread() noexcept {
  return t_internal_thread;
}
InternalThreadScope::InternalThreadScope() noexcept : previous_(t_internal_thread) {
  t_internal_thread = true;
}
InternalThreadScope::~InternalThreadScope() {
  t_internal_thread = previous_;
}

boost::asio::any_completion_executor completion_pool_executor() {
  return boost::asio::any_completion_executor(completion_pool().get_executor());
}

std::uint64_t next_request_id() noexcept {
  return g_next_id.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace detail

// OpContext.
int OpContext::device() const noexcept {
  return core_->device();
}
cudaStream_t OpContext::stream() const noexcept {
  return core_->stream();
}
cublasHandle_t OpContext::cublas() const noexcept {
  return core_->blas();
}
const gpu::MemPool& OpContext::pool() const noexcept {
  return core_->pool();
}
const std::shared_ptr<DeviceState>& OpContext::state() const noexcept {
  return core_->state();
}
std::uint64_t OpContext::generation() const noexcept {
  return core_->state()->generation();
}
bool OpContext::capturing() const noexcept {
  return core_->capturing();
}
void OpContext::keep_alive(std::shared_ptr<const void> object) {
  op_->keep_alive.push_back(std::move(object));
}
Result<std::shared_ptr<DeviceAllocation>> OpContext::allocate_bytes(std::size_t bytes) {
  return core_->allocate_bytes(bytes);
}
void OpContext::set_capture_listener(CaptureListener listener) {
  core_->set_capture_listener(std::move(listener));
}

// KernelArgs.
void KernelArgs::push_buffer(std::shared_ptr<DeviceAllocation> allocation, bool written) {
  const std::size_t offset = (storage_.size() + alignof(void*) - 1) / alignof(void*) * alignof(void*);
  storage_.resize(offset + sizeof(void*));
  slots_.push_back({offset, sizeof(void*), static_cast<int>(buffers_.size())});
  buffers_.emplace_back(std::move(allocation), written);
}

void KernelArgs::push_value(const void* value, std::size_t size, std::size_t align) {
  const std::size_t offset = (storage_.size() + align - 1) / align * align;
  storage_.resize(offset + size);
  std::memcpy(storage_.data() + offset, value, size);
  slots_.push_back({offset, size, -1});
}

// DeviceActor.
Result<DeviceActor> DeviceActor::create(int ordinal, ActorOptions options) {
  if (options.mailbox_capacity == 0 || options.max_in_flight == 0 || options.max_batch == 0)
    return fail(errc::invalid_argument,
                fmt::format("DeviceActor: mailbox_capacity={}, max_in_flight={}, max_batch={}: each must be >= 1",
                            options.mailbox_capacity, options.max_in_flight, options.max_batch));
  if (options.breaker.max_poisonings < 0)
    return fail(errc::invalid_argument,
                fmt::format("DeviceActor: breaker.max_poisonings={} must be >= 0", options.breaker.max_poisonings));
  CUACTOR_TRY(gpu::check_ordinal(ordinal));
  auto core = std::make_shared<detail::ActorCore>(ordinal, std::move(options));
  CUACTOR_TRY(core->start());
  return DeviceActor(std::move(core));
}

DeviceActor& DeviceActor::operator=(DeviceActor&& o) noexcept {
  if (this != &o) {
    if (core_) core_->shutdown();
    core_ = std::move(o.core_);
  }
  return *this;
}

DeviceActor::~DeviceActor() {
  if (core_) core_->shutdown();
}

int DeviceActor::device() const noexcept {
  return core_ ? core_->device() : -1;
}
std::shared_ptr<DeviceState> DeviceActor::state() const noexcept {
  return core_ ? core_->state() : nullptr;
}
DeviceStats DeviceActor::stats() const {
  return core_ ? core_->stats() : DeviceStats{};
}
void DeviceActor::shutdown() {
  if (core_) core_->shutdown();
}

Status DeviceActor::copy_checked(OpContext& ctx, void* dst, std::size_t dst_bytes, const void* src, std::size_t bytes,
                                 std::string_view what) {
  if (bytes > dst_bytes)
    return fail(errc::invalid_argument,
                fmt::format("{}: {} bytes do not fit the {}-byte destination", what, bytes, dst_bytes));
  if (bytes == 0) return ok();
  return gpu::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx.stream()),
                     fmt::format("{}: cudaMemcpyAsync({} bytes)", what, bytes));
}

Status DeviceActor::launch_kernel(OpContext& ctx, const gpu::Kernel& kernel, const LaunchShape& shape,
                                  KernelArgs& args) {
  auto& storage = args.storage();
  const auto& slots = args.slots();
  std::vector<void*> pointers(slots.size());
  std::vector<std::size_t> sizes(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const auto& slot = slots[i];
    if (slot.buffer >= 0) {
      void* device_ptr = args.buffers()[static_cast<std::size_t>(slot.buffer)].first->data();
      std::memcpy(storage.data() + slot.offset, &device_ptr, sizeof(void*));
    }
    pointers[i] = storage.data() + slot.offset;
    sizes[i] = slot.size;
  }
  gpu::LaunchConfig config{shape.grid, shape.block, shape.shared_bytes, ctx.stream()};
  // Explicit spans: a vector would select launch()'s variadic typed overload.
  return gpu::launch(kernel, config, std::span<void* const>(pointers), std::span<const std::size_t>(sizes));
}

Status enqueue_fill(void* dst, std::size_t count, const void* value, std::size_t element_bytes, cudaStream_t stream) {
  if (element_bytes != 1 && element_bytes != 2 && element_bytes != 4 && element_bytes != 8 && element_bytes != 16)
    return fail(errc::unsupported,
                fmt::format("fill: element size {} bytes; supported: 1, 2, 4, 8, 16", element_bytes));
  return gpu::check(kernels::launch_fill(dst, count, value, element_bytes, stream),
                     fmt::format("fill({} elements of {} bytes)", count, element_bytes));
}

Status enqueue_gemm(OpContext& ctx, const GemmDesc& d) {
  if (d.m < 0 || d.n < 0 || d.k < 0)
    return fail(errc::invalid_argument, fmt::format("gemm: m={}, n={}, k={}: dimensions must be >= 0", d.m, d.n, d.k));
  auto check_operand = [&](const char* name, const std::shared_ptr<DeviceAllocation>& buf, int rows, int cols,
                           int ld) -> Status {
    if (ld < std::max(1, rows))
      return fail(
          errc::invalid_argument,
          fmt::format("gemm: ld{}={} is smaller than the {} rows of op-free {} (column-major)", name, ld, rows, name));
    const std::size_t needed =
        cols == 0
            ? 0
            : (static_cast<std::size_t>(ld) * static_cast<std::size_t>(cols - 1) + static_cast<std::size_t>(rows));
    if (needed * d.element_bytes > buf->bytes())
      return fail(errc::invalid_argument,
                  fmt::format("gemm: {} needs {} elements ({}x{}, ld={}) but its buffer holds {}", name, needed, rows,
                              cols, ld, buf->bytes() / d.element_bytes));
    return ok();
  };
  CUACTOR_TRY(check_operand("a", d.a, d.transpose_a ? d.k : d.m, d.transpose_a ? d.m : d.k, d.lda));
  CUACTOR_TRY(check_operand("b", d.b, d.transpose_b ? d.n : d.k, d.transpose_b ? d.k : d.n, d.ldb));
  CUACTOR_TRY(check_operand("c", d.c, d.m, d.n, d.ldc));
  if (d.m == 0 || d.n == 0) return ok();
  const cublasOperation_t op_a = d.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = d.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const std::string what = fmt::format("cublasGemmEx(m={}, n={}, k={}, device {})", d.m, d.n, d.k, ctx.device());
  if (d.type == CUDA_R_64F) {
    const double alpha = d.alpha, beta = d.beta;
    return gpu::check(
        cublasGemmEx(ctx.cublas(), op_a, op_b, d.m, d.n, d.k, &alpha, d.a->data(), d.type, d.lda, d.b->data(), d.type,
                     d.ldb, &beta, d.c->data(), d.type, d.ldc, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT),
        what);
  }
  const float alpha = static_cast<float>(d.alpha), beta = static_cast<float>(d.beta);
  return gpu::check(
      cublasGemmEx(ctx.cublas(), op_a, op_b, d.m, d.n, d.k, &alpha, d.a->data(), d.type, d.lda, d.b->data(), d.type,
                   d.ldb, &beta, d.c->data(), d.type, d.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      what);
}

}  // namespace cuactor::runtime

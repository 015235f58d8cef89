#include "runtime/actor_loop.hpp"

#include <fmt/format.h>

#include <chrono>
#include <future>

#include "cuactor/core/log.hpp"
#include "cuactor/core/no_throw.hpp"
#include "cuactor/core/nvtx.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "runtime/completion_pool.hpp"
#include "runtime/spin.hpp"

namespace cuactor::runtime::detail {

ActorLoop::ActorLoop(int ordinal, ActorOptions options)
    : ordinal_(ordinal),
      options_(std::move(options)),
      state_(std::make_shared<DeviceState>(ordinal)),
      counters_(std::make_shared<ReplyCounters>()),
      supervisor_(ordinal, options_.breaker, options_.on_escalation),
      writes_(state_),
      mailbox_(options_.mailbox_capacity) {}

ActorLoop::~ActorLoop() {
  shutdown();
}

Status ActorLoop::start() {
  // Shared: the thread may still be inside set_value() when start() returns.
  auto ready = std::make_shared<std::promise<Status>>();
  auto started = ready->get_future();
  thread_ = std::thread([this, ready] { thread_main(*ready); });
  Status st = started.get();
  if (!st) thread_.join();
  return st;
}

void ActorLoop::post(std::shared_ptr<OpRecord> op) {
  op->span = nvtx::Span::start(op->name.data(), op->id);  // names are literals: NUL-terminated
  Error rejection;
  bool accepted = false, idle = false;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      rejection =
          Error(errc::device_shutting_down,
                fmt::format("device {}: request '{}' rejected: the actor is shutting down", ordinal_, op->name));
    } else if (supervisor_.state() == CircuitState::open) {
      rejection = Error(errc::circuit_open,
                        fmt::format("device {}: request '{}' rejected: the circuit is open", ordinal_, op->name));
    } else if (!mailbox_.push(op)) {  // moves `op` away on success
      rejected_full_.fetch_add(1, std::memory_order_relaxed);
      rejection = Error(errc::queue_full, fmt::format("device {}: request '{}' rejected: mailbox full ({} queued)",
                                                      ordinal_, op->name, mailbox_.capacity()));
    } else {
      if (sleeping_) wake_.notify_one();
      accepted = true;
      idle = idle_;
    }
  }
  if (accepted) {
    // After an idle spell the completion pool sleeps too, and a wake-up costs tens of microseconds on a virtual
    // machine: the thread that will deliver the reply (early delivery) wakes alongside the actor's, not after the
    // launch. Outside mutex_, which the woken actor needs first.
    if (idle) completion_pool().prime();
    return;
  }
  finish_error_later(counters_, std::move(op), std::move(rejection));
}

void ActorLoop::cancel(std::uint64_t id) noexcept {
  std::shared_ptr<OpRecord> op =
      mailbox_.remove_first([id](const std::shared_ptr<OpRecord>& o) { return o->id == id; });
  if (op)
    finish_error_later(counters_, std::move(op),
                       Error(errc::cancelled, fmt::format("request #{} cancelled before it ran", id)));
}

DeviceStats ActorLoop::stats() const {
  DeviceStats s;
  s.device = ordinal_;
  s.queue_depth = mailbox_.size();
  s.circuit = supervisor_.state();
  s.accepting_ops = state_->accepting_ops();
  s.generation = state_->generation();
  s.completed = counters_->completed.load(std::memory_order_relaxed);
  s.failed = counters_->failed.load(std::memory_order_relaxed);
  s.poisonings = supervisor_.poisonings();
  s.rejected_full = rejected_full_.load(std::memory_order_relaxed);
  s.dispatch_ns = dispatch_ns_.load(std::memory_order_relaxed);
  s.batches = batches_.load(std::memory_order_relaxed);
  // Never query a context while the actor resets it.
  std::shared_lock context(context_mutex_, std::try_to_lock);
  if (context.owns_lock() && completion_) {
    s.in_flight = completion_->in_flight();
    s.completion = completion_->mode();
  }
  if (s.circuit == CircuitState::closed && context.owns_lock() && !context_dead_) {
    if (auto mem = gpu::memory_info(ordinal_)) {
      s.memory_known = true;
      s.free_bytes = mem->free;
      s.total_bytes = mem->total;
    }
  }
  return s;
}

void ActorLoop::shutdown() noexcept {
  std::vector<std::shared_ptr<OpRecord>> queued;
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      stopping_ = true;
      attention_.store(true, std::memory_order_release);
      state_->set_accepting_ops(false);  // first: every handle is stale from here on
      queued = mailbox_.take_all();      // nobody can post any more
      wake_.notify_one();
    }
  }
  for (auto& op : queued) {
    const Error e(errc::device_shutting_down,
                  fmt::format("device {}: request '{}' not run: the actor shut down", ordinal_, op->name));
    finish_error_later(counters_, std::move(op), e);
  }
  std::lock_guard join_lock(join_mutex_);
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

Result<std::shared_ptr<DeviceAllocation>> ActorLoop::allocate_bytes(std::size_t bytes) {
  void* ptr = nullptr;
  if (bytes > 0) {
    const cudaError_t e = cudaMallocFromPoolAsync(&ptr, bytes, inc_->pool().get(), inc_->stream());
    if (e != cudaSuccess) {
      Error err = gpu::make_error(e, fmt::format("cudaMallocFromPoolAsync({} bytes on device {})", bytes, ordinal_));
      if (e == cudaErrorMemoryAllocation) err = Error(errc::out_of_memory, err.message());
      return fail(std::move(err));
    }
  }
  const bool capturing = inc_->capture().capturing();
  // Memory allocated inside a capture is the graph's: its free must be recorded in the same capture.
  if (ptr && capturing) inc_->capture().note_allocation(ptr);
  auto allocation = std::make_shared<DeviceAllocation>(ptr, bytes, state_, inc_);
  // Other streams must not use the memory before its stream-ordered allocation happened.
  if (bytes > 0 && !capturing) CUACTOR_TRY(allocation->record_write(inc_->stream()));
  return allocation;
}

Status ActorLoop::begin_incarnation() {
  auto inc = Incarnation::create(ordinal_, options_.stream_priority);
  if (!inc) return fail(inc.error());
  CUACTOR_TRY(completion_->attach(*inc));
  inc_ = std::move(*inc);
  return ok();
}

void ActorLoop::thread_main(std::promise<Status>& ready) {
  const InternalThreadScope internal;
  completion_ = std::make_unique<Completion>(ordinal_, options_.poller, options_.watchdog_interval, counters_,
                                             Completion::Hooks{[this](Error cause) {
                                                                 std::lock_guard lock(mutex_);
                                                                 poison_report_ = std::move(cause);
                                                                 attention_.store(true, std::memory_order_release);
                                                                 wake_.notify_one();
                                                               },
                                                               [this] {
                                                                 if (!wants_slots_.load(std::memory_order_seq_cst))
                                                                   return;
                                                                 std::lock_guard lock(mutex_);
                                                                 wake_.notify_one();
                                                               }});
  auto init = [&]() -> Status {
    CUACTOR_TRY(gpu::check_ordinal(ordinal_));
    CUACTOR_TRY(gpu::check(cudaSetDevice(ordinal_), fmt::format("cudaSetDevice({})", ordinal_)));
    return begin_incarnation();
  }();
  if (!init) {
    completion_.reset();
    ready.set_value(init);
    return;
  }
  state_->advance_generation();  // generation 1: the first usable context
  state_->set_accepting_ops(true);
  ready.set_value(ok());
  std::vector<std::shared_ptr<OpRecord>> batch;
  while (next_batch(batch)) {
    if (!batch.empty()) {
      const auto t0 = std::chrono::steady_clock::now();
      process(batch);
      const auto spent = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
      dispatch_ns_.fetch_add(static_cast<std::uint64_t>(spent.count()), std::memory_order_relaxed);
    }
    batch.clear();
  }
  drain_at_shutdown();
  // shutdown() answered what was queued then; requests put back by a poisoning since are answered here.
  for (auto& op : mailbox_.take_all()) {
    Error e(errc::device_shutting_down,
            fmt::format("device {}: request '{}' not run: the actor shut down", ordinal_, op->name));
    finish_error(*counters_, std::move(op), e);
  }
  std::unique_ptr<Completion> completion;
  {
    std::lock_guard context(context_mutex_);
    completion = std::move(completion_);
    if (inc_) inc_->capture().reset();
    inc_.reset();
  }
}

bool ActorLoop::next_batch(std::vector<std::shared_ptr<OpRecord>>& batch) {
  const auto deadline = std::chrono::steady_clock::now() + options_.idle_spin;
  // Where to take requests now (slots on the stream, no recovery running); only this thread changes the
  // answer, except for slots that the poller frees.
  auto room = [&]() -> std::size_t {
    const std::size_t in_flight = completion_->in_flight();
    if (in_flight >= options_.max_in_flight || supervisor_.state() == CircuitState::recovering) return 0;
    return std::min(options_.max_batch, options_.max_in_flight - in_flight);
  };
  int empty_pops = 0;  // pops that found nothing though a push had begun (its poster is descheduled?)
  for (;;) {
    // Fast path, without mutex_: take what is queued, else spin a little for more (a pause, not a yield:
    // a yield is a system call, and on a virtual machine it costs as much as the wait it saves).
    if (!attention_.load(std::memory_order_acquire)) {
      if (const std::size_t n = room(); n > 0) {
        mailbox_.pop_batch(batch, n);
        if (!batch.empty()) return true;
        if (spin_until([&] { return mailbox_.maybe_nonempty() || attention_.load(std::memory_order_acquire); },
                       deadline) &&
            ++empty_pops < 256)
          continue;
      }
    }
    // Slow path: reports, the stop, no slots, or nothing to do for a while.
    std::unique_lock lock(mutex_);
    if (poison_report_) {
      Error cause = std::move(*poison_report_);
      poison_report_.reset();
      attention_.store(stopping_, std::memory_order_release);
      lock.unlock();
      poison(cause, {});
      continue;
    }
    if (stopping_) return false;
    const std::size_t n = room();
    if (n > 0) {
      mailbox_.pop_batch(batch, n);  // exact here: no post is in progress while mutex_ is held
      if (!batch.empty()) return true;
    }
    if (n == 0) {
      // The poller frees slots and then reads wants_slots_ (both sequentially consistent, as here): either
      // it sees the flag and wakes this thread, or the second look at the slots sees what it freed.
      wants_slots_.store(true, std::memory_order_seq_cst);
      if (room() == 0) {
        sleeping_ = true;
        wake_.wait_for(lock, options_.watchdog_interval);
        sleeping_ = false;
      }
      wants_slots_.store(false, std::memory_order_relaxed);
      continue;
    }
    sleeping_ = idle_ = true;
    wake_.wait(lock);
    sleeping_ = idle_ = false;
  }
}

void ActorLoop::process(std::vector<std::shared_ptr<OpRecord>>& batch) {
  std::vector<std::shared_ptr<OpRecord>> pending;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    // Other threads wrote the next records and their buffers' handles last: their cache misses overlap
    // this request's launch. The record after next is asked for now, so that the next one's prefetch()
    // (a virtual call) finds its record loaded.
    if (i + 2 < batch.size()) prefetch_bytes(batch[i + 2].get(), 128);
    if (i + 1 < batch.size()) batch[i + 1]->prefetch();
    auto& op = batch[i];
    if (supervisor_.state() == CircuitState::open) {
      // The message first: the call's arguments may be evaluated in any order, the move included.
      Error e(errc::circuit_open,
              fmt::format("device {}: request '{}' not run: the circuit is open", ordinal_, op->name));
      finish_error(*counters_, std::move(op), e);
      continue;
    }
    Status st = ok();
    nvtx::Range range(op->name.data(), op->id);  // enqueueing on the actor's thread
    if (op->kind == OpKind::immediate) {
      flush(pending);  // e.g. a capture must not swallow earlier completions
      // Captures begin and end here: nobody may free or query the stream meanwhile.
      std::lock_guard gate(inc_->capture().change_gate());
      st = writes_.prepare(*op, inc_->stream(), inc_->capture().capturing());
      if (st) {
        OpContext ctx(*this, op.get());
        st = op->run(ctx);
      }
      inc_->capture().refresh();
    } else {
      const bool capturing = inc_->capture().capturing();
      st = writes_.prepare(*op, inc_->stream(), capturing);
      if (st) {
        OpContext ctx(*this, op.get());
        st = op->run(ctx);
      }
      if (st && !capturing) writes_.note_written(*op);
    }
    if (!st) {
      if (classify(st.error().code()) == FailureClass::context_poisoned) {
        // The rest of the batch was never submitted: it goes back to the head of the mailbox.
        std::vector<std::shared_ptr<OpRecord>> rest(std::make_move_iterator(batch.begin() + static_cast<long>(i) + 1),
                                                    std::make_move_iterator(batch.end()));
        mailbox_.push_front(rest);
        pending.push_back(std::move(op));
        poison(st.error(), std::move(pending));
        return;
      }
      finish_error(*counters_, std::move(op), st.error());
      continue;
    }
    if (op->kind == OpKind::immediate) {
      finish(*counters_, std::move(op), {});
    } else if (inc_->capture().capturing()) {
      inc_->capture().hand_over(*op);
      finish(*counters_, std::move(op), {});  // recorded, not run: replies at once
    } else {
      pending.push_back(std::move(op));
    }
  }
  flush(pending);
}

void ActorLoop::flush(std::vector<std::shared_ptr<OpRecord>>& pending) {
  if (pending.empty()) return;
  // Write events go after the completion marker, off the round trip's critical path; the batch is
  // registered (and so answerable) only once they are enqueued too.
  Status submitted = completion_->submit(pending, [this]() -> Status {
    Status recorded = writes_.record_pending(inc_->stream());
    if (recorded || classify(recorded.error().code()) == FailureClass::context_poisoned) return recorded;
    log(LogLevel::warn, fmt::format("device {}: write tracking: {}", ordinal_, recorded.error().to_string()));
    return ok();
  });
  if (submitted) {
    batches_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (classify(submitted.error().code()) == FailureClass::context_poisoned) {
    poison(submitted.error(), std::move(pending));
  } else {
    writes_.clear();  // the marker failed before the write events: their buffers may go with the replies
    fail_all(std::move(pending), submitted.error());
  }
  pending.clear();
}

void ActorLoop::fail_all(std::vector<std::shared_ptr<OpRecord>> ops, const Error& error) {
  for (auto& op : ops) finish_error(*counters_, std::move(op), error);
}

void ActorLoop::poison(const Error& cause, std::vector<std::shared_ptr<OpRecord>> unsubmitted) {
  log(LogLevel::error, fmt::format("device {}: context poisoned: {}", ordinal_, cause.to_string()));
  supervisor_.begin_recovery();
  state_->advance_generation();  // every outstanding GpuRef is stale from here on
  completion_->detach();         // the poller stops: what is in flight is answered below, once
  const Error poisoned(errc::context_poisoned,
                       fmt::format("device {}: the context was poisoned while the request was in flight ({})", ordinal_,
                                   cause.message()));
  fail_all(completion_->take_all(), poisoned);
  fail_all(std::move(unsubmitted), poisoned);
  writes_.clear();
  {
    std::lock_guard context(context_mutex_);
    context_dead_ = true;
    if (inc_) inc_->mark_lost();
  }
  if (options_.on_poisoned)
    (void)result_or_error("on_poisoned hook", [&]() -> Status {
      options_.on_poisoned(ordinal_, poisoned);
      return ok();
    });
  const Status recovered = supervisor_.recover(options_.recover_in_process ? this : nullptr);
  if (!recovered) {
    open_circuit(recovered.error());
    return;
  }
  log(LogLevel::warn,
      fmt::format("device {}: recovered (reset + canary), generation {}", ordinal_, state_->generation()));
}

Status ActorLoop::recover() {
  std::lock_guard context(context_mutex_);
  inc_.reset();
  CUACTOR_TRY(gpu::check(cudaDeviceReset(), fmt::format("cudaDeviceReset(device {})", ordinal_)));
  CUACTOR_TRY(gpu::check(cudaSetDevice(ordinal_), fmt::format("cudaSetDevice({}) after reset", ordinal_)));
  auto inc = Incarnation::create(ordinal_, options_.stream_priority);
  if (!inc) return fail(inc.error());
  CUACTOR_TRY((*inc)->run_canary(0x5eed0000u ^ static_cast<std::uint32_t>(state_->generation())));
  CUACTOR_TRY(completion_->attach(*inc));
  inc_ = std::move(*inc);
  context_dead_ = false;
  return ok();
}

void ActorLoop::open_circuit(const Error& cause) {
  std::vector<std::shared_ptr<OpRecord>> queued;
  supervisor_.open(cause);
  {
    std::lock_guard lock(mutex_);  // posters check the circuit under it: none can slip in after this
    queued = mailbox_.take_all();
  }
  state_->set_accepting_ops(false);
  fail_all(std::move(queued),
           Error(errc::circuit_open,
                 fmt::format("device {}: the circuit opened before the request ran ({})", ordinal_, cause.message())));
}

void ActorLoop::drain_at_shutdown() {
  const auto deadline = std::chrono::steady_clock::now() + options_.shutdown_timeout;
  Error reason(errc::timeout,
               fmt::format("device {}: in-flight work did not finish within the shutdown timeout of {} ms", ordinal_,
                           options_.shutdown_timeout.count()));
  while (completion_->in_flight() > 0 && supervisor_.state() != CircuitState::open) {
    {
      std::lock_guard lock(mutex_);
      if (poison_report_) {
        reason = Error(errc::context_poisoned,
                       fmt::format("device {}: the context was poisoned while the request was in flight ({})", ordinal_,
                                   poison_report_->message()));
        break;
      }
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (completion_->in_flight() == 0) return;
  completion_->detach();
  fail_all(completion_->take_all(), reason);
}

}  // namespace cuactor::runtime::detail

#include "runtime/completion.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>

#include "cuactor/core/driver_api.hpp"
#include "cuactor/core/log.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/graph.hpp"
#include "runtime/completion_pool.hpp"
#include "runtime/incarnation.hpp"
#include "runtime/spin.hpp"

namespace cuactor::runtime::detail {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kWordBytes = 4096;
/// How long a completion-pool thread watches a word for an early delivery: as long as it would spin idle.
constexpr std::chrono::microseconds kEarlyWatch{50};

/// True when `seq` was reached by `observed` (serial-number arithmetic: the words wrap).
inline bool reached(std::uint32_t observed, std::uint32_t seq) noexcept {
  return static_cast<std::int32_t>(observed - seq) >= 0;
}

}  // namespace

Completion::WordBlock::~WordBlock() {
  if (registered.load(std::memory_order_acquire)) {
    // The last owner may be a completion-pool thread: its current device may be another, and a capture in
    // global mode elsewhere must not see this call. Memory still registered is never freed (it is leaked):
    // a later registration at the same address would fail.
    const gpu::ScopedCaptureMode relaxed(gpu::CaptureMode::relaxed);
    auto scoped = gpu::ScopedDevice::make(ordinal);
    if (!scoped || cudaHostUnregister(word) != cudaSuccess) return;
  }
  std::free(word);
}

Completion::Completion(int ordinal, const PollerOptions& options, std::chrono::microseconds watchdog,
                       std::shared_ptr<ReplyCounters> counters, Hooks hooks)
    : ordinal_(ordinal),
      options_(options),
      watchdog_(watchdog),
      counters_(std::move(counters)),
      hooks_(std::move(hooks)),
      thread_([this] { run(); }) {}

Completion::~Completion() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    wake_.notify_one();
  }
  thread_.join();
  std::lock_guard lock(mutex_);
  if (inc_ && !inc_->context_lost()) {
    for (cudaEvent_t e : free_events_) (void)cudaEventDestroy(e);
  } else if (word_block_) {
    word_block_->registered.store(false, std::memory_order_release);
  }
  // The words go with their last owner: here, or an early delivery still watching one.
}

Status Completion::attach(std::shared_ptr<Incarnation> inc) {
  std::lock_guard lock(mutex_);
  if (!batches_.empty()) return fail(errc::internal, "Completion::attach with operations in flight");
  inc_ = std::move(inc);
  if (word_block_) retired_words_.push_back(std::move(word_block_));
  word_ = nullptr;
  word_device_ = 0;
  free_events_.clear();
  next_seq_ = 0;
  CompletionMode mode = options_.mode;
  if (mode == CompletionMode::sequence_word && !driver_api().stream_write_value32) mode = CompletionMode::event_query;
  if (mode == CompletionMode::sequence_word) {
    // Plain host memory registered with the context (not cudaHostAlloc): a reset of the context takes
    // the registration but never the memory, so a poller still reading it after a poisoning is safe.
    void* host = std::aligned_alloc(kWordBytes, kWordBytes);
    if (!host) return fail(errc::out_of_memory, "completion word: aligned_alloc(4096) failed");
    if (const cudaError_t e = cudaHostRegister(host, kWordBytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
        e != cudaSuccess) {
      std::free(host);
      return fail(gpu::make_error(e, fmt::format("cudaHostRegister(completion word of device {})", ordinal_)));
    }
    word_block_ = std::make_shared<WordBlock>(ordinal_, static_cast<std::uint32_t*>(host));
    word_ = word_block_->word;
    std::atomic_ref<std::uint32_t>(*word_).store(0, std::memory_order_release);
    void* device = nullptr;
    CUACTOR_CUDA_TRY(cudaHostGetDevicePointer(&device, host, 0));
    word_device_ = reinterpret_cast<CUdeviceptr>(device);
    // Probe once: some platforms reject stream memory operations; fall back to events there.
    const CUresult probe = driver_api().stream_write_value32(inc_->stream(), word_device_, 0, 0);
    if (probe != CUDA_SUCCESS) {
      log(LogLevel::warn, fmt::format("device {}: cuStreamWriteValue32 unavailable ({}); completion by event queries",
                                      ordinal_, gpu::make_error(probe, "probe").message()));
      mode = CompletionMode::event_query;
    } else {
      CUACTOR_CUDA_TRY(cudaStreamSynchronize(inc_->stream()));
    }
  }
  mode_.store(mode, std::memory_order_release);
  halted_ = false;
  last_watchdog_ = Clock::now();
  return ok();
}

void Completion::detach() noexcept {
  std::lock_guard query(query_mutex_);  // the poller's stream query must not overlap a reset
  std::lock_guard lock(mutex_);
  halted_ = true;
  // The word's registration and the events belonged to the lost context: abandoned. The word's host
  // memory stays allocated because the poller (and an early delivery) may still read it.
  if (word_block_) {
    word_block_->registered.store(false, std::memory_order_release);
    retired_words_.push_back(std::move(word_block_));
  }
  word_device_ = 0;
  free_events_.clear();
}

Status Completion::submit(std::vector<std::shared_ptr<OpRecord>>& ops, const std::function<Status()>& after_marker) {
  if (ops.empty()) return ok();
  Batch batch;
  batch.submitted = Clock::now();
  {
    std::lock_guard lock(mutex_);
    if (halted_ || !inc_) return fail(errc::internal, "Completion::submit while detached");
    const cudaStream_t stream = inc_->stream();
    if (mode() == CompletionMode::sequence_word) {
      batch.seq = next_seq_ + 1;
      const CUresult r = driver_api().stream_write_value32(stream, word_device_, batch.seq, 0);
      if (r != CUDA_SUCCESS)
        return fail(gpu::make_error(r, fmt::format("cuStreamWriteValue32(device {} completion)", ordinal_)));
      next_seq_ = batch.seq;
    } else {
      if (free_events_.empty()) {
        cudaEvent_t e = nullptr;
        CUACTOR_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        free_events_.push_back(e);
      }
      batch.event = free_events_.back();
      CUACTOR_TRY(gpu::check(cudaEventRecord(batch.event, stream),
                             [&] { return fmt::format("cudaEventRecord(device {} completion)", ordinal_); }));
      free_events_.pop_back();
    }
  }
  // The marker is on its way to the device; the batch is not registered yet, so nothing of it can be
  // answered before `after_marker` has enqueued its part. (Only the actor's thread submits.)
  if (after_marker) {
    if (Status st = after_marker(); !st) {
      if (batch.event) recycle_event(batch.event);
      return st;
    }
  }
  // Registered even if the watchdog halted the poller meanwhile: the actor, told of the poisoning,
  // fails every registered operation exactly once (take_all()).
  std::lock_guard lock(mutex_);
  const std::size_t n = ops.size();
  batch.op_count = n;
  batch.ops = std::move(ops);
  ops.clear();
  batches_.push_back(std::move(batch));
  in_flight_.fetch_add(n, std::memory_order_acq_rel);
  batches_pending_.fetch_add(1, std::memory_order_release);
  deliver_early_locked(batches_.back());
  if (sleeping_) wake_.notify_one();
  return ok();
}

void Completion::deliver_early_locked(Batch& batch) noexcept {
  if (batch.event || halted_ || batches_.size() != 1 || !word_block_) return;
  std::shared_ptr<EarlyDelivery> early;
  try {
    if (!completion_pool().has_idle_spinner()) return;
    early = make_record<EarlyDelivery>();
  } catch (...) {
    return;  // no memory (or no pool thread): the poller answers the batch
  }
  early->seq = batch.seq;
  early->word = word_block_;
  early->counters = counters_;
  early->ops = std::move(batch.ops);
  batch.ops.clear();
  batch.early = early;
  auto watch = [early] {
    EarlyDelivery& e = *early;
    auto done = [&] { return reached(observed(e.word->word), e.seq); };
    e.watching.store(true, std::memory_order_seq_cst);
    bool finished = spin_until(done, Clock::now() + kEarlyWatch);
    // After this store the poller claims the batch itself, unless it saw it finish while this thread
    // watched: then the check below sees it finished too (both sequentially consistent) and answers it.
    e.watching.store(false, std::memory_order_seq_cst);
    if (!finished) finished = done();
    if (!finished || !e.claim()) return;
    for (auto& op : e.ops) finish(*e.counters, std::move(op), {});
  };
  try {
    completion_pool().post(std::move(watch));
  } catch (...) {
    batch.ops = std::move(early->ops);  // never posted: the poller answers the batch
    batch.early.reset();
  }
}

std::vector<std::shared_ptr<OpRecord>> Completion::take_all() {
  std::deque<Batch> taken;
  {
    std::lock_guard lock(mutex_);
    taken.swap(batches_);
    batches_pending_.store(0, std::memory_order_release);
  }
  std::vector<std::shared_ptr<OpRecord>> ops;
  for (auto& b : taken) {
    in_flight_.fetch_sub(b.op_count, std::memory_order_acq_rel);
    // An early delivery that claimed its batch saw it finish: answered as done, not taken here.
    if (b.early && b.early->claim()) b.ops = std::move(b.early->ops);
    for (auto& op : b.ops) ops.push_back(std::move(op));
    // Events of a lost context are abandoned; otherwise they go back to the pool.
    if (b.event) recycle_event(b.event);
  }
  return ops;
}

std::uint32_t Completion::observed(std::uint32_t* word) noexcept {
  return std::atomic_ref<std::uint32_t>(*word).load(std::memory_order_seq_cst);  // see deliver_early_locked()
}

void Completion::recycle_event(cudaEvent_t e) noexcept {
  std::lock_guard lock(mutex_);
  if (!halted_) free_events_.push_back(e);
}

void Completion::collect_finished_locked(std::vector<Batch>& done) {
  if (halted_) return;
  if (mode() == CompletionMode::sequence_word) {
    const std::uint32_t seen = observed(word_);
    while (!batches_.empty() && reached(seen, batches_.front().seq)) {
      done.push_back(std::move(batches_.front()));
      batches_.pop_front();
    }
    return;
  }
  // Event queries are CUDA calls: never while a capture of the stream may be starting or active.
  if (inc_->capture().capturing()) return;
  std::unique_lock gate(inc_->capture().change_gate(), std::try_to_lock);
  if (!gate.owns_lock()) return;
  while (!batches_.empty()) {
    const cudaError_t e = cudaEventQuery(batches_.front().event);
    if (e != cudaSuccess) break;  // not ready, or an error the watchdog will classify
    free_events_.push_back(batches_.front().event);
    done.push_back(std::move(batches_.front()));
    batches_.pop_front();
  }
}

bool Completion::check_poisoned(Clock::time_point now) {
  std::shared_ptr<Incarnation> inc;
  {
    std::lock_guard lock(mutex_);
    if (halted_ || batches_.empty() || now - batches_.front().submitted < watchdog_ || now - last_watchdog_ < watchdog_)
      return false;
    last_watchdog_ = now;
    inc = inc_;
  }
  // Querying a capturing stream would invalidate the capture: skip while one may be active.
  if (inc->capture().capturing()) return false;
  std::unique_lock gate(inc->capture().change_gate(), std::try_to_lock);
  if (!gate.owns_lock() || inc->capture().capturing()) return false;
  std::unique_lock query(query_mutex_);
  {
    std::lock_guard lock(mutex_);
    if (halted_) return false;  // detached meanwhile: the stream may be gone
  }
  const cudaError_t e = cudaStreamQuery(inc->stream());
  query.unlock();
  gate.unlock();
  if (e == cudaSuccess || e == cudaErrorNotReady) return false;
  Error cause = gpu::make_error(e, fmt::format("watchdog: cudaStreamQuery(device {} actor stream)", ordinal_));
  if (classify(cause.code()) != FailureClass::context_poisoned) {
    log(LogLevel::warn, fmt::format("device {}: {}", ordinal_, cause.to_string()));
    return false;
  }
  {
    std::lock_guard lock(mutex_);
    if (halted_) return true;  // the actor found it first
    halted_ = true;            // nothing completes from here on: the actor fails it all, exactly once
  }
  hooks_.on_poisoned(std::move(cause));
  return true;
}

void Completion::run() noexcept {
  const InternalThreadScope internal;
  std::vector<Batch> done;
  auto last_progress = Clock::now();
  auto backoff = std::chrono::microseconds(0);
  std::unique_lock lock(mutex_);
  while (!stop_) {
    if (halted_ || batches_.empty()) {
      // Idle: keep polling a little (the next request usually follows at once), then block.
      lock.unlock();
      const auto until = Clock::now() + options_.idle_spin;
      (void)spin_until([&] { return batches_pending_.load(std::memory_order_acquire) != 0; }, until);
      lock_spinning(lock);
      if (stop_) break;
      if (halted_ || batches_.empty()) {
        sleeping_ = true;
        wake_.wait(lock, [&] { return stop_ || (!halted_ && !batches_.empty()); });
        sleeping_ = false;
      }
      last_progress = Clock::now();
      backoff = std::chrono::microseconds(0);
      continue;
    }
    collect_finished_locked(done);
    if (!done.empty()) {
      batches_pending_.fetch_sub(static_cast<std::uint32_t>(done.size()), std::memory_order_acq_rel);
      lock.unlock();
      std::size_t n = 0;
      for (auto& b : done) {
        n += b.op_count;
        if (b.early) {
          // Left to the pool thread watching it (it saw the word too, or will); else claimed here.
          if (b.early->watching.load(std::memory_order_seq_cst) || !b.early->claim()) continue;
          b.ops = std::move(b.early->ops);
        }
        // One hand-off per batch: a pool thread answers its operations in order, running the handlers
        // without an executor of their own right there.
        completion_pool().post([counters = counters_, ops = std::move(b.ops)]() mutable {
          for (auto& op : ops) finish(*counters, std::move(op), {});
        });
      }
      done.clear();
      in_flight_.fetch_sub(n, std::memory_order_seq_cst);  // then on_progress reads the actor's flag
      if (hooks_.on_progress) hooks_.on_progress();
      last_progress = Clock::now();
      backoff = std::chrono::microseconds(0);
      lock.lock();
      continue;
    }
    // A copy of the pointer: attach() may replace the member, never free what a lost context left.
    std::uint32_t* const word = mode() == CompletionMode::sequence_word ? word_ : nullptr;
    const std::uint32_t seen = word ? observed(word) : 0;
    lock.unlock();
    const auto now = Clock::now();
    if (check_poisoned(now)) {
      lock.lock();
      continue;
    }
    if (now - last_progress < options_.spin) {
      // Spin on the word itself (no lock) until it moves or the spin phase ends.
      for (int i = 0; i < 64 && (!word || seen == observed(word)); ++i) cpu_relax();
    } else {
      backoff = std::min(std::max(backoff * 2, std::chrono::microseconds(2)), options_.max_backoff);
      std::this_thread::sleep_for(backoff);
    }
    lock_spinning(lock);
  }
}

}  // namespace cuactor::runtime::detail

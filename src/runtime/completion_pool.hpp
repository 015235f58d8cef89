/// @file
/// The runtime's completion pool (internal): threads that run reply handlers without an executor of
/// their own, and the Asio executor that targets them.
///
/// Why not an io_context: its threads, spinning on poll() for low latency, take the scheduler's mutex
/// on every poll, and the completion poller that hands a reply over has to win that mutex against
/// them. Here jobs travel through a lock-free queue (MpscQueue) that a spinning thread watches; the mutex
/// is only for threads falling asleep and for waking them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuactor/runtime/detail/mpsc_queue.hpp"
#include "cuactor/runtime/detail/record_memory.hpp"
#include "runtime/spin.hpp"

namespace cuactor::runtime::detail {

/// A fixed set of threads running posted functions in FIFO order (one thread takes them at a time). One
/// idle thread at a time spins for `spin` after its last function (a hand-off under load then costs no
/// futex wake-up) before it sleeps; the others sleep and are woken when work arrives that the spinning one
/// cannot take at once.
class CompletionPool {
 public:
  /// Starts `threads` threads.
  CompletionPool(int threads, std::chrono::microseconds spin);
  /// Runs what is queued, then joins the threads.
  ~CompletionPool();
  CompletionPool(const CompletionPool&) = delete;
  CompletionPool& operator=(const CompletionPool&) = delete;

  /// Queues `f` (callable as void()); it runs on a pool thread, never inside this call.
  template <class F>
  void post(F&& f) {
    push(std::make_unique<Job<std::decay_t<F>>>(std::forward<F>(f)));
  }

  /// True on one of this pool's threads.
  [[nodiscard]] bool on_pool_thread() const noexcept;
  /// Wakes a sleeping thread to spin for work, unless one spins already: for a caller that will post soon
  /// (an actor woken by a request), so that the wake-up overlaps what the caller does first.
  void prime();
  /// True while an idle thread spins for work: a job posted now starts within a hand-off, without a wake-up.
  [[nodiscard]] bool has_idle_spinner() const noexcept { return spinners_.load(std::memory_order_relaxed) != 0; }

  /// The Asio executor of this pool (what completion_pool_executor() wraps in an any_completion_executor).
  class Executor {
   public:
    explicit Executor(CompletionPool* pool) noexcept : pool_(pool) {}
    template <class F>
    void execute(F&& f) const {
      pool_->post(std::forward<F>(f));
    }
    friend bool operator==(const Executor& a, const Executor& b) noexcept { return a.pool_ == b.pool_; }
    friend bool operator!=(const Executor& a, const Executor& b) noexcept { return a.pool_ != b.pool_; }

   private:
    CompletionPool* pool_;
  };
  Executor executor() noexcept { return Executor(this); }

 private:
  struct JobBase : MpscHook {
    virtual ~JobBase() = default;
    virtual void run() = 0;
    // Made on the posting thread, freed on a pool thread: recycled memory, like request records.
    static void* operator new(std::size_t bytes) { return allocate_record(bytes); }
    static void operator delete(void* job, std::size_t bytes) noexcept { deallocate_record(job, bytes); }
  };
  template <class F>
  struct Job final : JobBase {
    explicit Job(F f) : fn(std::move(f)) {}
    void run() override { fn(); }
    F fn;
  };

  void push(std::unique_ptr<JobBase> job);
  /// Takes the oldest job, or null; wakes a sleeper when more remain and nobody spins.
  std::unique_ptr<JobBase> take();
  /// Spins (if no other thread does) until a job is queued or `spin_` passed; true if one may be.
  bool spin_for_work();
  /// Sleeps until a job may be queued or the pool stops.
  void sleep();
  void wake_one_sleeper();
  void run() noexcept;

  const std::chrono::microseconds spin_;
  MpscQueue jobs_;                                    // consumed under take_
  alignas(kCacheLine) std::mutex take_;               // one taker at a time (pool threads only)
  alignas(kCacheLine) std::atomic<int> spinners_{0};  // idle threads spinning on jobs_ (at most one)
  alignas(kCacheLine) std::atomic<int> sleepers_{0};  // threads asleep, or about to be, on wake_
  std::atomic<bool> stop_{false};
  std::mutex mutex_;     // for wake_
  bool primed_ = false;  // under mutex_: prime() woke a sleeper that must not go back to sleep at once
  std::condition_variable wake_;
  std::vector<std::thread> threads_;
};

/// The process's completion pool (two threads, created on first use).
CompletionPool& completion_pool();

}  // namespace cuactor::runtime::detail

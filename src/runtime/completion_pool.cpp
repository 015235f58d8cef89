#include "runtime/completion_pool.hpp"

#include <fmt/format.h>

#include <chrono>
#include <exception>

#include "cuactor/core/log.hpp"
#include "runtime/spin.hpp"

namespace cuactor::runtime::detail {
namespace {

thread_local const CompletionPool* t_pool = nullptr;  // the pool whose thread this is

}  // namespace

CompletionPool::CompletionPool(int threads, std::chrono::microseconds spin) : spin_(spin) {
  threads_.reserve(static_cast<std::size_t>(threads));
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

CompletionPool::~CompletionPool() {
  {
    std::lock_guard lock(mutex_);  // a thread about to sleep sees the stop or gets the notification
    stop_.store(true, std::memory_order_seq_cst);
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void CompletionPool::push(std::unique_ptr<JobBase> job) {
  jobs_.push(job.release());  // sequentially consistent: see wake_one_sleeper()
  wake_one_sleeper();
}

void CompletionPool::wake_one_sleeper() {
  // A sleeper counts itself before it looks at the queue, and a spinner that gives up looks at the queue
  // after it stopped counting (all sequentially consistent): whoever this misses sees the job itself.
  if (spinners_.load(std::memory_order_seq_cst) != 0 || sleepers_.load(std::memory_order_seq_cst) == 0) return;
  std::lock_guard lock(mutex_);
  wake_.notify_one();
}

void CompletionPool::prime() {
  if (spinners_.load(std::memory_order_seq_cst) != 0 || sleepers_.load(std::memory_order_seq_cst) == 0) return;
  std::lock_guard lock(mutex_);
  if (sleepers_.load(std::memory_order_seq_cst) == 0) return;  // exact here: sleepers change under mutex_
  primed_ = true;
  wake_.notify_one();
}

std::unique_ptr<CompletionPool::JobBase> CompletionPool::take() {
  if (!jobs_.maybe_nonempty()) return nullptr;
  std::unique_lock lock(take_, std::defer_lock);
  lock_spinning(lock);
  MpscHook* node = jobs_.try_pop();
  const bool more = node != nullptr && jobs_.maybe_nonempty();
  lock.unlock();
  if (more) wake_one_sleeper();  // more work than this thread: nobody else may be looking
  return std::unique_ptr<JobBase>(static_cast<JobBase*>(node));
}

bool CompletionPool::spin_for_work() {
  int idle = 0;
  // One idle thread at a time spins (reading only the queue's ends: posting threads never meet it on a
  // lock); more would only take cycles from the threads doing the work.
  if (!spinners_.compare_exchange_strong(idle, 1, std::memory_order_seq_cst)) return false;
  const bool found = spin_until([&] { return jobs_.maybe_nonempty() || stop_.load(std::memory_order_acquire); },
                                std::chrono::steady_clock::now() + spin_);
  spinners_.store(0, std::memory_order_seq_cst);
  return found || jobs_.maybe_nonempty();  // a post that saw this thread spinning woke nobody
}

void CompletionPool::sleep() {
  std::unique_lock lock(mutex_);
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  while (!jobs_.maybe_nonempty() && !stop_.load(std::memory_order_seq_cst) && !primed_) wake_.wait(lock);
  primed_ = false;  // this thread goes on to spin_for_work(): one primed thread is enough
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
}

bool CompletionPool::on_pool_thread() const noexcept {
  return t_pool == this;
}

void CompletionPool::run() noexcept {
  t_pool = this;
  for (;;) {
    if (std::unique_ptr<JobBase> job = take()) {
      try {
        job->run();
      } catch (const std::exception& e) {
        // A handler threw: it must not take the pool (or the process) down with it.
        log(LogLevel::error, fmt::format("completion handler threw: {}", e.what()));
      } catch (...) {
        log(LogLevel::error, "completion handler threw a non-standard exception");
      }
      continue;  // the job (the reply's record with it) was released above, before any wait
    }
    if (jobs_.maybe_nonempty()) {
      cpu_relax();  // a push is completing, or another thread is taking the job: not a reason to sleep
      continue;
    }
    if (stop_.load(std::memory_order_acquire)) return;  // everything queued has run (or runs elsewhere)
    if (!spin_for_work()) sleep();
  }
}

CompletionPool& completion_pool() {
  static CompletionPool pool(2, std::chrono::microseconds(50));
  return pool;
}

}  // namespace cuactor::runtime::detail

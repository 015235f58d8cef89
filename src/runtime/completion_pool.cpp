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
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void CompletionPool::push(std::unique_ptr<JobBase> job) {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
    queued_.fetch_add(1, std::memory_order_release);
    wake = sleepers_ > 0 && spinners_ == 0;  // a spinning thread takes it without a wake-up
  }
  if (wake) wake_.notify_one();
}

std::unique_ptr<CompletionPool::JobBase> CompletionPool::take_locked() {
  auto job = std::move(jobs_[head_++]);
  queued_.fetch_sub(1, std::memory_order_release);
  if (head_ == jobs_.size()) {  // drained: reuse the storage
    jobs_.clear();
    head_ = 0;
  } else if (sleepers_ > 0 && spinners_ == 0) {
    wake_.notify_one();  // more work than this thread: nobody else is looking
  }
  return job;
}

bool CompletionPool::on_pool_thread() const noexcept {
  return t_pool == this;
}

void CompletionPool::run() noexcept {
  using Clock = std::chrono::steady_clock;
  t_pool = this;
  std::unique_lock lock(mutex_);
  for (;;) {
    if (head_ < jobs_.size()) {
      std::unique_ptr<JobBase> job = take_locked();
      lock.unlock();
      try {
        job->run();
      } catch (const std::exception& e) {
        // A handler threw: it must not take the pool (or the process) down with it.
        log(LogLevel::error, fmt::format("completion handler threw: {}", e.what()));
      } catch (...) {
        log(LogLevel::error, "completion handler threw a non-standard exception");
      }
      job.reset();  // the reply's record is released here, before the next wait
      lock.lock();
      continue;
    }
    if (stop_) return;
    // One idle thread at a time spins (on the count alone: posting threads never meet it on the mutex);
    // more would only take cycles from the sibling hyperthreads of the threads doing the work.
    if (spinners_ == 0) {
      ++spinners_;
      lock.unlock();
      (void)spin_until([&] { return queued_.load(std::memory_order_acquire) != 0; }, Clock::now() + spin_);
      lock_spinning(lock);
      --spinners_;
      if (head_ < jobs_.size() || stop_) continue;
    }
    ++sleepers_;
    wake_.wait(lock, [&] { return stop_ || head_ < jobs_.size(); });
    --sleepers_;
  }
}

CompletionPool& completion_pool() {
  static CompletionPool pool(2, std::chrono::microseconds(50));
  return pool;
}

}  // namespace cuactor::runtime::detail

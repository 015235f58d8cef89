#include "runtime/completion_pool.hpp"

#include <fmt/format.h>

#include <chrono>
#include <exception>

#include "cuactor/core/log.hpp"
#include "runtime/spin.hpp"

namespace cuactor::runtime::detail {

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
    wake = sleepers_ > 0;
  }
  if (wake) wake_.notify_one();
}

void CompletionPool::run() noexcept {
  using Clock = std::chrono::steady_clock;
  auto spin_until = Clock::now() + spin_;
  for (;;) {
    // Spin on the count alone: posting threads never meet a spinning one on the mutex.
    while (queued_.load(std::memory_order_acquire) == 0 && Clock::now() < spin_until) cpu_relax();
    std::unique_ptr<JobBase> job;
    {
      std::unique_lock lock(mutex_);
      if (head_ == jobs_.size()) {
        if (stop_) return;
        if (Clock::now() < spin_until) continue;  // another thread took it: keep spinning
        ++sleepers_;
        wake_.wait(lock, [&] { return stop_ || head_ < jobs_.size(); });
        --sleepers_;
        if (head_ == jobs_.size()) return;  // stopping, nothing left
      }
      job = std::move(jobs_[head_++]);
      queued_.fetch_sub(1, std::memory_order_release);
      if (head_ == jobs_.size()) {  // drained: reuse the storage
        jobs_.clear();
        head_ = 0;
      }
    }
    try {
      job->run();
    } catch (const std::exception& e) {
      // A handler threw: it must not take the pool (or the process) down with it.
      log(LogLevel::error, fmt::format("completion handler threw: {}", e.what()));
    } catch (...) {
      log(LogLevel::error, "completion handler threw a non-standard exception");
    }
    job.reset();  // the reply's record is released here, before the next spin
    spin_until = Clock::now() + spin_;
  }
}

CompletionPool& completion_pool() {
  static CompletionPool pool(2, std::chrono::microseconds(50));
  return pool;
}

}  // namespace cuactor::runtime::detail

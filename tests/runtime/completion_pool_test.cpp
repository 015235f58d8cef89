// The completion pool: runs posted functions in order on its own threads, never inside the posting
// call, survives a throwing handler, drains what is queued when destroyed, and works as the Asio
// executor of handlers that have none (any_completion_executor, boost::asio::post); prime() wakes a
// sleeper to spin for work.
#include "runtime/completion_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/any_completion_executor.hpp>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace cuactor::runtime::detail {
namespace {

using namespace std::chrono_literals;

/// Waits (bounded) until `pred` holds.
template <class Pred>
bool eventually(Pred pred) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(100us);
  }
  return true;
}

TEST(CompletionPool, OneThreadRunsJobsInPostingOrderOffTheCallersThread) {
  CompletionPool pool(1, 20us);
  std::mutex m;
  std::vector<int> order;
  std::atomic<bool> inline_run{false};
  const auto caller = std::this_thread::get_id();
  for (int i = 0; i < 1000; ++i)
    pool.post([&, i] {
      if (std::this_thread::get_id() == caller) inline_run = true;
      std::lock_guard lock(m);
      order.push_back(i);
    });
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(m);
    return order.size() == 1000;
  }));
  EXPECT_FALSE(inline_run.load());
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(order[static_cast<std::size_t>(i)], i);
}

TEST(CompletionPool, AThrowingJobDoesNotStopTheThreads) {
  CompletionPool pool(2, 20us);
  std::atomic<int> ran{0};
  pool.post([] { throw std::runtime_error("handler failure"); });
  pool.post([] { throw 7; });
  for (int i = 0; i < 10; ++i) pool.post([&] { ran.fetch_add(1); });
  EXPECT_TRUE(eventually([&] { return ran.load() == 10; }));
}

TEST(CompletionPool, DestructionRunsEverythingAlreadyQueued) {
  std::atomic<int> ran{0};
  {
    CompletionPool pool(2, 0us);  // no spin: threads fall asleep between jobs
    for (int i = 0; i < 500; ++i) pool.post([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 500);
}

TEST(CompletionPool, SleepingThreadsWakeForLaterJobs) {
  CompletionPool pool(2, 0us);
  std::atomic<int> ran{0};
  for (int round = 0; round < 20; ++round) {
    std::this_thread::sleep_for(1ms);  // both threads are asleep by now
    pool.post([&] { ran.fetch_add(1); });
    ASSERT_TRUE(eventually([&] { return ran.load() == round + 1; })) << "round " << round;
  }
}

TEST(CompletionPool, PrimingWakesASleeperToSpinForWork) {
  CompletionPool pool(2, 1s);  // a primed thread spins long enough to be seen
  // One thread spins for a while after the start, then both sleep.
  std::this_thread::sleep_for(1500ms);
  ASSERT_TRUE(eventually([&] { return !pool.has_idle_spinner(); }));
  std::this_thread::sleep_for(10ms);  // nobody went back to spinning
  ASSERT_FALSE(pool.has_idle_spinner());
  pool.prime();
  EXPECT_TRUE(eventually([&] { return pool.has_idle_spinner(); }));
  // Priming while a thread spins wakes nobody else; the spinner takes the next job without a wake-up.
  pool.prime();
  std::atomic<bool> ran{false};
  pool.post([&] { ran = true; });
  EXPECT_TRUE(eventually([&] { return ran.load(); }));
  // Then both sleep again: a prime is spent by the thread it woke.
  std::this_thread::sleep_for(1500ms);
  ASSERT_TRUE(eventually([&] { return !pool.has_idle_spinner(); }));
  std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(pool.has_idle_spinner());
}

TEST(CompletionPool, ServesAsAnAsioExecutor) {
  CompletionPool pool(2, 20us);
  std::atomic<int> ran{0};
  boost::asio::any_completion_executor any(pool.executor());
  any.execute([&] { ran.fetch_add(1); });
  pool.executor().execute([&] { ran.fetch_add(1); });
  EXPECT_TRUE(eventually([&] { return ran.load() == 2; }));
  EXPECT_TRUE(pool.executor() == pool.executor());
  CompletionPool other(1, 0us);
  EXPECT_TRUE(pool.executor() != other.executor());
}

}  // namespace
}  // namespace cuactor::runtime::detail

// LruCache: capacity and eviction order, single flight, failures not cached, concurrency.
#include "cuactor/core/lru_cache.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace cuactor {
namespace {

using namespace std::chrono_literals;

/// A `make` for get_or_create that counts its calls and returns `value`.
auto counted(std::atomic<int>& calls, int value) {
  return [&calls, value]() -> Result<int> {
    ++calls;
    return value;
  };
}

TEST(LruCache, EvictsTheLeastRecentlyUsedFirst) {
  LruCache<std::string, int> cache(3);
  std::atomic<int> calls{0};
  for (const char* k : {"a", "b", "c"}) ASSERT_TRUE(cache.get_or_create(k, counted(calls, 1)).has_value());
  ASSERT_TRUE(cache.get_or_create("a", counted(calls, 99)).has_value());  // a becomes the most recent
  ASSERT_TRUE(cache.find("b").has_value());                               // so does b; c is now the oldest
  ASSERT_TRUE(cache.get_or_create("d", counted(calls, 4)).has_value());   // evicts c
  EXPECT_FALSE(cache.find("c").has_value());
  ASSERT_TRUE(cache.get_or_create("e", counted(calls, 5)).has_value());  // evicts a (b and d used later)
  EXPECT_FALSE(cache.find("a").has_value());
  EXPECT_TRUE(cache.find("b").has_value());
  EXPECT_TRUE(cache.find("d").has_value());
  EXPECT_TRUE(cache.find("e").has_value());
  EXPECT_EQ(calls.load(), 5);
  const CacheStats s = cache.stats();
  EXPECT_EQ(s.misses, 5u);
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(s.size, 3u);
  EXPECT_EQ(s.capacity, 3u);
  EXPECT_EQ(*cache.get_or_create("a", counted(calls, 7)), 7);  // recomputed after eviction
}

TEST(LruCache, ZeroCapacityHoldsOne) {
  LruCache<int, int> cache(0);
  std::atomic<int> calls{0};
  ASSERT_TRUE(cache.get_or_create(1, counted(calls, 1)).has_value());
  ASSERT_TRUE(cache.get_or_create(2, counted(calls, 2)).has_value());
  EXPECT_EQ(cache.capacity(), 1u);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(LruCache, ConcurrentRequestsForOneKeyCreateOnce) {
  LruCache<std::string, int> cache;
  std::atomic<int> calls{0};
  std::atomic<bool> go{false};
  constexpr int kThreads = 16;
  std::vector<Result<int>> got(kThreads, fail(errc::internal, "not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      got[i] = cache.get_or_create("k", [&]() -> Result<int> {
        ++calls;
        std::this_thread::sleep_for(20ms);  // long enough for every thread to find it in flight
        return 42;
      });
    });
  go = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(calls.load(), 1);
  for (const auto& r : got) {
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(*r, 42);
  }
  EXPECT_EQ(cache.stats().misses, 1u);
  EXPECT_EQ(cache.stats().hits, kThreads - 1u);
}

TEST(LruCache, FailureReachesEveryWaiterAndIsNotCached) {
  LruCache<std::string, int> cache;
  SharedFuture<int> in_flight;
  cache.get_or_start("k", [&](SharedFuture<int> p) { in_flight = p; });
  constexpr int kThreads = 8;
  std::atomic<int> calls{0};
  std::vector<Result<int>> got(kThreads, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] { got[i] = cache.get_or_create("k", counted(calls, 1)); });
  // Every thread found the computation in flight (a hit) and waits for it.
  while (cache.stats().hits < static_cast<std::uint64_t>(kThreads)) std::this_thread::sleep_for(1ms);
  in_flight.set(fail(errc::unsupported, "fp4 on sm_90"));
  for (auto& t : threads) t.join();
  EXPECT_EQ(calls.load(), 0);
  for (const auto& r : got) {
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), errc::unsupported);
  }
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(*cache.get_or_create("k", counted(calls, 5)), 5);  // the next request tries again
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(LruCache, SynchronousFailureIsNotCached) {
  LruCache<int, int> cache;
  auto r = cache.get_or_create(1, []() -> Result<int> { return fail(errc::invalid_argument, "m=-1"); });
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::invalid_argument);
  EXPECT_EQ(cache.size(), 0u);
  std::atomic<int> calls{0};
  EXPECT_EQ(*cache.get_or_create(1, counted(calls, 3)), 3);
  EXPECT_EQ(calls.load(), 1);
}

TEST(LruCache, ConcurrentDistinctKeysEachCreateOnce) {
  constexpr int kThreads = 8, kKeys = 32;
  LruCache<int, int> cache(kKeys);
  std::vector<std::atomic<int>> calls(kKeys);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 4; ++round)
        for (int i = 0; i < kKeys; ++i) {
          const int key = (i + t) % kKeys;  // threads start at different keys, so they overlap
          auto r = cache.get_or_create(key, [&]() -> Result<int> {
            ++calls[key];
            return key * 10;
          });
          ASSERT_TRUE(r.has_value());
          ASSERT_EQ(*r, key * 10);
        }
    });
  for (auto& th : threads) th.join();
  for (int i = 0; i < kKeys; ++i) EXPECT_EQ(calls[i].load(), 1) << "key " << i;
  const CacheStats s = cache.stats();
  EXPECT_EQ(s.size, static_cast<std::size_t>(kKeys));
  EXPECT_EQ(s.misses, static_cast<std::uint64_t>(kKeys));
  EXPECT_EQ(s.hits + s.misses, static_cast<std::uint64_t>(kThreads) * 4 * kKeys);
  EXPECT_EQ(s.evictions, 0u);
}

TEST(LruCache, AsynchronousFormNeverBlocksAndDropsALateFailure) {
  LruCache<std::string, int> cache;
  SharedFuture<int> pending;
  int starts = 0;
  auto f = cache.get_or_start("k", [&](SharedFuture<int> p) {
    ++starts;
    pending = p;  // completed later, from another thread
  });
  auto g = cache.get_or_start("k", [&](SharedFuture<int>) { ++starts; });
  EXPECT_TRUE(f.same_as(g));
  EXPECT_FALSE(f.is_ready());
  std::thread worker([&] { pending.set(fail(errc::compile_failed, "boom")); });
  worker.join();
  EXPECT_EQ(g.get().error(), errc::compile_failed);
  EXPECT_EQ(cache.size(), 0u);  // dropped by the completion, not only by the next lookup
  EXPECT_EQ(starts, 1);
}

TEST(LruCache, PendingEntryMayOutliveTheCache) {
  SharedFuture<int> pending;
  {
    LruCache<int, int> cache;
    cache.get_or_start(1, [&](SharedFuture<int> p) { pending = p; });
  }
  pending.set(fail(errc::internal, "late failure"));  // its removal callback finds no cache
  EXPECT_TRUE(pending.failed());
}

TEST(LruCache, EvictionKeepsTheHoldersResult) {
  LruCache<int, int> cache(1);
  SharedFuture<int> first_pending;
  auto first = cache.get_or_start(1, [&](SharedFuture<int> p) { first_pending = p; });
  std::atomic<int> calls{0};
  ASSERT_TRUE(cache.get_or_create(2, counted(calls, 2)).has_value());  // evicts the pending entry
  first_pending.set(11);
  EXPECT_EQ(*first.get(), 11);
  EXPECT_EQ(cache.stats().evictions, 1u);
}

}  // namespace
}  // namespace cuactor

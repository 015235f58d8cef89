/// @file
/// LruCache: the one in-process cache of expensive, immutable results keyed by their full identity
/// (GEMM plans, grouped GEMM plans, JIT modules and instances; [J4]). Bounded LRU (default 64
/// entries) with single flight: concurrent requests for one key run one computation and share its
/// result; a failure reaches every waiter and is not kept, so the next request tries again.
///
/// Two ways to ask, over the same entries:
///  - get_or_create(key, make): synchronous; `make` runs on the first caller's thread and other
///    callers of that key block until it finished (for cheap host-only work such as plans);
///  - get_or_start(key, start): asynchronous; returns a SharedFuture at once and `start` hands the
///    computation elsewhere (the JIT's compile workers), so the caller never blocks.
///
/// Keys must be the full identity of the result (never a part of it such as the source text alone,
/// never run-time scalars such as alpha/beta or pointers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "cuactor/core/shared_future.hpp"

namespace cuactor {

/// Counters of an LruCache.
struct CacheStats {
  std::uint64_t hits = 0;       ///< Lookups answered by an entry (ready or still in flight).
  std::uint64_t misses = 0;     ///< Lookups that started a computation.
  std::uint64_t evictions = 0;  ///< Entries dropped as least recently used.
  std::size_t size = 0;         ///< Entries held now (in-flight ones included).
  std::size_t capacity = 0;     ///< Most entries held at once.
};

/// Thread-safe LRU map from `Key` to a shared, possibly still computing Result<V>. Evicting an
/// entry never cancels its computation: holders of its future keep it. `V` is copied out on every
/// synchronous hit, so make it cheap to copy (a small value or a shared_ptr to an immutable object).
template <class Key, class V, class Hash = std::hash<Key>, class KeyEqual = std::equal_to<Key>>
class LruCache {
 public:
  using Future = SharedFuture<V>;

  /// A cache holding at most `capacity` entries (0 is taken as 1).
  explicit LruCache(std::size_t capacity = 64) : core_(std::make_shared<Core>(capacity ? capacity : 1)) {}

  /// The entry for `key`, or a new pending one whose computation `start(future)` begins. `start` is
  /// called at most once per miss, under no lock, and must eventually complete the future (for
  /// example from a worker thread); if it completes it with an error the entry is dropped.
  template <class Start>
  Future get_or_start(const Key& key, Start&& start) {
    Future fresh;
    {
      std::lock_guard lock(core_->mutex);
      if (auto it = core_->index.find(key); it != core_->index.end()) {
        // A failure whose removal callback has not run yet is as good as absent.
        if (!it->second->second.failed()) {
          core_->lru.splice(core_->lru.begin(), core_->lru, it->second);
          ++core_->stats.hits;
          return it->second->second;
        }
        core_->lru.erase(it->second);
        core_->index.erase(it);
      }
      ++core_->stats.misses;
      fresh = Future::pending();
      core_->lru.emplace_front(key, fresh);
      core_->index.emplace(key, core_->lru.begin());
      core_->evict_over_capacity();
    }
    // Registered before `start` runs so that waiters chained later see the entry already dropped.
    fresh.then([weak = std::weak_ptr<Core>(core_), key](const typename Future::Value& v) {
      if (v.has_value()) return;
      if (auto core = weak.lock()) core->drop_failed(key);
    });
    start(fresh);
    return fresh;
  }

  /// The value for `key`, computed by `make()` (returning Result<V> or something convertible to it)
  /// on this thread when absent. Callers of a key being computed wait for that computation and get
  /// its result, error included. `make` must not ask this cache for the same key (it would wait for
  /// itself).
  template <class Make>
  Result<V> get_or_create(const Key& key, Make&& make) {
    return get_or_start(key, [&make](const Future& f) { f.set(make()); }).get();
  }

  /// The entry for `key` if present (counts as a hit and refreshes its LRU position).
  std::optional<Future> find(const Key& key) {
    std::lock_guard lock(core_->mutex);
    auto it = core_->index.find(key);
    if (it == core_->index.end()) return std::nullopt;
    core_->lru.splice(core_->lru.begin(), core_->lru, it->second);
    ++core_->stats.hits;
    return it->second->second;
  }

  /// Drops every entry (computations in flight go on for their holders); counters are kept.
  void clear() {
    std::lock_guard lock(core_->mutex);
    core_->index.clear();
    core_->lru.clear();
  }

  /// Current counters.
  [[nodiscard]] CacheStats stats() const {
    std::lock_guard lock(core_->mutex);
    CacheStats s = core_->stats;
    s.size = core_->index.size();
    s.capacity = core_->capacity;
    return s;
  }
  /// Entries held now.
  [[nodiscard]] std::size_t size() const { return stats().size; }
  /// Most entries held at once.
  [[nodiscard]] std::size_t capacity() const noexcept { return core_->capacity; }

 private:
  using Entry = std::pair<Key, Future>;
  using List = std::list<Entry>;

  // Shared with the failure callbacks of pending entries, which may outlive the cache.
  struct Core {
    explicit Core(std::size_t cap) : capacity(cap) {}

    void evict_over_capacity() {
      while (index.size() > capacity) {
        index.erase(lru.back().first);
        lru.pop_back();
        ++stats.evictions;
      }
    }
    void drop_failed(const Key& key) {
      std::lock_guard lock(mutex);
      auto it = index.find(key);
      // Only a failed entry goes: the key may already hold a newer, pending computation.
      if (it == index.end() || !it->second->second.failed()) return;
      lru.erase(it->second);
      index.erase(it);
    }

    const std::size_t capacity;
    mutable std::mutex mutex;
    List lru;  // most recently used first
    std::unordered_map<Key, typename List::iterator, Hash, KeyEqual> index;
    CacheStats stats;
  };

  std::shared_ptr<Core> core_;
};

}  // namespace cuactor

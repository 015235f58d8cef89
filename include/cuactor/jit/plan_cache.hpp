/// @file
/// In-process plan cache ([J4]): an LRU map (default 64 entries) from a request's full identity to
/// a shared, possibly still-compiling result, with single-flight: concurrent requests for one key
/// share one computation.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuactor/core/expected.hpp"

namespace cuactor::jit {

/// A result that becomes available later, shared by every requester. Completion callbacks run on
/// the completing thread (or at once on the caller's when already complete).
template <class T>
class JitFuture {
 public:
  using Value = Result<std::shared_ptr<const T>>;
  using Callback = std::function<void(const Value&)>;

  /// A pending future; complete it with set().
  static JitFuture pending() { return JitFuture(std::make_shared<State>()); }
  /// An already completed future.
  static JitFuture ready(Value v) {
    auto f = pending();
    f.set(std::move(v));
    return f;
  }
  JitFuture() = default;

  /// Completes the future (first call wins) and runs the callbacks.
  void set(Value v) const {
    std::vector<Callback> callbacks;
    {
      std::lock_guard lock(state_->mutex);
      if (state_->value) return;
      state_->value = std::move(v);
      callbacks.swap(state_->callbacks);
    }
    state_->cv.notify_all();
    for (auto& cb : callbacks) cb(*state_->value);
  }
  /// True once completed.
  [[nodiscard]] bool is_ready() const {
    std::lock_guard lock(state_->mutex);
    return state_->value.has_value();
  }
  /// Blocks until completed and returns (a copy of) the result; never call it on a device actor's
  /// thread. A copy, so that it outlives a temporary future.
  Value get() const {
    std::unique_lock lock(state_->mutex);
    state_->cv.wait(lock, [&] { return state_->value.has_value(); });
    return *state_->value;
  }
  /// Runs `cb` with the result when it completes.
  void then(Callback cb) const {
    {
      std::lock_guard lock(state_->mutex);
      if (!state_->value) {
        state_->callbacks.push_back(std::move(cb));
        return;
      }
    }
    cb(*state_->value);
  }
  /// True if this future refers to a state.
  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }
  /// True if completed with an error.
  [[nodiscard]] bool failed() const {
    std::lock_guard lock(state_->mutex);
    return state_->value.has_value() && !state_->value->has_value();
  }

 private:
  struct State {
    mutable std::mutex mutex;
    std::condition_variable cv;
    std::optional<Value> value;
    std::vector<Callback> callbacks;
  };
  explicit JitFuture(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

/// Counters of a PlanCache.
struct PlanCacheStats {
  std::uint64_t hits = 0;       ///< Found (ready or in flight).
  std::uint64_t misses = 0;     ///< Started a computation.
  std::uint64_t evictions = 0;  ///< Dropped as least recently used.
  std::size_t size = 0;
  std::size_t capacity = 0;
};

/// LRU cache of JitFutures keyed by the full identity `Key` of a request (never its source alone,
/// never run-time scalars such as alpha/beta). Thread-safe. A failed result is not kept: the next
/// request for its key starts again. Evicting an entry never cancels it; holders keep their copy.
template <class Key, class T, class Hash = std::hash<Key>>
class PlanCache {
 public:
  /// A cache holding at most `capacity` entries (at least 1).
  explicit PlanCache(std::size_t capacity = 64) : capacity_(capacity ? capacity : 1) {}

  /// The entry for `key`, or a new one whose computation `start(future)` begins (called once, under
  /// no lock; it must eventually complete `future`, e.g. from a worker thread).
  JitFuture<T> get_or_start(const Key& key, const std::function<void(JitFuture<T>)>& start) {
    JitFuture<T> fresh;
    {
      std::lock_guard lock(mutex_);
      if (auto it = map_.find(key); it != map_.end()) {
        if (!it->second->second.failed()) {
          lru_.splice(lru_.begin(), lru_, it->second);
          ++stats_.hits;
          return it->second->second;
        }
        lru_.erase(it->second);
        map_.erase(it);
      }
      ++stats_.misses;
      fresh = JitFuture<T>::pending();
      lru_.emplace_front(key, fresh);
      map_.emplace(key, lru_.begin());
      while (map_.size() > capacity_) {
        map_.erase(lru_.back().first);
        lru_.pop_back();
        ++stats_.evictions;
      }
    }
    start(fresh);
    return fresh;
  }

  /// The entry for `key` if present (refreshes its LRU position).
  std::optional<JitFuture<T>> find(const Key& key) {
    std::lock_guard lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second);
    ++stats_.hits;
    return it->second->second;
  }

  /// Drops every entry.
  void clear() {
    std::lock_guard lock(mutex_);
    map_.clear();
    lru_.clear();
  }

  /// Current counters.
  PlanCacheStats stats() const {
    std::lock_guard lock(mutex_);
    PlanCacheStats s = stats_;
    s.size = map_.size();
    s.capacity = capacity_;
    return s;
  }

 private:
  using Entry = std::pair<Key, JitFuture<T>>;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;
  std::unordered_map<Key, typename std::list<Entry>::iterator, Hash> map_;
  PlanCacheStats stats_;
};

}  // namespace cuactor::jit

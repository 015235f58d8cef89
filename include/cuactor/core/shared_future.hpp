/// @file
/// SharedFuture<V>: a one-shot Result<V> that becomes available later and is shared by every holder
/// (the entries of LruCache, the JIT's compile results). Unlike std::shared_future it carries our
/// error type and takes completion callbacks, so a caller that must not block (a device actor's
/// thread) can chain work instead of waiting.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "cuactor/core/expected.hpp"

namespace cuactor {

/// A result shared by every copy of the future. Thread-safe. Completion callbacks run on the
/// completing thread (or at once on the caller's when already complete). Copies are cheap (one
/// shared_ptr); a default-constructed future is invalid (valid() is false) until assigned.
template <class V>
class SharedFuture {
 public:
  using Value = Result<V>;
  using Callback = std::function<void(const Value&)>;

  /// A pending future; complete it with set().
  static SharedFuture pending() { return SharedFuture(std::make_shared<State>()); }
  /// An already completed future.
  static SharedFuture ready(Value v) {
    auto f = pending();
    f.set(std::move(v));
    return f;
  }
  SharedFuture() = default;

  /// Completes the future (the first call wins; later ones are ignored) and runs the callbacks in
  /// the order they were added.
  void set(Value v) const {
    std::vector<Callback> callbacks;
    {
      std::lock_guard lock(state_->mutex);
      if (state_->value) return;
      state_->value = std::move(v);
      callbacks.swap(state_->callbacks);
    }
    state_->cv.notify_all();
    // The value is immutable from here on, so reading it without the lock is safe.
    for (auto& cb : callbacks) cb(*state_->value);
  }
  /// True once completed.
  [[nodiscard]] bool is_ready() const {
    std::lock_guard lock(state_->mutex);
    return state_->value.has_value();
  }
  /// Blocks until completed and returns a copy of the result (a copy, so that it outlives a
  /// temporary future). Never call it on a thread that must not block, such as a device actor's.
  Value get() const {
    std::unique_lock lock(state_->mutex);
    state_->cv.wait(lock, [&] { return state_->value.has_value(); });
    return *state_->value;
  }
  /// Runs `cb` with the result when it completes (at once, on this thread, if it already has).
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
  /// True if both refer to the same shared state (copies of one future).
  [[nodiscard]] bool same_as(const SharedFuture& other) const noexcept { return state_ == other.state_; }

 private:
  struct State {
    mutable std::mutex mutex;
    std::condition_variable cv;
    std::optional<Value> value;
    std::vector<Callback> callbacks;
  };
  explicit SharedFuture(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

}  // namespace cuactor

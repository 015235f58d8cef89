/// @file
/// The device actor's bounded FIFO mailbox ([R5]) (internal). Posting never meets the actor's thread on a
/// lock: items travel through an MpscQueue, and only consumers (the actor's thread; a canceller or a
/// shutdown, rarely) share the consumer lock, which therefore stays in the actor's cache.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "cuactor/runtime/detail/mpsc_queue.hpp"

namespace cuactor::runtime::detail {

/// Bounded first-in first-out queue of `std::shared_ptr<T>`, where T derives from MpscHook and has a member
/// `std::shared_ptr<T> queued_self` (the mailbox keeps an item alive through it while it is queued).
template <class T>
class Mailbox {
 public:
  /// A mailbox holding at most `capacity` items.
  explicit Mailbox(std::size_t capacity) : capacity_(capacity) {}
  ~Mailbox() { (void)take_all(); }
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  /// Appends `item`; false (item untouched) when the mailbox is full. Callers serialise their pushes (the
  /// actor posts under its own mutex); pushes never wait for consumers.
  bool push(std::shared_ptr<T>& item) {
    const std::size_t posted = posted_.load(std::memory_order_relaxed);
    if (posted - taken_seen_ >= capacity_) {  // re-read the consumers' count only near the bound
      taken_seen_ = taken_.load(std::memory_order_acquire);
      if (posted - taken_seen_ >= capacity_) return false;
    }
    posted_.store(posted + 1, std::memory_order_relaxed);
    T* raw = item.get();
    raw->queued_self = std::move(item);
    queue_.push(raw);
    return true;
  }

  /// Puts items taken earlier back at the head, in their order (they keep their place; the bound may
  /// be exceeded by them since they were admitted before).
  void push_front(std::vector<std::shared_ptr<T>>& items) {
    std::lock_guard lock(consumer_);
    for (auto it = items.rbegin(); it != items.rend(); ++it) backlog_.push_front(std::move(*it));
    taken_.fetch_sub(items.size(), std::memory_order_release);
    items.clear();
    backlog_size_.store(backlog_.size(), std::memory_order_release);
  }
  /// Moves up to `max` items from the head into `out`, in order. May take fewer than are queued while a
  /// push is completing (maybe_nonempty() stays true: ask again).
  void pop_batch(std::vector<std::shared_ptr<T>>& out, std::size_t max) {
    std::lock_guard lock(consumer_);
    std::size_t n = 0;
    for (; n < max && !backlog_.empty(); ++n) {
      out.push_back(std::move(backlog_.front()));
      backlog_.pop_front();
    }
    for (; n < max; ++n) {
      std::shared_ptr<T> item = pop_queued();
      if (!item) break;
      out.push_back(std::move(item));
    }
    if (n > 0) taken_.fetch_add(n, std::memory_order_release);
    backlog_size_.store(backlog_.size(), std::memory_order_release);
  }
  /// Removes and returns the first item for which `pred` holds (null if none).
  template <class Pred>
  std::shared_ptr<T> remove_first(Pred&& pred) {
    std::lock_guard lock(consumer_);
    drain_queue_locked();
    const auto it =
        std::find_if(backlog_.begin(), backlog_.end(), [&](const std::shared_ptr<T>& i) { return pred(i); });
    if (it == backlog_.end()) return nullptr;
    std::shared_ptr<T> item = std::move(*it);
    backlog_.erase(it);
    taken_.fetch_add(1, std::memory_order_release);
    backlog_size_.store(backlog_.size(), std::memory_order_release);
    return item;
  }
  /// Removes and returns everything, in order.
  std::vector<std::shared_ptr<T>> take_all() {
    std::lock_guard lock(consumer_);
    drain_queue_locked();
    std::vector<std::shared_ptr<T>> out(std::make_move_iterator(backlog_.begin()),
                                        std::make_move_iterator(backlog_.end()));
    backlog_.clear();
    backlog_size_.store(0, std::memory_order_release);
    taken_.fetch_add(out.size(), std::memory_order_release);
    return out;
  }

  /// Items queued: exact when no push or take runs meanwhile, a snapshot otherwise.
  [[nodiscard]] std::size_t size() const noexcept {
    const std::size_t taken = taken_.load(std::memory_order_acquire);
    return posted_.load(std::memory_order_acquire) - taken;
  }
  /// True when nothing is queued. Exact only while no push runs (the actor asks under its posting mutex).
  [[nodiscard]] bool empty() const {
    std::lock_guard lock(consumer_);
    return backlog_.empty() && queue_.empty();
  }
  /// False only when nothing was queued at a moment during the call; lock-free, for spinning.
  [[nodiscard]] bool maybe_nonempty() const noexcept {
    return queue_.maybe_nonempty() || backlog_size_.load(std::memory_order_acquire) != 0;
  }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

 private:
  /// The oldest pushed item, or null (consumer lock held).
  std::shared_ptr<T> pop_queued() {
    MpscHook* node = queue_.try_pop();
    if (!node) return nullptr;
    return std::move(static_cast<T*>(node)->queued_self);
  }
  /// Moves every completely pushed item behind the backlog (consumer lock held; pushes are serialised,
  /// so at most the last one can still be completing, and it is waited for).
  void drain_queue_locked() {
    while (queue_.maybe_nonempty())
      if (std::shared_ptr<T> item = pop_queued()) backlog_.push_back(std::move(item));
  }

  const std::size_t capacity_;
  MpscQueue queue_;
  alignas(64) std::atomic<std::size_t> posted_{0};  // written by the (serialised) posters
  std::size_t taken_seen_ = 0;                      // posters' last read of taken_
  alignas(64) std::atomic<std::size_t> taken_{0};   // consumers
  mutable std::mutex consumer_;
  std::deque<std::shared_ptr<T>> backlog_;    // items taken from queue_ (or put back), ahead of it
  std::atomic<std::size_t> backlog_size_{0};  // backlog_.size() for maybe_nonempty()
};

}  // namespace cuactor::runtime::detail

/// @file
/// The device actor's bounded FIFO mailbox ([R5]) (internal). Posting never meets the actor's thread on a
/// lock: items travel through an MpscQueue, and only consumers (the actor's thread; a canceller or a
/// shutdown, rarely) share the consumer lock, which therefore stays in the actor's cache. Nothing here
/// allocates: items are linked through their own hooks, so cancelling and putting back cannot fail.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "cuactor/runtime/detail/mpsc_queue.hpp"
#include "runtime/spin.hpp"

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
    const std::size_t admitted = posted + returned_.load(std::memory_order_acquire);
    if (admitted - taken_seen_ >= capacity_) {  // re-read the consumers' count only near the bound
      taken_seen_ = taken_.load(std::memory_order_acquire);
      if (admitted - taken_seen_ >= capacity_) return false;
    }
    posted_.store(posted + 1, std::memory_order_release);
    T* raw = item.get();
    raw->queued_self = std::move(item);
    queue_.push(raw);
    return true;
  }

  /// Puts items taken earlier back at the head, in their order (they keep their place; the bound may
  /// be exceeded by them since they were admitted before).
  void push_front(std::vector<std::shared_ptr<T>>& items) {
    std::lock_guard lock(consumer_);
    for (auto it = items.rbegin(); it != items.rend(); ++it) {
      T* raw = it->get();
      raw->queued_self = std::move(*it);
      link_front_locked(raw);
    }
    returned_.fetch_add(items.size(), std::memory_order_release);
    items.clear();
  }
  /// Moves up to `max` items from the head into `out`, in order. May take fewer than are queued while a
  /// push is completing (maybe_nonempty() stays true: ask again).
  void pop_batch(std::vector<std::shared_ptr<T>>& out, std::size_t max) {
    std::lock_guard lock(consumer_);
    std::size_t n = 0;
    for (; n < max; ++n) {
      MpscHook* node = backlog_head_ ? unlink_front_locked() : queue_.try_pop();
      if (!node) break;
      out.push_back(release(node));
    }
    if (n > 0) taken_.fetch_add(n, std::memory_order_release);
  }
  /// Removes and returns the first item for which `pred` holds (null if none).
  template <class Pred>
  std::shared_ptr<T> remove_first(Pred&& pred) {
    std::lock_guard lock(consumer_);
    drain_queue_locked();
    for (MpscHook *prev = nullptr, *node = backlog_head_; node; prev = node, node = next_of(node)) {
      if (!pred(static_cast<T*>(node)->queued_self)) continue;
      MpscHook* after = next_of(node);
      if (prev)
        prev->mpsc_next.store(after, std::memory_order_relaxed);
      else
        backlog_head_ = after;
      if (backlog_tail_ == node) backlog_tail_ = prev;
      backlog_size_.fetch_sub(1, std::memory_order_release);
      taken_.fetch_add(1, std::memory_order_release);
      return release(node);
    }
    return nullptr;
  }
  /// Removes and returns everything, in order.
  std::vector<std::shared_ptr<T>> take_all() {
    std::lock_guard lock(consumer_);
    drain_queue_locked();
    std::vector<std::shared_ptr<T>> out;
    out.reserve(backlog_size_.load(std::memory_order_relaxed));
    while (backlog_head_) out.push_back(release(unlink_front_locked()));
    taken_.fetch_add(out.size(), std::memory_order_release);
    return out;
  }

  /// Items queued: exact when no push or take runs meanwhile, a snapshot otherwise.
  [[nodiscard]] std::size_t size() const noexcept {
    const std::size_t taken = taken_.load(std::memory_order_acquire);
    return posted_.load(std::memory_order_acquire) + returned_.load(std::memory_order_acquire) - taken;
  }
  /// False only when nothing was queued at a moment during the call; lock-free, for spinning.
  [[nodiscard]] bool maybe_nonempty() const noexcept {
    return queue_.maybe_nonempty() || backlog_size_.load(std::memory_order_acquire) != 0;
  }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

 private:
  // The backlog: items taken from queue_ (to look past them) or put back, ahead of queue_. It is linked
  // through the items' own hooks, which no producer touches once try_pop() returned them.
  static MpscHook* next_of(MpscHook* node) noexcept { return node->mpsc_next.load(std::memory_order_relaxed); }
  void link_front_locked(MpscHook* node) noexcept {
    node->mpsc_next.store(backlog_head_, std::memory_order_relaxed);
    backlog_head_ = node;
    if (!backlog_tail_) backlog_tail_ = node;
    backlog_size_.fetch_add(1, std::memory_order_release);
  }
  void link_back_locked(MpscHook* node) noexcept {
    node->mpsc_next.store(nullptr, std::memory_order_relaxed);
    if (backlog_tail_)
      backlog_tail_->mpsc_next.store(node, std::memory_order_relaxed);
    else
      backlog_head_ = node;
    backlog_tail_ = node;
    backlog_size_.fetch_add(1, std::memory_order_release);
  }
  MpscHook* unlink_front_locked() noexcept {
    MpscHook* node = backlog_head_;
    backlog_head_ = next_of(node);
    if (!backlog_head_) backlog_tail_ = nullptr;
    backlog_size_.fetch_sub(1, std::memory_order_release);
    return node;
  }
  /// Moves every completely pushed item behind the backlog (consumer lock held). Pushes are serialised,
  /// so at most the last one can still be completing, and it is waited for.
  void drain_queue_locked() noexcept {
    while (queue_.maybe_nonempty())
      if (MpscHook* node = queue_.try_pop()) link_back_locked(node);
  }
  /// The queue's reference to the item behind `node`, handed to the caller.
  static std::shared_ptr<T> release(MpscHook* node) noexcept { return std::move(static_cast<T*>(node)->queued_self); }

  const std::size_t capacity_;
  MpscQueue queue_;
  alignas(kCacheLine) std::atomic<std::size_t> posted_{0};  // written by the (serialised) posters
  std::size_t taken_seen_ = 0;                              // posters' last read of taken_
  alignas(kCacheLine) std::atomic<std::size_t> returned_{
      0};                                                  // items put back (push_front): rarely written, read per push
  alignas(kCacheLine) std::atomic<std::size_t> taken_{0};  // consumers: items taken out
  std::mutex consumer_;
  MpscHook* backlog_head_ = nullptr;
  MpscHook* backlog_tail_ = nullptr;
  std::atomic<std::size_t> backlog_size_{0};  // for maybe_nonempty() and take_all()
};

}  // namespace cuactor::runtime::detail

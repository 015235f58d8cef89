/// @file
/// The device actor's bounded FIFO mailbox ([R5]). Not thread-safe: the actor guards it.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

namespace cuactor::runtime::detail {

/// Bounded first-in first-out queue of requests.
template <class T>
class Mailbox {
 public:
  /// A mailbox holding at most `capacity` items.
  explicit Mailbox(std::size_t capacity) : capacity_(capacity) {}

  /// Appends `item`; false (item untouched) when the mailbox is full.
  bool push(T& item) {
    if (items_.size() >= capacity_) return false;
    items_.push_back(std::move(item));
    return true;
  }
  /// Puts items taken earlier back at the head, in their order (they keep their place; the bound may
  /// be exceeded by them since they were admitted before).
  void push_front(std::vector<T>& items) {
    for (auto it = items.rbegin(); it != items.rend(); ++it) items_.push_front(std::move(*it));
    items.clear();
  }
  /// Moves up to `max` items from the head into `out`, in order.
  void pop_batch(std::vector<T>& out, std::size_t max) {
    while (max-- > 0 && !items_.empty()) {
      out.push_back(std::move(items_.front()));
      items_.pop_front();
    }
  }
  /// Removes and returns the first item for which `pred` holds.
  template <class Pred>
  std::optional<T> remove_first(Pred&& pred) {
    for (auto it = items_.begin(); it != items_.end(); ++it)
      if (pred(*it)) {
        T item = std::move(*it);
        items_.erase(it);
        return item;
      }
    return std::nullopt;
  }
  /// Removes and returns everything, in order.
  std::vector<T> take_all() {
    std::vector<T> out(std::make_move_iterator(items_.begin()), std::make_move_iterator(items_.end()));
    items_.clear();
    return out;
  }
  [[nodiscard]] std::size_t size() const noexcept { return items_.size(); }
  [[nodiscard]] bool empty() const noexcept { return items_.empty(); }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

 private:
  std::size_t capacity_;
  std::deque<T> items_;
};

}  // namespace cuactor::runtime::detail

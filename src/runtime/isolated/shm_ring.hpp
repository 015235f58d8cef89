/// @file
/// Ranges of the shared region handed to copies in flight ([R10]): a ring that hands out contiguous
/// ranges in order and takes them back in any order (the oldest range bounds the free space).
/// Not thread-safe: the isolated backend holds its lock around it.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>

namespace cuactor::runtime::isolated {

class ShmRing {
 public:
  explicit ShmRing(std::size_t size) noexcept : size_(size) {}

  /// The offset of a free range of `bytes` (1 <= bytes <= size()), or nullopt while the ring is too
  /// full; the range is held until release(offset).
  std::optional<std::size_t> take(std::size_t bytes) {
    if (bytes == 0 || bytes > size_) return std::nullopt;
    std::size_t offset = 0;
    if (live_.empty()) {
      offset = 0;
    } else {
      const std::size_t tail = live_.front().offset;
      if (head_ > tail) {
        // Free: [head_, size_) and [0, tail).
        if (size_ - head_ >= bytes)
          offset = head_;
        else if (tail >= bytes)
          offset = 0;
        else
          return std::nullopt;
      } else if (head_ < tail) {
        if (tail - head_ < bytes) return std::nullopt;  // free: [head_, tail)
        offset = head_;
      } else {
        return std::nullopt;  // head_ == tail with ranges live: full
      }
    }
    live_.push_back({offset, bytes, false});
    head_ = offset + bytes;
    used_ += bytes;
    return offset;
  }
  /// Returns the range that starts at `offset` (a value take() returned and not yet released).
  void release(std::size_t offset) noexcept {
    for (auto& r : live_) {
      if (r.offset == offset && !r.released) {
        r.released = true;
        used_ -= r.bytes;
        break;
      }
    }
    while (!live_.empty() && live_.front().released) live_.pop_front();
    if (live_.empty()) head_ = 0;
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Bytes held by unreleased ranges.
  [[nodiscard]] std::size_t used() const noexcept { return used_; }

 private:
  struct Range {
    std::size_t offset;
    std::size_t bytes;
    bool released;
  };
  std::size_t size_;
  std::size_t head_ = 0;
  std::size_t used_ = 0;
  std::deque<Range> live_;
};

}  // namespace cuactor::runtime::isolated

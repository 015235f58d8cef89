/// @file
/// Host-side bookkeeping of the buffers a capture pool keeps alive ([G2]).
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <vector>

#include "cuactor/core/expected.hpp"

namespace cuactor::graph {

/// A set of type-erased owners of device memory (a GpuRef's allocation, a DeviceBuffer, a
/// DeviceScalar, ...). Each owner is kept once however often it is added, so that a buffer used by
/// many captured operations counts as one. Not thread-safe; CapturePool locks around it.
class KeepAliveSet {
 public:
  /// Keeps `owner` (which must not be null) alive; `address` and `bytes` describe the memory it owns.
  /// Returns true when the owner was new, false when it was already kept.
  Result<bool> add(std::shared_ptr<void> owner, const void* address, std::size_t bytes);
  /// True when `owner` is kept.
  [[nodiscard]] bool contains(const std::shared_ptr<void>& owner) const noexcept;
  /// Number of distinct owners kept.
  [[nodiscard]] std::size_t size() const noexcept { return order_.size(); }
  /// Sum of the bytes of the distinct owners kept.
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  /// Moves every owner of `other` that this set lacks into it; `other` ends empty. Returns how many
  /// were new.
  std::size_t merge_from(KeepAliveSet&& other);
  /// Empties the set and returns its owners in the order they were first added.
  std::vector<std::shared_ptr<void>> release_all() noexcept;

 private:
  struct Entry {
    const void* address = nullptr;
    std::size_t bytes = 0;
  };
  std::unordered_map<const void*, Entry> by_owner_;
  std::vector<std::shared_ptr<void>> order_;
  std::size_t bytes_ = 0;
};

}  // namespace cuactor::graph

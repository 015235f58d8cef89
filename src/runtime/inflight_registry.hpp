/// @file
/// In-flight registry ([R5], [R7]): every submitted batch of operations is held here until exactly one
/// party takes it — the completion host function or the supervisor failing it after a poisoning.
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cuactor::runtime::detail {

/// Thread-safe map from a batch id to its entry, grouped by owner (a device actor). take() and
/// take_owner() hand each entry out exactly once.
template <class Entry>
class InFlightRegistry {
 public:
  /// Registers `entry` under `id` for `owner`; false if the id is already present.
  bool add(std::uint64_t id, const void* owner, Entry entry) {
    std::lock_guard lock(mutex_);
    return entries_.try_emplace(id, owner, std::move(entry)).second;
  }
  /// Takes the entry `id`, or nullopt if someone else took it.
  std::optional<Entry> take(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return std::nullopt;
    Entry e = std::move(it->second.second);
    entries_.erase(it);
    return e;
  }
  /// Takes every entry of `owner` (in id order, which is submission order).
  std::vector<Entry> take_owner(const void* owner) {
    std::vector<std::pair<std::uint64_t, Entry>> found;
    {
      std::lock_guard lock(mutex_);
      for (auto it = entries_.begin(); it != entries_.end();) {
        if (it->second.first == owner) {
          found.emplace_back(it->first, std::move(it->second.second));
          it = entries_.erase(it);
        } else {
          ++it;
        }
      }
    }
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Entry> out;
    out.reserve(found.size());
    for (auto& f : found) out.push_back(std::move(f.second));
    return out;
  }
  /// Number of entries of `owner`.
  [[nodiscard]] std::size_t count(const void* owner) const {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& [id, e] : entries_) n += e.first == owner;
    return n;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, std::pair<const void*, Entry>> entries_;
};

}  // namespace cuactor::runtime::detail

/// @file
/// A thread-safe cache of grouped GEMM plans keyed by everything that chooses the SKU (element
/// types, B layout, arch, SM count, device, the small/large-M class of the shape hint, an override),
/// never by runtime scalars or pointers, so the actor requests reuse one plan per configuration.
/// Core's LruCache underneath: bounded (default 64), single flight, failures not cached.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "cuactor/core/lru_cache.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"

namespace cuactor::kernels {

/// Grouped GEMM plans by configuration; plans are immutable and shared.
class GroupedPlanCache {
 public:
  /// A cache holding at most `capacity` plans (at least 1).
  explicit GroupedPlanCache(std::size_t capacity = 64) : cache_(capacity) {}

  /// The plan for `spec`, created on first use (a failure is returned, not cached).
  Result<std::shared_ptr<const GroupedGemmPlan>> get(const GroupedGemmSpec& spec);
  /// Plans currently held.
  [[nodiscard]] std::size_t size() const { return cache_.size(); }
  /// All counters (hits, misses, evictions, size, capacity).
  [[nodiscard]] CacheStats stats() const { return cache_.stats(); }
  /// The key `spec` is cached under (exposed for tests).
  static std::string key(const GroupedGemmSpec& spec);

 private:
  LruCache<std::string, std::shared_ptr<const GroupedGemmPlan>> cache_;
};

}  // namespace cuactor::kernels

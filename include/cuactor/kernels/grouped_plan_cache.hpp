/// @file
/// A thread-safe cache of grouped GEMM plans keyed by everything that chooses the SKU (element
/// types, B layout, arch, SM count, device, the small/large-M class of the shape hint, an override,
/// the epilogue tree), never by runtime scalars or pointers, so the actor requests reuse one plan per
/// configuration. Core's LruCache underneath: bounded (default 64), single flight, failures not cached.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>

#include "cuactor/core/lru_cache.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"

namespace cuactor::kernels {

/// Grouped GEMM plans by configuration; plans are immutable and shared.
class GroupedPlanCache {
 public:
  /// A cache holding at most `capacity` plans (at least 1).
  explicit GroupedPlanCache(std::size_t capacity = 64) : cache_(capacity) {}

  /// The plan for `spec`, created on first use (a failure is returned, not cached). Specs that
  /// differ only in their rows-per-group hint within one class (small M <= 64 or not) share a plan.
  Result<std::shared_ptr<const GroupedGemmPlan>> get(const GroupedGemmSpec& spec);
  /// Plans currently held.
  [[nodiscard]] std::size_t size() const { return cache_.size(); }
  /// All counters (hits, misses, evictions, size, capacity).
  [[nodiscard]] CacheStats stats() const { return cache_.stats(); }

 private:
  /// The spec with the shape hint reduced to its class: a value compared and hashed without
  /// formatting anything (lookups sit on every grouped_mm call's host path).
  struct Key {
    DType a, b, d;
    MatrixLayout layout_b;
    GpuArch arch;
    int sm_count, device;
    bool small_m;
    std::optional<GemmSku> sku_override;
    EpilogueSpec epilogue;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept;
  };

  LruCache<Key, std::shared_ptr<const GroupedGemmPlan>, KeyHash> cache_;
};

}  // namespace cuactor::kernels

/// @file
/// A thread-safe cache of grouped GEMM plans keyed by everything that chooses the SKU (element
/// types, B layout, arch, SM count, device, the small/large-M class of the shape hint, an override,
/// the epilogue tree; with a tuning planner, the classes of the other shape hints), never by runtime scalars or
/// pointers, so the actor requests reuse one plan per configuration. Core's LruCache underneath: bounded (default 64),
/// single flight, failures not cached.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "cuactor/core/lru_cache.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"

namespace cuactor::kernels {

/// Grouped GEMM plans by configuration; plans are immutable and shared.
class GroupedPlanCache {
 public:
  /// What makes a plan on a miss: GroupedGemmPlan::create by default; jit::tuned_grouped_planner()
  /// consults the tuning database first.
  using Planner = std::function<Result<GroupedGemmPlan>(const GroupedGemmSpec&)>;

  /// A cache holding at most `capacity` plans (at least 1), made by `planner` (empty: create()).
  explicit GroupedPlanCache(std::size_t capacity = 64, Planner planner = {})
      : cache_(capacity), planner_(std::move(planner)) {}

  /// The plan for `spec`, created on first use (a failure is returned, not cached). Specs that
  /// differ only in their shape hints within one class share a plan: the GroupedSizeClass (decode,
  /// medium, large); with a planner, also the power-of-two buckets of every hint (the tuning database's
  /// classes).
  Result<std::shared_ptr<const GroupedGemmPlan>> get(const GroupedGemmSpec& spec);
  /// Plans currently held.
  [[nodiscard]] std::size_t size() const { return cache_.size(); }
  /// All counters (hits, misses, evictions, size, capacity).
  [[nodiscard]] CacheStats stats() const { return cache_.stats(); }

 private:
  /// The spec with the shape hints reduced to their class: a value compared and hashed without
  /// formatting anything (lookups sit on every grouped_mm call's host path).
  struct Key {
    DType a, b, d;
    MatrixLayout layout_b;
    GpuArch arch;
    int sm_count, device;
    GroupedSizeClass size_class;
    std::array<int, 4> hint_buckets;  ///< Zero without a planner.
    std::optional<GemmSku> sku_override;
    EpilogueSpec epilogue;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept;
  };

  LruCache<Key, std::shared_ptr<const GroupedGemmPlan>, KeyHash> cache_;
  Planner planner_;
};

}  // namespace cuactor::kernels

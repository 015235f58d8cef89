/// @file
/// ConvPlanCache: convolution plans ([K7]) keyed by everything that chooses the kernel (the whole
/// ConvSpec, the architecture, SM count, device and an SKU override), never by pointers or by the
/// scalars alpha / beta, so the actor's conv requests reuse one plan per configuration. Core's
/// LruCache underneath: thread-safe, bounded (default 64), single flight, failures not cached.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>

#include "cuactor/core/lru_cache.hpp"
#include "cuactor/kernels/conv_plan.hpp"

namespace cuactor::kernels {

/// Convolution plans by configuration; plans are immutable and cheap to copy.
class ConvPlanCache {
 public:
  /// What makes a plan on a miss (empty: ConvPlan::create); a JIT or a tuning database plugs in here.
  using Planner = std::function<Result<ConvPlan>(const ConvSpec&, GpuArch, const ConvPlanOptions&)>;

  /// A cache holding at most `capacity` plans (at least 1), made by `planner` (empty: ConvPlan::create).
  explicit ConvPlanCache(std::size_t capacity = 64, Planner planner = {})
      : cache_(capacity), planner_(std::move(planner)) {}

  /// The plan for (spec, arch, options), made on first use (a failure is returned, not cached).
  Result<ConvPlan> get(const ConvSpec& spec, GpuArch arch, const ConvPlanOptions& options = {});
  /// Plans currently held.
  [[nodiscard]] std::size_t size() const { return cache_.size(); }
  /// Lookups answered from the cache.
  [[nodiscard]] std::size_t hits() const { return cache_.stats().hits; }
  /// Lookups that made a plan.
  [[nodiscard]] std::size_t misses() const { return cache_.stats().misses; }
  /// All counters (hits, misses, evictions, size, capacity).
  [[nodiscard]] CacheStats stats() const { return cache_.stats(); }

 private:
  struct Key {
    ConvSpec spec;
    GpuArch arch;
    int sm_count = 0;
    int device = 0;
    std::optional<GemmSku> sku_override;
    std::optional<ConvSplit> split_override;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept;
  };

  LruCache<Key, ConvPlan, KeyHash> cache_;
  Planner planner_;
};

}  // namespace cuactor::kernels

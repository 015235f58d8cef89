/// @file
/// A thread-safe cache of grouped GEMM plans keyed by everything that chooses the SKU (element
/// types, B layout, arch, SM count, device, the small/large-M class of the shape hint, an override),
/// never by runtime scalars or pointers, so the actor requests reuse one plan per configuration.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cuactor/kernels/grouped_gemm.hpp"

namespace cuactor::kernels {

/// Grouped GEMM plans by configuration; plans are immutable and shared.
class GroupedPlanCache {
 public:
  /// The plan for `spec`, created on first use (a failure is returned, not cached).
  Result<std::shared_ptr<const GroupedGemmPlan>> get(const GroupedGemmSpec& spec);
  /// Plans created so far.
  [[nodiscard]] std::size_t size() const;
  /// The key `spec` is cached under (exposed for tests).
  static std::string key(const GroupedGemmSpec& spec);

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const GroupedGemmPlan>> plans_;
};

}  // namespace cuactor::kernels

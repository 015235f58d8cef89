// Cache of grouped GEMM plans.
#include "cuactor/kernels/grouped_plan_cache.hpp"

#include <fmt/format.h>

namespace cuactor::kernels {

std::string GroupedPlanCache::key(const GroupedGemmSpec& s) {
  const bool small_m = s.rows_per_group_hint > 0 && s.rows_per_group_hint <= 64;
  return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}", name(s.a), name(s.b), name(s.d), name(s.layout_b), s.arch.name(),
                     s.sm_count, s.device, small_m ? "small" : "large",
                     s.sku_override ? s.sku_override->to_string() : std::string());
}

Result<std::shared_ptr<const GroupedGemmPlan>> GroupedPlanCache::get(const GroupedGemmSpec& spec) {
  const std::string k = key(spec);
  {
    std::lock_guard lock(mutex_);
    if (auto it = plans_.find(k); it != plans_.end()) return it->second;
  }
  auto plan = GroupedGemmPlan::create(spec);  // host only and cheap; two racing creators agree
  if (!plan) return fail(plan.error());
  auto shared = std::make_shared<const GroupedGemmPlan>(std::move(*plan));
  std::lock_guard lock(mutex_);
  return plans_.try_emplace(k, std::move(shared)).first->second;
}

std::size_t GroupedPlanCache::size() const {
  std::lock_guard lock(mutex_);
  return plans_.size();
}

}  // namespace cuactor::kernels

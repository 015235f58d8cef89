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
  return cache_.get_or_create(key(spec), [&]() -> Result<std::shared_ptr<const GroupedGemmPlan>> {
    auto plan = GroupedGemmPlan::create(spec);
    if (!plan) return fail(plan.error());
    return std::make_shared<const GroupedGemmPlan>(std::move(*plan));
  });
}

}  // namespace cuactor::kernels

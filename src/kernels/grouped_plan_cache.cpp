// Cache of grouped GEMM plans.
#include "cuactor/kernels/grouped_plan_cache.hpp"

#include <boost/container_hash/hash.hpp>

namespace cuactor::kernels {

std::size_t GroupedPlanCache::KeyHash::operator()(const Key& k) const noexcept {
  std::size_t h = hash_value(k.epilogue);
  for (int v : {static_cast<int>(k.a), static_cast<int>(k.b), static_cast<int>(k.d), static_cast<int>(k.layout_b),
                k.arch.sm(), static_cast<int>(k.arch.arch_specific), k.sm_count, k.device, static_cast<int>(k.small_m)})
    boost::hash_combine(h, v);
  boost::hash_combine(h, k.sku_override ? hash_value(*k.sku_override) : std::size_t{0});
  return h;
}

Result<std::shared_ptr<const GroupedGemmPlan>> GroupedPlanCache::get(const GroupedGemmSpec& spec) {
  const Key key{spec.a,
                spec.b,
                spec.d,
                spec.layout_b,
                spec.arch,
                spec.sm_count,
                spec.device,
                spec.rows_per_group_hint > 0 && spec.rows_per_group_hint <= 64,
                spec.sku_override,
                spec.epilogue};
  return cache_.get_or_create(key, [&]() -> Result<std::shared_ptr<const GroupedGemmPlan>> {
    auto plan = GroupedGemmPlan::create(spec);
    if (!plan) return fail(plan.error());
    return std::make_shared<const GroupedGemmPlan>(std::move(*plan));
  });
}

}  // namespace cuactor::kernels

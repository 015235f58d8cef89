// Cache of grouped GEMM plans.
#include "cuactor/kernels/grouped_plan_cache.hpp"

#include <boost/container_hash/hash.hpp>

namespace cuactor::kernels {

std::size_t GroupedPlanCache::KeyHash::operator()(const Key& k) const noexcept {
  std::size_t h = hash_value(k.epilogue);
  for (int v :
       {static_cast<int>(k.a), static_cast<int>(k.b), static_cast<int>(k.d), static_cast<int>(k.layout_b), k.arch.sm(),
        static_cast<int>(k.arch.arch_specific), k.sm_count, k.device, static_cast<int>(k.size_class)})
    boost::hash_combine(h, v);
  for (int v : k.hint_buckets) boost::hash_combine(h, v);
  boost::hash_combine(h, k.sku_override ? hash_value(*k.sku_override) : std::size_t{0});
  return h;
}

Result<std::shared_ptr<const GroupedGemmPlan>> GroupedPlanCache::get(const GroupedGemmSpec& spec) {
  std::array<int, 4> buckets{};
  if (planner_)
    buckets = {shape_hint_bucket(spec.group_count_hint), shape_hint_bucket(spec.rows_per_group_hint),
               shape_hint_bucket(spec.n_hint), shape_hint_bucket(spec.k_hint)};
  const Key key{spec.a,       spec.b,
                spec.d,       spec.layout_b,
                spec.arch,    spec.sm_count,
                spec.device,  grouped_size_class(spec),
                buckets,      spec.sku_override,
                spec.epilogue};
  return cache_.get_or_create(key, [&]() -> Result<std::shared_ptr<const GroupedGemmPlan>> {
    auto plan = planner_ ? planner_(spec) : GroupedGemmPlan::create(spec);
    if (!plan) return fail(plan.error());
    return std::make_shared<const GroupedGemmPlan>(std::move(*plan));
  });
}

}  // namespace cuactor::kernels

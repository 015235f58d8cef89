// Cache of convolution plans.
#include "cuactor/kernels/conv_plan_cache.hpp"

#include <boost/container_hash/hash.hpp>

namespace cuactor::kernels {

std::size_t ConvPlanCache::KeyHash::operator()(const Key& k) const noexcept {
  std::size_t h = hash_value(k.spec);
  for (std::size_t v : {static_cast<std::size_t>(k.arch.sm()), static_cast<std::size_t>(k.arch.arch_specific),
                        static_cast<std::size_t>(k.sm_count), static_cast<std::size_t>(k.device),
                        k.sku_override ? hash_value(*k.sku_override) : std::size_t{0},
                        k.split_override ? static_cast<std::size_t>(k.split_override->images) << 16 |
                                               static_cast<std::size_t>(k.split_override->rows) << 8 |
                                               static_cast<std::size_t>(k.split_override->channels)
                                         : std::size_t{0}})
    boost::hash_combine(h, v);
  return h;
}

Result<ConvPlan> ConvPlanCache::get(const ConvSpec& spec, GpuArch arch, const ConvPlanOptions& options) {
  const Key key{spec, arch, options.sm_count, options.device, options.sku_override, options.split_override};
  return cache_.get_or_create(
      key, [&] { return planner_ ? planner_(spec, arch, options) : ConvPlan::create(spec, arch, options); });
}

}  // namespace cuactor::kernels

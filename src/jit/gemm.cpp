#include "cuactor/jit/gemm.hpp"

#include <fmt/format.h>

#include <map>
#include <thread>

#include "cuactor/core/no_throw.hpp"
#include "cuactor/kernels/catalog.hpp"

namespace cuactor::jit {
namespace {

using kernels::GemmFamily;
using kernels::GemmSku;

// Element types that kernels/gemm_tags.cuh names.
bool has_tag(DType t) {
  return t == DType::bf16 || t == DType::f16 || t == DType::f32 || t == DType::e4m3 || t == DType::e5m2;
}

}  // namespace

Result<std::string> template_for(const GemmSku& sku) {
  // The TEMPLATE each (family, arch) of kernels/catalog.cmake uses; the catalog rendering test
  // (JitGemm.RendersEveryCatalogInstanceByteForByte) fails when the two disagree.
  struct Entry {
    GemmFamily family;
    GpuArch arch;
    const char* file;
  };
  static constexpr Entry kTemplates[] = {
      {GemmFamily::dense, GpuArch{9, 0, true}, "dense_sm90_instance.cu.in"},
      {GemmFamily::dense, GpuArch{8, 0, false}, "dense_sm80_instance.cu.in"},
      {GemmFamily::grouped, GpuArch{9, 0, true}, "grouped_instance.cu.in"},
      {GemmFamily::grouped, GpuArch{8, 0, false}, "grouped_sm80_instance.cu.in"},
      {GemmFamily::conv_fprop, GpuArch{9, 0, true}, "conv_sm90_instance.cu.in"},
      {GemmFamily::conv_dgrad, GpuArch{9, 0, true}, "conv_sm90_instance.cu.in"},
      {GemmFamily::conv_wgrad, GpuArch{9, 0, true}, "conv_sm90_instance.cu.in"},
      {GemmFamily::conv_fprop, GpuArch{8, 0, false}, "conv_sm80_instance.cu.in"},
      {GemmFamily::conv_dgrad, GpuArch{8, 0, false}, "conv_sm80_instance.cu.in"},
      {GemmFamily::conv_wgrad, GpuArch{8, 0, false}, "conv_sm80_instance.cu.in"},
  };
  for (const Entry& e : kTemplates)
    if (e.family == sku.family && e.arch == sku.arch) return std::string(e.file);
  return fail(errc::unsupported, fmt::format("no instantiation template for {} GEMM on {} (templates: dense and "
                                             "grouped, conv_fprop/dgrad/wgrad for sm_90a and sm_80)",
                                             kernels::name(sku.family), sku.arch.name()));
}

Placeholders placeholders_for(const GemmSku& sku) {
  auto str = [](auto v) { return std::string(v); };
  return Placeholders{
      {"FAMILY", str(kernels::name(sku.family))},
      {"ARCH", sku.arch.name()},
      {"ELEMENT_A", str(name(sku.a))},
      {"ELEMENT_B", str(name(sku.b))},
      {"ELEMENT_C", str(name(sku.c))},
      {"ELEMENT_D", str(name(sku.d))},
      {"ELEMENT_ACC", str(name(sku.accumulator))},
      {"LAYOUT_A", str(kernels::name(sku.layout_a))},
      {"LAYOUT_B", str(kernels::name(sku.layout_b))},
      {"LAYOUT_C", str(kernels::name(sku.layout_c))},
      {"TILE_M", std::to_string(sku.tile.m)},
      {"TILE_N", std::to_string(sku.tile.n)},
      {"TILE_K", std::to_string(sku.tile.k)},
      {"CLUSTER_M", std::to_string(sku.cluster.m)},
      {"CLUSTER_N", std::to_string(sku.cluster.n)},
      {"CLUSTER_K", std::to_string(sku.cluster.k)},
      {"STAGES", std::to_string(sku.stages)},
      {"SCHEDULE", str(kernels::name(sku.schedule))},
      {"EPILOGUE", sku.epilogue.token()},
      {"EPILOGUE_TYPE", sku.epilogue.cxx_type()},
      {"SYMBOL", sku.symbol_name()},
  };
}

Result<InstanceRequest> instance_request(const GemmSku& sku, std::optional<GpuArch> target) {
  auto templ = template_for(sku);
  if (!templ) return fail(templ.error());
  for (auto [operand, t] :
       {std::pair{"A", sku.a}, {"B", sku.b}, {"C", sku.c}, {"D", sku.d}, {"accumulator", sku.accumulator}})
    if (!has_tag(t))
      return fail(errc::unsupported, fmt::format("SKU {}: element type {} of {} has no kernel template tag",
                                                 sku.to_string(), name(t), operand));
  if ((is_low_precision_float(sku.a) || is_low_precision_float(sku.b)) && sku.arch.sm() < 89)
    return fail(errc::unsupported, fmt::format("SKU {}: fp8 operands need sm_89 or later, the SKU targets {}",
                                               sku.to_string(), sku.arch.name()));
  if (sku.tile.m <= 0 || sku.tile.n <= 0 || sku.tile.k <= 0)
    return fail(errc::invalid_argument, fmt::format("SKU {}: tile {}x{}x{} must be positive in every extent",
                                                    sku.to_string(), sku.tile.m, sku.tile.n, sku.tile.k));
  if (sku.cluster.m <= 0 || sku.cluster.n <= 0 || sku.cluster.k <= 0)
    return fail(errc::invalid_argument, fmt::format("SKU {}: cluster {}x{}x{} must be positive in every extent",
                                                    sku.to_string(), sku.cluster.m, sku.cluster.n, sku.cluster.k));
  if (sku.stages < 0)
    return fail(errc::invalid_argument, fmt::format("SKU {}: stages={} is negative", sku.to_string(), sku.stages));
  if (kernels::is_stream_k(sku.schedule) && (sku.family != kernels::GemmFamily::dense || !sku.arch.arch_specific))
    return fail(errc::unsupported, fmt::format("SKU {}: schedule {} (stream-K) exists for dense sm_90a kernels only",
                                               sku.to_string(), name(sku.schedule)));
  // The conv template takes CUTLASS's one-warpgroup kernel (warpspecialized), cuactor's cooperative
  // one (two warpgroups: 128 rows or more), its coresident one or its pingpong one (a warpgroup's
  // accumulators: 128x128 at most); GEMM templates know neither warpspecialized nor coresident.
  if (kernels::is_conv(sku.family)) {
    if (!kernels::conv_schedule_fits(sku))
      return fail(errc::unsupported,
                  fmt::format("SKU {}: convolution takes schedule warpspecialized, coresident, cooperative with "
                              "tiles of 128 rows or more, or pingpong with tiles of at most 128x128 elements and no "
                              "cluster, on sm_90a, and multistage with 2 or more stages on sm_80 (not {} with a "
                              "{}x{} tile, a {}x{}x{} cluster and {} stages)",
                              sku.to_string(), name(sku.schedule), sku.tile.m, sku.tile.n, sku.cluster.m, sku.cluster.n,
                              sku.cluster.k, sku.stages));
  } else if (sku.schedule == kernels::GemmSchedule::warpspecialized ||
             sku.schedule == kernels::GemmSchedule::coresident) {
    return fail(errc::unsupported, fmt::format("SKU {}: schedule {} is for convolution families only", sku.to_string(),
                                               name(sku.schedule)));
  }
  if (kernels::is_conv(sku.family) && sku.epilogue != kernels::GemmEpilogue::linear_combination)
    return fail(errc::unsupported,
                fmt::format("SKU {}: convolution instances compute linear_combination only", sku.to_string()));
  if (!sku.epilogue.is_preset() && (sku.arch != GpuArch{9, 0, true} || (sku.family != kernels::GemmFamily::dense &&
                                                                        sku.family != kernels::GemmFamily::grouped)))
    return fail(errc::unsupported, fmt::format("SKU {}: epilogue trees are rendered for sm_90a dense and grouped "
                                               "kernels only (CUTLASS's Sm90EVT visitors)",
                                               sku.to_string()));
  if (const auto node = kernels::dense_only_output(sku.epilogue); node && sku.family != kernels::GemmFamily::dense)
    return fail(errc::unsupported, fmt::format("SKU {}: the epilogue output {} is written by dense kernels only",
                                               sku.to_string(), name(*node)));
  if (kernels::pairs_columns(sku.epilogue) && sku.family != kernels::GemmFamily::grouped)
    return fail(errc::unsupported,
                fmt::format("SKU {}: the swiglu root is rendered for grouped kernels only", sku.to_string()));
  const GpuArch compile_for = target.value_or(sku.arch);
  if (compile_for.sm() < sku.arch.sm())
    return fail(errc::unsupported, fmt::format("SKU {} needs {} or later and cannot be compiled for {}",
                                               sku.to_string(), sku.arch.name(), compile_for.name()));
  if (sku.arch.arch_specific && compile_for != sku.arch)
    return fail(errc::unsupported,
                fmt::format("SKU {} uses {}-specific instructions and can only be compiled for it, not {}",
                            sku.to_string(), sku.arch.name(), compile_for.name()));
  InstanceRequest r;
  r.template_name = std::move(*templ);
  r.values = placeholders_for(sku);
  r.symbol = sku.symbol_name();
  r.arch = compile_for;
  // amax and rowsum outputs are zeroed by CUTLASS through the driver API (cutlass/workspace.h).
  if (sku.epilogue.uses(kernels::EpilogueNode::amax) || sku.epilogue.uses(kernels::EpilogueNode::row_sum))
    r.options.push_back("-lcuda");
  return r;
}

Result<GemmSku> sku_of_identity(std::string_view identity) {
  std::map<std::string, std::string, std::less<>> values;
  std::size_t pos = 0;
  while (pos <= identity.size()) {
    const std::size_t end = std::min(identity.find('|', pos), identity.size());
    const std::string_view field = identity.substr(pos, end - pos);
    if (const auto eq = field.find('='); eq != std::string_view::npos)
      values.emplace(std::string(field.substr(0, eq)), std::string(field.substr(eq + 1)));
    pos = end + 1;
  }
  std::string missing;
  const auto get = [&](const char* key) -> std::string {
    const auto it = values.find(key);
    if (it == values.end()) {
      if (missing.empty()) missing = key;
      return {};
    }
    return it->second;
  };
  const std::string text = fmt::format(
      "{}:{}:{},{},{},{},{}:{},{},{}:{}x{}x{}:{}x{}x{}:s{}:{}:{}", get("FAMILY"), get("ARCH"), get("ELEMENT_A"),
      get("ELEMENT_B"), get("ELEMENT_C"), get("ELEMENT_D"), get("ELEMENT_ACC"), get("LAYOUT_A"), get("LAYOUT_B"),
      get("LAYOUT_C"), get("TILE_M"), get("TILE_N"), get("TILE_K"), get("CLUSTER_M"), get("CLUSTER_N"),
      get("CLUSTER_K"), get("STAGES"), get("SCHEDULE"), get("EPILOGUE"));
  if (!missing.empty())
    return fail(errc::invalid_argument, fmt::format("identity '{}' is not a GEMM instance's: it has no {} placeholder",
                                                    identity.substr(0, 80), missing));
  return GemmSku::parse(text);
}

GemmJit::GemmJit(std::shared_ptr<JitEngine> engine, std::vector<std::string> nvcc_options, std::size_t plan_capacity)
    : engine_(std::move(engine)), options_(std::move(nvcc_options)), plans_(plan_capacity) {}

Result<InstanceRequest> GemmJit::request_for(const GemmSku& sku, std::optional<GpuArch> target) const {
  auto request = instance_request(sku, target);
  if (request) request->options.insert(request->options.end(), options_.begin(), options_.end());
  return request;
}

JitFuture<JitInstance> GemmJit::compile(const GemmSku& sku, std::optional<GpuArch> target) {
  return plans_.get_or_start(Key{sku, target.value_or(sku.arch)}, [&](JitFuture<JitInstance> future) {
    auto request = request_for(sku, target);
    if (!request) return future.set(fail(request.error()));
    engine_->instance(std::move(*request)).then([future](const JitFuture<JitInstance>::Value& r) { future.set(r); });
  });
}

JitFuture<ResolvedInstance> GemmJit::resolve(const GemmSku& sku, std::optional<GpuArch> target) {
  if (const auto* entry = kernels::find_in_catalog(sku))
    return JitFuture<ResolvedInstance>::ready(
        std::make_shared<const ResolvedInstance>(ResolvedInstance{entry->instance, nullptr}));
  auto out = JitFuture<ResolvedInstance>::pending();
  compile(sku, target).then([out](const JitFuture<JitInstance>::Value& r) {
    if (!r) return out.set(fail(r.error()));
    out.set(std::make_shared<const ResolvedInstance>(ResolvedInstance{&(*r)->abi(), *r}));
  });
  return out;
}

Result<WarmReport> GemmJit::warm(const GemmSku& sku, std::optional<GpuArch> target) {
  auto request = request_for(sku, target);
  if (!request) return fail(request.error());
  return engine_->warm(*request);
}

std::vector<SkuWarmResult> warm_all(GemmJit& jit, std::span<const GemmSku> skus, std::optional<GpuArch> target) {
  std::vector<SkuWarmResult> results;
  results.reserve(skus.size());
  for (const auto& sku : skus) results.push_back({sku, fail(errc::cancelled, "not warmed")});
  std::vector<std::thread> threads;
  threads.reserve(skus.size());
  for (auto& r : results)
    threads.emplace_back(
        [&jit, &r, target] { r.report = result_or_error("jit warm", [&] { return jit.warm(r.sku, target); }); });
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace cuactor::jit

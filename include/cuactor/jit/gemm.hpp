/// @file
/// GEMM kernels on demand ([J1] Strategy A): a GemmSku is rendered from the same instantiation
/// template, with the same placeholder values, as kernels/catalog.cmake uses for the ahead-of-time
/// matrix, compiled by the nvcc back end and loaded; instances are plan-cached by SKU.
#pragma once

#include <boost/container_hash/hash.hpp>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cuactor/core/arch.hpp"
#include "cuactor/jit/engine.hpp"
#include "cuactor/kernels/sku.hpp"

namespace cuactor::jit {

/// The instantiation template of a SKU's family and architecture (e.g. "dense_sm90_instance.cu.in");
/// `unsupported` naming family and arch when no template expresses them.
Result<std::string> template_for(const kernels::GemmSku& sku);

/// The placeholder values kernels/catalog.cmake's cuactor_gemm_instance() sets for this SKU
/// (@FAMILY@ @ARCH@ @ELEMENT_*@ @LAYOUT_*@ @TILE_*@ @CLUSTER_*@ @STAGES@ @SCHEDULE@ @EPILOGUE@ @SYMBOL@).
Placeholders placeholders_for(const kernels::GemmSku& sku);

/// A checked instance request for `sku`. `target` is the architecture to generate SASS for: it must
/// be the SKU's own for arch-specific SKUs (sm_90a), and may be any later plain architecture for
/// portable ones (an sm_80 SKU compiled for sm_90 runs on Hopper). Errors: `unsupported` (element
/// type without a template tag, fp8 below sm_89, target the SKU cannot run on), `invalid_argument`
/// (non-positive tile or cluster extents, negative stages).
Result<InstanceRequest> instance_request(const kernels::GemmSku& sku, std::optional<GpuArch> target = std::nullopt);

/// The SKU a GEMM instance request's identity (InstanceRequest::identity(), the metadata of its disk
/// cache entry) was rendered for; `invalid_argument` when the identity is not one of a GEMM instance.
Result<kernels::GemmSku> sku_of_identity(std::string_view identity);

/// A usable instance: from the ahead-of-time catalog or from the JIT (kept alive by `jit`).
struct ResolvedInstance {
  const cuactor_gemm_instance* abi = nullptr;
  /// Owner of a run-time instance; null for catalog instances (static storage).
  std::shared_ptr<const JitInstance> jit;
  [[nodiscard]] bool from_catalog() const noexcept { return jit == nullptr; }
};

/// GEMM instances by SKU on top of a JitEngine, plan-cached by (SKU, target).
class GemmJit {
 public:
  /// Uses `engine` for rendering, compiling and caching; `nvcc_options` are added to every compile
  /// (and so to every identity).
  explicit GemmJit(std::shared_ptr<JitEngine> engine, std::vector<std::string> nvcc_options = {},
                   std::size_t plan_capacity = 64);

  /// The run-time compiled instance of `sku` (even when the catalog has it: tests compare the two).
  JitFuture<JitInstance> compile(const kernels::GemmSku& sku, std::optional<GpuArch> target = std::nullopt);
  /// The catalog's instance when compiled in (ready at once), else the run-time one.
  JitFuture<ResolvedInstance> resolve(const kernels::GemmSku& sku, std::optional<GpuArch> target = std::nullopt);
  /// Fills the disk cache for `sku` on the calling thread (no GPU needed).
  Result<WarmReport> warm(const kernels::GemmSku& sku, std::optional<GpuArch> target = std::nullopt);

  [[nodiscard]] PlanCacheStats plan_stats() const { return plans_.stats(); }
  [[nodiscard]] JitEngine& engine() noexcept { return *engine_; }

 private:
  struct Key {
    kernels::GemmSku sku;
    GpuArch target;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept {
      std::size_t h = kernels::hash_value(k.sku);
      boost::hash_combine(h, k.target.sm() * 2 + static_cast<int>(k.target.arch_specific));
      return h;
    }
  };
  Result<InstanceRequest> request_for(const kernels::GemmSku& sku, std::optional<GpuArch> target) const;
  std::shared_ptr<JitEngine> engine_;
  std::vector<std::string> options_;
  PlanCache<Key, JitInstance, KeyHash> plans_;
};

/// The outcome of warming one SKU with warm_all().
struct SkuWarmResult {
  kernels::GemmSku sku;
  Result<WarmReport> report;
};

/// Fills the disk cache for every SKU at once: one thread per SKU, while the library caps how many
/// nvcc processes run together (by cores and free memory, ~3.3 GB per CUTLASS compile), so the others
/// wait for a compile slot. `target` is the GPU the code is compiled for (default: each SKU's own
/// architecture; an sm_80 SKU compiled for sm_90 runs on Hopper). Returns one result per SKU, in
/// order; never throws.
std::vector<SkuWarmResult> warm_all(GemmJit& jit, std::span<const kernels::GemmSku> skus,
                                    std::optional<GpuArch> target = std::nullopt);

}  // namespace cuactor::jit

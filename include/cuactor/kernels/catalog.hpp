/// @file
/// The kernel catalog: every GEMM kernel instance compiled into this build ([J1] Strategy B),
/// each with its GemmSku and its C ABI object (kernels/instance_abi.h).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cuactor/kernels/sku.hpp"

extern "C" {
struct cuactor_gemm_instance;
}

namespace cuactor::kernels {

/// One compiled kernel: what it computes and how to call it.
struct CatalogEntry {
  GemmSku sku;
  const cuactor_gemm_instance* instance = nullptr;
};

/// Every instance compiled into this build, in matrix order (empty when CUACTOR_KERNEL_ARCHS
/// selected no families).
std::span<const CatalogEntry> catalog() noexcept;

/// Which part of the kernel matrix a build compiled. Only `full` holds every kernel the heuristics
/// choose among; in the others a plan may settle for a kernel that the whole matrix would beat, or
/// find none for a type.
enum class CatalogScope {
  full,      ///< Every entry of kernels/catalog.cmake for the architectures CUACTOR_KERNEL_ARCHS selects
             ///< (scripts/gpu-check, any build with a GPU).
  sample,    ///< CUACTOR_CATALOG=sample, what scripts/test picks without a GPU: the entries marked
             ///< SAMPLE, a compile check of each instance template.
  filtered,  ///< CUACTOR_CATALOG_FILTER: the entries whose symbol matches a regular expression, for
             ///< targeted builds (a sample build that is also filtered reports `sample`).
};

/// The scope of this build's catalog.
CatalogScope catalog_scope() noexcept;

/// "full", "sample" or "filtered".
std::string_view name(CatalogScope scope) noexcept;

/// The entry of exactly this SKU, or null if it was not compiled in.
const CatalogEntry* find_in_catalog(const GemmSku& sku) noexcept;

/// Every entry of one family.
std::vector<const CatalogEntry*> catalog_entries(GemmFamily family);

/// A group of compiled instances that share family, architecture and element types.
struct KernelFamilyCount {
  GemmFamily family = GemmFamily::dense;
  GpuArch arch;
  DType a = DType::bf16;  ///< Element type of A (and B, but for mixed inputs see `b`).
  DType b = DType::bf16;
  DType d = DType::bf16;  ///< Output element type.
  int count = 0;          ///< Instances (tile, cluster, schedule, layout variants).
};

/// The compiled instances grouped by (family, arch, A, B, D), in a stable order.
std::vector<KernelFamilyCount> catalog_families();

/// True if a catalog kernel of `sku` can run on a device whose best target is `device`: sm_90a
/// (arch-specific) kernels need exactly that compute capability; sm_80 kernels are compiled as
/// sm_80 and sm_90 machine code (kernels/catalog.cmake), so they run on compute capability 8.x and
/// 9.x devices.
bool runs_on(const GemmSku& sku, GpuArch device) noexcept;

/// Checks that an instance was built against this ABI with argument struct size `args_size`;
/// `unsupported` naming both versions otherwise.
Status check_instance_abi(const cuactor_gemm_instance& instance, unsigned args_size);

}  // namespace cuactor::kernels

/// @file
/// Test support for dense plan rules checked without a device: an instance that stands in for a
/// compiled dense kernel (it accepts every problem, needs no workspace and records the arguments of
/// its last launch), so that GemmPlan::with_instance and run() can be exercised in any build.
#pragma once

#include <cstddef>

#include "kernels/instance_abi.h"

namespace cuactor::test_support {

/// The fake kernel's entry points; `last` holds the arguments of the latest run().
struct FakeDenseKernel {
  static inline cuactor_dense_args last{};
  static int can_implement(const void*) { return CUACTOR_KERNEL_OK; }
  static std::size_t workspace_size(const void*) { return 0; }
  static int run(const void* args, void*, std::size_t, void*) {
    last = *static_cast<const cuactor_dense_args*>(args);
    return CUACTOR_KERNEL_OK;
  }
};

/// The fake instance. Its descriptor names a bf16 sm_90a kernel, but plans take the SKU they are
/// given, so it stands in for any dense SKU.
inline const cuactor_gemm_instance& fake_dense_instance() {
  static const cuactor_gemm_instance instance = {
      CUACTOR_KERNEL_ABI_VERSION,
      sizeof(cuactor_dense_args),
      {"dense", "sm_90a", "bf16", "bf16", "bf16", "bf16", "f32", "row", "col", "row", 128, 256, 64, 2, 1, 1, 0,
       "cooperative", "linear_combination"},
      &FakeDenseKernel::can_implement,
      &FakeDenseKernel::workspace_size,
      &FakeDenseKernel::run,
  };
  return instance;
}

}  // namespace cuactor::test_support

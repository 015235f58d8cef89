/// @file
/// The C ABI entry points (instance_abi.h) of one kernel instance whose CUTLASS device adapter has
/// the usual can_implement / get_workspace_size / initialize / run interface (GemmUniversalAdapter,
/// CUTLASS 2.x GemmUniversal). The instance derives from this and supplies `Gemm` and
/// `static Gemm::Arguments make_arguments(const Args&)`.
#pragma once

#include <cutlass/cutlass.h>

#include <cstddef>

#include "kernels/instance_abi.h"

namespace cuactor::kernels {

template <class Instance, class Args>
struct AdapterEntries {
  /// ABI entry: CUACTOR_KERNEL_OK if CUTLASS accepts the problem (host only).
  static int can_implement(const void* p) {
    if (p == nullptr) return CUACTOR_KERNEL_BAD_ARGS;
    return Instance::Gemm::can_implement(Instance::make_arguments(*static_cast<const Args*>(p))) ==
                   cutlass::Status::kSuccess
               ? CUACTOR_KERNEL_OK
               : CUACTOR_KERNEL_NOT_IMPLEMENTABLE;
  }

  /// ABI entry: CUTLASS scratch bytes for the problem (host only).
  static size_t workspace_size(const void* p) {
    if (p == nullptr) return 0;
    return Instance::Gemm::get_workspace_size(Instance::make_arguments(*static_cast<const Args*>(p)));
  }

  /// ABI entry: builds the parameters on the host and enqueues the kernel on `stream` through the
  /// adapter (which launches as GemmUniversalAdapter does: no cluster attribute for cluster-1
  /// kernels); no allocation, no synchronisation.
  static int run(const void* p, void* workspace, size_t workspace_bytes, void* stream) {
    if (p == nullptr) return CUACTOR_KERNEL_BAD_ARGS;
    const auto args = Instance::make_arguments(*static_cast<const Args*>(p));
    if (Instance::Gemm::get_workspace_size(args) > workspace_bytes) return CUACTOR_KERNEL_WORKSPACE_TOO_SMALL;
    typename Instance::Gemm gemm;
    const auto s = static_cast<cudaStream_t>(stream);
    if (gemm.initialize(args, workspace, s) != cutlass::Status::kSuccess) return CUACTOR_KERNEL_INIT_FAILED;
    if (gemm.run(s) != cutlass::Status::kSuccess) return CUACTOR_KERNEL_LAUNCH_FAILED;
    return CUACTOR_KERNEL_OK;
  }
};

}  // namespace cuactor::kernels

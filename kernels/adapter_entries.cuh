/// @file
/// The C ABI entry points (instance_abi.h) of one kernel instance whose CUTLASS device adapter has
/// the usual can_implement / get_workspace_size / initialize / run interface (GemmUniversalAdapter,
/// CUTLASS 2.x GemmUniversal). The instance derives from this and supplies `Gemm` and
/// `static Gemm::Arguments make_arguments(const Args&)`.
#pragma once

#include <cuda.h>
#include <cutlass/cutlass.h>
#include <cutlass/device_kernel.h>

#include <atomic>
#include <concepts>
#include <cstddef>

#include "kernels/instance_abi.h"

namespace cuactor::kernels {

/// The unique id of the calling thread's current CUDA context (cuCtxGetId: never reused in the
/// process, so a context rebuilt after a reset gets a new one), 0 when the driver cannot say.
/// Resolved through the runtime's entry-point query: instances link no driver library.
inline unsigned long long current_context_id() noexcept {
  using GetCurrent = CUresult (*)(CUcontext*);
  using GetId = CUresult (*)(CUcontext, unsigned long long*);
  struct Entries {
    GetCurrent get_current = nullptr;
    GetId get_id = nullptr;
  };
  static const Entries entries = [] {
    Entries e;
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      e.get_current = reinterpret_cast<GetCurrent>(p);
    if (cudaGetDriverEntryPointByVersion("cuCtxGetId", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      e.get_id = reinterpret_cast<GetId>(p);
    return e;
  }();
  CUcontext ctx = nullptr;
  unsigned long long id = 0;
  if (entries.get_current == nullptr || entries.get_id == nullptr || entries.get_current(&ctx) != CUDA_SUCCESS ||
      ctx == nullptr || entries.get_id(ctx, &id) != CUDA_SUCCESS)
    return 0;
  return id;
}

/// A CUTLASS 3.x device adapter: parameters built by its kernel, launched by its static run().
template <class Gemm>
concept StaticRunAdapter = requires(typename Gemm::Params& params, const typename Gemm::Arguments& args, void* ws,
                                    cudaStream_t s) {
  { Gemm::GemmKernel::to_underlying_arguments(args, ws) } -> std::same_as<typename Gemm::Params>;
  { Gemm::run(params, s) } -> std::same_as<cutlass::Status>;
  Gemm::GemmKernel::SharedStorageSize;
};

/// Raises the dynamic shared memory limit of `Function` (a __global__ running `Kernel`, CUTLASS's
/// device_kernel by default) in the current context once. CUTLASS's initialize() does it on every
/// call: a driver call on every launch's host path, and the limit is a property of the function in
/// a context, lost only with the context (hence the context id).
template <class Kernel, auto Function = cutlass::device_kernel<Kernel>>
bool configure_shared_memory() noexcept {
  constexpr int bytes = static_cast<int>(Kernel::SharedStorageSize);
  if constexpr (bytes < (48 << 10)) {
    return true;
  } else {
    static std::atomic<unsigned long long> configured{0};  // the last context it was set in
    const unsigned long long ctx = current_context_id();
    if (ctx != 0 && configured.load(std::memory_order_acquire) == ctx) return true;
    if (cudaFuncSetAttribute(Function, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    if (ctx != 0) configured.store(ctx, std::memory_order_release);
    return true;
  }
}

template <class Instance, class Args>
struct AdapterEntries {
  /// Whether to launch as a programmatic dependent: `args` ask for it (dense arguments; other families
  /// have no such field) and the instance's kernel waits for its predecessor
  /// (Instance::kGridDependencyControl, sm90_gemm.cuh; a property of the instance, not of the
  /// translation unit, so that every instance's entry points agree with its kernel).
  static constexpr bool programmatic_launch(const Args& args) noexcept {
    if constexpr (requires {
                    args.programmatic_launch;
                    Instance::kGridDependencyControl;
                  })
      return Instance::kGridDependencyControl && args.programmatic_launch != 0;
    else
      return false;
  }

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
  /// kernels; a programmatic dependent launch where the arguments ask for one); no allocation, no
  /// synchronisation.
  static int run(const void* p, void* workspace, size_t workspace_bytes, void* stream) {
    if (p == nullptr) return CUACTOR_KERNEL_BAD_ARGS;
    const auto args = Instance::make_arguments(*static_cast<const Args*>(p));
    if (Instance::Gemm::get_workspace_size(args) > workspace_bytes) return CUACTOR_KERNEL_WORKSPACE_TOO_SMALL;
    using Gemm = typename Instance::Gemm;
    const auto s = static_cast<cudaStream_t>(stream);
    if constexpr (StaticRunAdapter<Gemm>) {
      using Kernel = typename Gemm::GemmKernel;
      if (Kernel::initialize_workspace(args, workspace, s) != cutlass::Status::kSuccess ||
          !configure_shared_memory<Kernel>())
        return CUACTOR_KERNEL_INIT_FAILED;
      auto params = Kernel::to_underlying_arguments(args, workspace);
      if (Gemm::run(params, s, nullptr, programmatic_launch(*static_cast<const Args*>(p))) != cutlass::Status::kSuccess)
        return CUACTOR_KERNEL_LAUNCH_FAILED;
    } else {
      Gemm gemm;
      if (gemm.initialize(args, workspace, s) != cutlass::Status::kSuccess) return CUACTOR_KERNEL_INIT_FAILED;
      if (gemm.run(s) != cutlass::Status::kSuccess) return CUACTOR_KERNEL_LAUNCH_FAILED;
    }
    return CUACTOR_KERNEL_OK;
  }
};

}  // namespace cuactor::kernels

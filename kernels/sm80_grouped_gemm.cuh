/// @file
/// Instantiation template of one sm_80 CUTLASS 2.x grouped GEMM configuration (cp.async multistage
/// mainloop, mma.sync) for bf16/f16: the path for Ampere and Ada, also run and tested on Hopper.
/// Like the sm_90a kernels it reads every group's shape, pointers and leading dimensions from
/// device memory (GroupScheduleMode::kDeviceOnly: no host problem sizes, no precomputation), with a
/// persistent grid of (blocks per SM x SM count) CTAs.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/gemm/device/gemm_grouped.h>
#include <cutlass/gemm/gemm.h>
#include <cutlass/gemm/kernel/default_gemm_grouped.h>
#include <cutlass/gemm/kernel/gemm_grouped_problem_visitor.h>

#include <cstdint>
#include <type_traits>

#include "kernels/gemm_tags.cuh"
#include "kernels/grouped_instance_abi.h"

namespace cuactor::kernels::sm80 {

/// One grouped configuration D[g] = alpha * A[g] B[g] + beta * C[g], fp32 accumulation, from the
/// tag types of gemm_tags.cuh (A, C, D row-major; B "col" = N x K row-major or "row" = K x N).
/// Per-group alpha (alpha_per_group) is not supported here: can_implement rejects it.
template <class TagA, class TagB, class TagC, class TagD, class TagAcc, class TagLayoutA, class TagLayoutB,
          class TagLayoutC, int TileM, int TileN, int TileK, int Stages>
struct GroupedGemm {
  using ElementA = typename TagA::type;
  using ElementB = typename TagB::type;
  using ElementD = typename TagD::type;
  using ElementAccumulator = typename TagAcc::type;
  static_assert(std::is_same_v<TagC, TagD>, "grouped SKUs read C in D's element type");
  static_assert(std::is_same_v<typename TagLayoutA::type, cutlass::layout::RowMajor> &&
                    std::is_same_v<typename TagLayoutC::type, cutlass::layout::RowMajor>,
                "grouped SKUs take A, C and D row-major");
  static constexpr int kAlignmentA = 128 / cutlass::sizeof_bits<ElementA>::value;
  static constexpr int kAlignmentB = 128 / cutlass::sizeof_bits<ElementB>::value;
  static constexpr int kAlignmentD = 128 / cutlass::sizeof_bits<ElementD>::value;

  using GemmKernel = typename cutlass::gemm::kernel::DefaultGemmGrouped<
      ElementA, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, kAlignmentA, ElementB,
      typename TagLayoutB::type, cutlass::ComplexTransform::kNone, kAlignmentB, ElementD, cutlass::layout::RowMajor,
      ElementAccumulator, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      cutlass::gemm::GemmShape<TileM, TileN, TileK>, cutlass::gemm::GemmShape<TileM / 2, TileN / 2, TileK>,
      cutlass::gemm::GemmShape<16, 8, 16>,
      cutlass::epilogue::thread::LinearCombination<ElementD, kAlignmentD, ElementAccumulator, ElementAccumulator>,
      cutlass::gemm::threadblock::GemmBatchedIdentityThreadblockSwizzle, Stages,
      cutlass::gemm::kernel::GroupScheduleMode::kDeviceOnly>::GemmKernel;
  using Gemm = cutlass::gemm::device::GemmGrouped<GemmKernel>;
  static_assert(sizeof(cutlass::gemm::GemmCoord) == 3 * sizeof(std::int32_t));

  /// CUTLASS arguments from the ABI's (problem sizes, pointers and strides in device memory).
  static typename Gemm::Arguments make_arguments(const cuactor_grouped_args& a, int threadblock_count) {
    typename Gemm::EpilogueOutputOp::Params epilogue(a.alpha, a.beta);
    return typename Gemm::Arguments(
        reinterpret_cast<cutlass::gemm::GemmCoord*>(const_cast<std::int32_t*>(a.problem_shapes)), a.group_count,
        threadblock_count, epilogue, reinterpret_cast<ElementA**>(const_cast<void**>(a.ptr_a)),
        reinterpret_cast<ElementB**>(const_cast<void**>(a.ptr_b)),
        reinterpret_cast<ElementD**>(const_cast<void**>(a.ptr_c)),
        reinterpret_cast<ElementD**>(const_cast<void**>(a.ptr_d)), const_cast<std::int64_t*>(a.ld_a),
        const_cast<std::int64_t*>(a.ld_b), const_cast<std::int64_t*>(a.ld_c), const_cast<std::int64_t*>(a.ld_d));
  }

  /// ABI entry: can_implement (host only; per-group alpha is not supported by this family).
  static int can_implement(const void* p) {
    if (p == nullptr) return CUACTOR_KERNEL_BAD_ARGS;
    const auto& a = *static_cast<const cuactor_grouped_args*>(p);
    return a.alpha_per_group == nullptr && a.group_count > 0 ? CUACTOR_KERNEL_OK : CUACTOR_KERNEL_NOT_IMPLEMENTABLE;
  }

  /// ABI entry: workspace_size (kDeviceOnly scheduling needs none).
  static size_t workspace_size(const void* p) {
    if (p == nullptr) return 0;
    return Gemm::get_workspace_size(make_arguments(*static_cast<const cuactor_grouped_args*>(p), 1));
  }

  /// ABI entry: run. Occupancy query and parameter setup on the host, one launch; no allocation,
  /// no synchronisation.
  static int run(const void* p, void* workspace, size_t workspace_bytes, void* stream) {
    if (p == nullptr) return CUACTOR_KERNEL_BAD_ARGS;
    const auto& a = *static_cast<const cuactor_grouped_args*>(p);
    if (can_implement(p) != CUACTOR_KERNEL_OK) return CUACTOR_KERNEL_NOT_IMPLEMENTABLE;
    const int blocks_per_sm = Gemm::maximum_active_blocks();
    if (blocks_per_sm <= 0) return CUACTOR_KERNEL_INIT_FAILED;
    const auto args = make_arguments(a, blocks_per_sm * a.sm_count);
    if (Gemm::get_workspace_size(args) > workspace_bytes) return CUACTOR_KERNEL_WORKSPACE_TOO_SMALL;
    Gemm gemm;
    const auto s = static_cast<cudaStream_t>(stream);
    if (gemm.initialize(args, workspace, s) != cutlass::Status::kSuccess) return CUACTOR_KERNEL_INIT_FAILED;
    if (gemm.run(s) != cutlass::Status::kSuccess) return CUACTOR_KERNEL_LAUNCH_FAILED;
    return CUACTOR_KERNEL_OK;
  }
};

}  // namespace cuactor::kernels::sm80

/// @file
/// Instantiation template of one sm_90a CUTLASS 3.x ptr-array grouped GEMM configuration: the
/// kernel reads every group's shape, pointers and leading dimensions from device memory, and is
/// launched with a persistent grid of one CTA per SM without host problem shapes, so a launch
/// needs no host synchronisation and can be captured into a graph.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

#include <cstdint>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <type_traits>

#include "kernels/adapter_entries.cuh"
#include "kernels/gemm_tags.cuh"
#include "kernels/grouped_instance_abi.h"
#include "kernels/sm90_epilogue.cuh"

namespace cuactor::kernels::sm90 {

/// One grouped GEMM configuration D[g] = alpha[g] * A[g] * B[g] + beta * C[g], fp32 accumulation,
/// from the tag types of gemm_tags.cuh: A row-major (M x K); B "col" (N x K row-major, "TN", how
/// weights are stored) or "row" (K x N row-major); C and D row-major (M x N) of one element type.
/// Schedule cooperative (two consumer warpgroups share a tile: large M) or pingpong (they
/// alternate tiles: small M, decode), fp8 with the fast-accum forms. Epilogue linear_combination,
/// or scaled_linear_combination for fp8 (per-tensor scales folded into alpha[g] on the device).
template <class TagA, class TagB, class TagC, class TagD, class TagAcc, class TagLayoutA, class TagLayoutB,
          class TagLayoutC, int TileM, int TileN, int TileK, int ClusterM, int ClusterN, int ClusterK, class Schedule,
          class Epilogue>
struct GroupedGemm : AdapterEntries<GroupedGemm<TagA, TagB, TagC, TagD, TagAcc, TagLayoutA, TagLayoutB, TagLayoutC,
                                                TileM, TileN, TileK, ClusterM, ClusterN, ClusterK, Schedule, Epilogue>,
                                    cuactor_grouped_args> {
  using ElementA = typename TagA::type;
  using ElementB = typename TagB::type;
  using ElementD = typename TagD::type;
  using LayoutA = typename TagLayoutA::type;
  using LayoutB = typename TagLayoutB::type;
  using LayoutD = typename TagLayoutC::type;
  using ElementAccumulator = typename TagAcc::type;
  static_assert(std::is_same_v<TagC, TagD>, "grouped SKUs read C in D's element type");
  static_assert(std::is_same_v<ElementAccumulator, float>, "grouped SKUs accumulate in f32");
  static_assert(std::is_same_v<LayoutA, cutlass::layout::RowMajor> &&
                    std::is_same_v<LayoutD, cutlass::layout::RowMajor>,
                "grouped SKUs take A, C and D row-major");
  static_assert(ClusterK == 1, "grouped SKUs cluster along M and N only");
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  static constexpr bool kIsFp8 = cutlass::sizeof_bits<ElementA>::value == 8;
  static constexpr int kAlignmentA = 128 / cutlass::sizeof_bits<ElementA>::value;
  static constexpr int kAlignmentB = 128 / cutlass::sizeof_bits<ElementB>::value;
  static constexpr int kAlignmentD = 128 / cutlass::sizeof_bits<ElementD>::value;

  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;
  static constexpr bool kPingpong =
      std::is_same_v<Schedule, tags::pingpong> || std::is_same_v<Schedule, tags::pingpong_fp8_fast_accum>;
  static constexpr bool kFastAccum = std::is_same_v<Schedule, tags::cooperative_fp8_fast_accum> ||
                                     std::is_same_v<Schedule, tags::pingpong_fp8_fast_accum>;
  static_assert(kFastAccum == kIsFp8, "fp8 grouped SKUs use the fast-accum schedules, 16-bit ones the plain ones");
  using KernelSchedule = std::conditional_t<
      kFastAccum,
      std::conditional_t<kPingpong, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8FastAccum,
                         cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum>,
      std::conditional_t<kPingpong, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
                         cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>>;
  using EpilogueSchedule = std::conditional_t<kPingpong, cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong,
                                              cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;

  /// An epilogue tree's vectors are per group (one pointer each) and alpha is per group when set.
  using Tree = evt::Root<Epilogue, ElementD, evt::Context<ElementD, TileShape, void, true>>;
  using FusionOp = typename std::conditional_t<evt::kIsPreset<Epilogue>,
                                               std::type_identity<cutlass::epilogue::fusion::LinearCombination<
                                                   ElementD, ElementAccumulator, ElementD, ElementAccumulator>>,
                                               Tree>::type;
  /// A swiglu root stores D itself (N / 2 columns): the collective's D is void then, with no TMA store.
  using CollectiveD = std::conditional_t<evt::kWritesD<Epilogue>, ElementD, void>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementAccumulator, ElementD, LayoutD*,
      kAlignmentD, CollectiveD, LayoutD*, kAlignmentD, EpilogueSchedule, FusionOp>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA*, kAlignmentA, ElementB, LayoutB*,
      kAlignmentB, ElementAccumulator, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  using StrideA = typename GemmKernel::InternalStrideA;
  using StrideB = typename GemmKernel::InternalStrideB;
  using StrideC = typename GemmKernel::InternalStrideC;
  using StrideD = typename GemmKernel::InternalStrideD;
  // The ABI passes one int64 leading dimension per group and operand; each CUTLASS packed stride is
  // exactly that one dynamic int64 (the unit and batch modes are static), so the arrays are
  // reinterpreted in place instead of converted.
  static_assert(sizeof(StrideA) == sizeof(std::int64_t) && sizeof(StrideB) == sizeof(std::int64_t) &&
                sizeof(StrideC) == sizeof(std::int64_t) && sizeof(StrideD) == sizeof(std::int64_t));
  static_assert(sizeof(typename ProblemShape::UnderlyingProblemShape) == 3 * sizeof(std::int32_t));

  /// CUTLASS arguments from the ABI's: shapes, pointers and strides all stay in device memory and no
  /// host problem shapes are given (persistent grid of hw_info.sm_count CTAs).
  static typename Gemm::Arguments make_arguments(const cuactor_grouped_args& a) {
    typename Gemm::Arguments args;
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape = {
        a.group_count,
        reinterpret_cast<typename ProblemShape::UnderlyingProblemShape*>(const_cast<std::int32_t*>(a.problem_shapes)),
        nullptr};
    args.mainloop = {reinterpret_cast<const ElementA**>(const_cast<const void**>(a.ptr_a)),
                     reinterpret_cast<StrideA*>(const_cast<std::int64_t*>(a.ld_a)),
                     reinterpret_cast<const ElementB**>(const_cast<const void**>(a.ptr_b)),
                     reinterpret_cast<StrideB*>(const_cast<std::int64_t*>(a.ld_b))};
    if constexpr (evt::kIsPreset<Epilogue>) {
      auto& fusion = args.epilogue.thread;
      fusion.alpha = a.alpha;
      fusion.beta = a.beta;
      if (a.alpha_per_group != nullptr) {  // alpha[g] (fp8 per-tensor scales folded in on the device)
        fusion.alpha_ptr = a.alpha_per_group;
        fusion.dAlpha = {cute::_0{}, cute::_0{}, 1};
      }
    } else {
      args.epilogue.thread =
          Tree::args({&a.epilogue, a.alpha, a.beta, a.alpha_per_group, nullptr, 0, 0, 0, a.ptr_d, a.ld_d});
    }
    args.epilogue.ptr_C = reinterpret_cast<const ElementD**>(const_cast<const void**>(a.ptr_c));
    args.epilogue.dC = reinterpret_cast<StrideC*>(const_cast<std::int64_t*>(a.ld_c));
    if constexpr (evt::kWritesD<Epilogue>)
      args.epilogue.ptr_D = reinterpret_cast<ElementD**>(const_cast<void**>(a.ptr_d));
    args.epilogue.dD = reinterpret_cast<StrideD*>(const_cast<std::int64_t*>(a.ld_d));
    args.hw_info.device_id = a.device;
    args.hw_info.sm_count = a.sm_count;
    return args;
  }
};

}  // namespace cuactor::kernels::sm90

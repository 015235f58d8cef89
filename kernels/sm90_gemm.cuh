/// @file
/// Instantiation template of one sm_90a CUTLASS 3.x dense GEMM configuration (TMA warp-specialized
/// kernels, wgmma, built through the collective builders) and the C ABI entry points that expose it
/// (instance_abi.h). Template arguments are the tag types of gemm_tags.cuh, so the placeholders of
/// dense_sm90_instance.cu.in are plain SKU tokens.
#pragma once

// Grid dependency control: the producer warps wait for the stream's previous kernel
// (griddepcontrol.wait) before their first global load, and the consumers release a dependent grid
// once their last tile's mainloop is done. A plan launched as a programmatic dependent
// (cuactor_dense_args::programmatic_launch) thus runs its prologue while the previous kernel finishes.
// Device scalars (the fp8 scales, read by CUTLASS's scalar broadcast as each thread builds the
// epilogue) come before any wait: plans launch those plainly. Launched plainly, the wait returns at
// once, and the release still lets a programmatic dependent of this kernel start early.
// Not for the stream-K schedules (CUACTOR_DENSE_SCHEDULE_<token>, set by dense_sm90_instance.cu.in):
// CUTLASS 4.2's stream-K scheduler does not compile with it (is_last_tile, a const member, passes a
// member to a non-const reference). Their Schedules say so (grid_dependency_control), and their
// instances launch plainly whatever the arguments ask (DenseGemm::kGridDependencyControl).
#if !defined(CUTLASS_ENABLE_GDC_FOR_SM90) && !defined(CUACTOR_DENSE_SCHEDULE_cooperative_streamk) && \
    !defined(CUACTOR_DENSE_SCHEDULE_cooperative_fp8_fast_accum_streamk)
#define CUTLASS_ENABLE_GDC_FOR_SM90 1
#endif

#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/kernel_hardware_info.h>

#include <cstdint>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <type_traits>

#include "kernels/adapter_entries.cuh"
#include "kernels/gemm_tags.cuh"
#include "kernels/instance_abi.h"
#include "kernels/sm90_epilogue.cuh"

namespace cuactor::kernels::sm90 {

/// Kernel schedule, epilogue schedule and tile scheduler of a schedule tag (`void` = CUTLASS's
/// default persistent data-parallel scheduler), and whether its kernels are built with grid dependency
/// control (see the top of this file).
template <class Schedule>
struct Schedules;
template <>
struct Schedules<tags::cooperative> {
  using kernel = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using tile_scheduler = void;
  static constexpr bool grid_dependency_control = true;
};
template <>
struct Schedules<tags::pingpong> {
  using kernel = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using epilogue = cutlass::epilogue::TmaWarpSpecialized;
  using tile_scheduler = void;
  static constexpr bool grid_dependency_control = true;
};
template <>
struct Schedules<tags::cooperative_fp8_fast_accum> {
  using kernel = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum;
  using epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using tile_scheduler = void;
  static constexpr bool grid_dependency_control = true;
};
template <>
struct Schedules<tags::pingpong_fp8_fast_accum> {
  using kernel = cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum;
  using epilogue = cutlass::epilogue::TmaWarpSpecialized;
  using tile_scheduler = void;
  static constexpr bool grid_dependency_control = true;
};
template <>
struct Schedules<tags::cooperative_streamk> : Schedules<tags::cooperative> {
  using tile_scheduler = cutlass::gemm::StreamKScheduler;
  static constexpr bool grid_dependency_control = false;
};
template <>
struct Schedules<tags::cooperative_fp8_fast_accum_streamk> : Schedules<tags::cooperative_fp8_fast_accum> {
  using tile_scheduler = cutlass::gemm::StreamKScheduler;
  static constexpr bool grid_dependency_control = false;
};

/// D = (alpha * scale_a * scale_b) * acc + beta * C as an epilogue visitor tree: the three factors
/// are one scalar broadcast that multiplies its values, each read from device memory when its
/// pointer is set, so fp8 scales produced by an earlier kernel need no host round trip.
template <class ElementD, class ElementC, class ElementCompute>
using ScaledLinearCombination = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, ElementD, ElementCompute,
                                           cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90ScalarBroadcast<ElementCompute, cute::Stride<cute::_0, cute::_0, int64_t>>,
    cutlass::epilogue::fusion::Sm90SrcFetch<ElementC>,
    cutlass::epilogue::fusion::Sm90EVT<
        cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, ElementCompute, ElementCompute,
                                               cutlass::FloatRoundStyle::round_to_nearest>,
        cutlass::epilogue::fusion::Sm90ScalarBroadcast<ElementCompute, cute::Stride<cute::_0, cute::_0, int64_t>, 3>,
        cutlass::epilogue::fusion::Sm90AccFetch>>;

/// The fusion operation of an epilogue tag: a preset, or an epilogue tree (sm90_epilogue.cuh).
template <class Epilogue, class ElementD, class ElementC, class ElementCompute, class TileShape, class StrideD>
struct Fusion {
  using Tree = evt::Root<Epilogue, ElementD, evt::Context<ElementC, TileShape, StrideD, false>>;
  using type = typename Tree::type;
};
template <class ElementD, class ElementC, class ElementCompute, class TileShape, class StrideD>
struct Fusion<tags::linear_combination, ElementD, ElementC, ElementCompute, TileShape, StrideD> {
  using type = cutlass::epilogue::fusion::LinearCombination<ElementD, ElementCompute, ElementC, ElementCompute>;
};
template <class ElementD, class ElementC, class ElementCompute, class TileShape, class StrideD>
struct Fusion<tags::scaled_linear_combination, ElementD, ElementC, ElementCompute, TileShape, StrideD> {
  using type = ScaledLinearCombination<ElementD, ElementC, ElementCompute>;
};

/// One dense GEMM configuration: D (M x N) = epilogue(A (M x K) * B (K x N), C), fp32 accumulation.
template <class A, class B, class C, class D, class Acc, class LayoutA, class LayoutB, class LayoutC, int TileM,
          int TileN, int TileK, int ClusterM, int ClusterN, int ClusterK, class Schedule, class Epilogue>
struct DenseGemm : AdapterEntries<DenseGemm<A, B, C, D, Acc, LayoutA, LayoutB, LayoutC, TileM, TileN, TileK, ClusterM,
                                            ClusterN, ClusterK, Schedule, Epilogue>,
                                  cuactor_dense_args> {
  using ElementA = typename A::type;
  using ElementB = typename B::type;
  using ElementC = typename C::type;
  using ElementD = typename D::type;
  using ElementAccumulator = typename Acc::type;
  using ElementCompute = float;
  static constexpr int kAlignmentA = 128 / cutlass::sizeof_bits<ElementA>::value;
  static constexpr int kAlignmentB = 128 / cutlass::sizeof_bits<ElementB>::value;
  static constexpr int kAlignmentC = 128 / cutlass::sizeof_bits<ElementC>::value;
  static constexpr int kAlignmentD = 128 / cutlass::sizeof_bits<ElementD>::value;

  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::Int<ClusterK>>;
  using StrideD = cutlass::detail::TagToStrideC_t<typename LayoutC::type>;  // also the aux matrix's

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementCompute, ElementC,
      typename LayoutC::type, kAlignmentC, ElementD, typename LayoutC::type, kAlignmentD,
      typename Schedules<Schedule>::epilogue,
      typename Fusion<Epilogue, ElementD, ElementC, ElementCompute, TileShape, StrideD>::type>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, typename LayoutA::type, kAlignmentA, ElementB,
      typename LayoutB::type, kAlignmentB, ElementAccumulator, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Schedules<Schedule>::kernel>::CollectiveOp;

  using GemmKernel =
      cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
                                           typename Schedules<Schedule>::tile_scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  static_assert(std::is_same_v<StrideD, typename GemmKernel::StrideD>);
  /// Whether the kernel waits for its predecessor (griddepcontrol.wait): only then does
  /// AdapterEntries::run launch it as a programmatic dependent.
  static constexpr bool kGridDependencyControl = Schedules<Schedule>::grid_dependency_control;
#ifndef CUTLASS_ENABLE_GDC_FOR_SM90
  static_assert(!kGridDependencyControl, "this translation unit compiled the kernel without its wait");
#endif

  /// CUTLASS arguments from the ABI's.
  static typename Gemm::Arguments make_arguments(const cuactor_dense_args& a) {
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {a.m, a.n, a.k, a.batch};
    args.mainloop.ptr_A = static_cast<const ElementA*>(a.a);
    args.mainloop.dA = make_stride<typename GemmKernel::StrideA>(a.lda, a.batch_stride_a);
    args.mainloop.ptr_B = static_cast<const ElementB*>(a.b);
    args.mainloop.dB = make_stride<typename GemmKernel::StrideB>(a.ldb, a.batch_stride_b);
    args.epilogue.ptr_C = static_cast<const ElementC*>(a.c);
    args.epilogue.dC = make_stride<typename GemmKernel::StrideC>(a.ldc, a.batch_stride_c);
    args.epilogue.ptr_D = static_cast<ElementD*>(a.d);
    args.epilogue.dD = make_stride<typename GemmKernel::StrideD>(a.ldd, a.batch_stride_d);
    if constexpr (std::is_same_v<Epilogue, tags::scaled_linear_combination>) {
      // Tree arguments in visiting order: {beta}, C, {{alpha, scale_a, scale_b}, acc, multiply}, fma.
      args.epilogue.thread = {
          {{a.beta}, {nullptr}, {}}, {}, {{{a.alpha, 1.0f, 1.0f}, {nullptr, a.scale_a, a.scale_b}, {}}, {}, {}}, {}};
    } else if constexpr (evt::kIsPreset<Epilogue>) {
      args.epilogue.thread.alpha = a.alpha;
      args.epilogue.thread.beta = a.beta;
    } else {
      args.epilogue.thread = Fusion<Epilogue, ElementD, ElementC, ElementCompute, TileShape, StrideD>::Tree::args(
          {&a.epilogue, a.alpha, a.beta, a.epilogue.alpha_ptr, a.epilogue.beta_ptr, a.m, a.ldd, a.batch_stride_d});
    }
    if (a.max_swizzle > 0) args.scheduler.max_swizzle_size = a.max_swizzle;
    args.scheduler.raster_order = static_cast<decltype(args.scheduler.raster_order)>(a.raster_order);
    args.hw_info.device_id = a.device;
    args.hw_info.sm_count =
        a.sm_count > 0 ? a.sm_count : cutlass::KernelHardwareInfo::query_device_multiprocessor_count(a.device);
    return args;
  }
};

}  // namespace cuactor::kernels::sm90

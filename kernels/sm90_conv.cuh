/// @file
/// Instantiation template of one sm_90a CUTLASS 3.x implicit-GEMM convolution (TMA im2col loads,
/// wgmma, built through the conv and epilogue collective builders) and the C ABI entry points that
/// expose it (instance_abi.h with conv_instance_abi.h's arguments). Template arguments are the tag
/// types of gemm_tags.cuh, so the placeholders of conv_sm90_instance.cu.in are plain SKU tokens.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/kernel_hardware_info.h>
#include <cutlass/layout/tensor.h>

#include <cstdint>
#include <cute/tensor.hpp>
#include <cutlass/conv/collective/collective_builder.hpp>
#include <cutlass/conv/convnd_problem_shape.hpp>
#include <cutlass/conv/device/conv_universal_adapter.hpp>
#include <cutlass/conv/dispatch_policy.hpp>
#include <cutlass/conv/kernel/conv_universal.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <type_traits>

#include "kernels/adapter_entries.cuh"
#include "kernels/conv_instance_abi.h"
#include "kernels/gemm_tags.cuh"

namespace cuactor::kernels::sm90 {

/// The CUTLASS operator of a convolution family tag.
template <class Family>
struct ConvOperatorOf;
template <>
struct ConvOperatorOf<tags::conv_fprop> {
  static constexpr auto value = cutlass::conv::Operator::kFprop;
};
template <>
struct ConvOperatorOf<tags::conv_dgrad> {
  static constexpr auto value = cutlass::conv::Operator::kDgrad;
};
template <>
struct ConvOperatorOf<tags::conv_wgrad> {
  static constexpr auto value = cutlass::conv::Operator::kWgrad;
};

/// The mainloop schedule of a schedule tag (only one exists for sm_90a convolution in CUTLASS 4.2).
template <class Schedule>
struct ConvSchedule;
template <>
struct ConvSchedule<tags::warpspecialized> {
  using type = cutlass::conv::KernelImplicitTmaWarpSpecializedSm90;
};

/// One 2-D convolution configuration: D = alpha * implicit_gemm(A, B) + beta * C, fp32 accumulation.
/// fprop and dgrad write an activation-shaped tensor through the TMA epilogue; wgrad writes the
/// filter (K x (R S C)) through the shared-memory-free epilogue, as CUTLASS's own sm90 wgrad does.
template <class Family, class A, class B, class C, class D, class Acc, int TileM, int TileN, int TileK, int ClusterM,
          int ClusterN, int ClusterK, class Schedule, class Epilogue>
struct ImplicitGemmConv : AdapterEntries<ImplicitGemmConv<Family, A, B, C, D, Acc, TileM, TileN, TileK, ClusterM,
                                                          ClusterN, ClusterK, Schedule, Epilogue>,
                                         cuactor_conv_args> {
  static_assert(std::is_same_v<Epilogue, tags::linear_combination>,
                "sm_90a convolution instances compute D = alpha * acc + beta * C");
  static constexpr cutlass::conv::Operator kOperator = ConvOperatorOf<Family>::value;
  static constexpr bool kWgrad = kOperator == cutlass::conv::Operator::kWgrad;

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

  // The GEMM K mode (and wgrad's N mode, R x S x C) is hierarchical in the conv collectives.
  using TileShape =
      std::conditional_t<kWgrad,
                         cute::Shape<cute::Int<TileM>, cute::Shape<cute::Int<TileN>>, cute::Shape<cute::Int<TileK>>>,
                         cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Shape<cute::Int<TileK>>>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::Int<ClusterK>>;
  using LayoutOut = std::conditional_t<kWgrad, cutlass::layout::TensorKCSR, cutlass::layout::TensorNHWC>;
  using EpilogueSchedule =
      std::conditional_t<kWgrad, cutlass::epilogue::NoSmemWarpSpecialized, cutlass::epilogue::TmaWarpSpecialized>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementCompute, ElementC, LayoutOut,
      kAlignmentC, ElementD, LayoutOut, kAlignmentD, EpilogueSchedule>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::conv::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, kOperator, ElementA, cutlass::layout::TensorNHWC,
      kAlignmentA, ElementB, cutlass::layout::TensorNHWC, kAlignmentB, ElementAccumulator, TileShape, ClusterShape,
      cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename ConvSchedule<Schedule>::type>::CollectiveOp;

  using ProblemShape =
      cutlass::conv::ConvProblemShape<kOperator, CollectiveMainloop::DispatchPolicy::NumSpatialDimensions>;
  using ConvKernel = cutlass::conv::kernel::ConvUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  /// The device adapter (AdapterEntries calls it `Gemm`).
  using Gemm = cutlass::conv::device::ConvUniversalAdapter<ConvKernel>;

  /// The packed problem: activation N x H x W x C, filter K x R x S x C, symmetric padding.
  static ProblemShape make_problem_shape(const cuactor_conv_args& a) {
    using Extent = typename ProblemShape::TensorExtent;
    using Spatial = typename ProblemShape::SpatialExtent;
    return ProblemShape(cutlass::conv::Mode::kCrossCorrelation, Extent{a.n, a.h, a.w, a.c}, Extent{a.k, a.r, a.s, a.c},
                        Spatial{a.pad_h, a.pad_w}, Spatial{a.pad_h, a.pad_w}, Spatial{a.stride_h, a.stride_w},
                        Spatial{a.dilation_h, a.dilation_w}, 1);
  }

  /// The CuTe stride of the output-shaped tensors (C and D) from the problem's packed strides.
  template <class Stride>
  static Stride output_stride(const ProblemShape& shape) {
    Stride s{};
    if constexpr (kWgrad) {
      // (K, (C, S, R)): a filter per row; C is the unit stride, then S and R in reverse order of KRSC.
      cute::get<0>(s) = shape.stride_C[0];
      cute::for_each(cute::make_seq<cute::rank<1>(Stride{}) - 1>{}, [&](auto i) {
        cute::get<1, decltype(i)::value + 1>(s) = shape.stride_C[ProblemShape::RankT - 2 - i];
      });
    } else {
      // ((Q, P, N), K): the spatial and batch modes in reverse order of the NHWC strides.
      cute::for_each(cute::make_seq<cute::rank<0>(Stride{})>{},
                     [&](auto i) { cute::get<0, i>(s) = shape.stride_C[ProblemShape::RankT - 2 - i]; });
    }
    return s;
  }

  /// CUTLASS arguments from the ABI's.
  static typename Gemm::Arguments make_arguments(const cuactor_conv_args& a) {
    typename Gemm::Arguments args{};
    args.problem_shape = make_problem_shape(a);
    args.mainloop.ptr_A = static_cast<const ElementA*>(a.a);
    args.mainloop.ptr_B = static_cast<const ElementB*>(a.b);
    args.epilogue.ptr_C = static_cast<const ElementC*>(a.c_source);
    args.epilogue.dC = output_stride<typename ConvKernel::StrideC>(args.problem_shape);
    args.epilogue.ptr_D = static_cast<ElementD*>(a.d);
    args.epilogue.dD = output_stride<typename ConvKernel::StrideD>(args.problem_shape);
    args.epilogue.thread.alpha = a.alpha;
    args.epilogue.thread.beta = a.beta;
    args.hw_info.device_id = a.device;
    args.hw_info.sm_count =
        a.sm_count > 0 ? a.sm_count : cutlass::KernelHardwareInfo::query_device_multiprocessor_count(a.device);
    return args;
  }
};

}  // namespace cuactor::kernels::sm90

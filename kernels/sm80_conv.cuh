/// @file
/// Instantiation template of one sm_80 CUTLASS 2.x implicit-GEMM convolution (cp.async multistage
/// mainloop, mma.sync tensor cores, the optimized im2col iterators): the path for what the sm_90a
/// kernels cannot compute, strided dgrad above all (CUTLASS's strided-dgrad kernel, which visits the
/// filter taps of each output phase separately), and for Ampere and Ada GPUs. It also runs on
/// Hopper. Exposed through the C ABI of conv_instance_abi.h like the sm_90a instances; never split.
#pragma once

#include <cutlass/conv/conv2d_problem_size.h>
#include <cutlass/conv/device/implicit_gemm_convolution.h>
#include <cutlass/conv/kernel/default_conv2d_dgrad.h>
#include <cutlass/conv/kernel/default_conv2d_fprop.h>
#include <cutlass/conv/kernel/default_conv2d_wgrad.h>
#include <cutlass/conv/threadblock/threadblock_swizzle.h>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/gemm/threadblock/threadblock_swizzle.h>

#include <type_traits>

#include "kernels/adapter_entries.cuh"
#include "kernels/conv_instance_abi.h"
#include "kernels/gemm_tags.cuh"

namespace cuactor::kernels::sm80 {

/// The CUTLASS 2.x kernel of a convolution family tag over a configuration's building blocks
/// (optimized im2col iterators). Dgrad takes the strided kernel, which computes unit strides too,
/// with its phase-aware tile swizzle.
template <class Family, class Cfg>
struct ConvKernelOf;
template <class Cfg>
struct ConvKernelOf<tags::conv_fprop, Cfg> {
  using type = typename cutlass::conv::kernel::DefaultConv2dFprop<
      typename Cfg::ElementA, typename Cfg::Nhwc, typename Cfg::ElementB, typename Cfg::Nhwc, typename Cfg::ElementD,
      typename Cfg::Nhwc, typename Cfg::ElementAccumulator, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      typename Cfg::ThreadblockShape, typename Cfg::WarpShape, typename Cfg::Instruction, typename Cfg::EpilogueOp,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<4>, Cfg::kStages, cutlass::arch::OpMultiplyAdd,
      cutlass::conv::IteratorAlgorithm::kOptimized>::Kernel;
};
template <class Cfg>
struct ConvKernelOf<tags::conv_dgrad, Cfg> {
  using type = typename cutlass::conv::kernel::DefaultConv2dDgrad<
      typename Cfg::ElementA, typename Cfg::Nhwc, typename Cfg::ElementB, typename Cfg::Nhwc, typename Cfg::ElementD,
      typename Cfg::Nhwc, typename Cfg::ElementAccumulator, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      typename Cfg::ThreadblockShape, typename Cfg::WarpShape, typename Cfg::Instruction, typename Cfg::EpilogueOp,
      cutlass::conv::threadblock::StridedDgradIdentityThreadblockSwizzle<1>, Cfg::kStages, cutlass::arch::OpMultiplyAdd,
      cutlass::conv::IteratorAlgorithm::kOptimized, cutlass::conv::StrideSupport::kStrided>::Kernel;
};
template <class Cfg>
struct ConvKernelOf<tags::conv_wgrad, Cfg> {
  using type = typename cutlass::conv::kernel::DefaultConv2dWgrad<
      typename Cfg::ElementA, typename Cfg::Nhwc, typename Cfg::ElementB, typename Cfg::Nhwc, typename Cfg::ElementD,
      typename Cfg::Nhwc, typename Cfg::ElementAccumulator, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      typename Cfg::ThreadblockShape, typename Cfg::WarpShape, typename Cfg::Instruction, typename Cfg::EpilogueOp,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<4>, Cfg::kStages, cutlass::arch::OpMultiplyAdd,
      cutlass::conv::IteratorAlgorithm::kOptimized>::Kernel;
};

/// The building blocks of one configuration.
template <class A, class B, class D, class Acc, int TileM, int TileN, int TileK, int Stages>
struct ConvConfig {
  using ElementA = typename A::type;
  using ElementB = typename B::type;
  using ElementD = typename D::type;
  using ElementAccumulator = typename Acc::type;
  using Nhwc = cutlass::layout::TensorNHWC;
  using ThreadblockShape = cutlass::gemm::GemmShape<TileM, TileN, TileK>;
  // Warps of 64x64 outputs each (fewer when the tile is smaller), the full tile K per warp.
  using WarpShape = cutlass::gemm::GemmShape<(TileM < 64 ? TileM : 64), (TileN < 64 ? TileN : 64), TileK>;
  using Instruction = cutlass::gemm::GemmShape<16, 8, 16>;
  using EpilogueOp = cutlass::epilogue::thread::LinearCombination<ElementD, 128 / cutlass::sizeof_bits<ElementD>::value,
                                                                  ElementAccumulator, float>;
  static constexpr int kStages = Stages;
};

/// One convolution configuration: the implicit GEMM of conv_instance_abi.h's roles with `Stages`
/// mainloop stages, fp32 accumulation and D = alpha * acc + beta * C.
template <class Family, class A, class B, class C, class D, class Acc, int TileM, int TileN, int TileK, int Stages,
          class Schedule, class Epilogue>
struct ImplicitGemmConv
    : AdapterEntries<ImplicitGemmConv<Family, A, B, C, D, Acc, TileM, TileN, TileK, Stages, Schedule, Epilogue>,
                     cuactor_conv_args> {
  static_assert(std::is_same_v<A, B> && std::is_same_v<C, D>, "one input type and one output type");
  static_assert(std::is_same_v<A, tags::bf16> || std::is_same_v<A, tags::f16>, "sm_80 convolution is 16-bit");
  static_assert(std::is_same_v<Schedule, tags::multistage>, "sm_80 instances use the multistage mainloop");
  static_assert(std::is_same_v<Epilogue, tags::linear_combination>, "convolution computes a linear combination");
  static_assert(Stages >= 2, "a multistage mainloop needs at least 2 stages");

  using Config = ConvConfig<A, B, D, Acc, TileM, TileN, TileK, Stages>;
  using ElementA = typename Config::ElementA;
  using ElementB = typename Config::ElementB;
  using ElementD = typename Config::ElementD;
  using Nhwc = typename Config::Nhwc;
  static constexpr auto kOperator = std::is_same_v<Family, tags::conv_fprop>   ? cutlass::conv::Operator::kFprop
                                    : std::is_same_v<Family, tags::conv_dgrad> ? cutlass::conv::Operator::kDgrad
                                                                               : cutlass::conv::Operator::kWgrad;
  using Gemm = cutlass::conv::device::ImplicitGemmConvolution<typename ConvKernelOf<Family, Config>::type>;
  using Entries = AdapterEntries<ImplicitGemmConv, cuactor_conv_args>;

  /// ABI entry: as AdapterEntries', and a wgrad split (which these kernels do not compute) is refused.
  static int can_implement(const void* p) {
    if (p == nullptr) return CUACTOR_KERNEL_BAD_ARGS;
    const auto& a = *static_cast<const cuactor_conv_args*>(p);
    if (a.split_n > 1 || a.split_p > 1 || a.split_c > 1) return CUACTOR_KERNEL_NOT_IMPLEMENTABLE;
    return Entries::can_implement(p);
  }

  /// CUTLASS arguments from the ABI's.
  static typename Gemm::Arguments make_arguments(const cuactor_conv_args& a) {
    const int p = (a.h + 2 * a.pad_h - a.dilation_h * (a.r - 1) - 1) / a.stride_h + 1;
    const int q = (a.w + 2 * a.pad_w - a.dilation_w * (a.s - 1) - 1) / a.stride_w + 1;
    const cutlass::conv::Conv2dProblemSize problem(a.n, a.h, a.w, a.c, a.k, a.r, a.s, p, q, a.pad_h, a.pad_w,
                                                   a.stride_h, a.stride_w, a.dilation_h, a.dilation_w,
                                                   cutlass::conv::Mode::kCrossCorrelation);
    const auto activation = Nhwc::packed({a.n, a.h, a.w, a.c});
    const auto filter = Nhwc::packed({a.k, a.r, a.s, a.c});
    const auto output = Nhwc::packed({a.n, p, q, a.k});
    // Roles of conv_instance_abi.h: fprop x, w -> y; dgrad dy, w -> dx; wgrad dy, x -> dw.
    const auto layout_a = kOperator == cutlass::conv::Operator::kFprop ? activation : output;
    const auto layout_b = kOperator == cutlass::conv::Operator::kWgrad ? activation : filter;
    const auto layout_c = kOperator == cutlass::conv::Operator::kFprop   ? output
                          : kOperator == cutlass::conv::Operator::kDgrad ? activation
                                                                         : filter;
    auto* c = static_cast<ElementD*>(const_cast<void*>(a.c_source));
    return typename Gemm::Arguments(problem, {static_cast<ElementA*>(const_cast<void*>(a.a)), layout_a},
                                    {static_cast<ElementB*>(const_cast<void*>(a.b)), layout_b}, {c, layout_c},
                                    {static_cast<ElementD*>(a.d), layout_c}, {a.alpha, a.beta});
  }
};

}  // namespace cuactor::kernels::sm80

/// @file
/// Instantiation template of one sm_80 CUTLASS 2.x dense GEMM configuration (multistage cp.async
/// mainloop, mma.sync tensor cores): the path for Ampere and Ada GPUs, which also runs on Hopper.
/// Exposed through the C ABI of instance_abi.h like the sm_90a instances.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/gemm/device/gemm_universal.h>
#include <cutlass/gemm/threadblock/threadblock_swizzle.h>

#include <cstdint>
#include <type_traits>

#include "kernels/adapter_entries.cuh"
#include "kernels/gemm_tags.cuh"
#include "kernels/instance_abi.h"

namespace cuactor::kernels::sm80 {

/// One dense GEMM configuration: D (M x N) = alpha * A (M x K) * B (K x N) + beta * C with
/// `Stages` mainloop stages; CUTLASS 2.x requires C and D of one type.
template <class A, class B, class C, class D, class Acc, class LayoutA, class LayoutB, class LayoutC, int TileM,
          int TileN, int TileK, int Stages, class Schedule, class Epilogue>
struct DenseGemm
    : AdapterEntries<
          DenseGemm<A, B, C, D, Acc, LayoutA, LayoutB, LayoutC, TileM, TileN, TileK, Stages, Schedule, Epilogue>,
          cuactor_dense_args> {
  static_assert(std::is_same_v<C, D>, "CUTLASS 2.x GEMMs read C as the output type");
  static_assert(std::is_same_v<Schedule, tags::multistage>, "sm_80 instances use the multistage mainloop");
  static_assert(std::is_same_v<Epilogue, tags::linear_combination>, "sm_80 instances have a linear combination");
  static_assert(Stages >= 2, "a multistage mainloop needs at least 2 stages");
  using ElementA = typename A::type;
  using ElementB = typename B::type;
  using ElementD = typename D::type;
  using ElementAccumulator = typename Acc::type;
  static constexpr int kAlignmentA = 128 / cutlass::sizeof_bits<ElementA>::value;
  static constexpr int kAlignmentB = 128 / cutlass::sizeof_bits<ElementB>::value;
  static constexpr int kAlignmentD = 128 / cutlass::sizeof_bits<ElementD>::value;
  // Warps of 64x64 outputs each (fewer when the tile is smaller), the full tile K per warp.
  using WarpShape = cutlass::gemm::GemmShape<(TileM < 64 ? TileM : 64), (TileN < 64 ? TileN : 64), TileK>;

  using Gemm = cutlass::gemm::device::GemmUniversal<
      ElementA, typename LayoutA::type, ElementB, typename LayoutB::type, ElementD, typename LayoutC::type,
      ElementAccumulator, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      cutlass::gemm::GemmShape<TileM, TileN, TileK>, WarpShape, cutlass::gemm::GemmShape<16, 8, 16>,
      cutlass::epilogue::thread::LinearCombination<ElementD, kAlignmentD, ElementAccumulator, float>,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, Stages, kAlignmentA, kAlignmentB>;

  /// CUTLASS arguments from the ABI's (batched mode only for more than one GEMM: kGemm with a
  /// batch count would mean split-K).
  static typename Gemm::Arguments make_arguments(const cuactor_dense_args& a) {
    return typename Gemm::Arguments(
        a.batch > 1 ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm,
        cutlass::gemm::GemmCoord(a.m, a.n, a.k), a.batch, {a.alpha, a.beta}, a.a, a.b, a.c, a.d, a.batch_stride_a,
        a.batch_stride_b, a.batch_stride_c, a.batch_stride_d, a.lda, a.ldb, a.ldc, a.ldd);
  }
};

}  // namespace cuactor::kernels::sm80

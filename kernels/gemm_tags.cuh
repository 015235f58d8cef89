/// @file
/// The SKU vocabulary as C++ types: every token an instantiation template's placeholders take
/// ("bf16", "row", "cooperative", "linear_combination", ...) names a tag type here, so CMake and
/// the JIT render the very same tokens GemmSku::to_string writes, and the mapping to CUTLASS types
/// lives in this one place.
#pragma once

#include <cutlass/bfloat16.h>
#include <cutlass/float8.h>
#include <cutlass/half.h>
#include <cutlass/layout/matrix.h>

namespace cuactor::kernels::tags {

/// Element type tags: `type` is the CUTLASS element.
struct bf16 {
  using type = cutlass::bfloat16_t;
};
/// IEEE half.
struct f16 {
  using type = cutlass::half_t;
};
/// IEEE single.
struct f32 {
  using type = float;
};
/// fp8 E4M3 (OCP).
struct e4m3 {
  using type = cutlass::float_e4m3_t;
};
/// fp8 E5M2 (OCP).
struct e5m2 {
  using type = cutlass::float_e5m2_t;
};

/// Row-major matrix (the last index is contiguous).
struct row {
  using type = cutlass::layout::RowMajor;
};
/// Column-major matrix (the first index is contiguous).
struct col {
  using type = cutlass::layout::ColumnMajor;
};

/// sm_90a: two consumer warpgroups share one output tile (large M).
struct cooperative {};
/// sm_90a: the two consumer warpgroups alternate output tiles (small M, decode).
struct pingpong {};
/// cooperative with fp8 fast accumulation (no periodic promotion to fp32).
struct cooperative_fp8_fast_accum {};
/// pingpong with fp8 fast accumulation.
struct pingpong_fp8_fast_accum {};
/// cooperative with the stream-K tile scheduler: the K iterations of all output tiles are spread
/// evenly over the SMs (partial tiles reduced in the workspace), for shapes with few output tiles
/// and long K such as decode. CUTLASS's heuristic may still pick data-parallel or split-K per problem.
struct cooperative_streamk {};
/// cooperative_fp8_fast_accum with the stream-K tile scheduler.
struct cooperative_fp8_fast_accum_streamk {};
/// sm_80: CUTLASS 2.x multistage cp.async mainloop.
struct multistage {};
/// sm_90a convolution: one TMA producer warp and one consumer warpgroup, one tile per CTA.
struct warpspecialized {};
/// sm_90a convolution: one TMA producer and one consumer warpgroup per CTA, registers and shared
/// memory sized for two CTAs per multiprocessor.
struct coresident {};

/// Convolution families (the @FAMILY@ token of conv instances): which implicit GEMM is computed.
struct conv_fprop {};
/// Data gradient: dx from dy and the filter.
struct conv_dgrad {};
/// Filter gradient: dw from dy and x.
struct conv_wgrad {};

/// D = alpha * acc + beta * C.
struct linear_combination {};
/// D = (alpha * scale_a * scale_b) * acc + beta * C with per-tensor scales read from device memory.
struct scaled_linear_combination {};

/// Epilogue tree nodes (EpilogueSpec, [K8]): a token "silu(add(acc,colbias))" is the type
/// silu<add<acc, colbias>>; kernels/sm90_epilogue.cuh maps each node to a CUTLASS visitor.
/// The accumulator.
struct acc {};
/// The source matrix C.
struct c {};
/// Scalar alpha.
struct alpha {};
/// Scalar beta.
struct beta {};
/// f32 vector, one value per output row.
struct rowscale {};
/// f32 vector, one value per output column.
struct colscale {};
/// Vector of C's element type, one value per output row.
struct rowbias {};
/// Vector of C's element type, one value per output column.
struct colbias {};
/// x + y.
template <class X, class Y>
struct add {};
/// x * y.
template <class X, class Y>
struct mul {};
/// x * y + z.
template <class X, class Y, class Z>
struct fma {};
/// max(x, 0).
template <class X>
struct relu {};
/// GELU (error function).
template <class X>
struct gelu {};
/// GELU (tanh approximation).
template <class X>
struct gelutanh {};
/// x * sigmoid(x).
template <class X>
struct silu {};
/// 1 / (1 + exp(-x)).
template <class X>
struct sigmoid {};
/// min(max(x, lo), hi), bounds at run time.
template <class X>
struct clamp {};
/// x, recording max |x| in device memory.
template <class X>
struct amax {};
/// x, stored to the aux matrix.
template <class X>
struct aux {};
/// x, summed over each row into a vector.
template <class X>
struct rowsum {};
/// Root only: D[m, j] = silu(x[m, 2j]) * x[m, 2j + 1], N / 2 columns.
template <class X>
struct swiglu {};

}  // namespace cuactor::kernels::tags

/// @file
/// The activations every cuactor kernel computes: the SwiGLU gate (the fused epilogue root,
/// sm90_swiglu_store.cuh, and the expert FFN's separate kernel, src/kernels/moe_ffn.cu) and the silu /
/// sigmoid / gelu nodes of epilogue trees (sm90_epilogue.cuh). They take the hardware exponent and
/// reciprocal and no branch, because an epilogue's instructions are not free even where a pingpong
/// kernel hides their latency under the other warpgroup's mainloop: on an H200, CUTLASS's SiLu (an IEEE
/// division) cost 8-17% over the plain GEMM on compute-bound shapes, and CUTLASS's GELU (erff: two
/// polynomials selected per element, ~25 instructions) 3-9%. Their error stays within 2e-5 relative or
/// 1e-30 absolute (activations_gpu_test.cpp, against fp64), far below a 16-bit output's rounding.
#pragma once

namespace cuactor::kernels {

namespace detail {
/// 2^x in one special-function instruction. Results below 2^-126 flush to zero, where exp2f and __expf
/// add a range fix-up (three more instructions) to return subnormals no activation here needs.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
/// 1/x in one special-function instruction (results below 2^-126 flush to zero).
__device__ __forceinline__ float reciprocal_ftz(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
constexpr float kLog2e = 1.4426950408889634f;
}  // namespace detail

/// sigmoid(x) = 1 / (1 + e^-x): 0 for large negative x (e^-x is inf), 1 for large positive x.
__device__ __forceinline__ float fast_sigmoid(float x) {
  return detail::reciprocal_ftz(1.0f + detail::exp2_ftz(-detail::kLog2e * x));
}

/// silu(g) = g sigmoid(g). Large negative g: e^-g is inf and the product 0 (silu's limit); g = -inf
/// gives NaN, as in torch. (Below -87.3, where 1 + e^-g passes 2^126, the reciprocal flushes silu's
/// ~1e-36 to 0.)
__device__ __forceinline__ float fast_silu(float g) {
  return g * fast_sigmoid(g);
}

/// gelu(x) = x Phi(x) with the normal distribution's Phi (GELU's erf form), in 15 instructions.
/// It is written relu(x) - |x| Q(|x|), Q(z) = Phi(-z) the normal tail, so that both signs keep their
/// relative accuracy (0.5 x (1 + erff(x / sqrt 2)) loses every digit below x = -5.5, where 1 + erf
/// cancels); Q(z) = t 2^(P(t) - z^2 log2(e) / 2) with t = 1 / (1 + p z) and P the degree-6 polynomial
/// fitted, minimax over all z >= 0 (t in (0, 1]), to log2(Q(z) e^(z^2/2) / t), smooth up to t = 0.
/// Relative error <= 1.4e-5 (<= 1.1e-5 where |gelu| > 1e-31): the fit's 5.4e-6 plus the float rounding
/// of z^2 log2(e) / 2 in the far negative tail; results below ~3e-38 flush to zero. +inf gives
/// +inf, NaN NaN, and -inf 0, gelu's limit (the erf formula's -inf * 0 is NaN): |x| is clamped to 1e4,
/// past which Q is 0, so that inf * 0 never forms.
__device__ __forceinline__ float fast_gelu(float x) {
  const float z = fabsf(x);
  const float t = detail::reciprocal_ftz(fmaf(0.298999995f, z, 1.0f));
  float poly = 0.288187653f;
  poly = fmaf(poly, t, -0.796472907f);
  poly = fmaf(poly, t, 0.427048624f);
  poly = fmaf(poly, t, 0.0974407643f);
  poly = fmaf(poly, t, 0.609483063f);
  poly = fmaf(poly, t, 1.44184518f);
  const float exponent = fmaf(poly, t, fmaf(x * (-0.5f * detail::kLog2e), x, -3.06752467f));
  const float tail = t * detail::exp2_ftz(exponent);
  return fmaf(-fminf(z, 1e4f), tail, fmaxf(x, 0.0f));
}

}  // namespace cuactor::kernels

/// @file
/// The SiLU and sigmoid every cuactor kernel computes: the SwiGLU gate (the fused epilogue root,
/// sm90_swiglu_store.cuh, and the expert FFN's separate kernel, src/kernels/moe_ffn.cu) and the silu /
/// sigmoid nodes of epilogue trees (sm90_epilogue.cuh). Both take the hardware exponent and reciprocal
/// (five instructions, no branch): CUTLASS's SiLu divides in IEEE, which cost 8-17% over the plain GEMM
/// on compute-bound shapes and over 50% where K <= 2048 (H200, cooperative 128x256), against 0.1-2.7%
/// and 2-6% with these in the pingpong kernel; their error stays within 2e-5 relative or 1e-30 absolute
/// (activations_gpu_test.cpp, against fp64), far below a 16-bit output's rounding. (Below -87.3, where
/// 1 + e^-x passes 2^126, __fdividef returns 0 for silu's ~1e-37.)
#pragma once

namespace cuactor::kernels {

/// silu(g) = g / (1 + e^-g). Large negative g: e^-g is inf and the quotient 0 (silu's limit);
/// g = -inf gives NaN, as in torch.
__device__ __forceinline__ float fast_silu(float g) {
  return __fdividef(g, 1.0f + __expf(-g));
}

/// sigmoid(x) = 1 / (1 + e^-x): 0 for large negative x (e^-x is inf), 1 for large positive x.
__device__ __forceinline__ float fast_sigmoid(float x) {
  return __fdividef(1.0f, 1.0f + __expf(-x));
}

}  // namespace cuactor::kernels

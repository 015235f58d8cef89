/// @file
/// The SwiGLU gate's SiLU as every cuactor SwiGLU computes it: the fused epilogue root
/// (sm90_swiglu_store.cuh) and the expert FFN's separate kernel (src/kernels/moe_ffn.cu).
#pragma once

namespace cuactor::kernels {

/// silu(g) = g / (1 + e^-g) with the hardware exponent and reciprocal: the IEEE division costs a dozen
/// instructions per element (on the critical path of a cooperative GEMM's epilogue) and the result is
/// rounded to 16 bits anyway. Large negative g: e^-g is inf and the quotient 0 (silu's limit);
/// g = -inf gives NaN, as in torch.
__device__ __forceinline__ float fast_silu(float g) {
  return __fdividef(g, 1.0f + __expf(-g));
}

}  // namespace cuactor::kernels

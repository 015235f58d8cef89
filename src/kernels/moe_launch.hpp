/// @file
/// Internal: the SwiGLU kernel of the expert FFN (moe_ffn.cu), launched by MoeExpertFfn::run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuactor/core/dtype.hpp"

namespace cuactor::kernels::detail {

/// out[t, f] = silu(gate) * up for the rows t < offsets[experts - 1] (at most capacity_rows), with
/// gate = h[t, f] and up = h[t, F + f], or (`interleaved`) gate = h[t, 2f] and up = h[t, 2f + 1]:
/// h is T x 2F and out T x F, row-major, `dtype` bf16 or f16, F a multiple of 8. Computed in f32 and
/// rounded once. `blocks` sizes the grid-stride grid (the row count is on the device).
cudaError_t launch_swiglu(DType dtype, const void* h, void* out, const std::int32_t* offsets, int experts,
                          std::int64_t capacity_rows, int ffn, bool interleaved, int blocks,
                          cudaStream_t stream) noexcept;

}  // namespace cuactor::kernels::detail

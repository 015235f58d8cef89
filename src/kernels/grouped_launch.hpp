/// @file
/// Internal: host launchers of the grouped-GEMM helper kernels (kernels/grouped_args.cuh), built by
/// nvcc in grouped_args.cu and called from the host library. Each returns the launch's cudaError_t.
#pragma once

#include <cuda_runtime_api.h>

#include "cuactor/core/dtype.hpp"
#include "kernels/grouped_args.cuh"

namespace cuactor::kernels::detail {

/// Builds every group's metadata from device-resident rows or offsets.
cudaError_t launch_build_device_sized_args(const grouped::DeviceSizedParams& params, const grouped::GroupedArrays& out,
                                           cudaStream_t stream) noexcept;

/// alpha[g] = alpha * scale_a[g or 0] * scale_b[g].
cudaError_t launch_fold_fp8_scales(int group_count, float alpha, const float* scale_a, bool scale_a_per_group,
                                   const float* scale_b, float* out, cudaStream_t stream) noexcept;

/// D[g] = beta * C[g] for the groups with k0_rows[g] > 0; `d_type` is bf16, f16 or f32.
cudaError_t launch_beta_times_c(DType d_type, const grouped::GroupedArrays& arrays, int group_count, float beta,
                                cudaStream_t stream) noexcept;

}  // namespace cuactor::kernels::detail

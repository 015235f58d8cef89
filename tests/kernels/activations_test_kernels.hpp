/// @file
/// Device helper of activations_gpu_test.cpp (activations_test_kernels.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace cuactor::kernels::test_support {

/// silu[i], sigmoid[i] and gelu[i] = kernels/activations.cuh's fast_silu, fast_sigmoid and fast_gelu of
/// x[i], for i < n (device arrays), on stream `s`.
cudaError_t evaluate_activations(const float* x, std::size_t n, float* silu, float* sigmoid, float* gelu,
                                 cudaStream_t s);

}  // namespace cuactor::kernels::test_support

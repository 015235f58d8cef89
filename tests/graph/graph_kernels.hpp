/// @file
/// Kernels for the graph tests (compiled by nvcc in graph_kernels.cu).
#pragma once

#include <cuda_runtime_api.h>

namespace cuactor::graph::test_support {

/// y[i] = a * x[i] + b for i < n.
cudaError_t launch_axpb(float* y, const float* x, float a, float b, int n, cudaStream_t stream);
/// out[*position] = value + *position (one thread): reads a DeviceScalar.
cudaError_t launch_write_at_position(float* out, const int* position, float value, cudaStream_t stream);
/// x[i] += 1 for i < n.
cudaError_t launch_increment(float* x, int n, cudaStream_t stream);

}  // namespace cuactor::graph::test_support

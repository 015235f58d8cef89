/// @file
/// The benchmarks' tiny kernel, compiled into them and launched with <<<>>>: the "tiny kernel" of the
/// runtime's and the graph layer's targets, and the raw-CUDA reference they are measured against.
#pragma once

#include <cuda_runtime_api.h>

/// x[i] = 0.5 x[i] + 1 for i < n (one block of 128 threads).
cudaError_t bench_launch_tiny_raw(float* x, int n, cudaStream_t stream);

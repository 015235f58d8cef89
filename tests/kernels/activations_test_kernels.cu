/// @file
/// Device side of activations_gpu_test.cpp: the activations of kernels/activations.cuh on an array.
#include "kernels/activations.cuh"
#include "kernels/activations_test_kernels.hpp"

namespace cuactor::kernels::test_support {
namespace {

__global__ void evaluate(const float* x, std::size_t n, float* silu, float* sigmoid, float* gelu) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    silu[i] = fast_silu(x[i]);
    sigmoid[i] = fast_sigmoid(x[i]);
    gelu[i] = fast_gelu(x[i]);
  }
}

}  // namespace

cudaError_t evaluate_activations(const float* x, std::size_t n, float* silu, float* sigmoid, float* gelu,
                                 cudaStream_t s) {
  evaluate<<<256, 256, 0, s>>>(x, n, silu, sigmoid, gelu);
  return cudaGetLastError();
}

}  // namespace cuactor::kernels::test_support

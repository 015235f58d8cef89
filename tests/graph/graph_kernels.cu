// Small kernels the graph tests capture and replay; host wrappers return the launch status.
#include "graph/graph_kernels.hpp"

namespace cuactor::graph::test_support {
namespace {

__global__ void axpb_kernel(float* y, const float* x, float a, float b, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}

__global__ void write_at_position_kernel(float* out, const int* position, float value) {
  const int p = *position;
  out[p] = value + static_cast<float>(p);
}

__global__ void increment_kernel(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

}  // namespace

cudaError_t launch_axpb(float* y, const float* x, float a, float b, int n, cudaStream_t stream) {
  axpb_kernel<<<(n + 255) / 256, 256, 0, stream>>>(y, x, a, b, n);
  return cudaGetLastError();
}

cudaError_t launch_write_at_position(float* out, const int* position, float value, cudaStream_t stream) {
  write_at_position_kernel<<<1, 1, 0, stream>>>(out, position, value);
  return cudaGetLastError();
}

cudaError_t launch_increment(float* x, int n, cudaStream_t stream) {
  increment_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, n);
  return cudaGetLastError();
}

}  // namespace cuactor::graph::test_support

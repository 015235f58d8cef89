// Tiny kernels for bench_graph: one is loaded at run time through cuactor's Library (PTX image), one
// is launched with <<<>>> as the raw-CUDA reference.
extern "C" __global__ void cuactor_bench_tiny(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 0.5f + 1.0f;
}

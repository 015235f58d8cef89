// Kernels loaded at run time by module_test.cpp (compiled to PTX, not linked).
extern "C" __global__ void cuactor_test_axpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

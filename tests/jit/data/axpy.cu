// Small kernel that `cuactor jit warm --nvrtc` compiles in CI ([J5]).
extern "C" __global__ void axpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
template <class T>
__global__ void scale(int n, T a, T* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * y[i];
}

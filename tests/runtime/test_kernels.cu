// Kernels for the runtime GPU tests, compiled to PTX and loaded at run time (not linked).
extern "C" __global__ void cuactor_rt_axpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// Adds 1 to counter[0] from a single thread: N launches must leave exactly N (ordered writers).
extern "C" __global__ void cuactor_rt_increment(int* counter) {
  if (threadIdx.x == 0 && blockIdx.x == 0) counter[0] += 1;
}

// Busy-waits about `cycles` clock cycles, to keep a stream busy.
extern "C" __global__ void cuactor_rt_spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// Writes through an address no allocation has: cudaErrorIllegalAddress, poisoning the context.
extern "C" __global__ void cuactor_rt_fault(int value) {
  *reinterpret_cast<volatile int*>(0xdead0000ull) = value;
}

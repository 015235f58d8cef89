// A consumer's CUDA file that includes cuactor headers: compiled as C++20 through the package.
#include <cuactor/core/arch.hpp>
#include <cuactor/core/expected.hpp>

__global__ void consumer_kernel(int* out) {
  *out = 1;
}

int consumer_cuda_part() {
  static_assert(__cplusplus >= 202002L, "find_package(cuactor) must make .cu files C++20");
  const cuactor::Result<int> r = cuactor::best_target_for(8, 0).major;
  return r.value_or(0);
}

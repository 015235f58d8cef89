// A downstream project: links cuactor::cuactor found through find_package(cuactor).
#include <cstdio>
#include <cuactor/core/arch.hpp>
#include <cuactor/gpu/device.hpp>

int consumer_cuda_part();  // kernel.cu: cuactor headers in a CUDA file

int main() {
  const auto arch = cuactor::best_target_for(9, 0).name();
  std::printf("devices: %d, best target for cc 9.0: %s\n", cuactor::gpu::device_count(), arch.c_str());
  return arch == "sm_90a" && consumer_cuda_part() == 8 ? 0 : 1;
}

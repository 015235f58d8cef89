#include "cuactor/gpu/device.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "cuactor/gpu/check.hpp"

namespace cuactor::gpu {

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device is not sticky; clear it
    return 0;
  }
  return n;
}

Status check_ordinal(int ordinal) {
  const int n = device_count();
  if (ordinal < 0 || ordinal >= n)
    return fail(errc::no_device,
                fmt::format("device ordinal {} does not exist ({} CUDA device(s) present)", ordinal, n));
  return ok();
}

Result<DeviceProperties> device_properties(int ordinal) {
  CUACTOR_TRY(check_ordinal(ordinal));
  cudaDeviceProp p{};
  CUACTOR_TRY(check(cudaGetDeviceProperties(&p, ordinal), fmt::format("cudaGetDeviceProperties(device {})", ordinal)));
  DeviceProperties d;
  d.ordinal = ordinal;
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.arch = best_target_for(p.major, p.minor);
  d.multiprocessors = p.multiProcessorCount;
  d.total_memory = p.totalGlobalMem;
  d.l2_cache_bytes = static_cast<std::size_t>(p.l2CacheSize);
  d.shared_memory_per_block_optin = p.sharedMemPerBlockOptin;
  d.memory_bus_width_bits = p.memoryBusWidth;
  // Clock rates left cudaDeviceProp in CUDA 13; read them as attributes.
  CUACTOR_CUDA_TRY(cudaDeviceGetAttribute(&d.clock_khz, cudaDevAttrClockRate, ordinal));
  CUACTOR_CUDA_TRY(cudaDeviceGetAttribute(&d.memory_clock_khz, cudaDevAttrMemoryClockRate, ordinal));
  int pools = 0;
  CUACTOR_CUDA_TRY(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, ordinal));
  d.supports_memory_pools = pools != 0;
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal) == cudaSuccess) d.pci_bus_id = bus;
  return d;
}

int driver_version() noexcept {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) return 0;
  return v;
}

int runtime_version() noexcept {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return 0;
  return v;
}

std::string format_cuda_version(int v) {
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

Result<MemoryInfo> memory_info(int ordinal) {
  auto scope = ScopedDevice::make(ordinal);
  if (!scope) return fail(scope.error());
  MemoryInfo m;
  CUACTOR_TRY(check(cudaMemGetInfo(&m.free, &m.total), fmt::format("cudaMemGetInfo(device {})", ordinal)));
  return m;
}

Result<ScopedDevice> ScopedDevice::make(int ordinal) {
  CUACTOR_TRY(check_ordinal(ordinal));
  int previous = 0;
  CUACTOR_CUDA_TRY(cudaGetDevice(&previous));
  if (previous != ordinal) CUACTOR_TRY(check(cudaSetDevice(ordinal), fmt::format("cudaSetDevice({})", ordinal)));
  return ScopedDevice(previous);
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

}  // namespace cuactor::gpu

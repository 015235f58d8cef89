/// @file
/// Device discovery and selection.
#pragma once

#include <cstddef>
#include <string>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/expected.hpp"

namespace cuactor::gpu {

/// Static facts about one device, read once from the driver.
struct DeviceProperties {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  GpuArch arch;  ///< Best compilation target (sm_90a on an H100/H200).
  int multiprocessors = 0;
  std::size_t total_memory = 0;  ///< Bytes.
  std::size_t l2_cache_bytes = 0;
  std::size_t shared_memory_per_block_optin = 0;
  int clock_khz = 0;  ///< SM clock, kHz.
  int memory_clock_khz = 0;
  int memory_bus_width_bits = 0;
  std::string pci_bus_id;
  bool supports_memory_pools = false;
};

/// Number of CUDA devices; 0 (not an error) when there is no driver or no device.
int device_count() noexcept;

/// Properties of device `ordinal`; `no_device` when the ordinal does not exist.
Result<DeviceProperties> device_properties(int ordinal);

/// The driver's CUDA version as major*1000+minor*10 (e.g. 13000); 0 when no driver is loaded.
int driver_version() noexcept;
/// The CUDA runtime version cuactor was linked with (e.g. 13000).
int runtime_version() noexcept;
/// "13.0" from 13000.
std::string format_cuda_version(int v);

/// Free and total device memory of the current device, bytes.
struct MemoryInfo {
  std::size_t free = 0;
  std::size_t total = 0;
};
/// Queries cudaMemGetInfo on device `ordinal` (restoring the caller's current device).
Result<MemoryInfo> memory_info(int ordinal);

/// Makes `ordinal` the calling thread's current device for this object's lifetime, then restores
/// the previous one.
class ScopedDevice {
 public:
  /// Use make(); the constructor is private so that failure is reported, not thrown.
  static Result<ScopedDevice> make(int ordinal);
  ScopedDevice(ScopedDevice&& o) noexcept : previous_(o.previous_) { o.previous_ = -1; }
  ScopedDevice& operator=(ScopedDevice&&) = delete;
  ScopedDevice(const ScopedDevice&) = delete;
  ~ScopedDevice();

 private:
  explicit ScopedDevice(int previous) : previous_(previous) {}
  int previous_;
};

/// Checks that `ordinal` names an existing device (errc::no_device naming the ordinal and count).
Status check_ordinal(int ordinal);

}  // namespace cuactor::gpu

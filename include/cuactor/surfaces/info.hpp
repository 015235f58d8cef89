/// @file
/// What `cuactor info --json` prints and `cuactor.info()` returns: driver and runtime versions,
/// devices, the kernel families compiled in, NVRTC / nvcc availability and the cache locations. One
/// function builds it for every surface (the CLI, the Python package), so they cannot drift apart.
#pragma once

#include <string>

namespace cuactor::surfaces {

/// The version of this cuactor build (the CMake project version, e.g. "0.1.0").
[[nodiscard]] std::string version();

/// The system report as JSON text: `version`, `driver_cuda_version` (null without a driver),
/// `runtime_cuda_version`, `devices` (one object per device: ordinal, name, arch,
/// compute_capability, multiprocessors, memory, clocks, pci_bus_id; `error` instead when it cannot be
/// queried), `kernel_families`, `nvrtc`, `nvcc` (null when missing), `cache_root` and `jit_cache`
/// (directory, files, bytes; or `error`). `with_actor_stats` opens a device actor per device, runs
/// one small request through it and adds its stats as `actor_stats` ([O2]). Never throws; `indent`
/// < 0 gives one line. Bytes that are not UTF-8 (file names) become U+FFFD.
[[nodiscard]] std::string info_json(bool with_actor_stats = false, int indent = -1);

}  // namespace cuactor::surfaces

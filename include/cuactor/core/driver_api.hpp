/// @file
/// CUDA driver entry points resolved at run time through the runtime
/// (cudaGetDriverEntryPointByVersion), so that cuactor binaries load and run their CPU-only parts on
/// machines with no NVIDIA driver instead of failing to start for want of libcuda.so.1.
#pragma once

#include <cuda.h>

#include "cuactor/core/cxx20.hpp"

namespace cuactor {

/// Driver functions cuactor uses. Every member is null when no driver is installed.
struct DriverApi {
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuLibraryLoadData) library_load_data = nullptr;
  decltype(&::cuLibraryUnload) library_unload = nullptr;
  decltype(&::cuLibraryGetKernel) library_get_kernel = nullptr;
  decltype(&::cuKernelGetParamInfo) kernel_get_param_info = nullptr;
  decltype(&::cuKernelGetAttribute) kernel_get_attribute = nullptr;
  decltype(&::cuKernelSetAttribute) kernel_set_attribute = nullptr;
  decltype(&::cuLaunchKernel) launch_kernel = nullptr;
  decltype(&::cuLaunchKernelEx) launch_kernel_ex = nullptr;
  decltype(&::cuModuleLoadData) module_load_data = nullptr;
  decltype(&::cuModuleUnload) module_unload = nullptr;
  decltype(&::cuModuleGetFunction) module_get_function = nullptr;
  decltype(&::cuFuncGetParamInfo) func_get_param_info = nullptr;
  decltype(&::cuFuncSetAttribute) func_set_attribute = nullptr;
  decltype(&::cuCtxGetCurrent) ctx_get_current = nullptr;
  decltype(&::cuCtxSetCurrent) ctx_set_current = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) primary_ctx_release = nullptr;
  decltype(&::cuStreamWriteValue32) stream_write_value32 = nullptr;
  decltype(&::cuMemsetD8Async) memset_d8_async = nullptr;
  decltype(&::cuMemsetD16Async) memset_d16_async = nullptr;
  decltype(&::cuMemsetD32Async) memset_d32_async = nullptr;

  /// True when the driver was found and every entry point resolved.
  bool available = false;
};

/// The process-wide table, resolved once on first use (thread-safe).
const DriverApi& driver_api() noexcept;

}  // namespace cuactor

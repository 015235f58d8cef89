#include "cuactor/core/driver_api.hpp"

#include <cuda_runtime_api.h>

namespace cuactor {
namespace {

template <class Fn>
bool resolve(Fn& fn, const char* symbol) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(symbol, &p, CUDA_VERSION, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  fn = reinterpret_cast<Fn>(p);
  return true;
}

DriverApi load() {
  DriverApi d;
  bool ok = true;
  ok &= resolve(d.get_error_name, "cuGetErrorName");
  ok &= resolve(d.get_error_string, "cuGetErrorString");
  ok &= resolve(d.device_get, "cuDeviceGet");
  ok &= resolve(d.library_load_data, "cuLibraryLoadData");
  ok &= resolve(d.library_unload, "cuLibraryUnload");
  ok &= resolve(d.library_get_kernel, "cuLibraryGetKernel");
  ok &= resolve(d.kernel_get_param_info, "cuKernelGetParamInfo");
  ok &= resolve(d.kernel_get_attribute, "cuKernelGetAttribute");
  ok &= resolve(d.kernel_set_attribute, "cuKernelSetAttribute");
  ok &= resolve(d.launch_kernel, "cuLaunchKernel");
  ok &= resolve(d.launch_kernel_ex, "cuLaunchKernelEx");
  ok &= resolve(d.module_load_data, "cuModuleLoadData");
  ok &= resolve(d.module_unload, "cuModuleUnload");
  ok &= resolve(d.module_get_function, "cuModuleGetFunction");
  ok &= resolve(d.func_get_param_info, "cuFuncGetParamInfo");
  ok &= resolve(d.func_set_attribute, "cuFuncSetAttribute");
  ok &= resolve(d.ctx_get_current, "cuCtxGetCurrent");
  ok &= resolve(d.ctx_set_current, "cuCtxSetCurrent");
  ok &= resolve(d.primary_ctx_retain, "cuDevicePrimaryCtxRetain");
  ok &= resolve(d.primary_ctx_release, "cuDevicePrimaryCtxRelease");
  ok &= resolve(d.stream_write_value32, "cuStreamWriteValue32");
  ok &= resolve(d.memset_d8_async, "cuMemsetD8Async");
  ok &= resolve(d.memset_d16_async, "cuMemsetD16Async");
  ok &= resolve(d.memset_d32_async, "cuMemsetD32Async");
  d.available = ok;
  return d;
}

}  // namespace

const DriverApi& driver_api() noexcept {
  static const DriverApi api = load();
  return api;
}

}  // namespace cuactor

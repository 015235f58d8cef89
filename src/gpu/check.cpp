#include "cuactor/gpu/check.hpp"

#include <string>

namespace cuactor::gpu {
namespace {

template <class Code>
Error make(const std::error_category& cat, Code e, std::string_view what) {
  std::error_code ec(static_cast<int>(e), cat);
  std::string msg(what);
  msg += ": ";
  msg += ec.message();
  return Error(ec, std::move(msg));
}

}  // namespace

Error make_error(cudaError_t e, std::string_view what) {
  // A failed runtime call leaves its code as this thread's last error, and the next <<<>>> launch
  // (which reports through cudaGetLastError) would return it as its own: an out-of-memory allocation
  // made the following fill fail. Sticky errors are not cleared by this and keep being reported.
  if (e != cudaSuccess) (void)cudaGetLastError();
  return make(cuda_runtime_category(), e, what);
}
Error make_error(CUresult e, std::string_view what) {
  return make(cuda_driver_category(), e, what);
}
Error make_error(nvrtcResult e, std::string_view what) {
  return make(nvrtc_category(), e, what);
}
Error make_error(cublasStatus_t e, std::string_view what) {
  return make(cublas_category(), e, what);
}

}  // namespace cuactor::gpu

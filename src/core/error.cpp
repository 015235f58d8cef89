#include "cuactor/core/error.hpp"

#include <cublas_api.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <string>

#include "cuactor/core/driver_api.hpp"

namespace cuactor {
namespace {

class CuactorCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "cuactor"; }
  std::string message(int v) const override {
    switch (static_cast<errc>(v)) {
      case errc::stale_handle:
        return "stale handle";
      case errc::device_shutting_down:
        return "device shutting down";
      case errc::context_poisoned:
        return "context poisoned";
      case errc::circuit_open:
        return "circuit open";
      case errc::queue_full:
        return "queue full";
      case errc::unsupported:
        return "unsupported";
      case errc::invalid_argument:
        return "invalid argument";
      case errc::capture_invalidated:
        return "capture invalidated";
      case errc::workspace_too_small:
        return "workspace too small";
      case errc::no_device:
        return "no device";
      case errc::out_of_memory:
        return "out of memory";
      case errc::wrong_device:
        return "wrong device";
      case errc::compile_failed:
        return "compile failed";
      case errc::cache_corrupt:
        return "cache corrupt";
      case errc::timeout:
        return "timeout";
      case errc::cancelled:
        return "cancelled";
      case errc::internal:
        return "internal error";
      case errc::worker_lost:
        return "worker lost";
      case errc::protocol_error:
        return "protocol error";
      case errc::untrusted:
        return "untrusted file";
      case errc::io_error:
        return "I/O error";
    }
    return "unknown cuactor error " + std::to_string(v);
  }
};

class CudaRuntimeCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "cuda"; }
  std::string message(int v) const override {
    auto e = static_cast<cudaError_t>(v);
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  }
};

class CudaDriverCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "cuda-driver"; }
  std::string message(int v) const override {
    const char* n = nullptr;
    const char* s = nullptr;
    auto r = static_cast<CUresult>(v);
    const DriverApi& api = driver_api();
    if (!api.get_error_name || api.get_error_name(r, &n) != CUDA_SUCCESS) return "CUresult " + std::to_string(v);
    api.get_error_string(r, &s);
    return std::string(n) + ": " + (s ? s : "");
  }
};

class NvrtcCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "nvrtc"; }
  std::string message(int v) const override { return nvrtcGetErrorString(static_cast<nvrtcResult>(v)); }
};

class CublasCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "cublas"; }
  std::string message(int v) const override {
    switch (static_cast<cublasStatus_t>(v)) {
      case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
      case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
      case CUBLAS_STATUS_ALLOC_FAILED:
        return "CUBLAS_STATUS_ALLOC_FAILED";
      case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
      case CUBLAS_STATUS_ARCH_MISMATCH:
        return "CUBLAS_STATUS_ARCH_MISMATCH";
      case CUBLAS_STATUS_MAPPING_ERROR:
        return "CUBLAS_STATUS_MAPPING_ERROR";
      case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
      case CUBLAS_STATUS_INTERNAL_ERROR:
        return "CUBLAS_STATUS_INTERNAL_ERROR";
      case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
      case CUBLAS_STATUS_LICENSE_ERROR:
        return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "cublasStatus_t " + std::to_string(v);
  }
};

bool is_sticky_runtime(cudaError_t e) noexcept {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorTensorMemoryLeak:
      return true;
    default:
      return false;
  }
}

bool is_sticky_driver(CUresult e) noexcept {
  switch (e) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
      return true;
    default:
      return false;
  }
}

}  // namespace

const std::error_category& cuactor_category() noexcept {
  static const CuactorCategory c;
  return c;
}
const std::error_category& cuda_runtime_category() noexcept {
  static const CudaRuntimeCategory c;
  return c;
}
const std::error_category& cuda_driver_category() noexcept {
  static const CudaDriverCategory c;
  return c;
}
const std::error_category& nvrtc_category() noexcept {
  static const NvrtcCategory c;
  return c;
}
const std::error_category& cublas_category() noexcept {
  static const CublasCategory c;
  return c;
}

std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), cuactor_category()};
}

FailureClass classify(std::error_code ec) noexcept {
  if (!ec) return FailureClass::none;
  if (ec.category() == cuda_runtime_category())
    return is_sticky_runtime(static_cast<cudaError_t>(ec.value())) ? FailureClass::context_poisoned
                                                                   : FailureClass::request;
  if (ec.category() == cuda_driver_category())
    return is_sticky_driver(static_cast<CUresult>(ec.value())) ? FailureClass::context_poisoned : FailureClass::request;
  if (ec == errc::context_poisoned || ec == errc::worker_lost) return FailureClass::context_poisoned;
  return FailureClass::request;
}

std::string Error::to_string() const {
  std::string s = message_;
  if (!s.empty()) s += " ";
  s += "(";
  s += code_.category().name();
  s += ":";
  s += std::to_string(code_.value());
  s += " ";
  s += code_.message();
  s += ")";
  return s;
}

}  // namespace cuactor

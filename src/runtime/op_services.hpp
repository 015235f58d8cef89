/// @file
/// What an OpContext asks of the backend that runs the operation (internal).
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/runtime/op_context.hpp"

namespace cuactor::runtime::detail {

/// The services behind OpContext; implemented by the in-process actor loop, valid on its thread only.
class OpServices {
 public:
  virtual ~OpServices() = default;
  [[nodiscard]] virtual int device() const noexcept = 0;
  [[nodiscard]] virtual GpuArch arch() const noexcept = 0;
  [[nodiscard]] virtual int sm_count() const noexcept = 0;
  [[nodiscard]] virtual cudaStream_t stream() const noexcept = 0;
  [[nodiscard]] virtual cublasHandle_t cublas() const noexcept = 0;
  [[nodiscard]] virtual const gpu::MemPool& pool() const noexcept = 0;
  [[nodiscard]] virtual const std::shared_ptr<DeviceState>& state() const noexcept = 0;
  [[nodiscard]] virtual bool capturing() const noexcept = 0;
  virtual Result<std::shared_ptr<DeviceAllocation>> allocate_bytes(std::size_t bytes) = 0;
  virtual void set_capture_listener(CaptureListener listener) = 0;
};

}  // namespace cuactor::runtime::detail

/// @file
/// One incarnation of a device's context as the actor uses it (internal): stream, memory pool, cuBLAS
/// handle with its workspace, capture hooks, device facts, and the canary that proves it works.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/runtime/gpu_ref.hpp"
#include "runtime/capture_hooks.hpp"

namespace cuactor::runtime::detail {

/// The resources of one context incarnation. Allocations hold it (as their AllocationOwner) so that
/// the stream they are freed on outlives them; once the context was lost its handles are abandoned,
/// never destroyed (they belong to a dead, or worse, recycled, context).
class Incarnation final : public AllocationOwner {
 public:
  /// Creates the stream (with `priority`), pool, cuBLAS handle and workspace on the current device.
  static Result<std::shared_ptr<Incarnation>> create(int ordinal, int priority);
  ~Incarnation() override;

  void deallocate(void* ptr, std::size_t bytes, cudaEvent_t last_write) noexcept override;
  [[nodiscard]] bool context_lost() const noexcept override { return lost_.load(std::memory_order_acquire); }
  /// Marks the context dead: nothing of this incarnation is touched again.
  void mark_lost() noexcept;

  [[nodiscard]] int device() const noexcept { return ordinal_; }
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_->get(); }
  [[nodiscard]] const gpu::MemPool& pool() const noexcept { return *pool_; }
  [[nodiscard]] cublasHandle_t blas() const noexcept { return blas_; }
  [[nodiscard]] GpuArch arch() const noexcept { return arch_; }
  [[nodiscard]] int sm_count() const noexcept { return sm_count_; }
  [[nodiscard]] CaptureHooks& capture() noexcept { return *capture_; }

  /// Runs the canary kernel and checks its output (the proof that a rebuilt context works, [R8]);
  /// `seed` varies the expected pattern. Synchronises the stream.
  Status run_canary(std::uint32_t seed);

 private:
  Incarnation() = default;

  int ordinal_ = -1;
  GpuArch arch_{};
  int sm_count_ = 0;
  std::unique_ptr<gpu::Stream> stream_;
  std::unique_ptr<gpu::MemPool> pool_;
  cublasHandle_t blas_ = nullptr;
  gpu::DeviceBuffer blas_workspace_;
  std::unique_ptr<CaptureHooks> capture_;
  std::atomic<bool> lost_{false};
};

}  // namespace cuactor::runtime::detail

#include "runtime/incarnation.hpp"

#include <cublas_v2.h>
#include <fmt/format.h>

#include <array>

#include "cuactor/gpu/check.hpp"
#include "runtime/kernels.hpp"

namespace cuactor::runtime::detail {
namespace {
// A workspace of our own keeps cuBLAS from allocating during stream capture (its recommendation for
// graphs; 32 MiB covers Hopper's largest kernels).
constexpr std::size_t kCublasWorkspaceBytes = std::size_t{32} << 20;
}  // namespace

Result<std::shared_ptr<Incarnation>> Incarnation::create(int ordinal, int priority) {
  std::shared_ptr<Incarnation> inc(new Incarnation());
  inc->ordinal_ = ordinal;
  int major = 0, minor = 0;
  CUACTOR_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal));
  CUACTOR_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal));
  CUACTOR_CUDA_TRY(cudaDeviceGetAttribute(&inc->sm_count_, cudaDevAttrMultiProcessorCount, ordinal));
  inc->arch_ = best_target_for(major, minor);
  auto stream = gpu::Stream::create(ordinal, priority);
  if (!stream) return fail(stream.error());
  inc->stream_ = std::make_unique<gpu::Stream>(std::move(*stream));
  inc->capture_ = std::make_unique<CaptureHooks>(inc->stream_->get());
  auto pool = gpu::MemPool::create(ordinal);
  if (!pool) return fail(pool.error());
  inc->pool_ = std::make_unique<gpu::MemPool>(std::move(*pool));
  CUACTOR_TRY(gpu::check(cublasCreate(&inc->blas_), fmt::format("cublasCreate(device {})", ordinal)));
  CUACTOR_TRY(gpu::check(cublasSetStream(inc->blas_, inc->stream_->get()), "cublasSetStream"));
  auto workspace = gpu::DeviceBuffer::allocate(*inc->pool_, kCublasWorkspaceBytes, inc->stream_->get());
  if (!workspace) return fail(workspace.error());
  inc->blas_workspace_ = std::move(*workspace);
  CUACTOR_TRY(gpu::check(cublasSetWorkspace(inc->blas_, inc->blas_workspace_.data(), kCublasWorkspaceBytes),
                         "cublasSetWorkspace"));
  return inc;
}

Incarnation::~Incarnation() {
  if (lost_.load(std::memory_order_acquire)) {
    // The context these handles belonged to was reset: destroying them would act on dead (or,
    // worse, recycled) driver objects, so they are deliberately leaked.
    (void)stream_.release();
    (void)pool_.release();
    (void)blas_workspace_.release();
    return;
  }
  if (blas_) (void)cublasDestroy(blas_);
  if (capture_) capture_->refresh();  // runs the frees deferred past a capture
}

void Incarnation::mark_lost() noexcept {
  lost_.store(true, std::memory_order_release);
  if (capture_) capture_->reset();
}

void Incarnation::deallocate(void* ptr, std::size_t, cudaEvent_t last_write) noexcept {
  if (context_lost()) return;
  capture_->free_or_defer(ptr, last_write);
}

Status Incarnation::run_canary(std::uint32_t seed) {
  void* out = nullptr;
  const auto bytes = kernels::canary_elements * sizeof(std::uint32_t);
  CUACTOR_CUDA_TRY(cudaMallocFromPoolAsync(&out, bytes, pool_->get(), stream()));
  std::array<std::uint32_t, kernels::canary_elements> host{};
  Status st = gpu::check(kernels::launch_canary(static_cast<std::uint32_t*>(out), seed, stream()), "canary kernel");
  if (st) st = gpu::check(cudaMemcpyAsync(host.data(), out, bytes, cudaMemcpyDeviceToHost, stream()), "canary copy");
  (void)cudaFreeAsync(out, stream());
  if (st) st = gpu::check(cudaStreamSynchronize(stream()), "canary synchronize");
  CUACTOR_TRY(st);
  for (std::uint32_t i = 0; i < kernels::canary_elements; ++i)
    if (host[i] != kernels::canary_value(i, seed))
      return fail(errc::circuit_open, fmt::format("device {}: canary element {} is {:#x}, expected {:#x}", ordinal_, i,
                                                  host[i], kernels::canary_value(i, seed)));
  return ok();
}

}  // namespace cuactor::runtime::detail

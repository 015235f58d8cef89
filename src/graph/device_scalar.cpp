#include "cuactor/graph/device_scalar.hpp"

#include <fmt/format.h>

#include <cstring>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"

namespace cuactor::graph {

Result<std::shared_ptr<DeviceScalarStorage>> DeviceScalarStorage::create(int ordinal, std::size_t bytes) {
  if (bytes == 0 || bytes > 256)
    return fail(errc::invalid_argument,
                fmt::format("DeviceScalar of {} bytes: a scalar must have 1 to 256 bytes", bytes));
  auto scope = gpu::ScopedDevice::make(ordinal);
  if (!scope) return fail(scope.error());
  std::shared_ptr<DeviceScalarStorage> s(new DeviceScalarStorage());
  s->device_ = ordinal;
  s->bytes_ = bytes;
  s->stride_ = (bytes + 63) / 64 * 64;  // one cache line per slot
  const cudaError_t e = cudaMalloc(&s->device_ptr_, bytes);
  if (e != cudaSuccess) {
    Error err =
        gpu::make_error(e, fmt::format("cudaMalloc({} bytes) for a DeviceScalar on device {}", bytes, ordinal));
    if (e == cudaErrorMemoryAllocation) err = Error(errc::out_of_memory, err.message());
    return fail(std::move(err));
  }
  auto staging = gpu::PinnedBuffer::allocate(kSlots * s->stride_);
  if (!staging) return fail(staging.error());
  s->staging_ = std::move(*staging);
  for (auto& ev : s->copied_) {
    auto created = gpu::Event::create();
    if (!created) return fail(created.error());
    ev = std::move(*created);
  }
  return s;
}

DeviceScalarStorage::~DeviceScalarStorage() {
  // A copy into the value may still be queued: let every staged copy finish before freeing.
  for (std::size_t i = 0; i < kSlots; ++i)
    if (pending_[i]) (void)copied_[i].synchronize();
  if (device_ptr_) (void)cudaFree(device_ptr_);
}

Status DeviceScalarStorage::set(const void* value, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUACTOR_CUDA_TRY(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone)
    return fail(errc::invalid_argument,
                "DeviceScalar::set on a capturing stream: set the value on the replay stream before launching "
                "the graph, not inside the capture");
  const std::size_t slot = next_;
  next_ = (next_ + 1) % kSlots;
  // The slot's previous copy must have read its bytes before they are overwritten (rarely waits).
  if (pending_[slot]) CUACTOR_TRY(copied_[slot].synchronize());
  auto* staged = static_cast<std::byte*>(staging_.data()) + slot * stride_;
  std::memcpy(staged, value, bytes_);
  CUACTOR_TRY(gpu::copy_async(device_ptr_, staged, bytes_, stream));
  CUACTOR_TRY(copied_[slot].record(stream));
  pending_[slot] = true;
  return ok();
}

}  // namespace cuactor::graph

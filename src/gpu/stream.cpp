#include "cuactor/gpu/stream.hpp"

#include <fmt/format.h>

#include <utility>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"

namespace cuactor::gpu {

Result<PriorityRange> stream_priority_range() {
  PriorityRange r;
  CUACTOR_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&r.least, &r.greatest));
  return r;
}

Result<Stream> Stream::create(int ordinal, int priority) {
  auto scope = ScopedDevice::make(ordinal);
  if (!scope) return fail(scope.error());
  Stream s;
  CUACTOR_TRY(check(cudaStreamCreateWithPriority(&s.stream_, cudaStreamNonBlocking, priority),
                    fmt::format("cudaStreamCreateWithPriority(device {}, priority {})", ordinal, priority)));
  s.device_ = ordinal;
  CUACTOR_CUDA_TRY(cudaStreamGetPriority(s.stream_, &s.priority_));
  return s;
}

Stream::Stream(Stream&& o) noexcept
    : stream_(std::exchange(o.stream_, nullptr)), device_(o.device_), priority_(o.priority_) {}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (stream_) (void)cudaStreamDestroy(stream_);
    stream_ = std::exchange(o.stream_, nullptr);
    device_ = o.device_;
    priority_ = o.priority_;
  }
  return *this;
}

Stream::~Stream() {
  // cudaStreamDestroy returns at once; work already queued still completes.
  if (stream_) (void)cudaStreamDestroy(stream_);
}

Status Stream::synchronize() const {
  return check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

Result<bool> Stream::query() const {
  const cudaError_t e = cudaStreamQuery(stream_);
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) return false;
  return fail(make_error(e, "cudaStreamQuery"));
}

Result<bool> Stream::is_capturing() const {
  cudaStreamCaptureStatus st{};
  CUACTOR_CUDA_TRY(cudaStreamIsCapturing(stream_, &st));
  return st != cudaStreamCaptureStatusNone;
}

}  // namespace cuactor::gpu

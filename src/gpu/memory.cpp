#include "cuactor/gpu/memory.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <utility>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"

namespace cuactor::gpu {

Result<MemPool> MemPool::create(int ordinal, std::size_t release_threshold) {
  CUACTOR_TRY(check_ordinal(ordinal));
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = ordinal;
  MemPool p;
  CUACTOR_TRY(check(cudaMemPoolCreate(&p.pool_, &props), fmt::format("cudaMemPoolCreate(device {})", ordinal)));
  p.device_ = ordinal;
  p.owned_ = true;
  std::uint64_t threshold = release_threshold;
  CUACTOR_CUDA_TRY(cudaMemPoolSetAttribute(p.pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
  return p;
}

Result<MemPool> MemPool::device_default(int ordinal) {
  CUACTOR_TRY(check_ordinal(ordinal));
  MemPool p;
  CUACTOR_TRY(check(cudaDeviceGetDefaultMemPool(&p.pool_, ordinal),
                    fmt::format("cudaDeviceGetDefaultMemPool(device {})", ordinal)));
  p.device_ = ordinal;
  p.owned_ = false;
  return p;
}

MemPool& MemPool::operator=(MemPool&& o) noexcept {
  if (this != &o) {
    if (pool_ && owned_) (void)cudaMemPoolDestroy(pool_);
    pool_ = std::exchange(o.pool_, nullptr);
    device_ = o.device_;
    owned_ = o.owned_;
  }
  return *this;
}

MemPool::~MemPool() {
  if (pool_ && owned_) (void)cudaMemPoolDestroy(pool_);
}

Result<std::size_t> MemPool::reserved_bytes() const {
  std::uint64_t v = 0;
  CUACTOR_CUDA_TRY(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &v));
  return static_cast<std::size_t>(v);
}

Result<std::size_t> MemPool::used_bytes() const {
  std::uint64_t v = 0;
  CUACTOR_CUDA_TRY(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &v));
  return static_cast<std::size_t>(v);
}

Status MemPool::trim(std::size_t keep_bytes) const {
  return check(cudaMemPoolTrimTo(pool_, keep_bytes), "cudaMemPoolTrimTo");
}

Result<DeviceBuffer> DeviceBuffer::allocate(const MemPool& pool, std::size_t bytes, cudaStream_t stream) {
  DeviceBuffer b;
  b.device_ = pool.device();
  b.stream_ = stream;
  if (bytes == 0) return b;
  const cudaError_t e = cudaMallocFromPoolAsync(&b.ptr_, bytes, pool.get(), stream);
  if (e != cudaSuccess) {
    Error err = make_error(e, fmt::format("cudaMallocFromPoolAsync({} bytes on device {})", bytes, pool.device()));
    if (e == cudaErrorMemoryAllocation) err = Error(errc::out_of_memory, err.message());
    return fail(std::move(err));
  }
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      stream_(o.stream_),
      device_(o.device_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    (void)reset();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    stream_ = o.stream_;
    device_ = o.device_;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  (void)reset();
}

Status DeviceBuffer::reset() {
  if (!ptr_) return ok();
  void* p = std::exchange(ptr_, nullptr);
  bytes_ = 0;
  return check(cudaFreeAsync(p, stream_), "cudaFreeAsync");
}

Result<PinnedBuffer> PinnedBuffer::allocate(std::size_t bytes) {
  PinnedBuffer b;
  if (bytes == 0) return b;
  const cudaError_t e = cudaMallocHost(&b.ptr_, bytes);
  if (e != cudaSuccess) {
    Error err = make_error(e, fmt::format("cudaMallocHost({} bytes)", bytes));
    if (e == cudaErrorMemoryAllocation) err = Error(errc::out_of_memory, err.message());
    return fail(std::move(err));
  }
  b.bytes_ = bytes;
  return b;
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) (void)cudaFreeHost(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) (void)cudaFreeHost(ptr_);
}

Status copy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return ok();
  return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream),
               fmt::format("cudaMemcpyAsync({} bytes)", bytes));
}

Status memset_async(void* dst, int value, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return ok();
  return check(cudaMemsetAsync(dst, value, bytes, stream), fmt::format("cudaMemsetAsync({} bytes)", bytes));
}

}  // namespace cuactor::gpu

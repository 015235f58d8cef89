/// @file
/// Device memory (stream-ordered, from a cudaMemPool_t) and pinned host memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <utility>

#include "cuactor/core/expected.hpp"

namespace cuactor::gpu {

/// A stream-ordered memory pool of one device. Either owns a pool it created or refers to the
/// device's default pool (which CUDA owns).
class MemPool {
 public:
  /// A new pool on device `ordinal`; `release_threshold` bytes stay reserved after frees
  /// (SIZE_MAX keeps everything, which makes steady-state allocation nearly free).
  static Result<MemPool> create(int ordinal, std::size_t release_threshold = SIZE_MAX);
  /// The device's default pool (not owned).
  static Result<MemPool> device_default(int ordinal);

  MemPool() = default;
  MemPool(MemPool&& o) noexcept : pool_(o.pool_), device_(o.device_), owned_(o.owned_) { o.pool_ = nullptr; }
  MemPool& operator=(MemPool&& o) noexcept;
  MemPool(const MemPool&) = delete;
  MemPool& operator=(const MemPool&) = delete;
  ~MemPool();

  [[nodiscard]] cudaMemPool_t get() const noexcept { return pool_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  /// Bytes currently reserved from the device by the pool.
  Result<std::size_t> reserved_bytes() const;
  /// Bytes currently handed out to live allocations.
  Result<std::size_t> used_bytes() const;
  /// Returns unused reserved memory to the device, keeping at least `keep_bytes`.
  Status trim(std::size_t keep_bytes = 0) const;

 private:
  cudaMemPool_t pool_ = nullptr;
  int device_ = -1;
  bool owned_ = false;
};

/// Move-only device allocation taken from a MemPool in stream order and returned to it in stream
/// order on the stream it was allocated on (or the one set with set_free_stream). The stream must
/// outlive the buffer, as with any stream-ordered allocation.
class DeviceBuffer {
 public:
  /// Allocates `bytes` (0 is allowed and yields a null buffer) on `stream` from `pool`.
  static Result<DeviceBuffer> allocate(const MemPool& pool, std::size_t bytes, cudaStream_t stream);

  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  [[nodiscard]] void* data() const noexcept { return ptr_; }
  template <class T>
  [[nodiscard]] T* data_as() const noexcept {
    return static_cast<T*>(ptr_);
  }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] cudaStream_t free_stream() const noexcept { return stream_; }
  /// Changes the stream the memory is returned on (use the last stream that touches it).
  void set_free_stream(cudaStream_t s) noexcept { stream_ = s; }
  /// Frees now in stream order on the free stream; reports the error the destructor would swallow.
  Status reset();
  /// Gives up ownership without freeing (for memory of a context that was reset) and returns the
  /// pointer.
  void* release() noexcept {
    bytes_ = 0;
    return std::exchange(ptr_, nullptr);
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  int device_ = -1;
};

/// Move-only page-locked host allocation (cudaMallocHost), the source/target of truly asynchronous
/// copies.
class PinnedBuffer {
 public:
  static Result<PinnedBuffer> allocate(std::size_t bytes);

  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  [[nodiscard]] void* data() const noexcept { return ptr_; }
  template <class T>
  [[nodiscard]] std::span<T> as_span() const noexcept {
    return {static_cast<T*>(ptr_), bytes_ / sizeof(T)};
  }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Asynchronous copy of `bytes` (any direction; cudaMemcpyDefault) on `stream`. With pageable host
/// memory, `stream`'s device must be the current one: CUDA refuses the copy otherwise (invalid argument).
Status copy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);
/// Asynchronous byte fill on `stream`.
Status memset_async(void* dst, int value, std::size_t bytes, cudaStream_t stream);

}  // namespace cuactor::gpu

/// @file
/// Owning wrapper for a CUDA stream.
#pragma once

#include <cuda_runtime_api.h>

#include "cuactor/core/expected.hpp"

namespace cuactor::gpu {

/// Range of stream priorities on the current device; lower numbers are higher priority.
struct PriorityRange {
  int least = 0;     ///< Lowest priority (the default).
  int greatest = 0;  ///< Highest priority (a negative number on current GPUs).
};
/// Stream priority range of the current device.
Result<PriorityRange> stream_priority_range();

/// Move-only owner of a non-blocking CUDA stream created on a given device.
class Stream {
 public:
  /// Creates a non-blocking stream on device `ordinal` with `priority` (0 = default; clamped by CUDA
  /// to the device's range).
  static Result<Stream> create(int ordinal, int priority = 0);

  Stream() = default;
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  /// The raw handle; stays owned by this object.
  [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] int priority() const noexcept { return priority_; }
  [[nodiscard]] explicit operator bool() const noexcept { return stream_ != nullptr; }

  /// Blocks until all work on the stream finished; returns the first error it hit.
  Status synchronize() const;
  /// True if all work finished, false if some is pending, an Error if the stream failed.
  Result<bool> query() const;
  /// True while the stream is capturing into a graph.
  Result<bool> is_capturing() const;

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = -1;
  int priority_ = 0;
};

}  // namespace cuactor::gpu

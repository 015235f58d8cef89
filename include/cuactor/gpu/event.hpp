/// @file
/// Owning wrapper for a CUDA event.
#pragma once

#include <cuda_runtime_api.h>

#include "cuactor/core/expected.hpp"

namespace cuactor::gpu {

/// Move-only owner of a CUDA event. Non-timing events (the default) are cheaper to record and wait
/// on; use `timing` only to measure elapsed time.
class Event {
 public:
  enum class Kind { sync_only, timing };

  /// Creates an event on the current device.
  static Result<Event> create(Kind kind = Kind::sync_only);

  Event() = default;
  Event(Event&& o) noexcept : event_(o.event_), kind_(o.kind_) { o.event_ = nullptr; }
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  [[nodiscard]] cudaEvent_t get() const noexcept { return event_; }
  [[nodiscard]] Kind kind() const noexcept { return kind_; }
  [[nodiscard]] explicit operator bool() const noexcept { return event_ != nullptr; }

  /// Records the event at the current tail of `stream`.
  Status record(cudaStream_t stream) const;
  /// Makes `stream` wait on the device until this event completes (no host synchronisation).
  Status wait_on(cudaStream_t stream) const;
  /// Blocks the host until the event completes.
  Status synchronize() const;
  /// True if completed, false if pending.
  Result<bool> query() const;

  /// Milliseconds between two recorded timing events.
  static Result<float> elapsed_ms(const Event& start, const Event& stop);

 private:
  cudaEvent_t event_ = nullptr;
  Kind kind_ = Kind::sync_only;
};

}  // namespace cuactor::gpu

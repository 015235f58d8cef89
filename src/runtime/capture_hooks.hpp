/// @file
/// Capture awareness of one actor stream (internal): the one definition of "this stream is capturing",
/// the frees that must wait until a capture ended, and where recorded operations' buffers go.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "cuactor/runtime/op_context.hpp"

namespace cuactor::runtime::detail {

struct OpRecord;

/// Capture state of one stream. Captures begin and end only inside immediate operations
/// (DeviceActor::execute), which run under change_gate(); any other thread that must not race a
/// capture's start (a free, the poller's stream query) takes the gate too. Thread-safe.
class CaptureHooks {
 public:
  explicit CaptureHooks(cudaStream_t stream) noexcept : stream_(stream) {}
  CaptureHooks(const CaptureHooks&) = delete;
  CaptureHooks& operator=(const CaptureHooks&) = delete;

  /// True while the stream captures (refreshed after each immediate operation).
  [[nodiscard]] bool capturing() const noexcept { return capturing_.load(std::memory_order_acquire); }
  /// The gate held while a capture may begin or end (recursive: an immediate operation may free memory).
  [[nodiscard]] std::recursive_mutex& change_gate() noexcept { return gate_; }
  /// Re-reads the stream's capture status (actor thread, under the gate, after an immediate operation);
  /// when no capture is active any more, runs the deferred frees and drops the unlistened keep-alives.
  void refresh() noexcept;

  /// Remembers that `ptr` was allocated while the stream captured: the graph owns its free.
  void note_allocation(void* ptr);
  /// Frees `ptr` in stream order after `last_write` (owned from here on), or defers both until the
  /// capture ended when the memory predates it (the free would otherwise be recorded into the graph).
  void free_or_defer(void* ptr, cudaEvent_t last_write) noexcept;

  /// Sets (or clears) who receives recorded operations.
  void set_listener(CaptureListener listener);
  /// Hands a recorded operation's buffers and keep-alive objects to the listener, or keeps them until
  /// the capture ended when nobody listens.
  void hand_over(OpRecord& op);
  /// Forgets the capture (after a poisoning): no listener, nothing kept, not capturing.
  void reset() noexcept;

 private:
  struct DeferredFree {
    void* ptr;
    cudaEvent_t last_write;
  };
  void free_now(void* ptr, cudaEvent_t last_write) noexcept;
  void flush_deferred_locked() noexcept;

  cudaStream_t stream_;
  std::atomic<bool> capturing_{false};
  std::recursive_mutex gate_;
  std::mutex mutex_;  // guards the members below
  std::vector<DeferredFree> deferred_frees_;
  std::unordered_set<void*> captured_allocations_;
  CaptureListener listener_;
  std::vector<std::shared_ptr<const void>> unlistened_;
};

}  // namespace cuactor::runtime::detail

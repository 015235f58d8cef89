#include "runtime/capture_hooks.hpp"

#include "cuactor/runtime/detail/request.hpp"

namespace cuactor::runtime::detail {

void CaptureHooks::refresh() noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const bool now = cudaStreamIsCapturing(stream_, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone;
  capturing_.store(now, std::memory_order_release);
  if (now) return;
  std::vector<std::shared_ptr<const void>> dropped;
  {
    std::lock_guard lock(mutex_);
    captured_allocations_.clear();  // later frees of those run outside the graph
    flush_deferred_locked();
    if (!listener_) dropped.swap(unlistened_);
  }
  // `dropped` (possibly the last owners of allocations, whose frees take the lock) goes out of scope here.
}

void CaptureHooks::note_allocation(void* ptr) {
  std::lock_guard lock(mutex_);
  captured_allocations_.insert(ptr);
}

void CaptureHooks::free_or_defer(void* ptr, cudaEvent_t last_write) noexcept {
  std::lock_guard gate(gate_);  // never race the start or end of a capture
  std::lock_guard lock(mutex_);
  const bool allocated_in_capture = captured_allocations_.erase(ptr) > 0;
  if (capturing() && !allocated_in_capture) {
    deferred_frees_.push_back({ptr, last_write});
    return;
  }
  // Memory the capture itself allocated is freed inside it: the graph's free node pairs its allocation.
  flush_deferred_locked();
  free_now(ptr, last_write);
}

void CaptureHooks::set_listener(CaptureListener listener) {
  std::lock_guard lock(mutex_);
  listener_ = std::move(listener);
}

void CaptureHooks::hand_over(OpRecord& op) {
  CapturedOp captured{{op.reads.begin(), op.reads.end()},
                      {op.writes.begin(), op.writes.end()},
                      {std::make_move_iterator(op.keep_alive.begin()), std::make_move_iterator(op.keep_alive.end())}};
  op.keep_alive.clear();
  CaptureListener listener;
  {
    std::lock_guard lock(mutex_);
    listener = listener_;
    if (!listener) {
      // Nobody took ownership: keep everything until the capture ended.
      for (auto& a : captured.reads) unlistened_.push_back(a);
      for (auto& a : captured.writes) unlistened_.push_back(a);
      for (auto& k : captured.keep_alive) unlistened_.push_back(std::move(k));
      return;
    }
  }
  listener(std::move(captured));
}

void CaptureHooks::reset() noexcept {
  std::vector<std::shared_ptr<const void>> dropped;
  CaptureListener listener;
  {
    std::lock_guard lock(mutex_);
    capturing_.store(false, std::memory_order_release);
    dropped.swap(unlistened_);
    listener.swap(listener_);
    captured_allocations_.clear();
  }
}

void CaptureHooks::free_now(void* ptr, cudaEvent_t last_write) noexcept {
  if (last_write) {
    (void)cudaStreamWaitEvent(stream_, last_write, 0);
    (void)cudaEventDestroy(last_write);  // the enqueued wait keeps what it needs
  }
  (void)cudaFreeAsync(ptr, stream_);
}

void CaptureHooks::flush_deferred_locked() noexcept {
  if (capturing()) return;
  for (const auto& f : deferred_frees_) free_now(f.ptr, f.last_write);
  deferred_frees_.clear();
}

}  // namespace cuactor::runtime::detail

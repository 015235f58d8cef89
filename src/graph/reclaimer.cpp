#include "graph/reclaimer.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <utility>

#include "cuactor/gpu/graph.hpp"

namespace cuactor::graph::detail {

Reclaimer& Reclaimer::instance() {
  // Leaked on purpose: CUDA may run user-object destructors during process teardown.
  static Reclaimer* const r = new Reclaimer();
  return *r;
}

Reclaimer::Reclaimer() {
  std::thread([this] { run(); }).detach();
}

void Reclaimer::run() {
  // Frees and pool destruction here must neither fail nor invalidate another thread's global capture.
  const gpu::ScopedCaptureMode relaxed(gpu::CaptureMode::relaxed);
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return !queue_.empty(); });
    std::vector<std::shared_ptr<void>> batch = std::exchange(queue_, {});
    busy_ = true;
    lock.unlock();
    while (any_capture_session_active()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    for (auto& item : batch) item.reset();  // in order: buffers before the pool that frees them
    batch.clear();
    // Frees handed to this thread's own stream complete before the reclaimer reports itself idle.
    (void)cudaStreamSynchronize(cudaStreamPerThread);
    lock.lock();
    busy_ = false;
    idle_.notify_all();
  }
}

void Reclaimer::retire(std::vector<std::shared_ptr<void>> items) {
  if (items.empty()) return;
  {
    std::lock_guard lock(mutex_);
    for (auto& i : items) queue_.push_back(std::move(i));
  }
  wake_.notify_one();
}

void Reclaimer::token_created() noexcept {
  std::lock_guard lock(mutex_);
  ++tokens_;
}

void Reclaimer::token_released(std::shared_ptr<void> payload) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(payload));
    if (tokens_ > 0) --tokens_;
  }
  wake_.notify_one();
  idle_.notify_all();
}

std::size_t Reclaimer::live_tokens() const {
  std::lock_guard lock(mutex_);
  return tokens_;
}

Status Reclaimer::wait_drained(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (idle_.wait_for(lock, timeout, [this] { return queue_.empty() && !busy_; })) return ok();
  return fail(errc::timeout, fmt::format("graph reclaimer: {} retired item(s) still not freed after {} ms",
                                         queue_.size(), timeout.count()));
}

Status Reclaimer::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (idle_.wait_for(lock, timeout, [this] { return tokens_ == 0 && queue_.empty() && !busy_; })) return ok();
  return fail(errc::timeout,
              fmt::format("graph reclaimer: after {} ms, {} graph pool reference(s) are still held by CUDA and {} "
                          "retired item(s) are not freed (is a CapturedGraph still alive?)",
                          timeout.count(), tokens_, queue_.size()));
}

}  // namespace cuactor::graph::detail

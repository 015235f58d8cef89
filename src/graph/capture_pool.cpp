#include "cuactor/graph/capture_pool.hpp"

#include <fmt/format.h>

#include <utility>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/graph.hpp"
#include "cuactor/gpu/stream.hpp"
#include "graph/reclaimer.hpp"

namespace cuactor::graph {

/// The graph-private memory pool and the stream its allocations are made and freed on.
struct CapturePool::Arena {
  gpu::MemPool pool;
  gpu::Stream stream;
  // Frees of this arena's buffers are stream-ordered on `stream`: finish them before the pool goes,
  // so that the device memory is back when the reclaimer reports itself drained.
  ~Arena() { (void)stream.synchronize(); }
};

namespace {

/// One allocation of an arena; holds the arena so that its stream outlives the free.
struct ArenaAllocation {
  std::shared_ptr<void> arena;  // destroyed after `buffer` (reverse declaration order)
  gpu::DeviceBuffer buffer;
};

}  // namespace

Result<std::shared_ptr<CapturePool>> CapturePool::create(int ordinal) {
  CUACTOR_TRY(gpu::check_ordinal(ordinal));
  (void)detail::Reclaimer::instance();  // start the reclaimer thread outside any capture
  return std::shared_ptr<CapturePool>(new CapturePool(ordinal));
}

CapturePool::~CapturePool() {
  std::vector<std::shared_ptr<void>> items = kept_.release_all();
  if (arena_) items.push_back(std::move(arena_));
  detail::Reclaimer::instance().retire(std::move(items));
}

Result<bool> CapturePool::keep_alive(std::shared_ptr<void> owner, const void* address, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  return kept_.add(std::move(owner), address, bytes);
}

Result<void*> CapturePool::adopt(gpu::DeviceBuffer buffer) {
  if (buffer.device() != device_ && buffer.data() != nullptr)
    return fail(errc::wrong_device,
                fmt::format("CapturePool of device {}: cannot adopt a buffer of device {}", device_, buffer.device()));
  void* address = buffer.data();
  const std::size_t bytes = buffer.size();
  // The caller's stream may be gone by the time the last graph is: free on the freeing thread's
  // per-thread stream instead (the reclaimer's), which is safe since no graph uses the buffer then.
  buffer.set_free_stream(cudaStreamPerThread);
  auto owner = std::make_shared<gpu::DeviceBuffer>(std::move(buffer));
  CUACTOR_TRY(keep_alive(std::move(owner), address, bytes));
  return address;
}

Result<void*> CapturePool::allocate(std::size_t bytes) {
  if (bytes == 0) return fail(errc::invalid_argument, "CapturePool::allocate: bytes=0; ask for at least one byte");
  // Relaxed for this thread only: the allocation below is not part of any capture.
  const gpu::ScopedCaptureMode relaxed(gpu::CaptureMode::relaxed);
  auto scope = gpu::ScopedDevice::make(device_);
  if (!scope) return fail(scope.error());
  std::lock_guard lock(mutex_);
  if (!arena_) {
    auto pool = gpu::MemPool::create(device_, 0);
    if (!pool) return fail(pool.error());
    auto stream = gpu::Stream::create(device_);
    if (!stream) return fail(stream.error());
    arena_ = std::shared_ptr<Arena>(new Arena{std::move(*pool), std::move(*stream)});
  }
  auto buffer = gpu::DeviceBuffer::allocate(arena_->pool, bytes, arena_->stream.get());
  if (!buffer) return fail(buffer.error());
  // The memory must be usable by any stream at once, capture or not: finish the stream-ordered alloc.
  CUACTOR_TRY(arena_->stream.synchronize());
  void* address = buffer->data();
  auto owner = std::make_shared<ArenaAllocation>(ArenaAllocation{arena_, std::move(*buffer)});
  CUACTOR_TRY(kept_.add(std::move(owner), address, bytes));
  return address;
}

std::size_t CapturePool::buffer_count() const {
  std::lock_guard lock(mutex_);
  return kept_.size();
}

std::size_t CapturePool::kept_bytes() const {
  std::lock_guard lock(mutex_);
  return kept_.bytes();
}

Result<std::size_t> CapturePool::private_used_bytes() const {
  std::lock_guard lock(mutex_);
  if (!arena_) return std::size_t{0};
  return arena_->pool.used_bytes();
}

Status CapturePool::absorb(CapturePool& other) {
  if (&other == this) return ok();
  if (other.device_ != device_)
    return fail(errc::wrong_device,
                fmt::format("CapturePool of device {} cannot absorb a pool of device {}", device_, other.device_));
  std::scoped_lock lock(mutex_, other.mutex_);
  kept_.merge_from(std::move(other.kept_));
  // Its arena lives on through the allocations that reference it; the handle itself is dropped on the
  // reclaimer thread, never on a thread that may be capturing.
  if (other.arena_) detail::Reclaimer::instance().retire({std::move(other.arena_)});
  return ok();
}

Status wait_for_released_pools(std::chrono::milliseconds timeout) {
  return detail::Reclaimer::instance().wait_idle(timeout);
}

Status drain_released_pools(std::chrono::milliseconds timeout) {
  return detail::Reclaimer::instance().wait_drained(timeout);
}

}  // namespace cuactor::graph

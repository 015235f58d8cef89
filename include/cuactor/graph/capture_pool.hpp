/// @file
/// `CapturePool` ([G2]): keeps every buffer a captured graph uses alive until the last graph that
/// references the pool is gone, and serves memory allocated during capture from a graph-private pool.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>

#include "cuactor/core/expected.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/graph/keep_alive.hpp"
#include "cuactor/runtime/gpu_ref.hpp"

namespace cuactor::graph {

/// A shared keep-alive pool for captured graphs. Graphs made with it hold it twice: host-side (so
/// pool() works) and through a CUDA user object retained by the graph, so CUDA itself keeps the pool
/// alive until the graph and every launch of it in flight are gone; several graphs may share one
/// pool. Once the last reference goes, what it kept is freed on cuactor's reclaimer thread (never on
/// the thread that dropped it). Thread-safe.
class CapturePool {
 public:
  /// A pool for graphs of device `ordinal`; its private memory pool is made on first allocation.
  static Result<std::shared_ptr<CapturePool>> create(int ordinal);

  CapturePool(const CapturePool&) = delete;
  CapturePool& operator=(const CapturePool&) = delete;
  /// Hands everything kept to the reclaimer thread.
  ~CapturePool();

  /// The device of the graphs this pool serves.
  [[nodiscard]] int device() const noexcept { return device_; }

  /// Keeps `owner` alive as long as the pool (manual registration); `address`/`bytes` describe the
  /// memory it owns. Registering an owner twice keeps it once. Returns true when it was new.
  Result<bool> keep_alive(std::shared_ptr<void> owner, const void* address, std::size_t bytes);
  /// Takes ownership of `buffer` and keeps it alive as long as the pool; returns its address.
  Result<void*> adopt(gpu::DeviceBuffer buffer);
  /// Keeps the allocation behind `ref` alive (what capture does automatically for captured
  /// operations); `stale_handle` when the handle is no longer valid.
  template <class T>
  Result<bool> keep_alive(const runtime::GpuRef<T>& ref) {
    CUACTOR_TRY(ref.access(device_));
    const auto& a = ref.allocation();
    return keep_alive(a, a->data(), a->bytes());
  }

  /// `bytes` of device memory from the graph-private pool, kept alive as long as this pool. Safe while
  /// any stream captures, in every capture mode: the allocation is made eagerly on the pool's own
  /// stream in relaxed mode, so it is never recorded into a graph and never invalidates a capture.
  Result<void*> allocate(std::size_t bytes);
  /// `count` elements of T from the graph-private pool.
  template <class T>
  Result<T*> allocate_array(std::size_t count) {
    auto p = allocate(count * sizeof(T));
    if (!p) return fail(p.error());
    return static_cast<T*>(*p);
  }

  /// Number of distinct buffers kept alive (registered and allocated).
  [[nodiscard]] std::size_t buffer_count() const;
  /// Sum of their sizes in bytes.
  [[nodiscard]] std::size_t kept_bytes() const;
  /// Bytes the graph-private pool has handed out (0 before the first allocation).
  Result<std::size_t> private_used_bytes() const;

  /// Moves every buffer kept by `other` into this pool (used when a capture that allocated from its
  /// own pool ends into a shared one); `other` keeps nothing afterwards.
  Status absorb(CapturePool& other);

 private:
  struct Arena;
  explicit CapturePool(int ordinal) : device_(ordinal) {}

  int device_;
  mutable std::mutex mutex_;
  KeepAliveSet kept_;
  std::shared_ptr<Arena> arena_;
};

/// Waits until CUDA released every graph's reference to a capture pool and the reclaimer freed what
/// they kept: for tests and orderly shutdown, once every CapturedGraph is destroyed (else `timeout`).
Status wait_for_released_pools(std::chrono::milliseconds timeout = std::chrono::seconds(10));
/// Waits until everything already released has been freed (live graphs may still hold pools).
Status drain_released_pools(std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace cuactor::graph

/// @file
/// What an operation sees while it runs on a device actor's thread (OpContext), and how a request
/// declares the buffers it reads and writes (Reads, Writes).
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <boost/container/small_vector.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/runtime/device_state.hpp"
#include "cuactor/runtime/gpu_ref.hpp"

namespace cuactor::runtime {

/// Allocations a request uses with one kind of access. Requests name a handful of buffers, so they live
/// inline: building a request allocates nothing for them, and its answering thread frees nothing.
using AllocationList = boost::container::small_vector<std::shared_ptr<DeviceAllocation>, 4>;
/// Objects a request keeps alive until the device is done with it (the same reasoning as AllocationList).
using KeepAliveList = boost::container::small_vector<std::shared_ptr<const void>, 2>;

/// A list of buffers an operation uses with one kind of access (see Reads and Writes).
template <class Access>
class BufferList {
 public:
  BufferList() = default;
  /// BufferList{a, b, c} for GpuRefs of any element types.
  template <class... T>
  BufferList(const GpuRef<T>&... refs) : items_{refs.allocation()...} {}  // NOLINT(google-explicit-constructor)
  /// Adds one more buffer.
  template <class T>
  BufferList& add(const GpuRef<T>& ref) {
    items_.push_back(ref.allocation());
    return *this;
  }
  /// Adds one more allocation.
  BufferList& add(std::shared_ptr<DeviceAllocation> allocation) {
    items_.push_back(std::move(allocation));
    return *this;
  }
  /// The allocations.
  [[nodiscard]] std::span<const std::shared_ptr<DeviceAllocation>> items() const noexcept { return items_; }
  /// The allocations, moved out (the list is left empty).
  [[nodiscard]] AllocationList release() && noexcept { return std::move(items_); }

 private:
  AllocationList items_;
};

/// Tag of read access.
struct ReadAccess {};
/// Tag of write access.
struct WriteAccess {};
/// Buffers an operation reads: validated before it runs; its stream waits for their last writes.
using Reads = BufferList<ReadAccess>;
/// Buffers an operation writes: like Reads, plus a write lease while in flight and a recorded write
/// event afterwards.
using Writes = BufferList<WriteAccess>;

/// What the capture listener receives for each operation recorded while the actor's stream captures:
/// the buffers it uses and the objects it asked to keep alive (the listener owns them from now on, e.g.
/// to tie them to the graph's lifetime).
struct CapturedOp {
  std::vector<std::shared_ptr<DeviceAllocation>> reads;
  std::vector<std::shared_ptr<DeviceAllocation>> writes;
  std::vector<std::shared_ptr<const void>> keep_alive;
};
/// Receives every operation recorded during a capture (called on the actor's thread).
using CaptureListener = std::function<void(CapturedOp&&)>;

namespace detail {
class OpServices;
struct OpRecord;
}  // namespace detail

/// What an operation's function sees on the actor's thread: the device, the stream to enqueue on, the
/// cuBLAS handle bound to that stream, the device's memory pool, and a keep-alive list.
class OpContext {
 public:
  /// Device ordinal.
  [[nodiscard]] int device() const noexcept;
  /// Architecture of the device (e.g. sm_90a on an H100), queried once per actor.
  [[nodiscard]] GpuArch arch() const noexcept;
  /// Number of streaming multiprocessors of the device, queried once per actor.
  [[nodiscard]] int sm_count() const noexcept;
  /// The actor's stream; enqueue the operation's work here (never synchronise it).
  [[nodiscard]] cudaStream_t stream() const noexcept;
  /// cuBLAS handle owned by the actor, already bound to stream() with a workspace of its own.
  [[nodiscard]] cublasHandle_t cublas() const noexcept;
  /// The device's stream-ordered memory pool.
  [[nodiscard]] const gpu::MemPool& pool() const noexcept;
  /// The device state (generation, accepting_ops).
  [[nodiscard]] const std::shared_ptr<DeviceState>& state() const noexcept;
  /// Current generation.
  [[nodiscard]] std::uint64_t generation() const noexcept;
  /// True while stream() is capturing a graph.
  [[nodiscard]] bool capturing() const noexcept;

  /// Keeps `object` alive until the operation's work finished on the device (or, under capture, hands
  /// it to the capture listener).
  void keep_alive(std::shared_ptr<const void> object);
  /// Moves `value` into the keep-alive list.
  template <class T>
  void keep_alive_value(T value) {
    keep_alive(std::make_shared<const T>(std::move(value)));
  }
  /// Allocates `bytes` in stream order on stream() from the device's pool, minted at the current
  /// generation (`out_of_memory` when the pool cannot serve it).
  Result<std::shared_ptr<DeviceAllocation>> allocate_bytes(std::size_t bytes);
  /// Allocates `count` elements of T.
  template <class T>
  Result<GpuRef<T>> allocate(std::size_t count) {
    if (count > SIZE_MAX / sizeof(T))
      return fail(errc::invalid_argument, "allocate: " + std::to_string(count) + " elements overflow size_t");
    auto a = allocate_bytes(count * sizeof(T));
    if (!a) return fail(a.error());
    return GpuRef<T>(std::move(*a));
  }
  /// Sets (or, with an empty function, clears) the listener that receives operations recorded during a
  /// capture of stream(); use from an execute() function that begins/ends the capture.
  void set_capture_listener(CaptureListener listener);

  /// A context over `services` for `op` (backends only).
  OpContext(detail::OpServices& services, detail::OpRecord* op) noexcept : services_(&services), op_(op) {}

 private:
  detail::OpServices* services_;
  detail::OpRecord* op_;
};

}  // namespace cuactor::runtime

/// @file
/// `DeviceScalar<T>` ([G4]): a per-replay parameter in device memory that captured kernels read,
/// updated before each replay by a stream-ordered copy from pinned memory.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "cuactor/core/expected.hpp"
#include "cuactor/gpu/event.hpp"
#include "cuactor/gpu/memory.hpp"

namespace cuactor::graph {

/// The untyped storage behind a DeviceScalar: device memory plus a ring of pinned staging slots, so
/// that a new value never overwrites one whose copy has not run yet. Not thread-safe.
class DeviceScalarStorage {
 public:
  /// Staging slots: `kSlots` updates may be in flight before set() waits for the oldest one.
  static constexpr std::size_t kSlots = 16;

  /// Storage of `bytes` (1..256) on device `ordinal`; allocates with cudaMalloc, so create it before
  /// any capture begins.
  static Result<std::shared_ptr<DeviceScalarStorage>> create(int ordinal, std::size_t bytes);

  DeviceScalarStorage(const DeviceScalarStorage&) = delete;
  DeviceScalarStorage& operator=(const DeviceScalarStorage&) = delete;
  ~DeviceScalarStorage();

  /// The device address captured kernels read.
  [[nodiscard]] void* device_ptr() const noexcept { return device_ptr_; }
  /// Size of the value in bytes.
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  /// The device.
  [[nodiscard]] int device() const noexcept { return device_; }
  /// Enqueues a copy of `value` (bytes() bytes) to the device on `stream`; work enqueued on `stream`
  /// afterwards (e.g. a replay) sees it. `invalid_argument` while `stream` captures: a copy recorded
  /// into a graph would re-read the staging slot at every replay instead of taking this value once.
  Status set(const void* value, cudaStream_t stream);

 private:
  DeviceScalarStorage() = default;

  int device_ = -1;
  std::size_t bytes_ = 0;
  std::size_t stride_ = 0;
  void* device_ptr_ = nullptr;
  gpu::PinnedBuffer staging_;
  std::array<gpu::Event, kSlots> copied_;
  std::array<bool, kSlots> pending_{};
  std::size_t next_ = 0;
};

/// A device-resident value of T read by captured kernels through device_ptr(). Update it with set()
/// on the replay stream before launching the graph; each replay sees the value last set before it.
/// Copies share the storage; keep it alive with the graph's pool (CapturePool::keep_alive(storage())).
template <class T>
requires std::is_trivially_copyable_v<T>
class DeviceScalar {
 public:
  /// A scalar on device `ordinal` holding `initial` once `stream` reached this point.
  static Result<DeviceScalar> create(int ordinal, const T& initial, cudaStream_t stream) {
    auto storage = DeviceScalarStorage::create(ordinal, sizeof(T));
    if (!storage) return fail(storage.error());
    DeviceScalar s(std::move(*storage));
    CUACTOR_TRY(s.set(initial, stream));
    return s;
  }

  /// Enqueues the update to `value` on `stream` (not while it captures).
  Status set(const T& value, cudaStream_t stream) {
    CUACTOR_TRY(storage_->set(&value, stream));
    value_ = value;
    return ok();
  }
  /// The device address of the value.
  [[nodiscard]] T* device_ptr() const noexcept { return static_cast<T*>(storage_->device_ptr()); }
  /// The value last set.
  [[nodiscard]] const T& value() const noexcept { return value_; }
  /// The shared storage, e.g. for CapturePool::keep_alive.
  [[nodiscard]] const std::shared_ptr<DeviceScalarStorage>& storage() const noexcept { return storage_; }

 private:
  explicit DeviceScalar(std::shared_ptr<DeviceScalarStorage> storage) : storage_(std::move(storage)) {}
  std::shared_ptr<DeviceScalarStorage> storage_;
  T value_{};
};

}  // namespace cuactor::graph

/// @file
/// `GpuRef<T>` ([R2]): a copyable, generation-checked handle to device memory with write tracking
/// ([R3]) and write leases ([R4]).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "cuactor/core/expected.hpp"
#include "cuactor/runtime/device_state.hpp"

namespace cuactor::runtime {

/// Returns memory to where it came from. Implemented by the device actor for each context
/// incarnation; every allocation of that incarnation holds it strongly, so the stream and pool it
/// frees into outlive the allocation even after the actor is gone.
class AllocationOwner {
 public:
  virtual ~AllocationOwner() = default;
  /// Frees `ptr` in stream order after `last_write` (may be null) and takes ownership of `last_write`
  /// (destroys it once its wait is enqueued, possibly later). Never called once context_lost().
  virtual void deallocate(void* ptr, std::size_t bytes, cudaEvent_t last_write) noexcept = 0;
  /// True once the context this memory lived in was reset: its pointers and events are gone and
  /// must never be freed (the addresses may already belong to a newer allocation).
  [[nodiscard]] virtual bool context_lost() const noexcept = 0;
  /// Frees buffer `id` of an isolated worker ([R10]); only owners of remote memory implement it.
  /// Never called once context_lost() (the worker that held the buffer is gone).
  virtual void deallocate_remote(std::uint64_t id, std::size_t bytes) noexcept {
    (void)id;
    (void)bytes;
  }
};

/// Names a buffer that lives in an isolated worker process ([R10]): the worker's id for it.
struct RemoteBuffer {
  std::uint64_t id = 0;
};

/// One device allocation shared by every GpuRef that views it: the pointer, its size, the device and
/// generation it was minted in, the last-write event and the write lease. Thread-safe.
class DeviceAllocation {
 public:
  /// Wraps memory from `owner` (nullptr: memory the caller owns and frees, e.g. from another
  /// allocator) minted at `state`'s current generation.
  DeviceAllocation(void* ptr, std::size_t bytes, const std::shared_ptr<DeviceState>& state,
                   std::shared_ptr<AllocationOwner> owner);
  /// Wraps buffer `remote` of an isolated worker, minted at `generation` (the generation of the worker
  /// that allocated it, which may already be older than `state`'s); `owner` frees it in that worker.
  DeviceAllocation(RemoteBuffer remote, std::size_t bytes, const std::shared_ptr<DeviceState>& state,
                   std::uint64_t generation, std::shared_ptr<AllocationOwner> owner);
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;
  /// Frees the memory through its owner unless its context was lost (then it is abandoned: never
  /// free what a reset context may have handed out again).
  ~DeviceAllocation();

  /// The device address, unchecked (use GpuRef::raw_device_ptr() from outside the runtime); null for
  /// a remote buffer.
  [[nodiscard]] void* data() const noexcept { return ptr_; }
  /// The worker's id of a remote buffer (isolated mode), 0 for memory of this process.
  [[nodiscard]] std::uint64_t remote_id() const noexcept { return remote_id_; }
  /// Size in bytes.
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  /// Generation the allocation was minted in.
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }
  /// Device the allocation lives on.
  [[nodiscard]] int device() const noexcept { return device_; }
  /// The device state, or null when it is gone.
  [[nodiscard]] std::shared_ptr<DeviceState> state() const noexcept { return state_.lock(); }

  /// [R2] checks (state alive, accepting, generation current, right device when `used_device` >= 0).
  Status access(int used_device = -1) const;
  /// access() for a caller that keeps `held` alive (an actor, its own state). When this handle was
  /// minted by `held`, the checks read it directly instead of locking the weak reference, an atomic
  /// read-modify-write on a control block that every thread using the device shares.
  Status access(const std::shared_ptr<DeviceState>& held, int used_device) const;

  /// Records the allocation's write event at the tail of `stream` and remembers the stream ([R3]).
  Status record_write(cudaStream_t stream);
  /// Makes `stream` wait on the device for the last recorded write when that write was on another
  /// stream (no host synchronisation); nothing to do when there was none.
  Status wait_for_last_write(cudaStream_t stream) const;
  /// The stream of the last recorded write, if any.
  [[nodiscard]] std::optional<cudaStream_t> last_write_stream() const;

  /// Takes a shared lease for a device-actor operation that writes the buffer; operations of one
  /// actor share its stream and are therefore ordered. Fails (`invalid_argument`) while an exclusive
  /// external lease is held.
  Status acquire_op_lease();
  /// Returns a lease taken by acquire_op_lease().
  void release_op_lease() noexcept;
  /// Takes the exclusive lease of a writer outside the actor; fails (`invalid_argument`) while any
  /// operation or another external writer holds one.
  Status acquire_exclusive_lease();
  /// Returns the exclusive lease.
  void release_exclusive_lease() noexcept;
  /// Number of operations holding a lease, or -1 while an exclusive lease is held.
  [[nodiscard]] int lease_count() const noexcept { return lease_.load(std::memory_order_acquire); }

  /// "buffer 0x7f..(4096 bytes, device 0, generation 1)" for error messages.
  [[nodiscard]] std::string describe() const;

 private:
  [[nodiscard]] bool context_lost() const noexcept { return owner_ && owner_->context_lost(); }
  /// The [R2] checks against `state`, the live state this handle was minted by.
  Status check_against(const DeviceState& state, int used_device) const;

  void* ptr_;
  std::uint64_t remote_id_ = 0;
  std::size_t bytes_;
  int device_;
  std::uint64_t generation_;
  std::weak_ptr<DeviceState> state_;
  std::shared_ptr<AllocationOwner> owner_;
  mutable std::mutex write_mutex_;
  cudaEvent_t write_event_ = nullptr;
  cudaStream_t write_stream_ = nullptr;
  bool has_write_ = false;
  std::atomic<int> lease_{0};
};

/// An exclusive write lease held by a writer outside the device actor (e.g. an FFI library writing
/// through raw_device_ptr()); operations touching the buffer are rejected until it is released.
class WriteLease {
 public:
  WriteLease() = default;
  /// Takes the exclusive lease of `allocation`.
  static Result<WriteLease> acquire(std::shared_ptr<DeviceAllocation> allocation) {
    CUACTOR_TRY(allocation->acquire_exclusive_lease());
    WriteLease l;
    l.allocation_ = std::move(allocation);
    return l;
  }
  WriteLease(WriteLease&& o) noexcept = default;
  WriteLease& operator=(WriteLease&& o) noexcept {
    if (this != &o) {
      release();
      allocation_ = std::move(o.allocation_);
    }
    return *this;
  }
  WriteLease(const WriteLease&) = delete;
  WriteLease& operator=(const WriteLease&) = delete;
  ~WriteLease() { release(); }
  /// Returns the lease early.
  void release() noexcept {
    if (allocation_) std::exchange(allocation_, nullptr)->release_exclusive_lease();
  }

 private:
  std::shared_ptr<DeviceAllocation> allocation_;
};

/// A live device-buffer handle of `size()` elements of T: shared ownership of the allocation (memory
/// stays alive while any copy, or any operation using it, lives), a weak link to the device state and
/// the generation it was minted in. Every use validates it first: state alive, device accepting
/// operations, generation current, right device — failure is a `stale_handle` Error naming the reason.
/// Staleness never frees memory a kernel may still use. Obtain GpuRefs from a DeviceActor.
template <class T>
class GpuRef {
 public:
  /// An empty handle (size 0, no allocation); every access fails.
  GpuRef() = default;
  /// Views `allocation` as an array of T (its size must be a multiple of sizeof(T)).
  explicit GpuRef(std::shared_ptr<DeviceAllocation> allocation) : allocation_(std::move(allocation)) {}

  /// Validates the handle ([R2] order; `used_device` >= 0 adds the device check).
  Status access(int used_device = -1) const {
    if (!allocation_) return fail(errc::invalid_argument, "empty GpuRef used");
    return allocation_->access(used_device);
  }
  /// The validated device address, for FFI; the caller keeps this GpuRef alive while it is used.
  /// `unsupported` for a buffer of an isolated worker: its address means nothing in this process.
  Result<T*> raw_device_ptr() const {
    CUACTOR_TRY(access());
    if (allocation_->remote_id() != 0)
      return fail(errc::unsupported, allocation_->describe() +
                                         " lives in an isolated worker process: no device "
                                         "address in this process (isolated mode)");
    return static_cast<T*>(allocation_->data());
  }
  /// Generation the handle was minted in (0 for an empty handle).
  [[nodiscard]] std::uint64_t generation() const noexcept { return allocation_ ? allocation_->generation() : 0; }
  /// Device ordinal, or nullopt when empty or when the owning DeviceState is gone.
  [[nodiscard]] std::optional<int> device_id() const noexcept {
    if (!allocation_ || !allocation_->state()) return std::nullopt;
    return allocation_->device();
  }
  /// Number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return allocation_ ? allocation_->bytes() / sizeof(T) : 0; }
  /// Number of bytes.
  [[nodiscard]] std::size_t size_bytes() const noexcept { return allocation_ ? allocation_->bytes() : 0; }
  /// True when the handle views nothing.
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }

  /// Records that work just enqueued on `stream` writes this buffer ([R3]); later operations on other
  /// streams wait for it on the device. Call after enqueueing the writing work.
  Status record_write(cudaStream_t stream) const {
    CUACTOR_TRY(access());
    return allocation_->record_write(stream);
  }
  /// Makes `stream` wait (on the device) for the last recorded write, if it was on another stream.
  Status wait_for_last_write(cudaStream_t stream) const {
    CUACTOR_TRY(access());
    return allocation_->wait_for_last_write(stream);
  }
  /// Most recent writing stream, or nullopt when no write was recorded.
  [[nodiscard]] std::optional<cudaStream_t> last_write_stream() const {
    return allocation_ ? allocation_->last_write_stream() : std::nullopt;
  }
  /// Takes the exclusive write lease for a writer outside the device actor ([R4]).
  Result<WriteLease> lease_write() const {
    CUACTOR_TRY(access());
    return WriteLease::acquire(allocation_);
  }

  /// The same memory viewed as U (bytes must be a multiple of sizeof(U)).
  template <class U>
  Result<GpuRef<U>> reinterpret() const {
    if (allocation_ && allocation_->bytes() % sizeof(U) != 0)
      return fail(errc::invalid_argument, "GpuRef::reinterpret: " + std::to_string(allocation_->bytes()) +
                                              " bytes is not a multiple of the target element size " +
                                              std::to_string(sizeof(U)));
    return GpuRef<U>(allocation_);
  }

  /// The shared allocation (for keep-alive lists, capture pools and the actor's bookkeeping).
  [[nodiscard]] const std::shared_ptr<DeviceAllocation>& allocation() const noexcept { return allocation_; }

 private:
  std::shared_ptr<DeviceAllocation> allocation_;
};

}  // namespace cuactor::runtime

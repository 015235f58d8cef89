#include "cuactor/runtime/gpu_ref.hpp"

#include <fmt/format.h>

#include <utility>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"

namespace cuactor::runtime {

DeviceAllocation::DeviceAllocation(void* ptr, std::size_t bytes, const std::shared_ptr<DeviceState>& state,
                                   std::shared_ptr<AllocationOwner> owner)
    : ptr_(ptr),
      bytes_(bytes),
      device_(state ? state->device_id() : -1),
      generation_(state ? state->generation() : 0),
      state_(state),
      owner_(std::move(owner)) {}

DeviceAllocation::DeviceAllocation(RemoteBuffer remote, std::size_t bytes, const std::shared_ptr<DeviceState>& state,
                                   std::uint64_t generation, std::shared_ptr<AllocationOwner> owner)
    : ptr_(nullptr),
      remote_id_(remote.id),
      bytes_(bytes),
      device_(state ? state->device_id() : -1),
      generation_(generation),
      state_(state),
      owner_(std::move(owner)) {}

DeviceAllocation::~DeviceAllocation() {
  if (remote_id_ != 0) {
    // The worker that held the buffer may be gone (then so is the buffer).
    if (owner_ && !context_lost()) owner_->deallocate_remote(remote_id_, bytes_);
    return;
  }
  // After a reset the event and the address belong to a dead context: abandon them.
  if (context_lost()) return;
  // The free is ordered on the owner's stream after the last recorded write on any stream.
  if (owner_ && ptr_) {
    // The owner takes the event: it may defer the free (and the wait on the event) past a capture.
    cudaEvent_t last_write = std::exchange(write_event_, nullptr);
    if (!has_write_ && last_write) {
      (void)cudaEventDestroy(last_write);
      last_write = nullptr;
    }
    owner_->deallocate(ptr_, bytes_, last_write);
  }
  if (write_event_) (void)cudaEventDestroy(write_event_);
}

Status DeviceAllocation::access(int used_device) const {
  const auto state = state_.lock();
  if (!state) return fail(stale_error(describe(), StaleReason::state_gone, generation_, 0, device_, used_device));
  return check_against(*state, used_device);
}

Status DeviceAllocation::access(const std::shared_ptr<DeviceState>& held, int used_device) const {
  // Same control block: `held` keeps the state this handle refers to alive.
  if (!held || state_.owner_before(held) || held.owner_before(state_)) return access(used_device);
  return check_against(*held, used_device);
}

Status DeviceAllocation::check_against(const DeviceState& state, int used_device) const {
  if (const auto reason = state.check_handle(generation_, used_device))
    return fail(stale_error(describe(), *reason, generation_, state.generation(), device_, used_device));
  return ok();
}

Status DeviceAllocation::record_write(cudaStream_t stream) {
  if (remote_id_ != 0)
    return fail(errc::unsupported, describe() + ": write events of a worker's buffer stay in the worker");
  std::lock_guard lock(write_mutex_);
  if (!write_event_) {
    auto scoped = gpu::ScopedDevice::make(device_);
    if (!scoped) return fail(scoped.error());
    CUACTOR_TRY(gpu::check(cudaEventCreateWithFlags(&write_event_, cudaEventDisableTiming),
                           fmt::format("cudaEventCreateWithFlags(write event of {})", describe())));
  }
  CUACTOR_TRY(gpu::check(cudaEventRecord(write_event_, stream),
                         [&] { return fmt::format("cudaEventRecord(write event of {})", describe()); }));
  write_stream_ = stream;
  has_write_ = true;
  return ok();
}

Status DeviceAllocation::wait_for_last_write(cudaStream_t stream) const {
  if (remote_id_ != 0)
    return fail(errc::unsupported, describe() + ": a worker's buffer cannot be ordered on a stream of this process");
  std::lock_guard lock(write_mutex_);
  if (!has_write_ || write_stream_ == stream) return ok();
  return gpu::check(cudaStreamWaitEvent(stream, write_event_, 0),
                    [&] { return fmt::format("cudaStreamWaitEvent(last write of {})", describe()); });
}

std::optional<cudaStream_t> DeviceAllocation::last_write_stream() const {
  std::lock_guard lock(write_mutex_);
  if (!has_write_) return std::nullopt;
  return write_stream_;
}

Status DeviceAllocation::acquire_op_lease() {
  int current = lease_.load(std::memory_order_acquire);
  do {
    if (current < 0)
      return fail(
          errc::invalid_argument,
          fmt::format("{} is leased for writing outside the device actor; release the WriteLease first", describe()));
  } while (!lease_.compare_exchange_weak(current, current + 1, std::memory_order_acq_rel));
  return ok();
}

void DeviceAllocation::release_op_lease() noexcept {
  lease_.fetch_sub(1, std::memory_order_acq_rel);
}

Status DeviceAllocation::acquire_exclusive_lease() {
  int expected = 0;
  if (lease_.compare_exchange_strong(expected, -1, std::memory_order_acq_rel)) return ok();
  return fail(errc::invalid_argument,
              expected < 0 ? fmt::format("{} already has an exclusive write lease", describe())
                           : fmt::format("{} is in use by {} in-flight operation(s); cannot lease it for writing",
                                         describe(), expected));
}

void DeviceAllocation::release_exclusive_lease() noexcept {
  lease_.store(0, std::memory_order_release);
}

std::string DeviceAllocation::describe() const {
  if (remote_id_ != 0)
    return fmt::format("worker buffer #{}({} bytes, device {}, generation {})", remote_id_, bytes_, device_,
                       generation_);
  return fmt::format("buffer {}({} bytes, device {}, generation {})", ptr_, bytes_, device_, generation_);
}

}  // namespace cuactor::runtime

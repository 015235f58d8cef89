#include "runtime/write_tracker.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "cuactor/runtime/detail/request.hpp"

namespace cuactor::runtime::detail {
namespace {

/// A buffer of an isolated worker has no address in this process.
Status local_only(const OpRecord& op, const DeviceAllocation& a) {
  if (a.remote_id() == 0) return ok();
  return fail(errc::invalid_argument,
              fmt::format("request '{}': {} lives in an isolated worker; use it with that worker's actor", op.name,
                          a.describe()));
}

}  // namespace

Status WriteTracker::prepare(OpRecord& op, cudaStream_t stream, bool capturing) {
  for (const auto& a : op.reads) {
    if (!a) return fail(errc::invalid_argument, fmt::format("request '{}': empty GpuRef among its reads", op.name));
    CUACTOR_TRY(a->access(state_, state_->device_id()));
    CUACTOR_TRY(local_only(op, *a));
    if (a->lease_count() < 0)
      return fail(errc::invalid_argument,
                  fmt::format("request '{}': {} is leased for writing outside the actor", op.name, a->describe()));
  }
  for (const auto& a : op.writes) {
    if (!a) return fail(errc::invalid_argument, fmt::format("request '{}': empty GpuRef among its writes", op.name));
    CUACTOR_TRY(a->access(state_, state_->device_id()));
    CUACTOR_TRY(local_only(op, *a));
    CUACTOR_TRY(a->acquire_op_lease());
    ++op.leases_held;
  }
  if (capturing) return ok();
  for (const auto& a : op.reads) CUACTOR_TRY(a->wait_for_last_write(stream));
  for (const auto& a : op.writes) CUACTOR_TRY(a->wait_for_last_write(stream));
  return ok();
}

void WriteTracker::note_written(const OpRecord& op) {
  for (const auto& a : op.writes)
    if (std::find(unrecorded_.begin(), unrecorded_.end(), a.get()) == unrecorded_.end()) unrecorded_.push_back(a.get());
}

Status WriteTracker::record_pending(cudaStream_t stream) {
  Status recorded = ok();
  for (DeviceAllocation* a : unrecorded_)
    if (recorded) recorded = a->record_write(stream);
  unrecorded_.clear();
  return recorded;
}

}  // namespace cuactor::runtime::detail

#include "runtime/write_tracker.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "cuactor/runtime/detail/request.hpp"

namespace cuactor::runtime::detail {

Status WriteTracker::prepare(OpRecord& op, cudaStream_t stream, bool capturing) {
  for (const auto& a : op.reads) {
    if (!a) return fail(errc::invalid_argument, fmt::format("request '{}': empty GpuRef among its reads", op.name));
    CUACTOR_TRY(a->access(ordinal_));
    if (a->lease_count() < 0)
      return fail(errc::invalid_argument,
                  fmt::format("request '{}': {} is leased for writing outside the actor", op.name, a->describe()));
  }
  for (const auto& a : op.writes) {
    if (!a) return fail(errc::invalid_argument, fmt::format("request '{}': empty GpuRef among its writes", op.name));
    CUACTOR_TRY(a->access(ordinal_));
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

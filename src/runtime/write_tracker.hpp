/// @file
/// Write tracking of one actor ([R3], [R4]) (internal): validation of a request's buffers, write
/// leases, stream waits on other streams' writes, and write events recorded once per batch.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "cuactor/core/expected.hpp"
#include "cuactor/runtime/gpu_ref.hpp"

namespace cuactor::runtime::detail {

struct OpRecord;

/// Orders one actor stream's operations against every other stream's writes. Actor thread only.
class WriteTracker {
 public:
  /// Tracks the writes of the actor whose device state is `state` (it mints the handles that its
  /// requests mostly carry).
  explicit WriteTracker(std::shared_ptr<DeviceState> state) noexcept : state_(std::move(state)) {}

  /// Validates `op`'s buffers ([R2] checks on this device), takes a lease on each written buffer and,
  /// unless the stream captures (a graph is ordered by the stream it is launched on), makes `stream`
  /// wait for the last write of each buffer made on another stream.
  Status prepare(OpRecord& op, cudaStream_t stream, bool capturing);
  /// Notes that `op`'s work, now enqueued, writes its buffers (recorded at the next record_pending()).
  void note_written(const OpRecord& op);
  /// Records the write event of every buffer noted since the last call at the tail of `stream`. One event
  /// per buffer and batch: others learn of a write only through its reply, which comes after this point.
  Status record_pending(cudaStream_t stream);
  /// Forgets pending writes (after a poisoning).
  void clear() noexcept { unrecorded_.clear(); }

 private:
  std::shared_ptr<DeviceState> state_;
  std::vector<DeviceAllocation*> unrecorded_;
};

}  // namespace cuactor::runtime::detail

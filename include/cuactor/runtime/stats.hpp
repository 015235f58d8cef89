/// @file
/// What a device actor reports about itself ([O2]): circuit state and a stats snapshot, also as JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cuactor/core/cxx20.hpp"

namespace cuactor::runtime {

/// State of a device's circuit breaker ([R8], [R9]).
enum class CircuitState {
  closed,      ///< Normal operation.
  recovering,  ///< A poisoning is being handled (reset + canary); queued requests wait.
  open,        ///< The device rejects every request with `circuit_open`.
};
/// "closed", "recovering", "open".
std::string_view to_string(CircuitState state) noexcept;

/// How completion of submitted work is detected ([R5]).
enum class CompletionMode {
  sequence_word,  ///< The stream writes a sequence number into pinned mapped memory; a poller spins on it.
  event_query,    ///< The poller queries an event recorded after each batch (fallback without stream memory ops).
};
/// "sequence_word", "event_query".
std::string_view to_string(CompletionMode mode) noexcept;

/// A snapshot of a device actor ([R9], [O2]).
struct DeviceStats {
  int device = -1;                              ///< Device ordinal.
  bool isolated = false;                        ///< The context lives in a worker process.
  bool memory_known = false;                    ///< False while the context is being rebuilt or is unusable.
  std::size_t free_bytes = 0;                   ///< cudaMemGetInfo free bytes.
  std::size_t total_bytes = 0;                  ///< cudaMemGetInfo total bytes.
  std::size_t queue_depth = 0;                  ///< Requests waiting in the mailbox.
  std::size_t in_flight = 0;                    ///< Operations submitted to the stream, not yet completed.
  std::uint64_t generation = 0;                 ///< DeviceState generation (1 = first context).
  CircuitState circuit = CircuitState::closed;  ///< Circuit breaker state.
  bool accepting_ops = false;                   ///< DeviceState::accepting_ops().
  CompletionMode completion = CompletionMode::sequence_word;  ///< How completions are detected.
  std::uint64_t completed = 0;                                ///< Requests answered with success.
  std::uint64_t failed = 0;                                   ///< Requests answered with an error (any code).
  std::uint64_t poisonings = 0;                               ///< Poisonings detected since start.
  std::uint64_t rejected_full = 0;                            ///< Requests answered `queue_full`.
  std::uint64_t dispatch_ns = 0;  ///< Time the actor's thread spent validating and enqueueing requests (in-process).
  std::uint64_t batches = 0;  ///< Completion markers enqueued (in-process): operations per batch = completed / batches.
  std::uint64_t worker_restarts = 0;      ///< Worker processes replaced (isolated mode).
  std::uint64_t worker_buffers = 0;       ///< Live device buffers in the worker (isolated mode).
  std::uint64_t worker_buffer_bytes = 0;  ///< Their bytes (isolated mode).
  std::uint64_t worker_graphs = 0;        ///< Graphs held by the worker (isolated mode).
  std::uint64_t worker_host_buffers = 0;  ///< Host buffers the worker has mapped and pinned (isolated mode).
  std::int64_t worker_pid = -1;           ///< Current worker process (isolated mode), -1 while none runs.
};

/// The snapshot as one JSON object (keys as the field names; circuit and completion as strings).
std::string to_json(const DeviceStats& stats);

}  // namespace cuactor::runtime

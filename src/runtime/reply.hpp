/// @file
/// Answering a request exactly once (internal): leases back, counters, reply to the handler's executor.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <system_error>

#include "cuactor/core/error.hpp"
#include "cuactor/runtime/detail/request.hpp"

namespace cuactor::runtime::detail {

/// Counters of one actor, shared by the parts that answer its requests.
struct ReplyCounters {
  std::atomic<std::uint64_t> completed{0};
  std::atomic<std::uint64_t> failed{0};
};

/// Returns the write leases `op` holds.
void release_leases(OpRecord& op) noexcept;
/// Answers `op`: returns its leases, counts it, posts the reply. Call once per request.
void finish(ReplyCounters& counters, std::shared_ptr<OpRecord> op, std::error_code ec) noexcept;
/// Answers `op` with `error`, logging its message (the reply carries only the code).
void finish_error(ReplyCounters& counters, std::shared_ptr<OpRecord> op, const Error& error) noexcept;
/// Answers `op` with `error` from the completion pool: for replies decided on a caller's thread, which may
/// be the handler's own executor thread (a reply must never run inside the initiating call).
void finish_error_later(std::shared_ptr<ReplyCounters> counters, std::shared_ptr<OpRecord> op, Error error) noexcept;

}  // namespace cuactor::runtime::detail

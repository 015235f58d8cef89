/// @file
/// cuactor's one error model ([E1], [E2]): typed codes in project-owned error categories plus a
/// message that names the offending value and the rule it broke.
#pragma once

#include <string>
#include <string_view>
#include <system_error>

#include "cuactor/core/cxx20.hpp"

namespace cuactor {

/// cuactor's own error codes. Values are stable; never decide anything by matching messages.
enum class errc : int {
  stale_handle = 1,      ///< A GpuRef/graph was used after its device or generation went away.
  device_shutting_down,  ///< The device stopped accepting work (orderly shutdown).
  context_poisoned,      ///< A sticky CUDA error poisoned the context while the op was in flight.
  circuit_open,          ///< Too many poisonings or a failed recovery: the device rejects work.
  queue_full,            ///< The device actor's bounded mailbox is full.
  unsupported,           ///< The request is valid but not supported (dtype x arch, layout, ...).
  invalid_argument,      ///< The request breaks a documented rule (alignment, shape, ...).
  capture_invalidated,   ///< An illegal call during stream capture ended the capture.
  workspace_too_small,   ///< The caller's workspace is smaller than the plan requires.
  no_device,             ///< No CUDA device is present or the requested ordinal does not exist.
  out_of_memory,         ///< An allocation failed for lack of memory.
  wrong_device,          ///< A buffer or object of one device was used on another.
  compile_failed,        ///< Run-time compilation (NVRTC/nvcc) failed.
  cache_corrupt,         ///< A cache entry failed its integrity check.
  timeout,               ///< An operation did not finish in its allotted time.
  cancelled,             ///< The operation was cancelled before it ran.
  internal,              ///< A broken invariant inside cuactor (a bug).
  worker_lost,           ///< The isolated worker process died, was killed or missed its deadline ([R10]).
  protocol_error,        ///< A malformed, truncated, oversized or wrong-version message on a worker channel.
  untrusted,             ///< A file or directory is not safe to use (owner, mode or type).
  io_error,              ///< Reading or writing a file failed (missing directory, full disk, ...).
};

/// Category of cuactor's own codes (name "cuactor").
const std::error_category& cuactor_category() noexcept;
/// Category whose values are `cudaError_t` (CUDA runtime API).
const std::error_category& cuda_runtime_category() noexcept;
/// Category whose values are `CUresult` (CUDA driver API).
const std::error_category& cuda_driver_category() noexcept;
/// Category whose values are `nvrtcResult`.
const std::error_category& nvrtc_category() noexcept;
/// Category whose values are `cublasStatus_t`.
const std::error_category& cublas_category() noexcept;

/// Makes an error code of cuactor's category (enables `std::error_code ec = errc::queue_full`).
std::error_code make_error_code(errc e) noexcept;

/// How the runtime must react to an error ([R6]).
enum class FailureClass {
  none,              ///< Not an error.
  request,           ///< Only this request fails (bad argument, unsupported, OOM, ...).
  context_poisoned,  ///< Sticky device error: the context is unusable and must be rebuilt.
};

/// Classifies an error code of any cuactor category: sticky CUDA errors (illegal address, launch
/// failure, ECC, ...) and a lost worker process poison the context; everything else fails the request
/// only.
FailureClass classify(std::error_code ec) noexcept;

/// An error code plus a human-readable message naming the value and the rule that was broken.
class Error {
 public:
  Error() = default;
  Error(std::error_code code, std::string message) : code_(code), message_(std::move(message)) {}
  Error(errc code, std::string message) : Error(make_error_code(code), std::move(message)) {}

  /// The typed code; compare this, never the message.
  [[nodiscard]] std::error_code code() const noexcept { return code_; }
  /// The message, e.g. "group 7: lda=1001 is not a multiple of 8 for bf16".
  [[nodiscard]] const std::string& message() const noexcept { return message_; }
  /// "message (category:value code-message)".
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(const Error& e, errc c) noexcept { return e.code_ == make_error_code(c); }

 private:
  std::error_code code_;
  std::string message_;
};

}  // namespace cuactor

template <>
struct std::is_error_code_enum<cuactor::errc> : std::true_type {};

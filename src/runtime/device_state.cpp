#include "cuactor/runtime/device_state.hpp"

#include <fmt/format.h>

namespace cuactor::runtime {

std::string_view to_string(StaleReason reason) noexcept {
  switch (reason) {
    case StaleReason::state_gone:
      return "state gone";
    case StaleReason::shutting_down:
      return "shutting down";
    case StaleReason::context_rebuilt:
      return "context rebuilt";
    case StaleReason::wrong_device:
      return "wrong device";
  }
  return "unknown";
}

Error stale_error(std::string_view what, StaleReason reason, std::uint64_t handle_generation,
                  std::uint64_t current_generation, int handle_device, int used_device) {
  switch (reason) {
    case StaleReason::state_gone:
      return Error(errc::stale_handle, fmt::format("{} is stale (state gone): the actor of device {} no longer exists",
                                                   what, handle_device));
    case StaleReason::shutting_down:
      return Error(
          errc::stale_handle,
          fmt::format("{} is stale (shutting down): device {} no longer accepts operations", what, handle_device));
    case StaleReason::context_rebuilt:
      return Error(errc::stale_handle,
                   fmt::format("{} is stale (context rebuilt): minted in generation {}, device {} is at generation {}",
                               what, handle_generation, handle_device, current_generation));
    case StaleReason::wrong_device:
      return Error(errc::stale_handle,
                   fmt::format("{} is stale (wrong device): it lives on device {}, used on device {}", what,
                               handle_device, used_device));
  }
  return Error(errc::stale_handle, fmt::format("{} is stale", what));
}

}  // namespace cuactor::runtime

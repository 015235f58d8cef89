/// @file
/// Per-device state shared by a device actor and every handle it minted ([R1]): the context
/// generation and whether the device accepts operations.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>

#include "cuactor/core/expected.hpp"

namespace cuactor::runtime {

/// Why a handle (GpuRef, captured graph, ...) can no longer be used ([R2]).
enum class StaleReason {
  state_gone,       ///< The DeviceState (and its actor) no longer exists.
  shutting_down,    ///< The device stopped accepting operations.
  context_rebuilt,  ///< The context was poisoned and replaced: the handle's generation is old.
  wrong_device,     ///< The handle belongs to another device than the one it was used on.
};

/// "state gone", "shutting down", "context rebuilt", "wrong device".
std::string_view to_string(StaleReason reason) noexcept;

/// A `stale_handle` Error whose message names `what` (e.g. "GpuRef<float>[1024]"), the reason and the
/// generations/devices involved.
Error stale_error(std::string_view what, StaleReason reason, std::uint64_t handle_generation,
                  std::uint64_t current_generation, int handle_device, int used_device);

/// State of one device shared (through std::shared_ptr / std::weak_ptr) by its actor and every handle
/// minted on it. The generation starts at 0, is raised by one before each incarnation of the context
/// becomes usable (so the first usable context is generation 1) and never goes back; a poisoning raises
/// it at once so that every outstanding handle becomes stale before recovery is even attempted.
/// Reads are lock-free; only the device's actor mutates it.
class DeviceState {
 public:
  /// State of device `ordinal`: generation 0, not accepting operations yet.
  explicit DeviceState(int ordinal) noexcept : ordinal_(ordinal) {}
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;

  /// The device ordinal.
  [[nodiscard]] int device_id() const noexcept { return ordinal_; }
  /// The current generation (acquire).
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_.load(std::memory_order_acquire); }
  /// True while the device accepts new operations.
  [[nodiscard]] bool accepting_ops() const noexcept { return accepting_.load(std::memory_order_acquire); }

  /// Raises the generation by one and returns the new value (the actor calls this before minting
  /// buffers of a new context incarnation, and at a poisoning).
  std::uint64_t advance_generation() noexcept { return generation_.fetch_add(1, std::memory_order_acq_rel) + 1; }
  /// Opens or closes the device for new operations.
  void set_accepting_ops(bool accepting) noexcept { accepting_.store(accepting, std::memory_order_release); }

  /// Checks, in [R2]'s order, that a handle minted at `handle_generation` may be used now on
  /// `used_device` (-1 skips the device check); nullopt when it may, else why not.
  [[nodiscard]] std::optional<StaleReason> check_handle(std::uint64_t handle_generation,
                                                        int used_device = -1) const noexcept {
    if (!accepting_ops()) return StaleReason::shutting_down;
    if (generation() != handle_generation) return StaleReason::context_rebuilt;
    if (used_device >= 0 && used_device != ordinal_) return StaleReason::wrong_device;
    return std::nullopt;
  }

 private:
  int ordinal_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> accepting_{false};
};

}  // namespace cuactor::runtime

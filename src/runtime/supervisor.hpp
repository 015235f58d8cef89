/// @file
/// Supervision of one device ([R7]-[R9]) (internal): the circuit state and the breaker as one source
/// of truth, and recovery through a RecoveryStrategy (in-process reset + canary here; a worker
/// process respawn for isolated devices).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "cuactor/core/expected.hpp"
#include "cuactor/runtime/circuit_breaker.hpp"
#include "cuactor/runtime/device_actor.hpp"

namespace cuactor::runtime::detail {

/// How a poisoned device is brought back. Runs on the supervising thread.
class RecoveryStrategy {
 public:
  virtual ~RecoveryStrategy() = default;
  /// Rebuilds the device (e.g. reset + canary); an error means it could not be, and opens the circuit.
  virtual Status recover() = 0;
};

/// Circuit state and breaker of one device. state() is read from any thread; the rest runs on the
/// supervising (actor) thread.
class Supervisor {
 public:
  Supervisor(int ordinal, const BreakerOptions& breaker, EscalationHook on_escalation)
      : ordinal_(ordinal),
        options_(breaker),
        breaker_(breaker.max_poisonings, breaker.window),
        on_escalation_(std::move(on_escalation)) {}

  /// The circuit state.
  [[nodiscard]] CircuitState state() const noexcept { return state_.load(std::memory_order_acquire); }
  /// Poisonings (or worker losses) counted since start.
  [[nodiscard]] std::uint64_t poisonings() const noexcept { return poisonings_.load(std::memory_order_relaxed); }

  /// Records a poisoning and enters `recovering`.
  void begin_recovery();
  /// Decides after a poisoning: when the breaker allows, runs `strategy` (if any); closes the circuit when
  /// it succeeds. Otherwise trips the breaker and returns why the circuit must open.
  Status recover(RecoveryStrategy* strategy);
  /// Opens the circuit for good (the breaker stays tripped) and fires the escalation hook with `cause`.
  void open(const Error& cause);

 private:
  const int ordinal_;
  const BreakerOptions options_;
  CircuitBreaker breaker_;
  EscalationHook on_escalation_;
  std::atomic<CircuitState> state_{CircuitState::closed};
  std::atomic<std::uint64_t> poisonings_{0};
};

}  // namespace cuactor::runtime::detail

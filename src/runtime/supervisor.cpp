#include "runtime/supervisor.hpp"

#include <fmt/format.h>

#include "cuactor/core/log.hpp"

namespace cuactor::runtime::detail {

void Supervisor::begin_recovery() {
  poisonings_.fetch_add(1, std::memory_order_relaxed);
  state_.store(CircuitState::recovering, std::memory_order_release);
}

Status Supervisor::recover(RecoveryStrategy* strategy) {
  if (breaker_.record(CircuitBreaker::Clock::now()))
    return fail(errc::circuit_open,
                fmt::format("device {}: more than {} poisonings within {} ms", ordinal_, options_.max_poisonings,
                            std::chrono::duration_cast<std::chrono::milliseconds>(options_.window).count()));
  if (!strategy) {
    breaker_.trip();
    return fail(errc::circuit_open, fmt::format("device {}: in-process recovery disabled", ordinal_));
  }
  if (Status st = strategy->recover(); !st) {
    breaker_.trip();  // a failed recovery opens the circuit for good
    return fail(
        Error(errc::circuit_open, fmt::format("device {}: recovery failed: {}", ordinal_, st.error().message())));
  }
  state_.store(CircuitState::closed, std::memory_order_release);
  return ok();
}

void Supervisor::open(const Error& cause) {
  breaker_.trip();
  state_.store(CircuitState::open, std::memory_order_release);
  log(LogLevel::error, fmt::format("device {}: circuit open: {}", ordinal_, cause.to_string()));
  if (on_escalation_) on_escalation_(ordinal_, Error(errc::circuit_open, cause.message()));
}

}  // namespace cuactor::runtime::detail

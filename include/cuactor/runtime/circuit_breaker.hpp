/// @file
/// Circuit breaker of a device ([R9]): counts poisonings in a sliding time window.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>

namespace cuactor::runtime {

/// Counts poisonings; more than `max_events` within `window` trips it. Once tripped it stays tripped
/// (an open circuit is explicit state that only a new actor/process clears). Not thread-safe: the
/// device actor owns it.
class CircuitBreaker {
 public:
  using Clock = std::chrono::steady_clock;

  /// A breaker that trips on the (max_events+1)-th event within `window`.
  CircuitBreaker(int max_events, Clock::duration window) noexcept : max_events_(max_events), window_(window) {}

  /// Records an event at `now`; returns true if the breaker is (now) tripped.
  bool record(Clock::time_point now) {
    events_.push_back(now);
    while (!events_.empty() && now - events_.front() > window_) events_.pop_front();
    if (static_cast<long long>(events_.size()) > max_events_) tripped_ = true;
    return tripped_;
  }
  /// Trips the breaker regardless of counts (e.g. a failed recovery).
  void trip() noexcept { tripped_ = true; }
  /// True once tripped.
  [[nodiscard]] bool tripped() const noexcept { return tripped_; }
  /// Events still inside the window as of the last record().
  [[nodiscard]] std::size_t recent_events() const noexcept { return events_.size(); }

 private:
  int max_events_;
  Clock::duration window_;
  std::deque<Clock::time_point> events_;
  bool tripped_ = false;
};

}  // namespace cuactor::runtime

// Which configuration a tuning sweep records: the winner's second timing against the heuristic's
// choice. Free of CUDA and the CLI, so the unit tests check the rule itself.
#pragma once

#include <iostream>
#include <optional>

namespace cuactor::cli {

/// The sweep's winner after a second timing. `retime(best)` times the winner's configuration again
/// (none: it failed); the winner keeps the slower of its two timings, so one lucky timing cannot crown
/// it, and the heuristic's own choice wins unless the winner is still faster. `Measured` has `ms` and
/// `anchor_ms`. On long, power-bound shapes this narrows the noise but does not remove it: on an H100
/// one kernel's timings of 8192x4096x14336 ranged 708-823 TFLOP/s within a minute, and two can both
/// be lucky.
template <class Measured, class Retime>
Measured confirm_winner(Measured best, const std::optional<Measured>& heuristic, Retime&& retime) {
  if (const std::optional<Measured> again = retime(best); !again) {
    if (heuristic) return *heuristic;  // the winner failed its second run: keep what the plans choose today
  } else if (again->ms > best.ms) {
    best.ms = again->ms;
    best.anchor_ms = again->anchor_ms;
  }
  if (heuristic && heuristic->ms <= best.ms) {
    std::cout << "  (the heuristic's choice is not slower than the winner timed twice: it is kept)\n";
    return *heuristic;
  }
  return best;
}

}  // namespace cuactor::cli

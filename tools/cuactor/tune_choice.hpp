// Which configuration a tuning sweep records: the winner's second timing against the heuristic's
// choice. Free of CUDA, the CLI and printing, so the unit tests check the rule itself.
#pragma once

#include <optional>

namespace cuactor::cli {

/// What a sweep does with its winner.
enum class SweepVerdict {
  record,      ///< The winner beat the heuristic's choice by more than kRecordMargin twice: record it.
  heuristic,   ///< The heuristic's choice is as fast, or within kRecordMargin: record nothing, drop an older entry.
  unconfirmed  ///< The winner failed its second run: record nothing, and leave the database as it is.
};

/// The verdict, and the timing that backs it (the winner's slower timing for `record`).
template <class Measured>
struct Confirmed {
  SweepVerdict verdict;
  std::optional<Measured> measured;
  bool winner_is_heuristic = false;  ///< `heuristic` because the fastest was the heuristic's own choice.
};

/// A timing's time over its own interleaved anchor's: how sweeps compare timings taken minutes apart
/// (it cancels part of the clocks' drift between them). `Measured` has `ms` and `anchor_ms`.
template <class Measured>
double relative_time(const Measured& m) {
  return m.ms / m.anchor_ms;
}

/// How much faster than the heuristic's choice a winner must stay to be recorded: 3%, both in time
/// and relative to their anchors. On an H200 (session 44), two timings of one grouped kernel in one
/// sweep differed by 4% (573 and 596 TFLOP/s); a cuBLAS anchor run 5% slow made a winner 0.9% faster
/// in time look 6.7% faster relative to it; and a winner recorded at 1.017x ran 5% slower than the
/// heuristic's choice on another shape of its class. A tuned entry decides every problem of its class,
/// so a lead within the noise of either comparison stays unrecorded.
inline constexpr double kRecordMargin = 0.03;

/// Decides on the sweep's winner `best` after timing it again. `retime(best)` times the winner's
/// configuration again (none: it failed, or disagreed with the reference); `same_config(a, b)` tells
/// whether two timings are of one configuration. The winner keeps the slower of its two timings by
/// relative_time(), so one lucky timing cannot crown it, and the heuristic's choice stays unless that
/// timing is more than kRecordMargin faster than the heuristic's both in time and relative to its
/// anchor. This narrows the noise but does not remove it: on an H100 one kernel's timings of
/// 8192x4096x14336 ranged 708-823 TFLOP/s within a minute, and two can both be lucky.
template <class Measured, class Retime, class SameConfig>
Confirmed<Measured> confirm_winner(Measured best, const std::optional<Measured>& heuristic, Retime&& retime,
                                   SameConfig&& same_config) {
  if (heuristic && same_config(best, *heuristic)) return {SweepVerdict::heuristic, heuristic, true};
  const std::optional<Measured> again = retime(best);
  if (!again) return {SweepVerdict::unconfirmed, std::nullopt};
  if (relative_time(*again) > relative_time(best)) {
    best.ms = again->ms;
    best.anchor_ms = again->anchor_ms;
  }
  const auto leads = [](double heuristic_value, double winner_value) {
    return heuristic_value > winner_value * (1.0 + kRecordMargin);
  };
  if (heuristic && !(leads(relative_time(*heuristic), relative_time(best)) && leads(heuristic->ms, best.ms)))
    return {SweepVerdict::heuristic, heuristic};
  return {SweepVerdict::record, best};
}

}  // namespace cuactor::cli

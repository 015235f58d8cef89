// Which configuration a tuning sweep records: the winner's second timing against the heuristic's
// choice. Free of CUDA, the CLI and printing, so the unit tests check the rule itself.
#pragma once

#include <optional>

namespace cuactor::cli {

/// What a sweep does with its winner.
enum class SweepVerdict {
  record,      ///< The winner beat the heuristic's choice twice: record it for the class.
  heuristic,   ///< The heuristic's choice is as fast, or within kRecordMargin: record nothing, drop an older entry.
  unconfirmed  ///< The winner failed its second run: record nothing, and leave the database as it is.
};

/// The verdict, and the timing that backs it (the winner's slower timing for `record`).
template <class Measured>
struct Confirmed {
  SweepVerdict verdict;
  std::optional<Measured> measured;
};

/// A timing's time over its own interleaved anchor's: how sweeps compare timings taken minutes apart
/// (it cancels part of the clocks' drift between them). `Measured` has `ms` and `anchor_ms`.
template <class Measured>
double relative_time(const Measured& m) {
  return m.ms / m.anchor_ms;
}

/// How much faster than the heuristic's choice a winner must stay, relative to their anchors, to be
/// recorded: 3%. On an H200, two timings of one grouped kernel in one sweep differed by up to 4%
/// (573 and 596 TFLOP/s), and a 64x256 pingpong winner recorded at 1.017x the heuristic's 128x256 ran
/// 5% slower than it on another shape of the same class (session 44): a smaller lead is noise, and a
/// tuned entry decides every problem of its class.
inline constexpr double kRecordMargin = 0.03;

/// Decides on the sweep's winner `best` after timing it again. `retime(best)` times the winner's
/// configuration again (none: it failed, or disagreed with the reference); `same_config(a, b)` tells
/// whether two timings are of one configuration. Timings compare by relative_time(); the winner keeps
/// the slower of its two, so one lucky timing cannot crown it, and the heuristic's choice stays
/// unless that timing is more than kRecordMargin faster than the heuristic's. This narrows the noise but does not
/// remove it: on an H100 one kernel's timings of 8192x4096x14336 ranged 708-823 TFLOP/s within a minute, and two can
/// both be lucky.
template <class Measured, class Retime, class SameConfig>
Confirmed<Measured> confirm_winner(Measured best, const std::optional<Measured>& heuristic, Retime&& retime,
                                   SameConfig&& same_config) {
  if (heuristic && same_config(best, *heuristic)) return {SweepVerdict::heuristic, heuristic};
  const std::optional<Measured> again = retime(best);
  if (!again) return {SweepVerdict::unconfirmed, std::nullopt};
  if (relative_time(*again) > relative_time(best)) {
    best.ms = again->ms;
    best.anchor_ms = again->anchor_ms;
  }
  if (heuristic && relative_time(*heuristic) <= relative_time(best) * (1.0 + kRecordMargin))
    return {SweepVerdict::heuristic, heuristic};
  return {SweepVerdict::record, best};
}

}  // namespace cuactor::cli

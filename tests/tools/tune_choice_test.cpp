// The rule by which `cuactor tune` records a sweep's winner (tools/cuactor/tune_choice.hpp).
#include "tune_choice.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace cuactor::cli {
namespace {

struct Timed {
  std::string config;
  double ms = 0, anchor_ms = 0;
};

/// A retime that answers `again` (for the configuration it is given) and counts its calls.
struct Retime {
  std::optional<Timed> again;
  int* calls;
  std::optional<Timed> operator()(const Timed& t) const {
    ++*calls;
    if (!again) return std::nullopt;
    Timed r = *again;
    r.config = t.config;
    return r;
  }
};

bool same_config(const Timed& a, const Timed& b) {
  return a.config == b.config;
}

Confirmed<Timed> confirm(const Timed& best, const std::optional<Timed>& heuristic, std::optional<Timed> again,
                         int* calls) {
  return confirm_winner(best, heuristic, Retime{std::move(again), calls}, same_config);
}

TEST(TuneChoice, TheWinnerKeepsTheSlowerOfItsTwoTimings) {
  int calls = 0;
  const Timed lucky{"256x128", 1.00, 1.10};
  const auto slower = confirm(lucky, std::nullopt, Timed{"", 1.12, 1.11}, &calls);
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(slower.verdict, SweepVerdict::record);
  EXPECT_EQ(slower.measured->config, "256x128");
  EXPECT_DOUBLE_EQ(slower.measured->ms, 1.12);
  EXPECT_DOUBLE_EQ(slower.measured->anchor_ms, 1.11) << "the anchor of the timing kept";
  const auto steady = confirm(lucky, std::nullopt, Timed{"", 0.95, 1.10}, &calls);
  ASSERT_EQ(steady.verdict, SweepVerdict::record);
  EXPECT_DOUBLE_EQ(steady.measured->ms, 1.00) << "a faster second timing does not improve the winner";
  EXPECT_DOUBLE_EQ(steady.measured->anchor_ms, 1.10);
}

TEST(TuneChoice, TimingsCompareAgainstTheirOwnAnchors) {
  int calls = 0;
  // The second timing is slower in ms (1.20 against 1.00) but ran while the clocks were down for its
  // anchor too (1.40 against 1.10): relative to its anchor it is the faster one, so the first stands.
  const auto drifted = confirm(Timed{"256x128", 1.00, 1.10}, std::nullopt, Timed{"", 1.20, 1.40}, &calls);
  ASSERT_EQ(drifted.verdict, SweepVerdict::record);
  EXPECT_DOUBLE_EQ(drifted.measured->ms, 1.00);
  // The heuristic, timed minutes earlier while the clocks were down (1.05 ms against an anchor of 1.20),
  // is slower in ms than the winner (1.00 against 1.10) but faster relative to its anchor: it stays.
  EXPECT_EQ(confirm(Timed{"256x128", 1.00, 1.10}, Timed{"128x256", 1.05, 1.20}, Timed{"", 1.00, 1.10}, &calls).verdict,
            SweepVerdict::heuristic);
  EXPECT_EQ(confirm(Timed{"256x128", 1.00, 1.10}, Timed{"128x256", 1.05, 1.10}, Timed{"", 1.00, 1.10}, &calls).verdict,
            SweepVerdict::record);
}

TEST(TuneChoice, TheHeuristicIsKeptUnlessTheWinnerStaysFaster) {
  int calls = 0;
  const std::optional<Timed> heuristic = Timed{"128x256", 1.05, 1.1};
  // A lucky first timing (1.00) that the second (1.12) does not repeat: the heuristic stays.
  const auto lucky = confirm(Timed{"256x128", 1.00, 1.1}, heuristic, Timed{"", 1.12, 1.1}, &calls);
  EXPECT_EQ(lucky.verdict, SweepVerdict::heuristic);
  EXPECT_EQ(lucky.measured->config, "128x256");
  // Faster both times by more than the margin: the winner.
  const auto faster = confirm(Timed{"256x128", 1.00, 1.1}, heuristic, Timed{"", 1.01, 1.1}, &calls);
  EXPECT_EQ(faster.verdict, SweepVerdict::record);
  EXPECT_EQ(faster.measured->config, "256x128");
  // A tie goes to the heuristic.
  EXPECT_EQ(confirm(Timed{"256x128", 1.00, 1.1}, heuristic, Timed{"", 1.05, 1.1}, &calls).verdict,
            SweepVerdict::heuristic);
  // A winner that is the heuristic's own configuration is not timed again, and is not recorded.
  calls = 0;
  const auto itself = confirm(Timed{"128x256", 0.90, 1.1}, heuristic, Timed{"", 0.90, 1.1}, &calls);
  EXPECT_EQ(itself.verdict, SweepVerdict::heuristic);
  EXPECT_TRUE(itself.winner_is_heuristic) << "the sweep says so, not that a winner fell short";
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(lucky.winner_is_heuristic);
}

// A lead within kRecordMargin, in time or relative to the anchors, is noise (two timings of one kernel
// differ by as much): the heuristic stays. Past the margin in both, the winner is recorded.
TEST(TuneChoice, AWinnerMustLeadByMoreThanTheMargin) {
  int calls = 0;
  const Timed heuristic{"128x256", 1.0, 1.0};
  const double within = 1.0 / (1.0 + kRecordMargin) + 1e-6, past = 1.0 / (1.0 + kRecordMargin) - 1e-3;
  const auto near = confirm(Timed{"64x256", within, 1.0}, heuristic, Timed{"", within, 1.0}, &calls);
  EXPECT_EQ(near.verdict, SweepVerdict::heuristic);
  EXPECT_EQ(near.measured->config, "128x256");
  // 1.017x, the lead session 44 recorded on an H200 and that did not hold on another shape of its class.
  EXPECT_EQ(confirm(Timed{"64x256", 1.0 / 1.017, 1.0}, heuristic, Timed{"", 1.0 / 1.017, 1.0}, &calls).verdict,
            SweepVerdict::heuristic);
  const auto clear = confirm(Timed{"64x256", past, 1.0}, heuristic, Timed{"", past, 1.0}, &calls);
  EXPECT_EQ(clear.verdict, SweepVerdict::record);
  EXPECT_EQ(clear.measured->config, "64x256");
  // 6.7% faster relative to its anchor but 0.9% in time (an anchor run 5% slow, session 44): noise.
  EXPECT_EQ(confirm(Timed{"64x256", 1.0 / 1.009, 1.0 / 1.009 * 1.067}, heuristic,
                    Timed{"", 1.0 / 1.009, 1.0 / 1.009 * 1.067}, &calls)
                .verdict,
            SweepVerdict::heuristic);
  // And the other way round: 5% faster in time but not relative to its anchor (the clocks rose between).
  EXPECT_EQ(confirm(Timed{"64x256", 0.95, 0.95}, heuristic, Timed{"", 0.95, 0.95}, &calls).verdict,
            SweepVerdict::heuristic);
  // Without a heuristic to compare with (it failed), a confirmed winner is recorded at any lead.
  EXPECT_EQ(confirm(Timed{"64x256", within, 1.0}, std::nullopt, Timed{"", within, 1.0}, &calls).verdict,
            SweepVerdict::record);
}

TEST(TuneChoice, AWinnerThatFailsItsSecondRunIsNeverRecorded) {
  int calls = 0;
  // Its second run may have disagreed with the reference: nothing is recorded, with or without a
  // heuristic to compare with, and the database is left as it is (not reset to the heuristic).
  for (const std::optional<Timed>& heuristic :
       {std::optional<Timed>{Timed{"128x256", 1.05, 1.1}}, std::optional<Timed>{}}) {
    const auto failed = confirm(Timed{"256x128", 1.00, 1.1}, heuristic, std::nullopt, &calls);
    EXPECT_EQ(failed.verdict, SweepVerdict::unconfirmed);
    EXPECT_FALSE(failed.measured.has_value());
  }
}

}  // namespace
}  // namespace cuactor::cli

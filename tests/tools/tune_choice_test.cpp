// The rule by which `cuactor tune` records a sweep's winner (tools/cuactor/tune_choice.hpp).
#include "cuactor/tune_choice.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace cuactor::cli {
namespace {

struct Timed {
  std::string config;
  double ms = 0, anchor_ms = 0;
};

/// A retime that answers `again` and counts its calls.
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

TEST(TuneChoice, TheWinnerKeepsTheSlowerOfItsTwoTimings) {
  int calls = 0;
  const Timed lucky{"256x128", 1.00, 1.10};
  const Timed w = confirm_winner(lucky, std::optional<Timed>{}, Retime{Timed{"", 1.12, 1.11}, &calls});
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(w.config, "256x128");
  EXPECT_DOUBLE_EQ(w.ms, 1.12);
  EXPECT_DOUBLE_EQ(w.anchor_ms, 1.11) << "the anchor of the timing kept";
  const Timed steady = confirm_winner(lucky, std::optional<Timed>{}, Retime{Timed{"", 0.95, 1.0}, &calls});
  EXPECT_DOUBLE_EQ(steady.ms, 1.00) << "a faster second timing does not improve the winner";
  EXPECT_DOUBLE_EQ(steady.anchor_ms, 1.10);
}

TEST(TuneChoice, TheHeuristicIsKeptUnlessTheWinnerStaysFaster) {
  int calls = 0;
  const std::optional<Timed> heuristic = Timed{"128x256", 1.05, 1.1};
  // A lucky first timing (1.00) that the second (1.12) does not repeat: the heuristic stays.
  EXPECT_EQ(confirm_winner(Timed{"256x128", 1.00, 1.1}, heuristic, Retime{Timed{"", 1.12, 1.1}, &calls}).config,
            "128x256");
  // Faster both times: the winner.
  EXPECT_EQ(confirm_winner(Timed{"256x128", 1.00, 1.1}, heuristic, Retime{Timed{"", 1.01, 1.1}, &calls}).config,
            "256x128");
  // A tie goes to the heuristic.
  EXPECT_EQ(confirm_winner(Timed{"256x128", 1.00, 1.1}, heuristic, Retime{Timed{"", 1.05, 1.1}, &calls}).config,
            "128x256");
}

TEST(TuneChoice, AWinnerThatFailsItsSecondRunLosesToTheHeuristic) {
  int calls = 0;
  const std::optional<Timed> heuristic = Timed{"128x256", 1.05, 1.1};
  EXPECT_EQ(confirm_winner(Timed{"256x128", 1.00, 1.1}, heuristic, Retime{std::nullopt, &calls}).config, "128x256");
  // With no heuristic to fall back on (no catalog kernel for the problem), the one timing stands.
  const Timed alone = confirm_winner(Timed{"256x128", 1.00, 1.1}, std::optional<Timed>{}, Retime{std::nullopt, &calls});
  EXPECT_EQ(alone.config, "256x128");
  EXPECT_DOUBLE_EQ(alone.ms, 1.00);
}

}  // namespace
}  // namespace cuactor::cli

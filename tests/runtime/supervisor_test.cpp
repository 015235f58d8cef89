// Supervisor ([R7]-[R9]): circuit state and breaker as one source of truth; a failed recovery trips
// the breaker so the device is never retried behind an open circuit.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/supervisor.hpp"

namespace cuactor::runtime::detail {
namespace {

class ScriptedRecovery final : public RecoveryStrategy {
 public:
  explicit ScriptedRecovery(std::vector<bool> outcomes) : outcomes_(std::move(outcomes)) {}
  Status recover() override {
    bool success = calls < static_cast<int>(outcomes_.size()) && outcomes_[static_cast<std::size_t>(calls)];
    ++calls;
    if (success) return ok();
    return fail(errc::context_poisoned, "canary failed");
  }
  int calls = 0;

 private:
  std::vector<bool> outcomes_;
};

BreakerOptions three_per_minute() { return {.max_poisonings = 3, .window = std::chrono::seconds(60)}; }

TEST(RuntimeSupervisor, SuccessfulRecoveryClosesTheCircuitAndCounts) {
  Supervisor sup(0, three_per_minute(), nullptr);
  ScriptedRecovery strategy({true, true});
  EXPECT_EQ(sup.state(), CircuitState::closed);
  sup.begin_recovery();
  EXPECT_EQ(sup.state(), CircuitState::recovering);
  ASSERT_TRUE(sup.recover(&strategy));
  EXPECT_EQ(sup.state(), CircuitState::closed);
  EXPECT_EQ(sup.poisonings(), 1u);
  EXPECT_EQ(strategy.calls, 1);
}

TEST(RuntimeSupervisor, FailedRecoveryTripsTheBreakerForGood) {
  Supervisor sup(3, three_per_minute(), nullptr);
  ScriptedRecovery strategy({false, true});
  sup.begin_recovery();
  Status first = sup.recover(&strategy);
  ASSERT_FALSE(first);
  EXPECT_EQ(first.error().code(), errc::circuit_open);
  EXPECT_NE(first.error().message().find("recovery failed"), std::string::npos) << first.error().message();
  EXPECT_NE(first.error().message().find("device 3"), std::string::npos);
  // The breaker stays tripped: a later poisoning does not try the strategy again.
  sup.begin_recovery();
  Status second = sup.recover(&strategy);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code(), errc::circuit_open);
  EXPECT_EQ(strategy.calls, 1);
}

TEST(RuntimeSupervisor, TooManyPoisoningsInTheWindowOpenWithoutRecovering) {
  Supervisor sup(0, {.max_poisonings = 2, .window = std::chrono::seconds(60)}, nullptr);
  ScriptedRecovery strategy({true, true, true, true});
  for (int i = 0; i < 2; ++i) {
    sup.begin_recovery();
    ASSERT_TRUE(sup.recover(&strategy));
  }
  sup.begin_recovery();
  Status third = sup.recover(&strategy);
  ASSERT_FALSE(third);
  EXPECT_EQ(third.error().code(), errc::circuit_open);
  EXPECT_EQ(strategy.calls, 2);
  EXPECT_EQ(sup.poisonings(), 3u);
}

TEST(RuntimeSupervisor, NoStrategyMeansTheCircuitOpens) {
  Supervisor sup(1, three_per_minute(), nullptr);
  sup.begin_recovery();
  Status st = sup.recover(nullptr);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code(), errc::circuit_open);
}

TEST(RuntimeSupervisor, OpenFiresTheEscalationHookWithTheCause) {
  std::vector<std::pair<int, Error>> fired;
  Supervisor sup(2, three_per_minute(), [&](int device, const Error& cause) { fired.emplace_back(device, cause); });
  sup.open(Error(errc::context_poisoned, "illegal address"));
  EXPECT_EQ(sup.state(), CircuitState::open);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].first, 2);
  EXPECT_EQ(fired[0].second.code(), errc::circuit_open);
  EXPECT_NE(fired[0].second.message().find("illegal address"), std::string::npos);
  // Once open, recovery is refused.
  ScriptedRecovery strategy({true});
  EXPECT_FALSE(sup.recover(&strategy));
  EXPECT_EQ(strategy.calls, 0);
}

}  // namespace
}  // namespace cuactor::runtime::detail

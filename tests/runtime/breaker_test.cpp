// Circuit breaker ([R9]) with an injected clock.
#include <gtest/gtest.h>

#include "cuactor/runtime/circuit_breaker.hpp"

namespace cuactor::runtime {
namespace {

using namespace std::chrono_literals;

TEST(RuntimeBreaker, OpensAfterMoreThanNWithinWindow) {
  CircuitBreaker b(3, 60s);
  const auto t0 = CircuitBreaker::Clock::time_point{} + 1000s;
  EXPECT_FALSE(b.record(t0));
  EXPECT_FALSE(b.record(t0 + 1s));
  EXPECT_FALSE(b.record(t0 + 2s));
  EXPECT_TRUE(b.record(t0 + 3s));  // the 4th within 60 s
  EXPECT_TRUE(b.tripped());
}

TEST(RuntimeBreaker, OldEventsLeaveTheWindow) {
  CircuitBreaker b(2, 10s);
  const auto t0 = CircuitBreaker::Clock::time_point{} + 1000s;
  EXPECT_FALSE(b.record(t0));
  EXPECT_FALSE(b.record(t0 + 5s));
  EXPECT_FALSE(b.record(t0 + 16s));  // t0 and t0+5 s are out of the window
  EXPECT_EQ(b.recent_events(), 1u);
  EXPECT_FALSE(b.record(t0 + 17s));
  EXPECT_TRUE(b.record(t0 + 18s));
}

TEST(RuntimeBreaker, StaysOpenOnceTripped) {
  CircuitBreaker b(0, 1s);
  const auto t0 = CircuitBreaker::Clock::time_point{} + 1000s;
  EXPECT_TRUE(b.record(t0));  // max 0: the first poisoning opens it
  EXPECT_TRUE(b.record(t0 + 100s));
  CircuitBreaker manual(5, 1s);
  manual.trip();
  EXPECT_TRUE(manual.tripped());
}

}  // namespace
}  // namespace cuactor::runtime

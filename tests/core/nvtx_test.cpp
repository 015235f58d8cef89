// NVTX helper: names are formatted only when a profiler is attached, and every form is usable
// without one (these tests run outside nsys/ncu).
#include "cuactor/core/nvtx.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <utility>

namespace cuactor::nvtx {
namespace {

TEST(Nvtx, KindAndIdFormatsWithoutAllocating) {
  char buf[96];
  EXPECT_STREQ(detail::kind_and_id(buf, "fill", 42), "fill #42");
  EXPECT_STREQ(detail::kind_and_id(buf, "x", UINT64_MAX), "x #18446744073709551615");
  const std::string long_kind(200, 'k');  // truncated, never overflowing
  const std::string got = detail::kind_and_id(buf, long_kind.c_str(), UINT64_MAX);
  EXPECT_LT(got.size(), sizeof(buf));
  EXPECT_EQ(got.substr(got.size() - 22), " #18446744073709551615");
}

TEST(Nvtx, LazyNameIsBuiltOnlyWithAProfiler) {
  int built = 0;
  {
    const Range r([&] {
      ++built;
      return std::string("dynamic");
    });
  }
  EXPECT_EQ(built, enabled() ? 1 : 0);
}

TEST(Nvtx, RangesAndSpansNestAndCrossThreads) {
  {
    const Range outer("outer");
    const Range inner("inner", 7);
  }
  Span s = Span::start("request", 1);
  Span moved = std::move(s);
  std::thread t([span = std::move(moved)]() mutable { span.end(); });  // ends on another thread
  t.join();
  Span never;  // inactive: ends nothing
  never.end();
  SUCCEED();
}

}  // namespace
}  // namespace cuactor::nvtx

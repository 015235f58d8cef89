#include "cuactor/core/log.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cuactor {
namespace {

TEST(Log, SinkReceivesMessagesAtOrAboveLevel) {
  std::vector<std::pair<LogLevel, std::string>> got;
  set_log_sink([&](LogLevel l, std::string_view m) { got.emplace_back(l, std::string(m)); }, LogLevel::info);
  log(LogLevel::debug, "hidden");
  log(LogLevel::info, "shown");
  log(LogLevel::error, "also shown");
  EXPECT_FALSE(log_enabled(LogLevel::trace));
  EXPECT_TRUE(log_enabled(LogLevel::warn));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].second, "shown");
  EXPECT_EQ(got[1].first, LogLevel::error);
  set_log_sink({}, LogLevel::error);  // silence: an empty sink must be safe
  log(LogLevel::error, "dropped");
  EXPECT_EQ(got.size(), 2u);
}

}  // namespace
}  // namespace cuactor

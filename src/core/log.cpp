#include "cuactor/core/log.hpp"

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>

namespace cuactor {
namespace {

constexpr std::string_view level_name(LogLevel l) {
  switch (l) {
    case LogLevel::trace:
      return "trace";
    case LogLevel::debug:
      return "debug";
    case LogLevel::info:
      return "info";
    case LogLevel::warn:
      return "warn";
    case LogLevel::error:
      return "error";
  }
  return "?";
}

struct SinkState {
  std::mutex mu;
  std::shared_ptr<const LogSink> sink = std::make_shared<const LogSink>([](LogLevel l, std::string_view m) {
    std::fprintf(stderr, "cuactor [%.*s] %.*s\n", static_cast<int>(level_name(l).size()), level_name(l).data(),
                 static_cast<int>(m.size()), m.data());
  });
  std::atomic<int> min_level{static_cast<int>(LogLevel::warn)};
};

SinkState& state() {
  static SinkState s;
  return s;
}

}  // namespace

void set_log_sink(LogSink sink, LogLevel min_level) {
  auto& s = state();
  std::lock_guard lk(s.mu);
  s.sink = std::make_shared<const LogSink>(std::move(sink));
  s.min_level = static_cast<int>(min_level);
}

bool log_enabled(LogLevel level) noexcept {
  return static_cast<int>(level) >= state().min_level.load();
}

void log(LogLevel level, std::string_view message) {
  if (!log_enabled(level)) return;
  std::shared_ptr<const LogSink> sink;
  {
    std::lock_guard lk(state().mu);
    sink = state().sink;
  }
  if (sink && *sink) (*sink)(level, message);
}

}  // namespace cuactor

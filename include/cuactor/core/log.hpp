/// @file
/// Logging sink: cuactor never links a logging library into its public headers; the host
/// application installs a callback and routes messages wherever it wants.
#pragma once

#include <functional>
#include <string_view>

#include "cuactor/core/cxx20.hpp"

namespace cuactor {

/// Severity of a log message.
enum class LogLevel { trace, debug, info, warn, error };

/// Callback receiving every message at or above the configured level. It may be called from any
/// cuactor thread (device actors, compile workers) and must be thread-safe.
using LogSink = std::function<void(LogLevel, std::string_view)>;

/// Installs `sink` (an empty function silences cuactor) and the minimum level passed to it.
/// Default: messages at warn and above go to stderr.
void set_log_sink(LogSink sink, LogLevel min_level = LogLevel::info);

/// Sends a message to the installed sink if `level` passes the threshold.
void log(LogLevel level, std::string_view message);

/// True if a message at `level` would reach the sink (to skip formatting work).
bool log_enabled(LogLevel level) noexcept;

}  // namespace cuactor

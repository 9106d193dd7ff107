#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>

namespace strata {

// Minimal leveled logging to stderr: "[strata HH:MM:SS.mmm I] message".
// Thread-safe: each line is written with one fwrite under a mutex.
enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below `level` are dropped. Default kInfo. Thread-safe.
void SetLogLevel(LogLevel level);
// run.log_level's names: "debug", "info", "warning", "error" (anything else
// is info; the config schema admits only these four).
LogLevel LogLevelNamed(const std::string& name);
LogLevel GetLogLevel();
void LogLine(LogLevel level, const std::string& message);

template <typename... A>
void LogDebug(fmt::format_string<A...> f, A&&... a) {
  if (GetLogLevel() <= LogLevel::kDebug)
    LogLine(LogLevel::kDebug, fmt::format(f, std::forward<A>(a)...));
}
template <typename... A>
void LogInfo(fmt::format_string<A...> f, A&&... a) {
  if (GetLogLevel() <= LogLevel::kInfo)
    LogLine(LogLevel::kInfo, fmt::format(f, std::forward<A>(a)...));
}
template <typename... A>
void LogWarning(fmt::format_string<A...> f, A&&... a) {
  LogLine(LogLevel::kWarning, fmt::format(f, std::forward<A>(a)...));
}
template <typename... A>
void LogError(fmt::format_string<A...> f, A&&... a) {
  LogLine(LogLevel::kError, fmt::format(f, std::forward<A>(a)...));
}

}  // namespace strata

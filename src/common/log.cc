#include "common/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "common/mutex.h"

namespace strata {
namespace {
// The level is the one piece of process-wide state: it only filters output.
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
// Whole lines: one fwrite each, never interleaved.
Mutex g_write_mu;
}  // namespace

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }

LogLevel LogLevelNamed(const std::string& name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "warning") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

void LogLine(LogLevel level, const std::string& message) {
  if (static_cast<int>(level) < g_level.load()) return;
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t t = system_clock::to_time_t(now);
  int ms = static_cast<int>(
      duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  static const char kTag[] = {'D', 'I', 'W', 'E'};
  std::string line = fmt::format("[strata {:02}:{:02}:{:02}.{:03} {}] {}\n",
                                 tm.tm_hour, tm.tm_min, tm.tm_sec, ms,
                                 kTag[static_cast<int>(level)], message);
  MutexLock lock(&g_write_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace strata

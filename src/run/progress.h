#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace strata {

// Progress output for long work. On a terminal: one live line rewritten in
// place (steps/s, loss, accuracy, ETA) at most 4 times a second. Otherwise:
// a plain log line every `log_interval` seconds. Not thread-safe.
class Progress {
 public:
  Progress(std::string what, int64_t total, bool terminal,
           double log_interval_s = 10.0);
  // Reports that `done` of `total` units are finished.
  void Update(int64_t done, double loss, double accuracy);
  // Ends the live line (so later output starts on a fresh line).
  void Finish();
  static bool StderrIsTerminal();

 private:
  std::string Line(int64_t done, double loss, double accuracy) const;

  const std::string what_;
  const int64_t total_;
  const bool terminal_;
  const double log_interval_s_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_print_;
  bool live_line_open_ = false;
};

}  // namespace strata

#pragma once

#include <chrono>

namespace strata {

// A steady-clock span as seconds, for timings, logs and reports.
inline double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The seconds from `a` to `b`.
inline double Seconds(std::chrono::steady_clock::time_point a,
                      std::chrono::steady_clock::time_point b) {
  return Seconds(b - a);
}

}  // namespace strata

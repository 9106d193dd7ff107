#pragma once

// Tests that count the process's threads (OpenMP teams, transports'
// threads) read them through these.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

namespace strata::testing_util {

// The process's threads, from /proc/self/task.
inline int ProcessThreads() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)e;
    ++n;
  }
  return n;
}

// The process's threads by name ("strata(3) pt_autograd_0 ..."), for a
// failure message to say which thread was more or less.
inline std::string ProcessThreadNames() {
  std::map<std::string, int> names;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(e.path() / "comm");
    std::string name;
    std::getline(comm, name);
    ++names[name];
  }
  std::string out;
  for (const auto& [name, n] : names) {
    if (!out.empty()) out += ' ';
    out += n > 1 ? name + "(" + std::to_string(n) + ")" : name;
  }
  return out;
}

// The process's threads once they settle at `expected`, or after 2 s: a
// thread's OpenMP team ends a moment after the thread that owned it.
inline int ProcessThreadsSettlingAt(int expected) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int n = ProcessThreads();
  while (n != expected && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    n = ProcessThreads();
  }
  return n;
}

}  // namespace strata::testing_util

#pragma once

// Tests that run a tool (Chromium, promtool, Debian's python3) read what it
// printed and its exit status through these.
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace strata::testing_util {

// Runs `cmd` through the shell; its stdout, the exit status in *status (-1
// when it could not be started).
inline std::string RunShell(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *status = -1;
    return out;
  }
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *status = ::pclose(p);
  return out;
}

// Runs `cmd` with `input` on its stdin; its stdout and stderr, the exit
// status in *status.
inline std::string RunShellWithInput(const std::string& cmd,
                                     const std::string& input, int* status) {
  char path[] = "/tmp/strata_shell_input_XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) {
    *status = -1;
    return "";
  }
  ::close(fd);
  std::ofstream(path) << input;
  std::string out = RunShell(cmd + " < " + path + " 2>&1", status);
  std::remove(path);
  return out;
}

}  // namespace strata::testing_util

#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace strata {

// Small filesystem helpers. All are thread-safe (no shared state).

// Whole file into memory. NotFound if missing, IoError on read failure.
Result<std::string> ReadFile(const std::string& path);
// Writes `content` to `path` via a temporary file and rename, so a reader
// never sees half a file and a crash never loses the previous content.
Status WriteFileAtomic(const std::string& path, const std::string& content);
// Appends one line (a '\n' is added) and flushes. IoError on failure.
Status AppendLine(const std::string& path, const std::string& line);
// mkdir -p. IoError names the directory that could not be made.
Status MakeDirs(const std::string& path);
bool FileExists(const std::string& path);
std::string JoinPath(const std::string& a, const std::string& b);

}  // namespace strata

#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/config.h"
#include "common/status.h"

namespace strata {

// A run's output directory: config.toml (resolved), metrics.jsonl,
// eval.jsonl, summary.json. JSON lines are appended and flushed one by one,
// so an interrupted run keeps everything written so far. Thread-compatible.
class RunDirectory {
 public:
  // Creates <run.dir>/<run.name> (a default name is <model>-<dataset>-
  // <YYYYmmdd-HHMMSS>; a taken name gets a -2, -3... suffix) and writes the
  // resolved config into it. IoError if it cannot.
  static Result<RunDirectory> Create(const Config& config);

  // An existing run directory (made by Create, e.g. by the launcher of a
  // multi-process run), created if missing; nothing is written.
  static Result<RunDirectory> Open(const std::string& path);

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const;
  // Appends one JSON object as a line to `file` (e.g. "metrics.jsonl").
  Status AppendJson(const std::string& file, const nlohmann::json& j) const;
  // Writes a whole JSON file atomically.
  Status WriteJson(const std::string& file, const nlohmann::json& j) const;

 private:
  std::string path_;
};

}  // namespace strata

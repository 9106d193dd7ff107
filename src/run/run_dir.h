#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "common/config.h"
#include "common/mutex.h"
#include "common/status.h"
#include "run/checkpoint.h"

namespace strata {

class TensorBoardWriter;

// A run's output directory: config.toml (resolved), metrics.jsonl,
// eval.jsonl, summary.json. JSON lines are appended and flushed one by one,
// so an interrupted run keeps everything written so far. With
// metrics.tensorboard (the default) every metrics.jsonl and eval.jsonl line
// is also written as scalars to a TensorBoard event file in <run>/tb/, one
// file per writer (the local trainer, each worker, the evaluator);
// docs/design/metrics.md lists the tags. AppendJson is thread-safe.
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
  // Turns the TensorBoard mirror on or off (Create follows
  // metrics.tensorboard; Open leaves it off until told).
  void SetTensorBoard(bool on);

  // A checkpoint the run's coordinator wrote in this process for the run's
  // next life (a scale), kept in memory: the next life resumes from it
  // without reading it back, as long as it is still the newest on disk
  // (docs/design/elastic.md). One at a time; taking it forgets it.
  // Thread-safe; copies of this RunDirectory share it.
  void KeepCheckpoint(std::shared_ptr<const Checkpoint> c) const;
  std::shared_ptr<const Checkpoint> TakeKeptCheckpoint() const;

 private:
  // The scalars of one metrics / eval line, to the writer the line names.
  void Mirror(const std::string& file, const nlohmann::json& j) const;

  struct Board {
    Mutex mu;
    std::atomic<bool> on{false};
    bool failed GUARDED_BY(mu) = false;  // warned once, then off
    std::map<std::string, std::unique_ptr<TensorBoardWriter>> writers
        GUARDED_BY(mu);
    // Last (samples, wall_s) per writer, for samples/s between lines.
    std::map<std::string, std::pair<double, double>> last GUARDED_BY(mu);
    Board();
    ~Board();
  };
  std::string path_;
  std::shared_ptr<Board> board_ = std::make_shared<Board>();
  struct Kept {
    Mutex mu;
    std::shared_ptr<const Checkpoint> checkpoint GUARDED_BY(mu);
  };
  std::shared_ptr<Kept> kept_ = std::make_shared<Kept>();
};

}  // namespace strata

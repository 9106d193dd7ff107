#pragma once

// TensorBoard event files (docs/design/metrics.md): TFRecord framing (length,
// masked CRC-32C of the length, data, masked CRC-32C of the data) around
// Event protocol buffers (tensorboard_event.proto). One writer per file;
// every event is written with one write() and is on disk when Scalars()
// returns, so nothing written is lost when a run stops.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace strata {

class TensorBoardWriter {
 public:
  // Creates `dir` and a new event file in it,
  // events.out.tfevents.<unix time>.<host>.<pid>.<name>, starting with the
  // file-version event TensorBoard expects. IoError naming the path.
  static Result<std::unique_ptr<TensorBoardWriter>> Open(
      const std::string& dir, const std::string& name);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event at `step` holding a scalar per (tag, value). Thread-safe.
  Status Scalars(int64_t step,
                 const std::vector<std::pair<std::string, double>>& values)
      EXCLUDES(mu_);
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(int fd, std::string path)
      : fd_(fd), path_(std::move(path)) {}
  // One record, with one write(): records never interleave.
  Status WriteRecord(const std::string& data) REQUIRES(mu_);

  Mutex mu_;
  int fd_ GUARDED_BY(mu_);
  const std::string path_;
};

// The records of a TFRecord file, every length and data CRC checked.
// DataLoss naming the byte offset of the first bad record (a truncated
// last record included).
Result<std::vector<std::string>> ReadTfRecords(const std::string& path);

// One scalar as read back from an event file.
struct ScalarEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string tag;
  float value = 0;
};
// Every scalar of an event file (ReadTfRecords, then the Event messages).
// The file-version event is checked to be first.
Result<std::vector<ScalarEvent>> ReadScalarEvents(const std::string& path);

}  // namespace strata

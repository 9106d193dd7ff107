#pragma once

// Checkpoints (docs/design/checkpoints.md). One checkpoint is a directory
// <run>/checkpoints/step-<N>/ with the files a role needs to go on (its
// parameters as safetensors, optimizer state, cursors as JSON, the run's
// config) and manifest.json: format, step, and each file's size and MD5.
// It is written under a temporary name, every file and the directory
// fsynced, then renamed into place, so a crash while writing leaves the
// previous checkpoints as they were; the manifest is written last, and a
// directory without one is never loaded. No LibTorch here.

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/config.h"
#include "common/status.h"

namespace strata {

inline constexpr const char* kCheckpointDir = "checkpoints";

struct Checkpoint {
  std::string dir;  // the checkpoint's directory
  int64_t step = 0;
  std::map<std::string, std::string> files;  // name -> bytes (checked)
  // Kept by the process that wrote it (RunDirectory::KeepCheckpoint), not
  // read back from disk.
  bool kept_in_memory = false;

  // The bytes of file `name`; DataLoss naming the checkpoint when it has no
  // such file.
  Result<const std::string*> File(const std::string& name) const;
};

// Writes `files` (names without '/') as the checkpoint of `step` under
// <run_dir>/checkpoints/, then deletes all but the newest `keep` (>= 1).
// Returns the checkpoint's directory. IoError naming what failed; the
// previous checkpoints are untouched then. `crash_after_files` (tests):
// stop, as a crash would, after writing that many files.
Result<std::string> WriteCheckpoint(
    const std::string& run_dir, int64_t step,
    const std::map<std::string, std::string>& files, int keep,
    int crash_after_files = -1);

// The newest complete checkpoint of `run_dir` (the highest step with a
// manifest), every file read and checked against the manifest. NotFound
// when there is none; DataLoss naming the file whose size or checksum is
// wrong (a damaged checkpoint is refused, never half-loaded).
Result<Checkpoint> LoadNewestCheckpoint(const std::string& run_dir);
// The step of the newest complete checkpoint of `run_dir` (a manifest
// written), without reading it; -1 when there is none.
int64_t NewestCheckpointStep(const std::string& run_dir);
// What a resume loads: the newest checkpoint that is intact. A damaged or
// unreadable newer one is skipped with a warning that names it and what is
// wrong (older ones are kept by checkpoint.keep for this). NotFound when
// there is none; when every one is damaged, the newest one's error, saying
// how many were tried.
Result<Checkpoint> LoadNewestIntactCheckpoint(const std::string& run_dir);
// The checkpoint of `step` (NotFound listing the steps there are), checked
// as LoadNewestCheckpoint checks it.
Result<Checkpoint> LoadCheckpoint(const std::string& run_dir, int64_t step);

// The config keys whose values differ between `saved` (a checkpoint's
// config.toml) and `now`, ignoring keys that may change on resume (run.*
// except run.seed, checkpoint.*, metrics.*, train.log_every, train.threads,
// cluster.threads_per_worker, cluster timeouts and addresses).
// FailedPrecondition listing them ("model.name: \"lenet\" in the checkpoint,
// \"mlp\" now"), or OK. `workers_may_change`: a cluster checkpoint, which
// resumes on another cluster.workers (coordinator/resize_restore.h).
Status CheckResumeConfig(const std::string& saved_toml, const Config& now,
                         bool workers_may_change = false);

}  // namespace strata

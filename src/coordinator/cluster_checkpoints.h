#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "common/config.h"
#include "coordinator/coordinator.h"
#include "run/checkpoint.h"
#include "run/options.h"
#include "run/run_dir.h"
#include "run/summary.h"

namespace strata {

// The coordinator's side of cluster checkpoints (docs/design/
// checkpoints.md): writes a round's checkpoint (every worker's state from
// its arrival, or its last one for a worker that finished, and every
// server's and data server's state, asked for now) and hands each node its
// state when the run resumes. Used on the coordinator's checkpoint thread
// (Write) and receive thread (Restore), never at once on the same data:
// Write runs only after every node restored. `config`, `o` and `run_dir`
// outlive it.
class ClusterCheckpoints {
 public:
  ClusterCheckpoints(const Config& config, const ClusterRunOptions& o,
                     const RunDirectory& run_dir)
      : config_(config), o_(o), run_dir_(run_dir) {}

  // Loads the newest checkpoint to resume from (checkpoint.resume) and
  // checks that it is a checkpoint of this cluster with this config; says
  // so with `announce`. `loaded`: that checkpoint, already read
  // (CheckResumable); it is checked again here, not read again. The errors
  // of LoadNewestCheckpoint and CheckResumeConfig; FailedPrecondition for
  // a local run's checkpoint.
  Status Load(bool announce = true,
              std::shared_ptr<const Checkpoint> loaded = nullptr);
  bool resuming() const { return resume_ != nullptr; }
  const std::shared_ptr<const Checkpoint>& loaded() const { return resume_; }
  const std::string& dir() const { return resume_->dir; }
  int64_t step() const { return resume_ ? resume_->step : 0; }
  // A resume on another number of workers (from_workers 0: none).
  const ClusterSummary::Resize& resize() const { return resize_; }
  // Training seconds before the resumed checkpoint.
  double prior_train_s() const {
    return meta_.is_object() ? meta_.value("train_s", 0.0) : 0.0;
  }

  // The reply to node `id`'s kRestoreRequest (no payloads: nothing to
  // restore, which the node decides how to take).
  Message Restore(NodeId id) const;

  // Writes the checkpoint of a round; `train_s` is the training time so
  // far. FailedPrecondition when a worker was lost or has no state;
  // DataLoss for a malformed state; a server's or data server's request
  // error; WriteCheckpoint's IoError. Nothing is written then.
  Status Write(Coordinator& coordinator, std::map<NodeId, Message>& arrivals,
               double train_s);
  int64_t written() const { return written_.load(); }
  // From now on each checkpoint written stays in memory (the newest
  // replacing the one before) for the run's next life, a scale's
  // (RunDirectory::KeepCheckpoint): a round in flight may still write one
  // before the scale's own.
  void KeepForNextLife() { keep_for_next_life_ = true; }
  // Whether the checkpoint resumed from came from memory, not from disk.
  bool from_memory() const { return resume_ && resume_->kept_in_memory; }
  // The step of the newest checkpoint this run wrote (-1: none yet).
  int64_t last_step() const { return last_step_.load(); }

 private:
  using Files = std::map<std::string, std::string>;
  // The workers' newest states into `files`; returns the round's step and
  // each worker's in `steps`.
  Result<int64_t> AddWorkerStates(std::map<NodeId, Message>& arrivals,
                                  Files& files, nlohmann::json& steps);
  // Asks node `id` (`who`, for errors) for its state.
  Result<Message> RequestState(Coordinator& coordinator, NodeId id,
                               const std::string& who);
  // Every server's state (JSON and safetensors) and version.
  Status AddServerStates(Coordinator& coordinator, Files& files,
                         nlohmann::json& versions);
  // The samples the workers that a resume leaves out (not in `kept`) had
  // trained (they still count in the run's total).
  static Result<int64_t> RetiredSamples(const Checkpoint& c,
                                        const std::vector<int>& kept);
  // Whether `c` was written by another number of workers or data servers
  // than the run has now (a resume re-plans then).
  bool Resized(const Checkpoint& c) const;
  // Every data server's cursor (they keep no tensors).
  Status AddDataStates(Coordinator& coordinator, Files& files);

  const Config& config_;
  const ClusterRunOptions& o_;
  const RunDirectory& run_dir_;
  std::shared_ptr<const Checkpoint> resume_;
  nlohmann::json meta_;
  ClusterSummary::Resize resize_;
  // A resume on another size: the old workers that go on, in their new
  // order (checkpoint.resume_workers).
  std::vector<int> kept_;
  // The newest state of every worker (a finished one keeps its last).
  std::map<int, std::pair<std::string, std::string>> workers_;
  std::map<int, int64_t> worker_steps_;
  std::atomic<int64_t> written_{0};
  std::atomic<int64_t> last_step_{-1};
  std::atomic<bool> keep_for_next_life_{false};
};

// With checkpoint.resume: the run directory's newest checkpoint is one of
// this cluster with this config (the coordinator's own check, made before
// any node starts, so that a changed setting fails the run at once instead
// of after every node waited for a coordinator that stopped). Returns the
// checkpoint it read and checked (null when not resuming), for the
// coordinator of this process to resume from without reading it again.
// The run's config.toml is then rewritten with `config` (what the resume
// changed, e.g. cluster.workers; checkpoint.resume as false).
Result<std::shared_ptr<const Checkpoint>> CheckResumable(
    const Config& config, const ClusterRunOptions& options,
    const RunDirectory& run_dir);

}  // namespace strata

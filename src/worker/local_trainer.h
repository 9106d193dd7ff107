#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config.h"
#include "data/batch_sampler.h"
#include "data/dataset.h"
#include "models/models.h"
#include "ps/optimizer.h"
#include "train/batch.h"
#include "train/checkpoint.h"
#include "train/run_dir.h"

namespace strata {

// What a finished (or interrupted) run reports; also written as summary.json.
struct RunSummary {
  double final_train_loss = 0;
  double final_train_acc = 0;
  double final_val_loss = 0;
  double final_val_acc = 0;
  double wall_s = 0;         // whole run, data loading excluded
  double train_s = 0;        // time spent in training steps
  double samples_per_s = 0;  // training samples / train_s
  int64_t steps = 0;
  int64_t samples = 0;
  double epochs = 0;  // samples / training-set size
  int64_t parameters = 0;
  bool interrupted = false;
  // The final flat parameter vector (not serialised; for tests and tools).
  std::vector<float> final_params;

  nlohmann::json ToJson() const;
};

// Single-process training (cluster.mode = "local"): draws shuffled
// mini-batches, runs forward/backward in LibTorch, applies the flat
// optimizer (the same code the parameter servers run, on the host copy; or,
// with train.local_optimizer, its rules as LibTorch operations on the
// model's device: TensorOptimizer), evaluates on the
// validation split on a schedule and writes metrics.jsonl, eval.jsonl and
// summary.json into `run_dir`. Final train metrics come from a full
// evaluation pass over the training split, final validation metrics from one
// over the validation split.
// `stop` (may be null) is polled between steps: when it becomes true the run
// ends early, evaluates, and writes its summary with interrupted = true.
// Errors: a model that cannot take the data, LibTorch failures (turned into
// Status), I/O errors writing the run directory. Not thread-safe: sets
// LibTorch's intra-op thread count for the process.
Result<RunSummary> TrainLocal(const Config& config, const DatasetSplits& data,
                              const RunDirectory& run_dir,
                              const std::atomic<bool>* stop);

// The local trainer's checkpoint (docs/checkpoints.md): model.safetensors
// (the flat parameters as "flat", and the buffers by name),
// optimizer.safetensors, state.json (`counters`, the sampler's cursor, the
// augmentation generator) and config.toml.
Result<std::map<std::string, std::string>> LocalCheckpointFiles(
    const Config& config, Model& model, const OptimizerState& optimizer,
    const BatchSampler& sampler, const Batcher& batcher,
    const nlohmann::json& counters);

// A checkpoint's parameters and buffers into `model` (built from the
// checkpoint's config). DataLoss naming the file when they do not fit.
Status RestoreModelFromCheckpoint(const Checkpoint& c, Model& model);

// Writes the model of a local run's checkpoint (`step`; < 0 = the newest)
// as model.safetensors + model.json into `out_dir` (default
// <run_dir>/export-step-<N>). Returns the directory written. The errors of
// LoadCheckpoint, or DataLoss naming what does not fit.
Result<std::string> ExportLocalCheckpoint(const std::string& run_dir,
                                          int64_t step,
                                          const std::string& out_dir);

// Puts a checkpoint's state back into objects built from the same config,
// and its optimizer's state into *optimizer (for the caller's optimizer,
// which checks it); returns its counters. DataLoss naming the file that
// does not fit.
Result<nlohmann::json> RestoreLocalCheckpoint(const Checkpoint& c, Model& model,
                                              OptimizerState* optimizer,
                                              BatchSampler& sampler,
                                              Batcher& batcher);

}  // namespace strata

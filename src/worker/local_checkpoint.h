#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/config.h"
#include "data/batch_sampler.h"
#include "models/models.h"
#include "ps/optimizer.h"
#include "run/checkpoint.h"
#include "worker/batch.h"

namespace strata {

// The local trainer's checkpoint (docs/design/checkpoints.md):
// model.safetensors (the flat parameters as "flat", and the buffers by name),
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

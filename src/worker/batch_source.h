#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/status.h"
#include "data/batch_sampler.h"
#include "data/dataset.h"
#include "dataservice/batch_stream.h"
#include "run/options.h"
#include "sharding/resolve.h"
#include "worker/batch.h"
#include "worker/epoch_remainder.h"

namespace strata {

// Where a worker's mini-batches come from: its own sampler over its shard
// (data.sampler), or the data service's stream (which serves the same
// batches in static assignment). Both assemble batches through a Batcher
// (data.augment) whose generator a checkpoint keeps. Not thread-safe: the
// worker's thread only.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The steps this worker trains: the run's budget, its share of the
  // epochs, or (dynamic assignment) until the data service runs dry.
  virtual int64_t total_steps() const = 0;
  // Whether the sampler uses the per-example losses of its batches.
  virtual bool wants_losses() const = 0;
  // The next batch into *batch (valid until the next call) and its epoch;
  // false when the data service has no more. A stream's error names the data
  // server.
  virtual Result<bool> Next(Batch* batch, int64_t* epoch) = 0;
  // The step on the last batch is done; `losses` (one per example) is empty
  // unless wants_losses().
  virtual void Done(const std::vector<float>& losses) = 0;
  // The cursor a checkpoint keeps ("sampler", "augment_rng") into `state`,
  // and back from it. DataLoss naming the worker for a state that does not
  // fit.
  virtual void SaveState(nlohmann::json& state) const;
  virtual Status RestoreState(const nlohmann::json& state);
  // Before the worker arrives at a checkpoint round: the data server's
  // cursor must know every batch trained so far.
  virtual Status BeforeCheckpoint() { return Status::Ok(); }
  // Seconds spent waiting for the data service's next batch; -1 without a
  // data service (nothing to wait for).
  virtual double wait_s() const { return -1; }
  // After the last step: the last acknowledgements.
  virtual Status Finish() { return Status::Ok(); }
  // After a resume on another worker count: the examples left in the epoch
  // over every worker (-1: nothing re-planned) and the class TV distance
  // of this worker's part.
  // The batches in pinned memory (Batcher::PinMemory: a GPU worker).
  void PinMemory() { batcher_.PinMemory(); }
  int64_t replan_examples() const { return replan_examples_; }
  double replan_tv() const { return replan_tv_; }

 protected:
  // Worker `index`'s batcher: options.augment, seeded from run.seed and the
  // index.
  BatchSource(const ClusterRunOptions& o, const Dataset& train, int index)
      : batcher_(train, o.augment,
                 (o.seed << 8) ^ static_cast<uint64_t>(index)),
        index_(index) {}
  Batcher batcher_;
  const int index_;
  int64_t replan_examples_ = -1;
  double replan_tv_ = 0;
};

// Worker `index`'s source: with a `stream` the data service's batches
// (`shards` unused; `train` gives only the shape), otherwise the sampler
// options.sampler over shards->worker_indices[index] (`shards` outlives
// it). `shards_for` gives the old worker count's shards when the worker
// resumes from a checkpoint of another size (may be empty otherwise).
// InvalidArgument for a worker without examples or a sampler that cannot
// be built.
Result<std::unique_ptr<BatchSource>> MakeBatchSource(
    const ClusterRunOptions& options, int index, const Dataset& train,
    const ShardSet* shards, BatchStream* stream, ShardsFor shards_for = {});

}  // namespace strata

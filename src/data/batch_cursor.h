#pragma once

// The cursor of the mini-batch streaming service (docs/design/data_service.md):
// which batch each worker gets next, which batches are out on lease, and
// what was acknowledged. Pure index code (no LibTorch, no transport): the
// data role wraps it in a node.
//
//   static   each worker draws only from its own shard, through the sampler
//            a worker would build itself (same seed), so a worker sees the
//            batches it would have drawn without the service
//   dynamic  one sampler over all the examples; any worker takes the next
//            batch of the epoch, so faster workers do more
//
// Either way every example is served exactly once per epoch across the
// workers: a batch is leased to one worker until it acknowledges it; a lost
// worker's leases go back to a queue that is served first (to the same
// worker, after a restart, in static mode). SaveState / RestoreState keep
// the samplers' cursors, the returned batches and the leases (an
// unacknowledged lease is served again after a restore).
//
// Thread-compatible: the data node serialises calls.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/batch_sampler.h"

namespace strata {

enum class Assignment { kStatic, kDynamic };
Result<Assignment> ParseAssignment(const std::string& name);
const char* AssignmentName(Assignment a);

struct BatchCursorOptions {
  Assignment assignment = Assignment::kStatic;
  SamplerKind sampler = SamplerKind::kShuffle;
  int64_t batch_size = 1;
  int num_workers = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  double max_boost = 4.0;
  // How much to serve: with `batches` > 0, that many batches per worker
  // (static) or in all (dynamic); otherwise `epochs` epochs.
  int64_t epochs = 1;
  int64_t batches = 0;
  // Static: the run's index of each worker this cursor serves (its sampler
  // seed); empty = 0, 1, 2, ...
  std::vector<int> seed_workers;
};

class BatchCursor {
 public:
  // `labels` and `cluster_ids` are indexed by example id (cluster_ids may be
  // empty). Static: `shards[w]` are worker w's examples and worker w's
  // sampler is seeded `seed_for_worker(w)` as RunWorker does. Dynamic:
  // `shards` holds one entry, the examples to serve (all of them).
  // InvalidArgument for a sampler error or shards that do not fit.
  static Result<std::unique_ptr<BatchCursor>> Make(
      const BatchCursorOptions& options,
      std::vector<std::vector<int64_t>> shards,
      const std::vector<int64_t>& labels,
      const std::vector<int32_t>& cluster_ids);
  // The sampler seed of worker w (static) or of the dynamic sampler (w = -1).
  static uint64_t SamplerSeed(uint64_t seed, int worker);

  struct Lease {
    enum class Kind { kBatch, kWait, kEnd };
    Kind kind = Kind::kEnd;
    int64_t epoch = 0;
    int64_t seq = 0;  // unique over the run
    std::vector<int64_t> ids;
  };
  // The next batch for `worker` (0 <= worker < num_workers): a returned
  // batch first, then a new one; kWait when none is left now but leases are
  // still out (a lost worker's may come back); kEnd when all was served.
  Lease Next(int worker);

  struct Acked {
    int worker = 0;
    int64_t epoch = 0;
    int64_t seq = 0;
    std::vector<int64_t> ids;
  };
  // `worker` finished training on batch `seq`. `losses` (may be null) holds
  // one per example for a sampler that wants them. InvalidArgument for an
  // unknown sequence number, another worker's lease or a wrong loss count.
  Result<Acked> Ack(int worker, int64_t seq, const float* losses,
                    size_t num_losses);
  // A worker was lost: its leases go back to be served again. Returns how
  // many batches came back.
  int ReturnLeases(int worker);

  nlohmann::json SaveState() const;
  Status RestoreState(const nlohmann::json& state);

  const BatchCursorOptions& options() const { return options_; }
  bool wants_losses() const;
  int64_t leases_out() const { return static_cast<int64_t>(leases_.size()); }
  int64_t returned() const { return returned_total_; }
  // The running loss per stratum of a loss-aware sampler (dynamic: the one
  // sampler; static: worker 0's), as {"class": [...], "cluster": [...],
  // "loss": [...]} (cluster 0 when strata are classes; loss null for a
  // stratum not seen yet); empty for other samplers.
  nlohmann::json StratumLosses() const;

 private:
  explicit BatchCursor(BatchCursorOptions options)
      : options_(std::move(options)) {}
  // Which sampler / queue a worker draws from.
  size_t Slot(int worker) const {
    return options_.assignment == Assignment::kStatic
               ? static_cast<size_t>(worker)
               : 0;
  }
  bool Exhausted(size_t slot) const;

  struct Held {
    int worker;
    int64_t epoch;
    std::vector<int64_t> ids;
  };
  struct Returned {
    int64_t epoch;
    std::vector<int64_t> ids;
  };

  BatchCursorOptions options_;
  std::vector<std::unique_ptr<BatchSampler>> samplers_;  // per slot
  std::vector<int64_t> drawn_;                           // per slot
  std::vector<std::deque<Returned>> queues_;             // per slot
  std::map<int64_t, Held> leases_;                       // by seq
  bool clustered_ = false;  // strata are (class, sub-cluster)
  int64_t next_seq_ = 0;
  int64_t returned_total_ = 0;
};

}  // namespace strata

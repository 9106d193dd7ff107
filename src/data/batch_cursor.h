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
// On another worker count (docs/design/elastic.md, "The data service"), a
// cursor restored from the old run's state gives what it had left to serve
// (Position, DrainBefore), and the new run's cursor serves each worker its
// part of that first (Continue).
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
  // The seed of worker w's sampler over its part of epoch `epoch` after a
  // resize (here and in a worker's own loading, worker/batch_source.cc).
  static uint64_t PartSeed(uint64_t seed, int worker, int64_t epoch);

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
  // `worker` gives back batch `seq`, leased to it and not trained (a
  // prefetched batch, given back at a checkpoint round so that another
  // worker can train it): it is served next, before any other returned
  // batch. InvalidArgument for an unknown sequence number or another
  // worker's lease.
  Status GiveBack(int worker, int64_t seq);

  nlohmann::json SaveState() const;
  // InvalidArgument naming both runs for a state saved for another
  // assignment, sampler, worker count or batch size. With `resized` (a
  // dynamic cursor resumed on another worker count: its one sampler serves
  // any number of workers, at their new batch size) the worker count and
  // the batch size may differ.
  Status RestoreState(const nlohmann::json& state, bool resized = false);

  // A part of an epoch that a resize gives a worker.
  struct Part {
    int64_t epoch = 0;
    std::vector<int64_t> ids;
  };
  // After a resize (static): `worker` first serves `parts`, in order, each
  // through a sampler of the cursor's kind (PartSeed), then its own
  // sampler, whose epochs then count from `epoch_offset`; `budget` batches
  // in all from here (-1: the cursor's rule, options.batches or
  // options.epochs). A checkpoint keeps all of it. InvalidArgument for a
  // worker out of range, a dynamic cursor or a part's sampler error.
  Status Continue(int worker, std::vector<Part> parts, int64_t epoch_offset,
                  int64_t budget);
  // After another number of data servers (dynamic): the one sampler first
  // serves `parts`, in order, then its own epochs, counted from
  // `epoch_offset` (dataservice/served_replan.h). InvalidArgument for a
  // static cursor or a part's sampler error.
  Status ContinueRegrouped(std::vector<Part> parts, int64_t epoch_offset);
  // Where the samplers are: the largest epoch any worker's sampler draws
  // from next (a finished one's included: after its last epoch), and
  // whether one has drawn part of that epoch already.
  struct Position {
    int64_t epoch = -1;
    bool started = false;
  };
  Position Where() const;
  // Everything left to serve before epoch `until`, into (*left)[epoch]:
  // the returned and leased batches, the parts, and what each unfinished
  // sampler has left of its epochs before `until`. Spends the cursor (an
  // old run's, restored to be re-planned).
  void DrainBefore(int64_t until,
                   std::map<int64_t, std::vector<int64_t>>* left);

  // Leaves `n` sequence numbers unused: a data server that replaces a lost
  // one restores the newest checkpoint's cursor, and its predecessor's
  // later leases, whose acknowledgements may still arrive, took the numbers
  // after it.
  void SkipSequenceNumbers(int64_t n) { next_seq_ += n; }

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
  // The epoch slot `slot`'s own sampler draws from next.
  int64_t MainEpoch(size_t slot) const {
    return samplers_[slot]->epoch() + extra_[slot].offset;
  }
  // The next batch from the slot's parts into *lease; false when none is
  // left.
  bool NextFromParts(size_t slot, Lease* lease);
  Result<std::unique_ptr<BatchSampler>> MakeSampler(size_t slot,
                                                    std::vector<int64_t> ids,
                                                    uint64_t seed) const;
  Status StartPart(size_t slot);
  nlohmann::json SaveExtra(size_t slot) const;
  Status RestoreExtra(size_t slot, const nlohmann::json& j);

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
  // After a resize: the parts still to serve (the first one through
  // part_sampler once started), the epoch offset and the budget.
  struct Extra {
    std::deque<Part> parts;
    std::unique_ptr<BatchSampler> part_sampler;
    int64_t offset = 0;
    int64_t budget = -1;
  };
  std::vector<Extra> extra_;                    // per slot
  std::vector<std::vector<int64_t>> shard_of_;  // per slot, as given
  std::vector<int> seed_worker_;                // per slot
  std::vector<int64_t> labels_;
  std::vector<int32_t> cluster_ids_;
  bool clustered_ = false;  // strata are (class, sub-cluster)
  int64_t next_seq_ = 0;
  int64_t returned_total_ = 0;
};

}  // namespace strata

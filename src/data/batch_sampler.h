#pragma once

// Mini-batch samplers for one worker's shard (data.sampler):
//   shuffle             a fresh permutation per epoch (EpochShuffler)
//   stratified          every batch holds the shard's classes in their
//                       proportions (largest-remainder rounding)
//   cluster-stratified  the same over (class, cluster) strata, so every
//                       batch draws from every class and sub-cluster whose
//                       share of a batch is at least one example
// Pure index code (no LibTorch). Every sampler visits each index of its
// shard exactly once per epoch, never lets a batch straddle two epochs (the
// last batch of an epoch is short when needed), and is deterministic for a
// seed; epoch e depends only on (seed, e).
//
// Thread-compatible: one owner calls Next().

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/sampler.h"

namespace strata {

// The interface the worker loop draws batches through; the same contract
// as EpochShuffler (see data/sampler.h for the typical loop).
class BatchSampler {
 public:
  virtual ~BatchSampler() = default;
  // Replaces *out with the next batch (at most batch_size indices) and
  // returns its epoch (0-based). batch_size must be > 0 (checked).
  virtual int64_t Next(int64_t batch_size, std::vector<int64_t>* out) = 0;
  // The epoch the next call to Next() draws from.
  virtual int64_t epoch() const = 0;
  // True when the batch most recently returned ended its epoch.
  virtual bool epoch_finished() const = 0;
  // Indices per epoch.
  virtual int64_t size() const = 0;
  // Batches per epoch for batch_size (the short last batch included).
  virtual int64_t BatchesPerEpoch(int64_t batch_size) const = 0;
};

// EpochShuffler behind the BatchSampler interface (sampler "shuffle").
class ShuffleSampler final : public BatchSampler {
 public:
  ShuffleSampler(std::vector<int64_t> indices, uint64_t seed,
                 bool shuffle = true)
      : shuffler_(std::move(indices), seed, shuffle) {}
  int64_t Next(int64_t batch_size, std::vector<int64_t>* out) override {
    return shuffler_.Next(batch_size, out);
  }
  int64_t epoch() const override { return shuffler_.epoch(); }
  bool epoch_finished() const override { return shuffler_.epoch_finished(); }
  int64_t size() const override { return shuffler_.size(); }
  int64_t BatchesPerEpoch(int64_t batch_size) const override {
    return shuffler_.BatchesPerEpoch(batch_size);
  }

 private:
  EpochShuffler shuffler_;
};

// Batches drawn in proportion from strata (the "stratified" and
// "cluster-stratified" samplers). With N indices, stratum s holding n_s of
// them and batch size B, a full batch takes floor(B n_s / N) from every
// stratum plus one more from the strata whose carried fractional share is
// largest (largest-remainder rounding with the remainders carried from
// batch to batch), so every stratum's running count stays within one of
// its exact proportional share and the epoch uses every index once. Members
// of each stratum are shuffled per epoch (seeded), and so is each batch.
class StratifiedSampler final : public BatchSampler {
 public:
  // stratum[i] is the stratum of indices[i] (any int64 values; strata are
  // ordered by value). The two vectors must have the same size (checked).
  StratifiedSampler(std::vector<int64_t> indices, std::vector<int64_t> stratum,
                    uint64_t seed);

  int64_t Next(int64_t batch_size, std::vector<int64_t>* out) override;
  int64_t epoch() const override { return epoch_; }
  bool epoch_finished() const override { return epoch_finished_; }
  int64_t size() const override { return size_; }
  int64_t BatchesPerEpoch(int64_t batch_size) const override;
  int64_t num_strata() const { return static_cast<int64_t>(members_.size()); }

 private:
  void StartEpoch();

  const uint64_t seed_;
  int64_t size_ = 0;
  std::vector<std::vector<int64_t>> originals_;  // per stratum, as given
  std::vector<std::vector<int64_t>> members_;    // this epoch's order
  std::mt19937_64 batch_rng_;                    // shuffles within batches
  std::vector<int64_t> taken_;                   // per stratum, this epoch
  std::vector<double> carry_;  // per stratum: exact share - taken so far
  int64_t position_ = 0;       // indices handed out this epoch
  int64_t epoch_ = 0;
  bool epoch_finished_ = false;
};

// Builds the sampler `name` ("shuffle", "stratified", "cluster-stratified")
// over `indices` (example ids of the dataset). `labels` are the dataset's
// labels indexed by example id; `cluster_ids` the per-example cluster ids
// (only "cluster-stratified" uses them; it falls back to classes when they
// are empty). `shuffle` = false gives "shuffle" a fixed order (the other
// samplers always shuffle). InvalidArgument for an unknown name or an index
// outside labels / cluster_ids.
Result<std::unique_ptr<BatchSampler>> MakeBatchSampler(
    const std::string& name, std::vector<int64_t> indices,
    const std::vector<int64_t>& labels, const std::vector<int32_t>& cluster_ids,
    uint64_t seed, bool shuffle = true);

}  // namespace strata

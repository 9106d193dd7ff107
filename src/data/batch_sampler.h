#pragma once

// Mini-batch samplers for one worker's shard (data.sampler):
//   shuffle             a fresh permutation per epoch (EpochShuffler)
//   stratified          every batch holds the shard's classes in their
//                       proportions (largest-remainder rounding)
//   cluster-stratified  the same over (class, cluster) strata, so every
//                       batch draws from every class and sub-cluster whose
//                       share of a batch is at least one example
//   loss-aware          cluster-stratified with each stratum's share scaled
//                       by its running loss (reported through Observe),
//                       bounded by max_boost; paper 000
//   class-rotation      every batch takes one example from each of the
//                       next B classes of a per-epoch class cycle, so every
//                       window of ceil(C / B) batches is class-balanced
//                       (datasets with more classes than a batch holds)
// Pure index code (no LibTorch). Every sampler visits each index of its
// shard exactly once per epoch, never lets a batch straddle two epochs (the
// last batch of an epoch is short when needed), and is deterministic for a
// seed; epoch e depends only on (seed, e).
//
// Thread-compatible: one owner calls Next().

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
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
  // True when the sampler uses the per-example losses of its batches.
  virtual bool wants_losses() const { return false; }
  // The per-example losses of a batch it handed out (ids and losses have
  // the same length); ignored by samplers that do not use them.
  virtual void Observe(const std::vector<int64_t>& ids, const float* losses) {
    (void)ids;
    (void)losses;
  }
  // The cursor (epoch, position, carried shares, RNG, loss statistics) as
  // JSON; RestoreState on a sampler built with the same arguments continues
  // exactly where SaveState was taken. InvalidArgument for a state that
  // does not fit (another sampler, other strata, a position past the end).
  virtual nlohmann::json SaveState() const = 0;
  virtual Status RestoreState(const nlohmann::json& state) = 0;
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
  nlohmann::json SaveState() const override;
  Status RestoreState(const nlohmann::json& state) override;

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
//
// Loss-aware (max_boost > 0): weighted sampling without replacement by
// strata. Each example left in the epoch weighs its stratum's boost
// clamp(L_s / L, 1 / max_boost, max_boost), where L_s is the stratum's
// running loss (an exponential average over its examples' losses that
// Observe() reports, weight 0.02 per example;
// boost 1 until the stratum was seen) and L the data-weighted mean of the
// L_s; a batch takes from each stratum in proportion to (examples left) x
// boost, with the same largest-remainder rounding.
// High-loss strata are drawn sooner; every index is still used exactly once
// per epoch (the order changes, the coverage does not).
class StratifiedSampler final : public BatchSampler {
 public:
  // stratum[i] is the stratum of indices[i] (any int64 values; strata are
  // ordered by value). The two vectors must have the same size (checked).
  // max_boost > 0 makes it loss-aware (>= 1; checked).
  StratifiedSampler(std::vector<int64_t> indices, std::vector<int64_t> stratum,
                    uint64_t seed, double max_boost = 0);

  int64_t Next(int64_t batch_size, std::vector<int64_t>* out) override;
  int64_t epoch() const override { return epoch_; }
  bool epoch_finished() const override { return epoch_finished_; }
  int64_t size() const override { return size_; }
  int64_t BatchesPerEpoch(int64_t batch_size) const override;
  bool wants_losses() const override { return max_boost_ > 0; }
  void Observe(const std::vector<int64_t>& ids, const float* losses) override;
  nlohmann::json SaveState() const override;
  Status RestoreState(const nlohmann::json& state) override;
  int64_t num_strata() const { return static_cast<int64_t>(members_.size()); }
  // The strata's values (ascending) and running losses (loss-aware; NaN
  // for a stratum not seen yet).
  const std::vector<int64_t>& strata() const { return keys_; }
  const std::vector<double>& stratum_losses() const { return loss_; }

 private:
  void StartEpoch();
  // The per-stratum share multipliers (all 1 unless loss-aware).
  std::vector<double> Boosts() const;
  std::vector<double> Shares() const;
  std::vector<int64_t> TakeCounts(int64_t b);

  const uint64_t seed_;
  const double max_boost_;
  int64_t size_ = 0;
  std::vector<int64_t> keys_;                    // stratum values, ascending
  std::map<int64_t, size_t> stratum_of_;         // example id -> stratum
  std::vector<double> loss_;                     // running loss per stratum
  std::vector<std::vector<int64_t>> originals_;  // per stratum, as given
  std::vector<std::vector<int64_t>> members_;    // this epoch's order
  std::mt19937_64 batch_rng_;                    // shuffles within batches
  std::vector<int64_t> taken_;                   // per stratum, this epoch
  std::vector<double> carry_;  // per stratum: exact share - taken so far
  int64_t position_ = 0;       // indices handed out this epoch
  int64_t epoch_ = 0;
  bool epoch_finished_ = false;
};

// Class rotation ("class-rotation"): each epoch draws a random cycle of the
// classes; batch after batch walks along it, taking one (shuffled) example
// of each class it passes and skipping classes with no examples left. While
// every class has examples left, any ceil(C / B) consecutive batches hold
// every class, and no class more than once more than any other. Every index
// is used exactly once per epoch; the epoch's last batch takes what is left.
class ClassRotationSampler final : public BatchSampler {
 public:
  // classes[i] is the class of indices[i] (same size; checked).
  ClassRotationSampler(std::vector<int64_t> indices,
                       std::vector<int64_t> classes, uint64_t seed);

  int64_t Next(int64_t batch_size, std::vector<int64_t>* out) override;
  int64_t epoch() const override { return epoch_; }
  bool epoch_finished() const override { return epoch_finished_; }
  int64_t size() const override { return size_; }
  int64_t BatchesPerEpoch(int64_t batch_size) const override;
  nlohmann::json SaveState() const override;
  Status RestoreState(const nlohmann::json& state) override;

 private:
  void StartEpoch();

  const uint64_t seed_;
  int64_t size_ = 0;
  std::vector<std::vector<int64_t>> originals_;  // per class, as given
  std::vector<std::vector<int64_t>> members_;    // this epoch's order
  std::vector<size_t> cycle_;                    // this epoch's class cycle
  std::vector<int64_t> taken_;                   // per class, this epoch
  size_t cycle_pos_ = 0;                         // next class of the cycle
  int64_t position_ = 0;
  int64_t epoch_ = 0;
  bool epoch_finished_ = false;
};

// The samplers data.sampler names, parsed once (ParseSamplerKind) and
// dispatched on as a type everywhere else.
enum class SamplerKind {
  kShuffle,
  kStratified,
  kClusterStratified,
  kLossAware,
  kClassRotation,
};
// InvalidArgument listing the samplers for an unknown name.
Result<SamplerKind> ParseSamplerKind(const std::string& name);
// The config spelling ("cluster-stratified").
const char* SamplerKindName(SamplerKind kind);
// The samplers that draw from (class, sub-cluster) strata when the
// per-example cluster ids are given.
inline bool UsesClusters(SamplerKind kind) {
  return kind == SamplerKind::kClusterStratified ||
         kind == SamplerKind::kLossAware;
}

// Builds the sampler `kind` over `indices` (example ids of the
// dataset). `labels` are the dataset's labels indexed by example id;
// `cluster_ids` the per-example cluster ids ("cluster-stratified" and
// "loss-aware" use them; they fall back to classes when they are empty).
// `shuffle` = false gives "shuffle" a fixed order (the other samplers
// always shuffle). `max_boost` bounds loss-aware's boost (>= 1).
// InvalidArgument for an unknown name or an index outside labels /
// cluster_ids.
Result<std::unique_ptr<BatchSampler>> MakeBatchSampler(
    SamplerKind kind, std::vector<int64_t> indices,
    const std::vector<int64_t>& labels, const std::vector<int32_t>& cluster_ids,
    uint64_t seed, bool shuffle = true, double max_boost = 4.0);
// The same for a sampler's config name; InvalidArgument for an unknown one.
Result<std::unique_ptr<BatchSampler>> MakeBatchSampler(
    const std::string& name, std::vector<int64_t> indices,
    const std::vector<int64_t>& labels, const std::vector<int32_t>& cluster_ids,
    uint64_t seed, bool shuffle = true, double max_boost = 4.0);

}  // namespace strata

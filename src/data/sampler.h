#pragma once

#include <cstdint>
#include <vector>

namespace strata {

// Hands out mini-batches of example indices, epoch after epoch. Each epoch
// is a fresh permutation of the indices given at construction, drawn from
// (seed, epoch number) alone, so every index appears exactly once per epoch,
// the sequence is identical for a given seed, and epoch e's order does not
// depend on how the earlier epochs were consumed. A batch never straddles
// two epochs: the last batch of an epoch is short when the batch size does
// not divide the number of indices.
//
// Typical loop:
//   EpochShuffler shuffler(shard_indices, seed);
//   std::vector<int64_t> batch;
//   while (shuffler.epoch() < epochs) {  // epoch() of the *next* batch
//     int64_t e = shuffler.Next(batch_size, &batch);
//     Train(batch);
//     if (shuffler.epoch_finished()) Evaluate(e);
//   }
//
// Thread-compatible: one owner calls Next().
class EpochShuffler {
 public:
  // `indices` may be empty; then every batch is empty and ends its epoch.
  // With `shuffle` false every epoch visits the indices in the given order
  // (a fixed data order, e.g. to compare distributed and local training).
  EpochShuffler(std::vector<int64_t> indices, uint64_t seed,
                bool shuffle = true);

  // Replaces *out with the next batch (at most `batch_size` indices, at
  // least one unless there are no indices) and returns the epoch it belongs
  // to (0-based). `batch_size` must be > 0 (checked: a programming error).
  int64_t Next(int64_t batch_size, std::vector<int64_t>* out);

  // The epoch the next call to Next() will draw from: 0 before any batch,
  // and it advances right after the last batch of an epoch is handed out,
  // so after `while (epoch() < k) Next(...)` exactly k epochs were seen.
  int64_t epoch() const { return epoch_; }
  // True when the batch most recently returned by Next() was the last of
  // its epoch; false before the first call.
  bool epoch_finished() const { return epoch_finished_; }
  // Number of indices per epoch.
  int64_t size() const { return static_cast<int64_t>(indices_.size()); }
  // Batches per epoch for `batch_size` (the short last batch included).
  int64_t BatchesPerEpoch(int64_t batch_size) const;
  // Position in the current epoch (indices handed out of it).
  int64_t position() const { return position_; }
  // Jumps to `position` of `epoch` (a saved cursor): the order is rebuilt
  // from (seed, epoch). False when position is outside the epoch.
  bool Seek(int64_t epoch, int64_t position, bool epoch_finished);

 private:
  void Shuffle();

  const std::vector<int64_t> indices_;
  const uint64_t seed_;
  const bool shuffle_;
  std::vector<int64_t> order_;  // this epoch's permutation of indices_
  int64_t epoch_ = 0;
  int64_t position_ = 0;  // next unread entry of order_
  bool epoch_finished_ = false;
};

}  // namespace strata

#include "data/sampler.h"

#include <algorithm>
#include <random>
#include <utility>

#include "common/status.h"

namespace strata {
namespace {

// SplitMix64 finaliser: nearby (seed, epoch) pairs give unrelated streams.
uint64_t EpochSeed(uint64_t seed, int64_t epoch) {
  uint64_t z =
      seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(epoch + 1));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

EpochShuffler::EpochShuffler(std::vector<int64_t> indices, uint64_t seed,
                             bool shuffle)
    : indices_(std::move(indices)), seed_(seed), shuffle_(shuffle) {
  Shuffle();
}

void EpochShuffler::Shuffle() {
  // Fisher-Yates with raw rng() draws: std::shuffle's algorithm differs
  // between standard libraries and the order must not. Each epoch permutes
  // the original order, so epoch e depends only on (seed, e).
  order_ = indices_;
  position_ = 0;
  if (!shuffle_) return;
  std::mt19937_64 rng(EpochSeed(seed_, epoch_));
  for (size_t i = order_.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(rng() % i);
    std::swap(order_[i - 1], order_[j]);
  }
  position_ = 0;
}

int64_t EpochShuffler::Next(int64_t batch_size, std::vector<int64_t>* out) {
  STRATA_CHECK(batch_size > 0);
  const int64_t epoch = epoch_;
  const int64_t n = std::min<int64_t>(batch_size, size() - position_);
  out->assign(order_.begin() + position_, order_.begin() + position_ + n);
  position_ += n;
  epoch_finished_ = position_ == size();
  if (epoch_finished_) {
    ++epoch_;
    Shuffle();
  }
  return epoch;
}

bool EpochShuffler::Seek(int64_t epoch, int64_t position, bool epoch_finished) {
  if (epoch < 0 || position < 0 || position > size()) return false;
  epoch_ = epoch;
  Shuffle();
  position_ = position;
  epoch_finished_ = epoch_finished;
  return true;
}

int64_t EpochShuffler::BatchesPerEpoch(int64_t batch_size) const {
  STRATA_CHECK(batch_size > 0);
  if (size() == 0) return 1;
  return (size() + batch_size - 1) / batch_size;
}

}  // namespace strata

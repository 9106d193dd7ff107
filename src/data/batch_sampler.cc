#include "data/batch_sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <utility>

namespace strata {
namespace {

// SplitMix64 finaliser: unrelated streams for nearby (seed, epoch) pairs.
uint64_t Mix(uint64_t seed, uint64_t stream) {
  uint64_t z = seed ^ (0x9e3779b97f4a7c15ULL * (stream + 1));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Fisher-Yates with raw draws: the same order with every standard library.
void Shuffle(std::vector<int64_t>* v, std::mt19937_64& rng) {
  for (size_t i = v->size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng() % i);
    std::swap((*v)[i - 1], (*v)[j]);
  }
}

}  // namespace

StratifiedSampler::StratifiedSampler(std::vector<int64_t> indices,
                                     std::vector<int64_t> stratum,
                                     uint64_t seed)
    : seed_(seed) {
  STRATA_CHECK(indices.size() == stratum.size());
  std::map<int64_t, size_t> slot;
  for (int64_t s : stratum) slot.emplace(s, 0);
  size_t next = 0;
  for (auto& [value, index] : slot) index = next++;
  originals_.resize(slot.size());
  for (size_t i = 0; i < indices.size(); ++i)
    originals_[slot[stratum[i]]].push_back(indices[i]);
  size_ = static_cast<int64_t>(indices.size());
  StartEpoch();
}

void StratifiedSampler::StartEpoch() {
  const size_t k = originals_.size();
  members_ = originals_;
  for (size_t s = 0; s < k; ++s) {
    std::mt19937_64 rng(Mix(Mix(seed_, static_cast<uint64_t>(epoch_)), s));
    Shuffle(&members_[s], rng);
  }
  batch_rng_.seed(Mix(seed_ ^ 0x5bd1e995ULL, static_cast<uint64_t>(epoch_)));
  taken_.assign(k, 0);
  carry_.assign(k, 0.0);
  position_ = 0;
}

int64_t StratifiedSampler::Next(int64_t batch_size, std::vector<int64_t>* out) {
  STRATA_CHECK(batch_size > 0);
  const int64_t epoch = epoch_;
  const size_t k = members_.size();
  const int64_t remaining = size_ - position_;
  const int64_t b = std::min(batch_size, remaining);
  std::vector<int64_t> take(k, 0);
  if (b == remaining) {
    // The epoch's last batch: whatever is left.
    for (size_t s = 0; s < k; ++s)
      take[s] = static_cast<int64_t>(members_[s].size()) - taken_[s];
  } else {
    std::vector<double> quota(k), deficit(k);
    int64_t given = 0;
    for (size_t s = 0; s < k; ++s) {
      const int64_t avail =
          static_cast<int64_t>(members_[s].size()) - taken_[s];
      quota[s] = static_cast<double>(b) *
                 static_cast<double>(members_[s].size()) /
                 static_cast<double>(size_);
      take[s] =
          std::min<int64_t>(static_cast<int64_t>(std::floor(quota[s])), avail);
      given += take[s];
      deficit[s] = carry_[s] + quota[s] - static_cast<double>(take[s]);
    }
    // Largest remainder: the strata furthest behind their exact running
    // share get one more each (ties to the lower stratum). Repeats only
    // when a nearly exhausted stratum could not take its floor.
    std::vector<size_t> order(k);
    for (size_t s = 0; s < k; ++s) order[s] = s;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      return deficit[x] > deficit[y];
    });
    while (given < b) {
      const int64_t before = given;
      for (size_t s : order) {
        if (given == b) break;
        if (taken_[s] + take[s] < static_cast<int64_t>(members_[s].size())) {
          ++take[s];
          ++given;
        }
      }
      STRATA_CHECK(given > before);  // b < remaining: some stratum has room
    }
    for (size_t s = 0; s < k; ++s)
      carry_[s] += quota[s] - static_cast<double>(take[s]);
  }
  out->clear();
  out->reserve(static_cast<size_t>(b));
  for (size_t s = 0; s < k; ++s) {
    const auto first = members_[s].begin() + taken_[s];
    out->insert(out->end(), first, first + take[s]);
    taken_[s] += take[s];
  }
  Shuffle(out, batch_rng_);  // no stratum always first in the batch
  position_ += b;
  epoch_finished_ = position_ == size_;
  if (epoch_finished_) {
    ++epoch_;
    StartEpoch();
  }
  return epoch;
}

int64_t StratifiedSampler::BatchesPerEpoch(int64_t batch_size) const {
  STRATA_CHECK(batch_size > 0);
  if (size_ == 0) return 1;
  return (size_ + batch_size - 1) / batch_size;
}

Result<std::unique_ptr<BatchSampler>> MakeBatchSampler(
    const std::string& name, std::vector<int64_t> indices,
    const std::vector<int64_t>& labels, const std::vector<int32_t>& cluster_ids,
    uint64_t seed, bool shuffle) {
  if (name == "shuffle") {
    return std::unique_ptr<BatchSampler>(
        new ShuffleSampler(std::move(indices), seed, shuffle));
  }
  if (name != "stratified" && name != "cluster-stratified") {
    return Status::InvalidArgument(
        "unknown sampler '{}' (shuffle, stratified or cluster-stratified)",
        name);
  }
  const bool clusters = name == "cluster-stratified" && !cluster_ids.empty();
  if (clusters && cluster_ids.size() != labels.size()) {
    return Status::InvalidArgument(
        "cluster-stratified sampler: {} cluster ids for {} labels",
        cluster_ids.size(), labels.size());
  }
  std::vector<int64_t> stratum(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t e = indices[i];
    if (e < 0 || e >= static_cast<int64_t>(labels.size())) {
      return Status::InvalidArgument(
          "{} sampler: example {} is outside the dataset ({} examples)", name,
          e, labels.size());
    }
    // (class, cluster) as one key; cluster ids are >= 0 and < 2^31.
    stratum[i] =
        clusters ? labels[e] * (int64_t{1} << 31) + cluster_ids[e] : labels[e];
  }
  return std::unique_ptr<BatchSampler>(
      new StratifiedSampler(std::move(indices), std::move(stratum), seed));
}

}  // namespace strata

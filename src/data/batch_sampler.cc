#include "data/batch_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <sstream>
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

std::string RngText(const std::mt19937_64& rng) {
  std::ostringstream out;
  out << rng;
  return out.str();
}

bool ParseRng(const std::string& text, std::mt19937_64* rng) {
  std::istringstream in(text);
  in >> *rng;
  return !in.fail();
}

// Reads state[key] as T; false (and *out untouched) when absent or of
// another type.
template <typename T>
bool Field(const nlohmann::json& state, const char* key, T* out) {
  auto it = state.find(key);
  if (it == state.end()) return false;
  try {
    *out = it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  return true;
}

Status BadState(const char* sampler, const char* what) {
  return Status::InvalidArgument("{} sampler state: {}", sampler, what);
}

// Batches of `batch_size` in an epoch of `size` indices (the short last
// batch included; one empty batch for no indices).
int64_t CeilBatches(int64_t size, int64_t batch_size) {
  STRATA_CHECK(batch_size > 0);
  if (size == 0) return 1;
  return (size + batch_size - 1) / batch_size;
}

// A saved per-stratum position vector must fit the strata and add up to
// the saved epoch position.
Status CheckTaken(const char* sampler, const std::vector<int64_t>& taken,
                  const std::vector<std::vector<int64_t>>& strata,
                  int64_t position) {
  if (taken.size() != strata.size())
    return BadState(sampler, "another number of strata");
  int64_t sum = 0;
  for (size_t s = 0; s < taken.size(); ++s) {
    if (taken[s] < 0 || taken[s] > static_cast<int64_t>(strata[s].size()))
      return BadState(sampler, "a stratum's position is past its end");
    sum += taken[s];
  }
  if (sum != position) return BadState(sampler, "positions do not add up");
  return Status::Ok();
}

}  // namespace

nlohmann::json ShuffleSampler::SaveState() const {
  return {{"sampler", "shuffle"},
          {"epoch", shuffler_.epoch()},
          {"position", shuffler_.position()},
          {"epoch_finished", shuffler_.epoch_finished()}};
}

Status ShuffleSampler::RestoreState(const nlohmann::json& state) {
  std::string name;
  int64_t epoch = 0, position = 0;
  bool finished = false;
  if (!Field(state, "sampler", &name) || name != "shuffle")
    return BadState("shuffle", "not a shuffle sampler's state");
  if (!Field(state, "epoch", &epoch) || !Field(state, "position", &position) ||
      !Field(state, "epoch_finished", &finished) ||
      !shuffler_.Seek(epoch, position, finished)) {
    return BadState("shuffle", "epoch or position missing or out of range");
  }
  return Status::Ok();
}

StratifiedSampler::StratifiedSampler(std::vector<int64_t> indices,
                                     std::vector<int64_t> stratum,
                                     uint64_t seed, double max_boost)
    : seed_(seed), max_boost_(max_boost) {
  STRATA_CHECK(indices.size() == stratum.size());
  STRATA_CHECK(max_boost == 0 || max_boost >= 1);
  std::map<int64_t, size_t> slot;
  for (int64_t s : stratum) slot.emplace(s, 0);
  size_t next = 0;
  for (auto& [value, index] : slot) {
    index = next++;
    keys_.push_back(value);
  }
  originals_.resize(slot.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    const size_t s = slot[stratum[i]];
    originals_[s].push_back(indices[i]);
    if (max_boost_ > 0) stratum_of_[indices[i]] = s;
  }
  loss_.assign(slot.size(), std::numeric_limits<double>::quiet_NaN());
  size_ = static_cast<int64_t>(indices.size());
  StartEpoch();
}

void StratifiedSampler::Observe(const std::vector<int64_t>& ids,
                                const float* losses) {
  if (max_boost_ <= 0 || losses == nullptr) return;
  // A running average per stratum, one example at a time: each example
  // weighs kPerExample, so an estimate rests on about 1 / kPerExample of
  // the stratum's latest examples, however few a batch holds (with 30
  // strata and 10 examples a batch, most strata get 0 or 1 per batch; a
  // per-batch average would follow single examples' noise).
  constexpr double kPerExample = 0.02;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = stratum_of_.find(ids[i]);
    if (it == stratum_of_.end() || !std::isfinite(losses[i])) continue;
    double& l = loss_[it->second];
    l = std::isnan(l) ? losses[i]
                      : (1 - kPerExample) * l + kPerExample * losses[i];
  }
}

std::vector<double> StratifiedSampler::Boosts() const {
  const size_t k = originals_.size();
  std::vector<double> boost(k, 1.0);
  if (max_boost_ <= 0) return boost;
  double sum = 0, weight = 0;
  for (size_t s = 0; s < k; ++s) {
    if (std::isnan(loss_[s])) continue;
    sum += loss_[s] * static_cast<double>(originals_[s].size());
    weight += static_cast<double>(originals_[s].size());
  }
  if (weight <= 0 || sum <= 0) return boost;
  const double mean = sum / weight;
  for (size_t s = 0; s < k; ++s) {
    if (std::isnan(loss_[s])) continue;  // unseen: its plain share
    boost[s] = std::clamp(loss_[s] / mean, 1.0 / max_boost_, max_boost_);
  }
  return boost;
}

nlohmann::json StratifiedSampler::SaveState() const {
  nlohmann::json loss = nlohmann::json::array();
  for (double l : loss_) {
    if (std::isnan(l))
      loss.push_back(nullptr);
    else
      loss.push_back(l);
  }
  return {{"sampler", max_boost_ > 0 ? "loss-aware" : "stratified"},
          {"strata", keys_},
          {"epoch", epoch_},
          {"position", position_},
          {"epoch_finished", epoch_finished_},
          {"taken", taken_},
          {"carry", carry_},
          {"batch_rng", RngText(batch_rng_)},
          {"loss", loss}};
}

Status StratifiedSampler::RestoreState(const nlohmann::json& state) {
  const char* name = max_boost_ > 0 ? "loss-aware" : "stratified";
  std::string saved;
  if (!Field(state, "sampler", &saved) || saved != name)
    return BadState(name, "saved by another sampler");
  std::vector<int64_t> keys, taken;
  std::vector<double> carry;
  int64_t epoch = 0, position = 0;
  bool finished = false;
  std::string rng;
  if (!Field(state, "strata", &keys) || keys != keys_)
    return BadState(name, "other strata than this data's");
  if (!Field(state, "epoch", &epoch) || !Field(state, "position", &position) ||
      !Field(state, "epoch_finished", &finished) ||
      !Field(state, "taken", &taken) || !Field(state, "carry", &carry) ||
      !Field(state, "batch_rng", &rng) || epoch < 0 || position < 0 ||
      position > size_ || taken.size() != keys_.size() ||
      carry.size() != keys_.size()) {
    return BadState(name, "a field is missing or out of range");
  }
  RETURN_IF_ERROR(CheckTaken(name, taken, originals_, position));
  std::vector<double> loss(keys_.size(),
                           std::numeric_limits<double>::quiet_NaN());
  auto it = state.find("loss");
  if (it != state.end() && it->is_array() && it->size() == keys_.size()) {
    for (size_t s = 0; s < keys_.size(); ++s)
      if ((*it)[s].is_number()) loss[s] = (*it)[s].get<double>();
  }
  epoch_ = epoch;
  StartEpoch();
  if (!ParseRng(rng, &batch_rng_))
    return BadState(name, "the batch RNG state does not parse");
  taken_ = taken;
  carry_ = carry;
  position_ = position;
  epoch_finished_ = finished;
  loss_ = loss;
  return Status::Ok();
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

// Each stratum's share of the next batch. Loss-aware: the shares of the
// strata with examples left, scaled and renormalised to the batch; otherwise
// the plain proportions.
std::vector<double> StratifiedSampler::Shares() const {
  const size_t k = members_.size();
  std::vector<double> share(k);
  const std::vector<double> boost = Boosts();
  double total_share = 0;
  for (size_t s = 0; s < k; ++s) {
    share[s] =
        static_cast<double>(members_[s].size()) / static_cast<double>(size_);
    if (max_boost_ > 0) {
      // Weighted sampling without replacement: each example left weighs
      // its stratum's boost, so a boosted stratum drains faster but in
      // proportion to what it has left (it is never emptied early
      // and then missing from the rest of the epoch).
      const int64_t left = static_cast<int64_t>(members_[s].size()) - taken_[s];
      share[s] = static_cast<double>(left) * boost[s];
    }
    total_share += share[s];
  }
  if (max_boost_ > 0 && total_share > 0)
    for (double& x : share) x /= total_share;
  return share;
}

// How many of each stratum a batch of b (< the examples left) takes: the
// floor of its quota, then largest remainders; the running carry keeps
// each stratum at its exact share over the epoch.
std::vector<int64_t> StratifiedSampler::TakeCounts(int64_t b) {
  const size_t k = members_.size();
  std::vector<int64_t> take(k, 0);
  std::vector<double> quota(k), deficit(k);
  const std::vector<double> share = Shares();
  int64_t given = 0;
  for (size_t s = 0; s < k; ++s) {
    const int64_t avail = static_cast<int64_t>(members_[s].size()) - taken_[s];
    quota[s] = max_boost_ > 0 ? static_cast<double>(b) * share[s]
                              : static_cast<double>(b) *
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
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return deficit[x] > deficit[y]; });
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
  return take;
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
    take = TakeCounts(b);
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
  return CeilBatches(size_, batch_size);
}

ClassRotationSampler::ClassRotationSampler(std::vector<int64_t> indices,
                                           std::vector<int64_t> classes,
                                           uint64_t seed)
    : seed_(seed) {
  STRATA_CHECK(indices.size() == classes.size());
  std::map<int64_t, size_t> slot;
  for (int64_t c : classes) slot.emplace(c, 0);
  size_t next = 0;
  for (auto& [value, index] : slot) index = next++;
  originals_.resize(slot.size());
  for (size_t i = 0; i < indices.size(); ++i)
    originals_[slot[classes[i]]].push_back(indices[i]);
  size_ = static_cast<int64_t>(indices.size());
  StartEpoch();
}

void ClassRotationSampler::StartEpoch() {
  const size_t k = originals_.size();
  members_ = originals_;
  for (size_t c = 0; c < k; ++c) {
    std::mt19937_64 rng(Mix(Mix(seed_, static_cast<uint64_t>(epoch_)), c));
    Shuffle(&members_[c], rng);
  }
  std::vector<int64_t> cycle(k);
  for (size_t c = 0; c < k; ++c) cycle[c] = static_cast<int64_t>(c);
  std::mt19937_64 rng(
      Mix(seed_ ^ 0x27d4eb2fULL, static_cast<uint64_t>(epoch_)));
  Shuffle(&cycle, rng);
  cycle_.assign(cycle.begin(), cycle.end());
  taken_.assign(k, 0);
  cycle_pos_ = 0;
  position_ = 0;
}

int64_t ClassRotationSampler::Next(int64_t batch_size,
                                   std::vector<int64_t>* out) {
  STRATA_CHECK(batch_size > 0);
  const int64_t epoch = epoch_;
  const int64_t b = std::min(batch_size, size_ - position_);
  out->clear();
  out->reserve(static_cast<size_t>(b));
  // Walk the cycle; b < remaining guarantees a class with examples left.
  while (static_cast<int64_t>(out->size()) < b) {
    const size_t c = cycle_[cycle_pos_];
    cycle_pos_ = (cycle_pos_ + 1) % cycle_.size();
    if (taken_[c] < static_cast<int64_t>(members_[c].size()))
      out->push_back(members_[c][static_cast<size_t>(taken_[c]++)]);
  }
  position_ += b;
  epoch_finished_ = position_ == size_;
  if (epoch_finished_) {
    ++epoch_;
    StartEpoch();
  }
  return epoch;
}

int64_t ClassRotationSampler::BatchesPerEpoch(int64_t batch_size) const {
  return CeilBatches(size_, batch_size);
}

nlohmann::json ClassRotationSampler::SaveState() const {
  return {{"sampler", "class-rotation"},
          {"classes", originals_.size()},
          {"epoch", epoch_},
          {"position", position_},
          {"epoch_finished", epoch_finished_},
          {"taken", taken_},
          {"cycle_pos", cycle_pos_}};
}

Status ClassRotationSampler::RestoreState(const nlohmann::json& state) {
  std::string name;
  size_t classes = 0, cycle_pos = 0;
  int64_t epoch = 0, position = 0;
  bool finished = false;
  std::vector<int64_t> taken;
  if (!Field(state, "sampler", &name) || name != "class-rotation")
    return BadState("class-rotation", "saved by another sampler");
  if (!Field(state, "classes", &classes) || classes != originals_.size() ||
      !Field(state, "epoch", &epoch) || !Field(state, "position", &position) ||
      !Field(state, "epoch_finished", &finished) ||
      !Field(state, "taken", &taken) ||
      !Field(state, "cycle_pos", &cycle_pos) || epoch < 0 ||
      taken.size() != classes || (classes > 0 && cycle_pos >= classes)) {
    return BadState("class-rotation", "a field is missing or out of range");
  }
  RETURN_IF_ERROR(CheckTaken("class-rotation", taken, originals_, position));
  epoch_ = epoch;
  StartEpoch();
  taken_ = taken;
  cycle_pos_ = cycle_pos;
  position_ = position;
  epoch_finished_ = finished;
  return Status::Ok();
}

Result<SamplerKind> ParseSamplerKind(const std::string& name) {
  for (SamplerKind k : {SamplerKind::kShuffle, SamplerKind::kStratified,
                        SamplerKind::kClusterStratified,
                        SamplerKind::kLossAware, SamplerKind::kClassRotation}) {
    if (name == SamplerKindName(k)) return k;
  }
  return Status::InvalidArgument(
      "unknown sampler '{}' (shuffle, stratified, cluster-stratified, "
      "loss-aware or class-rotation)",
      name);
}

const char* SamplerKindName(SamplerKind kind) {
  switch (kind) {
    case SamplerKind::kShuffle:
      return "shuffle";
    case SamplerKind::kStratified:
      return "stratified";
    case SamplerKind::kClusterStratified:
      return "cluster-stratified";
    case SamplerKind::kLossAware:
      return "loss-aware";
    case SamplerKind::kClassRotation:
      return "class-rotation";
  }
  return "shuffle";
}

Result<std::unique_ptr<BatchSampler>> MakeBatchSampler(
    const std::string& name, std::vector<int64_t> indices,
    const std::vector<int64_t>& labels, const std::vector<int32_t>& cluster_ids,
    uint64_t seed, bool shuffle, double max_boost) {
  ASSIGN_OR_RETURN(SamplerKind kind, ParseSamplerKind(name));
  return MakeBatchSampler(kind, std::move(indices), labels, cluster_ids, seed,
                          shuffle, max_boost);
}

Result<std::unique_ptr<BatchSampler>> MakeBatchSampler(
    SamplerKind kind, std::vector<int64_t> indices,
    const std::vector<int64_t>& labels, const std::vector<int32_t>& cluster_ids,
    uint64_t seed, bool shuffle, double max_boost) {
  const char* name = SamplerKindName(kind);
  if (kind == SamplerKind::kShuffle) {
    return std::unique_ptr<BatchSampler>(
        new ShuffleSampler(std::move(indices), seed, shuffle));
  }
  if (kind == SamplerKind::kLossAware && !(max_boost >= 1)) {
    return Status::InvalidArgument(
        "loss-aware sampler: max_boost = {} must be >= 1", max_boost);
  }
  const bool clusters = UsesClusters(kind) && !cluster_ids.empty();
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
  if (kind == SamplerKind::kClassRotation) {
    return std::unique_ptr<BatchSampler>(
        new ClassRotationSampler(std::move(indices), std::move(stratum), seed));
  }
  return std::unique_ptr<BatchSampler>(
      new StratifiedSampler(std::move(indices), std::move(stratum), seed,
                            kind == SamplerKind::kLossAware ? max_boost : 0.0));
}

}  // namespace strata

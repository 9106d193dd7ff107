#include "data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "data/readers.h"

namespace strata {
namespace {

// Each centre coordinate is drawn from N(0, (kCentreSpread * separation)^2
// / dim), so a centre lies about kCentreSpread * separation noise units from
// the origin and two centres about sqrt(2) times that apart, whatever the
// dimension. Trade-off, measured on the defaults (10 classes x 3
// sub-clusters, dim 64, noise 1, separation 1.5, 20000 train, 4000 val):
// the nearest of 3 k-means centroids per class classifies 97% of the
// validation set, a single mean per class only 75% (each class is a union
// of scattered blobs), and a 64-128-10 ReLU MLP with plain SGD (lr 0.05,
// batch 64, standardised inputs) goes 9% -> 78% after one epoch and 90%
// after five. With spread 2 the best possible accuracy is ~80% and the MLP
// reaches only 65% in five epochs; 2.5 gives 93% / 80%.
constexpr double kCentreSpread = 3.0;
constexpr double kTwoPi = 6.283185307179586476925286766559;

// SplitMix64: turns (seed, stream) into well-mixed, independent seeds so the
// centres, the train split and the val split each have their own stream
// (changing val_size does not change the training set).
uint64_t MixSeed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (stream + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Standard normal samples by Box-Muller. Written out (rather than
// std::normal_distribution, whose algorithm is implementation-defined) so a
// seed gives the same data with any standard library.
class NormalSampler {
 public:
  explicit NormalSampler(uint64_t seed) : rng_(seed) {}
  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    // u1 in (0, 1] so log(u1) is finite; 53 random bits each.
    double u1 = ((rng_() >> 11) + 1) * (1.0 / 9007199254740992.0);
    double u2 = (rng_() >> 11) * (1.0 / 9007199254740992.0);
    double r = std::sqrt(-2.0 * std::log(u1));
    double theta = kTwoPi * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  std::mt19937_64 rng_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// Splits `total` into parts proportional to `weights` (largest remainder),
// each at least `min_each` (the caller guarantees total >= n * min_each).
std::vector<int64_t> Apportion(int64_t total,
                               const std::vector<double>& weights,
                               int64_t min_each) {
  const size_t k = weights.size();
  double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> parts(k);
  std::vector<double> remainder(k);
  int64_t assigned = 0;
  for (size_t i = 0; i < k; ++i) {
    double quota = total * weights[i] / sum;
    parts[i] = std::max<int64_t>(min_each, static_cast<int64_t>(quota));
    remainder[i] = quota - std::floor(quota);
    assigned += parts[i];
  }
  std::vector<size_t> order(k);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return remainder[a] > remainder[b];
  });
  for (size_t j = 0; assigned < total; j = (j + 1) % k) {
    ++parts[order[j]];
    ++assigned;
  }
  while (assigned > total) {  // only when min_each pushed parts up
    size_t largest =
        std::max_element(parts.begin(), parts.end()) - parts.begin();
    --parts[largest];
    --assigned;
  }
  return parts;
}

// Draws one split: class sizes from `class_weights`, sub-clusters filled
// round-robin within a class, then the example order shuffled so that no
// reader can rely on the data being grouped by class.
Dataset DrawSplit(const SyntheticOptions& o, const Dataset& shape,
                  const std::vector<double>& centres,
                  const std::vector<double>& class_weights, int64_t size,
                  int64_t min_per_class, uint64_t seed) {
  NormalSampler normal(seed);
  Dataset d = shape;
  std::vector<int64_t> class_sizes =
      Apportion(size, class_weights, min_per_class);
  std::vector<int64_t> cluster;  // global sub-cluster id per example
  cluster.reserve(size);
  for (int64_t c = 0; c < o.classes; ++c) {
    for (int64_t i = 0; i < class_sizes[c]; ++i) {
      cluster.push_back(c * o.subclusters + i % o.subclusters);
    }
  }
  for (int64_t i = size - 1; i > 0; --i) {
    // Modulo bias is below 2^-40 for any realistic size.
    int64_t j =
        static_cast<int64_t>(normal.rng()() % static_cast<uint64_t>(i + 1));
    std::swap(cluster[i], cluster[j]);
  }
  const int64_t dim = d.example_size();
  d.labels.resize(size);
  d.features.resize(size * dim);
  for (int64_t i = 0; i < size; ++i) {
    d.labels[i] = cluster[i] / o.subclusters;
    const double* centre = centres.data() + cluster[i] * dim;
    float* x = d.features.data() + i * dim;
    for (int64_t j = 0; j < dim; ++j) {
      x[j] = static_cast<float>(centre[j] + o.noise * normal.Next());
    }
  }
  return d;
}

Status Validate(const SyntheticOptions& o) {
  if (o.classes < 2) {
    return Status::InvalidArgument(
        "synthetic option 'classes' must be >= 2, got {}", o.classes);
  }
  if (o.subclusters < 1) {
    return Status::InvalidArgument(
        "synthetic option 'subclusters' must be >= 1, got {}", o.subclusters);
  }
  if (!(o.imbalance >= 1.0) || !std::isfinite(o.imbalance)) {
    return Status::InvalidArgument(
        "synthetic option 'imbalance' must be a finite number >= 1 (largest "
        "/ smallest class), got {}",
        o.imbalance);
  }
  if (o.shape.empty() && o.dim < 1) {
    return Status::InvalidArgument(
        "synthetic option 'dim' must be >= 1, got {}", o.dim);
  }
  if (!(o.noise >= 0.0) || !std::isfinite(o.noise)) {
    return Status::InvalidArgument(
        "synthetic option 'noise' must be a finite number >= 0, got {}",
        o.noise);
  }
  if (!(o.separation > 0.0) || !std::isfinite(o.separation)) {
    return Status::InvalidArgument(
        "synthetic option 'separation' must be a finite number > 0, got {}",
        o.separation);
  }
  if (o.train_size < o.classes) {
    return Status::InvalidArgument(
        "synthetic option 'train_size' ({}) must be >= 'classes' ({}) so "
        "every class has a training example",
        o.train_size, o.classes);
  }
  if (o.val_size < 0) {
    return Status::InvalidArgument(
        "synthetic option 'val_size' must be >= 0, got {}", o.val_size);
  }
  return Status::Ok();
}

}  // namespace

Result<DatasetSplits> MakeSynthetic(const SyntheticOptions& options) {
  RETURN_IF_ERROR(Validate(options));
  Dataset shape;
  shape.name = "synthetic";
  shape.num_classes = options.classes;
  if (options.shape.empty()) {
    shape.width = options.dim;
  } else {
    Status st =
        ParseShape(options.shape, &shape.channels, &shape.height, &shape.width);
    if (!st.ok()) return st.WithContext("synthetic option 'shape'");
  }
  const int64_t dim = shape.example_size();

  std::vector<double> centres(options.classes * options.subclusters * dim);
  NormalSampler normal(MixSeed(options.seed, 0));
  const double spread = kCentreSpread * options.separation / std::sqrt(dim);
  for (double& v : centres) v = spread * normal.Next();

  // Class c gets weight imbalance^(-c / (classes - 1)): class 0 is the
  // largest, the last class `imbalance` times smaller.
  std::vector<double> weights(options.classes);
  for (int64_t c = 0; c < options.classes; ++c) {
    weights[c] = std::pow(options.imbalance,
                          -static_cast<double>(c) / (options.classes - 1));
  }
  DatasetSplits splits;
  splits.train = DrawSplit(options, shape, centres, weights, options.train_size,
                           1, MixSeed(options.seed, 1));
  // The validation split follows the same class distribution as training.
  splits.val = DrawSplit(options, shape, centres, weights, options.val_size,
                         options.val_size >= options.classes ? 1 : 0,
                         MixSeed(options.seed, 2));
  return splits;
}

}  // namespace strata

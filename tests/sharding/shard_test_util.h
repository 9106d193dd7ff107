#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "data/dataset.h"

namespace strata::testing {

// A dataset whose features do not matter: labels drawn with skewed class
// frequencies (class c about (c + 1) times as common as class 0).
inline Dataset SkewedLabels(int64_t n, int64_t classes, uint64_t seed) {
  Dataset d;
  d.name = "labels";
  d.num_classes = classes;
  d.labels.resize(n);
  d.features.resize(n);
  std::mt19937_64 rng(seed);
  const int64_t total = classes * (classes + 1) / 2;
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = static_cast<int64_t>(rng() % total), c = 0;
    while (r >= c + 1) r -= c + 1, ++c;
    d.labels[i] = c;
    d.features[i] = static_cast<float>(i);
  }
  return d;
}

// Gaussian blobs: blob b has sizes[b] points around a centre drawn with
// spread `separation`, noise 1, dimension `dim`; labels are blob % classes.
// *blob_of (if given) receives each point's blob.
inline Dataset Blobs(const std::vector<int64_t>& sizes, int64_t dim,
                     double separation, int64_t classes, uint64_t seed,
                     std::vector<int64_t>* blob_of = nullptr) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::vector<double>> centre(sizes.size(),
                                          std::vector<double>(dim));
  for (auto& c : centre)
    for (double& v : c) v = separation * normal(rng);
  Dataset d;
  d.name = "blobs";
  d.width = dim;
  d.num_classes = classes;
  for (size_t b = 0; b < sizes.size(); ++b) {
    for (int64_t i = 0; i < sizes[b]; ++i) {
      for (int64_t j = 0; j < dim; ++j)
        d.features.push_back(static_cast<float>(centre[b][j] + normal(rng)));
      d.labels.push_back(static_cast<int64_t>(b) % classes);
      if (blob_of != nullptr) blob_of->push_back(static_cast<int64_t>(b));
    }
  }
  // Interleave the blobs so nothing depends on the input order.
  const int64_t n = d.size();
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[rng() % (i + 1)]);
  Dataset s = d;
  std::vector<int64_t> blobs;
  for (int64_t i = 0; i < n; ++i) {
    s.labels[i] = d.labels[perm[i]];
    std::copy(d.features.begin() + perm[i] * dim,
              d.features.begin() + (perm[i] + 1) * dim,
              s.features.begin() + i * dim);
    if (blob_of != nullptr) blobs.push_back((*blob_of)[perm[i]]);
  }
  if (blob_of != nullptr) *blob_of = blobs;
  return s;
}

}  // namespace strata::testing

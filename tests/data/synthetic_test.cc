#include "data/synthetic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "data/test_util.h"

namespace strata {
namespace {

using ::strata::testing::ContainsAll;

std::vector<int64_t> ClassCounts(const Dataset& d) {
  std::vector<int64_t> counts(d.num_classes, 0);
  for (int64_t label : d.labels) ++counts[label];
  return counts;
}

TEST(SyntheticTest, DefaultsHaveTheDocumentedShape) {
  auto s = MakeSynthetic(SyntheticOptions{});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->train.name, "synthetic");
  EXPECT_EQ(s->train.size(), 20000);
  EXPECT_EQ(s->val.size(), 4000);
  for (const Dataset* d : {&s->train, &s->val}) {
    EXPECT_EQ(d->channels, 1);
    EXPECT_EQ(d->height, 1);
    EXPECT_EQ(d->width, 64);
    EXPECT_EQ(d->num_classes, 10);
    EXPECT_EQ(d->features.size(), static_cast<size_t>(d->size()) * 64);
    for (int64_t n : ClassCounts(*d)) EXPECT_EQ(n, d->size() / 10);
  }
  // Shuffled, not grouped by class.
  std::set<int64_t> first_labels(s->train.labels.begin(),
                                 s->train.labels.begin() + 100);
  EXPECT_GT(first_labels.size(), 5u);
}

TEST(SyntheticTest, SameSeedSameDataOtherSeedOtherData) {
  SyntheticOptions o;
  o.train_size = 2000;
  o.val_size = 500;
  auto a = MakeSynthetic(o);
  auto b = MakeSynthetic(o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->train.features, b->train.features);
  EXPECT_EQ(a->train.labels, b->train.labels);
  EXPECT_EQ(a->val.features, b->val.features);
  EXPECT_EQ(a->val.labels, b->val.labels);

  o.seed = 8;
  auto c = MakeSynthetic(o);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->train.features, c->train.features);

  // The training split does not depend on the validation size.
  o.seed = 7;
  o.val_size = 100;
  auto d = MakeSynthetic(o);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(a->train.features, d->train.features);
}

TEST(SyntheticTest, ImbalanceRatioRespected) {
  SyntheticOptions o;
  o.imbalance = 10.0;
  o.val_size = 2000;
  auto s = MakeSynthetic(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<int64_t> counts = ClassCounts(s->train);
  int64_t total = 0;
  for (size_t c = 0; c < counts.size(); ++c) {
    total += counts[c];
    if (c > 0) {
      EXPECT_LE(counts[c], counts[c - 1]);  // geometric fall
    }
  }
  EXPECT_EQ(total, 20000);
  auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
  EXPECT_NEAR(static_cast<double>(*hi) / *lo, 10.0, 0.1);
  std::vector<int64_t> val_counts = ClassCounts(s->val);
  EXPECT_NEAR(static_cast<double>(val_counts[0]) / val_counts[9], 10.0, 0.5);
}

TEST(SyntheticTest, ExtremeImbalanceKeepsEveryClass) {
  SyntheticOptions o;
  o.classes = 5;
  o.imbalance = 1e6;
  o.train_size = 50;
  o.val_size = 3;
  auto s = MakeSynthetic(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->train.size(), 50);
  for (int64_t n : ClassCounts(s->train)) EXPECT_GE(n, 1);
  EXPECT_EQ(s->val.size(), 3);
}

TEST(SyntheticTest, ImageShapeOption) {
  SyntheticOptions o;
  o.shape = "3x8x8";
  o.train_size = 300;
  o.val_size = 30;
  auto s = MakeSynthetic(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->train.channels, 3);
  EXPECT_EQ(s->train.height, 8);
  EXPECT_EQ(s->train.width, 8);
  EXPECT_EQ(s->val.channels, 3);
  EXPECT_EQ(s->train.features.size(), 300u * 192);
  EXPECT_EQ(s->val.features.size(), 30u * 192);
}

TEST(SyntheticTest, InvalidOptionsNameTheOption) {
  struct Case {
    const char* option;
    void (*set)(SyntheticOptions&);
  };
  const Case cases[] = {
      {"classes", [](SyntheticOptions& o) { o.classes = 1; }},
      {"subclusters", [](SyntheticOptions& o) { o.subclusters = 0; }},
      {"imbalance", [](SyntheticOptions& o) { o.imbalance = 0.5; }},
      {"dim", [](SyntheticOptions& o) { o.dim = 0; }},
      {"shape", [](SyntheticOptions& o) { o.shape = "3x8"; }},
      {"noise", [](SyntheticOptions& o) { o.noise = -1; }},
      {"separation", [](SyntheticOptions& o) { o.separation = 0; }},
      {"train_size", [](SyntheticOptions& o) { o.train_size = 9; }},
      {"val_size", [](SyntheticOptions& o) { o.val_size = -1; }},
  };
  for (const Case& c : cases) {
    SyntheticOptions o;
    c.set(o);
    auto s = MakeSynthetic(o);
    ASSERT_FALSE(s.ok()) << c.option;
    EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument) << c.option;
    EXPECT_TRUE(
        ContainsAll(s.status().message(), {std::string("'") + c.option + "'"}));
  }
}

// Squared distance between two vectors of `dim` floats.
double Distance2(const float* a, const float* b, int64_t dim) {
  double d = 0;
  for (int64_t j = 0; j < dim; ++j) d += (a[j] - b[j]) * (a[j] - b[j]);
  return d;
}

// Fits `k` centroids per class by a few rounds of k-means on the training
// split and returns the validation accuracy of the nearest centroid. With
// k = 1 this is the linear nearest-class-mean classifier.
double NearestCentroidAccuracy(const DatasetSplits& s, int k) {
  const int64_t dim = s.train.example_size();
  const int64_t classes = s.train.num_classes;
  std::vector<float> centroids(classes * k * dim);
  for (int64_t c = 0; c < classes; ++c) {
    std::vector<int64_t> members;
    for (int64_t i = 0; i < s.train.size(); ++i) {
      if (s.train.labels[i] == c) members.push_back(i);
    }
    float* cent = centroids.data() + c * k * dim;
    for (int j = 0; j < k; ++j) {  // seed with spread-out members
      std::copy_n(s.train.example(members[j * members.size() / k]), dim,
                  cent + j * dim);
    }
    for (int round = 0; round < 10; ++round) {
      std::vector<double> sum(k * dim, 0.0);
      std::vector<int64_t> n(k, 0);
      for (int64_t i : members) {
        int best = 0;
        double best_d = 1e300;
        for (int j = 0; j < k; ++j) {
          double d = Distance2(s.train.example(i), cent + j * dim, dim);
          if (d < best_d) best_d = d, best = j;
        }
        ++n[best];
        for (int64_t q = 0; q < dim; ++q)
          sum[best * dim + q] += s.train.example(i)[q];
      }
      for (int j = 0; j < k; ++j) {
        if (n[j] == 0) continue;
        for (int64_t q = 0; q < dim; ++q)
          cent[j * dim + q] = sum[j * dim + q] / n[j];
      }
    }
  }
  int64_t correct = 0;
  for (int64_t i = 0; i < s.val.size(); ++i) {
    int64_t best = 0;
    double best_d = 1e300;
    for (int64_t q = 0; q < classes * k; ++q) {
      double d = Distance2(s.val.example(i), centroids.data() + q * dim, dim);
      if (d < best_d) best_d = d, best = q / k;
    }
    correct += best == s.val.labels[i];
  }
  return static_cast<double>(correct) / s.val.size();
}

// The default problem must be learnable but not trivial: a model that can
// find the hidden sub-clusters does far better than chance (10%), while a
// single mean per class (a linear rule) is clearly worse, leaving room for
// training to show progress.
TEST(SyntheticTest, DefaultProblemIsLearnableButNotTrivial) {
  auto s = MakeSynthetic(SyntheticOptions{});
  ASSERT_TRUE(s.ok());
  double per_class_mean = NearestCentroidAccuracy(*s, 1);
  double subclusters = NearestCentroidAccuracy(*s, 3);
  RecordProperty("nearest_class_mean_accuracy", std::to_string(per_class_mean));
  RecordProperty("nearest_subcluster_accuracy", std::to_string(subclusters));
  std::printf("nearest class mean %.3f, nearest of 3 k-means centroids %.3f\n",
              per_class_mean, subclusters);
  EXPECT_GT(subclusters, 0.85);
  EXPECT_LT(subclusters, 0.995);
  EXPECT_GT(per_class_mean, 0.2);
  EXPECT_LT(per_class_mean, subclusters - 0.1);
}

}  // namespace
}  // namespace strata

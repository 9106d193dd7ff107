#include "data/transforms.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "data/synthetic.h"

namespace strata {
namespace {

TEST(StandardizeTest, ComputeStatsThenStandardizeGivesZeroMeanUnitStd) {
  SyntheticOptions o;
  o.shape = "3x4x4";
  o.train_size = 2000;
  o.val_size = 10;
  auto s = MakeSynthetic(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Dataset d = std::move(s->train);
  // Give each channel its own offset and scale so the test means something.
  const int64_t plane = 16;
  for (int64_t i = 0; i < d.size(); ++i) {
    float* x = d.features.data() + i * d.example_size();
    for (int64_t ch = 0; ch < 3; ++ch) {
      for (int64_t j = 0; j < plane; ++j) {
        x[ch * plane + j] = x[ch * plane + j] * (ch + 1) * 0.3f + ch * 5 - 2;
      }
    }
  }
  ChannelStats before = ComputeStats(d);
  ASSERT_EQ(before.mean.size(), 3u);
  EXPECT_NEAR(before.mean[2], 8.0, 0.5);
  Standardize(d, before);
  ChannelStats after = ComputeStats(d);
  for (int ch = 0; ch < 3; ++ch) {
    EXPECT_NEAR(after.mean[ch], 0.0, 1e-4) << ch;
    EXPECT_NEAR(after.std[ch], 1.0, 1e-4) << ch;
  }
}

TEST(StandardizeTest, ConstantChannelKeepsUnitStd) {
  Dataset d;
  d.channels = 2;
  d.width = 2;
  d.labels = {0, 1};
  d.features = {3, 3, 1, 2, 3, 3, 3, 4};
  ChannelStats st = ComputeStats(d);
  EXPECT_FLOAT_EQ(st.mean[0], 3.0f);
  EXPECT_FLOAT_EQ(st.std[0], 1.0f);
  EXPECT_FLOAT_EQ(st.mean[1], 2.5f);
  EXPECT_NEAR(st.std[1], std::sqrt(1.25), 1e-6);
  Standardize(d, st);
  for (float v : d.features) EXPECT_TRUE(std::isfinite(v));
  EXPECT_FLOAT_EQ(d.features[0], 0.0f);
}

TEST(StandardizeTest, PublishedStatsByName) {
  Dataset d;
  d.name = "mnist";
  ChannelStats st = DatasetStats(d);
  EXPECT_EQ(st.mean, std::vector<float>{0.1307f});
  EXPECT_EQ(st.std, std::vector<float>{0.3081f});
  d.name = "fashion-mnist";
  st = DatasetStats(d);
  EXPECT_EQ(st.mean, std::vector<float>{0.2860f});
  EXPECT_EQ(st.std, std::vector<float>{0.3530f});
  d.channels = 3;
  d.name = "cifar10";
  st = DatasetStats(d);
  EXPECT_EQ(st.mean, (std::vector<float>{0.4914f, 0.4822f, 0.4465f}));
  EXPECT_EQ(st.std, (std::vector<float>{0.2470f, 0.2435f, 0.2616f}));
  d.name = "cifar100";
  st = DatasetStats(d);
  EXPECT_EQ(st.mean, (std::vector<float>{0.5071f, 0.4865f, 0.4409f}));
  EXPECT_EQ(st.std, (std::vector<float>{0.2673f, 0.2564f, 0.2762f}));
}

TEST(StandardizeTest, UnknownNameIsMeasured) {
  Dataset d;
  d.name = "synthetic";
  d.width = 2;
  d.labels = {0, 1};
  d.features = {1, 3, 5, 7};
  ChannelStats st = DatasetStats(d);
  EXPECT_FLOAT_EQ(st.mean[0], 4.0f);
  EXPECT_NEAR(st.std[0], std::sqrt(5.0), 1e-6);
  // A known name with the wrong channel count is not that dataset.
  d.name = "cifar10";
  st = DatasetStats(d);
  EXPECT_FLOAT_EQ(st.mean[0], 4.0f);
}

// 2 x 3 x 4 example holding 1..24 (no zeros, so padding is recognisable).
std::vector<float> Example() {
  std::vector<float> x(24);
  std::iota(x.begin(), x.end(), 1.0f);
  return x;
}

// The crop-then-flip the augmentation is documented to perform.
std::vector<float> Expected(const std::vector<float>& in, int64_t c, int64_t h,
                            int64_t w, int64_t dy, int64_t dx, bool flip) {
  std::vector<float> out(in.size());
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        int64_t sy = y + dy, sx = (flip ? w - 1 - x : x) + dx;
        out[(ch * h + y) * w + x] = (sy >= 0 && sy < h && sx >= 0 && sx < w)
                                        ? in[(ch * h + sy) * w + sx]
                                        : 0.0f;
      }
    }
  }
  return out;
}

TEST(TransformTest, NoPaddingGivesIdentityOrMirror) {
  const std::vector<float> in = Example();
  const std::vector<float> mirror = Expected(in, 2, 3, 4, 0, 0, true);
  std::mt19937_64 rng(1);
  std::vector<float> scratch(24);
  int identity = 0, mirrored = 0;
  for (int t = 0; t < 200; ++t) {
    std::vector<float> x = in;
    AugmentExample(x.data(), 2, 3, 4, 0, rng, scratch.data());
    if (x == in) {
      ++identity;
    } else {
      ASSERT_EQ(x, mirror) << "draw " << t;
      ++mirrored;
    }
  }
  EXPECT_GT(identity, 60);
  EXPECT_GT(mirrored, 60);
}

TEST(TransformTest, PaddedCropIsAShiftedPossiblyMirroredCopy) {
  const std::vector<float> in = Example();
  std::mt19937_64 rng(2);
  std::vector<float> scratch(24);
  std::vector<int> seen(5 * 5 * 2, 0);
  for (int t = 0; t < 500; ++t) {
    std::vector<float> x = in;
    AugmentExample(x.data(), 2, 3, 4, 2, rng, scratch.data());
    int match = -1;
    for (int dy = -2; dy <= 2 && match < 0; ++dy) {
      for (int dx = -2; dx <= 2 && match < 0; ++dx) {
        for (int flip = 0; flip < 2 && match < 0; ++flip) {
          if (x == Expected(in, 2, 3, 4, dy, dx, flip == 1)) {
            match = ((dy + 2) * 5 + (dx + 2)) * 2 + flip;
          }
        }
      }
    }
    ASSERT_GE(match, 0) << "draw " << t << " is no crop/flip of the input";
    ++seen[match];
    // Every non-padding value comes from the input, and no value repeats.
    std::vector<int> count(25, 0);
    for (float v : x) ++count[static_cast<int>(v)];
    for (int v = 1; v <= 24; ++v) EXPECT_LE(count[v], 1);
  }
  int distinct = 0;
  for (int n : seen) distinct += n > 0;
  EXPECT_GT(distinct, 40);  // nearly all 50 crop/flip combinations occur
}

TEST(TransformTest, SameSeedSameAugmentation) {
  std::mt19937_64 a(9), b(9);
  std::vector<float> scratch(24);
  for (int t = 0; t < 20; ++t) {
    std::vector<float> x = Example(), y = Example();
    AugmentExample(x.data(), 2, 3, 4, 1, a, scratch.data());
    AugmentExample(y.data(), 2, 3, 4, 1, b, scratch.data());
    EXPECT_EQ(x, y);
  }
}

}  // namespace
}  // namespace strata

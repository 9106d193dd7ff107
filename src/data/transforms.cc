#include "data/transforms.h"

#include <cmath>
#include <cstring>

namespace strata {
namespace {

// Published statistics (of the [0, 1]-scaled training sets), so every run
// standardises identically whatever subset a worker holds.
struct KnownStats {
  const char* name;
  std::vector<float> mean;
  std::vector<float> std;
};

const std::vector<KnownStats>& Known() {
  static const std::vector<KnownStats> kKnown = {
      {"mnist", {0.1307f}, {0.3081f}},
      {"fashion-mnist", {0.2860f}, {0.3530f}},
      {"cifar10", {0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}},
      {"cifar100", {0.5071f, 0.4865f, 0.4409f}, {0.2673f, 0.2564f, 0.2762f}},
  };
  return kKnown;
}

}  // namespace

ChannelStats DatasetStats(const Dataset& train) {
  for (const KnownStats& k : Known()) {
    // A known name with another channel count is not that dataset (e.g. a
    // user-built variant); fall through to measuring it.
    if (train.name == k.name &&
        static_cast<int64_t>(k.mean.size()) == train.channels) {
      return ChannelStats{k.mean, k.std};
    }
  }
  return ComputeStats(train);
}

ChannelStats ComputeStats(const Dataset& data) {
  const int64_t c = data.channels;
  const int64_t plane = data.height * data.width;
  ChannelStats stats;
  stats.mean.assign(c, 0.0f);
  stats.std.assign(c, 1.0f);
  const int64_t n = data.size();
  if (n == 0 || plane == 0) return stats;
  for (int64_t ch = 0; ch < c; ++ch) {
    // Two passes in double: the one-pass sum-of-squares formula loses most
    // of its digits on 10^8 values near 0.5.
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const float* p = data.example(i) + ch * plane;
      for (int64_t j = 0; j < plane; ++j) sum += p[j];
    }
    const double mean = sum / (static_cast<double>(n) * plane);
    double sq = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const float* p = data.example(i) + ch * plane;
      for (int64_t j = 0; j < plane; ++j) sq += (p[j] - mean) * (p[j] - mean);
    }
    const double std = std::sqrt(sq / (static_cast<double>(n) * plane));
    stats.mean[ch] = static_cast<float>(mean);
    // A constant channel keeps std 1 so standardising it cannot divide by 0.
    stats.std[ch] = std > 1e-12 ? static_cast<float>(std) : 1.0f;
  }
  return stats;
}

void Standardize(Dataset& data, const ChannelStats& stats) {
  STRATA_CHECK(static_cast<int64_t>(stats.mean.size()) == data.channels);
  STRATA_CHECK(static_cast<int64_t>(stats.std.size()) == data.channels);
  const int64_t plane = data.height * data.width;
  for (int64_t i = 0; i < data.size(); ++i) {
    float* x = data.features.data() + i * data.example_size();
    for (int64_t ch = 0; ch < data.channels; ++ch) {
      const float mean = stats.mean[ch];
      const float inv_std = 1.0f / stats.std[ch];
      float* p = x + ch * plane;
      for (int64_t j = 0; j < plane; ++j) p[j] = (p[j] - mean) * inv_std;
    }
  }
}

void AugmentExample(float* example, int64_t c, int64_t h, int64_t w, int pad,
                    std::mt19937_64& rng, float* scratch) {
  // Raw rng() draws rather than std::uniform_int_distribution, whose
  // algorithm differs between standard libraries: a seed must give the same
  // augmentation everywhere. The modulo bias is negligible for small ranges.
  const uint64_t range = 2 * static_cast<uint64_t>(pad) + 1;
  const int64_t dy = static_cast<int64_t>(rng() % range) - pad;
  const int64_t dx = static_cast<int64_t>(rng() % range) - pad;
  const bool flip = (rng() >> 63) != 0;
  if (dy == 0 && dx == 0 && !flip) return;
  // Output pixel (y, x) is input pixel (y + dy, x' + dx), where x' is x or
  // its mirror; outside the input is the zero padding (the channel mean
  // once the data is standardised).
  for (int64_t ch = 0; ch < c; ++ch) {
    const float* in = example + ch * h * w;
    float* out = scratch + ch * h * w;
    for (int64_t y = 0; y < h; ++y) {
      const int64_t sy = y + dy;
      for (int64_t x = 0; x < w; ++x) {
        const int64_t sx = (flip ? w - 1 - x : x) + dx;
        out[y * w + x] =
            (sy >= 0 && sy < h && sx >= 0 && sx < w) ? in[sy * w + sx] : 0.0f;
      }
    }
  }
  std::memcpy(example, scratch, sizeof(float) * c * h * w);
}

}  // namespace strata

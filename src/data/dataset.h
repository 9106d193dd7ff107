#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace strata {

// An in-memory classification dataset: N examples of shape C x H x W (a flat
// vector is 1 x 1 x D), float32 features row-major, int64 labels in
// [0, num_classes). Image sources are scaled to [0, 1] when read; the
// per-channel standardisation is a separate step (Standardize). No LibTorch
// here: the trainer wraps the buffers in tensors without copying.
// Thread-compatible: concurrent const access is safe.
struct Dataset {
  std::string name;
  int64_t channels = 1;
  int64_t height = 1;
  int64_t width = 1;
  int64_t num_classes = 0;
  std::vector<float> features;         // size() * example_size()
  std::vector<int64_t> labels;         // size()
  std::vector<int64_t> coarse_labels;  // CIFAR-100 only (0..19), else empty

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t example_size() const { return channels * height * width; }
  const float* example(int64_t i) const {
    return features.data() + i * example_size();
  }
};

// A training split and a validation split with the same shape and classes.
struct DatasetSplits {
  Dataset train;
  Dataset val;
};

// Per-channel mean and standard deviation.
struct ChannelStats {
  std::vector<float> mean;
  std::vector<float> std;
};

}  // namespace strata

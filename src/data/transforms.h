#pragma once

#include <cstdint>
#include <random>

#include "data/dataset.h"

namespace strata {

// Standardisation and augmentation. Thread-compatible.

// The published per-channel statistics for known datasets ("mnist",
// "fashion-mnist", "cifar10", "cifar100"); for others, computed from `train`.
ChannelStats DatasetStats(const Dataset& train);
// Computes per-channel mean and std over all examples.
ChannelStats ComputeStats(const Dataset& data);
// x = (x - mean[c]) / std[c], in place.
void Standardize(Dataset& data, const ChannelStats& stats);

// CIFAR-style augmentation of one example in place (C x H x W floats): a
// random crop with zero padding `pad` and a horizontal flip with
// probability 1/2. `scratch` must hold C*H*W floats.
void AugmentExample(float* example, int64_t c, int64_t h, int64_t w, int pad,
                    std::mt19937_64& rng, float* scratch);

}  // namespace strata

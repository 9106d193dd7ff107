#pragma once

#include "common/config.h"
#include "data/dataset.h"

namespace strata {

// Loads the dataset the config names (data.*), with its validation split,
// standardised when data.normalize is set (statistics from the training
// split or the dataset's published ones). Errors name the file or key at
// fault. Thread-safe.
Result<DatasetSplits> LoadDatasetFromConfig(const Config& config);

}  // namespace strata

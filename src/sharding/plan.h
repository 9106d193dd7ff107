#pragma once

// Shard plan files and dataset fingerprints.
//
// A plan file is one JSON document (docs/design/sharding.md has the full
// format):
//   {"format": "strata-shard-plan", "version": 1, "method", "seed",
//    "num_workers", "parameters": {...},
//    "dataset": {"name", "fingerprint", "num_examples", "num_classes"},
//    "timings_s": {...}, "num_clusters", "clustering": {"pca_variance",
//    "kmeans_inertia", "kmeans_iterations"},
//    "workers": [[indices of worker 0], ...], "broadcast": [indices],
//    "cluster_ids": [one per example, or empty]}
// Plain JSON keeps plans inspectable with jq; 1,000,000 examples make a
// file of about 8 MB (16 MB with cluster ids) that loads in well under a
// second, so a binary layout was not worth its opacity.
//
// Thread-safety: all functions are thread-safe (no shared state).

#include <string>

#include "common/status.h"
#include "data/dataset.h"
#include "sharding/methods.h"

namespace strata {

// "md5:<32 hex digits>" over the shape (N, C, H, W, classes), the labels
// and the feature bytes. Any change of data, order or preprocessing (e.g.
// standardisation) changes it.
std::string DatasetFingerprint(const Dataset& data);

// Writes `plan` to `path` (parent directories created). IoError naming the
// path when it cannot be written.
Status SaveShardPlan(const ShardPlan& plan, const std::string& path);

// Reads and validates a plan: NotFound when the file is missing, DataLoss
// naming the file when it is not a plan or is inconsistent (bad JSON, wrong
// format or version, a worker count that does not match its lists, an
// index out of range, an example in no shard or in two).
Result<ShardPlan> LoadShardPlan(const std::string& path);

// FailedPrecondition when `plan` was made for another dataset (the message
// names both fingerprints) or for another number of workers (names both
// counts). `origin` (e.g. the file path) prefixes the message.
Status CheckPlanMatches(const ShardPlan& plan, const std::string& fingerprint,
                        int num_workers, const std::string& origin);

}  // namespace strata

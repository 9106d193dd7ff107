#pragma once

// The shard report: how balanced a plan is. Its JSON schema is stable (the
// experiment report reads <run>/shard_report.json):
//   {"method", "num_workers", "seed", "num_examples", "num_classes",
//    "per_worker": [{"worker", "count", "class_counts": [...]}],
//    "per_class": [{"class", "min", "q1", "median", "q3", "max"}],
//    "tv_distance": {"per_worker": [...], "max", "mean"},
//    "broadcast_size",
//    "sparse_clusters": {"count", "mean_size"},
//    "num_clusters",
//    "timings_s": {"load", "fingerprint", "pca", "kmeans", "assign",
//                  "total"}}
// Counts are of each worker's full shard, broadcast examples included.
// per_class gives, per class, the spread of that class's count across the
// workers (quartiles by linear interpolation, as numpy's default). The
// total-variation distance of worker w is 1/2 sum_c |p_w(c) - p(c)| between
// its class distribution and the whole dataset's. Sparse clusters are the
// non-empty clusters with fewer points than workers (broadcast by the
// distribution-aware method; class-clusters still stratify them); zeros
// when the method does not cluster.
//
// Thread-safety: all functions are thread-safe (no shared state).

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "sharding/methods.h"

namespace strata {

// `labels` are the dataset's labels (size plan.num_examples, checked).
nlohmann::json MakeShardReport(const ShardPlan& plan,
                               const std::vector<int64_t>& labels);

// A readable table of a report made by MakeShardReport: one row per worker
// (class counts when there are at most 20 classes), the per-class spread,
// the TV distances, broadcast and sparse clusters, and the timings.
std::string FormatShardReport(const nlohmann::json& report);

// Writes the report as indented JSON. IoError naming the path on failure.
Status WriteShardReport(const nlohmann::json& report, const std::string& path);

}  // namespace strata

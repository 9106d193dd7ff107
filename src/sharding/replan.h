#pragma once

// Re-planning the rest of an epoch when the worker count changes (a run
// resumed on another number of workers, docs/design/elastic.md): the
// examples the old workers had not yet trained on in their current epoch
// are split over the new workers with the run's sharding method's rule, so
// each is trained on exactly once in that epoch, and a stratified placement
// stays stratified.
//
//   mod                 the k-th remaining example (ascending) to k mod n
//   random              balanced random over the remaining examples
//   stratified          per class, seeded shuffle, then round robin
//   distribution-aware  the same over the plan's clusters (the rest of an
//                       epoch broadcasts nothing: a remaining broadcast
//                       example goes to one worker)
//   class-clusters      the same over (class, sub-cluster)
//
// Thread-safety: thread-safe (no shared state).

#include <cstdint>
#include <vector>

#include "sharding/methods.h"

namespace strata {

// Splits `remaining` (example ids, any order, no duplicates) over
// `num_workers` workers; each part ascending. `plan` gives the method, the
// seed and the clusters; `labels` are the dataset's. `seed` varies the
// split (e.g. the step it is made at).
std::vector<std::vector<int64_t>> SplitRemainder(
    const ShardPlan& plan, const std::vector<int64_t>& remaining,
    const std::vector<int64_t>& labels, int64_t num_classes, int num_workers,
    uint64_t seed);

// The total variation distance between the class distribution of `part`
// and that of the whole dataset (`labels`); 0 for an empty part.
double ClassTv(const std::vector<int64_t>& part,
               const std::vector<int64_t>& labels, int64_t num_classes);

}  // namespace strata

#include "worker/epoch_remainder.h"

#include <algorithm>
#include <set>

#include "data/batch_cursor.h"
#include "data/batch_sampler.h"
#include "sharding/replan.h"

namespace strata {
namespace {

// What is left of old worker `w`'s current epoch, into *rest; returns
// whether it had started that epoch, and its epoch in *epoch.
Result<bool> LeftOfEpoch(const ClusterRunOptions& o, const ShardSet& old, int w,
                         const nlohmann::json& cursor, const Dataset& train,
                         std::vector<int64_t>* rest, int64_t* epoch) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<BatchSampler> sampler,
      MakeBatchSampler(o.sampler, old.worker_indices[w], train.labels,
                       old.cluster_ids, BatchCursor::SamplerSeed(o.seed, w),
                       o.shuffle, o.loss_aware_max_boost));
  Status st = sampler->RestoreState(cursor);
  if (!st.ok()) {
    return Status::DataLoss("old worker {}'s cursor: {}", w, st.message());
  }
  *epoch = sampler->epoch();
  std::vector<int64_t> batch;
  do {
    sampler->Next(1, &batch);
    rest->insert(rest->end(), batch.begin(), batch.end());
  } while (!sampler->epoch_finished() && !batch.empty());
  return static_cast<int64_t>(rest->size()) < sampler->size();
}

}  // namespace

Result<EpochRemainder> ReplanEpoch(const ClusterRunOptions& o,
                                   const nlohmann::json& resize, int index,
                                   const Dataset& train,
                                   const ShardsFor& shards_for) {
  const int from = resize.value("from_workers", 0);
  const nlohmann::json samplers =
      resize.value("samplers", nlohmann::json::array());
  if (from < 1 || !samplers.is_array() ||
      static_cast<int>(samplers.size()) != from) {
    return Status::DataLoss(
        "worker {}: a resize state with {} cursors for {} old workers", index,
        samplers.size(), from);
  }
  ASSIGN_OR_RETURN(ShardSet old, shards_for(from));
  // Every old worker's rest of its current epoch, pooled, when any of them
  // had started it (free modes may stop one exactly at its epoch's end);
  // when none had, the new shards simply start the next epoch.
  std::set<int64_t> left;
  EpochRemainder r;
  bool any_started = false;
  int64_t last = 0, first = -1;
  for (int w = 0; w < from; ++w) {
    int64_t epoch = 0;
    std::vector<int64_t> rest;
    ASSIGN_OR_RETURN(bool started,
                     LeftOfEpoch(o, old, w, samplers[w], train, &rest, &epoch));
    any_started = any_started || started;
    left.insert(rest.begin(), rest.end());
    last = std::max(last, epoch);
    first = first < 0 ? epoch : std::min(first, epoch);
  }
  if (!any_started) left.clear();
  r.epoch = std::max<int64_t>(first, 0);
  r.next_epoch = any_started ? last + 1 : last;
  r.examples = static_cast<int64_t>(left.size());
  const int to = o.roles.num_workers();
  const std::vector<std::vector<int64_t>> parts = SplitRemainder(
      old.plan, std::vector<int64_t>(left.begin(), left.end()), train.labels,
      train.num_classes, to, static_cast<uint64_t>(r.next_epoch));
  for (const auto& part : parts)
    r.max_tv =
        std::max(r.max_tv, ClassTv(part, train.labels, train.num_classes));
  r.mine = parts[index];
  r.tv = ClassTv(r.mine, train.labels, train.num_classes);
  return r;
}

}  // namespace strata

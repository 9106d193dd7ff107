#include "worker/epoch_remainder.h"

#include <algorithm>
#include <set>

#include "data/batch_cursor.h"
#include "data/batch_sampler.h"
#include "sharding/replan.h"

namespace strata {
namespace {

// Draws what is left of `sampler`'s current epoch into *rest; whether it
// had started that epoch.
bool DrainEpoch(BatchSampler& sampler, std::vector<int64_t>* rest) {
  std::vector<int64_t> batch;
  do {
    sampler.Next(1, &batch);
    rest->insert(rest->end(), batch.begin(), batch.end());
  } while (!sampler.epoch_finished() && !batch.empty());
  return static_cast<int64_t>(rest->size()) < sampler.size();
}

// What is left of old worker `w`'s current epoch, into *rest; returns
// whether it had started that epoch, and its epoch in *epoch. `cursor` is
// the worker's data cursor: its shard's sampler, the offset of that
// sampler's epochs, and the part of an epoch a previous resize gave it
// while unfinished ("rest").
Result<bool> LeftOfEpoch(const ClusterRunOptions& o, const ShardSet& old, int w,
                         const nlohmann::json& cursor, const Dataset& train,
                         std::vector<int64_t>* rest, int64_t* epoch) {
  const auto fail = [w](const Status& st) {
    return Status::DataLoss("old worker {}'s cursor: {}", w, st.message());
  };
  if (cursor.contains("rest")) {
    const nlohmann::json& part = cursor["rest"];
    *epoch = part.value("epoch", int64_t{0});
    Result<std::unique_ptr<BatchSampler>> sampler =
        MakeRestSampler(o, w, part.value("ids", std::vector<int64_t>()), *epoch,
                        train, old.cluster_ids);
    if (!sampler.ok()) return fail(sampler.status());
    Status st =
        (*sampler)->RestoreState(part.value("sampler", nlohmann::json()));
    if (!st.ok()) return fail(st);
    DrainEpoch(**sampler, rest);
    return true;  // a part is never left untouched at an epoch's start
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<BatchSampler> sampler,
      MakeBatchSampler(o.sampler, old.worker_indices[w], train.labels,
                       old.cluster_ids, BatchCursor::SamplerSeed(o.seed, w),
                       o.shuffle, o.loss_aware_max_boost));
  Status st = sampler->RestoreState(cursor.value("sampler", nlohmann::json()));
  if (!st.ok()) return fail(st);
  *epoch = sampler->epoch() + cursor.value("epoch_offset", int64_t{0});
  return DrainEpoch(*sampler, rest);
}

}  // namespace

Result<std::unique_ptr<BatchSampler>> MakeRestSampler(
    const ClusterRunOptions& o, int index, std::vector<int64_t> ids,
    int64_t epoch, const Dataset& train,
    const std::vector<int32_t>& cluster_ids) {
  return MakeBatchSampler(o.sampler, std::move(ids), train.labels, cluster_ids,
                          BatchCursor::PartSeed(o.seed, index, epoch),
                          o.shuffle, o.loss_aware_max_boost);
}

int64_t StepsAfterResize(const ClusterRunOptions& o, int64_t step,
                         const EpochRemainder& r, int64_t train_size) {
  const int64_t n = o.roles.num_workers();
  const int64_t batch = o.worker_batch;
  const int64_t part = (r.examples + n - 1) / n;
  const int64_t epoch_steps = (train_size / n + batch - 1) / batch;
  return step + (part + batch - 1) / batch +
         std::max<int64_t>(0, o.epochs - r.next_epoch) * epoch_steps;
}

Result<EpochRemainder> ReplanEpoch(const ClusterRunOptions& o,
                                   const nlohmann::json& resize, int index,
                                   const Dataset& train,
                                   const ShardsFor& shards_for) {
  const int from = resize.value("from_workers", 0);
  const nlohmann::json cursors =
      resize.value("cursors", nlohmann::json::array());
  if (from < 1 || !cursors.is_array() ||
      static_cast<int>(cursors.size()) != from) {
    return Status::DataLoss(
        "worker {}: a resize state with {} cursors for {} old workers", index,
        cursors.size(), from);
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
                     LeftOfEpoch(o, old, w, cursors[w], train, &rest, &epoch));
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

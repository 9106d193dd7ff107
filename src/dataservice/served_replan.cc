#include "dataservice/served_replan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "sharding/replan.h"

namespace strata {
namespace {

using nlohmann::json;

// Old data server `k`'s cursor, rebuilt over the old shards of its workers
// (w mod m == k of `from`) and restored from its saved `state`.
Result<std::unique_ptr<BatchCursor>> OldCursor(const ClusterRunOptions& o,
                                               const json& state, int k, int m,
                                               int from, const Dataset& train,
                                               const ShardSet& old) {
  BatchCursorOptions co;
  co.assignment = Assignment::kStatic;
  co.sampler = o.sampler;
  co.batch_size = state.value("batch_size", int64_t{0});
  co.seed = o.seed;
  co.shuffle = o.shuffle;
  co.max_boost = o.loss_aware_max_boost;
  co.epochs = o.epochs;
  // What the old run's data servers counted (run/plan.cc SetIterations).
  const int64_t shard = train.size() / from;
  co.batches = o.iterations_set || co.batch_size < 1
                   ? o.iterations
                   : o.epochs * ((shard + co.batch_size - 1) / co.batch_size);
  std::vector<std::vector<int64_t>> shards;
  for (int w = k; w < from; w += m) {
    co.seed_workers.push_back(w);
    shards.push_back(old.worker_indices[static_cast<size_t>(w)]);
  }
  co.num_workers = static_cast<int>(shards.size());
  ASSIGN_OR_RETURN(
      std::unique_ptr<BatchCursor> cursor,
      BatchCursor::Make(co, std::move(shards), train.labels, old.cluster_ids));
  RETURN_IF_ERROR(cursor->RestoreState(state));
  return cursor;
}

// Old dynamic data server `k`'s cursor (of `m` then): its one sampler over
// the examples i with i mod m == k, restored from its saved `state`.
Result<std::unique_ptr<BatchCursor>> OldDynamicCursor(
    const ClusterRunOptions& o, const json& state, int k, int m,
    const Dataset& train, const std::vector<int32_t>& cluster_ids) {
  BatchCursorOptions co;
  co.assignment = Assignment::kDynamic;
  co.sampler = o.sampler;
  co.batch_size = state.value("batch_size", int64_t{0});
  co.num_workers = state.value("workers", 0);
  co.seed = o.seed;
  co.shuffle = o.shuffle;
  co.max_boost = o.loss_aware_max_boost;
  co.epochs = o.epochs;  // counted in epochs (CheckScale)
  std::vector<std::vector<int64_t>> shards(1);
  for (int64_t i = k; i < train.size(); i += m) shards[0].push_back(i);
  ASSIGN_OR_RETURN(
      std::unique_ptr<BatchCursor> cursor,
      BatchCursor::Make(co, std::move(shards), train.labels, cluster_ids));
  RETURN_IF_ERROR(cursor->RestoreState(state));
  return cursor;
}

// Every example the old data servers' cursors had left before the epoch
// the new ones start at, per epoch, into *left; that epoch in
// r->next_epoch. `old_cursor(k)` rebuilds old data server k's. DataLoss
// naming an old cursor that does not fit.
Status DrainOld(
    const json& old_states,
    const std::function<Result<std::unique_ptr<BatchCursor>>(int)>& old_cursor,
    ServedReplan* r, std::map<int64_t, std::vector<int64_t>>* left) {
  std::vector<std::unique_ptr<BatchCursor>> olds;
  BatchCursor::Position at;
  for (int k = 0; k < static_cast<int>(old_states.size()); ++k) {
    Result<std::unique_ptr<BatchCursor>> c = old_cursor(k);
    if (!c.ok())
      return Status::DataLoss("old data server {}'s cursor: {}", k,
                              c.status().message());
    const BatchCursor::Position p = (*c)->Where();
    if (p.epoch > at.epoch)
      at = p;
    else if (p.epoch == at.epoch)
      at.started = at.started || p.started;
    olds.push_back(std::move(c).value());
  }
  // The new shards start with the next epoch once any old worker had
  // started its last one; every lagging worker's rest comes first.
  r->next_epoch = std::max<int64_t>(0, at.started ? at.epoch + 1 : at.epoch);
  for (auto& c : olds) c->DrainBefore(r->next_epoch, left);
  return Status::Ok();
}

// Each epoch's rest split over the `to` new workers into *parts (per
// worker, ascending epochs); returns the batches the largest parts take.
int64_t SplitLeft(const ClusterRunOptions& o, const Dataset& train,
                  const ShardSet& old_shards, int to,
                  std::map<int64_t, std::vector<int64_t>>& left,
                  ServedReplan* r,
                  std::vector<std::vector<BatchCursor::Part>>* parts) {
  const int64_t batch = o.worker_batch;
  parts->assign(static_cast<size_t>(to), {});
  int64_t part_batches = 0;
  for (auto& [epoch, ids] : left) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    r->examples += static_cast<int64_t>(ids.size());
    const std::vector<std::vector<int64_t>> split =
        SplitRemainder(old_shards.plan, ids, train.labels, train.num_classes,
                       to, static_cast<uint64_t>(epoch + 1));
    int64_t largest = 0;
    for (int w = 0; w < to; ++w) {
      const std::vector<int64_t>& part = split[static_cast<size_t>(w)];
      largest = std::max<int64_t>(largest, static_cast<int64_t>(part.size()));
      r->max_tv =
          std::max(r->max_tv, ClassTv(part, train.labels, train.num_classes));
      (*parts)[static_cast<size_t>(w)].push_back({epoch, part});
    }
    part_batches += (largest + batch - 1) / batch;
  }
  return part_batches;
}

}  // namespace

Result<ServedReplan> ReplanServed(const ClusterRunOptions& o,
                                  const json& resize, int index,
                                  const Dataset& train,
                                  const ShardSet& old_shards,
                                  BatchCursor& cursor) {
  const int m = o.roles.num_data_servers();
  const int from = resize.value("from_workers", 0);
  const int to = o.roles.num_workers();
  const json old_states = resize.value("old", json::array());
  // The old run's data servers, maybe another number of them.
  const int old_m = resize.value("from_data_servers", m);
  const json steps = resize.value("steps", json::array());
  const auto fail = [index](const std::string& what) {
    return Status::DataLoss("data server {}: a resize state with {}", index,
                            what);
  };
  if (from < 1 || static_cast<int>(old_shards.worker_indices.size()) != from)
    return fail(fmt::format("{} old workers", from));
  if (!old_states.is_array() || old_m < 1 ||
      static_cast<int>(old_states.size()) != old_m)
    return fail(fmt::format("{} old cursors for {} data servers",
                            old_states.size(), old_m));
  if (!steps.is_array() || static_cast<int>(steps.size()) != to ||
      !std::all_of(steps.begin(), steps.end(),
                   [](const json& s) { return s.is_number_integer(); }))
    return fail(fmt::format("{} steps for {} workers", steps.dump(), to));

  ServedReplan r;
  std::map<int64_t, std::vector<int64_t>> left;
  Status drained = DrainOld(
      old_states,
      [&](int k) {
        return OldCursor(o, old_states[k], k, old_m, from, train, old_shards);
      },
      &r, &left);
  if (!drained.ok()) return fail(drained.message());
  std::vector<std::vector<BatchCursor::Part>> parts;
  const int64_t part_batches =
      SplitLeft(o, train, old_shards, to, left, &r, &parts);
  // Every new worker is served as many batches: the largest parts, then
  // the epochs left (lockstep modes need one count).
  const int64_t batch = o.worker_batch;
  const int64_t epoch_batches = (train.size() / to + batch - 1) / batch;
  const int64_t epochs_budget =
      part_batches +
      std::max<int64_t>(0, o.epochs - r.next_epoch) * epoch_batches;
  for (int w = index, local = 0; w < to; w += m, ++local) {
    const int64_t budget =
        o.iterations_set
            ? std::max<int64_t>(0, o.iterations - steps[w].get<int64_t>())
            : epochs_budget;
    RETURN_IF_ERROR(cursor.Continue(
        local, std::move(parts[static_cast<size_t>(w)]), r.next_epoch, budget));
  }
  return r;
}

Result<ServedReplan> ReplanRegrouped(const ClusterRunOptions& o,
                                     const json& resize, int index,
                                     const Dataset& train,
                                     const std::vector<int32_t>& cluster_ids,
                                     BatchCursor& cursor) {
  const int m = o.roles.num_data_servers();
  const json old_states = resize.value("old", json::array());
  const int old_m = resize.value("from_data_servers", 0);
  if (!old_states.is_array() || old_m < 1 ||
      static_cast<int>(old_states.size()) != old_m)
    return Status::DataLoss(
        "data server {}: a regroup state with {} old cursors for {} data "
        "servers",
        index, old_states.size(), old_m);
  ServedReplan r;
  std::map<int64_t, std::vector<int64_t>> left;
  Status drained = DrainOld(
      old_states,
      [&](int k) {
        return OldDynamicCursor(o, old_states[k], k, old_m, train, cluster_ids);
      },
      &r, &left);
  if (!drained.ok())
    return Status::DataLoss("data server {}: {}", index, drained.message());
  // This data server's share of each epoch's rest: the examples it serves
  // from now on (i mod m == index).
  std::vector<BatchCursor::Part> parts;
  for (auto& [epoch, ids] : left) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    r.examples += static_cast<int64_t>(ids.size());
    std::vector<int64_t> mine;
    for (int64_t id : ids)
      if (id % m == index) mine.push_back(id);
    if (mine.empty()) continue;
    r.max_tv =
        std::max(r.max_tv, ClassTv(mine, train.labels, train.num_classes));
    parts.push_back({epoch, std::move(mine)});
  }
  RETURN_IF_ERROR(cursor.ContinueRegrouped(std::move(parts), r.next_epoch));
  return r;
}

}  // namespace strata

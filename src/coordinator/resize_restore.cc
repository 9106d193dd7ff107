#include "coordinator/resize_restore.h"

#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/safetensors.h"

namespace strata {
namespace {

using nlohmann::json;

// Slices of `total` over `parts` owners, the first total % parts one
// longer (collective/collective.h's BalancedCounts, the ring's ownership).
std::vector<int64_t> Slices(int64_t total, int parts) {
  std::vector<int64_t> counts(parts, total / parts);
  for (int i = 0; i < total % parts; ++i) ++counts[i];
  return counts;
}

Result<json> WorkerJson(const Checkpoint& c, int w) {
  ASSIGN_OR_RETURN(const std::string* text,
                   c.File("worker-" + std::to_string(w) + ".json"));
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.value("step", json()).is_number_integer())
    return Status::DataLoss("{}/worker-{}.json: bad JSON", c.dir, w);
  return j;
}

Result<SafetensorsFile> WorkerTensors(const Checkpoint& c, int w) {
  const std::string name = "worker-" + std::to_string(w) + ".safetensors";
  ASSIGN_OR_RETURN(const std::string* bytes, c.File(name));
  return DecodeSafetensors(*bytes, c.dir + "/" + name);
}

// Ring: every old owner's slice of optimizer buffer `name`, joined, then
// worker `index`'s slice among `to` owners.
Result<SafeTensor> ResliceOptimizer(const Checkpoint& c,
                                    const std::string& name, int from, int to,
                                    int index) {
  std::vector<float> whole;
  for (int w = 0; w < from; ++w) {
    ASSIGN_OR_RETURN(SafetensorsFile f, WorkerTensors(c, w));
    const SafeTensor* t = f.Find(name);
    if (t == nullptr)
      return Status::DataLoss("{}: worker {} has no {}", c.dir, w, name);
    const std::vector<float> part = t->ToFloats();
    whole.insert(whole.end(), part.begin(), part.end());
  }
  const std::vector<int64_t> counts =
      Slices(static_cast<int64_t>(whole.size()), to);
  int64_t offset = 0;
  for (int r = 0; r < index; ++r) offset += counts[r];
  return SafeTensor::Floats(name, {counts[index]}, whole.data() + offset);
}

}  // namespace

Result<int> CheckpointWorkers(const Checkpoint& c) {
  ASSIGN_OR_RETURN(const std::string* text, c.File("coordinator.json"));
  const json meta = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!meta.is_object() || !meta.value("worker_steps", json()).is_object() ||
      meta["worker_steps"].empty())
    return Status::DataLoss("{}/coordinator.json: no worker_steps", c.dir);
  return static_cast<int>(meta["worker_steps"].size());
}

Status CheckResize(RunMode mode, int from, int to, int data_servers,
                   const std::string& shard_plan) {
  if (from == to) return Status::Ok();
  const std::string what = fmt::format(
      "the checkpoint was written by {} workers and cluster.workers is {} "
      "now",
      from, to);
  if (data_servers > 0) {
    return Status::FailedPrecondition(
        "{}: a run fed by the data service (cluster.data_servers = {}) "
        "resumes only on its own worker count (the data servers' cursors "
        "are per worker)",
        what, data_servers);
  }
  if (!shard_plan.empty()) {
    return Status::FailedPrecondition(
        "{}: data.shard_plan '{}' was made for one worker count; make one "
        "for {} workers with `strata shard`, or compute the plan "
        "(data.sharding.method)",
        what, shard_plan, to);
  }
  if (mode == RunMode::kGossip || mode == RunMode::kTreeEasgd) {
    return Status::FailedPrecondition("{}: {} has no checkpoints", what,
                                      RunModeName(mode));
  }
  return Status::Ok();
}

Status CheckScale(const Config& config, const ClusterRunOptions& o, int to) {
  const int from = o.roles.num_workers();
  const int lo = static_cast<int>(config.GetInt("cluster.min_workers"));
  const int hi = static_cast<int>(config.GetInt("cluster.max_workers"));
  if (to < 1 || to < lo || (hi > 0 && to > hi)) {
    return Status::InvalidArgument(
        "{} workers is outside the run's bounds (cluster.min_workers = {}, "
        "cluster.max_workers = {}{})",
        to, lo, hi, hi == 0 ? ": no upper bound" : "");
  }
  if (to == from)
    return Status::InvalidArgument("the run has {} workers already", to);
  if (!o.checkpoints()) {
    return Status::FailedPrecondition(
        "a scale resumes the run from a checkpoint, and this run writes none: "
        "start it with checkpoint.every_s or checkpoint.every_updates");
  }
  const int64_t batch = config.GetInt("train.batch_size");
  if (o.adapt && batch < to) {
    return Status::InvalidArgument(
        "train.batch_size = {} cannot be split over {} workers "
        "(cluster.adapt_hyperparams)",
        batch, to);
  }
  return CheckResize(o.mode, from, to, o.data_servers,
                     config.GetString("data.shard_plan"));
}

Result<Message> ResizedWorkerState(const Checkpoint& c, RunMode mode, int from,
                                   int to, int index) {
  const int source = index % from;
  ASSIGN_OR_RETURN(json state, WorkerJson(c, source));
  json cursors = json::array();
  for (int w = 0; w < from; ++w) {
    ASSIGN_OR_RETURN(json old, WorkerJson(c, w));
    json cursor = json::object();
    for (const char* key : {"sampler", "epoch_offset", "rest"})
      if (old.contains(key)) cursor[key] = old[key];
    cursors.push_back(std::move(cursor));
  }
  state["worker"] = index;
  if (index >= from) {
    // A newcomer: its own counters start at the step it joins.
    state["counters"] = json{{"iterations", state["step"]}};
  }
  state["resize"] =
      json{{"from_workers", from}, {"to_workers", to}, {"cursors", cursors}};
  ASSIGN_OR_RETURN(SafetensorsFile file, WorkerTensors(c, source));
  std::vector<SafeTensor> tensors;
  for (const SafeTensor& t : file.tensors) {
    const bool optimizer = t.name.rfind("optimizer/", 0) == 0;
    const bool exchange = t.name.rfind("exchange/", 0) == 0;
    if (exchange && index >= from) continue;  // residuals start at zero
    if (optimizer && mode == RunMode::kRing) {
      ASSIGN_OR_RETURN(SafeTensor sliced,
                       ResliceOptimizer(c, t.name, from, to, index));
      tensors.push_back(std::move(sliced));
      continue;
    }
    tensors.push_back(t);
  }
  ASSIGN_OR_RETURN(std::string bytes,
                   EncodeSafetensors(tensors, file.metadata));
  Message m;
  m.header.clock = c.step;
  const std::string text = state.dump();
  m.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
  m.payloads.push_back(Buffer::CopyOf(bytes.data(), bytes.size()));
  return m;
}

}  // namespace strata

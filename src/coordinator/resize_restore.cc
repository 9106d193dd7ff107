#include "coordinator/resize_restore.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
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

// The old worker newcomer `index` starts from: among the kept ones at the
// smallest step (in the free modes, the slowest clock: ssp's bound holds
// from its first step), the (index mod their count)-th. In lockstep every
// kept worker is at one step, so it is kept[index mod kept.size()].
Result<int> NewcomerSource(const Checkpoint& c, const std::vector<int>& kept,
                           int index) {
  std::vector<int> slowest;
  int64_t least = 0;
  for (int w : kept) {
    ASSIGN_OR_RETURN(json j, WorkerJson(c, w));
    const int64_t step = j["step"].get<int64_t>();
    if (slowest.empty() || step < least) {
      slowest.assign(1, w);
      least = step;
    } else if (step == least) {
      slowest.push_back(w);
    }
  }
  return slowest[static_cast<size_t>(index) % slowest.size()];
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

int CheckpointDataServers(const Checkpoint& c) {
  int k = 0;
  while (c.files.count(fmt::format("data-{}.json", k)) > 0) ++k;
  return k;
}

Status CheckDataServersChange(const ClusterRunOptions& o, int from, int to) {
  if (from == to) return Status::Ok();
  if (from == 0 || to == 0)
    return Status::FailedPrecondition(
        "cluster.data_servers: {} in the checkpoint, {} now; a run fed by the "
        "data service stays fed by it, and one that loads its own data "
        "keeps doing so (only the number of data servers may change)",
        from, to);
  if (o.assignment == Assignment::kDynamic && o.iterations_set)
    return Status::InvalidArgument(
        "cluster.data_servers: {} in the checkpoint, {} now: another number "
        "of data servers under dynamic assignment needs a run counted in "
        "epochs (train.iterations = 0); each data server counts its own "
        "batches",
        from, to);
  return Status::Ok();
}

Status CheckResize(RunMode mode, int from, int to, int data_servers,
                   const std::string& shard_plan) {
  if (from == to && data_servers <= to) return Status::Ok();
  const std::string what =
      from == to ? fmt::format("{} workers", to)
                 : fmt::format(
                       "the checkpoint was written by {} workers and "
                       "cluster.workers is {} now",
                       from, to);
  if (data_servers > to) {
    return Status::FailedPrecondition(
        "{}: the run's {} data servers (cluster.data_servers) would each need "
        "a worker of their own; keep "
        "cluster.workers >= cluster.data_servers",
        what, data_servers);
  }
  if (!shard_plan.empty()) {
    return Status::FailedPrecondition(
        "{}: data.shard_plan '{}' was made for one worker count; make one "
        "for {} workers with `strata shard`, or compute the plan "
        "(data.sharding.method)",
        what, shard_plan, to);
  }
  return Status::Ok();
}

namespace {

// InvalidArgument unless `leaving` names distinct workers of the `from`
// and as many as a scale to `to` drops.
Status CheckLeaving(int from, int to, const std::vector<int>& leaving) {
  if (leaving.empty()) return Status::Ok();
  for (size_t i = 0; i < leaving.size(); ++i) {
    const int w = leaving[i];
    if (w < 0 || w >= from)
      return Status::InvalidArgument(
          "cannot drain worker {}: the run has workers 0 to {}", w, from - 1);
    if (std::find(leaving.begin(), leaving.begin() + i, w) !=
        leaving.begin() + i)
      return Status::InvalidArgument("worker {} is asked to drain twice", w);
  }
  if (from - static_cast<int>(leaving.size()) != to)
    return Status::InvalidArgument(
        "draining {} of the run's {} workers leaves {}, not {}", leaving.size(),
        from, from - static_cast<int>(leaving.size()), to);
  return Status::Ok();
}

}  // namespace

std::string KeptWorkers(int from, const std::vector<int>& leaving) {
  if (leaving.empty()) return "";
  std::string out;
  for (int w = 0; w < from; ++w) {
    if (std::find(leaving.begin(), leaving.end(), w) != leaving.end()) continue;
    out += (out.empty() ? "" : ",") + std::to_string(w);
  }
  return out;
}

Status CheckScale(const Config& config, const ClusterRunOptions& o, int to,
                  const std::vector<int>& leaving, int data_servers) {
  const int from = o.roles.num_workers();
  if (data_servers < 0)
    return Status::InvalidArgument("{} data servers: say a count >= 1",
                                   data_servers);
  const int m = data_servers > 0 ? data_servers : o.data_servers;
  if (m != o.data_servers && o.data_servers == 0)
    return Status::FailedPrecondition(
        "the run is not fed by the data service (cluster.data_servers = 0); "
        "a scale changes the number of its data servers, it starts none");
  RETURN_IF_ERROR(CheckDataServersChange(o, o.data_servers, m));
  RETURN_IF_ERROR(CheckLeaving(from, to, leaving));
  const int lo = static_cast<int>(config.GetInt("cluster.min_workers"));
  const int hi = static_cast<int>(config.GetInt("cluster.max_workers"));
  if (to < 1 || to < lo || (hi > 0 && to > hi)) {
    return Status::InvalidArgument(
        "{} workers is outside the run's bounds (cluster.min_workers = {}, "
        "cluster.max_workers = {}{})",
        to, lo, hi, hi == 0 ? ": no upper bound" : "");
  }
  if (to == from && m == o.data_servers)
    return data_servers > 0
               ? Status::InvalidArgument(
                     "the run has {} workers and {} data "
                     "servers already",
                     to, m)
               : Status::InvalidArgument("the run has {} workers already", to);
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
  return CheckResize(o.mode, from, to, m, config.GetString("data.shard_plan"));
}

Result<std::vector<int>> ResumeWorkers(const std::string& text, int from,
                                       int to) {
  const int stay = std::min(from, to);
  std::vector<int> kept;
  if (text.empty()) {
    for (int w = 0; w < stay; ++w) kept.push_back(w);
    return kept;
  }
  const std::string what =
      fmt::format("checkpoint.resume_workers = \"{}\"", text);
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long w = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || w < 0 || w >= from)
      return Status::InvalidArgument(
          "{}: '{}' is not a worker of the checkpoint's {} (0 to {})", what,
          item, from, from - 1);
    if (std::find(kept.begin(), kept.end(), w) != kept.end())
      return Status::InvalidArgument("{}: worker {} is named twice", what, w);
    kept.push_back(static_cast<int>(w));
  }
  if (static_cast<int>(kept.size()) != stay)
    return Status::InvalidArgument(
        "{}: {} workers named; a resume of {} workers on {} keeps {}", what,
        kept.size(), from, to, stay);
  return kept;
}

Result<Message> ResizedWorkerState(const Checkpoint& c, RunMode mode, int from,
                                   int to, int index,
                                   const std::vector<int>& kept) {
  if (kept.empty())
    return Status::Internal("a resize that keeps no old worker");
  const bool newcomer = index >= static_cast<int>(kept.size());
  int source = newcomer ? -1 : kept[index];
  if (newcomer) {
    ASSIGN_OR_RETURN(source, NewcomerSource(c, kept, index));
  }
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
  if (newcomer) {
    // A newcomer: its own counters start at the step it joins.
    state["counters"] = json{{"iterations", state["step"]}};
  }
  state["resize"] =
      json{{"from_workers", from}, {"to_workers", to}, {"cursors", cursors}};
  ASSIGN_OR_RETURN(SafetensorsFile file, WorkerTensors(c, source));
  std::vector<SafeTensor> tensors;
  // Gossip and tree-easgd keep the models on their way to peers, by old
  // index: they start again empty, and every gossip weight at 1/M.
  // Only the number of data servers changed: the workers go on as they
  // were (their models on their way stay theirs).
  const bool peers =
      (mode == RunMode::kGossip || mode == RunMode::kTreeEasgd) && from != to;
  std::map<std::string, std::string> metadata = file.metadata;
  if (peers) {
    for (auto it = metadata.begin(); it != metadata.end();)
      it = it->first.rfind("exchange/", 0) == 0 ? metadata.erase(it)
                                                : std::next(it);
  }
  for (const SafeTensor& t : file.tensors) {
    const bool optimizer = t.name.rfind("optimizer/", 0) == 0;
    const bool exchange = t.name.rfind("exchange/", 0) == 0;
    if (exchange && (newcomer || peers)) continue;  // residuals start at 0
    if (optimizer && mode == RunMode::kRing) {
      ASSIGN_OR_RETURN(SafeTensor sliced,
                       ResliceOptimizer(c, t.name, from, to, index));
      tensors.push_back(std::move(sliced));
      continue;
    }
    tensors.push_back(t);
  }
  ASSIGN_OR_RETURN(std::string bytes, EncodeSafetensors(tensors, metadata));
  Message m;
  m.header.clock = c.step;
  const std::string text = state.dump();
  m.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
  m.payloads.push_back(Buffer::CopyOf(bytes.data(), bytes.size()));
  return m;
}

Result<Message> ResizedDataState(const Checkpoint& c, int from, int to,
                                 int index, int data_servers,
                                 const std::vector<int>& kept) {
  if (kept.empty())
    return Status::Internal("a resize that keeps no old worker");
  const auto data_json = [&c](int k) -> Result<json> {
    const std::string name = fmt::format("data-{}.json", k);
    ASSIGN_OR_RETURN(const std::string* text, c.File(name));
    json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("cursor"))
      return Status::DataLoss("{}/{}: bad JSON", c.dir, name);
    return j;
  };
  // A data server the old run did not have starts from no cursor of its
  // own: the re-plan gives it its share.
  json state = json{{"cursor", json::object()}, {"served", 0}, {"acked", 0}};
  if (index < data_servers) {
    ASSIGN_OR_RETURN(state, data_json(index));
  }
  json old = json::array();
  for (int k = 0; k < data_servers; ++k) {
    ASSIGN_OR_RETURN(json j, data_json(k));
    old.push_back(std::move(j["cursor"]));
  }
  // The step each new worker resumes at: its old worker's, or a
  // newcomer's source's (ResizedWorkerState).
  json steps = json::array();
  for (int w = 0; w < to; ++w) {
    int source = w < static_cast<int>(kept.size()) ? kept[w] : -1;
    if (source < 0) {
      ASSIGN_OR_RETURN(source, NewcomerSource(c, kept, w));
    }
    ASSIGN_OR_RETURN(json j, WorkerJson(c, source));
    steps.push_back(j["step"]);
  }
  state["resize"] =
      json{{"from_workers", from}, {"to_workers", to},
           {"at_step", c.step},    {"from_data_servers", data_servers},
           {"steps", steps},       {"old", old}};
  Message m;
  m.header.clock = c.step;
  const std::string text = state.dump();
  m.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
  return m;
}

}  // namespace strata

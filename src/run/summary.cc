#include "run/summary.h"

#include <algorithm>
#include <cmath>

#include "common/json_field.h"
#include "run/stragglers.h"

namespace strata {

nlohmann::json RunSummary::ToJson() const {
  nlohmann::json j{{"final_train_loss", final_train_loss},
                   {"final_train_acc", final_train_acc},
                   {"final_val_loss", final_val_loss},
                   {"final_val_acc", final_val_acc},
                   {"wall_s", wall_s},
                   {"train_s", train_s},
                   {"samples_per_s", samples_per_s},
                   {"steps", steps},
                   {"samples", samples},
                   {"epochs", epochs},
                   {"parameters", parameters},
                   {"interrupted", interrupted}};
  // Not measured: null, as a NaN is written (the Python binding reads NaN).
  if (!evaluated) {
    for (const char* k : {"final_train_loss", "final_train_acc",
                          "final_val_loss", "final_val_acc"})
      j[k] = nullptr;
  }
  return j;
}

nlohmann::json FinalEvaluation::ToJson() const {
  nlohmann::json j{
      {"final_train_loss", train_loss}, {"final_train_acc", train_acc},
      {"final_val_loss", val_loss},     {"final_val_acc", val_acc},
      {"final_version", version},       {"parameters", parameters}};
  if (consensus_distance) j["final_consensus_distance"] = *consensus_distance;
  return j;
}

Result<FinalEvaluation> FinalEvaluation::FromJson(const nlohmann::json& j) {
  constexpr const char* kWhat = "the final evaluation";
  FinalEvaluation e;
  // A diverged model's loss is NaN, sent as null.
  RETURN_IF_ERROR(JsonNumberOrNan(j, "final_train_loss", kWhat, &e.train_loss));
  RETURN_IF_ERROR(JsonNumberOrNan(j, "final_train_acc", kWhat, &e.train_acc));
  RETURN_IF_ERROR(JsonNumberOrNan(j, "final_val_loss", kWhat, &e.val_loss));
  RETURN_IF_ERROR(JsonNumberOrNan(j, "final_val_acc", kWhat, &e.val_acc));
  RETURN_IF_ERROR(JsonField(j, "final_version", kWhat, &e.version));
  RETURN_IF_ERROR(JsonField(j, "parameters", kWhat, &e.parameters));
  RETURN_IF_ERROR(JsonOptional(j, "final_consensus_distance", kWhat,
                               &e.consensus_distance));
  return e;
}

nlohmann::json DataServerReport::ToJson() const {
  nlohmann::json j{{"data_server", data_server},
                   {"assignment", assignment},
                   {"sampler", sampler},
                   {"batches", batches},
                   {"acked", acked},
                   {"returned", returned},
                   {"wait_replies", wait_replies},
                   {"bytes", bytes},
                   {"active_s", active_s},
                   {"batches_per_s", batches_per_s},
                   {"mb_per_s", mb_per_s}};
  if (stratum_loss) {
    nlohmann::json loss = nlohmann::json::array();
    for (const auto& l : stratum_loss->loss) {
      if (l)
        loss.push_back(*l);
      else
        loss.push_back(nullptr);
    }
    j["stratum_loss"] = {{"class", stratum_loss->cls},
                         {"cluster", stratum_loss->cluster},
                         {"loss", loss}};
  }
  if (replan_examples >= 0) {
    j["replan_examples"] = replan_examples;
    j["replan_max_tv"] = replan_max_tv;
  }
  return j;
}

Result<DataServerReport> DataServerReport::FromJson(const nlohmann::json& j) {
  constexpr const char* kWhat = "a data server's statistics";
  DataServerReport r;
  RETURN_IF_ERROR(JsonField(j, "data_server", kWhat, &r.data_server));
  RETURN_IF_ERROR(JsonField(j, "assignment", kWhat, &r.assignment));
  RETURN_IF_ERROR(JsonField(j, "sampler", kWhat, &r.sampler));
  RETURN_IF_ERROR(JsonField(j, "batches", kWhat, &r.batches));
  RETURN_IF_ERROR(JsonField(j, "acked", kWhat, &r.acked));
  RETURN_IF_ERROR(JsonField(j, "returned", kWhat, &r.returned));
  RETURN_IF_ERROR(JsonField(j, "wait_replies", kWhat, &r.wait_replies));
  RETURN_IF_ERROR(JsonField(j, "bytes", kWhat, &r.bytes));
  RETURN_IF_ERROR(JsonField(j, "active_s", kWhat, &r.active_s));
  RETURN_IF_ERROR(JsonField(j, "batches_per_s", kWhat, &r.batches_per_s));
  RETURN_IF_ERROR(JsonField(j, "mb_per_s", kWhat, &r.mb_per_s));
  auto s = j.find("stratum_loss");
  if (s != j.end()) {
    ASSIGN_OR_RETURN(r.stratum_loss, StratumLoss::FromJson(*s));
  }
  if (j.contains("replan_examples")) {
    RETURN_IF_ERROR(JsonField(j, "replan_examples", kWhat, &r.replan_examples));
    RETURN_IF_ERROR(JsonField(j, "replan_max_tv", kWhat, &r.replan_max_tv));
  }
  return r;
}

Result<std::optional<DataServerReport::StratumLoss>>
DataServerReport::StratumLoss::FromJson(const nlohmann::json& j) {
  if (!j.is_object() || j.empty()) return std::optional<StratumLoss>();
  constexpr const char* kWhat = "a data server's stratum losses";
  StratumLoss loss;
  RETURN_IF_ERROR(JsonField(j, "class", kWhat, &loss.cls));
  RETURN_IF_ERROR(JsonField(j, "cluster", kWhat, &loss.cluster));
  for (const nlohmann::json& l : j.value("loss", nlohmann::json::array())) {
    if (l.is_number())
      loss.loss.emplace_back(l.get<double>());
    else
      loss.loss.emplace_back(std::nullopt);
  }
  return std::optional<StratumLoss>(std::move(loss));
}

double ClusterSummary::BytesPerWorker() const {
  if (workers.empty()) return 0.0;
  double bytes = 0;
  for (const auto& w : workers) {
    if (w) bytes += static_cast<double>(w->bytes_pushed + w->bytes_pulled);
  }
  return bytes / workers.size();
}

double ClusterSummary::DataWaitFraction() const {
  double wait = 0, busy = 0;
  for (const auto& w : workers) {
    if (!w) continue;
    wait += w->data_wait_s;
    busy += w->compute_s + w->comm_s + w->data_wait_s;
  }
  return busy > 0 ? wait / busy : 0.0;
}

const ServerReport* ClusterSummary::CountingServer() const {
  for (const ServerReport& s : servers_stats)
    if (!s.follower) return &s;
  return servers_stats.empty() ? nullptr : &servers_stats[0];
}

namespace {

void AddServerCounters(const ServerReport* s, nlohmann::json& j) {
  const ServerReport none;
  if (s == nullptr) s = &none;
  j["staleness_histogram"] = CountsToJson(s->staleness);
  j["dropped_gradients"] = s->dropped;
  j["deferred_gradients"] = s->deferred;
  j["updates"] = s->updates;
  j["gradients_per_update"] = CountsToJson(s->gradients_per_update);
  j["tail_updates"] = s->tail_updates;
}

nlohmann::json WorkersToJson(
    const std::vector<std::optional<WorkerMetrics>>& workers) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t w = 0; w < workers.size(); ++w) {
    if (workers[w]) {
      out.push_back(workers[w]->ToJson());
    } else {
      out.push_back({{"worker", w}, {"error", "no report (lost)"}});
    }
  }
  return out;
}

}  // namespace

void ClusterSummary::AddLives(nlohmann::json& j) const {
  if (resumed_from) {
    j["resumed_from"] = *resumed_from;
    j["resumed_at_step"] = resumed_at_step;
  }
  if (resize.from_workers > 0) {
    j["resize"] = {{"from_workers", resize.from_workers},
                   {"to_workers", resize.to_workers},
                   {"at_step", resize.at_step},
                   {"retired_samples", resize.retired_samples},
                   {"remainder_examples", resize.remainder_examples},
                   {"remainder_max_tv", resize.remainder_max_tv}};
  }
  if (membership.is_array() && !membership.empty())
    j["membership"] = membership;
  if (checkpoints_written) j["checkpoints_written"] = *checkpoints_written;
}

nlohmann::json ClusterSummary::ToJson() const {
  nlohmann::json j =
      final_eval ? final_eval->ToJson() : nlohmann::json::object();
  j["wall_s"] = wall_s;
  j["train_s"] = train_s;
  j["setup_s"] = setup_s;
  j["samples"] = samples;
  j["steps"] = steps;
  j["samples_per_s"] = samples_per_s;
  j["interrupted"] = interrupted;
  j["model"] = model;
  j["dataset"] = dataset;
  j["mode"] = mode;
  j["servers"] = servers;
  j["workers_count"] = workers_count;
  j["worker_batch"] = worker_batch;
  j["iterations_per_worker"] = iterations_per_worker;
  j["workers"] = WorkersToJson(workers);
  j["stragglers"] = StragglersToJson(StragglerTable(workers));
  j["bytes_per_worker"] = BytesPerWorker();
  j["compression"] = compression;
  j["compress_pulls"] = compress_pulls;
  j["pipeline_kb"] = pipeline_kb;
  j["servers_stats"] = nlohmann::json::array();
  for (const ServerReport& s : servers_stats)
    j["servers_stats"].push_back(s.ToJson());
  AddServerCounters(CountingServer(), j);
  j["lost_workers"] = lost_workers;
  if (data_service) {
    nlohmann::json reports = nlohmann::json::array();
    for (const DataServerReport& r : data_service->data_servers)
      reports.push_back(r.ToJson());
    j["data_service"] = {{"data_servers", reports},
                         {"assignment", data_service->assignment},
                         {"prefetch", data_service->prefetch},
                         {"data_wait_fraction", DataWaitFraction()}};
  }
  if (gossip) {
    // GoSGD keeps the weights' sum at 1 (less what lost workers held).
    double total = 0;
    for (const auto& w : workers)
      if (w && w->gossip_weight > 0) total += w->gossip_weight;
    j["gossip_weight_total"] = total;
  }
  AddLives(j);
  if (!node_restarts.empty()) {
    nlohmann::json restarted = nlohmann::json::array();
    int64_t lost = 0;
    for (const NodeRestart& r : node_restarts)
      restarted.push_back({{"node", r.node}, {"down_s", r.down_s}});
    for (const ServerReport& s : servers_stats)
      lost += s.lost_updates_at_least.value_or(0);
    j["node_restarts"] = restarted;
    j["lost_updates_at_least"] = lost;
  }
  if (!restarts.empty()) {
    nlohmann::json r = nlohmann::json::array();
    int64_t lost_steps = 0;
    for (const ClusterRestart& c : restarts) {
      r.push_back({{"error", c.error},
                   {"steps_logged", c.steps_logged},
                   {"resumed_at_step", c.resumed_at_step},
                   {"lost_steps", c.lost_steps}});
      lost_steps += c.lost_steps;
    }
    j["restarts"] = r;
    j["lost_steps"] = lost_steps;
  }
  if (!status.ok()) j["error"] = status.message();
  return j;
}

RunSummary ClusterSummary::Brief(int64_t train_size, int64_t parameters) const {
  RunSummary s;
  s.evaluated = final_eval.has_value();
  if (final_eval) {
    s.final_train_loss = final_eval->train_loss;
    s.final_train_acc = final_eval->train_acc;
    s.final_val_loss = final_eval->val_loss;
    s.final_val_acc = final_eval->val_acc;
  }
  s.wall_s = wall_s;
  s.train_s = train_s;
  s.samples_per_s = samples_per_s;
  s.steps = steps;
  s.samples = samples;
  s.epochs = train_size > 0 ? static_cast<double>(samples) / train_size : 0;
  s.parameters = parameters;
  s.interrupted = interrupted;
  return s;
}

}  // namespace strata

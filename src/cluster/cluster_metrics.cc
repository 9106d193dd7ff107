#include "cluster/cluster_metrics.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "common/json_field.h"

namespace strata {

const char* RunPhaseName(RunPhase phase) {
  switch (phase) {
    case RunPhase::kJoining:
      return "joining";
    case RunPhase::kTraining:
      return "training";
    case RunPhase::kFinishing:
      return "finishing";
    case RunPhase::kDone:
      return "done";
    case RunPhase::kFailed:
      return "failed";
  }
  return "unknown";
}

std::string PrometheusLabel(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

const std::vector<int64_t>& ClusterMetrics::StalenessBuckets() {
  static const std::vector<int64_t> b = {0, 1, 2, 4, 8, 16, 32, 64};
  return b;
}

ClusterMetrics::ClusterMetrics(
    RoleTable roles, std::vector<std::pair<std::string, std::string>> labels)
    : roles_(std::move(roles)), labels_(std::move(labels)) {}

void ClusterMetrics::Update(NodeId node, const std::string& status_json,
                            std::chrono::steady_clock::time_point now) {
  nlohmann::json j = nlohmann::json::parse(status_json, nullptr, false);
  MutexLock lock(&mu_);
  if (j.is_discarded() || !j.is_object()) {
    ++status_errors_;
    return;
  }
  NodeState& n = nodes_[node];
  auto it = j.find("samples");
  if (it != j.end() && it->is_number()) {
    n.samples.emplace_back(now, it->get<double>());
    // A window of about three seconds (at least two reports).
    while (n.samples.size() > 2 &&
           now - n.samples.front().first > std::chrono::seconds(3))
      n.samples.pop_front();
  }
  n.status = std::move(j);
}

void ClusterMetrics::SetPhase(RunPhase phase) {
  MutexLock lock(&mu_);
  phase_ = phase;
}

void ClusterMetrics::SetLost(std::vector<std::string> lost) {
  MutexLock lock(&mu_);
  lost_ = std::move(lost);
}

namespace {

// One metric family: HELP and TYPE, then its samples.
class Family {
 public:
  Family(std::string* out, const char* name, const char* type, const char* help)
      : out_(out), name_(name) {
    *out_ +=
        fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void Sample(const std::string& labels, double value,
              const char* suffix = "") {
    *out_ +=
        fmt::format("{}{}{} {}\n", name_, suffix,
                    labels.empty() ? "" : "{" + labels + "}", Number(value));
  }
  static std::string Number(double v) {
    if (v == static_cast<double>(static_cast<int64_t>(v)) && v < 1e15 &&
        v > -1e15)
      return fmt::format("{}", static_cast<int64_t>(v));
    return fmt::format("{:.9g}", v);
  }

 private:
  std::string* out_;
  std::string name_;
};

double Num(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// A counter (or gauge) family read from one key of each node's status.
struct Counter {
  const char* name;
  const char* key;
  const char* type;
  const char* help;
};

const Counter kWorkerCounters[] = {
    {"strata_worker_steps_total", "iterations", "counter",
     "Training iterations the worker completed."},
    {"strata_worker_samples_total", "samples", "counter",
     "Training examples the worker processed."},
    {"strata_worker_compute_seconds_total", "compute_s", "counter",
     "Seconds in forward, backward and batch assembly."},
    {"strata_worker_communication_seconds_total", "comm_s", "counter",
     "Seconds in pushes, pulls, collectives, peer exchanges and clocks."},
    {"strata_worker_data_wait_seconds_total", "data_wait_s", "counter",
     "Seconds waiting for the data service's next batch."},
    {"strata_worker_pushed_bytes_total", "bytes_pushed", "counter",
     "Bytes the worker sent (to servers or peers)."},
    {"strata_worker_pulled_bytes_total", "bytes_pulled", "counter",
     "Bytes the worker received (from servers or peers)."},
    {"strata_worker_dropped_gradients_total", "dropped_gradients", "counter",
     "The worker's gradients a server dropped as late."},
};

const Counter kServerCounters[] = {
    {"strata_server_updates_total", "updates", "counter",
     "Optimizer steps the server applied (its version)."},
    {"strata_server_applied_gradients_total", "applied_gradients", "counter",
     "Gradients that went into an update."},
    {"strata_server_dropped_gradients_total", "dropped", "counter",
     "Late gradients dropped (sync k-of-n)."},
    {"strata_server_deferred_gradients_total", "deferred", "counter",
     "Late gradients carried into the next step."},
};

using IndexedStatus = std::vector<std::pair<int, nlohmann::json>>;

void RenderWorkers(std::string* out, const IndexedStatus& workers,
                   const std::map<int, double>& rates) {
  if (workers.empty()) return;
  for (const Counter& c : kWorkerCounters) {
    Family f(out, c.name, c.type, c.help);
    for (const auto& [w, j] : workers)
      f.Sample(fmt::format("worker=\"{}\"", w), Num(j, c.key));
  }
  Family f(out, "strata_worker_samples_per_second", "gauge",
           "Examples per second over the last seconds.");
  for (const auto& [w, rate] : rates)
    f.Sample(fmt::format("worker=\"{}\"", w), rate);
}

// Server `s`'s staleness counts (its status' "staleness" object) as the
// buckets, sum and count of one histogram.
void RenderStaleness(Family& h, int s, const nlohmann::json& j) {
  auto st = j.find("staleness");
  const std::map<int64_t, int64_t> counts =
      CountsFromJson(st != j.end() ? *st : nlohmann::json());
  int64_t total = 0;
  double sum = 0;
  for (const auto& [k, v] : counts) {
    total += v;
    sum += static_cast<double>(k) * static_cast<double>(v);
  }
  for (int64_t le : ClusterMetrics::StalenessBuckets()) {
    int64_t below = 0;
    for (const auto& [k, v] : counts)
      if (k <= le) below += v;
    h.Sample(fmt::format("server=\"{}\",le=\"{}\"", s, le),
             static_cast<double>(below), "_bucket");
  }
  h.Sample(fmt::format("server=\"{}\",le=\"+Inf\"", s),
           static_cast<double>(total), "_bucket");
  h.Sample(fmt::format("server=\"{}\"", s), sum, "_sum");
  h.Sample(fmt::format("server=\"{}\"", s), static_cast<double>(total),
           "_count");
}

void RenderServers(std::string* out, const IndexedStatus& servers) {
  if (servers.empty()) return;
  for (const Counter& c : kServerCounters) {
    Family f(out, c.name, c.type, c.help);
    for (const auto& [s, j] : servers)
      f.Sample(fmt::format("server=\"{}\"", s), Num(j, c.key));
  }
  Family h(out, "strata_server_gradient_staleness", "histogram",
           "Staleness of the applied gradients (updates between the "
           "version a gradient was computed on and the one it was applied "
           "to).");
  for (const auto& [s, j] : servers) RenderStaleness(h, s, j);
}

// Samples per second between the first and the last report of the window
// (0 with fewer than two).
double SampleRate(
    const std::deque<std::pair<std::chrono::steady_clock::time_point, double>>&
        samples) {
  if (samples.size() < 2) return 0;
  const double dt = std::chrono::duration<double>(samples.back().first -
                                                  samples.front().first)
                        .count();
  if (dt <= 0) return 0;
  return (samples.back().second - samples.front().second) / dt;
}

}  // namespace

void ClusterMetrics::RenderRun(std::string* out) const {
  {
    Family f(out, "strata_run_info", "gauge", "The run's settings (always 1).");
    std::string labels;
    for (const auto& [k, v] : labels_) {
      labels +=
          (labels.empty() ? "" : ",") + k + "=\"" + PrometheusLabel(v) + "\"";
    }
    f.Sample(labels, 1);
  }
  {
    Family f(out, "strata_run_state", "gauge",
             "1 for the phase the run is in, 0 for the others.");
    for (RunPhase p :
         {RunPhase::kJoining, RunPhase::kTraining, RunPhase::kFinishing,
          RunPhase::kDone, RunPhase::kFailed}) {
      f.Sample(fmt::format("state=\"{}\"", RunPhaseName(p)),
               p == phase_ ? 1 : 0);
    }
  }
  {
    Family f(out, "strata_nodes", "gauge", "Nodes of the run per role.");
    for (Role r : {Role::kServer, Role::kWorker, Role::kData}) {
      f.Sample(fmt::format("role=\"{}\"", RoleName(r)), roles_.Count(r));
    }
  }
  RenderLost(out);
  {
    Family f(out, "strata_status_errors_total", "counter",
             "Heartbeat statuses that were not a JSON object (ignored).");
    f.Sample("", static_cast<double>(status_errors_));
  }
}

void ClusterMetrics::RenderLost(std::string* out) const {
  {
    Family f(out, "strata_lost_nodes", "gauge",
             "Nodes declared lost (no heartbeat within the timeout).");
    f.Sample("", static_cast<double>(lost_.size()));
  }
  if (lost_.empty()) return;
  Family f(out, "strata_lost_node", "gauge",
           "A node declared lost (always 1), named.");
  for (const auto& name : lost_)
    f.Sample("node=\"" + PrometheusLabel(name) + "\"", 1);
}

std::string ClusterMetrics::Render() const {
  MutexLock lock(&mu_);
  std::string out;
  RenderRun(&out);
  IndexedStatus workers, servers;
  std::map<int, double> rates;
  for (const auto& [id, n] : nodes_) {
    Role role;
    int index = 0;
    if (!roles_.RoleOf(id, &role, &index).ok()) continue;
    if (role == Role::kWorker) {
      workers.emplace_back(index, n.status);
      rates[index] = SampleRate(n.samples);
    } else if (role == Role::kServer) {
      servers.emplace_back(index, n.status);
    }
  }
  RenderWorkers(&out, workers, rates);
  RenderServers(&out, servers);
  return out;
}

}  // namespace strata

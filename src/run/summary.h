#pragma once

// A run's typed results: what the trainers return and what summary.json
// holds (docs/design/run_directory.md). JSON only at the edges: the files
// (ToJson) and the reports nodes send over the wire (FromJson).

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "ps/server_report.h"
#include "run/worker_metrics.h"

namespace strata {

// What a finished (or interrupted) run reports to its caller: the local
// trainer's summary, and a cluster's in brief.
struct RunSummary {
  double final_train_loss = 0;
  double final_train_acc = 0;
  double final_val_loss = 0;
  double final_val_acc = 0;
  double wall_s = 0;         // whole run, data loading excluded
  double train_s = 0;        // time spent in training steps
  double samples_per_s = 0;  // training samples / train_s
  int64_t steps = 0;
  int64_t samples = 0;
  double epochs = 0;  // samples / training-set size
  int64_t parameters = 0;
  bool interrupted = false;
  // Whether the final_* figures were measured (a cluster without an
  // evaluator, or whose evaluator did not answer, has none).
  bool evaluated = true;
  // The final flat parameter vector (not serialised; for tests and tools).
  std::vector<float> final_params;

  nlohmann::json ToJson() const;
};

// The evaluator's evaluation of the final model (kFinalEvalReply).
struct FinalEvaluation {
  double train_loss = 0, train_acc = 0, val_loss = 0, val_acc = 0;
  int64_t version = 0;  // the model's version (or the slowest worker's step)
  int64_t parameters = 0;
  std::optional<double> consensus_distance;  // decentralized modes

  nlohmann::json ToJson() const;
  // DataLoss naming the field for a malformed reply.
  static Result<FinalEvaluation> FromJson(const nlohmann::json& j);
};

// A data server's statistics (kStatsReply, dataservice/data_role.h).
struct DataServerReport {
  int data_server = 0;
  std::string assignment, sampler;
  int64_t batches = 0, acked = 0, returned = 0, wait_replies = 0;
  uint64_t bytes = 0;
  double active_s = 0, batches_per_s = 0, mb_per_s = 0;
  // The loss-aware sampler's running loss per stratum: each stratum's
  // class, sub-cluster and loss (absent: no loss seen yet).
  struct StratumLoss {
    std::vector<int64_t> cls, cluster;
    std::vector<std::optional<double>> loss;

    // From BatchCursor::StratumLosses' JSON; nullopt for its {} (a sampler
    // that keeps no losses).
    static Result<std::optional<StratumLoss>> FromJson(const nlohmann::json& j);
  };
  std::optional<StratumLoss> stratum_loss;
  // After a resume on another worker count (static assignment): the
  // examples left that it re-planned (-1: none) and the largest class TV
  // distance of a new worker's part.
  int64_t replan_examples = -1;
  double replan_max_tv = 0;

  nlohmann::json ToJson() const;
  static Result<DataServerReport> FromJson(const nlohmann::json& j);
};

// A lost node replaced while the run went on (cluster.restart).
struct NodeRestart {
  std::string node;   // described: "server 0 (node 1)"
  double down_s = 0;  // from its predecessor's last message to the re-join
};

// One restart of a whole --processes cluster from its newest checkpoint.
struct ClusterRestart {
  std::string error;  // what stopped the previous life
  int64_t steps_logged = 0;
  int64_t resumed_at_step = 0;
  int64_t lost_steps = 0;  // trained again
};

// What a cluster run reports (summary.json): the final evaluation, time
// and throughput, every worker's metrics, the servers' and data servers'
// statistics, staleness and dropped gradients, losses and restarts.
struct ClusterSummary {
  // The run's error, or OK; the summary is written either way.
  Status status;
  std::optional<FinalEvaluation> final_eval;
  double wall_s = 0, train_s = 0, setup_s = 0;
  int64_t samples = 0, steps = 0;
  double samples_per_s = 0;
  bool interrupted = false;
  std::string model, dataset, mode;
  int servers = 0, workers_count = 0;
  int64_t worker_batch = 0, iterations_per_worker = 0;
  // Each worker's report; absent for a worker lost before it reported.
  std::vector<std::optional<WorkerMetrics>> workers;
  std::string compression;
  bool compress_pulls = false;
  double pipeline_kb = 0;
  std::vector<ServerReport> servers_stats;
  std::vector<std::string> lost_workers;  // every lost node, described
  // With the data service.
  struct DataService {
    std::vector<DataServerReport> data_servers;
    std::string assignment;
    int prefetch = 0;
  };
  std::optional<DataService> data_service;
  bool gossip = false;  // report the gossip weights' total
  std::optional<std::string> resumed_from;
  int64_t resumed_at_step = 0;
  // A resume on another number of workers (docs/design/elastic.md):
  // summary.json's "resize", absent when from_workers is 0.
  struct Resize {
    int from_workers = 0, to_workers = 0;
    int64_t at_step = 0;
    // What the workers the resume left out had trained (in `samples`).
    int64_t retired_samples = 0;
    // The rest of the epoch, re-planned: its examples over every worker
    // and the largest class TV distance of a worker's part (-1: not
    // reported).
    int64_t remainder_examples = 0;
    double remainder_max_tv = -1;
  };
  Resize resize;
  // Every change of the worker count so far (membership.jsonl's lines;
  // summary.json "membership", absent when empty).
  nlohmann::json membership = nlohmann::json::array();
  std::optional<int64_t> checkpoints_written;
  std::vector<NodeRestart> node_restarts;
  std::vector<ClusterRestart> restarts;  // --processes lives

  // Derived figures, as summary.json has them.
  double BytesPerWorker() const;
  double DataWaitFraction() const;
  // The server whose counters are the run's (the first that leads).
  const ServerReport* CountingServer() const;
  nlohmann::json ToJson() const;
  // ToJson's part on the run's lives: the resume, a change of worker
  // count, the checkpoints written.
  void AddLives(nlohmann::json& j) const;
  // The caller's view: the final metrics, time and throughput.
  RunSummary Brief(int64_t train_size, int64_t parameters) const;
};

}  // namespace strata

#pragma once

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "run/step_histogram.h"

namespace strata {

// What one worker measured (summary.json's "workers" rows).
struct WorkerMetrics {
  int index = 0;
  int64_t iterations = 0;
  int64_t samples = 0;
  double compute_s = 0;  // forward, backward, batch assembly
  double comm_s = 0;     // pushes, pulls, collectives, peer exchanges, clocks
  // Decentralized modes: the part of comm_s spent waiting for peers (a
  // neighbour's model, a collective's slowest member).
  double wait_s = 0;
  // Data service: time spent waiting for the next batch (not in compute_s).
  double data_wait_s = 0;
  uint64_t bytes_pushed = 0;      // sent (to servers or peers)
  uint64_t bytes_pulled = 0;      // received
  int64_t dropped_gradients = 0;  // pushes a server dropped as late (per range)
  int64_t exchanges = 0;          // averaging rounds / gossip pushes sent
  // cluster.layer_wait: pulls whose forward pass started on its first
  // layers before waiting for the whole pull.
  int64_t layered_pulls = 0;
  // cluster.layer_wait, pipelined sync and async: steps whose forward pass
  // started on its first layers while the previous push's acks (which
  // bring the parameters) were still arriving.
  int64_t layered_acks = 0;
  // cluster.slice_kb: the row slices this worker computes a layer in (0:
  // none).
  int64_t layer_slices = 0;
  // train.cuda_graph: the steps that ran as a replay of the captured graph.
  int64_t graph_replays = 0;
  // Parameter-server modes: pulls sent on their own, before a step (the
  // parameters a push-pull's ack brings are not counted).
  int64_t pulls = 0;
  // Parameter-server modes: the staleness of this worker's applied
  // gradients as the servers reported it (sum and count over the run; the
  // largest since the last metrics line, -1 for none).
  int64_t staleness_sum = 0;
  int64_t staleness_count = 0;
  int64_t staleness_max = 0;
  int64_t window_staleness_max = -1;
  float gossip_weight = 0;  // gossip: the worker's weight at the end
  bool finished = false;
  std::string error;
  // allreduce, ring, local-sgd: how the collectives travelled ("memory"
  // between threads of one process, "gloo" over TCP); empty otherwise.
  std::string collective;
  // workers.* (worker/pace.h): this worker's speed factor and the time its
  // pacing added to compute_s (slowdown, noise and straggler pauses).
  bool paced = false;  // workers.* is on (the two below are reported)
  double speed = 1;
  double paced_s = 0;
  StepHistogram step_times;  // each step's wall time (the straggler table)
  // A resume on another number of workers: the examples left in the epoch
  // over every worker (-1: nothing re-planned) and the class TV distance
  // of this worker's part (worker/epoch_remainder.h).
  int64_t replan_examples = -1;
  double replan_tv = 0;

  void NoteStaleness(int64_t s) {
    if (s < 0) return;
    staleness_sum += s;
    ++staleness_count;
    staleness_max = std::max(staleness_max, s);
    window_staleness_max = std::max(window_staleness_max, s);
  }

  // The running totals a checkpoint keeps, and back (a resumed worker
  // reports the whole run's counts).
  nlohmann::json SaveCounters() const {
    return {{"iterations", iterations},
            {"samples", samples},
            {"compute_s", compute_s},
            {"comm_s", comm_s},
            {"wait_s", wait_s},
            {"data_wait_s", data_wait_s},
            {"bytes_pushed", bytes_pushed},
            {"bytes_pulled", bytes_pulled},
            {"dropped_gradients", dropped_gradients},
            {"exchanges", exchanges},
            {"layered_pulls", layered_pulls},
            {"layered_acks", layered_acks},
            {"layer_slices", layer_slices},
            {"graph_replays", graph_replays},
            {"pulls", pulls},
            {"staleness_sum", staleness_sum},
            {"staleness_count", staleness_count},
            {"staleness_max", staleness_max}};
  }
  // SaveCounters() with the pacing's, where the worker is paced.
  nlohmann::json SaveAll() const {
    nlohmann::json j = SaveCounters();
    if (step_times.count() > 0) j["step_times"] = step_times.ToJson();
    if (paced) {
      j["speed"] = speed;
      j["paced_s"] = paced_s;
    }
    return j;
  }
  void RestoreCounters(const nlohmann::json& j) {
    iterations = j.value("iterations", int64_t{0});
    samples = j.value("samples", int64_t{0});
    compute_s = j.value("compute_s", 0.0);
    comm_s = j.value("comm_s", 0.0);
    wait_s = j.value("wait_s", 0.0);
    data_wait_s = j.value("data_wait_s", 0.0);
    bytes_pushed = j.value("bytes_pushed", uint64_t{0});
    bytes_pulled = j.value("bytes_pulled", uint64_t{0});
    dropped_gradients = j.value("dropped_gradients", int64_t{0});
    exchanges = j.value("exchanges", int64_t{0});
    layered_pulls = j.value("layered_pulls", int64_t{0});
    layered_acks = j.value("layered_acks", int64_t{0});
    layer_slices = j.value("layer_slices", int64_t{0});
    graph_replays = j.value("graph_replays", int64_t{0});
    pulls = j.value("pulls", int64_t{0});
    staleness_sum = j.value("staleness_sum", int64_t{0});
    staleness_count = j.value("staleness_count", int64_t{0});
    staleness_max = j.value("staleness_max", int64_t{0});
    paced = j.contains("speed");
    speed = j.value("speed", 1.0);
    paced_s = j.value("paced_s", 0.0);
    if (j.contains("step_times"))
      step_times = StepHistogram::FromJson(j.at("step_times"));
  }

  // The worker's report to the coordinator (its kShutdown "done"): every
  // counter, so the coordinator's summary can derive what ToJson shows.
  nlohmann::json ToWire() const {
    nlohmann::json j = SaveAll();
    j["worker"] = index;
    j["finished"] = finished;
    if (gossip_weight > 0) j["gossip_weight"] = gossip_weight;
    if (!error.empty()) j["error"] = error;
    if (!collective.empty()) j["collective"] = collective;
    if (replan_examples >= 0) {
      j["replan_examples"] = replan_examples;
      j["replan_tv"] = replan_tv;
    }
    return j;
  }
  static WorkerMetrics FromWire(const nlohmann::json& j) {
    WorkerMetrics m;
    if (!j.is_object()) return m;
    m.RestoreCounters(j);
    m.index = j.value("worker", 0);
    m.finished = j.value("finished", false);
    m.gossip_weight = j.value("gossip_weight", 0.0f);
    m.error = j.value("error", std::string());
    m.collective = j.value("collective", std::string());
    m.replan_examples = j.value("replan_examples", int64_t{-1});
    m.replan_tv = j.value("replan_tv", 0.0);
    return m;
  }

  // summary.json's row (and /metrics' source): the counters with the
  // staleness as its mean and maximum.
  nlohmann::json ToJson() const {
    nlohmann::json j = SaveAll();
    // Reported as their mean and max below.
    j.erase("staleness_sum");
    j.erase("staleness_count");
    j.erase("staleness_max");
    j.erase("step_times");
    if (step_times.count() > 0) {
      j["step_p50_s"] = step_times.Quantile(0.5);
      j["step_p90_s"] = step_times.Quantile(0.9);
      j["step_p99_s"] = step_times.Quantile(0.99);
    }
    j["worker"] = index;
    j["finished"] = finished;
    if (gossip_weight > 0) j["gossip_weight"] = gossip_weight;
    if (staleness_count > 0) {
      j["staleness_mean"] =
          static_cast<double>(staleness_sum) / staleness_count;
      j["staleness_max"] = staleness_max;
    }
    if (!error.empty()) j["error"] = error;
    if (!collective.empty()) j["collective"] = collective;
    if (replan_examples >= 0) {
      j["replan_examples"] = replan_examples;
      j["replan_tv"] = replan_tv;
    }
    return j;
  }
};

}  // namespace strata

#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

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
  float gossip_weight = 0;        // gossip: the worker's weight at the end
  bool finished = false;
  std::string error;

  nlohmann::json ToJson() const {
    nlohmann::json j{{"worker", index},
                     {"iterations", iterations},
                     {"samples", samples},
                     {"compute_s", compute_s},
                     {"comm_s", comm_s},
                     {"wait_s", wait_s},
                     {"data_wait_s", data_wait_s},
                     {"bytes_pushed", bytes_pushed},
                     {"bytes_pulled", bytes_pulled},
                     {"dropped_gradients", dropped_gradients},
                     {"exchanges", exchanges},
                     {"finished", finished}};
    if (gossip_weight > 0) j["gossip_weight"] = gossip_weight;
    if (!error.empty()) j["error"] = error;
    return j;
  }
};

}  // namespace strata

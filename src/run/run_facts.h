#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "run/plan.h"

namespace strata {

// What the data servers tell every node at registration (the run facts'
// "data"): the shape the model needs and the training set's size, from
// which the iteration budget follows.
struct DataFacts {
  int64_t channels = 1, height = 1, width = 1, classes = 0;
  int64_t train_size = 0;

  nlohmann::json ToJson() const;
  // DataLoss naming the fault for a malformed or out-of-range object.
  static Result<DataFacts> FromJson(const nlohmann::json& j);
  bool operator==(const DataFacts& o) const {
    return channels == o.channels && height == o.height && width == o.width &&
           classes == o.classes && train_size == o.train_size;
  }
};

// The run facts: what the nodes that know the model or the data announce
// when they register (workers and the evaluator the model, data servers
// the model and the data), and the coordinator hands to every node in the
// cluster map (servers learn their key ranges from them). Each field is
// set only by a node that knows it; the coordinator takes the union and
// refuses a node that disagrees with an earlier one (Merge). JSON only on
// the wire (ToJson / FromJson); typed everywhere else.
struct RunFacts {
  std::optional<int64_t> num_params;
  // Where the key ranges may be cut (ClusterPlan::tensor_ends).
  std::optional<std::vector<int64_t>> tensor_ends;
  std::optional<int64_t> iterations;  // per worker
  std::optional<DataFacts> data;

  // What a node with `plan` knows: the parameter count, the cut points and
  // the iteration budget.
  static RunFacts Of(const ClusterPlan& plan);

  // The wire form: only the fields that are set, keys in order.
  nlohmann::json ToJson() const;
  std::string ToText() const { return ToJson().dump(); }
  // DataLoss naming the field for a value of the wrong type.
  static Result<RunFacts> FromJson(const nlohmann::json& j);
  static Result<RunFacts> FromText(const std::string& text);

  // Adds `other`'s fields to these; a field both set must be equal:
  // otherwise InvalidArgument saying which, and nothing changes.
  Status Merge(const RunFacts& other);
  bool empty() const {
    return !num_params && !tensor_ends && !iterations && !data;
  }
};

// A data-service worker's check of its own plan against the run facts the
// data servers announced. FailedPrecondition, naming `who`, when the
// parameter count differs, or the tensor ends (another cluster.slice_kb:
// the worker would push ranges no server has). Facts without tensor ends
// (a data server from before them) are checked on the count alone.
Status CheckPlanAgainstRunFacts(const std::string& who, const ClusterPlan& plan,
                                const RunFacts& facts);

}  // namespace strata

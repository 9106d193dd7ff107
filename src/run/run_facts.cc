#include "run/run_facts.h"

namespace strata {

nlohmann::json DataFacts::ToJson() const {
  return {{"shape", {channels, height, width}},
          {"classes", classes},
          {"train_size", train_size}};
}

Result<DataFacts> DataFacts::FromJson(const nlohmann::json& j) {
  DataFacts f;
  try {
    auto shape = j.at("shape").get<std::vector<int64_t>>();
    if (shape.size() != 3) throw std::out_of_range("shape");
    f.channels = shape[0];
    f.height = shape[1];
    f.width = shape[2];
    f.classes = j.at("classes").get<int64_t>();
    f.train_size = j.at("train_size").get<int64_t>();
  } catch (const std::exception& e) {
    return Status::DataLoss("malformed data facts from the data servers: {}",
                            j.dump());
  }
  if (f.channels < 1 || f.height < 1 || f.width < 1 || f.classes < 1 ||
      f.train_size < 1) {
    return Status::DataLoss("data facts out of range: {}", j.dump());
  }
  return f;
}

RunFacts RunFacts::Of(const ClusterPlan& plan) {
  RunFacts f;
  f.num_params = plan.num_params;
  f.tensor_ends = plan.tensor_ends;
  f.iterations = plan.options.iterations;
  return f;
}

nlohmann::json RunFacts::ToJson() const {
  nlohmann::json j = nlohmann::json::object();
  if (data) j["data"] = data->ToJson();
  if (iterations) j["iterations"] = *iterations;
  if (num_params) j["num_params"] = *num_params;
  if (tensor_ends) j["tensor_ends"] = *tensor_ends;
  return j;
}

namespace {

Result<int64_t> IntField(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer())
    return Status::DataLoss("run facts: \"{}\" is not an integer: {}", key,
                            j.dump());
  return v.get<int64_t>();
}

}  // namespace

Result<RunFacts> RunFacts::FromJson(const nlohmann::json& j) {
  if (!j.is_object())
    return Status::DataLoss("run facts are not a JSON object: {}", j.dump());
  RunFacts f;
  if (j.contains("num_params")) {
    ASSIGN_OR_RETURN(f.num_params, IntField(j, "num_params"));
  }
  if (j.contains("iterations")) {
    ASSIGN_OR_RETURN(f.iterations, IntField(j, "iterations"));
  }
  if (j.contains("tensor_ends")) {
    const nlohmann::json& ends = j["tensor_ends"];
    std::vector<int64_t> out;
    for (const nlohmann::json& e : ends.is_array() ? ends : nlohmann::json()) {
      if (!e.is_number_integer()) break;
      out.push_back(e.get<int64_t>());
    }
    if (!ends.is_array() || out.size() != ends.size())
      return Status::DataLoss("run facts: bad tensor ends: {}", ends.dump());
    f.tensor_ends = std::move(out);
  }
  if (j.contains("data")) {
    ASSIGN_OR_RETURN(f.data, DataFacts::FromJson(j["data"]));
  }
  return f;
}

Result<RunFacts> RunFacts::FromText(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded())
    return Status::DataLoss("run facts are not JSON: '{}'", text);
  return FromJson(j);
}

namespace {

// Sets `mine` from `theirs` when unset; false when both are set and differ.
template <typename T>
bool Join(std::optional<T>& mine, const std::optional<T>& theirs) {
  if (!theirs) return true;
  if (mine) return *mine == *theirs;
  mine = theirs;
  return true;
}

}  // namespace

Status RunFacts::Merge(const RunFacts& other) {
  RunFacts merged = *this;
  if (!Join(merged.num_params, other.num_params) ||
      !Join(merged.tensor_ends, other.tensor_ends) ||
      !Join(merged.iterations, other.iterations) ||
      !Join(merged.data, other.data)) {
    return Status::InvalidArgument("{} vs {}", other.ToText(), ToText());
  }
  *this = std::move(merged);
  return Status::Ok();
}

Status CheckPlanAgainstRunFacts(const std::string& who, const ClusterPlan& plan,
                                const RunFacts& facts) {
  const int64_t theirs = facts.num_params.value_or(-1);
  if (theirs != plan.num_params) {
    return Status::FailedPrecondition(
        "{}: the model has {} parameters here but {} on the data servers "
        "(the same config everywhere?)",
        who, plan.num_params, theirs);
  }
  // The servers cut their ranges at the data servers' tensor ends (and row
  // cuts); a worker cutting elsewhere (another cluster.slice_kb) would push
  // ranges no server has. (cluster.pipeline_kb, which groups them into
  // ranges, each node reads from its own config.)
  if (facts.tensor_ends && *facts.tensor_ends != plan.tensor_ends) {
    return Status::FailedPrecondition(
        "{}: the model's key ranges are cut at {} here but at {} on the data "
        "servers (the same cluster.slice_kb everywhere?)",
        who, nlohmann::json(plan.tensor_ends).dump(),
        nlohmann::json(*facts.tensor_ends).dump());
  }
  return Status::Ok();
}

}  // namespace strata

#include "sharding/plan.h"

#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/fs.h"
#include "common/md5.h"

namespace strata {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "strata-shard-plan";
constexpr int kVersion = 1;

json ParametersJson(const ShardOptions& o) {
  return json{{"pca_components", o.pca_components},
              {"pca_solver", PcaSolverName(o.pca_solver)},
              {"pca_iter", o.pca_iter},
              {"clusters", o.clusters},
              {"max_iter", o.max_iter},
              {"tol", o.tol},
              {"n_init", o.n_init},
              {"subclusters", o.subclusters}};
}

json TimingsJson(const ShardTimings& t) {
  return json{{"load", t.load},     {"fingerprint", t.fingerprint},
              {"pca", t.pca},       {"kmeans", t.kmeans},
              {"assign", t.assign}, {"total", t.total}};
}

// The plan's fields; a missing or mistyped one names itself.
Status PlanFromJson(const json& j, const std::string& path, ShardPlan& plan) {
  try {
    ASSIGN_OR_RETURN(plan.options.method,
                     ParseShardMethod(j.at("method").get<std::string>()));
    plan.options.seed = j.at("seed").get<uint64_t>();
    plan.options.num_workers = j.at("num_workers").get<int>();
    const json& p = j.at("parameters");
    plan.options.pca_components = p.at("pca_components").get<int64_t>();
    plan.options.pca_iter = p.at("pca_iter").get<int>();
    ASSIGN_OR_RETURN(plan.options.pca_solver,
                     ParsePcaSolver(p.value("pca_solver", "krylov")));
    plan.options.clusters = p.at("clusters").get<int64_t>();
    plan.options.max_iter = p.at("max_iter").get<int>();
    plan.options.tol = p.at("tol").get<double>();
    plan.options.n_init = p.at("n_init").get<int>();
    plan.options.subclusters = p.at("subclusters").get<int64_t>();
    const json& d = j.at("dataset");
    plan.dataset_name = d.at("name").get<std::string>();
    plan.fingerprint = d.at("fingerprint").get<std::string>();
    plan.num_examples = d.at("num_examples").get<int64_t>();
    plan.num_classes = d.at("num_classes").get<int64_t>();
    const json& t = j.at("timings_s");
    plan.timings.load = t.value("load", 0.0);
    plan.timings.fingerprint = t.value("fingerprint", 0.0);
    plan.timings.pca = t.value("pca", 0.0);
    plan.timings.kmeans = t.value("kmeans", 0.0);
    plan.timings.assign = t.value("assign", 0.0);
    plan.timings.total = t.value("total", 0.0);
    plan.num_clusters = j.at("num_clusters").get<int64_t>();
    if (j.contains("clustering")) {
      const json& c = j["clustering"];
      plan.pca_variance = c.value("pca_variance", 0.0);
      plan.kmeans_inertia = c.value("kmeans_inertia", 0.0);
      plan.kmeans_iterations = c.value("kmeans_iterations", 0);
    }
    plan.workers = j.at("workers").get<std::vector<std::vector<int64_t>>>();
    plan.broadcast = j.at("broadcast").get<std::vector<int64_t>>();
    plan.cluster_ids = j.at("cluster_ids").get<std::vector<int32_t>>();
  } catch (const json::exception& e) {
    return Status::DataLoss("{}: malformed shard plan: {}", path, e.what());
  }
  return Status::Ok();
}

// The invariants every method guarantees: each example in exactly one
// list, lists ascending, cluster ids in range.
Status CheckPlanStructure(const ShardPlan& plan, const std::string& path) {
  const int64_t n = plan.num_examples;
  if (plan.options.num_workers < 1 ||
      static_cast<int64_t>(plan.workers.size()) != plan.options.num_workers) {
    return Status::DataLoss("{}: num_workers is {} but the plan has {} lists",
                            path, plan.options.num_workers,
                            plan.workers.size());
  }
  std::vector<uint8_t> seen(static_cast<size_t>(std::max<int64_t>(n, 0)), 0);
  auto check_list = [&](const std::vector<int64_t>& list,
                        const std::string& what) -> Status {
    for (size_t i = 0; i < list.size(); ++i) {
      const int64_t v = list[i];
      if (v < 0 || v >= n) {
        return Status::DataLoss("{}: {} holds index {}, outside [0, {})", path,
                                what, v, n);
      }
      if (i > 0 && v <= list[i - 1]) {
        return Status::DataLoss("{}: {} is not strictly ascending", path, what);
      }
      if (seen[v]) {
        return Status::DataLoss("{}: example {} is in more than one shard",
                                path, v);
      }
      seen[v] = 1;
    }
    return Status::Ok();
  };
  for (size_t w = 0; w < plan.workers.size(); ++w) {
    RETURN_IF_ERROR(check_list(plan.workers[w], "worker " + std::to_string(w)));
  }
  RETURN_IF_ERROR(check_list(plan.broadcast, "the broadcast set"));
  for (int64_t i = 0; i < n; ++i) {
    if (!seen[i]) {
      return Status::DataLoss("{}: example {} is in no shard", path, i);
    }
  }
  if (!plan.cluster_ids.empty()) {
    if (static_cast<int64_t>(plan.cluster_ids.size()) != n) {
      return Status::DataLoss("{}: {} cluster ids for {} examples", path,
                              plan.cluster_ids.size(), n);
    }
    for (int32_t c : plan.cluster_ids) {
      if (c < 0 || c >= plan.num_clusters) {
        return Status::DataLoss("{}: cluster id {} outside [0, {})", path, c,
                                plan.num_clusters);
      }
    }
  }
  return Status::Ok();
}

}  // namespace

std::string DatasetFingerprint(const Dataset& data) {
  Md5 md5;
  const int64_t header[5] = {data.size(), data.channels, data.height,
                             data.width, data.num_classes};
  md5.Update(header, sizeof(header));
  md5.Update(data.labels.data(), data.labels.size() * sizeof(int64_t));
  md5.Update(data.features.data(), data.features.size() * sizeof(float));
  return "md5:" + md5.FinalHex();
}

Status SaveShardPlan(const ShardPlan& plan, const std::string& path) {
  if (plan.fingerprint.empty()) {
    return Status::InvalidArgument(
        "{}: the shard plan has no dataset fingerprint (computed with "
        "ShardOptions::fingerprint = false), so it could not be checked when "
        "loaded; not saved",
        path);
  }
  json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["method"] = ShardMethodName(plan.options.method);
  j["seed"] = plan.options.seed;
  j["num_workers"] = plan.options.num_workers;
  j["parameters"] = ParametersJson(plan.options);
  j["dataset"] = json{{"name", plan.dataset_name},
                      {"fingerprint", plan.fingerprint},
                      {"num_examples", plan.num_examples},
                      {"num_classes", plan.num_classes}};
  j["timings_s"] = TimingsJson(plan.timings);
  j["num_clusters"] = plan.num_clusters;
  j["clustering"] = json{{"pca_variance", plan.pca_variance},
                         {"kmeans_inertia", plan.kmeans_inertia},
                         {"kmeans_iterations", plan.kmeans_iterations}};
  j["workers"] = plan.workers;
  j["broadcast"] = plan.broadcast;
  j["cluster_ids"] = plan.cluster_ids;
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    RETURN_IF_ERROR(MakeDirs(path.substr(0, slash)));
  }
  RETURN_IF_ERROR(WriteFileAtomic(path, j.dump() + "\n"));
  return Status::Ok();
}

Result<ShardPlan> LoadShardPlan(const std::string& path) {
  if (!FileExists(path)) {
    return Status::NotFound("{}: no such shard plan file", path);
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::DataLoss("{}: not a JSON shard plan", path);
  }
  if (j.value("format", "") != kFormat) {
    return Status::DataLoss("{}: not a shard plan (format '{}', expected '{}')",
                            path, j.value("format", ""), kFormat);
  }
  if (j.value("version", 0) != kVersion) {
    return Status::DataLoss("{}: shard plan version {} (this build reads {})",
                            path, j.value("version", 0), kVersion);
  }
  ShardPlan plan;
  RETURN_IF_ERROR(PlanFromJson(j, path, plan));
  RETURN_IF_ERROR(CheckPlanStructure(plan, path));
  return plan;
}

Status CheckPlanMatches(const ShardPlan& plan, const std::string& fingerprint,
                        int num_workers, const std::string& origin) {
  if (plan.fingerprint != fingerprint) {
    return Status::FailedPrecondition(
        "{}: the shard plan was made for a dataset with fingerprint {} "
        "({} examples), but this dataset's fingerprint is {}: a different "
        "dataset, order or preprocessing; make a new plan with strata shard",
        origin, plan.fingerprint, plan.num_examples, fingerprint);
  }
  if (plan.options.num_workers != num_workers) {
    return Status::FailedPrecondition(
        "{}: the shard plan is for {} workers, but this run has {} workers",
        origin, plan.options.num_workers, num_workers);
  }
  return Status::Ok();
}

}  // namespace strata

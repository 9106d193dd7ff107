#include "cli/shard_command.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/log.h"
#include "sharding/plan_files.h"
#include "sharding/report.h"
#include "sharding/resolve.h"

namespace strata {
namespace {

struct ShardArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  int workers = 0;  // 0 = cluster.workers
  // Each set option becomes a data.sharding.* override after --set.
  std::optional<std::string> method, pca_solver;
  std::optional<int64_t> seed, pca_components, pca_iter, clusters, max_iter,
      n_init, subclusters, threads;
  std::optional<double> tol;
  std::string out = "shard_plan.json";
  std::string report;  // empty = <out without .json>.report.json
};

std::string DefaultReportPath(const std::string& plan) {
  const std::string ext = ".json";
  if (plan.size() > ext.size() &&
      plan.compare(plan.size() - ext.size(), ext.size(), ext) == 0) {
    return plan.substr(0, plan.size() - ext.size()) + ".report.json";
  }
  return plan + ".report.json";
}

// Defaults, the TOML file, --set, then the shard options, in that order.
Result<Config> ResolveShardConfig(const ShardArgs& a) {
  Config config;
  if (!a.config_path.empty()) {
    ASSIGN_OR_RETURN(config, Config::FromTomlFile(a.config_path));
  }
  std::vector<std::string> overrides = a.overrides;
  auto add = [&](const char* key, const std::string& value) {
    overrides.push_back(std::string("data.sharding.") + key + "=" + value);
  };
  if (a.method) add("method", *a.method);
  if (a.pca_solver) add("pca_solver", *a.pca_solver);
  if (a.seed) add("seed", std::to_string(*a.seed));
  if (a.pca_components)
    add("pca_components", std::to_string(*a.pca_components));
  if (a.pca_iter) add("pca_iter", std::to_string(*a.pca_iter));
  if (a.clusters) add("clusters", std::to_string(*a.clusters));
  if (a.max_iter) add("max_iter", std::to_string(*a.max_iter));
  if (a.n_init) add("n_init", std::to_string(*a.n_init));
  if (a.subclusters) add("subclusters", std::to_string(*a.subclusters));
  if (a.threads) add("threads", std::to_string(*a.threads));
  if (a.tol) add("tol", fmt::format("{}", *a.tol));
  for (const std::string& o : overrides) {
    Status st = config.ApplyOverride(o);
    if (!st.ok()) return st.WithContext(o);
  }
  return config;
}

int RunShard(const ShardArgs& args) {
  auto config = ResolveShardConfig(args);
  if (!config.ok()) {
    LogError("{}", config.status().message());
    return 2;
  }
  const int workers = args.workers > 0
                          ? args.workers
                          : static_cast<int>(config->GetInt("cluster.workers"));
  auto options = ShardOptionsFromConfig(*config, workers);
  if (!options.ok()) {
    LogError("{}", options.status().message());
    return 2;
  }
  const std::string report_path =
      args.report.empty() ? DefaultReportPath(args.out) : args.report;
  auto report = WriteShardPlanFiles(*config, workers, args.out, report_path);
  if (!report.ok()) {
    LogError("{}", report.status().message());
    return 1;
  }
  std::printf("%s\n", FormatShardReport(*report).c_str());
  std::printf(
      "plan: %s\nreport: %s\ntrain with it: --set data.shard_plan=%s (and "
      "the same data.* settings, so the dataset fingerprint matches)\n",
      args.out.c_str(), report_path.c_str(), args.out.c_str());
  return 0;
}

}  // namespace

void AddShardCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<ShardArgs>();
  CLI::App* cmd = app.add_subcommand(
      "shard",
      "Assign the training examples of a run's dataset to workers: write a "
      "shard plan (for data.shard_plan) and its report. The dataset comes "
      "from the run config (-c, --set), as for `strata train`. See "
      "docs/design/sharding.md.");
  cmd->add_option("-c,--config", a->config_path, "TOML run config")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", a->overrides,
                  "override a config key: --set section.key=value (repeatable)")
      ->take_all();
  cmd->add_option("-n,--workers", a->workers,
                  "number of workers (default: cluster.workers)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("-m,--method", a->method,
                  "random | mod | stratified | distribution-aware | "
                  "class-clusters (data.sharding.method)");
  cmd->add_option("--seed", a->seed,
                  "sharding seed (data.sharding.seed; default run.seed)");
  cmd->add_option("--pca-components", a->pca_components,
                  "PCA dimension (data.sharding.pca_components, default 50)");
  cmd->add_option("--pca-solver", a->pca_solver,
                  "krylov | power (data.sharding.pca_solver)");
  cmd->add_option("--pca-iter", a->pca_iter,
                  "Krylov steps or power iterations; -1 = auto");
  cmd->add_option("--clusters", a->clusters,
                  "distribution-aware KMeans clusters; 0 = 2 x classes");
  cmd->add_option("--max-iter", a->max_iter, "KMeans iterations at most");
  cmd->add_option("--tol", a->tol, "KMeans tolerance");
  cmd->add_option("--n-init", a->n_init, "KMeans restarts");
  cmd->add_option("--subclusters", a->subclusters,
                  "class-clusters: sub-clusters per class");
  cmd->add_option("--threads", a->threads,
                  "threads (0 = cores; results do not depend on it)");
  cmd->add_option("-o,--out", a->out, "shard plan file to write");
  cmd->add_option("--report", a->report,
                  "report JSON to write (default: <out>.report.json)");
  cmd->footer(
      "\nExamples:\n"
      "  strata shard -c examples/mnist_mlp.toml -n 12 -m stratified -o "
      "plans/mnist12.json\n"
      "  strata shard --set data.dataset=cifar10 --set data.dir=data/cifar10 "
      "-n 12 -m distribution-aware --clusters 20 -o plans/c10.json\n");
  cmd->callback([=]() { *exit_code = RunShard(*a); });
}

}  // namespace strata

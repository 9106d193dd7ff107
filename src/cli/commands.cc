#include "cli/commands.h"

#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/log.h"
#include "data/download.h"
#include "train/cluster_run.h"
#include "train/data_config.h"
#include "train/local_trainer.h"
#include "train/run_dir.h"

namespace strata {
namespace {

struct TrainArgs {
  std::string config_path;
  std::vector<std::string> overrides;
};

LogLevel ParseLevel(const std::string& s) {
  if (s == "debug") return LogLevel::kDebug;
  if (s == "warning") return LogLevel::kWarning;
  if (s == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

// Defaults, then the TOML file, then --set overrides, in that order.
Result<Config> ResolveConfig(const TrainArgs& args) {
  Config config;
  if (!args.config_path.empty()) {
    ASSIGN_OR_RETURN(config, Config::FromTomlFile(args.config_path));
  }
  for (const std::string& o : args.overrides) {
    Status st = config.ApplyOverride(o);
    if (!st.ok()) return st.WithContext("--set " + o);
  }
  return config;
}

int RunTrain(const TrainArgs& args, const std::atomic<bool>* stop) {
  auto config = ResolveConfig(args);
  if (!config.ok()) {
    LogError("{}", config.status().message());
    return 2;
  }
  SetLogLevel(ParseLevel(config->GetString("run.log_level")));
  auto run_dir = RunDirectory::Create(*config);
  if (!run_dir.ok()) {
    LogError("{}", run_dir.status().message());
    return 1;
  }
  LogInfo("run directory: {}", run_dir->path());
  auto data = LoadDatasetFromConfig(*config);
  if (!data.ok()) {
    LogError("{}", data.status().message());
    return 1;
  }
  auto summary = config->GetString("cluster.mode") == "local"
                     ? TrainLocal(*config, *data, *run_dir, stop)
                     : TrainCluster(*config, *data, *run_dir, stop);
  if (!summary.ok()) {
    LogError("{}", summary.status().message());
    return 1;
  }
  LogInfo(
      "done{}: train loss {:.4f} acc {:.4f} | val loss {:.4f} acc {:.4f} | "
      "{:.1f} s, {:.0f} samples/s",
      summary->interrupted ? " (interrupted)" : "", summary->final_train_loss,
      summary->final_train_acc, summary->final_val_loss, summary->final_val_acc,
      summary->wall_s, summary->samples_per_s);
  std::printf("run directory: %s\n", run_dir->path().c_str());
  return summary->interrupted ? 130 : 0;
}

}  // namespace

void AddCommands(CLI::App& app, int* exit_code, const std::atomic<bool>* stop) {
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();

  // strata train
  auto train_args = std::make_shared<TrainArgs>();
  CLI::App* train = app.add_subcommand(
      "train",
      "Train a model. With no arguments: the embedded default (synthetic data, "
      "a small MLP). cluster.mode = \"local\" trains in this process.");
  train->add_option("-c,--config", train_args->config_path, "TOML run config")
      ->check(CLI::ExistingFile);
  train
      ->add_option(
          "--set", train_args->overrides,
          "override a config key: --set section.key=value (repeatable)")
      ->take_all();
  train->footer("\n" + Config::SchemaHelp());
  train->callback([=]() { *exit_code = RunTrain(*train_args, stop); });

  // strata data download
  CLI::App* data = app.add_subcommand("data", "Dataset utilities");
  data->require_subcommand(1);
  auto dl_name = std::make_shared<std::string>();
  auto dl_dir = std::make_shared<std::string>("data");
  auto dl_mirror = std::make_shared<std::string>();
  CLI::App* download = data->add_subcommand(
      "download",
      "Fetch a dataset's official archives (curl) and check their md5");
  download
      ->add_option("name", *dl_name,
                   "mnist | fashion-mnist | cifar10 | cifar100")
      ->required()
      ->check(CLI::IsMember(KnownDownloadDatasets()));
  download->add_option("--dir", *dl_dir, "directory to put the files in");
  download->add_option("--mirror", *dl_mirror,
                       "base URL to fetch from instead of the official one "
                       "(e.g. file:///srv/datasets/)");
  download->callback([=]() {
    Status st = DownloadDataset(*dl_name, *dl_dir, *dl_mirror);
    if (!st.ok()) {
      LogError("{}", st.message());
      *exit_code = 1;
      return;
    }
    std::printf("%s is in %s\n", dl_name->c_str(), dl_dir->c_str());
    *exit_code = 0;
  });
}

}  // namespace strata

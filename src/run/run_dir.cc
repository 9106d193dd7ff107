#include "run/run_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

#include "common/fs.h"
#include "common/log.h"
#include "metrics/tensorboard.h"

namespace strata {

Result<RunDirectory> RunDirectory::Create(const Config& config) {
  std::string name = config.GetString("run.name");
  if (name.empty()) {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
    name = config.GetString("model.name") + "-" +
           config.GetString("data.dataset") + "-" + stamp;
  }
  if (name.find('/') != std::string::npos || name == "." || name == "..") {
    return Status::InvalidArgument(
        "run.name '{}' must be a plain directory name", name);
  }
  const std::string& parent = config.GetString("run.dir");
  RETURN_IF_ERROR(MakeDirs(parent));
  RunDirectory dir;
  dir.path_ = JoinPath(parent, name);
  // mkdir fails with EEXIST on a taken name, so concurrent runs (an
  // experiment with --parallel) never share a directory.
  for (int k = 2; ::mkdir(dir.path_.c_str(), 0755) != 0; ++k) {
    if (errno != EEXIST || k > 10000) {
      return Status::IoError("cannot create run directory '{}': {}", dir.path_,
                             std::strerror(errno));
    }
    dir.path_ = JoinPath(parent, name + "-" + std::to_string(k));
  }
  RETURN_IF_ERROR(config.WriteToml(dir.File("config.toml")));
  dir.SetTensorBoard(config.GetBool("metrics.tensorboard"));
  return dir;
}

Result<RunDirectory> RunDirectory::Open(const std::string& path) {
  RETURN_IF_ERROR(MakeDirs(path));
  RunDirectory dir;
  dir.path_ = path;
  return dir;
}

std::string RunDirectory::File(const std::string& name) const {
  return JoinPath(path_, name);
}

Status RunDirectory::AppendJson(const std::string& file,
                                const nlohmann::json& j) const {
  RETURN_IF_ERROR(AppendLine(File(file), j.dump()));
  if (board_->on && (file == "metrics.jsonl" || file == "eval.jsonl"))
    Mirror(file, j);
  return Status::Ok();
}

RunDirectory::Board::Board() = default;
RunDirectory::Board::~Board() = default;

void RunDirectory::SetTensorBoard(bool on) { board_->on = on; }

void RunDirectory::KeepCheckpoint(std::shared_ptr<const Checkpoint> c) const {
  MutexLock lock(&kept_->mu);
  kept_->checkpoint = std::move(c);
}

std::shared_ptr<const Checkpoint> RunDirectory::TakeKeptCheckpoint() const {
  MutexLock lock(&kept_->mu);
  return std::exchange(kept_->checkpoint, nullptr);
}

void RunDirectory::Mirror(const std::string& file,
                          const nlohmann::json& j) const {
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number()) return;
  const int64_t step = j["step"].get<int64_t>();
  const bool worker = j.contains("worker") && j["worker"].is_number();
  const std::string writer =
      file == "eval.jsonl" ? "evaluator"
      : worker             ? "worker" + std::to_string(j["worker"].get<int>())
                           : "trainer";
  // Tags TensorBoard users look for; a cluster's per-worker curves carry
  // the worker in the tag, and worker 0 also writes the plain train/ tags.
  const std::string suffix =
      worker ? "/worker_" + std::to_string(j["worker"].get<int>()) : "";
  const bool plain = !worker || j["worker"].get<int>() == 0;
  std::vector<std::pair<std::string, double>> scalars;
  auto add = [&](const char* key, const std::string& tag, bool also_plain) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number()) return;
    scalars.emplace_back(tag + suffix, it->get<double>());
    if (also_plain && !suffix.empty() && plain)
      scalars.emplace_back(tag, it->get<double>());
  };
  MutexLock lock(&board_->mu);
  if (board_->failed) return;
  if (file == "eval.jsonl") {
    add("val_loss", "val/loss", false);
    add("val_acc", "val/accuracy", false);
    add("consensus_distance", "val/consensus_distance", false);
  } else {
    add("train_loss", "train/loss", true);
    add("train_acc", "train/accuracy", true);
    add("lr", "train/learning_rate", true);
    add("compute_s", "time/compute_s", false);
    add("comm_s", "time/comm_s", false);
    add("data_wait_s", "time/data_wait_s", false);
    add("staleness_mean", "staleness/mean", true);
    add("staleness_max", "staleness/max", true);
    add("workers", "cluster/workers", true);
    // samples/s between this line and the writer's previous one.
    if (j.contains("samples") && j.contains("wall_s") &&
        j["samples"].is_number() && j["wall_s"].is_number()) {
      const double samples = j["samples"].get<double>();
      const double wall = j["wall_s"].get<double>();
      auto last = board_->last.find(writer);
      if (last != board_->last.end() && wall > last->second.second) {
        const double rate =
            (samples - last->second.first) / (wall - last->second.second);
        scalars.emplace_back("train/samples_per_s" + suffix, rate);
        if (!suffix.empty() && plain)
          scalars.emplace_back("train/samples_per_s", rate);
      }
      board_->last[writer] = {samples, wall};
    }
  }
  if (scalars.empty()) return;
  auto& w = board_->writers[writer];
  if (!w) {
    auto opened = TensorBoardWriter::Open(File("tb"), writer);
    if (!opened.ok()) {
      LogWarning("TensorBoard events off for this run: {}",
                 opened.status().message());
      board_->failed = true;
      return;
    }
    w = std::move(*opened);
  }
  Status st = w->Scalars(step, scalars);
  if (!st.ok()) {
    LogWarning("TensorBoard events off for this run: {}", st.message());
    board_->failed = true;
  }
}

Status RunDirectory::WriteJson(const std::string& file,
                               const nlohmann::json& j) const {
  return WriteFileAtomic(File(file), j.dump(2) + "\n");
}

}  // namespace strata

#include "run/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "common/fs.h"
#include "common/log.h"
#include "common/md5.h"

namespace strata {
namespace {

// Writes `bytes` to `path` and fsyncs it.
Status WriteSynced(const std::string& path, const std::string& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::IoError("{}: cannot create: {}", path, std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      return Status::IoError("{}: write failed: {}", path, std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::IoError("{}: fsync failed: {}", path, std::strerror(e));
  }
  ::close(fd);
  return Status::Ok();
}

void SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void RemoveTree(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      std::remove(JoinPath(dir, n).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

// step -> directory name of the complete checkpoints (a manifest inside).
std::map<int64_t, std::string> Complete(const std::string& root) {
  std::map<int64_t, std::string> out;
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind("step-", 0) != 0) continue;
    const std::string digits = n.substr(5);
    if (digits.empty() ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    if (!FileExists(JoinPath(JoinPath(root, n), "manifest.json"))) continue;
    out[std::stoll(digits)] = n;
  }
  ::closedir(d);
  return out;
}

}  // namespace

Result<const std::string*> Checkpoint::File(const std::string& name) const {
  auto it = files.find(name);
  if (it == files.end())
    return Status::DataLoss("checkpoint {} has no {}", dir, name);
  return &it->second;
}

Result<std::string> WriteCheckpoint(
    const std::string& run_dir, int64_t step,
    const std::map<std::string, std::string>& files, int keep,
    int crash_after_files) {
  const std::string root = JoinPath(run_dir, kCheckpointDir);
  RETURN_IF_ERROR(MakeDirs(root));
  const std::string name = "step-" + std::to_string(step);
  const std::string final_dir = JoinPath(root, name);
  const std::string tmp =
      JoinPath(root, ".tmp-" + name + "-" + std::to_string(::getpid()));
  RemoveTree(tmp);
  if (::mkdir(tmp.c_str(), 0755) != 0)
    return Status::IoError("{}: cannot create: {}", tmp, std::strerror(errno));
  nlohmann::json manifest{{"format", "strata-checkpoint-1"},
                          {"step", step},
                          {"files", nlohmann::json::object()}};
  int written = 0;
  for (const auto& [file, bytes] : files) {
    if (crash_after_files >= 0 && written == crash_after_files)
      return Status::Cancelled("checkpoint {}: crashed after {} files (test)",
                               step, written);
    RETURN_IF_ERROR(WriteSynced(JoinPath(tmp, file), bytes));
    manifest["files"][file] = {{"bytes", bytes.size()},
                               {"md5", Md5Hex(bytes.data(), bytes.size())}};
    ++written;
  }
  RETURN_IF_ERROR(
      WriteSynced(JoinPath(tmp, "manifest.json"), manifest.dump(2) + "\n"));
  SyncDir(tmp);
  // A checkpoint of the same step (a resumed run's first) is replaced.
  if (FileExists(final_dir)) RemoveTree(final_dir);
  if (std::rename(tmp.c_str(), final_dir.c_str()) != 0)
    return Status::IoError("{}: cannot rename into place: {}", final_dir,
                           std::strerror(errno));
  SyncDir(root);
  // Keep the newest `keep`.
  auto complete = Complete(root);
  while (static_cast<int>(complete.size()) > std::max(1, keep)) {
    RemoveTree(JoinPath(root, complete.begin()->second));
    complete.erase(complete.begin());
  }
  return final_dir;
}

int64_t NewestCheckpointStep(const std::string& run_dir) {
  const auto complete = Complete(JoinPath(run_dir, kCheckpointDir));
  return complete.empty() ? -1 : complete.rbegin()->first;
}

Result<Checkpoint> LoadNewestCheckpoint(const std::string& run_dir) {
  return LoadCheckpoint(run_dir, -1);
}

Result<Checkpoint> LoadNewestIntactCheckpoint(const std::string& run_dir) {
  const auto complete = Complete(JoinPath(run_dir, kCheckpointDir));
  if (complete.empty()) return LoadNewestCheckpoint(run_dir);  // NotFound
  std::optional<Status> newest_error;
  for (auto it = complete.rbegin(); it != complete.rend(); ++it) {
    Result<Checkpoint> c = LoadCheckpoint(run_dir, it->first);
    if (c.ok()) {
      if (newest_error) {
        LogWarning(
            "resuming from the checkpoint of step {} instead of a "
            "newer one that is damaged",
            it->first);
      }
      return c;
    }
    LogWarning("skipping the checkpoint of step {}: {}", it->first,
               c.status().message());
    if (!newest_error) newest_error = c.status();
  }
  return newest_error->WithContext(fmt::format(
      "none of the {} checkpoints of {} is intact", complete.size(), run_dir));
}

Result<Checkpoint> LoadCheckpoint(const std::string& run_dir, int64_t step) {
  const std::string root = JoinPath(run_dir, kCheckpointDir);
  auto complete = Complete(root);
  if (complete.empty())
    return Status::NotFound(
        "{} holds no complete checkpoint (checkpoint.every_updates or "
        "checkpoint.every_s turns checkpoints on)",
        root);
  Checkpoint c;
  c.step = step < 0 ? complete.rbegin()->first : step;
  if (complete.count(c.step) == 0) {
    std::string steps;
    for (const auto& [s, name] : complete)
      steps += (steps.empty() ? "" : ", ") + std::to_string(s);
    return Status::NotFound("{} has no checkpoint of step {} (there are: {})",
                            root, step, steps);
  }
  c.dir = JoinPath(root, complete.at(c.step));
  const std::string manifest_path = JoinPath(c.dir, "manifest.json");
  ASSIGN_OR_RETURN(std::string text, ReadFile(manifest_path));
  nlohmann::json manifest = nlohmann::json::parse(text, nullptr, false);
  if (manifest.is_discarded() || !manifest.contains("files") ||
      !manifest["files"].is_object() ||
      manifest.value("format", "") != "strata-checkpoint-1")
    return Status::DataLoss("{}: not a strata checkpoint manifest",
                            manifest_path);
  for (const auto& [file, meta] : manifest["files"].items()) {
    const std::string path = JoinPath(c.dir, file);
    auto bytes = ReadFile(path);
    if (!bytes.ok())
      return Status::DataLoss("checkpoint file {} is missing or unreadable: {}",
                              path, bytes.status().message());
    const std::string md5 = Md5Hex(bytes->data(), bytes->size());
    if (bytes->size() != meta.value("bytes", uint64_t{0}) ||
        md5 != meta.value("md5", ""))
      return Status::DataLoss(
          "checkpoint file {} does not match its checksum in {} ({} bytes, "
          "md5 {}; the manifest says {} bytes, md5 {}): the checkpoint is "
          "damaged",
          path, manifest_path, bytes->size(), md5,
          meta.value("bytes", uint64_t{0}), meta.value("md5", ""));
    c.files[file] = std::move(*bytes);
  }
  return c;
}

Status CheckResumeConfig(const std::string& saved_toml, const Config& now,
                         bool workers_may_change) {
  ASSIGN_OR_RETURN(Config saved, Config::FromTomlString(
                                     saved_toml, "the checkpoint's config"));
  auto ignored = [workers_may_change](const std::string& k) {
    if (workers_may_change &&
        (k == "cluster.workers" || k == "cluster.data_servers"))
      return true;
    for (const char* prefix : {"checkpoint.", "metrics."})
      if (k.rfind(prefix, 0) == 0) return true;
    if (k.rfind("run.", 0) == 0) return k != "run.seed";
    // train.local_optimizer: where the local trainer updates; both of its
    // optimizers keep the same state.
    static const std::vector<std::string> keys = {
        "train.log_every",
        "train.profile_steps",
        "train.profile_from",
        "train.threads",
        "train.local_optimizer",
        "cluster.threads_per_worker",
        "cluster.heartbeat_interval_ms",
        "cluster.heartbeat_timeout_ms",
        "cluster.request_timeout_ms",
        "cluster.metrics_address",
        "cluster.processes_ip",
        "cluster.forward_metrics",
        "data.dir",
    };
    return std::find(keys.begin(), keys.end(), k) != keys.end();
  };
  auto text = [](const Config& c, const ConfigKey& k) -> std::string {
    switch (k.type) {
      case ConfigKey::Type::kInt:
        return std::to_string(c.GetInt(k.name));
      case ConfigKey::Type::kFloat:
        return fmt::format("{}", c.GetFloat(k.name));
      case ConfigKey::Type::kBool:
        return c.GetBool(k.name) ? "true" : "false";
      case ConfigKey::Type::kString:
        return "\"" + c.GetString(k.name) + "\"";
    }
    return "";
  };
  std::string differs;
  for (const ConfigKey& k : Config::Schema()) {
    if (ignored(k.name)) continue;
    const std::string a = text(saved, k), b = text(now, k);
    if (a == b) continue;
    differs += fmt::format("{}{}: {} in the checkpoint, {} now",
                           differs.empty() ? "" : "; ", k.name, a, b);
    // A run in one process over inproc records the default it chose
    // (launch/threads.cc); the same run resumed with --processes, or over TCP,
    // would choose another.
    if (k.name == "cluster.slice_kb" && now.GetFloat(k.name) < 0) {
      differs += fmt::format(
          " (the checkpoint's run chose {} for its transport; --set "
          "cluster.slice_kb={} resumes it)",
          a, a);
    }
  }
  if (differs.empty()) return Status::Ok();
  return Status::FailedPrecondition(
      "the checkpoint was made with another config ({})", differs);
}

}  // namespace strata

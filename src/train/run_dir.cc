#include "train/run_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/fs.h"

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
  return AppendLine(File(file), j.dump());
}

Status RunDirectory::WriteJson(const std::string& file,
                               const nlohmann::json& j) const {
  return WriteFileAtomic(File(file), j.dump(2) + "\n");
}

}  // namespace strata

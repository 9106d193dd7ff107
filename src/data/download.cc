#include "data/download.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/fs.h"
#include "common/log.h"
#include "common/md5.h"

extern char** environ;

namespace strata {
namespace {

struct KnownDataset {
  const char* name;
  const char* base_url;
  std::vector<std::pair<const char*, const char*>> files;  // filename, md5
  bool tar_gz;
};

const std::vector<KnownDataset>& Catalogue() {
  static const std::vector<KnownDataset> kCatalogue = {
      {"mnist",
       "https://ossci-datasets.s3.amazonaws.com/mnist/",
       {{"train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"},
        {"train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432"},
        {"t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3"},
        {"t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c"}},
       false},
      {"fashion-mnist",
       "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
       {{"train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"},
        {"train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe"},
        {"t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79"},
        {"t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310"}},
       false},
      {"cifar10",
       "https://www.cs.toronto.edu/~kriz/",
       {{"cifar-10-binary.tar.gz", "c32a1d4ab5d03f1284b67883e8d87530"}},
       true},
      {"cifar100",
       "https://www.cs.toronto.edu/~kriz/",
       {{"cifar-100-binary.tar.gz", "03b5dce01913d631647c71ecec9e9cb8"}},
       true},
  };
  return kCatalogue;
}

std::string JoinArgs(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) s += (s.empty() ? "" : " ") + a;
  return s;
}

// Runs a program found on PATH with `args` (args[0] is the program) and
// waits for it. Returns its exit status; IoError if it could not be started
// or was killed by a signal. No shell is involved, so URLs and paths need
// no quoting.
Result<int> RunProgram(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (rc != 0) {
    return Status::IoError("cannot run '{}': {}", JoinArgs(args),
                           std::strerror(rc));
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) {
      return Status::IoError("waiting for '{}': {}", JoinArgs(args),
                             std::strerror(errno));
    }
  }
  if (WIFSIGNALED(wstatus)) {
    return Status::IoError("'{}' was killed by signal {}", JoinArgs(args),
                           WTERMSIG(wstatus));
  }
  return WEXITSTATUS(wstatus);
}

Status FetchOne(const DownloadFile& file, const std::string& dir) {
  const std::string dest = JoinPath(dir, file.filename);
  if (FileExists(dest)) {
    ASSIGN_OR_RETURN(std::string have, Md5File(dest));
    if (have == file.md5) {
      LogInfo("{}: already present, md5 {} ok", dest, have);
      return Status::Ok();
    }
    LogWarning("{}: present but md5 is {}, expected {}; downloading again",
               dest, have, file.md5);
  }
  const std::string part = dest + ".part";
  std::remove(part.c_str());  // a stale partial download from an earlier run
  LogInfo("fetching {} -> {}", file.url, dest);
  ASSIGN_OR_RETURN(int rc, RunProgram({"curl", "-fsSL", "--retry", "2", "-o",
                                       part, file.url}));
  if (rc != 0) {
    std::remove(part.c_str());
    return Status::IoError(
        "fetching {} for {} failed: curl exited with "
        "status {}",
        file.url, dest, rc);
  }
  Result<std::string> got = Md5File(part);
  if (!got.ok()) {
    std::remove(part.c_str());
    return got.status();
  }
  if (*got != file.md5) {
    std::remove(part.c_str());
    return Status::DataLoss(
        "{}: md5 mismatch: expected {}, got {} (downloaded from {}; the "
        "partial file {} was removed)",
        file.filename, file.md5, *got, file.url, part);
  }
  if (std::rename(part.c_str(), dest.c_str()) != 0) {
    int err = errno;
    std::remove(part.c_str());
    return Status::IoError("{}: cannot rename into place: {}", dest,
                           std::strerror(err));
  }
  LogInfo("{}: md5 {} ok", dest, *got);
  return Status::Ok();
}

}  // namespace

const std::vector<std::string>& KnownDownloadDatasets() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const KnownDataset& d : Catalogue()) names.push_back(d.name);
    return names;
  }();
  return kNames;
}

Result<std::vector<DownloadFile>> DatasetDownloadFiles(
    const std::string& dataset, const std::string& mirror) {
  for (const KnownDataset& d : Catalogue()) {
    if (dataset != d.name) continue;
    std::string base = mirror.empty() ? d.base_url : mirror;
    if (base.back() != '/') base += '/';
    std::vector<DownloadFile> files;
    for (const auto& [name, md5] : d.files) {
      files.push_back(DownloadFile{base + name, name, md5, d.tar_gz});
    }
    return files;
  }
  std::string known;
  for (const std::string& n : KnownDownloadDatasets()) {
    known += (known.empty() ? "" : ", ") + n;
  }
  return Status::InvalidArgument("unknown dataset '{}' (known: {})", dataset,
                                 known);
}

Status DownloadFiles(const std::vector<DownloadFile>& files,
                     const std::string& dir) {
  RETURN_IF_ERROR(MakeDirs(dir));
  for (const DownloadFile& file : files) {
    RETURN_IF_ERROR(FetchOne(file, dir));
    if (!file.extract_tar_gz) continue;
    const std::string archive = JoinPath(dir, file.filename);
    LogInfo("extracting {} into {}", archive, dir);
    ASSIGN_OR_RETURN(int rc,
                     RunProgram({"tar", "-x", "-z", "-f", archive, "-C", dir}));
    if (rc != 0) {
      return Status::IoError(
          "extracting {} into {} failed: tar exited with "
          "status {}",
          archive, dir, rc);
    }
  }
  return Status::Ok();
}

Status DownloadDataset(const std::string& dataset, const std::string& dir,
                       const std::string& mirror) {
  ASSIGN_OR_RETURN(std::vector<DownloadFile> files,
                   DatasetDownloadFiles(dataset, mirror));
  RETURN_IF_ERROR(DownloadFiles(files, dir));
  LogInfo("{}: all {} file(s) in {}", dataset, files.size(), dir);
  return Status::Ok();
}

}  // namespace strata

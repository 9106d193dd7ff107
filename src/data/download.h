#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace strata {

// Fetching the public datasets (`strata data download ...`). The transfer is
// delegated to the `curl` binary and unpacking to `tar`, both run directly
// (no shell, so no quoting issues); every file is checked against its
// published MD5 before it is moved into place. Thread-safe (no shared state),
// but two downloads into the same directory at once will race on the files.

// One file of a dataset: where to get it, what to call it, its MD5, and
// whether it is a .tar.gz to unpack into the target directory afterwards.
struct DownloadFile {
  std::string url;
  std::string filename;
  std::string md5;  // 32 lower-case hex digits
  bool extract_tar_gz = false;
};

// The names DatasetDownloadFiles knows: mnist, fashion-mnist, cifar10,
// cifar100.
const std::vector<std::string>& KnownDownloadDatasets();

// The files of `dataset` with their official URLs, or, when `mirror` is not
// empty, with the URL's directory replaced by `mirror` (a base URL such as
// "file:///tmp/x/" or "https://host/path"; a trailing '/' is added if
// missing). InvalidArgument naming the known datasets for an unknown name.
Result<std::vector<DownloadFile>> DatasetDownloadFiles(
    const std::string& dataset, const std::string& mirror);

// Downloads `files` into `dir` (created if needed): a file already present
// with the right MD5 is not fetched again; otherwise it is fetched with
// `curl -fsSL --retry 2` to `<dir>/<filename>.part`, its MD5 checked, and
// renamed to `<dir>/<filename>`. Each .tar.gz is then unpacked into `dir`
// (again on every call: unpacking is idempotent and cheap next to the
// fetch). Stops at the first failure: IoError when curl or tar fails (with
// the URL or file and the exit status), DataLoss when the MD5 differs
// (naming the file, the expected and the actual MD5; the .part file is
// removed). Progress goes to LogInfo.
Status DownloadFiles(const std::vector<DownloadFile>& files,
                     const std::string& dir);

// DatasetDownloadFiles(dataset, mirror) then DownloadFiles(files, dir). The
// files land in `dir` itself (MNIST's four .gz files; CIFAR's tarball and
// its extracted cifar-10-batches-bin/ or cifar-100-binary/), which is the
// directory LoadMnistFamily / LoadCifar10 / LoadCifar100 then read.
Status DownloadDataset(const std::string& dataset, const std::string& dir,
                       const std::string& mirror);

}  // namespace strata

#include "common/fs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace strata {

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!FileExists(path)) return Status::NotFound("{}: no such file", path);
    return Status::IoError("{}: cannot open: {}", path, std::strerror(errno));
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return Status::IoError("{}: read error", path);
  return buf.str();
}

Status WriteFileAtomic(const std::string& path, const std::string& content) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return Status::IoError("{}: cannot write: {}", tmp, std::strerror(errno));
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) return Status::IoError("{}: write failed", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IoError("{}: cannot rename into place: {}", path,
                           std::strerror(errno));
  }
  return Status::Ok();
}

Status AppendLine(const std::string& path, const std::string& line) {
  // One write() of the whole line on an O_APPEND descriptor: lines appended
  // by several threads or processes never interleave.
  int fd =
      ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::IoError("{}: cannot append: {}", path, std::strerror(errno));
  std::string buf = line + "\n";
  ssize_t n = ::write(fd, buf.data(), buf.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(buf.size())) {
    return Status::IoError("{}: append failed: {}", path, std::strerror(err));
  }
  return Status::Ok();
}

Status MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec)
    return Status::IoError("cannot create directory '{}': {}", path,
                           ec.message());
  return Status::Ok();
}

bool FileExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

}  // namespace strata

#include "run/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "common/fs.h"
#include "common/log.h"

namespace strata {

namespace {

constexpr const char* kFile = "run.lock";

// The PID the holder wrote (empty when none could be read).
std::string HolderOf(const std::string& path) {
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return "";
  std::string pid = *text;
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' '))
    pid.pop_back();
  return pid;
}

}  // namespace

Result<RunLock> RunLock::Acquire(const std::string& run_dir) {
  const std::string path = JoinPath(run_dir, kFile);
  // O_CLOEXEC: the nodes --processes starts must not inherit the lock.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::IoError("{}: cannot open: {}", path, std::strerror(errno));
  // A few tries: a `strata scale` probing the lock holds it shared for an
  // instant.
  int locked = -1;
  for (int attempt = 0; attempt < 5; ++attempt) {
    locked = ::flock(fd, LOCK_EX | LOCK_NB);
    if (locked == 0 || errno != EWOULDBLOCK) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (locked != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      const std::string pid = HolderOf(path);
      return Status::FailedPrecondition(
          "the run in {} is going on in another process{}, which holds {}; "
          "stop it first, or scale it with strata scale",
          run_dir, pid.empty() ? "" : ", pid " + pid, path);
    }
    return Status::IoError("{}: cannot lock: {}", path, std::strerror(err));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) !=
                                     static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::close(fd);
    return Status::IoError("{}: cannot write the PID: {}", path,
                           std::strerror(err));
  }
  return RunLock(fd);
}

Result<std::optional<RunLock>> RunLock::Hold(const std::string& run_dir) {
  Result<RunLock> held = Acquire(run_dir);
  if (held.ok()) return std::optional<RunLock>(std::move(held).value());
  if (held.status().code() == Status::Code::kFailedPrecondition)
    return held.status();
  LogWarning("{}; going on without the check for a second process",
             held.status().message());
  return std::optional<RunLock>();
}

RunLock::State RunLock::Probe(const std::string& run_dir) {
  const std::string path = JoinPath(run_dir, kFile);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return State::kNone;
  const bool free = ::flock(fd, LOCK_SH | LOCK_NB) == 0;
  ::close(fd);  // releases the probe's own shared lock
  return free ? State::kFree : State::kHeld;
}

RunLock::RunLock(RunLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)) {}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // the kernel drops the flock with it
}

}  // namespace strata

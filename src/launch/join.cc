#include "launch/join.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "common/config.h"
#include "common/fs.h"
#include "common/log.h"
#include "coordinator/resize_restore.h"
#include "run/options.h"
#include "run/scale_request.h"

namespace strata {
namespace {

// A Unix socket address for `path`; false when it does not fit.
bool Address(const std::string& path, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr->sun_path)) return false;
  std::memcpy(addr->sun_path, path.c_str(), path.size() + 1);
  return true;
}

void WriteLine(int fd, const std::string& line) {
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n =
        ::send(fd, line.data() + done, line.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

void RemoteLife::Send(std::string line) {
  MutexLock lock(&mu_);
  words_.push_back(std::move(line));
}

void RemoteLife::Close() {
  MutexLock lock(&mu_);
  closed_ = true;
}

std::string RemoteLife::Poll(size_t next, bool* closed) {
  MutexLock lock(&mu_);
  last_poll_ = std::chrono::steady_clock::now();
  *closed = false;
  if (next < words_.size()) return words_[next];
  if (closed_) ended_ = *closed = true;
  return "";
}

double RemoteLife::silent_s() const {
  MutexLock lock(&mu_);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       last_poll_)
      .count();
}

bool RemoteLife::AwaitPoll(double quiet_s,
                           std::chrono::steady_clock::time_point until) const {
  while (silent_s() >= quiet_s) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

bool RemoteLife::Ended() const {
  MutexLock lock(&mu_);
  return ended_;
}

std::string JoinSocketPath(const std::string& run_dir) {
  return JoinPath(run_dir, "join.sock");
}

Result<std::unique_ptr<JoinListener>> JoinListener::Start(
    const std::string& run_dir) {
  const std::string path = JoinSocketPath(run_dir);
  sockaddr_un addr;
  if (!Address(path, &addr))
    return Status::InvalidArgument(
        "{}: the path is too long for a Unix socket; use a shorter run.dir",
        path);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IoError("{}: {}", path, std::strerror(errno));
  ::unlink(path.c_str());  // a stale socket of an earlier launch
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 8) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Status::IoError("{}: {}", path, why);
  }
  std::unique_ptr<JoinListener> l(new JoinListener(run_dir, fd));
  l->thread_ = std::thread([p = l.get()] { p->Serve(); });
  return l;
}

JoinListener::~JoinListener() {
  done_ = true;
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::unlink(JoinSocketPath(run_dir_).c_str());
  // Joiners that never got a life: their channel closes, and they end.
  MutexLock lock(&mu_);
  for (const Joiner& j : waiting_) {
    if (j.remote) j.remote->Close();
    if (j.fd >= 0) ::close(j.fd);
  }
}

std::optional<Joiner> JoinListener::Take() {
  MutexLock lock(&mu_);
  if (waiting_.empty()) return std::nullopt;
  Joiner j = waiting_.front();
  waiting_.pop_front();
  return j;
}

Result<std::shared_ptr<RemoteLife>> JoinListener::JoinRemote(
    const std::string& host, int64_t pid) {
  // A ticket nobody guesses: without CURVE it is what keeps one joiner
  // from taking another's lives.
  std::random_device rd;
  const int64_t ticket =
      static_cast<int64_t>((uint64_t{rd()} << 31) ^ uint64_t{rd()}) & INT64_MAX;
  Joiner j;
  j.remote = std::make_shared<RemoteLife>(ticket, host, pid);
  const std::string refused = Admit(j);
  if (!refused.empty()) {
    LogWarning("a worker on {} (pid {}) cannot join: {}", host, pid, refused);
    return Status::FailedPrecondition("the run did not take this worker: {}",
                                      refused);
  }
  MutexLock lock(&mu_);
  remotes_[ticket] = j.remote;
  return j.remote;
}

std::string JoinListener::Admit(const Joiner& j) {
  MutexLock ask(&ask_mu_);
  int waiting = 0;
  {
    MutexLock lock(&mu_);
    waiting = static_cast<int>(waiting_.size());
  }
  const std::string refused = AskForOneMore(waiting);
  if (!refused.empty()) return refused;
  MutexLock lock(&mu_);
  waiting_.push_back(j);
  return "";
}

Result<std::shared_ptr<RemoteLife>> JoinListener::Remote(int64_t ticket) {
  MutexLock lock(&mu_);
  auto it = remotes_.find(ticket);
  if (it == remotes_.end())
    return Status::NotFound("no worker joined this run with ticket {}", ticket);
  return it->second;
}

std::string JoinListener::AskForOneMore(int waiting) {
  const std::string path = JoinPath(run_dir_, "config.toml");
  Result<Config> config = Config::FromTomlFile(path);
  if (!config.ok()) return config.status().message();
  Result<ClusterRunOptions> o = ClusterRunOptions::FromConfig(*config);
  if (!o.ok()) return o.status().message();
  if (ScalePending(run_dir_))
    return "another scale is waiting for the run; join again once it is done";
  // Joiners already asked for but not given a slot yet (a scale taken and
  // its next life not started): one more than those too.
  const int to = o->roles.num_workers() + waiting + 1;
  Status st = CheckScale(*config, *o, to);
  if (st.ok()) {
    ScaleRequest request;
    request.workers = to;
    request.asked_unix = UnixNow();
    st = AskScale(run_dir_, request);
  }
  if (!st.ok()) return st.message();
  LogInfo("a worker started by hand asks to join: scaling to {} workers", to);
  return "";
}

void JoinListener::Serve() {
  while (!done_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Joiner j;
    j.fd = fd;
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
      j.pid = cred.pid;
    // Its PID is how the launcher waits for it and ends it.
    const std::string refused =
        j.pid > 0 ? Admit(j) : "the join socket did not say the process's PID";
    if (!refused.empty()) {
      LogWarning("a worker started by hand (pid {}) cannot join: {}", j.pid,
                 refused);
      WriteLine(fd, nlohmann::json{{"refused", refused}}.dump() + "\n");
      ::close(fd);
    }
  }
}

Result<int> ConnectToJoin(const std::string& run_dir) {
  const std::string path = JoinSocketPath(run_dir);
  sockaddr_un addr;
  if (!Address(path, &addr))
    return Status::InvalidArgument("{}: too long for a Unix socket", path);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IoError("{}: {}", path, std::strerror(errno));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Status::FailedPrecondition(
        "nothing listens on {} ({}): a worker joins a `strata train "
        "--processes` run that is training, on the machine that holds its run "
        "directory",
        path, why);
  }
  return fd;
}

}  // namespace strata

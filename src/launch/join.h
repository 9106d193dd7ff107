#pragma once

// A worker started by hand joins a running `--processes` job
// (docs/design/elastic.md, "A worker started by hand"):
//
//   strata node --join RUN_DIR
//
// The launcher of a --processes run listens on RUN_DIR/join.sock (a Unix
// socket: the joining process runs on the machine that holds the run
// directory). A process that connects asks to join: the launcher checks
// that the run can take one more worker (CheckScale) and asks the run to
// scale to it (scale.json, as `strata scale` does). At the checkpoint that
// takes the request, the next life gives the new worker's slot to the
// waiting process instead of starting one: its connection becomes its life
// channel (launch/life_channel.h), which then works as a started node's
// does. A join the run cannot take is refused on the channel, naming why.
//
// A worker on another machine joins through the run's control endpoint
// instead (cluster.control_address, launch/control_endpoint.h):
//
//   strata node --join tcp://HOST:PORT [--keys-dir DIR] --bind tcp://ITS_IP:*
//
// It asks the same way (JoinRemote), and its life channel is a RemoteLife:
// a mailbox it polls through the endpoint, since the launcher has no
// socket to it; its lives carry the run's config.
//
// Thread-safe: the listener's thread accepts; the control endpoint's
// thread adds and polls remote joiners; Take() is called from the
// launcher's thread.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace strata {

// The socket a run directory's launcher listens on.
std::string JoinSocketPath(const std::string& run_dir);

// The life channel of a worker on another machine: the launcher's words,
// kept until the node polls for them. Thread-safe.
class RemoteLife {
 public:
  RemoteLife(int64_t ticket, std::string host, int64_t pid)
      : ticket_(ticket), host_(std::move(host)), pid_(pid) {}
  int64_t ticket() const { return ticket_; }
  const std::string& host() const { return host_; }
  int64_t pid() const { return pid_; }  // on its own machine

  // The launcher: one word (NextLife::ToLine()), or the end.
  void Send(std::string line) EXCLUDES(mu_);
  void Close() EXCLUDES(mu_);
  // The node's poll for word `next` (the number of words it got so far):
  // that word; empty when it is not there yet, with *closed set when it
  // never will be (the end). A poll repeated after a lost reply gets the
  // same word again.
  std::string Poll(size_t next, bool* closed) EXCLUDES(mu_);
  // Whether the node polled the end after Close().
  bool Ended() const EXCLUDES(mu_);
  // Seconds since the node last polled (or joined). A joiner waiting for
  // its first life polls every 100 ms: one silent for seconds is gone.
  double silent_s() const EXCLUDES(mu_);
  // Whether the node polls: true once it polled within the last `quiet_s`
  // seconds, false if it has not by `until`. A node whose life ended asks
  // for its next one every 100 ms: one that does not died between lives.
  bool AwaitPoll(double quiet_s,
                 std::chrono::steady_clock::time_point until) const
      EXCLUDES(mu_);

 private:
  const int64_t ticket_;
  const std::string host_;
  const int64_t pid_;
  mutable Mutex mu_;
  std::vector<std::string> words_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
  bool ended_ GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point last_poll_ GUARDED_BY(mu_) =
      std::chrono::steady_clock::now();
};

// A process that joined and waits for its first life.
struct Joiner {
  int fd = -1;     // its connection: the life channel
  pid_t pid = -1;  // its process (SO_PEERCRED)
  // A worker on another machine: its channel instead of fd and pid.
  std::shared_ptr<RemoteLife> remote;
};

class JoinListener {
 public:
  // Listens on JoinSocketPath(run_dir) (a stale socket file is replaced).
  // IoError naming the path.
  static Result<std::unique_ptr<JoinListener>> Start(
      const std::string& run_dir);
  ~JoinListener();
  JoinListener(const JoinListener&) = delete;
  JoinListener& operator=(const JoinListener&) = delete;

  // The oldest process that joined and waits for a life, if any; the
  // caller owns its fd from here.
  std::optional<Joiner> Take() EXCLUDES(mu_);

  // A worker on `host` (its process `pid` there) asks to join through the
  // control endpoint: the run is asked for one more worker, as for a local
  // join, and the joiner waits with a RemoteLife. FailedPrecondition naming
  // why the run cannot take it.
  Result<std::shared_ptr<RemoteLife>> JoinRemote(const std::string& host,
                                                 int64_t pid) EXCLUDES(mu_);
  // The channel of the remote joiner `ticket`; NotFound for a ticket this
  // run never gave.
  Result<std::shared_ptr<RemoteLife>> Remote(int64_t ticket) EXCLUDES(mu_);

 private:
  explicit JoinListener(std::string run_dir, int fd)
      : run_dir_(std::move(run_dir)), listen_fd_(fd) {}
  void Serve();
  // Asks the run for one more worker than it has and than joined before
  // (`waiting` joiners not given a slot yet); the refusal to send back, or
  // empty.
  std::string AskForOneMore(int waiting);
  // Admits `j` once the run was asked for one more worker (under ask_mu_,
  // so two joins ask for two more); the refusal, or empty.
  std::string Admit(const Joiner& j) EXCLUDES(mu_, ask_mu_);

  const std::string run_dir_;
  const int listen_fd_;
  std::atomic<bool> done_{false};
  Mutex mu_;
  std::deque<Joiner> waiting_ GUARDED_BY(mu_);
  std::map<int64_t, std::shared_ptr<RemoteLife>> remotes_ GUARDED_BY(mu_);
  Mutex ask_mu_;        // one join asks the run at a time
  std::thread thread_;  // last: started once the rest exists
};

// The joining side: connects to the launcher of the run in `run_dir`; the
// connection's fd (the life channel). FailedPrecondition naming the run
// when nobody listens (not a --processes run, or not running).
Result<int> ConnectToJoin(const std::string& run_dir);

}  // namespace strata

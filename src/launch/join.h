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
// Thread-safe: the listener's thread accepts; Take() is called from the
// launcher's thread.

#include <sys/types.h>

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"

namespace strata {

// The socket a run directory's launcher listens on.
std::string JoinSocketPath(const std::string& run_dir);

// A process that joined and waits for its first life.
struct Joiner {
  int fd = -1;     // its connection: the life channel
  pid_t pid = -1;  // its process (SO_PEERCRED)
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

 private:
  explicit JoinListener(std::string run_dir, int fd)
      : run_dir_(std::move(run_dir)), listen_fd_(fd) {}
  void Serve();
  // Asks the run for one more worker; the refusal to send back, or empty.
  std::string AskForOneMore();

  const std::string run_dir_;
  const int listen_fd_;
  std::atomic<bool> done_{false};
  Mutex mu_;
  std::deque<Joiner> waiting_ GUARDED_BY(mu_);
  std::thread thread_;  // last: started once the rest exists
};

// The joining side: connects to the launcher of the run in `run_dir`; the
// connection's fd (the life channel). FailedPrecondition naming the run
// when nobody listens (not a --processes run, or not running).
Result<int> ConnectToJoin(const std::string& run_dir);

}  // namespace strata

#pragma once

// The next life of a --processes node (docs/design/elastic.md, "Keeping
// the processes"). The launcher starts every node with a channel (a Unix
// socket pair); a node whose role ended, well or not, waits on it for what
// to do next:
//
//   the channel closes  the run is over, or this node leaves it: the
//                       process ends;
//   one JSON line       {"coordinator": ENDPOINT, "set": [KEY=VALUE, ...],
//                       "index": I}: a scale kept this node; it reads the
//                       run's config.toml again, applies "set", and runs its
//                       role again in the same process against the new
//                       coordinator, as the role's node I ("index" may be
//                       left out: the same index).
//                       A node on another machine gets the run's config
//                       too ("config": TOML text).
//   {"refused": WHY}    (a node that asked to join, launch/join.h) the run
//                       does not take it: the process ends with that error.
//
// So a scale keeps the processes of the nodes the new size still has (their
// PIDs, loaded data and LibTorch) and starts only the newcomers. Functions
// only; each call uses its own descriptor, so calls on different channels
// are thread-safe.

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace strata {

struct NextLife {
  std::string coordinator;             // the new coordinator's endpoint
  std::vector<std::string> overrides;  // --set KEY=VALUE, in order
  int index = -1;  // the node's index from now on (a drain renumbers the
                   // workers after it); -1: the same
  // The run's config.toml, for a node on another machine (launch/join.h's
  // RemoteLife), which cannot read the run directory; empty: read it there.
  std::string config;

  std::string ToLine() const;  // one JSON line, '\n' ended
  // DataLoss naming the line for anything but a next life;
  // FailedPrecondition with the reason for a refused join.
  static Result<NextLife> FromLine(const std::string& line);
};

// The descriptor a node's channel has in the child (the launcher passes it
// as --life-fd).
constexpr int kLifeFd = 3;

// How long a node whose role ended waits for the launcher's word.
constexpr std::chrono::seconds kLifeWait{120};

// The launcher: sends `life` on the node's channel (a socket). IoError when
// the node's end is gone (it died); never SIGPIPE.
Status SendNextLife(int fd, const NextLife& life);

// The node: waits up to `timeout` for the launcher's word on `fd`. nullopt
// when the channel closed (the process should end); Cancelled when `stop` was
// set while waiting; DeadlineExceeded, naming the wait, when nothing came;
// DataLoss for a line that is not a next life.
Result<std::optional<NextLife>> WaitNextLife(int fd,
                                             std::chrono::milliseconds timeout,
                                             const std::atomic<bool>* stop);

}  // namespace strata

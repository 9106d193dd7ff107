#pragma once

// The run's control endpoint (cluster.control_address;
// docs/design/elastic.md): `strata scale --control tcp://HOST:PORT` from any
// machine that reaches it asks the run to scale, as `strata scale RUN_DIR`
// does on the machine that holds the run directory. The launcher serves it
// for the whole run, across the lives a scale starts. Under
// cluster.security = "curve" it admits only clients holding the cluster key
// pair (transport/zmq/request_reply.h).
//
// The requests, one JSON object each:
//   {"workers": N, "drain": [I, ...], "timeout_s": T, "data_servers": M}:
//     scale (M 0 or absent: the same data servers); the reply
//     {"ok": true, "from", "to", "step", "since_request_s"};
//   {"join": {"host": H, "pid": P}} (a --processes run): a worker on
//     another machine joins (launch/join.h); the reply {"ok": true,
//     "ticket": T, "lives_port": P, "config": TOML}. Refused when the
//     run's nodes bind loopback (cluster.processes_ip) but the endpoint
//     does not.
// Any refusal: {"ok": false, "code": "InvalidArgument", "error": "..."};
// also for JSON whose values have the wrong types.
// A joined worker polls its lives at the second endpoint, on port P (a
// scale waits on the first one until the run trains again, which may need
// the joiner's next life): {"life": T, "got": N} (N lives got so far) gets
// {"ok": true, "life": {...}} (its next NextLife), {"ok": true, "wait":
// true} or {"ok": true, "end": true}; a poll whose reply was lost is asked
// again and answered the same.

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "launch/join.h"
#include "launch/life_channel.h"
#include "launch/scale.h"
#include "run/run_dir.h"
#include "transport/zmq/request_reply.h"

namespace strata {

// The run's two endpoints: requests, and the joined workers' lives.
struct ControlEndpoint {
  std::unique_ptr<ReplyServer> control;
  std::unique_ptr<ReplyServer> lives;
};

// Starts the endpoints of `config`'s cluster.control_address for the run in
// `run_dir` (null when the key is empty) and writes their bound addresses
// into <run_dir>/control.json. `joins`: a --processes run's (null: joins
// are refused, naming why). Errors as ReplyServer::Start, or the config's
// security keys'.
Result<std::unique_ptr<ControlEndpoint>> StartControlEndpoint(
    const Config& config, const RunDirectory& run_dir,
    const std::atomic<bool>* stop, JoinListener* joins);

// `strata scale --control ENDPOINT`: asks the run behind `endpoint` to
// scale (ScaleRun's arguments), with the cluster key pair in `keys_dir`
// when the run is secured (empty: no CURVE). The run's own refusals come
// back with their codes; kDeadlineExceeded when the endpoint did not answer
// within twice `timeout` and 2 s more.
Result<ScaleOutcome> ScaleRemote(const std::string& endpoint,
                                 const std::string& keys_dir, int workers,
                                 const std::vector<int>& leaving,
                                 std::chrono::milliseconds timeout,
                                 int data_servers = 0);

// A worker on another machine that joined a run (`strata node --join
// tcp://HOST:PORT`): where it polls its lives, with what keys, its ticket,
// and the run's config.
struct RemoteJoin {
  std::string lives;
  std::optional<CurveKeys> curve;
  int64_t ticket = 0;
  std::string config;   // TOML text
  size_t received = 0;  // lives got so far (a poll asks for the next)
};

// Asks the run behind the control endpoint `endpoint` to take this process
// (`host`, `pid`) as one more worker, with the cluster key pair in
// `keys_dir` when the run is secured (empty: no CURVE). The run's refusal
// comes back with its code; kDeadlineExceeded naming the endpoint when it
// did not answer within `timeout` (also a secured run refusing a client
// without its key pair).
Result<RemoteJoin> AskToJoin(const std::string& endpoint,
                             const std::string& keys_dir,
                             const std::string& host, int64_t pid,
                             std::chrono::milliseconds timeout);

// The joined worker, after its role ended (or before its first life):
// polls for the launcher's word, every 100 ms for up to `timeout`. A next
// life, or nullopt for the end of the run; the end too when the endpoint
// stopped answering after `had_life` (the launcher is gone). Cancelled when
// `stop` was set; DeadlineExceeded naming the wait; DataLoss for a reply
// that is not a life.
Result<std::optional<NextLife>> WaitRemoteLife(
    RemoteJoin& join, std::chrono::milliseconds timeout, bool had_life,
    const std::atomic<bool>* stop);

}  // namespace strata

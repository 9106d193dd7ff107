#pragma once

// The run's control endpoint (cluster.control_address;
// docs/design/elastic.md): `strata scale --control tcp://HOST:PORT` from any
// machine that reaches it asks the run to scale, as `strata scale RUN_DIR`
// does on the machine that holds the run directory. The launcher serves it
// for the whole run, across the lives a scale starts. Under
// cluster.security = "curve" it admits only clients holding the cluster key
// pair (transport/zmq/request_reply.h).
//
// The request, one JSON object: {"workers": N, "drain": [I, ...],
// "timeout_s": T}; the reply: {"ok": true, "from", "to", "step",
// "since_request_s"} or {"ok": false, "code": "InvalidArgument", "error":
// "..."}.

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "launch/scale.h"
#include "run/run_dir.h"
#include "transport/zmq/request_reply.h"

namespace strata {

// Starts the endpoint of `config`'s cluster.control_address for the run in
// `run_dir` (null when the key is empty) and writes its bound address into
// <run_dir>/control.json. Errors as ReplyServer::Start, or the config's
// security keys'.
Result<std::unique_ptr<ReplyServer>> StartControlEndpoint(
    const Config& config, const RunDirectory& run_dir,
    const std::atomic<bool>* stop);

// `strata scale --control ENDPOINT`: asks the run behind `endpoint` to
// scale (ScaleRun's arguments), with the cluster key pair in `keys_dir`
// when the run is secured (empty: no CURVE). The run's own refusals come
// back with their codes; kDeadlineExceeded when the endpoint did not answer
// within twice `timeout` and 2 s more.
Result<ScaleOutcome> ScaleRemote(const std::string& endpoint,
                                 const std::string& keys_dir, int workers,
                                 const std::vector<int>& leaving,
                                 std::chrono::milliseconds timeout);

}  // namespace strata

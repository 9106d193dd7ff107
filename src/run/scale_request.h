#pragma once

// Scaling a running job (`strata scale RUN_DIR --workers N`,
// docs/design/elastic.md). The request travels through the run directory,
// so it needs no address and reaches an embedded run and a --processes
// launch alike on the machine that holds the run directory:
//
//   scale.json           asked: {"workers": N, "asked_unix": t}
//   scale.accepted.json  the coordinator took it, stopped the workers at a
//                        checkpoint and hands it to the launcher, which
//                        resumes the run on N workers (launch/train.cc)
//   scale.refused.json   the coordinator could not take it, and why
//   membership.jsonl     every change of the worker count, one JSON line
//                        each (summary.json "membership")
//
// Thread-safe (no shared state); the files are written atomically.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace strata {

struct ScaleRequest {
  int workers = 0;
  double asked_unix = 0;  // seconds since the epoch, when it was asked
  int64_t step = 0;       // accepted: the checkpoint's step it resumes at
  // Workers asked to leave (a drain: `strata scale --drain I`); the others
  // go on in their order as workers 0, 1, ... Empty: the last ones leave
  // (a shrink) or none (a growth).
  std::vector<int> leaving;
  // A new number of data servers (`strata scale --data-servers M`); 0: the
  // run's.
  int data_servers = 0;

  nlohmann::json ToJson() const;
  // DataLoss naming `what` for JSON that is not a request.
  static Result<ScaleRequest> FromJson(const std::string& text,
                                       const std::string& what);
};

// Seconds since the epoch, now.
double UnixNow();

// Asks the run in `run_dir` to scale (scale.json); FailedPrecondition when
// a request is already waiting there.
Status AskScale(const std::string& run_dir, const ScaleRequest& request);
// The waiting request of `run_dir`, if any (the coordinator looks).
Result<std::optional<ScaleRequest>> PendingScale(const std::string& run_dir);
// Whether scale.json is still there (not taken yet).
bool ScalePending(const std::string& run_dir);
// Withdraws the waiting request (a `strata scale` that gave up).
void WithdrawScale(const std::string& run_dir);
// The coordinator cannot take the waiting request: scale.json becomes
// scale.refused.json with `why`.
Status RefuseScale(const std::string& run_dir, const std::string& why);
// The refusal of the request asked at `asked_unix`, removed; empty when
// there is none.
std::string TakeRefusal(const std::string& run_dir, double asked_unix);
// The coordinator took `request` and stopped the run for it at `step`:
// scale.json becomes scale.accepted.json.
Status AcceptScale(const std::string& run_dir, ScaleRequest request,
                   int64_t step);
// The launcher: an accepted request, removed (nullopt when there is none).
Result<std::optional<ScaleRequest>> TakeAcceptedScale(
    const std::string& run_dir);

// membership.jsonl: one line appended; every line, in order.
Status AppendMembership(const std::string& run_dir, const nlohmann::json& j);
nlohmann::json ReadMembership(const std::string& run_dir);

}  // namespace strata

#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "ps/server.h"

namespace strata {

// A server node's parameter servers: one ParameterServer per range of the
// node's share of the keys (KeyLayout::Bucketed; one range without
// layer-wise pipelining), all on the node's endpoint. Each range is pushed,
// applied, versioned and pulled on its own, so a worker's gradient is
// applied bucket by bucket as it arrives (and in sync mode each range
// closes its step by itself). Checkpoints and statistics are the node's
// whole share: the state is one range's format (ParameterServer::
// SaveState) over the share, with each range's version kept beside it.
// Thread-safe: Configure() once (the node's join), the rest from the
// endpoint's thread or any other.
class ServerGroup {
 public:
  ServerGroup(ServerOptions options, RpcEndpoint& rpc);
  ServerGroup(const ServerGroup&) = delete;
  ServerGroup& operator=(const ServerGroup&) = delete;

  // The ranges (consecutive, in key order) and the schedule, before the
  // first push. `lead_key` >= 0 (sync k-of-n, leader-first): the range
  // that begins at that key leads and every other range follows
  // (UpdatePolicy::follower), whatever the options say.
  void Configure(const std::vector<KeyRange>& ranges, LrSchedule schedule,
                 int64_t lead_key = -1) EXCLUDES(mu_);
  // A push, pull, statistics or checkpoint request (on the endpoint's
  // thread): pushes and pulls go to the range whose keys they name
  // exactly; anything else is refused, naming the ranges this node owns.
  void Handle(Message msg);
  Result<std::vector<Buffer>> SaveState() const;
  // From SaveState()'s form, saved with the same share; the ranges may be
  // cut differently if every range was at the same version.
  Status RestoreState(const std::vector<Buffer>& state);
  // The ranges' statistics as one report (no_ranges before there are
  // any), and as its JSON text (the payload of kStatsReply).
  ServerReport Report() const;
  std::string StatsJson() const { return Report().ToJson().dump(); }
  int num_ranges() const;

 private:
  std::vector<std::shared_ptr<ParameterServer>> Servers() const EXCLUDES(mu_);
  KeyRange Share() const;

  const ServerOptions options_;
  RpcEndpoint& rpc_;
  mutable Mutex mu_;
  std::vector<std::shared_ptr<ParameterServer>> servers_ GUARDED_BY(mu_);
};

}  // namespace strata

#include "cluster/run_mode.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace strata {
namespace {

struct ModeEntry {
  RunMode mode;
  const char* name;
  ExchangeFamily family;
};

constexpr ModeEntry kModes[] = {
    {RunMode::kLocal, "local", ExchangeFamily::kNone},
    {RunMode::kSync, "sync", ExchangeFamily::kPushPull},
    {RunMode::kAsync, "async", ExchangeFamily::kPushPull},
    {RunMode::kSsp, "ssp", ExchangeFamily::kPushPull},
    {RunMode::kEasgd, "easgd", ExchangeFamily::kElastic},
    {RunMode::kAllReduce, "allreduce", ExchangeFamily::kCollective},
    {RunMode::kRing, "ring", ExchangeFamily::kCollective},
    {RunMode::kLocalSgd, "local-sgd", ExchangeFamily::kCollective},
    {RunMode::kDpsgd, "dpsgd", ExchangeFamily::kNeighbour},
    {RunMode::kGossip, "gossip", ExchangeFamily::kGossip},
    {RunMode::kTreeEasgd, "tree-easgd", ExchangeFamily::kTree},
};

const ModeEntry& EntryOf(RunMode mode) {
  for (const ModeEntry& e : kModes) {
    if (e.mode == mode) return e;
  }
  return kModes[0];  // unreachable: every enumerator is in the table
}

}  // namespace

Result<RunMode> ParseRunMode(const std::string& name) {
  for (const ModeEntry& e : kModes) {
    if (name == e.name) return e.mode;
  }
  return Status::InvalidArgument("unknown cluster.mode '{}' (one of: {})", name,
                                 fmt::join(RunModeNames(), ", "));
}

const char* RunModeName(RunMode mode) { return EntryOf(mode).name; }

std::vector<std::string> RunModeNames() {
  std::vector<std::string> names;
  for (const ModeEntry& e : kModes) names.emplace_back(e.name);
  return names;
}

ExchangeFamily FamilyOf(RunMode mode) { return EntryOf(mode).family; }

bool UsesServers(RunMode mode) {
  const ExchangeFamily f = FamilyOf(mode);
  return f == ExchangeFamily::kPushPull || f == ExchangeFamily::kElastic;
}

bool IsDecentralized(RunMode mode) {
  const ExchangeFamily f = FamilyOf(mode);
  return f == ExchangeFamily::kCollective || f == ExchangeFamily::kNeighbour ||
         f == ExchangeFamily::kGossip || f == ExchangeFamily::kTree;
}

bool WorkerLossFatal(RunMode mode) {
  const ExchangeFamily f = FamilyOf(mode);
  return mode == RunMode::kSync || f == ExchangeFamily::kCollective ||
         f == ExchangeFamily::kNeighbour;
}

bool Lockstep(RunMode mode) {
  return mode == RunMode::kSync ||
         FamilyOf(mode) == ExchangeFamily::kCollective ||
         FamilyOf(mode) == ExchangeFamily::kNeighbour;
}

}  // namespace strata

#include "ps/server_group.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "ps/protocol.h"

namespace strata {
namespace {

// The range whose counters are the node's (every gradient reaches every
// range): the lead range if this node has it (sync k-of-n: a follower
// counts no dropped or deferred gradients), else the first.
size_t CountedRange(const std::vector<std::shared_ptr<ParameterServer>>& s) {
  for (size_t i = 0; i < s.size(); ++i)
    if (!s[i]->follower()) return i;
  return 0;
}

// Whether the saved ranges are cut as this node's (own) are, so that each
// keeps its saved version and step count; if not, every saved range must
// have been at the same version, or the state cannot be restored.
Result<bool> SameCut(const nlohmann::json& ranges,
                     const DecodedServerState& saved,
                     const std::vector<KeyRange>& own,
                     const std::string& what) {
  bool same_cut = ranges.size() == own.size();
  bool uniform = true;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const nlohmann::json& r = ranges[i];
    if (!r.is_object() ||
        !r.value("version", nlohmann::json()).is_number_integer() ||
        !r.value("optimizer_steps", nlohmann::json()).is_number_integer()) {
      return Status::DataLoss("{}: bad entry {} in \"ranges\"", what, i);
    }
    uniform =
        uniform && r["version"].get<int64_t>() == saved.state.version &&
        r["optimizer_steps"].get<int64_t>() == saved.state.optimizer.steps;
    if (same_cut) {
      same_cut = r.value("range", nlohmann::json()) ==
                 nlohmann::json{own[i].begin, own[i].end};
    }
  }
  if (!same_cut && !uniform) {
    return Status::DataLoss(
        "{}: saved in {} ranges at different versions, which cannot be cut "
        "into this node's {} ranges (restore with the cluster.pipeline, "
        "cluster.pipeline_kb and cluster.slice_kb the checkpoint was written "
        "with, and a strata that cuts a model into ranges the same way; "
        "slice_kb's default differs between one process over inproc and "
        "TCP, UCX or --processes)",
        what, ranges.size(), own.size());
  }
  return same_cut;
}

}  // namespace

ServerGroup::ServerGroup(ServerOptions options, RpcEndpoint& rpc)
    : options_(std::move(options)), rpc_(rpc) {}

void ServerGroup::Configure(const std::vector<KeyRange>& ranges,
                            LrSchedule schedule, int64_t lead_key) {
  std::vector<std::shared_ptr<ParameterServer>> servers;
  for (const KeyRange& r : ranges) {
    ServerOptions o = options_;
    o.range = r;
    o.schedule = schedule;
    if (lead_key >= 0) o.policy.follower = r.begin != lead_key;
    servers.push_back(std::make_shared<ParameterServer>(o, rpc_));
  }
  MutexLock lock(&mu_);
  servers_ = std::move(servers);
}

std::vector<std::shared_ptr<ParameterServer>> ServerGroup::Servers() const {
  MutexLock lock(&mu_);
  return servers_;
}

int ServerGroup::num_ranges() const {
  return static_cast<int>(Servers().size());
}

KeyRange ServerGroup::Share() const {
  const auto servers = Servers();
  if (servers.empty()) return KeyRange{};
  return KeyRange{servers.front()->range().begin, servers.back()->range().end};
}

void ServerGroup::Handle(Message msg) {
  const MessageType type = msg.header.type;
  const auto servers = Servers();
  if (type == MessageType::kCheckpointRequest) {
    auto state = SaveState();
    if (!state.ok()) {
      rpc_.ReplyErrorOrLog(msg, state.status());
      return;
    }
    Message reply;
    reply.header.type = MessageType::kAck;
    reply.header.clock = servers.empty() ? 0 : servers.front()->version();
    reply.payloads = std::move(*state);
    rpc_.ReplyOrLog(msg, std::move(reply));
    return;
  }
  if (type == MessageType::kStatsRequest) {
    Message reply;
    reply.header.type = MessageType::kStatsReply;
    const std::string text = StatsJson();
    reply.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
    rpc_.ReplyOrLog(msg, std::move(reply));
    return;
  }
  if (servers.size() == 1) {
    // One range: the server checks the keys itself.
    servers.front()->Handle(std::move(msg));
    return;
  }
  // Ranges are consecutive: the one that starts at the message's first key.
  auto it =
      std::lower_bound(servers.begin(), servers.end(), msg.header.key_begin,
                       [](const std::shared_ptr<ParameterServer>& s,
                          int64_t key) { return s->range().begin < key; });
  if (it == servers.end() || (*it)->range().begin != msg.header.key_begin ||
      (*it)->range().end != msg.header.key_end) {
    const KeyRange share = Share();
    int64_t smallest = 0, largest = 0;
    for (const auto& s : servers) {
      const int64_t n = s->range().size();
      smallest = smallest == 0 ? n : std::min(smallest, n);
      largest = std::max(largest, n);
    }
    Status st = Status::InvalidArgument(
        "server node {} owns keys [{}, {}) in {} ranges of {} to {} keys; {} "
        "from node {} was for [{}, {}), which is not one of them",
        rpc_.node_id(), share.begin, share.end, servers.size(), smallest,
        largest, MessageTypeName(type), msg.header.sender, msg.header.key_begin,
        msg.header.key_end);
    LogWarning("{}", st.message());
    rpc_.ReplyErrorOrLog(msg, st);
    return;
  }
  (*it)->Handle(std::move(msg));
}

Result<std::vector<Buffer>> ServerGroup::SaveState() const {
  const auto servers = Servers();
  if (servers.empty()) {
    return Status::FailedPrecondition(
        "server node {} has no key ranges yet (nothing to checkpoint)",
        rpc_.node_id());
  }
  if (servers.size() == 1) return servers.front()->SaveState();
  // One state over the share: the parameters and the optimizer's buffers
  // end to end; the version and the optimizer's step count of the first
  // range, the counters of CountedRange(); and each range's own version
  // and step count beside them.
  ShardState merged;
  const size_t counted = CountedRange(servers);
  nlohmann::json ranges = nlohmann::json::array();
  for (size_t i = 0; i < servers.size(); ++i) {
    ASSIGN_OR_RETURN(ShardState s, servers[i]->SaveShardState());
    const KeyRange r = servers[i]->range();
    ranges.push_back({{"range", {r.begin, r.end}},
                      {"version", s.version},
                      {"optimizer_steps", s.optimizer.steps}});
    merged.params.insert(merged.params.end(), s.params.begin(), s.params.end());
    for (const auto& [name, values] : s.optimizer.buffers) {
      std::vector<float>& to = merged.optimizer.buffers[name];
      to.insert(to.end(), values.begin(), values.end());
    }
    if (i == 0) {
      merged.version = s.version;
      merged.optimizer.steps = s.optimizer.steps;
    }
    if (i == counted) merged.stats = s.stats;
  }
  return EncodeServerState(Share(), merged,
                           nlohmann::json{{"ranges", ranges}}.dump());
}

Status ServerGroup::RestoreState(const std::vector<Buffer>& state) {
  const auto servers = Servers();
  const std::string what = fmt::format("server node {} state", rpc_.node_id());
  if (servers.empty()) {
    return Status::FailedPrecondition("{}: the node has no key ranges yet",
                                      what);
  }
  ASSIGN_OR_RETURN(DecodedServerState saved, DecodeServerState(state, what));
  const KeyRange share = Share();
  if (!(saved.range == share)) {
    return Status::DataLoss(
        "{}: saved for keys [{}, {}), this node owns [{}, {})", what,
        saved.range.begin, saved.range.end, share.begin, share.end);
  }
  // Each range's version and step count: as saved when the ranges are cut
  // the same way; else the share's, which every range must have had.
  const nlohmann::json meta =
      nlohmann::json::parse(saved.meta, nullptr, /*allow_exceptions=*/false);
  if (!meta.is_object()) {
    return Status::DataLoss("{}: its description is not a JSON object", what);
  }
  const nlohmann::json ranges = meta.value("ranges", nlohmann::json::array());
  if (!ranges.is_array()) {
    return Status::DataLoss("{}: \"ranges\" is not a list", what);
  }
  // Everything is checked before any range is restored: a bad state leaves
  // the node as it was.
  for (const auto& [name, values] : saved.state.optimizer.buffers) {
    if (values.size() != saved.state.params.size()) {
      return Status::DataLoss(
          "{}: optimizer buffer \"{}\" has {} values for {} parameters", what,
          name, values.size(), saved.state.params.size());
    }
  }
  std::vector<KeyRange> own;
  for (const auto& server : servers) own.push_back(server->range());
  ASSIGN_OR_RETURN(const bool same_cut, SameCut(ranges, saved, own, what));
  for (size_t i = 0; i < servers.size(); ++i) {
    const KeyRange r = servers[i]->range();
    const size_t from = static_cast<size_t>(r.begin - share.begin);
    const size_t n = static_cast<size_t>(r.size());
    ShardState s;
    s.params.assign(saved.state.params.begin() + from,
                    saved.state.params.begin() + from + n);
    for (const auto& [name, values] : saved.state.optimizer.buffers) {
      s.optimizer.buffers[name].assign(values.begin() + from,
                                       values.begin() + from + n);
    }
    s.version = saved.state.version;
    s.optimizer.steps = saved.state.optimizer.steps;
    if (same_cut) {
      s.version = ranges[i]["version"].get<int64_t>();
      s.optimizer.steps = ranges[i]["optimizer_steps"].get<int64_t>();
    }
    s.stats = saved.state.stats;
    RETURN_IF_ERROR(servers[i]->RestoreShardState(std::move(s)));
  }
  return Status::Ok();
}

ServerReport ServerGroup::Report() const {
  const auto servers = Servers();
  if (servers.empty()) {
    ServerReport none;
    none.no_ranges = true;
    return none;
  }
  if (servers.size() == 1) return servers.front()->Report();
  // CountedRange()'s counters, over the whole share; the restart's loss is
  // the largest of any range.
  ServerReport r = servers[CountedRange(servers)]->Report();
  const KeyRange share = Share();
  r.range_begin = share.begin;
  r.range_end = share.end;
  r.ranges = static_cast<int64_t>(servers.size());
  for (const auto& s : servers) {
    const std::optional<int64_t> lost = s->Report().lost_updates_at_least;
    if (lost && (!r.lost_updates_at_least || *lost > *r.lost_updates_at_least))
      r.lost_updates_at_least = lost;
  }
  return r;
}

}  // namespace strata

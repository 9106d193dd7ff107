#include "coordinator/membership.h"

#include <nlohmann/json.hpp>

#include "cluster/protocol.h"
#include "common/log.h"
#include "common/seconds.h"
#include "coordinator/notify.h"

namespace strata {

Membership::Clock::time_point Membership::Seen(NodeId id) {
  MutexLock lock(&mu_);
  const Clock::time_point now = Clock::now();
  auto it = last_seen_.find(id);
  const Clock::time_point prev = it == last_seen_.end() ? now : it->second;
  last_seen_[id] = now;
  return prev;
}

void Membership::Reply(RpcEndpoint& rpc, const Message& to,
                       const std::string& map) {
  Message reply;
  reply.header.type = MessageType::kRegisterReply;
  if (!map.empty())
    reply.payloads.push_back(Buffer::CopyOf(map.data(), map.size()));
  rpc.ReplyOrLog(to, std::move(reply));
}

void Membership::Register(Message msg, Clock::time_point prev_seen) {
  if (!(msg.header.flags & kRegisterConnected))
    return RegisterEndpoint(std::move(msg), prev_seen);
  if (!RegisterConnected(msg)) ReplacementConnected(std::move(msg));
}

void Membership::ReplacementConnected(Message msg) {
  const NodeId from = msg.header.sender;
  restarts_.Connected(from, o_.roles.Describe(from));
  std::string endpoint;
  std::vector<NodeId> others;
  {
    MutexLock lock(&mu_);
    endpoint = endpoints_[from];
    for (const auto& [id, ep] : endpoints_) {
      if (id != from && !lost_.count(id)) others.push_back(id);
    }
  }
  Role role;
  int index;
  if (o_.roles.RoleOf(from, &role, &index).ok() && role == Role::kWorker) {
    // The data servers take back what its predecessor had leased (they may
    // not have been told it was lost), before it asks.
    NotifyNodes(rpc_, o_.roles, o_.roles.Ids(Role::kData),
                MessageType::kNodeLost, from);
  }
  NotifyNodes(rpc_, o_.roles, others, MessageType::kNodeRejoined, from,
              endpoint);
  Reply(rpc_, msg, "");
  LogWarning("coordinator: {} re-joined at {}; the run goes on",
             o_.roles.Describe(from), endpoint);
}

bool Membership::RegisterConnected(Message& msg) {
  MutexLock lock(&mu_);
  if (connected_done_) return false;
  waiting_connected_.push_back(std::move(msg));
  if (static_cast<int>(waiting_connected_.size()) != o_.roles.num_nodes() - 1)
    return true;
  std::vector<Message> waiting;
  waiting.swap(waiting_connected_);
  for (Message& w : waiting) Reply(rpc_, w, "");
  connected_done_ = true;
  return true;
}

Status Membership::MergeRunFacts(const Message& msg) {
  const NodeId from = msg.header.sender;
  const std::string facts = msg.payloads[1].ToString();
  Result<RunFacts> parsed = RunFacts::FromText(facts);
  if (!parsed.ok()) {
    return Status::InvalidArgument(
        "{} registered with malformed run facts '{}': {}",
        o_.roles.Describe(from), facts, parsed.status().message());
  }
  // Nodes may announce different parts of the facts (workers the model,
  // data servers the data): the union is handed out, and a field two nodes
  // announce must have the same value.
  const bool first = run_facts_.empty();
  Status merged = run_facts_.Merge(*parsed);
  if (!merged.ok()) {
    return Status::InvalidArgument(
        "{} disagrees with {} about the run: {} (the same config and data "
        "on every node?)",
        o_.roles.Describe(from), o_.roles.Describe(run_facts_from_),
        merged.message());
  }
  if (first) run_facts_from_ = from;
  return Status::Ok();
}

void Membership::RegisterEndpoint(Message msg, Clock::time_point prev_seen) {
  const NodeId from = msg.header.sender;
  const std::string endpoint =
      msg.payloads.empty() ? std::string() : msg.payloads[0].ToString();
  MutexLock lock(&mu_);
  // Connect back first: even a refusal needs a route to the node.
  if (!endpoint.empty()) {
    Status st = rpc_.transport().Connect(from, endpoint);
    if (!st.ok()) {
      LogWarning("coordinator: cannot connect back to {} at {}: {}",
                 o_.roles.Describe(from), endpoint, st.ToString());
    }
  }
  Role role;
  int index;
  if (!o_.roles.RoleOf(from, &role, &index).ok() || endpoint.empty()) {
    lock.Unlock();
    rpc_.ReplyErrorOrLog(
        msg, Status::InvalidArgument(
                 "registration from node {} with endpoint '{}' does not fit "
                 "this cluster ({} nodes)",
                 from, endpoint, o_.roles.num_nodes()));
    return;
  }
  if (msg.payloads.size() > 1) {
    Status merged = MergeRunFacts(msg);
    if (!merged.ok()) {
      lock.Unlock();
      rpc_.ReplyErrorOrLog(msg, merged);
      return;
    }
  }
  if (rendezvous_done_) {
    lock.Unlock();
    return RegisterReplacement(std::move(msg), endpoint, role, prev_seen);
  }
  endpoints_[from] = endpoint;
  waiting_register_.push_back(std::move(msg));
  if (static_cast<int>(endpoints_.size()) != o_.roles.num_nodes() - 1) return;
  const std::string map = ClusterMapLocked();
  std::vector<Message> waiting;
  waiting.swap(waiting_register_);
  for (Message& w : waiting) Reply(rpc_, w, map);
  LogDebug("coordinator: all {} nodes registered", o_.roles.num_nodes() - 1);
  rendezvous_done_ = true;
}

void Membership::RegisterReplacement(Message msg, const std::string& endpoint,
                                     Role role, Clock::time_point prev_seen) {
  const NodeId from = msg.header.sender;
  // A server registering again is its replacement, even before its
  // predecessor's silence was noticed (a node never registers twice).
  MutexLock lock(&mu_);
  const std::optional<Clock::time_point> awaited = restarts_.TakeAwaited(from);
  // The evaluator keeps no state: a replacement simply takes over
  // (cluster.restart, free modes), and gives the run its final evaluation.
  const bool replaceable =
      awaited.has_value() ||
      ((role == Role::kServer || role == Role::kData) &&
       o_.server_restart_timeout.count() > 0) ||
      (role == Role::kWorker && o_.worker_restart && !done_.count(from)) ||
      (role == Role::kEvaluator && o_.worker_restart);
  if (!replaceable) {
    lock.Unlock();
    rpc_.ReplyErrorOrLog(
        msg, Status::FailedPrecondition(
                 "{} registered again, but it is not a lost node the run "
                 "may replace (cluster.restart)",
                 o_.roles.Describe(from)));
    return;
  }
  const Clock::time_point since = awaited ? *awaited : prev_seen;
  restarts_.Rejoining(from, Seconds(since, Clock::now()));
  lost_.erase(from);
  endpoints_[from] = endpoint;
  const std::string map = ClusterMapLocked();
  lock.Unlock();
  Reply(rpc_, msg, map);
}

std::string Membership::ClusterMapLocked() const {
  nlohmann::json map = nlohmann::json::object();
  for (const auto& [id, ep] : endpoints_) map[std::to_string(id)] = ep;
  map["0"] = rpc_.transport().endpoint();
  if (!run_facts_.empty()) map[kRunFactsKey] = run_facts_.ToJson();
  return map.dump();
}

void Membership::MarkDone(NodeId id, std::string report, bool leaving) {
  MutexLock lock(&mu_);
  done_.insert(id);
  if (leaving) left_.insert(id);
  if (!report.empty()) done_reports_[id] = std::move(report);
}

std::vector<LostNode> Membership::FindLost(Clock::time_point now,
                                           Clock::time_point started,
                                           Clock::duration heartbeat_timeout,
                                           Clock::duration join_timeout) {
  MutexLock lock(&mu_);
  std::vector<LostNode> out;
  for (NodeId id = 1; id < o_.roles.num_nodes(); ++id) {
    if (lost_.count(id) || done_.count(id)) continue;
    auto it = last_seen_.find(id);
    const bool joined = endpoints_.count(id) > 0;
    const Clock::time_point seen =
        it == last_seen_.end() ? started : it->second;
    if (now - seen <= (joined ? heartbeat_timeout : join_timeout)) continue;
    lost_.insert(id);
    LostNode lost;
    lost.id = id;
    int index;
    if (!o_.roles.RoleOf(id, &lost.role, &index).ok())
      lost.role = Role::kWorker;
    lost.joined = joined;
    lost.silent_s = Seconds(seen, now);
    // A server's or a data server's replacement takes its state from the
    // newest checkpoint while the run waits (cluster.restart, free modes).
    lost.awaited = (lost.role == Role::kServer || lost.role == Role::kData) &&
                   joined && o_.server_restart_timeout.count() > 0;
    if (lost.awaited) restarts_.Await(id, now);
    out.push_back(lost);
  }
  return out;
}

WorkerSet Membership::Workers() const {
  MutexLock lock(&mu_);
  WorkerSet w;
  for (int i = 0; i < o_.roles.num_workers(); ++i) {
    const NodeId id = o_.roles.WorkerId(i);
    if (!lost_.count(id)) w.live.push_back(id);
  }
  w.done = done_;
  return w;
}

std::vector<NodeId> Membership::LostIds() const {
  MutexLock lock(&mu_);
  return std::vector<NodeId>(lost_.begin(), lost_.end());
}

bool Membership::IsLost(NodeId id) const {
  MutexLock lock(&mu_);
  return lost_.count(id) > 0;
}

std::vector<NodeId> Membership::Reachable() const {
  MutexLock lock(&mu_);
  std::vector<NodeId> out;
  for (const auto& [id, ep] : endpoints_)
    if (!lost_.count(id) && !left_.count(id)) out.push_back(id);
  return out;
}

std::map<NodeId, std::string> Membership::DoneReports() const {
  MutexLock lock(&mu_);
  return done_reports_;
}

}  // namespace strata

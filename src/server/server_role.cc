#include "server/server_role.h"

#include "cluster/node.h"
#include "common/log.h"
#include "ps/protocol.h"
#include "ps/server_group.h"
#include "run/node_life.h"
#include "run/run_facts.h"

namespace strata {
namespace {

// The update policy the run's mode asks of the servers.
ServerOptions ServerOptionsFor(const ClusterRunOptions& o) {
  ServerOptions so;
  so.optimizer = o.optimizer;
  so.policy.mode = o.mode == RunMode::kSync ? UpdatePolicy::Mode::kSync
                                            : UpdatePolicy::Mode::kAsync;
  so.policy.rule = o.mode == RunMode::kEasgd
                       ? UpdatePolicy::Rule::kElastic
                       : UpdatePolicy::Rule::kGradientStep;
  so.policy.sum_gradients = o.sum_gradients;
  so.policy.num_workers = o.roles.num_workers();
  so.policy.updates_per_step = o.updates_per_step;
  so.policy.defer_late = o.defer_late;
  so.policy.inverse_staleness = o.inverse_staleness;
  so.policy.rate_scale = o.server_rate_scale;
  return so;
}

// A server node: its node, its ranges, and how they are set up from the
// run facts.
class ServerNode {
 public:
  ServerNode(RoleContext& ctx)
      : o_(ctx.options()),
        index_(ctx.index),
        node_(std::move(ctx.transport), o_.roles, o_.heartbeat_interval,
              o_.heartbeat_timeout),
        server_(ServerOptionsFor(o_), node_.rpc()) {}

  Status Run(const std::string& coordinator);

 private:
  void Route();
  // The key ranges from the run facts (and a resumed run's state).
  Status Configure(const std::string& facts_text);
  Status Restore();

  const ClusterRunOptions& o_;
  const int index_;
  Node node_;
  ServerGroup server_;
};

void ServerNode::Route() {
  for (MessageType type :
       {MessageType::kPush, MessageType::kPullRequest,
        MessageType::kStatsRequest, MessageType::kCheckpointRequest}) {
    node_.On(type, [this](Message m) { server_.Handle(std::move(m)); });
  }
  // Pushes and pulls only: their handling never waits (statistics and
  // checkpoint requests may go through the server's locks at length).
  if (o_.inline_server) {
    node_.rpc().SetInlineHandling([](const MessageHeader& h) {
      return h.type == MessageType::kPush ||
             h.type == MessageType::kPullRequest;
    });
  }
  // /metrics: the server's counters ride on its heartbeats.
  if (!o_.metrics_address.empty())
    node_.SetStatusSource([this] { return server_.StatsJson(); });
}

Status ServerNode::Configure(const std::string& text) {
  Result<RunFacts> facts = RunFacts::FromText(text);
  if (!facts.ok() || !facts->num_params || !facts->iterations) {
    return Status::DataLoss(
        "server {}: bad run facts from the coordinator: {}{}", index_, text,
        facts.ok() ? "" : " (" + facts.status().message() + ")");
  }
  const int64_t num_params = *facts->num_params;
  // The ranges are cut where the workers' model's tensors end.
  Result<KeyLayout> cut =
      KeyLayout::Aligned(num_params, o_.roles.num_servers(), o_.pipeline_floats,
                         facts->tensor_ends.value_or(std::vector<int64_t>{}));
  if (!cut.ok()) {
    return cut.status().WithContext(
        fmt::format("server {}: the key layout", index_));
  }
  const KeyLayout& layout = *cut;
  // Sync k-of-n: the lead range chooses each step's gradients, the others
  // (on this node or another) follow.
  const int lead = LeadRange(o_, layout);
  server_.Configure(layout.RangesOf(index_),
                    o_.schedule.ForSteps(*facts->iterations),
                    lead < 0 ? -1 : layout.range(lead).begin);
  if (o_.checkpoints()) RETURN_IF_ERROR(Restore());
  LogDebug("server {}: keys {} of {} parameters", index_, layout.ToString(),
           num_params);
  return Status::Ok();
}

// Resuming: the ranges come from the checkpoint (before any push).
Status ServerNode::Restore() {
  ASSIGN_OR_RETURN(Message state,
                   RequestCheckpointState(node_.rpc(), o_,
                                          fmt::format("server {}", index_)));
  if (!state.payloads.empty()) {
    RETURN_IF_ERROR(server_.RestoreState(state.payloads));
    LogInfo("server {}: resumed at step {}", index_, state.header.clock);
  } else if (o_.resume) {
    return Status::FailedPrecondition(
        "server {}: the coordinator has no checkpoint state for it (a "
        "replacement needs a checkpoint written before the loss)",
        index_);
  }
  return Status::Ok();
}

Status ServerNode::Run(const std::string& coordinator) {
  Route();
  Status joined =
      node_.Join(coordinator, o_.request_timeout, "",
                 [this](const std::string& facts) { return Configure(facts); });
  // Servers serve until the coordinator ends the run (a Ctrl-C reaches the
  // coordinator, which ends it).
  if (joined.ok())
    RETURN_IF_ERROR(ServeUntilTheEnd(node_, o_, Role::kServer, index_));
  // The endpoint stops delivering before the server goes away.
  node_.Leave();
  if (!joined.ok()) return joined;
  if (!node_.member().shutdown_reason().empty())
    return Status::Unavailable("{}", node_.member().shutdown_reason());
  return Status::Ok();
}

}  // namespace

Status RunServerRole(RoleContext& ctx) {
  ServerNode server(ctx);
  return server.Run(ctx.coordinator);
}

}  // namespace strata

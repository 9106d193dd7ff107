#include "worker/worker_role.h"

#include "cluster/mailbox.h"
#include "cluster/node.h"
#include "common/log.h"
#include "common/timeline.h"
#include "dataservice/batch_stream.h"
#include "run/node_life.h"
#include "run/run_facts.h"
#include "sharding/report.h"
#include "worker/plan_probe.h"
#include "worker/worker.h"

namespace strata {
namespace {

// One worker node: its node and handlers, the model it shows the
// evaluator, its checkpoint rounds and, with the data service, its stream.
class WorkerNode {
 public:
  explicit WorkerNode(RoleContext& ctx)
      : ctx_(ctx),
        o_(ctx.options()),
        index_(ctx.index),
        service_(o_.data_servers > 0),
        node_(std::move(ctx.transport), o_.roles, o_.heartbeat_interval,
              o_.heartbeat_timeout) {
    checkpoints_.every_updates = o_.checkpoint_every_updates;
  }

  Status Run();

 private:
  void Route();
  // Joins; with the data service, keeps the run facts the data servers
  // announced. Then asks for the state a resumed run starts from.
  Status Join();
  // With the data service: the plan from the data servers' facts, the
  // data's shape and the stream of batches.
  Status Serve();
  Result<WorkerMetrics> Train();
  // cluster.forward_metrics: sends a metrics.jsonl line to the coordinator.
  std::function<Status(const std::string&)> ForwardMetrics();

  RoleContext& ctx_;
  const ClusterRunOptions& o_;
  const int index_;
  const bool service_;
  Mailbox mailbox_;
  PublishedModel published_;
  WorkerCheckpoints checkpoints_;
  Node node_;
  std::string facts_text_;
  ClusterPlan served_plan_;
  Dataset shape_;  // the data's shape only (data service)
  std::unique_ptr<BatchStream> stream_;
};

void WorkerNode::Route() {
  // cluster.restart: requests to a server that is replaced are sent again.
  if (o_.restart) node_.rpc().KeepRequestsForResend(true);
  for (MessageType type : {MessageType::kPeerModel, MessageType::kGossipModel,
                           MessageType::kGossipDone, MessageType::kTreeModel,
                           MessageType::kPeerAck}) {
    node_.On(type, [this](Message m) { mailbox_.Put(std::move(m)); });
  }
  // The evaluator of a decentralized run asks for this worker's model.
  node_.On(MessageType::kModelRequest, [this](Message m) {
    Message reply = published_.Snapshot();
    if (reply.payloads.empty()) {
      node_.rpc().ReplyErrorOrLog(
          m, Status::Unavailable("the worker has no model yet"));
      return;
    }
    node_.rpc().ReplyOrLog(m, std::move(reply));
  });
  node_.On(MessageType::kShutdown, [this](Message) {
    if (!node_.member().shutdown_reason().empty())
      mailbox_.Close(node_.member().shutdown_reason());
  });
  node_.On(MessageType::kCheckpointPause, [this](Message m) {
    int64_t seen = checkpoints_.pause_round.load();
    while (
        m.header.clock > seen &&
        !checkpoints_.pause_round.compare_exchange_weak(seen, m.header.clock)) {
    }
  });
  // /metrics: the worker's counters after its last step ride on its
  // heartbeats.
  if (!o_.metrics_address.empty())
    node_.SetStatusSource([this] { return published_.MetricsJson(); });
}

std::function<Status(const std::string&)> WorkerNode::ForwardMetrics() {
  return [this](const std::string& line) {
    Message m;
    m.header.type = MessageType::kMetricsLine;
    m.payloads.push_back(Buffer::CopyOf(line.data(), line.size()));
    return node_.rpc().Send(o_.roles.CoordinatorId(), std::move(m));
  };
}

Status WorkerNode::Join() {
  auto keep_facts = [this](const std::string& text) {
    facts_text_ = text;
    return Status::Ok();
  };
  RETURN_IF_ERROR(node_.Join(
      ctx_.coordinator, o_.request_timeout,
      service_ ? "" : RunFacts::Of(*ctx_.plan).ToText(),
      service_ ? std::function<Status(const std::string&)>(keep_facts)
               : nullptr));
  if (!o_.checkpoints()) return Status::Ok();
  ASSIGN_OR_RETURN(checkpoints_.restore,
                   RequestCheckpointState(node_.rpc(), o_,
                                          fmt::format("worker {}", index_)));
  if (o_.resume && checkpoints_.restore.payloads.empty()) {
    // A replacement starting from nothing would start the model over.
    return Status::FailedPrecondition(
        "worker {}: the coordinator has no checkpoint state for it (a "
        "replacement needs a checkpoint written before the loss)",
        index_);
  }
  return Status::Ok();
}

Status WorkerNode::Serve() {
  ASSIGN_OR_RETURN(
      RunFacts facts,
      RunFacts::FromText(facts_text_.empty() ? "{}" : facts_text_));
  if (!facts.data) {
    return Status::DataLoss(
        "worker {}: the cluster map has no data facts from the data servers",
        index_);
  }
  const DataFacts& df = *facts.data;
  ASSIGN_OR_RETURN(served_plan_, PlanFromDataFacts(o_, df));
  RETURN_IF_ERROR(CheckPlanAgainstRunFacts(fmt::format("worker {}", index_),
                                           served_plan_, facts));
  shape_.channels = df.channels;
  shape_.height = df.height;
  shape_.width = df.width;
  shape_.num_classes = df.classes;
  const NodeId ds = o_.roles.DataServerId(index_ % o_.data_servers);
  ClusterMember* member = &node_.member();
  stream_ = std::make_unique<BatchStream>(
      node_.rpc(), ds, o_.roles.Describe(ds), o_.prefetch, o_.request_timeout,
      [member]() -> std::string {
        if (!member->shutdown_requested()) return "";
        const std::string why = member->shutdown_reason();
        return why.empty() ? "the run ended" : why;
      });
  return Status::Ok();
}

Result<WorkerMetrics> WorkerNode::Train() {
  timeline::SetThread(node_.rpc().node_id(), "main");
  const ClusterPlan& p = service_ ? served_plan_ : *ctx_.plan;
  WorkerSetup setup;
  setup.options = &p.options;
  setup.index = index_;
  setup.train = service_ ? &shape_ : &ctx_.data->train;
  setup.shards = service_ ? nullptr : ctx_.plan->shards.get();
  if (!service_) {
    const Config* config = ctx_.config;
    const Dataset* train = &ctx_.data->train;
    setup.shards_for = [config, train](int n) {
      return ResolveShards(*config, *train, n);
    };
  }
  setup.env.rpc = &node_.rpc();
  setup.env.member = &node_.member();
  setup.env.layout = &p.layout;
  setup.env.mailbox = &mailbox_;
  setup.env.collectives = ctx_.collectives;
  setup.env.optimizer = p.options.optimizer;
  setup.env.schedule = p.options.schedule.ForSteps(p.options.iterations);
  setup.published = &published_;
  setup.run_dir = ctx_.run_dir;
  if (o_.forward_metrics) setup.forward_metrics = ForwardMetrics();
  setup.stop = ctx_.stop;
  setup.stream = stream_.get();
  setup.checkpoints = o_.checkpoints() ? &checkpoints_ : nullptr;
  return RunWorker(std::move(setup));
}

Status WorkerNode::Run() {
  // With the data service the worker loads nothing: the shape, the model
  // size and the budget come from the data servers' run facts.
  if (!service_ && !ctx_.plan->shards) {
    return Status::FailedPrecondition(
        "worker {}: the cluster plan was made without shards", index_);
  }
  if (!service_ && index_ == 0 && ctx_.run_dir != nullptr) {
    // The shard report goes into the run directory (docs/design/sharding.md).
    RETURN_IF_ERROR(WriteShardReport(ctx_.plan->shards->report,
                                     ctx_.run_dir->File("shard_report.json")));
  }
  Route();
  RETURN_IF_ERROR(Join());
  if (service_) RETURN_IF_ERROR(Serve());
  Result<WorkerMetrics> metrics = Train();
  if (!metrics.ok()) {
    // Go silent, like a crashed process: the coordinator's heartbeat
    // monitor decides what the loss means for the run.
    LogError("worker {}: {}", index_, metrics.status().message());
    node_.Leave();
    return metrics.status();
  }
  // The evaluator averages a decentralized run's final models: such a
  // worker stays until the end; the others leave at once.
  const bool stays = IsDecentralized(o_.mode);
  Status done = node_.member().ReportDone(metrics->ToWire().dump(), !stays);
  // After "done", so that encoding it is not training time; before leaving.
  if (Status sent = node_.SendTimeline(o_.request_timeout); !sent.ok())
    LogWarning("worker {}: {}", index_, sent.message());
  if (done.ok() && stays) node_.WaitForEnd();
  node_.Leave();
  return done;
}

}  // namespace

Status RunWorkerRole(RoleContext& ctx) {
  WorkerNode worker(ctx);
  return worker.Run();
}

}  // namespace strata

#include "worker/evaluator_role.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "cluster/node.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/seconds.h"
#include "common/thread_priority.h"
#include "common/timeline.h"
#include "models/model_file.h"
#include "run/run_facts.h"
#include "worker/batch.h"
#include "worker/evaluator.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// One evaluator node: its periodic evaluations, its watch over the run's
// end (and fault injection), and the final evaluation the coordinator asks
// for.
class EvaluatorNode {
 public:
  explicit EvaluatorNode(RoleContext& ctx)
      : ctx_(ctx),
        o_(ctx.options()),
        data_(*ctx.data),
        decentralized_(IsDecentralized(o_.mode)),
        node_(std::move(ctx.transport), o_.roles, o_.heartbeat_interval,
              o_.heartbeat_timeout) {}

  Status Run();

 private:
  void Route();
  // Until the run ends (or the node is to vanish): done_ set.
  void Watch();
  // Waits for the coordinator's final-evaluation request; null when the
  // run ended first.
  std::unique_ptr<Message> AwaitFinalRequest();
  // The final model: the workers' average or the servers' parameters.
  Result<FinalEvaluation> EvaluateFinal(Model& model);
  // eval.jsonl's final line and the model files.
  void Record(const FinalEvaluation& e, Model& model);

  RoleContext& ctx_;
  const ClusterRunOptions& o_;
  const DatasetSplits& data_;
  const bool decentralized_;
  const Clock::time_point start_ = Clock::now();
  std::atomic<bool> done_{false};
  std::atomic<bool> vanished_{false};
  Mutex mu_;
  std::unique_ptr<Message> final_request_ GUARDED_BY(mu_);
  Node node_;
  std::unique_ptr<PsClient> ps_;
};

void EvaluatorNode::Route() {
  if (o_.restart) node_.rpc().KeepRequestsForResend(true);
  node_.On(MessageType::kFinalEvalRequest, [this](Message m) {
    MutexLock lock(&mu_);
    final_request_ = std::make_unique<Message>(std::move(m));
    done_ = true;
  });
  node_.On(MessageType::kShutdown, [this](Message) { done_ = true; });
}

// A node that stops itself (it lost the coordinator) gets no kShutdown:
// end the evaluation loop then too, or it would wait on servers that are
// gone.
void EvaluatorNode::Watch() {
  const auto due = Clock::now() + o_.fail_after;
  while (!done_.load() && !node_.member().WaitForShutdown(milliseconds(100))) {
    if (o_.Vanishes(Role::kEvaluator, 0) && Clock::now() >= due) {
      LogWarning("evaluator vanishes (cluster.fail_node)");
      vanished_ = true;
      break;
    }
  }
  done_ = true;
}

std::unique_ptr<Message> EvaluatorNode::AwaitFinalRequest() {
  while (!node_.member().shutdown_requested()) {
    {
      MutexLock lock(&mu_);
      if (final_request_ != nullptr) return std::move(final_request_);
    }
    node_.member().WaitForShutdown(milliseconds(50));
  }
  return nullptr;
}

Result<FinalEvaluation> EvaluatorNode::EvaluateFinal(Model& model) {
  FinalEvaluation e;
  e.parameters = ctx_.plan->num_params;
  if (decentralized_) {
    // The average of the workers' final models (each waits for the end).
    auto gathered = GatherWorkerModels(node_.rpc(), o_, model.flat.param_data(),
                                       model.flat.size());
    if (!gathered.ok()) return gathered.status().WithContext("final model");
    e.version = gathered->min_step;
    e.consensus_distance = gathered->consensus_distance;
  } else {
    auto pulled =
        ps_->Pull(model.flat.param_data(), {})->Wait(o_.request_timeout);
    if (!pulled.ok()) return pulled.status().WithContext("final pull");
    e.version = pulled->versions[0];
  }
  // The final evaluation stays on this thread: training is over, so the
  // team it may start sits beside no worker's.
  RETURN_IF_ERROR(RecalibrateBatchNorm(*model.net, data_.train, o_.eval_batch,
                                       kBatchNormExamples)
                      .status());
  ASSIGN_OR_RETURN(EvalResult tr,
                   Evaluate(*model.net, data_.train, o_.eval_batch));
  ASSIGN_OR_RETURN(EvalResult va,
                   Evaluate(*model.net, data_.val, o_.eval_batch));
  e.train_loss = tr.loss;
  e.train_acc = tr.accuracy;
  e.val_loss = va.loss;
  e.val_acc = va.accuracy;
  return e;
}

void EvaluatorNode::Record(const FinalEvaluation& e, Model& model) {
  if (ctx_.final_params != nullptr) {
    ctx_.final_params->assign(model.flat.param_data(),
                              model.flat.param_data() + model.flat.size());
  }
  if (ctx_.run_dir == nullptr) return;
  // The trained model, for use outside strata (docs/design/models.md).
  Status written = WriteModelFiles(ctx_.run_dir->path(), o_.model,
                                   InputSpecOf(data_.train), model);
  if (!written.ok()) LogWarning("model files: {}", written.message());
  nlohmann::json line{{"step", o_.iterations},
                      {"version", e.version},
                      {"wall_s", Seconds(start_, Clock::now())},
                      {"val_loss", e.val_loss},
                      {"val_acc", e.val_acc},
                      {"final", true}};
  // The final point of the consensus-distance curve.
  if (e.consensus_distance) line["consensus_distance"] = *e.consensus_distance;
  Status appended = ctx_.run_dir->AppendJson("eval.jsonl", line);
  if (!appended.ok()) LogWarning("eval.jsonl: {}", appended.message());
}

Status EvaluatorNode::Run() {
  timeline::SetThread(node_.rpc().node_id(), "main");
  Route();
  RETURN_IF_ERROR(node_.Join(ctx_.coordinator, o_.request_timeout,
                             RunFacts::Of(*ctx_.plan).ToText()));
  if (!decentralized_) {
    ps_ = std::make_unique<PsClient>(node_.rpc(), ctx_.plan->layout,
                                     o_.roles.Ids(Role::kServer));
  }
  std::thread watch([this] { Watch(); });
  Status status;
  if (o_.periodic_eval) {
    // The periodic evaluations give way to the workers they share the
    // cores with (the final one runs when the workers are done).
    if (!LowerThreadPriority(5))
      LogDebug("evaluator: its priority could not be lowered");
    status = decentralized_
                 ? RunPeerEvaluator(o_, data_, node_.rpc(), node_.member(),
                                    ctx_.run_dir, &done_, start_)
                 : RunEvaluator(o_, data_, *ps_, ctx_.run_dir, &done_, start_);
  }
  if (vanished_.load()) {
    watch.join();
    node_.Leave();
    return Status::Cancelled("the evaluator crashed (cluster.fail_node)");
  }
  // The final evaluation, when the coordinator asks for it.
  std::unique_ptr<Message> request;
  if (status.ok()) request = AwaitFinalRequest();
  if (request != nullptr) {
    Result<Model> model = CreateModel(o_.model, InputSpecOf(data_.train));
    Result<FinalEvaluation> e = model.ok()
                                    ? EvaluateFinal(*model)
                                    : Result<FinalEvaluation>(model.status());
    if (e.ok()) {
      Record(*e, *model);
      LogInfo(
          "final model (version {}): train loss {:.4f} acc {:.4f} | val loss "
          "{:.4f} acc {:.4f}",
          e->version, e->train_loss, e->train_acc, e->val_loss, e->val_acc);
      Message reply;
      reply.header.type = MessageType::kFinalEvalReply;
      const std::string text = e->ToJson().dump();
      reply.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
      node_.rpc().ReplyOrLog(*request, std::move(reply));
      node_.WaitForEnd();
    } else {
      status = e.status();
      if (model.ok()) node_.rpc().ReplyErrorOrLog(*request, status);
    }
  }
  done_ = true;
  watch.join();
  node_.Leave();
  if (status.ok() && !node_.member().shutdown_reason().empty())
    return Status::Unavailable("{}", node_.member().shutdown_reason());
  return status;
}

}  // namespace

Status RunEvaluatorRole(RoleContext& ctx) {
  EvaluatorNode evaluator(ctx);
  return evaluator.Run();
}

}  // namespace strata

#include "worker/evaluator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "common/log.h"
#include "common/own_thread.h"
#include "common/seconds.h"
#include "common/timeline.h"
#include "worker/batch.h"

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;
// The evaluator's model, built on a thread of its own: the evaluator's
// thread lives all run.
Result<Model> CreateEvaluatorModel(const ClusterRunOptions& o,
                                   const DatasetSplits& data) {
  ASSIGN_OR_RETURN(Model model, CreateModelOnThreadOfItsOwn(
                                    o.model, InputSpecOf(data.train)));
  RETURN_IF_ERROR(PlaceModel(model, o.device));
  return model;
}

// One evaluation of an evaluator node: BatchNorm recalibrated on training
// examples, then the validation set. On the CPU it runs on a thread of its
// own (common/own_thread.h): the evaluator's thread lives all run, and the
// OpenMP team an evaluation starts would otherwise stay there, idle, beside the
// workers' teams between evaluations.
Result<EvalResult> EvaluateSnapshot(Model& model, const DatasetSplits& data,
                                    int64_t eval_batch) {
  // Its span belongs to the evaluator's node (cluster.timeline), whichever
  // thread runs it.
  const int32_t node = timeline::ThreadNode();
  auto evaluate = [&]() -> Result<EvalResult> {
    const timeline::Span span("evaluate", "eval", -1, node);
    RETURN_IF_ERROR(RecalibrateBatchNorm(*model.net, data.train, eval_batch,
                                         kBatchNormExamples)
                        .status());
    return Evaluate(*model.net, data.val, eval_batch);
  };
  // A GPU evaluation uses the thread's CUDA stream and handles: keep it.
  if (model.flat.on_gpu()) return evaluate();
  return OnThreadOfItsOwn(evaluate);
}

}  // namespace

Status RunEvaluator(const ClusterRunOptions& o, const DatasetSplits& data,
                    PsClient& client, const RunDirectory* run_dir,
                    const std::atomic<bool>* done, Clock::time_point start) {
  ASSIGN_OR_RETURN(Model model, CreateEvaluatorModel(o, data));
  const int k = client.layout().num_ranges();
  const int n = o.roles.num_workers();
  const int64_t grads_per_update = o.gradients_per_update;
  int64_t last_version = -1;
  while (!done->load()) {
    std::vector<int64_t> want;
    // The first evaluation is immediate in both schedules: the model as
    // the servers hold it once the evaluator's model is built (version 0
    // unless the workers got ahead meanwhile; on a loaded machine they
    // can: a CI run's first line was version 65 of 120).
    if (o.eval_every_updates > 0 && last_version >= 0) {
      want.assign(k, last_version + o.eval_every_updates);
    } else if (o.eval_every_updates <= 0 && last_version >= 0) {
      auto until = Clock::now() + std::chrono::duration<double>(o.eval_every_s);
      while (!done->load() && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (done->load()) break;
    }
    auto handle = client.Pull(model.flat.param_data(), want);
    // The pull waits on the servers until the version exists; check for the
    // end of the run meanwhile.
    Result<PullHandle::Pulled> pulled = Status::DeadlineExceeded("not yet");
    while (true) {
      pulled = handle->Wait(std::chrono::milliseconds(200));
      if (pulled.ok() ||
          pulled.status().code() != Status::Code::kDeadlineExceeded ||
          done->load())
        break;
    }
    if (!pulled.ok()) {
      if (done->load()) break;
      return pulled.status().WithContext("evaluator pull");
    }
    const int64_t version =
        *std::min_element(pulled->versions.begin(), pulled->versions.end());
    if (version == last_version) continue;
    last_version = version;
    model.flat.Upload();  // GPU: the parameters just received
    ASSIGN_OR_RETURN(EvalResult ev,
                     EvaluateSnapshot(model, data, o.eval_batch));
    nlohmann::json j{{"step", version * grads_per_update / n},
                     {"version", version},
                     {"wall_s", Seconds(start, Clock::now())},
                     {"val_loss", ev.loss},
                     {"val_acc", ev.accuracy}};
    if (run_dir != nullptr)
      RETURN_IF_ERROR(run_dir->AppendJson("eval.jsonl", j));
    LogInfo("evaluator: version {} (step {}): val loss {:.4f} acc {:.4f}",
            version, version * grads_per_update / n, ev.loss, ev.accuracy);
  }
  return Status::Ok();
}

Result<GatheredModel> GatherWorkerModels(RpcEndpoint& rpc,
                                         const ClusterRunOptions& o,
                                         float* dest, int64_t size) {
  const int n = o.roles.num_workers();
  std::vector<std::shared_ptr<RpcCall>> calls;
  for (int w = 0; w < n; ++w) {
    Message m;
    m.header.type = MessageType::kModelRequest;
    calls.push_back(rpc.Request(o.roles.WorkerId(w), std::move(m)));
  }
  // A lost worker does not answer; do not wait for it longer than its loss
  // takes to be noticed.
  const auto timeout =
      std::max(o.heartbeat_timeout * 2, std::chrono::milliseconds(2000));
  std::vector<Message> models;
  GatheredModel g;
  g.min_step = std::numeric_limits<int64_t>::max();
  for (int w = 0; w < n; ++w) {
    auto reply = calls[w]->Wait(timeout);
    if (!reply.ok() || reply->payloads.empty() ||
        static_cast<int64_t>(reply->payloads[0].size()) !=
            size * static_cast<int64_t>(sizeof(float))) {
      LogDebug("evaluator: no model from worker {}: {}", w,
               reply.ok() ? "wrong size" : reply.status().message());
      continue;
    }
    g.min_step = std::min(g.min_step, reply->header.clock);
    models.push_back(std::move(*reply));
  }
  if (models.empty()) {
    return Status::Unavailable("no worker sent its model within {} ms",
                               timeout.count());
  }
  g.workers = static_cast<int>(models.size());
  std::vector<double> avg(static_cast<size_t>(size), 0.0);
  for (const Message& m : models) {
    const float* x = m.payloads[0].floats();
    for (int64_t i = 0; i < size; ++i) avg[i] += x[i];
  }
  for (int64_t i = 0; i < size; ++i)
    avg[i] /= static_cast<double>(models.size());
  // Consensus distance: the mean over workers of ||w_i - average||.
  double total = 0;
  for (const Message& m : models) {
    const float* x = m.payloads[0].floats();
    double sq = 0;
    for (int64_t i = 0; i < size; ++i) {
      const double d = x[i] - avg[i];
      sq += d * d;
    }
    total += std::sqrt(sq);
  }
  g.consensus_distance = total / static_cast<double>(models.size());
  for (int64_t i = 0; i < size; ++i) dest[i] = static_cast<float>(avg[i]);
  return g;
}

Status RunPeerEvaluator(const ClusterRunOptions& o, const DatasetSplits& data,
                        RpcEndpoint& rpc, ClusterMember& member,
                        const RunDirectory* run_dir,
                        const std::atomic<bool>* done,
                        Clock::time_point start) {
  ASSIGN_OR_RETURN(Model model, CreateEvaluatorModel(o, data));
  int64_t last_step = -1;
  bool first = true;
  while (!done->load()) {
    if (member.shutdown_requested()) {
      // Lost the coordinator (or told to stop): nothing to evaluate for.
      return member.shutdown_reason().empty()
                 ? Status::Ok()
                 : Status::Unavailable("{}", member.shutdown_reason());
    }
    if (!first) {
      auto until = Clock::now() + std::chrono::duration<double>(o.eval_every_s);
      while (!done->load() && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (done->load()) break;
    }
    first = false;
    auto gathered =
        GatherWorkerModels(rpc, o, model.flat.param_data(), model.flat.size());
    if (!gathered.ok()) {
      // Workers not started yet, or all busy ending: try at the next round.
      LogDebug("evaluator: {}", gathered.status().message());
      continue;
    }
    if (gathered->min_step == last_step) continue;
    last_step = gathered->min_step;
    model.flat.Upload();  // GPU: the parameters just received
    ASSIGN_OR_RETURN(EvalResult ev,
                     EvaluateSnapshot(model, data, o.eval_batch));
    nlohmann::json j{{"step", gathered->min_step},
                     {"version", gathered->min_step},
                     {"wall_s", Seconds(start, Clock::now())},
                     {"val_loss", ev.loss},
                     {"val_acc", ev.accuracy},
                     {"consensus_distance", gathered->consensus_distance},
                     {"workers", gathered->workers}};
    if (run_dir != nullptr)
      RETURN_IF_ERROR(run_dir->AppendJson("eval.jsonl", j));
    LogInfo(
        "evaluator: step {} (average of {} workers): val loss {:.4f} acc "
        "{:.4f}, consensus distance {:.4g}",
        gathered->min_step, gathered->workers, ev.loss, ev.accuracy,
        gathered->consensus_distance);
  }
  return Status::Ok();
}

}  // namespace strata

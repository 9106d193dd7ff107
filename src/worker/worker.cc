#include "worker/worker.h"

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/seconds.h"
#include "worker/batch.h"
#include "worker/batch_source.h"
#include "worker/fault_injection.h"
#include "worker/gradient_hooks.h"
#include "worker/layer_gate.h"
#include "worker/metrics_window.h"
#include "worker/pace.h"
#include "worker/step_graph.h"
#include "worker/step_profile.h"
#include "worker/stop_signal.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
// The model goes away with the loop: whatever happens, a copy of it (and no
// pointer into it) is left behind for the evaluator.
struct FreezeAtExit {
  PublishedModel* published;
  const WorkerMetrics* metrics;
  ~FreezeAtExit() { published->Freeze(metrics->iterations); }
};

class WorkerLoop {
 public:
  explicit WorkerLoop(WorkerSetup setup)
      : s_(std::move(setup)),
        o_(*s_.options),
        stop_(s_.stop, s_.checkpoints != nullptr, *s_.env.member, s_.index),
        checkpoints_(s_.checkpoints, o_, s_.index, *s_.env.rpc, stop_),
        faults_(o_, s_.index),
        pace_(o_.pace, s_.index),
        window_(o_, s_.index, s_.run_dir, start_, s_.forward_metrics) {
    m_.index = s_.index;
  }

  Result<WorkerMetrics> Run() {
    RETURN_IF_ERROR(SetUpModel());
    RETURN_IF_ERROR(SetUpExchange());
    RETURN_IF_ERROR(SetUpData());
    for (int64_t it = first_step_; it < source_->total_steps(); ++it) {
      ASSIGN_OR_RETURN(const bool go_on, Step(it));
      if (!go_on) break;
    }
    RETURN_IF_ERROR(Finish());
    return m_;
  }

 private:
  Status SetUpModel();
  Status SetUpExchange();
  Status SetUpData();
  // One step; false when the loop ends here (a clean stop, the data ended).
  Result<bool> Step(int64_t it);
  // The clean stops and the coordinator's end before step `it`.
  Result<bool> ShouldStop(int64_t it);
  // Batch, forward and backward; false when the loop ends here.
  Result<bool> Compute(int64_t it, int64_t* epoch, StepResult* r,
                       int64_t* samples);
  Status Finish();
  CheckpointedParts Parts() {
    return {*exchange_,    *source_,     faults_,     m_,
            *s_.published, s_.env.model, keeps_model_};
  }

  WorkerSetup s_;
  const ClusterRunOptions& o_;
  const Clock::time_point start_ = Clock::now();
  WorkerMetrics m_;
  StopSignal stop_;
  CheckpointParticipant checkpoints_;
  FaultInjection faults_;
  WorkerPace pace_;
  MetricsWindow window_;
  // Declared in the order they are made; destroyed in reverse (the hooks
  // and the gate before the exchange they point at, the model last).
  Model model_;
  // The forward and backward pass (a GPU's stream, train.cuda_graph).
  std::unique_ptr<DeviceStep> step_;
  std::unique_ptr<FreezeAtExit> freeze_;
  std::unique_ptr<Exchange> exchange_;
  std::unique_ptr<LayerGate> gate_;
  std::unique_ptr<GradientHooks> hooks_;
  std::unique_ptr<BatchSource> source_;
  std::unique_ptr<StepProfiler> profiler_;
  const bool keeps_model_ = FamilyOf(o_.mode) != ExchangeFamily::kPushPull;
  int64_t first_step_ = 0;
  bool data_ended_ = false;
  std::vector<float> losses_;  // per example, for a sampler that wants them
};

// The model on its device, and the exchange's view of its flat buffers.
Status WorkerLoop::SetUpModel() {
  ASSIGN_OR_RETURN(model_, CreateModel(o_.model, InputSpecOf(*s_.train)));
  const DeviceOptions device = WorkerDevice(o_.device, s_.index, VisibleGpus());
  RETURN_IF_ERROR(PlaceModel(model_, device));
  if (device.device != o_.device.device)
    LogInfo("worker {}: on {}", s_.index, device.device);
  step_ = std::make_unique<DeviceStep>(*model_.net, model_.flat.device(),
                                       o_.device);
  ExchangeEnv& env = s_.env;
  // On a GPU an in-place gradient sink brings each range over once the
  // gradient hooks have marked its gradients (FlatParameters::WaitGrads).
  if (model_.flat.on_device()) {
    FlatParameters* flat = &model_.flat;
    env.grads_ready = [flat](int64_t offset, int64_t count) {
      flat->WaitGrads(offset, count);
    };
  }
  env.options = &o_;
  env.index = s_.index;
  env.model.params = model_.flat.param_data();
  env.model.grads = model_.flat.grad_data();
  env.model.size = model_.flat.size();
  // The flat tensors own the buffers; a zero-copy send keeps them alive.
  env.model.owner = std::make_shared<std::pair<torch::Tensor, torch::Tensor>>(
      model_.flat.params(), model_.flat.grads());
  env.metrics = &m_;
  env.params_mu = &s_.published->mu;
  // The forward pass may start while a pull is still arriving
  // (worker/layer_gate.h).
  env.forward_awaits = o_.layer_wait && model_.net->awaits_layers();
  s_.published->Publish(env.model.params, env.model.size, 0);
  // Made in place: a temporary would freeze the model as it is now.
  freeze_.reset(new FreezeAtExit{s_.published, &m_});
  return Status::Ok();
}

// The strategy, its gate and hooks, and a resumed run's model and state.
Status WorkerLoop::SetUpExchange() {
  ASSIGN_OR_RETURN(exchange_, MakeExchange(s_.env));
  gate_ =
      std::make_unique<LayerGate>(model_, *exchange_, s_.env.forward_awaits);
  m_.layer_slices +=
      SliceLayers(model_, o_, s_.env.layout, gate_->on(), s_.index);
  // Resuming (docs/design/checkpoints.md): the worker's own model and the
  // strategy's state go back before Start(); the cursors once the batch
  // source exists.
  RETURN_IF_ERROR(
      checkpoints_.RestoreModel(*exchange_, s_.env.model, keeps_model_));
  RETURN_IF_ERROR(exchange_->Start());
  if (GradientSink* sink = exchange_->gradient_sink()) {
    // A captured step runs no hooks: run/options.cc turns every sink off.
    if (step_->graph() != nullptr) {
      return Status::Internal(
          "worker {}: train.cuda_graph with a gradient sink (a per-layer "
          "exchange the captured step cannot feed)",
          s_.index);
    }
    ASSIGN_OR_RETURN(hooks_, GradientHooks::Install(model_, sink));
  }
  return s_.env.member->Barrier(0, o_.request_timeout);
}

// The batch source, the resumed cursors and the profiler window.
Status WorkerLoop::SetUpData() {
  ASSIGN_OR_RETURN(source_, MakeBatchSource(o_, s_.index, *s_.train, s_.shards,
                                            s_.stream, s_.shards_for));
  if (model_.flat.on_gpu()) source_->PinMemory();
  ASSIGN_OR_RETURN(first_step_, checkpoints_.RestoreParts(Parts()));
  // Worker 0 alone: LibTorch's profiler is one per process.
  profiler_ = std::make_unique<StepProfiler>(
      o_.profile_from, s_.index == 0 ? o_.profile_steps : 0, s_.run_dir,
      fmt::format("worker{}", s_.index), model_.flat.on_gpu());
  return Status::Ok();
}

Result<bool> WorkerLoop::ShouldStop(int64_t it) {
  // Stopped after a checkpoint round: every worker got it at this step.
  if (stop_.after_round()) return true;
  // The run ended early (Ctrl-C): finish cleanly. Collectives first agree
  // on the step to stop at, so that no member is left waiting for another.
  Result<bool> agreed = exchange_->AgreeToStop(it, stop_.Requested());
  if (!agreed.ok()) {
    if (stop_.StoppedInside(agreed.status(), "before", it)) return true;
    return agreed.status();
  }
  if (*agreed) return true;
  ClusterMember& member = *s_.env.member;
  if (member.shutdown_requested()) {
    return Status::Cancelled(
        "worker {} stopped by the coordinator: {}", s_.index,
        member.shutdown_reason().empty() ? "run ended"
                                         : member.shutdown_reason());
  }
  RETURN_IF_ERROR(faults_.CrashIfDue(it));
  return false;
}

Result<bool> WorkerLoop::Compute(int64_t it, int64_t* epoch, StepResult* r,
                                 int64_t* samples) {
  PhaseMark phase("strata::batch");
  Batch batch;
  Result<bool> got = source_->Next(&batch, epoch);
  if (stop_.StoppedInside(got.status(), "waiting for data at", it))
    return false;
  RETURN_IF_ERROR(got.status());
  if (!*got) {
    data_ended_ = true;
    return false;
  }
  phase.Next("strata::forward_backward");
  // With a gate, after every parameter is in (worker/layer_gate.cc). GPU:
  // the parameters BeforeStep brought, queued ahead of the forward pass
  // (with a gate, layer by layer as they arrive). Nothing writes them
  // again before the step's gradient copies, which follow this copy on
  // the device, have been waited for.
  if (!gate_->on()) {
    model_.flat.ZeroGrad();
    model_.flat.Upload(/*wait=*/false);
  }
  gate_->BeginStep();
  std::vector<float>* losses = source_->wants_losses() ? &losses_ : nullptr;
  Result<StepResult> stepped = step_->Run(batch, losses);
  if (const StepGraph* graph = step_->graph())
    m_.graph_replays = graph->replays();
  // A clean stop may end a pull the forward pass was waiting for.
  if (gate_->failed() && stop_.StoppedInside(stepped.status(), "inside", it))
    return false;
  RETURN_IF_ERROR(stepped.status());
  *r = *stepped;
  *samples = batch.targets.size(0);
  // GPU: a sink got each gradient from its hook; otherwise all of them come
  // back here.
  phase.Next("strata::fetch_grads");
  if (model_.flat.on_device() && exchange_->gradient_sink() == nullptr)
    model_.flat.FetchGrads();
  phase.End();
  source_->Done(losses_);
  return true;
}

Result<bool> WorkerLoop::Step(int64_t it) {
  ASSIGN_OR_RETURN(const bool stop, ShouldStop(it));
  if (stop) return false;
  profiler_->BeforeStep(it);
  const auto t0 = Clock::now();
  PhaseMark whole("strata::step");
  PhaseMark phase("strata::before_step");
  Status before = exchange_->BeforeStep(it);
  if (stop_.StoppedInside(before, "before", it)) return false;
  RETURN_IF_ERROR(before);
  phase.End();
  const auto t1 = Clock::now();
  int64_t epoch = 0, samples = 0;
  StepResult r;
  ASSIGN_OR_RETURN(const bool computed, Compute(it, &epoch, &r, &samples));
  if (!computed) return false;
  faults_.DelayStep();
  pace_.Stretch(it, Seconds(t1, Clock::now()), m_);
  const auto t2 = Clock::now();
  phase.Next("strata::after_step");
  Status after = exchange_->AfterStep(it);
  if (stop_.StoppedInside(after, "after", it)) return false;
  RETURN_IF_ERROR(after);
  phase.End();
  whole.End();
  const auto t3 = Clock::now();
  profiler_->AfterStep(it);
  const StepTimes times{Seconds(t0, t1), Seconds(t1, t2), gate_->wait_s(),
                        Seconds(t2, t3)};
  const double data_wait = source_->wait_s();
  RETURN_IF_ERROR(window_.Record(it, source_->total_steps(), epoch, r.loss,
                                 r.accuracy, samples, times,
                                 exchange_->version(), data_wait, m_));
  s_.published->AfterStep(it + 1, o_.metrics_address.empty() ? nullptr : &m_,
                          data_wait);
  RETURN_IF_ERROR(
      checkpoints_.AfterStep(it + 1, source_->total_steps(), Parts()));
  return true;
}

Status WorkerLoop::Finish() {
  profiler_->Stop();
  const bool to_the_end =
      m_.iterations == source_->total_steps() || data_ended_;
  RETURN_IF_ERROR(checkpoints_.AtEnd(to_the_end, first_step_, Parts()));
  if (const double data_wait = source_->wait_s(); data_wait >= 0) {
    m_.data_wait_s = data_wait;
    m_.compute_s -= data_wait;
  }
  RETURN_IF_ERROR(source_->Finish());
  RETURN_IF_ERROR(exchange_->Finish(m_.iterations));
  m_.finished = to_the_end;
  return Status::Ok();
}

}  // namespace

Result<WorkerMetrics> RunWorker(WorkerSetup setup) {
  WorkerLoop loop(std::move(setup));
  return loop.Run();
}

}  // namespace strata

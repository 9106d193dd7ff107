#include "worker/local_trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <numeric>
#include <thread>

#include "common/log.h"
#include "common/seconds.h"
#include "models/cpu_threads.h"
#include "models/model_file.h"
#include "models/precision.h"
#include "run/progress.h"
#include "sharding/methods.h"
#include "worker/local_update.h"
#include "worker/step_graph.h"
#include "worker/step_profile.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
// A single-process run: its model, batches and update, and the parts
// around the loop (evaluation, checkpoints, the metrics window, progress).
class LocalTrainer {
 public:
  LocalTrainer(const Config& config, const LocalRunOptions& o,
               const DatasetSplits& data, const RunDirectory& run_dir)
      : config_(config),
        o_(o),
        data_(data),
        run_dir_(run_dir),
        batcher_(data.train, o.augment, o.seed ^ 0x5bd1e995) {}

  Result<RunSummary> Train(const std::atomic<bool>* stop);

 private:
  Status SetUp();
  Status MakeSampler();
  // checkpoint.resume: the newest checkpoint's model, optimizer, cursors.
  Status Resume();
  // Step `step` (counted from 1); its epoch and rate into *epoch, *lr.
  Status Step(int64_t step, int64_t* epoch, double* lr);
  // After a step, outside the profiled window: the metrics line, an
  // evaluation, a checkpoint when due.
  Status AfterStep(int64_t step, int64_t epoch, double lr);
  // The window's metrics.jsonl line, and the progress line.
  Status Log(int64_t step, int64_t epoch, double lr);
  // Evaluates on the validation split and appends to eval.jsonl.
  Status Evaluate(int64_t step, int64_t epoch);
  Status Checkpoint(int64_t step);
  bool CheckpointDue(int64_t step) const;
  // The final evaluation on both splits, the model files and summary.json.
  Result<RunSummary> Finish();

  const Config& config_;
  const LocalRunOptions& o_;
  const DatasetSplits& data_;
  const RunDirectory& run_dir_;
  const Clock::time_point start_ = Clock::now();
  int threads_ = 1;
  std::string blas_;  // the BLAS library's threads, for the log
  Model model_;
  // The forward and backward pass (a GPU's stream, train.cuda_graph).
  std::unique_ptr<DeviceStep> step_;
  std::unique_ptr<BatchSampler> sampler_;
  Batcher batcher_;
  std::unique_ptr<LocalUpdate> update_;
  LrSchedule schedule_;
  int64_t per_epoch_ = 0, total_steps_ = 0;
  int64_t first_step_ = 1;
  std::string resumed_from_;
  int64_t last_epoch_ = 0;
  double train_s_ = 0;
  Clock::time_point last_checkpoint_;
  RunSummary s_;
  std::unique_ptr<Progress> progress_;
  std::vector<int64_t> indices_;
  std::vector<float> losses_;  // per example (loss-aware sampler)
  double window_loss_ = 0, window_acc_ = 0;
  int64_t window_n_ = 0;
};

Status LocalTrainer::MakeSampler() {
  // One process sees the whole training set; data.sampler still decides
  // how its batches are drawn (cluster-stratified needs per-example
  // clusters, which the sharding code computes).
  if (o_.sharding_set) {
    LogWarning(
        "cluster.mode = local trains on the whole training set: "
        "data.shard_plan and data.sharding.method apply to cluster modes and "
        "are ignored here");
  }
  std::vector<int64_t> all(data_.train.size());
  std::iota(all.begin(), all.end(), 0);
  std::vector<int32_t> cluster_ids;
  if (UsesClusters(o_.sampler)) {
    ASSIGN_OR_RETURN(cluster_ids,
                     ComputeClassSubclusters(data_.train, o_.shard_options));
  }
  ASSIGN_OR_RETURN(
      sampler_, MakeBatchSampler(o_.sampler, std::move(all), data_.train.labels,
                                 cluster_ids, o_.seed, o_.shuffle,
                                 o_.loss_aware_max_boost));
  per_epoch_ = sampler_->BatchesPerEpoch(o_.batch_size);
  total_steps_ = o_.iterations > 0 ? o_.iterations : per_epoch_ * o_.epochs;
  if (total_steps_ <= 0) {
    return Status::InvalidArgument(
        "nothing to train: train.iterations = 0 and train.epochs = 0");
  }
  return Status::Ok();
}

Status LocalTrainer::SetUp() {
  ASSIGN_OR_RETURN(model_, CreateModel(o_.model, InputSpecOf(data_.train)));
  const CpuThreads cpu = LocalCpuThreads(o_.threads, model_, CpuCores());
  threads_ = cpu.torch;
  torch::set_num_threads(threads_);
  blas_ = SetBlasThreads(cpu.blas);
  RETURN_IF_ERROR(PlaceModel(model_, o_.device));
  step_ = std::make_unique<DeviceStep>(*model_.net, model_.flat.device(),
                                       o_.device);
  if (model_.flat.on_gpu()) batcher_.PinMemory();
  RETURN_IF_ERROR(MakeSampler());
  ASSIGN_OR_RETURN(update_, MakeLocalUpdate(o_, model_.flat));
  schedule_ = o_.schedule.ForSteps(total_steps_);
  // Checkpoints (docs/design/checkpoints.md).
  if (o_.resume) RETURN_IF_ERROR(Resume());
  last_checkpoint_ = Clock::now();
  model_.flat.Upload();  // GPU: the host copy is the one restored/updated
  LogInfo(
      "training {} ({} parameters) on {} ({} train / {} val), batch {}, "
      "{} steps ({} per epoch), {} threads ({}), device {}, {}, optimizer "
      "on {}",
      o_.model.name, model_.flat.size(), data_.train.name, data_.train.size(),
      data_.val.size(), o_.batch_size, total_steps_, per_epoch_, threads_,
      blas_, model_.flat.device().str(), PrecisionName(model_.net->autocast()),
      update_->where() == std::string("device")
          ? model_.flat.device().str() + " (LibTorch operations)"
          : std::string("the host"));
  return Status::Ok();
}

Status LocalTrainer::Resume() {
  ASSIGN_OR_RETURN(::strata::Checkpoint c,
                   LoadNewestIntactCheckpoint(run_dir_.path()));
  ASSIGN_OR_RETURN(const std::string* saved, c.File("config.toml"));
  RETURN_IF_ERROR(CheckResumeConfig(*saved, config_));
  OptimizerState os;
  ASSIGN_OR_RETURN(nlohmann::json counters,
                   RestoreLocalCheckpoint(c, model_, &os, *sampler_, batcher_));
  Status restored = update_->RestoreState(os);
  if (!restored.ok())
    return Status::DataLoss("{}/optimizer.safetensors: {}", c.dir,
                            restored.message());
  first_step_ = c.step + 1;
  resumed_from_ = c.dir;
  train_s_ = counters.value("train_s", 0.0);
  s_.samples = counters.value("samples", int64_t{0});
  last_epoch_ = counters.value("epoch", int64_t{0});
  LogInfo("resuming from {} (step {})", c.dir, c.step);
  return Status::Ok();
}

Status LocalTrainer::Evaluate(int64_t step, int64_t epoch) {
  ASSIGN_OR_RETURN(EvalResult ev,
                   ::strata::Evaluate(*model_.net, data_.val, o_.eval_batch));
  nlohmann::json j{{"step", step},
                   {"epoch", epoch},
                   {"wall_s", Seconds(start_, Clock::now())},
                   {"val_loss", ev.loss},
                   {"val_acc", ev.accuracy},
                   {"samples", s_.samples}};
  progress_->Finish();
  LogInfo("step {} epoch {}: val loss {:.4f} acc {:.4f}", step, epoch, ev.loss,
          ev.accuracy);
  return run_dir_.AppendJson("eval.jsonl", j);
}

Status LocalTrainer::Checkpoint(int64_t step) {
  RETURN_IF_ERROR(update_->SyncHost(model_.flat));
  ASSIGN_OR_RETURN(const OptimizerState optimizer_state, update_->SaveState());
  const InputSpec in = InputSpecOf(data_.train);
  nlohmann::json counters{
      {"step", step},
      {"samples", s_.samples},
      {"epoch", last_epoch_},
      {"train_s", train_s_},
      {"input", {in.channels, in.height, in.width, in.num_classes}}};
  ASSIGN_OR_RETURN(auto files,
                   LocalCheckpointFiles(config_, model_, optimizer_state,
                                        *sampler_, batcher_, counters));
  ASSIGN_OR_RETURN(std::string dir, WriteCheckpoint(run_dir_.path(), step,
                                                    files, o_.checkpoint_keep));
  LogDebug("checkpoint: {}", dir);
  last_checkpoint_ = Clock::now();
  return Status::Ok();
}

bool LocalTrainer::CheckpointDue(int64_t step) const {
  return o_.checkpoints() &&
         ((o_.checkpoint_every > 0 && step % o_.checkpoint_every == 0) ||
          step == total_steps_ ||
          (o_.checkpoint_every_s > 0 &&
           Seconds(last_checkpoint_, Clock::now()) >= o_.checkpoint_every_s));
}

Status LocalTrainer::Log(int64_t step, int64_t epoch, double lr) {
  if (step % o_.log_every != 0 && step != total_steps_) return Status::Ok();
  nlohmann::json j{{"step", step},
                   {"epoch", epoch},
                   {"wall_s", Seconds(start_, Clock::now())},
                   {"lr", lr},
                   {"train_loss", window_loss_ / window_n_},
                   {"train_acc", window_acc_ / window_n_},
                   {"samples", s_.samples}};
  RETURN_IF_ERROR(run_dir_.AppendJson("metrics.jsonl", j));
  progress_->Update(step, window_loss_ / window_n_, window_acc_ / window_n_);
  window_loss_ = window_acc_ = 0;
  window_n_ = 0;
  return Status::Ok();
}

Status LocalTrainer::Step(int64_t step, int64_t* epoch_out, double* lr_out) {
  const auto t0 = Clock::now();
  PhaseMark whole("strata::step");
  PhaseMark phase("strata::batch");
  const int64_t epoch = sampler_->Next(o_.batch_size, &indices_);
  last_epoch_ = epoch;
  Batch batch = batcher_.Gather(indices_);
  phase.Next("strata::forward_backward");
  // Not a GPU's host mirror: nothing reads it before FetchGrads (host
  // update) overwrites it, or ever (device update).
  model_.flat.ZeroGrad(/*host_mirror=*/false);
  const bool losses = sampler_->wants_losses();
  ASSIGN_OR_RETURN(StepResult r,
                   step_->Run(batch, losses ? &losses_ : nullptr));
  if (losses) sampler_->Observe(indices_, losses_.data());
  const double lr = schedule_.Rate(step - 1);
  RETURN_IF_ERROR(update_->Step(model_.flat, lr, phase));
  phase.End();
  whole.End();
  train_s_ += Seconds(t0, Clock::now());
  s_.steps = step;
  s_.samples += static_cast<int64_t>(indices_.size());
  window_loss_ += r.loss;
  window_acc_ += r.accuracy;
  ++window_n_;
  *epoch_out = epoch;
  *lr_out = lr;
  return Status::Ok();
}

Status LocalTrainer::AfterStep(int64_t step, int64_t epoch, double lr) {
  RETURN_IF_ERROR(Log(step, epoch, lr));
  const bool eval_now = o_.eval_every > 0 ? step % o_.eval_every == 0
                                          : sampler_->epoch_finished();
  if (eval_now && step != total_steps_) RETURN_IF_ERROR(Evaluate(step, epoch));
  if (CheckpointDue(step)) RETURN_IF_ERROR(Checkpoint(step));
  return Status::Ok();
}

Result<RunSummary> LocalTrainer::Finish() {
  progress_->Finish();
  RETURN_IF_ERROR(update_->SyncHost(model_.flat));
  RETURN_IF_ERROR(Evaluate(s_.steps, last_epoch_));
  ASSIGN_OR_RETURN(EvalResult tr,
                   ::strata::Evaluate(*model_.net, data_.train, o_.eval_batch));
  ASSIGN_OR_RETURN(EvalResult va,
                   ::strata::Evaluate(*model_.net, data_.val, o_.eval_batch));
  s_.final_train_loss = tr.loss;
  s_.final_train_acc = tr.accuracy;
  s_.final_val_loss = va.loss;
  s_.final_val_acc = va.accuracy;
  s_.train_s = train_s_;
  s_.samples_per_s = train_s_ > 0 ? s_.samples / train_s_ : 0;
  s_.epochs = static_cast<double>(s_.samples) / data_.train.size();
  s_.wall_s = Seconds(start_, Clock::now());
  s_.final_params.assign(model_.flat.param_data(),
                         model_.flat.param_data() + model_.flat.size());
  nlohmann::json j = s_.ToJson();
  j["model"] = o_.model.name;
  j["dataset"] = data_.train.name;
  j["mode"] = "local";
  j["threads"] = threads_;
  j["optimizer_on"] = update_->where();
  if (const StepGraph* graph = step_->graph()) {
    j["cuda_graph"] = {{"captured_at_step", graph->captured_at()},
                       {"replays", graph->replays()}};
  }
  if (!resumed_from_.empty()) {
    j["resumed_from"] = resumed_from_;
    j["resumed_at_step"] = first_step_ - 1;
  }
  // The trained model, for use outside strata (docs/design/models.md).
  RETURN_IF_ERROR(WriteModelFiles(run_dir_.path(), o_.model,
                                  InputSpecOf(data_.train), model_));
  RETURN_IF_ERROR(run_dir_.WriteJson("summary.json", j));
  return s_;
}

Result<RunSummary> LocalTrainer::Train(const std::atomic<bool>* stop) {
  RETURN_IF_ERROR(SetUp());
  s_.parameters = model_.flat.size();
  s_.steps = first_step_ - 1;
  progress_ = std::make_unique<Progress>("train", total_steps_,
                                         Progress::StderrIsTerminal());
  StepProfiler profiler(o_.profile_from, o_.profile_steps, &run_dir_, "local",
                        model_.flat.on_gpu());
  // Step 0: the untrained model, so every curve starts from chance.
  if (first_step_ == 1) RETURN_IF_ERROR(Evaluate(0, 0));
  for (int64_t step = first_step_; step <= total_steps_; ++step) {
    if (stop != nullptr && stop->load()) {
      s_.interrupted = true;
      progress_->Finish();
      LogWarning("interrupted at step {}: evaluating and writing the summary",
                 step - 1);
      if (o_.checkpoints() && step > first_step_)
        RETURN_IF_ERROR(Checkpoint(step - 1));
      break;
    }
    profiler.BeforeStep(step - 1);
    int64_t epoch = 0;
    double lr = 0;
    RETURN_IF_ERROR(Step(step, &epoch, &lr));
    profiler.AfterStep(step - 1);
    RETURN_IF_ERROR(AfterStep(step, epoch, lr));
  }
  profiler.Stop();
  return Finish();
}

}  // namespace

Result<RunSummary> TrainLocal(const Config& config, const DatasetSplits& data,
                              const RunDirectory& run_dir,
                              const std::atomic<bool>* stop) {
  ASSIGN_OR_RETURN(const LocalRunOptions options,
                   LocalRunOptions::FromConfig(config));
  LocalTrainer trainer(config, options, data, run_dir);
  return trainer.Train(stop);
}

}  // namespace strata

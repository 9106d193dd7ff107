#include "train/local_trainer.h"

#include <torch/torch.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <thread>

#include "common/fs.h"
#include "common/log.h"
#include "data/batch_sampler.h"
#include "ps/optimizer.h"
#include "ps/schedule.h"
#include "sharding/resolve.h"
#include "train/batch.h"
#include "train/checkpoint.h"
#include "train/model_file.h"
#include "train/progress.h"
#include "train/step_profile.h"
#include "train/tensor_optimizer.h"

namespace strata {

nlohmann::json RunSummary::ToJson() const {
  return nlohmann::json{{"final_train_loss", final_train_loss},
                        {"final_train_acc", final_train_acc},
                        {"final_val_loss", final_val_loss},
                        {"final_val_acc", final_val_acc},
                        {"wall_s", wall_s},
                        {"train_s", train_s},
                        {"samples_per_s", samples_per_s},
                        {"steps", steps},
                        {"samples", samples},
                        {"epochs", epochs},
                        {"parameters", parameters},
                        {"interrupted", interrupted}};
}

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Status RestoreModelFromCheckpoint(const Checkpoint& c, Model& model) {
  ASSIGN_OR_RETURN(const std::string* model_bytes, c.File("model.safetensors"));
  ASSIGN_OR_RETURN(
      SafetensorsFile params,
      DecodeSafetensors(*model_bytes, c.dir + "/model.safetensors"));
  const SafeTensor* flat = params.Find("flat");
  if (flat == nullptr || flat->dtype != "F32" ||
      flat->numel() != model.flat.size())
    return Status::DataLoss(
        "{}/model.safetensors: no \"flat\" float32 tensor of {} parameters",
        c.dir, model.flat.size());
  std::memcpy(model.flat.param_data(), flat->data.data(), flat->data.size());
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, value] : NamedBuffers(model)) {
      const SafeTensor* t = params.Find(name);
      if (t == nullptr || t->numel() != value.numel())
        return Status::DataLoss(
            "{}/model.safetensors: no buffer {} of {} values", c.dir, name,
            value.numel());
      torch::Tensor src =
          t->dtype == "I64"
              ? torch::from_blob(const_cast<char*>(t->data.data()),
                                 {t->numel()}, torch::kLong)
              : torch::from_blob(const_cast<char*>(t->data.data()),
                                 {t->numel()}, torch::kFloat);
      value.copy_(src.reshape(value.sizes()));
    }
  }
  return Status::Ok();
}

Result<std::string> ExportLocalCheckpoint(const std::string& run_dir,
                                          int64_t step,
                                          const std::string& out_dir) {
  ASSIGN_OR_RETURN(Checkpoint c, LoadCheckpoint(run_dir, step));
  ASSIGN_OR_RETURN(const std::string* config_text, c.File("config.toml"));
  ASSIGN_OR_RETURN(const std::string* state_text, c.File("state.json"));
  ASSIGN_OR_RETURN(Config config, Config::FromTomlString(
                                      *config_text, c.dir + "/config.toml"));
  nlohmann::json state = nlohmann::json::parse(*state_text, nullptr, false);
  if (state.is_discarded() || !state.contains("input") ||
      !state["input"].is_array() || state["input"].size() != 4)
    return Status::DataLoss(
        "{}/state.json: no input shape (a checkpoint of an older strata?)",
        c.dir);
  const InputSpec in{
      state["input"][0].get<int64_t>(), state["input"][1].get<int64_t>(),
      state["input"][2].get<int64_t>(), state["input"][3].get<int64_t>()};
  ASSIGN_OR_RETURN(Model model,
                   CreateModel(ModelOptions::FromConfig(config), in));
  RETURN_IF_ERROR(RestoreModelFromCheckpoint(c, model));
  const std::string out =
      out_dir.empty()
          ? JoinPath(run_dir, "export-step-" + std::to_string(c.step))
          : out_dir;
  RETURN_IF_ERROR(MakeDirs(out));
  RETURN_IF_ERROR(WriteModelFiles(out, config, in, model));
  return out;
}

// The local trainer's checkpoint files: the flat parameters and the
// buffers, the optimizer's state, the sampler's cursor, the augmentation
// generator and the counters, and the run's config.
Result<std::map<std::string, std::string>> LocalCheckpointFiles(
    const Config& config, Model& model, const OptimizerState& os,
    const BatchSampler& sampler, const Batcher& batcher,
    const nlohmann::json& counters) {
  std::vector<SafeTensor> params = {
      SafeTensor::Floats("flat", {model.flat.size()}, model.flat.param_data())};
  for (const auto& [name, value] : NamedBuffers(model))
    params.push_back(ToSafeTensor(name, value));
  std::vector<SafeTensor> opt;
  for (const auto& [name, values] : os.buffers) {
    opt.push_back(SafeTensor::Floats(
        name, {static_cast<int64_t>(values.size())}, values.data()));
  }
  std::map<std::string, std::string> files;
  ASSIGN_OR_RETURN(files["model.safetensors"], EncodeSafetensors(params));
  ASSIGN_OR_RETURN(
      files["optimizer.safetensors"],
      EncodeSafetensors(opt, {{"steps", std::to_string(os.steps)}}));
  nlohmann::json state = counters;
  state["sampler"] = sampler.SaveState();
  state["augment_rng"] = batcher.SaveRngState();
  files["state.json"] = state.dump(2) + "\n";
  files["config.toml"] = config.ToToml();
  return files;
}

// Puts a checkpoint's state back; returns its counters. DataLoss naming the
// file that does not fit this model.
Result<nlohmann::json> RestoreLocalCheckpoint(const Checkpoint& c, Model& model,
                                              OptimizerState* optimizer,
                                              BatchSampler& sampler,
                                              Batcher& batcher) {
  RETURN_IF_ERROR(RestoreModelFromCheckpoint(c, model));
  ASSIGN_OR_RETURN(const std::string* opt_bytes,
                   c.File("optimizer.safetensors"));
  ASSIGN_OR_RETURN(
      SafetensorsFile opt,
      DecodeSafetensors(*opt_bytes, c.dir + "/optimizer.safetensors"));
  OptimizerState os;
  for (const auto& t : opt.tensors) os.buffers[t.name] = t.ToFloats();
  if (opt.metadata.count("steps")) {
    const std::string& text = opt.metadata.at("steps");
    char* end = nullptr;
    errno = 0;
    os.steps = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0 || os.steps < 0)
      return Status::DataLoss(
          "{}/optimizer.safetensors: its \"steps\" is \"{}\", not a step "
          "count",
          c.dir, text);
  }
  *optimizer = std::move(os);
  ASSIGN_OR_RETURN(const std::string* state_text, c.File("state.json"));
  nlohmann::json state = nlohmann::json::parse(*state_text, nullptr, false);
  if (state.is_discarded() || !state.contains("sampler") ||
      !state["augment_rng"].is_string())
    return Status::DataLoss("{}/state.json: not a local trainer's state",
                            c.dir);
  Status s = sampler.RestoreState(state["sampler"]);
  if (s.ok()) s = batcher.RestoreRngState(state["augment_rng"]);
  if (!s.ok()) return Status::DataLoss("{}/state.json: {}", c.dir, s.message());
  return state;
}

namespace {

// The single-process trainer's update (train.local_optimizer): where it
// runs, and what its state and the host copy of the parameters need.
class LocalUpdate {
 public:
  virtual ~LocalUpdate() = default;
  // Applies the step's gradients, marking its phases in `phase`. Internal
  // for a LibTorch failure.
  virtual Status Step(FlatParameters& flat, double lr, PhaseMark& phase) = 0;
  // Brings the host copy of the parameters up to date (before a checkpoint
  // and at the end). Internal if the device failed.
  virtual Status SyncHost(FlatParameters& flat) = 0;
  virtual Result<OptimizerState> SaveState() const = 0;
  virtual Status RestoreState(const OptimizerState& state) = 0;
  // "host" or "device" (summary.json's optimizer_on).
  virtual const char* where() const = 0;
};

// The servers' flat optimizer on the host copy. On a GPU the gradients come
// back and the parameters go over at every step.
class HostUpdate final : public LocalUpdate {
 public:
  HostUpdate(const OptimizerOptions& o, int64_t size)
      : optimizer_(MakeOptimizer(o, size)) {}
  Status Step(FlatParameters& flat, double lr, PhaseMark& phase) override {
    try {
      phase.Next("strata::fetch_grads");
      flat.FetchGrads();
      phase.Next("strata::optimizer");
      optimizer_->Step(flat.param_data(), flat.grad_data(), lr);
      // Queued; the next step's FetchGrads waits for it before the
      // optimizer writes the host copy again.
      phase.Next("strata::upload");
      flat.Upload(/*wait=*/false);
    } catch (const c10::Error& e) {
      return Status::Internal("the update's copies to and from {}: {}",
                              flat.device().str(), e.what_without_backtrace());
    }
    return Status::Ok();
  }
  Status SyncHost(FlatParameters&) override { return Status::Ok(); }
  Result<OptimizerState> SaveState() const override {
    return optimizer_->SaveState();
  }
  Status RestoreState(const OptimizerState& state) override {
    return optimizer_->RestoreState(state);
  }
  const char* where() const override { return "host"; }

 private:
  std::unique_ptr<Optimizer> optimizer_;
};

// TensorOptimizer on the model's device: on a GPU, no parameter or gradient
// crosses to the host during training; the device copy is the current one.
class DeviceUpdate final : public LocalUpdate {
 public:
  explicit DeviceUpdate(std::unique_ptr<TensorOptimizer> optimizer)
      : optimizer_(std::move(optimizer)) {}
  Status Step(FlatParameters& flat, double lr, PhaseMark& phase) override {
    // Queued on the device after the backward pass.
    phase.Next("strata::optimizer");
    return optimizer_->Step(flat.compute_params(), flat.compute_grads(), lr);
  }
  Status SyncHost(FlatParameters& flat) override {
    // A failure of a kernel queued earlier surfaces at this wait.
    try {
      flat.DownloadParams();
    } catch (const c10::Error& e) {
      return Status::Internal("copying the parameters from {} to the host: {}",
                              flat.device().str(), e.what_without_backtrace());
    }
    return Status::Ok();
  }
  Result<OptimizerState> SaveState() const override {
    return optimizer_->SaveState();
  }
  Status RestoreState(const OptimizerState& state) override {
    return optimizer_->RestoreState(state);
  }
  const char* where() const override { return "device"; }

 private:
  std::unique_ptr<TensorOptimizer> optimizer_;
};

Result<std::unique_ptr<LocalUpdate>> MakeLocalUpdate(
    const Config& config, const FlatParameters& flat) {
  const std::string where = config.GetString("train.local_optimizer");
  const OptimizerOptions o = OptimizerOptions::FromConfig(config);
  if (where == "torch" || (where == "auto" && flat.on_device())) {
    ASSIGN_OR_RETURN(std::unique_ptr<TensorOptimizer> t,
                     TensorOptimizer::Create(o, flat.size(), flat.device()));
    return std::unique_ptr<LocalUpdate>(new DeviceUpdate(std::move(t)));
  }
  return std::unique_ptr<LocalUpdate>(new HostUpdate(o, flat.size()));
}

}  // namespace

Result<RunSummary> TrainLocal(const Config& config, const DatasetSplits& data,
                              const RunDirectory& run_dir,
                              const std::atomic<bool>* stop) {
  const auto start = Clock::now();
  int64_t threads = config.GetInt("train.threads");
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  torch::set_num_threads(static_cast<int>(threads));

  const uint64_t seed = static_cast<uint64_t>(config.GetInt("run.seed"));
  const ModelOptions mo = ModelOptions::FromConfig(config);
  ASSIGN_OR_RETURN(Model model, CreateModel(mo, InputSpecOf(data.train)));
  RETURN_IF_ERROR(PlaceModel(model, DeviceOptions::FromConfig(config)));

  const int64_t batch_size = config.GetInt("train.batch_size");
  std::vector<int64_t> all(data.train.size());
  std::iota(all.begin(), all.end(), 0);
  // One process sees the whole training set; data.sampler still decides how
  // its batches are drawn (cluster-stratified needs per-example clusters,
  // which the sharding code computes).
  const std::string sampler_name = config.GetString("data.sampler");
  if (!config.GetString("data.shard_plan").empty() ||
      config.GetString("data.sharding.method") != "mod") {
    LogWarning(
        "cluster.mode = local trains on the whole training set: "
        "data.shard_plan and data.sharding.method apply to cluster modes and "
        "are ignored here");
  }
  std::vector<int32_t> cluster_ids;
  if (sampler_name == "cluster-stratified" || sampler_name == "loss-aware") {
    ASSIGN_OR_RETURN(ShardOptions so, ShardOptionsFromConfig(config, 1));
    ASSIGN_OR_RETURN(cluster_ids, ComputeClassSubclusters(data.train, so));
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<BatchSampler> sampler,
      MakeBatchSampler(sampler_name, std::move(all), data.train.labels,
                       cluster_ids, seed, config.GetBool("data.shuffle"),
                       config.GetFloat("data.loss_aware.max_boost")));
  BatchSampler& shuffler = *sampler;
  const int64_t per_epoch = shuffler.BatchesPerEpoch(batch_size);
  const int64_t iterations = config.GetInt("train.iterations");
  const int64_t total_steps =
      iterations > 0 ? iterations : per_epoch * config.GetInt("train.epochs");
  if (total_steps <= 0) {
    return Status::InvalidArgument(
        "nothing to train: train.iterations = 0 and train.epochs = 0");
  }
  const int64_t eval_every = config.GetInt("train.eval_every");
  const int64_t log_every = config.GetInt("train.log_every");
  const int64_t eval_batch = config.GetInt("train.eval_batch_size");

  ASSIGN_OR_RETURN(std::unique_ptr<LocalUpdate> update,
                   MakeLocalUpdate(config, model.flat));
  const LrSchedule schedule = LrSchedule::FromConfig(config, total_steps);
  Batcher batcher(data.train, config.GetBool("data.augment"),
                  seed ^ 0x5bd1e995);

  // Checkpoints (docs/checkpoints.md).
  const int64_t ckpt_every = config.GetInt("checkpoint.every_updates");
  const double ckpt_every_s = config.GetFloat("checkpoint.every_s");
  const bool checkpoints = ckpt_every > 0 || ckpt_every_s > 0;
  int64_t first_step = 1;
  std::string resumed_from;
  double resumed_train_s = 0;
  int64_t resumed_samples = 0;
  int64_t resumed_epoch = 0;
  if (config.GetBool("checkpoint.resume")) {
    ASSIGN_OR_RETURN(Checkpoint c, LoadNewestCheckpoint(run_dir.path()));
    ASSIGN_OR_RETURN(const std::string* saved, c.File("config.toml"));
    RETURN_IF_ERROR(CheckResumeConfig(*saved, config));
    OptimizerState os;
    ASSIGN_OR_RETURN(nlohmann::json counters,
                     RestoreLocalCheckpoint(c, model, &os, *sampler, batcher));
    Status restored = update->RestoreState(os);
    if (!restored.ok())
      return Status::DataLoss("{}/optimizer.safetensors: {}", c.dir,
                              restored.message());
    first_step = c.step + 1;
    resumed_from = c.dir;
    resumed_train_s = counters.value("train_s", 0.0);
    resumed_samples = counters.value("samples", int64_t{0});
    resumed_epoch = counters.value("epoch", int64_t{0});
    LogInfo("resuming from {} (step {})", c.dir, c.step);
  }
  auto last_checkpoint = Clock::now();
  model.flat.Upload();  // GPU: the host copy is the one restored/updated

  LogInfo(
      "training {} ({} parameters) on {} ({} train / {} val), batch {}, "
      "{} steps ({} per epoch), {} threads, device {}, optimizer on {}",
      mo.name, model.flat.size(), data.train.name, data.train.size(),
      data.val.size(), batch_size, total_steps, per_epoch, threads,
      model.flat.device().str(),
      update->where() == std::string("device")
          ? model.flat.device().str() + " (LibTorch operations)"
          : std::string("the host"));

  RunSummary s;
  s.parameters = model.flat.size();
  Progress progress("train", total_steps, Progress::StderrIsTerminal());
  std::vector<int64_t> indices;
  std::vector<float> losses;  // per example (loss-aware sampler)
  double window_loss = 0, window_acc = 0;
  int64_t window_n = 0;
  double train_s = resumed_train_s;
  s.samples = resumed_samples;
  s.steps = first_step - 1;

  auto evaluate = [&](int64_t step, int64_t epoch) -> Status {
    ASSIGN_OR_RETURN(EvalResult ev, Evaluate(*model.net, data.val, eval_batch));
    nlohmann::json j{{"step", step},
                     {"epoch", epoch},
                     {"wall_s", Seconds(start, Clock::now())},
                     {"val_loss", ev.loss},
                     {"val_acc", ev.accuracy},
                     {"samples", s.samples}};
    progress.Finish();
    LogInfo("step {} epoch {}: val loss {:.4f} acc {:.4f}", step, epoch,
            ev.loss, ev.accuracy);
    return run_dir.AppendJson("eval.jsonl", j);
  };

  int64_t last_epoch = resumed_epoch;
  auto checkpoint = [&](int64_t step) -> Status {
    RETURN_IF_ERROR(update->SyncHost(model.flat));
    ASSIGN_OR_RETURN(const OptimizerState optimizer_state, update->SaveState());
    const InputSpec in = InputSpecOf(data.train);
    nlohmann::json counters{
        {"step", step},
        {"samples", s.samples},
        {"epoch", last_epoch},
        {"train_s", train_s},
        {"input", {in.channels, in.height, in.width, in.num_classes}}};
    ASSIGN_OR_RETURN(auto files,
                     LocalCheckpointFiles(config, model, optimizer_state,
                                          *sampler, batcher, counters));
    ASSIGN_OR_RETURN(
        std::string dir,
        WriteCheckpoint(run_dir.path(), step, files,
                        static_cast<int>(config.GetInt("checkpoint.keep"))));
    LogDebug("checkpoint: {}", dir);
    last_checkpoint = Clock::now();
    return Status::Ok();
  };
  StepProfiler profiler(config.GetInt("train.profile_from"),
                        config.GetInt("train.profile_steps"), &run_dir, "local",
                        model.flat.on_gpu());
  // Step 0: the untrained model, so every curve starts from chance.
  if (first_step == 1) RETURN_IF_ERROR(evaluate(0, 0));
  for (int64_t step = first_step; step <= total_steps; ++step) {
    if (stop != nullptr && stop->load()) {
      s.interrupted = true;
      progress.Finish();
      LogWarning("interrupted at step {}: evaluating and writing the summary",
                 step - 1);
      if (checkpoints && step > first_step)
        RETURN_IF_ERROR(checkpoint(step - 1));
      break;
    }
    profiler.BeforeStep(step - 1);
    const auto t0 = Clock::now();
    PhaseMark whole("strata::step");
    PhaseMark phase("strata::batch");
    const int64_t epoch = shuffler.Next(batch_size, &indices);
    last_epoch = epoch;
    Batch batch = batcher.Gather(indices);
    phase.Next("strata::forward_backward");
    // Not a GPU's host mirror: nothing reads it before FetchGrads (host
    // update) overwrites it, or ever (device update).
    model.flat.ZeroGrad(/*host_mirror=*/false);
    ASSIGN_OR_RETURN(
        StepResult r,
        ForwardBackward(*model.net, batch,
                        shuffler.wants_losses() ? &losses : nullptr));
    if (shuffler.wants_losses()) shuffler.Observe(indices, losses.data());
    const double lr = schedule.Rate(step - 1);
    RETURN_IF_ERROR(update->Step(model.flat, lr, phase));
    phase.End();
    whole.End();
    train_s += Seconds(t0, Clock::now());
    profiler.AfterStep(step - 1);

    s.steps = step;
    s.samples += static_cast<int64_t>(indices.size());
    window_loss += r.loss;
    window_acc += r.accuracy;
    ++window_n;
    if (step % log_every == 0 || step == total_steps) {
      nlohmann::json j{{"step", step},
                       {"epoch", epoch},
                       {"wall_s", Seconds(start, Clock::now())},
                       {"lr", lr},
                       {"train_loss", window_loss / window_n},
                       {"train_acc", window_acc / window_n},
                       {"samples", s.samples}};
      RETURN_IF_ERROR(run_dir.AppendJson("metrics.jsonl", j));
      progress.Update(step, window_loss / window_n, window_acc / window_n);
      window_loss = window_acc = 0;
      window_n = 0;
    }
    const bool eval_now =
        eval_every > 0 ? step % eval_every == 0 : shuffler.epoch_finished();
    if (eval_now && step != total_steps) RETURN_IF_ERROR(evaluate(step, epoch));
    if (checkpoints &&
        ((ckpt_every > 0 && step % ckpt_every == 0) || step == total_steps ||
         (ckpt_every_s > 0 &&
          Seconds(last_checkpoint, Clock::now()) >= ckpt_every_s)))
      RETURN_IF_ERROR(checkpoint(step));
  }
  profiler.Stop();
  progress.Finish();
  RETURN_IF_ERROR(update->SyncHost(model.flat));
  RETURN_IF_ERROR(evaluate(s.steps, last_epoch));

  ASSIGN_OR_RETURN(EvalResult tr, Evaluate(*model.net, data.train, eval_batch));
  ASSIGN_OR_RETURN(EvalResult va, Evaluate(*model.net, data.val, eval_batch));
  s.final_train_loss = tr.loss;
  s.final_train_acc = tr.accuracy;
  s.final_val_loss = va.loss;
  s.final_val_acc = va.accuracy;
  s.train_s = train_s;
  s.samples_per_s = train_s > 0 ? s.samples / train_s : 0;
  s.epochs = static_cast<double>(s.samples) / data.train.size();
  s.wall_s = Seconds(start, Clock::now());
  s.final_params.assign(model.flat.param_data(),
                        model.flat.param_data() + model.flat.size());
  nlohmann::json j = s.ToJson();
  j["model"] = mo.name;
  j["dataset"] = data.train.name;
  j["mode"] = "local";
  j["threads"] = threads;
  j["optimizer_on"] = update->where();
  if (!resumed_from.empty()) {
    j["resumed_from"] = resumed_from;
    j["resumed_at_step"] = first_step - 1;
  }
  // The trained model, for use outside strata (docs/models.md).
  RETURN_IF_ERROR(
      WriteModelFiles(run_dir.path(), config, InputSpecOf(data.train), model));
  RETURN_IF_ERROR(run_dir.WriteJson("summary.json", j));
  return s;
}

}  // namespace strata

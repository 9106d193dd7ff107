#include "worker/local_checkpoint.h"

#include <torch/torch.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/fs.h"
#include "common/safetensors.h"
#include "models/model_file.h"

namespace strata {

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
  if (c.files.count("state.json") == 0 && c.files.count("coordinator.json")) {
    return Status::FailedPrecondition(
        "{} is a cluster's checkpoint: strata export reads a local run's "
        "checkpoints only (a cluster run writes its model to "
        "{}/model.safetensors at its end)",
        c.dir, run_dir);
  }
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
  RETURN_IF_ERROR(
      WriteModelFiles(out, ModelOptions::FromConfig(config), in, model));
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

}  // namespace strata

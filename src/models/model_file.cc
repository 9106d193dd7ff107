#include "models/model_file.h"

#include <torch/torch.h>

#include "common/fs.h"
#include "models/torchscript.h"

namespace strata {
SafeTensor ToSafeTensor(const std::string& name, const torch::Tensor& value) {
  torch::Tensor t = value.detach().contiguous().cpu();
  SafeTensor out;
  out.name = name;
  out.shape.assign(t.sizes().begin(), t.sizes().end());
  if (t.scalar_type() == torch::kLong) {
    out.dtype = "I64";
  } else {
    t = t.to(torch::kFloat);
    out.dtype = "F32";
  }
  out.data.assign(reinterpret_cast<const char*>(t.data_ptr()),
                  static_cast<size_t>(t.numel() * t.element_size()));
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> NamedBuffers(Model& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  if (auto* script = dynamic_cast<TorchScriptImpl*>(model.net.get())) {
    for (const auto& b : script->script().named_buffers(/*recurse=*/true))
      out.emplace_back(b.name, b.value);
    return out;
  }
  for (const auto& b : model.net->named_buffers(/*recurse=*/true))
    out.emplace_back(b.key(), b.value());
  return out;
}

std::vector<SafeTensor> ModelTensors(Model& model) {
  std::vector<SafeTensor> out;
  if (auto* script = dynamic_cast<TorchScriptImpl*>(model.net.get())) {
    for (const auto& p : script->script().named_parameters(/*recurse=*/true))
      out.push_back(ToSafeTensor(p.name, p.value));
  } else {
    for (const auto& p : model.net->named_parameters(/*recurse=*/true))
      out.push_back(ToSafeTensor(p.key(), p.value()));
  }
  for (const auto& [name, value] : NamedBuffers(model))
    out.push_back(ToSafeTensor(name, value));
  return out;
}

nlohmann::json ModelInfo(const ModelOptions& options, const InputSpec& input,
                         const std::vector<SafeTensor>& tensors,
                         int64_t parameters) {
  // Parameters come first (the flat vector's `parameters` values), then
  // buffers.
  nlohmann::json list = nlohmann::json::array();
  int64_t seen = 0;
  for (const auto& t : tensors) {
    list.push_back({{"name", t.name},
                    {"shape", t.shape},
                    {"dtype", t.dtype},
                    {"kind", seen < parameters ? "parameter" : "buffer"}});
    seen += t.numel();
  }
  nlohmann::json j{{"format", "strata-model-1"},
                   {"model", options.name},
                   {"input",
                    {{"channels", input.channels},
                     {"height", input.height},
                     {"width", input.width}}},
                   {"classes", input.num_classes},
                   {"parameters", parameters},
                   {"tensors", list}};
  if (options.name == "mlp") j["hidden"] = options.hidden;
  if (options.name == "torchscript") j["torchscript"] = options.path;
  return j;
}

Status WriteModelFiles(const std::string& dir, const ModelOptions& options,
                       const InputSpec& input, Model& model) {
  std::vector<SafeTensor> tensors = ModelTensors(model);
  nlohmann::json info = ModelInfo(options, input, tensors, model.flat.size());
  RETURN_IF_ERROR(
      WriteSafetensors(JoinPath(dir, kModelFile), tensors,
                       {{"format", "strata-model-1"},
                        {"model", info["model"].get<std::string>()}}));
  return WriteFileAtomic(JoinPath(dir, kModelInfoFile), info.dump(2) + "\n");
}

Result<nlohmann::json> CheckModelFiles(const std::string& dir) {
  const std::string info_path = JoinPath(dir, kModelInfoFile);
  const std::string model_path = JoinPath(dir, kModelFile);
  for (const auto& p : {info_path, model_path}) {
    if (!FileExists(p))
      return Status::NotFound(
          "{} does not exist (runs write it when they end; was the run "
          "interrupted before, or made by an older strata?)",
          p);
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(info_path));
  nlohmann::json info = nlohmann::json::parse(text, nullptr, false);
  if (info.is_discarded() || !info.contains("tensors") ||
      !info["tensors"].is_array())
    return Status::DataLoss("{}: not a model description", info_path);
  ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensors(model_path));
  if (file.tensors.size() != info["tensors"].size())
    return Status::DataLoss("{} holds {} tensors, {} describes {}", model_path,
                            file.tensors.size(), info_path,
                            info["tensors"].size());
  for (const auto& t : info["tensors"]) {
    const std::string name = t.value("name", "");
    const SafeTensor* got = file.Find(name);
    if (got == nullptr)
      return Status::DataLoss("{} has no tensor {} ({} lists it)", model_path,
                              name, info_path);
    if (nlohmann::json(got->shape) != t["shape"] ||
        got->dtype != t.value("dtype", ""))
      return Status::DataLoss("{}: tensor {} is {} {}, {} says {} {}",
                              model_path, name, got->dtype,
                              nlohmann::json(got->shape).dump(), info_path,
                              t.value("dtype", ""), t["shape"].dump());
  }
  return info;
}

}  // namespace strata

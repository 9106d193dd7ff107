#pragma once

// The trained model as files a user takes out of strata
// (docs/design/models.md): <run>/model.safetensors (every parameter and buffer
// under the model's own tensor names, the names a PyTorch module of the same
// architecture has in its state_dict) and <run>/model.json (what architecture,
// input and classes they belong to). Written at the end of every run; `strata
// export` checks and copies them.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/safetensors.h"
#include "models/models.h"

namespace strata {

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kModelInfoFile = "model.json";

// Parameters (float32) and buffers (BatchNorm statistics; float32 or int64)
// of `model` under their module names; a TorchScript model's under the
// scripted module's own names.
std::vector<SafeTensor> ModelTensors(Model& model);

// {"format", "model", "hidden", "input": {channels, height, width},
//  "classes", "parameters", "tensors": [{"name", "shape", "dtype", "kind"}]}
nlohmann::json ModelInfo(const ModelOptions& options, const InputSpec& input,
                         const std::vector<SafeTensor>& tensors,
                         int64_t parameters);

// A tensor as a safetensors entry: int64 stays I64, anything else becomes
// F32.
SafeTensor ToSafeTensor(const std::string& name, const torch::Tensor& value);

// The module's buffers (BatchNorm statistics) by name, as live tensors (a
// TorchScript model's under the scripted module's names).
std::vector<std::pair<std::string, torch::Tensor>> NamedBuffers(Model& model);

// Writes both files into `dir` (each atomically). IoError naming the file.
Status WriteModelFiles(const std::string& dir, const ModelOptions& options,
                       const InputSpec& input, Model& model);

// Reads `dir`'s two files and checks that they agree (every tensor of the
// description present with its shape and dtype, none extra). NotFound naming
// a missing file, DataLoss naming what disagrees.
Result<nlohmann::json> CheckModelFiles(const std::string& dir);

}  // namespace strata

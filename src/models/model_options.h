#pragma once

// What model a run trains and where it computes, resolved from the config
// once. No LibTorch here: the run options (src/run) hold them, and only
// src/models builds the model.

#include <cstdint>
#include <string>

#include "common/config.h"

namespace strata {

struct ModelOptions {
  std::string name = "mlp";  // mlp, lenet, cnn4, resnet20/32/56, torchscript
  int64_t hidden = 256;      // mlp hidden units
  uint64_t seed = 1;         // initialisation seed
  std::string path;          // torchscript: the saved module

  // model.name, model.hidden, model.path and run.seed from a run config.
  static ModelOptions FromConfig(const Config& config) {
    ModelOptions o;
    o.name = config.GetString("model.name");
    o.hidden = config.GetInt("model.hidden");
    o.path = config.GetString("model.path");
    o.seed = static_cast<uint64_t>(config.GetInt("run.seed"));
    return o;
  }
};

// Where a model computes (PlaceModel).
struct DeviceOptions {
  std::string device = "cpu";  // cpu, cuda or cuda:N
  // On the CPU, the flat vector bound as on a GPU (FlatParameters::Bind's
  // emulate_device).
  bool emulate_gpu_buffers = false;
  // The forward pass's type (models/precision.h): float32 or bf16.
  std::string precision = "float32";
  // train.cuda_graph: the training step captured once as a CUDA graph and
  // replayed (worker/step_graph.h); a GPU only.
  bool cuda_graph = false;
  // train.gpu_backward = own_thread: a training thread runs its backward
  // passes itself (models/compute_stream.h, OwnBackward). False here as in
  // LibTorch (its autograd thread); a run's config says own_thread.
  bool own_backward = false;

  // train.device, train.emulate_gpu_buffers, train.precision,
  // train.cuda_graph and train.gpu_backward from a run config.
  static DeviceOptions FromConfig(const Config& config) {
    DeviceOptions o;
    o.device = config.GetString("train.device");
    o.emulate_gpu_buffers = config.GetBool("train.emulate_gpu_buffers");
    o.precision = config.GetString("train.precision");
    o.cuda_graph = config.GetBool("train.cuda_graph");
    o.own_backward = config.GetString("train.gpu_backward") == "own_thread";
    return o;
  }
};

}  // namespace strata

#include "models/models.h"

#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <mutex>
#include <optional>
#include <unordered_map>

#include "common/mutex.h"
#include "common/own_thread.h"
#include "models/compute_stream.h"
#include "models/cuda_graph.h"
#include "models/precision.h"
#include "models/torchscript.h"

namespace strata {
namespace {

namespace nn = torch::nn;
namespace F = torch::nn::functional;

// The first row of each slice of `weight` (2-D, bound to the flat vector
// that starts at `base`) cut at the last row boundary at or before each of
// `cuts` inside it (ClassifierImpl::SliceLayers), and its row count last.
// Empty when no cut falls inside the weight's rows.
std::vector<int64_t> SliceRows(const torch::Tensor& weight, const float* base,
                               const std::vector<int64_t>& cuts) {
  if (weight.dim() != 2 || !weight.grad().defined()) return {};
  const int64_t begin = weight.data_ptr<float>() - base;
  const int64_t row = weight.size(1);
  std::vector<int64_t> at{0};
  for (int64_t c : cuts) {
    if (c <= begin || c >= begin + weight.numel()) continue;
    const int64_t r = (c - begin) / row;
    if (r > at.back()) at.push_back(r);
  }
  if (at.size() == 1) return {};
  at.push_back(weight.size(0));
  return at;
}

class MlpImpl;

// x W^T over the row slices of a sliced weight (MlpImpl::SliceLayers): the
// forward pass waits for each slice's rows, first slice first; the
// backward pass accumulates each slice's gradient rows into the weight's
// gradient, first slice first, and reports each at once. The weight is an
// input so that the product takes part in autograd, but its gradient is
// written here, not returned: autograd's accumulation would report it only
// whole, after the last slice.
struct SlicedProduct : torch::autograd::Function<SlicedProduct> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx,
                               torch::Tensor x, torch::Tensor weight,
                               MlpImpl* net);
  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grads);
};

// 784-hidden-10 (paper 004 Sec. 3.2.1): one hidden ReLU layer.
class MlpImpl : public ClassifierImpl {
 public:
  MlpImpl(const InputSpec& in, int64_t hidden)
      : fc1_(register_module("fc1", nn::Linear(in.flat_size(), hidden))),
        fc2_(register_module("fc2", nn::Linear(hidden, in.num_classes))) {}
  bool awaits_layers() const override { return true; }
  torch::Tensor forward(torch::Tensor x) override {
    x = x.reshape({x.size(0), -1});
    if (rows_.empty()) {
      Await(*fc1_);
      x = torch::relu(fc1_->forward(x));
    } else {
      // fc1 slice by slice as its rows arrive; its bias follows its weight.
      torch::Tensor product = SlicedProduct::apply(x, fc1_->weight, this);
      Await(*fc1_);
      x = torch::relu(product + fc1_->bias);
    }
    Await(*fc2_);
    return fc2_->forward(x);
  }
  // fc1 holds 99 % of the bytes (784 x 256 of 203,530 floats); fc2 is
  // smaller than any useful range.
  std::vector<torch::Tensor> sliceable_weights() override {
    return {fc1_->weight};
  }
  int SliceLayers(const float* base,
                  const std::vector<int64_t>& cuts) override {
    rows_ = SliceRows(fc1_->weight, base, cuts);
    slices_.clear();
    grad_slices_.clear();
    for (size_t k = 0; k + 1 < rows_.size(); ++k) {
      const int64_t n = rows_[k + 1] - rows_[k];
      slices_.push_back(fc1_->weight.detach().narrow(0, rows_[k], n));
      grad_slices_.push_back(fc1_->weight.grad().narrow(0, rows_[k], n));
    }
    return static_cast<int>(slices_.size());
  }
  std::vector<torch::Tensor> autograd_parameters() override {
    std::vector<torch::Tensor> all = parameters();
    if (rows_.empty()) return all;
    std::vector<torch::Tensor> out;
    for (torch::Tensor& p : all)
      if (!p.is_same(fc1_->weight)) out.push_back(std::move(p));
    return out;
  }

  // SlicedProduct's two passes.
  torch::Tensor ForwardSlices(const torch::Tensor& x) {
    std::vector<torch::Tensor> parts;
    parts.reserve(slices_.size());
    for (const torch::Tensor& w : slices_) {
      AwaitPart(w);
      parts.push_back(torch::mm(x, w.t()));
    }
    return torch::cat(parts, 1);
  }
  void BackwardSlices(const torch::Tensor& grad, const torch::Tensor& x) {
    for (size_t k = 0; k < grad_slices_.size(); ++k) {
      grad_slices_[k].addmm_(
          grad.narrow(1, rows_[k], rows_[k + 1] - rows_[k]).t(), x);
      ReportGrad(grad_slices_[k]);
    }
  }

 private:
  nn::Linear fc1_, fc2_;
  // SliceLayers: the first row of each slice of fc1's weight (and its row
  // count last), and each slice's rows of the weight and of its gradient.
  std::vector<int64_t> rows_;
  std::vector<torch::Tensor> slices_;
  std::vector<torch::Tensor> grad_slices_;
};

torch::Tensor SlicedProduct::forward(torch::autograd::AutogradContext* ctx,
                                     torch::Tensor x, torch::Tensor weight,
                                     MlpImpl* net) {
  ctx->save_for_backward({x, weight});
  // The network outlives the graph of its own forward pass.
  ctx->saved_data["net"] = reinterpret_cast<int64_t>(net);
  return net->ForwardSlices(x);
}

torch::autograd::variable_list SlicedProduct::backward(
    torch::autograd::AutogradContext* ctx,
    torch::autograd::variable_list grads) {
  auto* net = reinterpret_cast<MlpImpl*>(ctx->saved_data["net"].toInt());
  const torch::autograd::variable_list saved = ctx->get_saved_variables();
  const torch::Tensor& grad = grads[0];
  torch::Tensor grad_x;
  if (ctx->needs_input_grad(0)) grad_x = torch::mm(grad, saved[1]);
  net->BackwardSlices(grad, saved[0]);
  return {grad_x, torch::Tensor(), torch::Tensor()};
}

// LeNet-style (paper 004 Sec. 3.2.2): conv 6@5x5, pool, conv 16@5x5, pool,
// then an MLP 120-84-classes. The flattened size follows the input.
class LeNetImpl : public ClassifierImpl {
 public:
  LeNetImpl(const InputSpec& in, int64_t flat)
      : conv1_(register_module(
            "conv1", nn::Conv2d(nn::Conv2dOptions(in.channels, 6, 5)))),
        conv2_(
            register_module("conv2", nn::Conv2d(nn::Conv2dOptions(6, 16, 5)))),
        fc1_(register_module("fc1", nn::Linear(flat, 120))),
        fc2_(register_module("fc2", nn::Linear(120, 84))),
        fc3_(register_module("fc3", nn::Linear(84, in.num_classes))) {}
  bool awaits_layers() const override { return true; }
  torch::Tensor forward(torch::Tensor x) override {
    Await(*conv1_);
    x = F::max_pool2d(torch::relu(conv1_->forward(x)),
                      F::MaxPool2dFuncOptions(2));
    Await(*conv2_);
    x = F::max_pool2d(torch::relu(conv2_->forward(x)),
                      F::MaxPool2dFuncOptions(2));
    x = x.reshape({x.size(0), -1});
    Await(*fc1_);
    x = torch::relu(fc1_->forward(x));
    Await(*fc2_);
    x = torch::relu(fc2_->forward(x));
    Await(*fc3_);
    return fc3_->forward(x);
  }
  // Flattened feature size for an input shape (a dry run).
  static int64_t FlatSize(const InputSpec& in) {
    int64_t h = ((in.height - 4) / 2 - 4) / 2;
    int64_t w = ((in.width - 4) / 2 - 4) / 2;
    return h > 0 && w > 0 ? 16 * h * w : 0;
  }

 private:
  nn::Conv2d conv1_, conv2_;
  nn::Linear fc1_, fc2_, fc3_;
};

// The simple 4-layer CNN of paper 001 Fig. 1 (the classic CIFAR-10 example
// network): conv32-conv32-pool-conv64-conv64-pool-fc512-fc. Dropout is left
// out so that runs are deterministic and gradients depend only on the data.
class Cnn4Impl : public ClassifierImpl {
 public:
  Cnn4Impl(const InputSpec& in)
      : c1_(register_module(
            "conv1",
            nn::Conv2d(nn::Conv2dOptions(in.channels, 32, 3).padding(1)))),
        c2_(register_module(
            "conv2", nn::Conv2d(nn::Conv2dOptions(32, 32, 3).padding(1)))),
        c3_(register_module(
            "conv3", nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)))),
        c4_(register_module(
            "conv4", nn::Conv2d(nn::Conv2dOptions(64, 64, 3).padding(1)))),
        fc1_(register_module(
            "fc1", nn::Linear(64 * (in.height / 4) * (in.width / 4), 512))),
        fc2_(register_module("fc2", nn::Linear(512, in.num_classes))) {}
  bool awaits_layers() const override { return true; }
  torch::Tensor forward(torch::Tensor x) override {
    Await(*c1_);
    x = torch::relu(c1_->forward(x));
    Await(*c2_);
    x = torch::relu(c2_->forward(x));
    x = F::max_pool2d(x, F::MaxPool2dFuncOptions(2));
    Await(*c3_);
    x = torch::relu(c3_->forward(x));
    Await(*c4_);
    x = torch::relu(c4_->forward(x));
    x = F::max_pool2d(x, F::MaxPool2dFuncOptions(2));
    x = x.reshape({x.size(0), -1});
    Await(*fc1_);
    x = torch::relu(fc1_->forward(x));
    Await(*fc2_);
    return fc2_->forward(x);
  }

 private:
  nn::Conv2d c1_, c2_, c3_, c4_;
  nn::Linear fc1_, fc2_;
};

// ResNet v1 basic block for CIFAR (He et al. 2016, Sec. 4.2) with the
// parameter-free shortcut (option A): stride-2 subsampling and zero-padded
// channels when the shape changes.
class BasicBlockImpl : public nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1_(register_module("conv1", nn::Conv2d(nn::Conv2dOptions(in, out, 3)
                                                       .stride(stride)
                                                       .padding(1)
                                                       .bias(false)))),
        bn1_(register_module("bn1", nn::BatchNorm2d(out))),
        conv2_(register_module(
            "conv2",
            nn::Conv2d(nn::Conv2dOptions(out, out, 3).padding(1).bias(false)))),
        bn2_(register_module("bn2", nn::BatchNorm2d(out))),
        pad_(out - in),
        stride_(stride) {}
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor y = torch::relu(bn1_->forward(conv1_->forward(x)));
    y = bn2_->forward(conv2_->forward(y));
    torch::Tensor shortcut = x;
    if (stride_ != 1 || pad_ != 0) {
      using torch::indexing::Slice;
      shortcut = x.index({Slice(), Slice(), Slice(None, None, stride_),
                          Slice(None, None, stride_)});
      shortcut = F::pad(
          shortcut, F::PadFuncOptions({0, 0, 0, 0, pad_ / 2, pad_ - pad_ / 2}));
    }
    return torch::relu(y + shortcut);
  }

 private:
  static constexpr auto None = torch::indexing::None;
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv2_;
  nn::BatchNorm2d bn2_;
  int64_t pad_;
  int64_t stride_;
};
TORCH_MODULE(BasicBlock);

// ResNet-(6n+2) for CIFAR: 3x3 conv 16, three stages of n blocks (16, 32,
// 64 filters; stride 2 at the start of stages 2 and 3), global average pool,
// fully connected classifier.
class ResNetImpl : public ClassifierImpl {
 public:
  ResNetImpl(const InputSpec& in, int64_t n)
      : conv_(register_module(
            "conv",
            nn::Conv2d(
                nn::Conv2dOptions(in.channels, 16, 3).padding(1).bias(false)))),
        bn_(register_module("bn", nn::BatchNorm2d(16))),
        fc_(nullptr) {
    int64_t channels = 16;
    const int64_t widths[3] = {16, 32, 64};
    for (int stage = 0; stage < 3; ++stage) {
      for (int64_t b = 0; b < n; ++b) {
        int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
        blocks_->push_back(block_list_.emplace_back(
            BasicBlock(channels, widths[stage], stride)));
        channels = widths[stage];
      }
    }
    register_module("blocks", blocks_);
    fc_ = register_module("fc", nn::Linear(64, in.num_classes));
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* conv = m->as<nn::Conv2d>()) {
        nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut,
                                  torch::kReLU);
      }
    }
  }
  bool awaits_layers() const override { return true; }
  torch::Tensor forward(torch::Tensor x) override {
    Await(*bn_);  // the stem: conv_, then bn_
    x = torch::relu(bn_->forward(conv_->forward(x)));
    for (BasicBlock& block : block_list_) {
      Await(*block);
      x = block->forward(x);
    }
    x = F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1));
    Await(*fc_);
    return fc_->forward(x.reshape({x.size(0), -1}));
  }

 private:
  nn::Conv2d conv_;
  nn::BatchNorm2d bn_;
  nn::Sequential blocks_;               // registers the blocks ("blocks.N.…")
  std::vector<BasicBlock> block_list_;  // the same blocks, run one by one
  nn::Linear fc_;
};

// LibTorch's default generator is process-wide: seeding and construction
// happen together under this lock so that concurrent CreateModel calls (one
// per worker thread) each get the initialisation their seed defines.
Mutex g_init_mu;

Result<std::shared_ptr<ClassifierImpl>> Construct(const ModelOptions& o,
                                                  const InputSpec& in) {
  bool image =
      in.height > 1 || in.width > 1 ? in.height > 1 && in.width > 1 : false;
  if (o.name == "mlp")
    return std::shared_ptr<ClassifierImpl>(
        std::make_shared<MlpImpl>(in, o.hidden));
  if (o.name == "torchscript") {
    // The module brings its own initial weights (the seed does not apply).
    ASSIGN_OR_RETURN(auto net, TorchScriptImpl::Load(o.path, in));
    return std::shared_ptr<ClassifierImpl>(std::move(net));
  }
  if (!image) {
    return Status::InvalidArgument(
        "model '{}' needs image inputs (C x H x W); this dataset has flat "
        "examples of size {} (use mlp, or give the data an image shape)",
        o.name, in.flat_size());
  }
  if (o.name == "lenet") {
    int64_t flat = LeNetImpl::FlatSize(in);
    if (flat == 0) {
      return Status::InvalidArgument(
          "model 'lenet' needs images of at least 13x13 (two 5x5 convolutions "
          "and two 2x2 pools); got {}x{}",
          in.height, in.width);
    }
    return std::shared_ptr<ClassifierImpl>(
        std::make_shared<LeNetImpl>(in, flat));
  }
  if (o.name == "cnn4") {
    if (in.height < 4 || in.width < 4)
      return Status::InvalidArgument(
          "model 'cnn4' needs images of at least 4x4; got {}x{}", in.height,
          in.width);
    return std::shared_ptr<ClassifierImpl>(std::make_shared<Cnn4Impl>(in));
  }
  if (o.name == "resnet20")
    return std::shared_ptr<ClassifierImpl>(std::make_shared<ResNetImpl>(in, 3));
  if (o.name == "resnet32")
    return std::shared_ptr<ClassifierImpl>(std::make_shared<ResNetImpl>(in, 5));
  if (o.name == "resnet56")
    return std::shared_ptr<ClassifierImpl>(std::make_shared<ResNetImpl>(in, 9));
  std::string names;
  for (const auto& n : ModelNames()) names += (names.empty() ? "" : ", ") + n;
  return Status::InvalidArgument("unknown model '{}'; known: {}", o.name,
                                 names);
}

}  // namespace

const std::vector<std::string>& ModelNames() {
  static const std::vector<std::string> names = {
      "mlp",      "lenet",    "cnn4",       "resnet20",
      "resnet32", "resnet56", "torchscript"};
  return names;
}

Result<Model> CreateModel(const ModelOptions& options, const InputSpec& input) {
  if (input.num_classes < 2 || input.flat_size() < 1) {
    return Status::InvalidArgument(
        "model input needs >= 2 classes and a non-empty shape");
  }
  Model model;
  model.name = options.name;
  try {
    MutexLock lock(&g_init_mu);
    torch::manual_seed(options.seed);
    ASSIGN_OR_RETURN(model.net, Construct(options, input));
  } catch (const c10::Error& e) {
    return Status::Internal("building model '{}': {}", options.name,
                            e.what_without_backtrace());
  }
  ASSIGN_OR_RETURN(model.flat, FlatParameters::Bind(*model.net));
  return model;
}

Result<Model> CreateModelOnThreadOfItsOwn(const ModelOptions& options,
                                          const InputSpec& input) {
  return OnThreadOfItsOwn([&] { return CreateModel(options, input); });
}

namespace {

// The device train.device names, or why it cannot be used here (with
// train.emulate_gpu_buffers: a GPU is refused).
Result<torch::Device> ParseDevice(const DeviceOptions& where) {
  const std::string& device = where.device;
  if (device == "cpu") return torch::Device(torch::kCPU);
  std::optional<torch::Device> d;
  try {
    // "cuda:*" (every GPU, a worker each in turn: WorkerDevice) is cuda:0
    // for whatever is not a worker.
    d = torch::Device(device == kEveryGpu ? "cuda:0" : device);
  } catch (const c10::Error&) {
  }
  if (d && d->is_cpu()) return torch::Device(torch::kCPU);
  if (!d || !d->is_cuda()) {
    return Status::InvalidArgument(
        "train.device = \"{}\": not a device (\"cpu\", \"cuda\", "
        "\"cuda:N\" or \"cuda:*\")",
        device);
  }
  if (where.emulate_gpu_buffers) {
    return Status::InvalidArgument(
        "train.emulate_gpu_buffers = true lays a GPU's buffers out on the "
        "CPU, but train.device = \"{}\" is a GPU: set one of them",
        device);
  }
  if (!torch::cuda::is_available()) {
    return Status::FailedPrecondition(
        "train.device = \"{}\", but this LibTorch ({}) has no CUDA or sees "
        "no GPU: build against a CUDA LibTorch (scripts/gpu_build.sh; "
        "docs/guide/gpu.md) or "
        "set train.device = \"cpu\"",
        device, TORCH_VERSION);
  }
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (d->has_index() && d->index() >= gpus) {
    return Status::InvalidArgument(
        "train.device = \"{}\": this machine has {} GPU(s)", device, gpus);
  }
  if (!d->has_index()) d = torch::Device(torch::kCUDA, 0);
  return *d;
}

}  // namespace

ClassifierImpl::ParamGate PrefixGate(const Model& model,
                                     std::function<void(int64_t end)> await) {
  const float* base = model.flat.compute_params().data_ptr<float>();
  return
      [base, await = std::move(await),
       ends = std::unordered_map<const torch::nn::Module*, int64_t>()](
          const torch::nn::Module* layer, const torch::Tensor* part) mutable {
        if (part != nullptr)
          return await((part->data_ptr<float>() - base) + part->numel());
        if (layer == nullptr) return await(-1);
        auto [at, fresh] = ends.try_emplace(layer, 0);
        if (fresh) {
          for (const torch::Tensor& p : layer->parameters()) {
            at->second = std::max<int64_t>(
                at->second, (p.data_ptr<float>() - base) + p.numel());
          }
        }
        if (at->second > 0) await(at->second);
      };
}

DeviceOptions WorkerDevice(const DeviceOptions& where, int index, int gpus) {
  if (where.device != kEveryGpu || gpus <= 0) return where;
  DeviceOptions mine = where;
  mine.device = fmt::format("cuda:{}", index % gpus);
  return mine;
}

int VisibleGpus() {
  return torch::cuda::is_available()
             ? static_cast<int>(torch::cuda::device_count())
             : 0;
}

std::string SharedGpuNote(const DeviceOptions& where, int workers, int gpus) {
  if (where.device.rfind("cuda", 0) != 0 || where.cuda_graph) return "";
  // Each worker runs its own backward passes (OwnBackward).
  if (where.own_backward && OwnBackwardBuilt()) return "";
  // "cuda:*" spreads the workers over the GPUs in turn; any other name
  // puts them all on one.
  const int spread = where.device == kEveryGpu ? std::max(1, gpus) : 1;
  const int most = (workers + spread - 1) / spread;
  if (most < 2) return "";
  return fmt::format(
      "{} workers compute on one GPU as threads of one process "
      "(train.device = \"{}\"): LibTorch runs every backward pass of a "
      "process on its one thread per GPU, so their backward passes take "
      "turns. train.cuda_graph = true replays each step from its worker's "
      "own thread; --processes gives each worker a process of its own{}",
      most, where.device,
      OwnBackwardBuilt() ? "; train.gpu_backward = \"own_thread\" (the "
                           "default) runs each backward pass on its "
                           "worker's thread"
                         : "");
}

namespace {

// train.cuda_graph's conditions: a GPU, and a build that can capture.
Status CheckCudaGraph(const DeviceOptions& where, const torch::Device& d) {
  if (!where.cuda_graph) return Status::Ok();
  if (d.is_cpu()) {
    return Status::FailedPrecondition(
        "train.cuda_graph = true captures the training step's GPU kernels "
        "in a CUDA graph, but train.device = \"{}\"{}: there is nothing to "
        "capture on the CPU; set train.cuda_graph = false, or train.device "
        "= \"cuda\" on a GPU",
        where.device,
        where.emulate_gpu_buffers ? " (train.emulate_gpu_buffers emulates "
                                    "a GPU's buffers, not its kernels)"
                                  : "");
  }
  if (!CudaGraphsBuilt()) return CudaGraph::Create().status();
  return Status::Ok();
}

}  // namespace

Status CheckDevice(const DeviceOptions& where) {
  RETURN_IF_ERROR(ParsePrecision(where.precision).status());
  ASSIGN_OR_RETURN(torch::Device d, ParseDevice(where));
  return CheckCudaGraph(where, d);
}

Status PlaceModel(Model& model, const DeviceOptions& where) {
  ASSIGN_OR_RETURN(torch::Device d, ParseDevice(where));
  RETURN_IF_ERROR(CheckCudaGraph(where, d));
  ASSIGN_OR_RETURN(const c10::ScalarType precision,
                   ParsePrecision(where.precision));
  model.net->set_autocast(precision);
  if (d.is_cpu()) {
    if (where.emulate_gpu_buffers && !model.flat.on_device()) {
      ASSIGN_OR_RETURN(model.flat, FlatParameters::Bind(*model.net, d, true));
    }
    return Status::Ok();
  }
  try {
    // A scripted module's buffers (BatchNorm statistics) are not registered
    // with the wrapper: move the script itself; its parameters are the
    // wrapper's, so the wrapper's move below finds them there already.
    if (auto* ts = dynamic_cast<TorchScriptImpl*>(model.net.get()))
      ts->script().to(d);
    model.net->to(d);
  } catch (const c10::Error& e) {
    return Status::Internal("moving model '{}' to {}: {}", model.name,
                            where.device, e.what_without_backtrace());
  }
  ASSIGN_OR_RETURN(model.flat, FlatParameters::Bind(*model.net, d));
  return Status::Ok();
}

}  // namespace strata

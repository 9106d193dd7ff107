// GPU workers (train.device). Without CUDA (CI, Debian's LibTorch) the
// device must be a clear error before any node starts, and the CPU path of
// the flat buffers is unchanged. The GPU's data path is checked against the
// CPU on a GPU where there is one, and everywhere with its buffers emulated
// on the CPU (GpuPathTest).
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/fs.h"
#include "data/synthetic.h"
#include "launch/cluster_test_util.h"
#include "models/compute_stream.h"
#include "models/cuda_graph.h"
#include "models/models.h"
#include "run/options.h"
#include "worker/batch.h"
#include "worker/step_graph.h"

namespace strata {
namespace {

using testing_util::Base;
using testing_util::MaxAbsDiff;
using testing_util::RunConfig;
using testing_util::TempRoot;
using testing_util::With;

bool HaveGpu() { return torch::cuda::is_available(); }
constexpr const char* kNoGpu =
    "no CUDA device visible to this LibTorch (a CPU build such as Debian's "
    "libtorch-dev, or no GPU): the GPU path is checked by bench/gpu_bench.sh "
    "on a GPU machine (docs/guide/gpu.md)";

TEST(DeviceConfigTest, CudaWithoutAGpuFailsTheRunNamingTheKey) {
  if (HaveGpu())
    GTEST_SKIP() << "this machine has a GPU: GpuPathTest runs there";
  const std::string root = TempRoot();
  for (const char* mode : {"cluster.mode=local", "cluster.mode=sync"}) {
    SCOPED_TRACE(mode);
    auto r = RunConfig(With(Base(root), {mode, "train.device=cuda"}));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("train.device = \"cuda\""),
              std::string::npos)
        << r.status().ToString();
    EXPECT_NE(r.status().message().find("no CUDA"), std::string::npos)
        << r.status().ToString();
  }
}

TEST(DeviceConfigTest, ANameThatIsNoDeviceIsRefused) {
  const std::string root = TempRoot();
  for (const char* device :
       {"train.device=gpu", "train.device=cuda:x", "train.device=mps"}) {
    SCOPED_TRACE(device);
    auto r = RunConfig(With(Base(root), {"cluster.mode=sync", device}));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("not a device"), std::string::npos)
        << r.status().ToString();
  }
  // "cpu" (the default) and "cpu:0" change nothing.
  Model m = *CreateModel({"mlp", 8, 1, ""}, InputSpec{1, 1, 4, 3});
  const float* before = m.flat.param_data();
  ASSERT_TRUE(PlaceModel(m, {"cpu"}).ok());
  ASSERT_TRUE(PlaceModel(m, {"cpu:0"}).ok());
  EXPECT_FALSE(m.flat.on_device());
  EXPECT_EQ(m.flat.param_data(), before);
}

// Emulating a GPU's buffers is for the CPU: with a GPU named, the run is
// refused naming both keys (on any machine: before CUDA is looked for).
TEST(DeviceConfigTest, EmulatingOnAGpuIsRefusedNamingBothKeys) {
  const std::string root = TempRoot();
  for (const char* mode : {"cluster.mode=local", "cluster.mode=sync"}) {
    SCOPED_TRACE(mode);
    auto r = RunConfig(With(Base(root), {mode, "train.device=cuda:0",
                                         "train.emulate_gpu_buffers=true"}));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("train.emulate_gpu_buffers"),
              std::string::npos)
        << r.status().ToString();
    EXPECT_NE(r.status().message().find("train.device = \"cuda:0\""),
              std::string::npos)
        << r.status().ToString();
  }
}

// On the CPU there is one buffer of each: the copy calls change nothing,
// and binding a module for a device its parameters are not on is refused
// naming the parameter and both devices.
TEST(DeviceConfigTest, CpuBuffersIgnoreTheCopiesAndAWrongDeviceIsNamed) {
  Model m = *CreateModel({"mlp", 8, 1, ""}, InputSpec{1, 1, 4, 3});
  ASSERT_TRUE(m.flat.IsBound(*m.net));
  const std::vector<float> before(m.flat.param_data(),
                                  m.flat.param_data() + m.flat.size());
  m.flat.param_data()[0] += 1.0f;
  m.flat.grad_data()[1] = 2.0f;
  m.flat.Upload();
  m.flat.FetchGrads();
  m.flat.DownloadGrads(0, m.flat.size());
  m.flat.WaitGrads(0, m.flat.size());
  m.flat.DownloadParams();
  EXPECT_EQ(m.flat.param_data()[0], before[0] + 1.0f);
  EXPECT_EQ(m.flat.grad_data()[1], 2.0f);
  EXPECT_TRUE(m.flat.IsBound(*m.net));
  auto wrong = FlatParameters::Bind(*m.net, torch::Device(torch::kCUDA, 0));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("cuda:0"), std::string::npos)
      << wrong.status().ToString();
  EXPECT_NE(wrong.status().message().find(m.flat.slots()[0].name),
            std::string::npos)
      << wrong.status().ToString();
}

// train.device = "cuda:*": worker i computes on cuda:(i mod GPUs), the rest
// on cuda:0; any other device is every worker's.
TEST(DeviceConfigTest, EveryGpuSpreadsTheWorkersInTurn) {
  const DeviceOptions every{kEveryGpu};
  EXPECT_EQ(WorkerDevice(every, 0, 2).device, "cuda:0");
  EXPECT_EQ(WorkerDevice(every, 1, 2).device, "cuda:1");
  EXPECT_EQ(WorkerDevice(every, 2, 2).device, "cuda:0");
  EXPECT_EQ(WorkerDevice(every, 3, 1).device, "cuda:0");
  DeviceOptions bf16{kEveryGpu};
  bf16.precision = "bf16";
  EXPECT_EQ(WorkerDevice(bf16, 1, 4).precision, "bf16");
  for (const char* d : {"cpu", "cuda", "cuda:1"})
    EXPECT_EQ(WorkerDevice(DeviceOptions{d}, 3, 2).device, d);
  // Without a GPU it stays "cuda:*", which the device check refuses.
  EXPECT_EQ(WorkerDevice(every, 1, 0).device, kEveryGpu);
  if (HaveGpu()) {
    EXPECT_TRUE(CheckDevice(every).ok());
    return;
  }
  const Status st = CheckDevice(every);
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("train.device = \"cuda:*\""), std::string::npos)
      << st.ToString();
}

// Two or more workers eager on one GPU, threads of one process, are told
// why their backward passes take turns and what avoids it; one worker a
// GPU, a graph, or the CPU, not.
TEST(DeviceConfigTest, WorkersSharingAGpuAsThreadsAreToldWhy) {
  const std::string note = SharedGpuNote(DeviceOptions{"cuda"}, 2, 1);
  EXPECT_NE(note.find("2 workers compute on one GPU"), std::string::npos)
      << note;
  EXPECT_NE(note.find("train.cuda_graph = true"), std::string::npos) << note;
  EXPECT_NE(note.find("--processes"), std::string::npos) << note;
  // Every worker is on cuda:1, however many GPUs there are.
  EXPECT_NE(SharedGpuNote(DeviceOptions{"cuda:1"}, 4, 2).find("4 workers"),
            std::string::npos);
  // "cuda:*": 3 workers over 2 GPUs put 2 on cuda:0.
  EXPECT_NE(SharedGpuNote(DeviceOptions{kEveryGpu}, 3, 2).find("2 workers"),
            std::string::npos);
  EXPECT_EQ(SharedGpuNote(DeviceOptions{kEveryGpu}, 2, 2), "");
  EXPECT_EQ(SharedGpuNote(DeviceOptions{"cuda"}, 1, 1), "");
  EXPECT_EQ(SharedGpuNote(DeviceOptions{"cpu"}, 4, 0), "");
  DeviceOptions graph{"cuda"};
  graph.cuda_graph = true;
  EXPECT_EQ(SharedGpuNote(graph, 4, 1), "");
}

// train.gpu_backward: own_thread by default, so that each worker runs its
// own backward passes where LibTorch can (2.0 and later), and workers
// sharing a GPU are then not told that theirs take turns; autograd_thread
// is LibTorch's own way, told as before. Other values are refused.
TEST(DeviceConfigTest, EachWorkerRunsItsOwnBackwardPassByDefault) {
  const Config c = With(Base(TempRoot()), {"cluster.mode=sync"});
  DeviceOptions own = DeviceOptions::FromConfig(c);
  DeviceOptions shared = DeviceOptions::FromConfig(
      With(c, {"train.gpu_backward=autograd_thread"}));
  EXPECT_TRUE(own.own_backward);
  EXPECT_FALSE(shared.own_backward);
  own.device = shared.device = "cuda";
  EXPECT_EQ(SharedGpuNote(own, 2, 1).empty(), OwnBackwardBuilt());
  const std::string note = SharedGpuNote(shared, 2, 1);
  EXPECT_NE(note.find("2 workers compute on one GPU"), std::string::npos)
      << note;
  EXPECT_EQ(note.find("train.gpu_backward") != std::string::npos,
            OwnBackwardBuilt())
      << note;
  Config bad;
  const Status refused = bad.ApplyOverride("train.gpu_backward=mine");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("train.gpu_backward"), std::string::npos)
      << refused.ToString();
}

// OwnBackward: on a GPU the backward pass (here its gradient hook) runs on
// the thread that starts it, and on LibTorch's autograd thread without it
// or once it has ended. On the CPU it does nothing (the CPU's backward
// passes run on the calling thread anyway).
TEST(DeviceConfigTest, OwnBackwardRunsTheBackwardPassOnTheCallingThread) {
  EXPECT_FALSE(OwnBackward(torch::kCPU, true).on());
  if (!HaveGpu()) GTEST_SKIP() << kNoGpu;
  if (!OwnBackwardBuilt())
    GTEST_SKIP() << "LibTorch before 2.0: backward passes on a GPU run on "
                    "its autograd thread";
  const torch::Device gpu(torch::kCUDA, 0);
  // Whether the hook ran on the thread that called backward().
  auto on_caller = [&] {
    std::thread::id ran;
    auto w = torch::ones({4}, torch::TensorOptions(gpu).requires_grad(true));
    w.register_hook([&](const torch::Tensor& g) {
      ran = std::this_thread::get_id();
      return g;
    });
    (w * 2).sum().backward();
    EXPECT_EQ(w.grad().sum().item<float>(), 8.0f);
    return ran == std::this_thread::get_id();
  };
  std::thread t([&] {
    EXPECT_FALSE(on_caller());
    {
      OwnBackward own(gpu, true);
      EXPECT_TRUE(own.on());
      EXPECT_TRUE(on_caller());
    }
    EXPECT_FALSE(on_caller());
    OwnBackward off(gpu, false);
    EXPECT_FALSE(off.on());
    EXPECT_FALSE(on_caller());
  });
  t.join();
}

// Two workers on "cuda:*" (on a machine with one GPU both on cuda:0; with
// two, one each) end where the CPU run ends, in sync and in allreduce.
TEST(DeviceConfigTest, TwoWorkersOnEveryGpuEndWhereTheCpuRunEnds) {
  if (!HaveGpu()) GTEST_SKIP() << kNoGpu;
  const std::string root = TempRoot();
  for (const char* mode : {"cluster.mode=sync", "cluster.mode=allreduce"}) {
    SCOPED_TRACE(mode);
    const Config c = With(Base(root), {mode, "cluster.workers=2"});
    auto cpu = RunConfig(With(c, {"run.name=cpu"}));
    auto gpu = RunConfig(With(c, {"run.name=gpu", "train.device=cuda:*"}));
    ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    ASSERT_FALSE(cpu->final_params.empty());
    EXPECT_LT(MaxAbsDiff(cpu->final_params, gpu->final_params), 1e-3);
  }
}

// train.cuda_graph captures GPU kernels: on the CPU (emulated buffers
// included) the run is refused before it starts, naming the key and why,
// in the local trainer and in a cluster (on any machine: the device is the
// CPU here). Where LibTorch has no CUDA the build cannot capture at all,
// and says so for a GPU device (that one needs a CPU build: on a GPU
// machine the GPU tests below run instead).
TEST(DeviceConfigTest, ACudaGraphOnTheCpuIsRefusedWithTheReason) {
  const std::string root = TempRoot();
  for (const char* mode : {"cluster.mode=local", "cluster.mode=sync"}) {
    for (const char* emulate : {"false", "true"}) {
      SCOPED_TRACE(std::string(mode) + ", emulated " + emulate);
      auto r = RunConfig(With(
          Base(root), {mode, "train.cuda_graph=true",
                       std::string("train.emulate_gpu_buffers=") + emulate}));
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), Status::Code::kFailedPrecondition);
      const std::string& m = r.status().message();
      EXPECT_NE(m.find("train.cuda_graph = true"), std::string::npos) << m;
      EXPECT_NE(m.find("train.device = \"cpu\""), std::string::npos) << m;
      EXPECT_NE(m.find("nothing to capture on the CPU"), std::string::npos)
          << m;
      EXPECT_EQ(m.find("emulates a GPU's buffers, not its kernels") !=
                    std::string::npos,
                std::string(emulate) == "true")
          << m;
    }
  }
  if (CudaGraphsBuilt()) return;
  auto made = CudaGraph::Create();
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(made.status().message().find("without CUDA"), std::string::npos)
      << made.status().ToString();
}

// Each training thread queues its work on a stream of its own while its
// ComputeStream lives: not the default stream, not another thread's, and
// the default again after. On the CPU (emulated buffers included) there
// are no streams: it does nothing.
TEST(DeviceConfigTest, EachTrainingThreadComputesOnAStreamOfItsOwn) {
  if (!HaveGpu()) {
    ComputeStream cpu(torch::kCPU);
    EXPECT_FALSE(cpu.on());
    return;
  }
  const torch::Device gpu(torch::kCUDA, 0);
  c10::impl::VirtualGuardImpl impl(gpu.type());
  const c10::Stream before = impl.getStream(gpu);
  c10::Stream mine = before, theirs = before;
  {
    ComputeStream stream(gpu);
    EXPECT_TRUE(stream.on());
    mine = impl.getStream(gpu);
    std::thread other([&] {
      ComputeStream own(gpu);
      theirs = c10::impl::VirtualGuardImpl(gpu.type()).getStream(gpu);
    });
    other.join();
  }
  EXPECT_NE(mine, before);
  EXPECT_NE(theirs, before);
  EXPECT_NE(mine, theirs);
  EXPECT_EQ(impl.getStream(gpu), before);
}

// StepGraph's warm-up, where the build cannot capture (CI): the first 3
// steps of a shape run eagerly, as ForwardBackward, counted over the run
// (a shorter batch in between does not start the count again); the 4th of
// a shape would be captured, and the capture's refusal is the step's
// error. On a CUDA build the GPU test below captures for real.
TEST(DeviceConfigTest, AStepGraphWarmsUpThreeStepsOfAShapeThenCaptures) {
  if (CudaGraphsBuilt()) GTEST_SKIP() << "this build captures: GpuGraphTest";
  Model a = *CreateModel({"lenet", 0, 1, ""}, InputSpec{1, 28, 28, 10});
  Model b = *CreateModel({"lenet", 0, 1, ""}, InputSpec{1, 28, 28, 10});
  StepGraph graph(*a.net);
  torch::manual_seed(7);
  auto batch = [](int64_t n) {
    return Batch{torch::randn({n, 1, 28, 28}),
                 torch::randint(0, 10, {n}, torch::kLong)};
  };
  int step = 0;
  for (int64_t n : {8, 8, 5, 8, 5}) {
    SCOPED_TRACE(++step);
    const Batch x = batch(n);
    a.flat.ZeroGrad();
    b.flat.ZeroGrad();
    auto graphed = graph.Step(x, nullptr);
    auto eager = ForwardBackward(*b.net, x);
    ASSERT_TRUE(graphed.ok()) << graphed.status().ToString();
    ASSERT_TRUE(eager.ok());
    EXPECT_EQ(graphed->loss, eager->loss);
    EXPECT_EQ(std::vector<float>(a.flat.grad_data(),
                                 a.flat.grad_data() + a.flat.size()),
              std::vector<float>(b.flat.grad_data(),
                                 b.flat.grad_data() + b.flat.size()));
  }
  auto fourth = graph.Step(batch(8), nullptr);
  ASSERT_FALSE(fourth.ok());
  EXPECT_EQ(fourth.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(fourth.status().message().find("without CUDA"), std::string::npos)
      << fourth.status().ToString();
  EXPECT_EQ(graph.captured_at(), 0);
  EXPECT_EQ(graph.replays(), 0);
}

// A captured step has no host work between its layers: train.cuda_graph
// turns off what needs it (pipelining's ranges and hooks, layer waits, row
// slices, the all-reduce's bucket hooks), and nothing else.
TEST(DeviceConfigTest, ACudaGraphTurnsOffThePerLayerHostWork) {
  const std::string root = TempRoot();
  for (const char* mode : {"cluster.mode=sync", "cluster.mode=allreduce"}) {
    SCOPED_TRACE(mode);
    const Config c =
        With(Base(root), {mode, "cluster.workers=2", "cluster.slice_kb=1"});
    auto eager = ClusterRunOptions::FromConfig(c);
    auto graphed =
        ClusterRunOptions::FromConfig(With(c, {"train.cuda_graph=true"}));
    ASSERT_TRUE(eager.ok()) << eager.status().ToString();
    ASSERT_TRUE(graphed.ok()) << graphed.status().ToString();
    EXPECT_TRUE(eager->layer_wait);
    EXPECT_TRUE(eager->bucket_overlap);
    EXPECT_GT(eager->slice_floats, 0);
    EXPECT_EQ(eager->pipeline_floats > 0,
              std::string(mode) == "cluster.mode=sync");
    EXPECT_TRUE(graphed->device.cuda_graph);
    EXPECT_FALSE(eager->device.cuda_graph);
    EXPECT_FALSE(graphed->layer_wait);
    EXPECT_FALSE(graphed->bucket_overlap);
    EXPECT_EQ(graphed->slice_floats, 0);
    EXPECT_EQ(graphed->pipeline_floats, 0);
    EXPECT_EQ(graphed->mode, eager->mode);
    EXPECT_EQ(graphed->bucket_floats, eager->bucket_floats);
  }
}

// Where a test runs the GPU's data path: on a GPU (skipped without one), or
// with the GPU's buffers emulated on the CPU (train.emulate_gpu_buffers),
// which every machine has. The emulation runs the same copies between the
// host copy and the buffers the model computes with, at once instead of on
// streams, so it checks that each is made at the right point; it cannot
// check the streams' ordering.
struct DevicePath {
  std::string name;
  bool gpu;
};

class GpuPathTest : public ::testing::TestWithParam<DevicePath> {
 protected:
  void SetUp() override {
    if (GetParam().gpu && !HaveGpu()) GTEST_SKIP() << kNoGpu;
  }
  // The settings that put a run on this path.
  std::string Setting() const {
    return GetParam().gpu ? "train.device=cuda"
                          : "train.emulate_gpu_buffers=true";
  }
  // Binds m's flat vector on this path.
  Status Place(Model& m) const {
    return GetParam().gpu ? PlaceModel(m, {"cuda"})
                          : PlaceModel(m, {"cpu", true});
  }
  // Runs `c` on the CPU and on this path; both must end with the same
  // parameters and train loss: bit for bit where the emulation computes
  // with the CPU's own kernels in the same order (`tolerance` 0), else
  // within `tolerance`. On a GPU, cuBLAS sums in another order than the
  // CPU, so 1e-3 (this MLP has no convolution, so cuDNN's TF32 default
  // plays no part).
  void ExpectItEndsWhereTheCpuRunEnds(const Config& c, double tolerance = 0) {
    auto cpu = RunConfig(With(c, {"run.name=cpu"}));
    auto dev = RunConfig(With(c, {"run.name=dev", Setting()}));
    ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    ASSERT_FALSE(cpu->final_params.empty());
    if (GetParam().gpu) tolerance = std::max(tolerance, 1e-3);
    if (tolerance == 0) {
      EXPECT_EQ(cpu->final_params, dev->final_params);
      EXPECT_EQ(cpu->final_train_loss, dev->final_train_loss);
    } else {
      EXPECT_LT(MaxAbsDiff(cpu->final_params, dev->final_params), tolerance);
      EXPECT_NEAR(cpu->final_train_loss, dev->final_train_loss, tolerance);
    }
    // The run trained: its parameters left their starting point.
    auto start = RunConfig(With(c, {"run.name=start", "train.iterations=1"}));
    ASSERT_TRUE(start.ok()) << start.status().ToString();
    EXPECT_GT(MaxAbsDiff(start->final_params, dev->final_params), 1e-3);
  }
  // The workers of the run on this path in `c`'s run directory, from its
  // summary.json (after ExpectItEndsWhereTheCpuRunEnds).
  static nlohmann::json DevWorkers(const Config& c) {
    auto text = ReadFile(c.GetString("run.dir") + "/dev/summary.json");
    EXPECT_TRUE(text.ok()) << text.status().ToString();
    return text.ok() ? nlohmann::json::parse(*text)["workers"]
                     : nlohmann::json::array();
  }
  // Not vacuous: waiting layer by layer, every step after the first took
  // its parameters range by range as the forward pass reached them (the
  // uploads between layers ran), and none did without it.
  static void ExpectLayerByLayer(const Config& c, const char* counter,
                                 bool layer_wait) {
    const nlohmann::json workers = DevWorkers(c);
    ASSERT_FALSE(workers.empty());
    for (const nlohmann::json& w : workers) {
      if (layer_wait) {
        EXPECT_GE(w[counter].get<int64_t>(), 19) << w.dump();
      } else {
        EXPECT_EQ(w[counter].get<int64_t>(), 0) << w.dump();
      }
    }
  }
};

// The buffers: the module's tensors are views of the device buffers, the
// host copy reaches them only through Upload (UploadRange: that range
// only), and ranges copied with DownloadGrads are on the host once
// WaitGrads returns. (Here the copies start after the backward pass; the
// sync tests below start them from the autograd hooks, during it.)
TEST_P(GpuPathTest, DeviceBuffersAndHostMirrorsAgree) {
  Model m = *CreateModel({"lenet", 0, 1, ""}, InputSpec{1, 28, 28, 10});
  const std::vector<float> init(m.flat.param_data(),
                                m.flat.param_data() + m.flat.size());
  ASSERT_TRUE(Place(m).ok());
  ASSERT_TRUE(m.flat.on_device());
  ASSERT_TRUE(m.flat.IsBound(*m.net));
  EXPECT_EQ(std::vector<float>(m.flat.param_data(),
                               m.flat.param_data() + m.flat.size()),
            init);
  auto device_params = [&m] {
    torch::Tensor t = m.flat.compute_params().cpu().contiguous();
    return std::vector<float>(t.data_ptr<float>(),
                              t.data_ptr<float>() + t.numel());
  };
  EXPECT_NE(m.flat.compute_params().data_ptr<float>(), m.flat.param_data());
  for (int64_t i = 0; i < m.flat.size(); ++i) m.flat.param_data()[i] *= 0.5f;
  EXPECT_EQ(device_params(), init) << "the host copy reached the device";
  // One range: the first parameter's tail and the second's head.
  const int64_t from = m.flat.slots()[1].offset - 3, count = 10;
  m.flat.UploadRange(from, count);
  if (GetParam().gpu) torch::cuda::synchronize();
  std::vector<float> want = init;
  for (int64_t i = from; i < from + count; ++i) want[i] *= 0.5f;
  EXPECT_EQ(device_params(), want);
  m.flat.Upload();
  torch::Tensor first =
      m.net->parameters()[0].detach().flatten().cpu().contiguous();
  for (int64_t i = 0; i < first.numel(); ++i)
    ASSERT_EQ(first.data_ptr<float>()[i], 0.5f * init[i]);

  torch::manual_seed(3);
  Batch batch{torch::randn({8, 1, 28, 28}),
              torch::randint(0, 10, {8}, torch::kLong)};
  m.flat.ZeroGrad();
  ASSERT_TRUE(ForwardBackward(*m.net, batch).ok());
  // Nothing has come back yet.
  EXPECT_EQ(MaxAbsDiff(std::vector<float>(m.flat.grad_data(),
                                          m.flat.grad_data() + m.flat.size()),
                       std::vector<float>(m.flat.size(), 0.0f)),
            0.0);
  for (const auto& slot : m.flat.slots())
    m.flat.DownloadGrads(slot.offset, slot.numel);
  m.flat.WaitGrads(0, m.flat.size());
  const std::vector<float> ranged(m.flat.grad_data(),
                                  m.flat.grad_data() + m.flat.size());
  m.flat.FetchGrads();
  const std::vector<float> whole(m.flat.grad_data(),
                                 m.flat.grad_data() + m.flat.size());
  EXPECT_EQ(ranged, whole);
  EXPECT_GT(MaxAbsDiff(whole, std::vector<float>(whole.size(), 0.0f)), 0.0);
  // The device's parameters come back over the host copy.
  std::fill(m.flat.param_data(), m.flat.param_data() + m.flat.size(), 0.0f);
  m.flat.DownloadParams();
  for (int64_t i = 0; i < m.flat.size(); ++i)
    ASSERT_EQ(m.flat.param_data()[i], 0.5f * init[i]);
}

// The hooks' path: MarkGradsReady only marks a parameter's gradient final;
// WaitGrads then brings a whole range over in one copy (ranges cut through
// parameters), once any parameter there was marked, and brings nothing
// where none was (its floats on the host stay the zeros ZeroGrad left).
// ZeroGrad clears the marks.
TEST_P(GpuPathTest, MarkedGradientsComeBackWithTheirRange) {
  Model m = *CreateModel({"lenet", 0, 1, ""}, InputSpec{1, 28, 28, 10});
  ASSERT_TRUE(Place(m).ok());
  torch::manual_seed(5);
  Batch batch{torch::randn({8, 1, 28, 28}),
              torch::randint(0, 10, {8}, torch::kLong)};
  auto host = [&m] {
    return std::vector<float>(m.flat.grad_data(),
                              m.flat.grad_data() + m.flat.size());
  };
  const std::vector<float> zeros(m.flat.size(), 0.0f);
  m.flat.ZeroGrad();
  ASSERT_TRUE(ForwardBackward(*m.net, batch).ok());
  for (const auto& slot : m.flat.slots())
    m.flat.MarkGradsReady(slot.offset, slot.numel);
  const int64_t a = m.flat.slots()[1].offset + 7, b = m.flat.size() / 2;
  m.flat.WaitGrads(b, m.flat.size() - b);
  m.flat.WaitGrads(0, a);
  m.flat.WaitGrads(a, b - a);
  const std::vector<float> ranged = host();
  m.flat.FetchGrads();
  EXPECT_EQ(ranged, host());
  EXPECT_GT(MaxAbsDiff(ranged, zeros), 0.0);

  // Marks last until ZeroGrad: a step without them brings nothing back.
  m.flat.ZeroGrad();
  ASSERT_TRUE(ForwardBackward(*m.net, batch).ok());
  if (GetParam().gpu) {
    m.flat.WaitGrads(0, m.flat.size());
    EXPECT_EQ(host(), zeros);
  }
  m.flat.MarkGradsReady(m.flat.slots()[0].offset, m.flat.slots()[0].numel);
  m.flat.WaitGrads(0, m.flat.slots()[0].numel);
  const std::vector<float> first = host();
  m.flat.FetchGrads();
  const std::vector<float> whole = host();
  for (int64_t i = 0; i < m.flat.size(); ++i) {
    ASSERT_EQ(first[i], i < m.flat.slots()[0].numel ? whole[i] : 0.0f) << i;
  }
}

// The single-process trainer: updating on the device (train.local_optimizer
// = auto there; the CPU run updates on the host) and with the host's update
// (a fetch and an upload per step). Both end where the CPU run ends: the
// host update bit for bit when emulated, the device update within float
// rounding (LibTorch's kernels against the host loop, tensor_optimizer_test;
// grown over 20 steps with momentum 0.9).
TEST_P(GpuPathTest, LocalEndsWhereTheCpuRunEnds) {
  for (const char* where : {"auto", "host"}) {
    SCOPED_TRACE(where);
    const std::string root = TempRoot();
    ExpectItEndsWhereTheCpuRunEnds(
        With(Base(root), {std::string("train.local_optimizer=") + where}),
        std::string(where) == "auto" ? 1e-4 : 0);
    auto summary = ReadFile(root + "/dev/summary.json");
    ASSERT_TRUE(summary.ok());
    EXPECT_EQ(nlohmann::json::parse(*summary).value("optimizer_on", ""),
              std::string(where) == "auto" ? "device" : "host");
  }
}

// Sync with 2 workers, pipelined ranges: their gradients leave the device
// range by range from the autograd hooks, and the next forward pass uploads
// each layer's parameters as their acks arrive (cluster.layer_wait) or all
// of them before it starts (without), in process and over TCP.
TEST_P(GpuPathTest, SyncEndsWhereTheCpuRunEnds) {
  for (const char* transport : {"inproc", "tcp"}) {
    for (const char* wait : {"true", "false"}) {
      SCOPED_TRACE(std::string(transport) + ", layer_wait " + wait);
      const Config c =
          With(Base(TempRoot()), {"cluster.mode=sync", "cluster.workers=2",
                                  "cluster.pipeline_kb=0.1",
                                  std::string("cluster.transport=") + transport,
                                  std::string("cluster.layer_wait=") + wait});
      ExpectItEndsWhereTheCpuRunEnds(c);
      ExpectLayerByLayer(c, "layered_acks", std::string(wait) == "true");
    }
  }
}

// Async with one worker (a fixed order), pipelined: the acks bring each
// range's parameters, uploaded layer by layer by the next forward pass.
TEST_P(GpuPathTest, AsyncEndsWhereTheCpuRunEnds) {
  const Config c = With(
      Base(TempRoot()),
      {"cluster.mode=async", "cluster.workers=1", "cluster.pipeline_kb=0.1"});
  ExpectItEndsWhereTheCpuRunEnds(c);
  ExpectLayerByLayer(c, "layered_acks", true);
}

// The decentralized path: 2 workers all-reduce their gradients (the
// autograd hooks hand each bucket over from the device) and update the
// host copy, which the next forward pass uploads.
TEST_P(GpuPathTest, AllReduceEndsWhereTheCpuRunEnds) {
  ExpectItEndsWhereTheCpuRunEnds(
      With(Base(TempRoot()), {"cluster.mode=allreduce", "cluster.workers=2"}));
}

// The same over Gloo (cluster.collective = gloo; through memory there are
// no buckets): each bucket is all-reduced from the reducer's thread while
// the backward pass goes on. With the device's buffers the sink works in
// the gradients' host mirror: the hook only marks a gradient final, and
// the reducer's thread copies a bucket and waits for it before reducing it
// (the backward pass's thread, the worker's own or autograd's one per GPU,
// never waits for one).
// Several buckets, cut through parameters.
TEST_P(GpuPathTest, AllReduceOverGlooInBucketsEndsWhereTheCpuRunEnds) {
  ExpectItEndsWhereTheCpuRunEnds(
      With(Base(TempRoot()),
           {"cluster.mode=allreduce", "cluster.workers=2",
            "cluster.collective=gloo", "cluster.bucket_mb=0.001"}));
}

// ssp pulls before every step: the forward pass starts while the pull
// arrives and uploads each layer once its ranges are in (layer_wait), or
// after the whole pull (without). One worker keeps the order fixed.
TEST_P(GpuPathTest, SspPullingEveryStepEndsWhereTheCpuRunEnds) {
  for (const char* wait : {"true", "false"}) {
    SCOPED_TRACE(std::string("layer_wait ") + wait);
    const Config c =
        With(Base(TempRoot()), {"cluster.mode=ssp", "cluster.workers=1",
                                "cluster.pipeline_kb=0.1",
                                std::string("cluster.layer_wait=") + wait});
    ExpectItEndsWhereTheCpuRunEnds(c);
    ExpectLayerByLayer(c, "layered_pulls", std::string(wait) == "true");
  }
}

// A GPU run's batches are gathered into pinned memory (Batcher::PinMemory;
// the worker and the local trainer ask for it on a GPU), so that their copy
// to the device is a DMA; the values are those of the unpinned batcher.
TEST(GpuGraphTest, APinnedBatcherGathersTheSameBatchesPinned) {
  if (!HaveGpu()) GTEST_SKIP() << kNoGpu;
  SyntheticOptions so;
  so.shape = "1x8x8";
  so.train_size = 64;
  so.val_size = 16;
  auto data = MakeSynthetic(so);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  Batcher plain(data->train, true, 3), pinned(data->train, true, 3);
  pinned.PinMemory();
  for (int step = 0; step < 3; ++step) {
    const std::vector<int64_t> ids{step, 5, 9, 63};
    const Batch a = plain.Gather(ids), b = pinned.Gather(ids);
    EXPECT_FALSE(a.inputs.is_pinned());
    EXPECT_TRUE(b.inputs.is_pinned());
    EXPECT_TRUE(b.targets.is_pinned());
    EXPECT_TRUE(torch::equal(a.inputs, b.inputs));
    EXPECT_TRUE(torch::equal(a.targets, b.targets));
  }
}

// train.cuda_graph on a GPU: the local trainer (the update on the device,
// outside the graph) and 2 sync and allreduce workers end where the
// uncaptured run ends, the graph captured after 3 eager steps and replayed
// at every later step. LeNet at batch 64 (10 of them), for convolutions.
TEST(GpuGraphTest, ACapturedStepEndsWhereTheEagerRunEnds) {
  if (!HaveGpu()) GTEST_SKIP() << kNoGpu;
  const std::string root = TempRoot();
  const Config base =
      With(Base(root), {"train.device=cuda", "data.synthetic.shape=1x28x28",
                        "model.name=lenet", "train.batch_size=64",
                        "train.iterations=10", "cluster.workers=2"});
  for (const char* mode :
       {"cluster.mode=local", "cluster.mode=sync", "cluster.mode=allreduce"}) {
    SCOPED_TRACE(mode);
    const std::string name = std::string(mode).substr(13);
    auto eager = RunConfig(With(base, {mode, "run.name=" + name + "-eager"}));
    auto graphed = RunConfig(With(
        base, {mode, "run.name=" + name + "-graph", "train.cuda_graph=true"}));
    ASSERT_TRUE(eager.ok()) << eager.status().ToString();
    ASSERT_TRUE(graphed.ok()) << graphed.status().ToString();
    EXPECT_LT(MaxAbsDiff(eager->final_params, graphed->final_params), 1e-4);
    auto text = ReadFile(root + "/" + name + "-graph/summary.json");
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    const nlohmann::json j = nlohmann::json::parse(*text);
    if (name == "local") {
      EXPECT_EQ(j["cuda_graph"]["captured_at_step"].get<int64_t>(), 4);
      EXPECT_EQ(j["cuda_graph"]["replays"].get<int64_t>(), 7);
    } else {
      ASSERT_FALSE(j["workers"].empty());
      for (const nlohmann::json& w : j["workers"]) {
        EXPECT_EQ(w["graph_replays"].get<int64_t>(),
                  w["iterations"].get<int64_t>() - 3)
            << w.dump();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, GpuPathTest,
                         ::testing::Values(DevicePath{"EmulatedOnTheCpu",
                                                      false},
                                           DevicePath{"Gpu", true}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace strata

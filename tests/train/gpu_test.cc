// GPU workers (train.device). Without CUDA (CI, Debian's LibTorch) the
// device must be a clear error before any node starts, and the CPU path of
// the flat buffers is unchanged; with a GPU the tests marked so run and
// compare against the CPU.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "models/models.h"
#include "train/batch.h"
#include "train/cluster_test_util.h"

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
    "on a GPU machine (docs/gpu.md)";

TEST(DeviceConfigTest, CudaWithoutAGpuFailsTheRunNamingTheKey) {
  if (HaveGpu()) GTEST_SKIP() << "this machine has a GPU: GpuTest runs instead";
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
  ASSERT_TRUE(PlaceModel(m, "cpu").ok());
  ASSERT_TRUE(PlaceModel(m, "cpu:0").ok());
  EXPECT_FALSE(m.flat.on_device());
  EXPECT_EQ(m.flat.param_data(), before);
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

// The buffers on a GPU: the module's tensors are views of the device
// buffers, the host mirrors follow Upload/FetchGrads, and ranges copied with
// DownloadGrads are on the host once WaitGrads returns. (Here the copies
// start after the backward pass; the sync test below starts them from the
// autograd hooks, during it.)
TEST(GpuTest, DeviceBuffersAndHostMirrorsAgree) {
  if (!HaveGpu()) GTEST_SKIP() << kNoGpu;
  Model m = *CreateModel({"lenet", 0, 1, ""}, InputSpec{1, 28, 28, 10});
  const std::vector<float> init(m.flat.param_data(),
                                m.flat.param_data() + m.flat.size());
  ASSERT_TRUE(PlaceModel(m, "cuda").ok());
  ASSERT_TRUE(m.flat.on_device());
  ASSERT_TRUE(m.flat.IsBound(*m.net));
  EXPECT_EQ(std::vector<float>(m.flat.param_data(),
                               m.flat.param_data() + m.flat.size()),
            init);
  for (int64_t i = 0; i < m.flat.size(); ++i) m.flat.param_data()[i] *= 0.5f;
  m.flat.Upload();
  torch::Tensor on_device =
      m.net->parameters()[0].detach().flatten().cpu().contiguous();
  for (int64_t i = 0; i < on_device.numel(); ++i)
    ASSERT_EQ(on_device.data_ptr<float>()[i], 0.5f * init[i]);

  torch::manual_seed(3);
  Batch batch{torch::randn({8, 1, 28, 28}),
              torch::randint(0, 10, {8}, torch::kLong)};
  m.flat.ZeroGrad();
  ASSERT_TRUE(ForwardBackward(*m.net, batch).ok());
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
}

// Runs `c` on the CPU and on the GPU; both must end with the same
// parameters and train loss to float tolerance: cuBLAS sums in another
// order than the CPU (this MLP has no convolution, so cuDNN's TF32 default
// plays no part).
void ExpectTheGpuRunEndsWhereTheCpuRunEnds(const Config& c) {
  auto cpu = RunConfig(c);
  auto gpu = RunConfig(With(c, {"train.device=cuda"}));
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  ASSERT_FALSE(cpu->final_params.empty());
  EXPECT_LT(MaxAbsDiff(cpu->final_params, gpu->final_params), 1e-3);
  EXPECT_NEAR(cpu->final_train_loss, gpu->final_train_loss, 1e-3);
}

// The single-process trainer on the GPU: updating on the device
// (train.local_optimizer = auto there; the CPU run updates on the host),
// and with the host's update (a fetch and an upload per step). Both end
// where the CPU run ends.
TEST(GpuTest, LocalOnTheGpuEndsWhereTheCpuRunEnds) {
  if (!HaveGpu()) GTEST_SKIP() << kNoGpu;
  for (const char* where : {"auto", "host"}) {
    SCOPED_TRACE(where);
    ExpectTheGpuRunEndsWhereTheCpuRunEnds(With(
        Base(TempRoot()), {std::string("train.local_optimizer=") + where}));
  }
}

// A sync run with 2 GPU workers (pipelined ranges: their gradients leave
// the device range by range).
TEST(GpuTest, SyncOnTheGpuEndsWhereTheCpuRunEnds) {
  if (!HaveGpu()) GTEST_SKIP() << kNoGpu;
  ExpectTheGpuRunEndsWhereTheCpuRunEnds(With(
      Base(TempRoot()),
      {"cluster.mode=sync", "cluster.workers=2", "cluster.pipeline_kb=0.1"}));
}

// The decentralized path on the GPU: 2 workers all-reduce their gradients
// (the autograd hooks hand each bucket over from the device).
TEST(GpuTest, AllReduceOnTheGpuEndsWhereTheCpuRunEnds) {
  if (!HaveGpu()) GTEST_SKIP() << kNoGpu;
  ExpectTheGpuRunEndsWhereTheCpuRunEnds(
      With(Base(TempRoot()), {"cluster.mode=allreduce", "cluster.workers=2"}));
}

// ssp pulls before every step; on the GPU the whole pull is in before the
// one upload (no layer-by-layer wait there). One worker keeps the order
// fixed.
TEST(GpuTest, SspPullingEveryStepOnTheGpuEndsWhereTheCpuRunEnds) {
  if (!HaveGpu()) GTEST_SKIP() << kNoGpu;
  ExpectTheGpuRunEndsWhereTheCpuRunEnds(With(
      Base(TempRoot()),
      {"cluster.mode=ssp", "cluster.workers=1", "cluster.pipeline_kb=0.1"}));
}

}  // namespace
}  // namespace strata

// Mixed precision (train.precision = bf16): the forward pass under
// autocast, parameters and gradients in float32, and whole runs with it.
#include "models/precision.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "launch/cluster_test_util.h"
#include "models/models.h"
#include "worker/batch.h"

namespace strata {
namespace {

using testing_util::Base;
using testing_util::RunConfig;
using testing_util::TempRoot;
using testing_util::With;

// LeNet with its forward pass in `precision`, from one seed.
Model LeNet(const std::string& precision) {
  auto model = CreateModel(ModelOptions{"lenet", 0, 11, ""}, {1, 28, 28, 10});
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  DeviceOptions where;
  where.precision = precision;
  const Status placed = PlaceModel(*model, where);
  EXPECT_TRUE(placed.ok()) << placed.ToString();
  return std::move(*model);
}

Batch RandomBatch() {
  torch::manual_seed(3);
  return Batch{torch::randn({32, 1, 28, 28}), torch::randint(0, 10, {32})};
}

// |a - b| / |b| over whole vectors.
double RelativeDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / b.norm().item<double>();
}

TEST(PrecisionTest, AnUnknownPrecisionNamesTheKey) {
  auto p = ParsePrecision("fp16");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(p.status().message().find("train.precision = \"fp16\""),
            std::string::npos)
      << p.status().ToString();
  Config c;
  EXPECT_FALSE(c.ApplyOverride("train.precision=half").ok());
  DeviceOptions where;
  where.precision = "bfloat";
  EXPECT_FALSE(CheckDevice(where).ok());
  auto model = CreateModel(ModelOptions{"mlp", 8, 1, ""}, {1, 1, 8, 10});
  ASSERT_TRUE(model.ok());
  EXPECT_FALSE(PlaceModel(*model, where).ok());
  EXPECT_EQ(*ParsePrecision("bf16"), torch::kBFloat16);
  EXPECT_EQ(PrecisionName(*ParsePrecision("float32")), "float32");
}

// The scope turns autocast on for its thread only while it lives, and a
// float32 scope does nothing.
TEST(PrecisionTest, TheScopeComputesInBf16WhileItLives) {
  const torch::Tensor w = torch::randn({4, 8});
  const torch::Tensor x = torch::randn({2, 8});
  {
    AutocastScope scope(c10::DeviceType::CPU, torch::kBFloat16);
    EXPECT_TRUE(AutocastEnabled(c10::DeviceType::CPU));
    EXPECT_EQ(torch::matmul(x, w.t()).scalar_type(), torch::kBFloat16);
  }
  EXPECT_FALSE(AutocastEnabled(c10::DeviceType::CPU));
  EXPECT_EQ(torch::matmul(x, w.t()).scalar_type(), torch::kFloat32);
  {
    AutocastScope scope(c10::DeviceType::CPU, torch::kFloat32);
    EXPECT_FALSE(AutocastEnabled(c10::DeviceType::CPU));
  }
}

// A bf16 step: the loss and the float32 gradients are those of float32
// up to bf16's rounding (8 bits of mantissa), and not bit for bit the
// same, so the step did compute in bf16.
TEST(PrecisionTest, ABf16StepGivesFloat32GradientsCloseToFloat32s) {
  Model full = LeNet("float32");
  Model half = LeNet("bf16");
  ASSERT_EQ(half.net->autocast(), torch::kBFloat16);
  ASSERT_TRUE(torch::equal(full.flat.params(), half.flat.params()));
  const Batch batch = RandomBatch();
  auto a = ForwardBackward(*full.net, batch);
  auto b = ForwardBackward(*half.net, batch);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  EXPECT_NEAR(b->loss, a->loss, 0.02 * a->loss);
  EXPECT_EQ(half.flat.grads().scalar_type(), torch::kFloat32);
  for (const auto& p : half.net->parameters()) {
    EXPECT_EQ(p.scalar_type(), torch::kFloat32);
    EXPECT_EQ(p.grad().scalar_type(), torch::kFloat32);
  }
  const double diff = RelativeDiff(half.flat.grads(), full.flat.grads());
  EXPECT_LT(diff, 0.05);
  EXPECT_GT(diff, 1e-5);  // float32 alone would be (bit for bit) equal
  EXPECT_FALSE(AutocastEnabled(c10::DeviceType::CPU));  // off after the step
}

// Autocast caches its casts of the weights within a scope: the next pass
// must see the weights as an update left them, not the casts of the last.
TEST(PrecisionTest, TheNextPassSeesTheUpdatedWeights) {
  Model full = LeNet("float32");
  Model half = LeNet("bf16");
  const Batch batch = RandomBatch();
  auto a1 = ForwardBackward(*full.net, batch);
  auto b1 = ForwardBackward(*half.net, batch);
  ASSERT_TRUE(a1.ok() && b1.ok());
  {
    torch::NoGradGuard no_grad;
    full.flat.params().mul_(3);
    half.flat.params().mul_(3);
  }
  full.flat.grads().zero_();
  half.flat.grads().zero_();
  auto a2 = ForwardBackward(*full.net, batch);
  auto b2 = ForwardBackward(*half.net, batch);
  ASSERT_TRUE(a2.ok() && b2.ok());
  const double moved = std::abs(a2->loss - a1->loss);
  ASSERT_GT(moved, 0.1);
  EXPECT_LT(std::abs(b2->loss - a2->loss), 0.1 * moved)
      << "bf16 " << b1->loss << " -> " << b2->loss << ", float32 " << a1->loss
      << " -> " << a2->loss;
}

// Evaluation runs under autocast too, and its loss is float32's up to
// bf16's rounding.
TEST(PrecisionTest, EvaluationInBf16IsCloseToFloat32s) {
  Model full = LeNet("float32");
  Model half = LeNet("bf16");
  Dataset d;
  d.channels = 1;
  d.height = d.width = 28;
  d.num_classes = 10;
  const Batch b = RandomBatch();
  d.features.assign(b.inputs.data_ptr<float>(),
                    b.inputs.data_ptr<float>() + b.inputs.numel());
  d.labels.assign(b.targets.data_ptr<int64_t>(),
                  b.targets.data_ptr<int64_t>() + b.targets.numel());
  auto a = Evaluate(*full.net, d, 8);
  auto h = Evaluate(*half.net, d, 8);
  ASSERT_TRUE(a.ok() && h.ok()) << h.status().ToString();
  EXPECT_EQ(h->examples, 32);
  EXPECT_NEAR(h->loss, a->loss, 0.02 * a->loss);
  EXPECT_NE(h->loss, a->loss);
}

// Whole runs: the single-process trainer and a sync cluster in threads
// learn in bf16 as they do in float32 (the synthetic problem of the
// cluster tests, 60 steps), with the GPU's buffer layout emulated in one.
TEST(PrecisionTest, LocalAndClusterRunsLearnInBf16AsInFloat32) {
  const std::string root = TempRoot();
  const Config base = With(Base(root), {"train.iterations=60"});
  for (const char* mode : {"local", "sync"}) {
    const Config c =
        With(base, {std::string("cluster.mode=") + mode, "cluster.workers=2"});
    auto full = RunConfig(c);
    auto half = RunConfig(With(c, {"train.precision=bf16"}));
    auto emulated = RunConfig(
        With(c, {"train.precision=bf16", "train.emulate_gpu_buffers=true"}));
    ASSERT_TRUE(full.ok()) << mode << ": " << full.status().ToString();
    ASSERT_TRUE(half.ok()) << mode << ": " << half.status().ToString();
    ASSERT_TRUE(emulated.ok()) << mode << ": " << emulated.status().ToString();
    EXPECT_GT(full->final_val_acc, 0.5) << mode;
    EXPECT_NEAR(half->final_val_acc, full->final_val_acc, 0.05) << mode;
    EXPECT_NEAR(emulated->final_val_acc, full->final_val_acc, 0.05) << mode;
    EXPECT_NE(half->final_train_loss, full->final_train_loss) << mode;
  }
}

}  // namespace
}  // namespace strata

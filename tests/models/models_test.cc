#include "models/models.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "optimizer_options_util.h"
#include "ps/optimizer.h"

namespace strata {
namespace {

struct Case {
  std::string name;
  InputSpec in;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ModelShapeTest : public ::testing::TestWithParam<Case> {};

TEST_P(ModelShapeTest, ForwardGivesLogitsAndGradsLandInFlatBuffer) {
  const Case& c = GetParam();
  auto model = CreateModel(ModelOptions{c.name, 32, 3, ""}, c.in);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  int64_t count = 0;
  for (const auto& p : model->net->parameters()) count += p.numel();
  EXPECT_EQ(model->flat.size(), count);
  EXPECT_TRUE(model->flat.IsBound(*model->net));
  torch::manual_seed(0);
  auto x = torch::randn({4, c.in.channels, c.in.height, c.in.width});
  auto y = torch::randint(0, c.in.num_classes, {4}, torch::kLong);
  auto logits = model->net->forward(x);
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{4, c.in.num_classes}));
  EXPECT_EQ(model->flat.grads().abs().sum().item<float>(), 0.0f);
  torch::nn::functional::cross_entropy(logits, y).backward();
  // Autograd wrote into the flat gradient buffer, and the binding survived.
  EXPECT_GT(model->flat.grads().abs().sum().item<float>(), 0.0f);
  EXPECT_TRUE(model->flat.IsBound(*model->net));
}

// cluster.layer_wait: the gate hands over the parameters only up to the end
// the forward pass asks for (the others are NaN until then). The logits
// equal those of the model with every parameter in from the start, so no
// layer read a parameter before asking for it; and the first layer asked
// for less than all of them, so the forward pass starts while later
// parameters are still missing.
TEST_P(ModelShapeTest, ForwardAsksForEachLayersParametersBeforeReadingThem) {
  const Case& c = GetParam();
  auto model = CreateModel(ModelOptions{c.name, 32, 3, ""}, c.in);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_TRUE(model->net->awaits_layers());
  model->net->eval();  // BatchNorm: the running statistics stay as they are
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  auto x = torch::randn({4, c.in.channels, c.in.height, c.in.width});
  const torch::Tensor expected = model->net->forward(x).clone();
  const int64_t size = model->flat.size();
  float* params = model->flat.param_data();
  const std::vector<float> all(params, params + size);
  std::fill(params, params + size, std::numeric_limits<float>::quiet_NaN());
  int64_t in = 0;
  std::vector<int64_t> asked;
  model->net->set_param_gate(PrefixGate(*model, [&](int64_t end) {
    if (end < 0) end = size;
    asked.push_back(end);
    if (end > in) std::copy(all.begin() + in, all.begin() + end, params + in);
    in = std::max(in, end);
  }));
  const torch::Tensor got = model->net->forward(x);
  EXPECT_TRUE(torch::equal(got, expected));
  ASSERT_GE(asked.size(), 2u);
  EXPECT_LT(asked.front(), size);
  EXPECT_EQ(asked.back(), size);  // the classifier's parameters come last
  model->net->AwaitAll();
  EXPECT_EQ(asked.back(), size);
  EXPECT_EQ(in, size);
}

// cluster.slice_kb: the MLP's fc1 in row slices cut at the last row
// boundary at or before each cut. The forward pass asks for each slice's rows
// before reading them, first slice first; the backward pass accumulates each
// slice's gradient rows into the flat gradient vector and reports them in the
// same order, first slice first (not autograd: fc1.weight is left out of the
// parameters it accumulates). The logits and every gradient equal the
// unsliced layer's to float rounding (the sliced products sum in another
// order, so not bit for bit).
TEST(ModelTest, SlicedLayerAsksAndReportsSliceBySliceAndMatchesTheWholeLayer) {
  const InputSpec in{1, 1, 12, 5};  // fc1: 40 rows of 12
  auto whole = CreateModel(ModelOptions{"mlp", 40, 3, ""}, in);
  auto sliced = CreateModel(ModelOptions{"mlp", 40, 3, ""}, in);
  ASSERT_TRUE(whole.ok() && sliced.ok());
  ASSERT_EQ(sliced->net->sliceable_weights().size(), 1u);
  EXPECT_EQ(sliced->net->autograd_parameters().size(), 4u);
  // Cuts at 16 rows (192), inside row 33 (400 -> 396) and past fc1.weight
  // (480 + 10, fc1.bias: ignored): slices of 16, 17 and 7 rows.
  EXPECT_EQ(
      sliced->net->SliceLayers(sliced->flat.param_data(), {192, 400, 490}), 3);
  const auto by_autograd = sliced->net->autograd_parameters();
  ASSERT_EQ(by_autograd.size(), 3u);
  for (const torch::Tensor& p : by_autograd)
    EXPECT_NE(p.numel(), 480) << "fc1.weight is reported by its slices";
  const int64_t size = sliced->flat.size();
  std::vector<int64_t> asked;
  sliced->net->set_param_gate(PrefixGate(
      *sliced, [&](int64_t end) { asked.push_back(end < 0 ? size : end); }));
  const float* grads = sliced->flat.grad_data();
  std::vector<std::pair<int64_t, int64_t>> reported;  // offset, floats
  sliced->net->set_grad_report([&](const torch::Tensor& rows) {
    // Already accumulated when told.
    EXPECT_GT(rows.abs().sum().item<float>(), 0.0f);
    reported.emplace_back(rows.data_ptr<float>() - grads, rows.numel());
  });
  torch::manual_seed(0);
  auto x = torch::randn({8, 1, 1, 12});
  auto y = torch::randint(0, 5, {8}, torch::kLong);
  auto a = whole->net->forward(x);
  auto b = sliced->net->forward(x);
  EXPECT_EQ(asked, (std::vector<int64_t>{192, 396, 480, 520, size}));
  EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-6));
  torch::nn::functional::cross_entropy(a, y).backward();
  torch::nn::functional::cross_entropy(b, y).backward();
  EXPECT_EQ(reported, (std::vector<std::pair<int64_t, int64_t>>{
                          {0, 192}, {192, 204}, {396, 84}}));
  EXPECT_GT(sliced->flat.grads().abs().sum().item<float>(), 0.0f);
  EXPECT_TRUE(
      torch::allclose(whole->flat.grads(), sliced->flat.grads(), 1e-5, 1e-6));
  EXPECT_TRUE(sliced->flat.IsBound(*sliced->net));
  // A model with nothing to slice, or cuts outside the layer: no slices.
  auto again = CreateModel(ModelOptions{"mlp", 40, 3, ""}, in);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->net->SliceLayers(again->flat.param_data(), {0, 480}), 0);
  auto lenet = CreateModel(ModelOptions{"lenet", 32, 3, ""}, {1, 28, 28, 10});
  ASSERT_TRUE(lenet.ok());
  EXPECT_EQ(lenet->net->SliceLayers(lenet->flat.param_data(), {100, 1000}), 0);
  EXPECT_TRUE(lenet->net->sliceable_weights().empty());
}

// A scripted model does not ask layer by layer: the worker then has every
// parameter in before the forward pass.
TEST(ModelTest, OnlyBuiltInModelsAskLayerByLayer) {
  struct Plain : ClassifierImpl {
    torch::Tensor forward(torch::Tensor x) override { return x; }
  };
  EXPECT_FALSE(Plain().awaits_layers());
}

INSTANTIATE_TEST_SUITE_P(All, ModelShapeTest,
                         ::testing::Values(Case{"mlp", {1, 1, 20, 3}},
                                           Case{"mlp", {1, 28, 28, 10}},
                                           Case{"lenet", {1, 28, 28, 10}},
                                           Case{"lenet", {3, 32, 32, 10}},
                                           Case{"cnn4", {3, 32, 32, 10}},
                                           Case{"cnn4", {1, 28, 28, 7}},
                                           Case{"resnet20", {3, 32, 32, 100}},
                                           Case{"resnet32", {1, 28, 28, 10}},
                                           Case{"resnet56", {3, 16, 16, 10}}),
                         [](const auto& info) {
                           return info.param.name + "_" +
                                  std::to_string(info.param.in.channels) + "x" +
                                  std::to_string(info.param.in.height) + "_" +
                                  std::to_string(info.index);
                         });

TEST(ModelTest, ResNetDepthsHaveTheExpectedParameterCounts) {
  // He et al. 2016 Table 6: ResNet-20 0.27M, ResNet-32 0.46M, ResNet-56 0.85M.
  InputSpec cifar{3, 32, 32, 10};
  auto r20 = CreateModel({"resnet20", 0, 1, ""}, cifar);
  auto r32 = CreateModel({"resnet32", 0, 1, ""}, cifar);
  auto r56 = CreateModel({"resnet56", 0, 1, ""}, cifar);
  ASSERT_TRUE(r20.ok() && r32.ok() && r56.ok());
  EXPECT_NEAR(r20->flat.size() / 1e6, 0.27, 0.01);
  EXPECT_NEAR(r32->flat.size() / 1e6, 0.46, 0.01);
  EXPECT_NEAR(r56->flat.size() / 1e6, 0.85, 0.01);
}

TEST(ModelTest, SameSeedSameInitDifferentSeedDifferent) {
  InputSpec in{1, 28, 28, 10};
  auto a = CreateModel({"lenet", 0, 5, ""}, in);
  auto b = CreateModel({"lenet", 0, 5, ""}, in);
  auto c = CreateModel({"lenet", 0, 6, ""}, in);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_TRUE(torch::equal(a->flat.params(), b->flat.params()));
  EXPECT_FALSE(torch::equal(a->flat.params(), c->flat.params()));
}

TEST(ModelTest, BadInputsAreRejectedWithReasons) {
  auto flat_conv = CreateModel({"lenet", 0, 1, ""}, InputSpec{1, 1, 64, 10});
  ASSERT_FALSE(flat_conv.ok());
  EXPECT_NE(flat_conv.status().message().find("image"), std::string::npos);
  auto tiny = CreateModel({"lenet", 0, 1, ""}, InputSpec{1, 8, 8, 10});
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("8x8"), std::string::npos);
  auto unknown = CreateModel({"vgg", 0, 1, ""}, InputSpec{3, 32, 32, 10});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("vgg"), std::string::npos);
}

// Our flat-buffer optimizers against LibTorch's own, on twin models: after
// several steps on the same batches the parameters agree, and the module's
// parameters (views) see exactly what is in the flat buffer.
struct OptCase {
  std::string label;
  OptimizerOptions opt;
};
void PrintTo(const OptCase& c, std::ostream* os) { *os << c.label; }
class OptimizerParityTest : public ::testing::TestWithParam<OptCase> {};

TEST_P(OptimizerParityTest, FlatStepMatchesTorchOptim) {
  const OptimizerOptions& o = GetParam().opt;
  const double lr = o.kind == OptimizerOptions::Kind::kAdam ? 0.01 : 0.1;
  InputSpec in{1, 28, 28, 10};
  auto ours = CreateModel({"lenet", 0, 11, ""}, in);
  auto ref = CreateModel({"lenet", 0, 11, ""}, in);
  ASSERT_TRUE(ours.ok() && ref.ok());
  auto optimizer = MakeOptimizer(o, ours->flat.size());
  std::unique_ptr<torch::optim::Optimizer> torch_opt;
  if (o.kind == OptimizerOptions::Kind::kAdam) {
    torch_opt = std::make_unique<torch::optim::Adam>(
        ref->net->parameters(), torch::optim::AdamOptions(lr)
                                    .betas({o.beta1, o.beta2})
                                    .eps(o.eps)
                                    .weight_decay(o.weight_decay));
  } else {
    torch_opt = std::make_unique<torch::optim::SGD>(
        ref->net->parameters(), torch::optim::SGDOptions(lr)
                                    .momentum(o.momentum)
                                    .nesterov(o.nesterov)
                                    .weight_decay(o.weight_decay));
  }
  torch::manual_seed(42);
  for (int step = 0; step < 5; ++step) {
    auto x = torch::randn({8, 1, 28, 28});
    auto y = torch::randint(0, 10, {8}, torch::kLong);
    ours->flat.ZeroGrad();
    torch::nn::functional::cross_entropy(ours->net->forward(x), y).backward();
    optimizer->Step(ours->flat.param_data(), ours->flat.grad_data(), lr);
    ref->flat.ZeroGrad();
    torch::nn::functional::cross_entropy(ref->net->forward(x), y).backward();
    torch_opt->step();
  }
  // Adam divides by sqrt(v): where v is tiny, last-bit differences in the
  // element-wise arithmetic grow, so its tolerance is a small fraction of lr.
  const double atol =
      o.kind == OptimizerOptions::Kind::kAdam ? 5e-3 * lr : 1e-6;
  EXPECT_TRUE(
      torch::allclose(ours->flat.params(), ref->flat.params(), 1e-5, atol))
      << "max diff "
      << (ours->flat.params() - ref->flat.params()).abs().max().item<float>();
  // The module's parameters are views: they read what the buffer holds.
  auto params = ours->net->parameters();
  auto first = params[0].reshape({-1});
  EXPECT_TRUE(
      torch::equal(first, ours->flat.params().narrow(0, 0, first.numel())));
  EXPECT_TRUE(ours->flat.IsBound(*ours->net));
  EXPECT_FALSE(
      torch::equal(ours->flat.params(),
                   CreateModel({"lenet", 0, 11, ""}, in)->flat.params()));
}

using testing_util::AdamOptions;
using testing_util::SgdOptions;

INSTANTIATE_TEST_SUITE_P(
    All, OptimizerParityTest,
    ::testing::Values(OptCase{"plain_sgd", SgdOptions(0, false, 0)},
                      OptCase{"momentum", SgdOptions(0.9, false, 0)},
                      OptCase{"nesterov_wd", SgdOptions(0.9, true, 5e-4)},
                      OptCase{"adam", AdamOptions(0)},
                      OptCase{"adam_wd", AdamOptions(1e-3)}),
    [](const auto& info) { return info.param.label; });

}  // namespace
}  // namespace strata

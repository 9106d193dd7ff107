#include "worker/tensor_optimizer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "optimizer_options_util.h"

namespace strata {
namespace {

// The device-side optimizer against the host one the servers run, on the
// CPU (CI has no GPU; the tensor operations are the same ones a GPU runs).
// The two agree to float rounding, not bit for bit: LibTorch's vectorized
// kernels may fuse `a + alpha * b` into one multiply-add where the host loop
// rounds twice.
struct Case {
  std::string label;
  OptimizerOptions opt;
  double lr;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }

using testing_util::AdamOptions;
using testing_util::SgdOptions;

constexpr int64_t kSize = 4099;  // not a multiple of any vector width

std::vector<float> Random(std::mt19937& rng, float scale) {
  std::normal_distribution<float> n(0.0f, scale);
  std::vector<float> v(kSize);
  for (float& x : v) x = n(rng);
  return v;
}

torch::Tensor View(std::vector<float>& v) {
  return torch::from_blob(v.data(), {static_cast<int64_t>(v.size())},
                          torch::kFloat32);
}

// Largest |a - b| / (1 + |b|).
double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) /
                                (1.0 + std::abs(static_cast<double>(b[i]))));
  return worst;
}

// Adam divides by sqrt(v); where v is tiny a last-bit difference grows, so
// its tolerance is a fraction of lr (as in models_test's parity with
// torch::optim). SGD's stays at float rounding.
double Tolerance(const Case& c) {
  return c.opt.kind == OptimizerOptions::Kind::kAdam ? 1e-3 * c.lr : 2e-6;
}

class TensorOptimizerTest : public ::testing::TestWithParam<Case> {};

TEST_P(TensorOptimizerTest, FollowsTheHostOptimizerStepByStep) {
  const Case& c = GetParam();
  std::mt19937 rng(7);
  std::vector<float> host = Random(rng, 1.0f);
  std::vector<float> dev = host;
  const std::vector<float> start = host;
  auto host_opt = MakeOptimizer(c.opt, kSize);
  auto made = TensorOptimizer::Create(c.opt, kSize, torch::kCPU);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  TensorOptimizer& opt = **made;
  for (int step = 0; step < 40; ++step) {
    std::vector<float> grads = Random(rng, 0.5f);
    const std::vector<float> grads_before = grads;
    const double lr = c.lr * (step < 20 ? 1.0 : 0.5);  // a schedule
    host_opt->Step(host.data(), grads.data(), lr);
    ASSERT_TRUE(opt.Step(View(dev), View(grads), lr).ok());
    ASSERT_EQ(grads, grads_before) << "the step wrote the gradient";
    ASSERT_LE(MaxRelDiff(dev, host), Tolerance(c)) << "step " << step;
  }
  // The parameters moved: the comparison above is not between two no-ops.
  EXPECT_GT(MaxRelDiff(host, start), 100 * Tolerance(c));
  const OptimizerState a = host_opt->SaveState();
  Result<OptimizerState> saved = opt.SaveState();
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  const OptimizerState& b = *saved;
  EXPECT_EQ(b.steps, a.steps);
  ASSERT_EQ(b.buffers.size(), a.buffers.size());
  for (const auto& [name, values] : a.buffers) {
    ASSERT_EQ(b.buffers.count(name), 1u) << name;
    EXPECT_LE(MaxRelDiff(b.buffers.at(name), values), 1e-5) << name;
  }
}

TEST_P(TensorOptimizerTest, StateCarriesOverToTheHostOptimizerAndBack) {
  const Case& c = GetParam();
  std::mt19937 rng(11);
  std::vector<float> params = Random(rng, 1.0f);
  std::vector<std::vector<float>> grads;
  for (int i = 0; i < 20; ++i) grads.push_back(Random(rng, 0.5f));

  // Ten steps on the device optimizer, then ten on a host optimizer that
  // takes its state, against twenty on the host throughout.
  std::vector<float> whole = params;
  auto reference = MakeOptimizer(c.opt, kSize);
  for (auto& g : grads) reference->Step(whole.data(), g.data(), c.lr);

  std::vector<float> handed = params;
  auto first = TensorOptimizer::Create(c.opt, kSize, torch::kCPU);
  ASSERT_TRUE(first.ok());
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE((*first)->Step(View(handed), View(grads[i]), c.lr).ok());
  auto second = MakeOptimizer(c.opt, kSize);
  Result<OptimizerState> handed_state = (*first)->SaveState();
  ASSERT_TRUE(handed_state.ok());
  ASSERT_TRUE(second->RestoreState(*handed_state).ok());
  for (int i = 10; i < 20; ++i)
    second->Step(handed.data(), grads[i].data(), c.lr);
  EXPECT_LE(MaxRelDiff(handed, whole), Tolerance(c));

  // And back: the host's state after ten steps into a device optimizer.
  std::vector<float> back = params;
  auto host = MakeOptimizer(c.opt, kSize);
  for (int i = 0; i < 10; ++i) host->Step(back.data(), grads[i].data(), c.lr);
  auto dev = TensorOptimizer::Create(c.opt, kSize, torch::kCPU);
  ASSERT_TRUE(dev.ok());
  ASSERT_TRUE((*dev)->RestoreState(host->SaveState()).ok());
  for (int i = 10; i < 20; ++i)
    ASSERT_TRUE((*dev)->Step(View(back), View(grads[i]), c.lr).ok());
  EXPECT_LE(MaxRelDiff(back, whole), Tolerance(c));

  // Control: a fresh state (momentum restarted, Adam's step count at 0)
  // is told apart by the same check, so it can fail.
  if (c.opt.kind == OptimizerOptions::Kind::kAdam || c.opt.momentum != 0) {
    std::vector<float> restarted = params;
    auto a = MakeOptimizer(c.opt, kSize);
    for (int i = 0; i < 10; ++i)
      a->Step(restarted.data(), grads[i].data(), c.lr);
    auto fresh = TensorOptimizer::Create(c.opt, kSize, torch::kCPU);
    ASSERT_TRUE(fresh.ok());
    for (int i = 10; i < 20; ++i)
      ASSERT_TRUE((*fresh)->Step(View(restarted), View(grads[i]), c.lr).ok());
    EXPECT_GT(MaxRelDiff(restarted, whole), 10 * Tolerance(c));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Rules, TensorOptimizerTest,
    ::testing::Values(Case{"plain_sgd", SgdOptions(0, false, 0), 0.1},
                      Case{"sgd_weight_decay", SgdOptions(0, false, 5e-4), 0.1},
                      Case{"momentum", SgdOptions(0.9, false, 0), 0.05},
                      Case{"nesterov_weight_decay", SgdOptions(0.9, true, 5e-4),
                           0.05},
                      Case{"adam", AdamOptions(0), 0.01},
                      Case{"adam_weight_decay", AdamOptions(1e-3), 0.01}),
    [](const auto& info) { return info.param.label; });

TEST(TensorOptimizerErrorsTest,
     AStateThatDoesNotFitIsRefusedAndNothingChanges) {
  const OptimizerOptions o = SgdOptions(0.9, false, 0);
  auto opt = TensorOptimizer::Create(o, kSize, torch::kCPU);
  ASSERT_TRUE(opt.ok());
  std::mt19937 rng(3);
  std::vector<float> p = Random(rng, 1.0f), g = Random(rng, 1.0f);
  ASSERT_TRUE((*opt)->Step(View(p), View(g), 0.1).ok());
  const Result<OptimizerState> before = (*opt)->SaveState();
  ASSERT_TRUE(before.ok());

  OptimizerState adam_state = MakeOptimizer(AdamOptions(0), kSize)->SaveState();
  Status s = (*opt)->RestoreState(adam_state);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("\"momentum\""), std::string::npos) << s.message();

  OptimizerState short_state = *before;
  short_state.buffers["momentum"].resize(kSize - 1);
  s = (*opt)->RestoreState(short_state);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find(std::to_string(kSize - 1)), std::string::npos)
      << s.message();

  const Result<OptimizerState> after = (*opt)->SaveState();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->steps, before->steps);
  EXPECT_EQ(after->buffers, before->buffers);
}

TEST(TensorOptimizerErrorsTest, TensorsThatDoNotFitAreNamed) {
  auto opt =
      TensorOptimizer::Create(SgdOptions(0, false, 0), kSize, torch::kCPU);
  ASSERT_TRUE(opt.ok());
  torch::Tensor p = torch::zeros({kSize});
  const torch::Tensor before = p.clone();
  Status s = (*opt)->Step(p, torch::zeros({kSize - 1}), 0.1);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("grads"), std::string::npos) << s.message();
  s = (*opt)->Step(torch::zeros({kSize}, torch::kFloat64), torch::ones({kSize}),
                   0.1);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("params"), std::string::npos) << s.message();
  s = (*opt)->Step(p, torch::ones({kSize, 2}).select(1, 0), 0.1);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << "a strided gradient";
  EXPECT_TRUE(torch::equal(p, before));
  ASSERT_TRUE((*opt)->Step(p, torch::ones({kSize}), 0.1).ok());
  EXPECT_FLOAT_EQ(p[0].item<float>(), -0.1f);
}

}  // namespace
}  // namespace strata

#include "worker/local_trainer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "common/fs.h"
#include "data/load.h"
#include "models/models.h"
#include "worker/batch.h"

namespace strata {
namespace {

std::string TempRoot() {
  const char* t = std::getenv("STRATA_TEST_TMP");
  std::string base = t != nullptr ? t : "/tmp";
  std::string dir = base + "/trainer_test_XXXXXX";
  EXPECT_TRUE(MakeDirs(base).ok());
  char* made = ::mkdtemp(dir.data());
  EXPECT_NE(made, nullptr);
  return dir;
}

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Loads the config's data into a fresh run directory and trains locally.
Result<RunSummary> LoadAndTrain(const Config& c,
                                const std::atomic<bool>* stop = nullptr) {
  ASSIGN_OR_RETURN(DatasetSplits data, LoadDatasetFromConfig(c));
  ASSIGN_OR_RETURN(RunDirectory dir, RunDirectory::Create(c));
  return TrainLocal(c, data, dir, stop);
}

Config SmallSynthetic(const std::string& run_dir) {
  Config c;
  EXPECT_TRUE(c.ApplyOverride("run.dir=" + run_dir).ok());
  EXPECT_TRUE(c.ApplyOverride("run.name=t").ok());
  EXPECT_TRUE(c.ApplyOverride("data.synthetic.train_size=3000").ok());
  EXPECT_TRUE(c.ApplyOverride("data.synthetic.val_size=600").ok());
  EXPECT_TRUE(c.ApplyOverride("data.synthetic.dim=32").ok());
  EXPECT_TRUE(c.ApplyOverride("train.epochs=3").ok());
  EXPECT_TRUE(c.ApplyOverride("train.log_every=10").ok());
  EXPECT_TRUE(c.ApplyOverride("train.threads=1").ok());
  return c;
}

TEST(LocalTrainerTest, LearnsSyntheticAndWritesTheRunDirectory) {
  std::string root = TempRoot();
  Config c = SmallSynthetic(root);
  auto data = LoadDatasetFromConfig(c);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  auto dir = RunDirectory::Create(c);
  ASSERT_TRUE(dir.ok());
  auto s = TrainLocal(c, *data, *dir, nullptr);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->interrupted);
  EXPECT_EQ(s->steps, 3 * ((3000 + 63) / 64));
  EXPECT_NEAR(s->epochs, 3.0, 1e-9);
  // 10 classes: chance is 0.1; the model must clearly learn.
  EXPECT_GT(s->final_val_acc, 0.5);
  EXPECT_GT(s->samples_per_s, 0);

  auto evals = ReadJsonLines(dir->File("eval.jsonl"));
  ASSERT_EQ(evals.size(), 4u);  // step 0 and the end of each epoch
  EXPECT_EQ(evals.front()["step"], 0);
  EXPECT_LT(evals.front()["val_acc"].get<double>(), 0.3);
  EXPECT_NEAR(evals.back()["val_acc"].get<double>(), s->final_val_acc, 1e-12);
  auto metrics = ReadJsonLines(dir->File("metrics.jsonl"));
  ASSERT_FALSE(metrics.empty());
  for (const char* k : {"step", "epoch", "wall_s", "train_loss", "train_acc"})
    EXPECT_TRUE(metrics.back().contains(k)) << k;
  auto summary = nlohmann::json::parse(*ReadFile(dir->File("summary.json")));
  EXPECT_EQ(summary["parameters"].get<int64_t>(), s->parameters);
  EXPECT_DOUBLE_EQ(summary["final_val_acc"].get<double>(), s->final_val_acc);
  auto resolved = Config::FromTomlFile(dir->File("config.toml"));
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(resolved->ToToml(), c.ToToml());
}

TEST(LocalTrainerTest, SamplersApplyAndShardPlansAreIgnoredLocally) {
  // data.sampler draws the local trainer's batches too (cluster-stratified
  // computes its sub-clusters itself); a shard plan meant for a cluster is
  // ignored with a warning instead of failing the run on its worker count.
  for (const char* sampler : {"stratified", "cluster-stratified"}) {
    std::string root = TempRoot();
    Config c = SmallSynthetic(root);
    ASSERT_TRUE(c.ApplyOverride(std::string("data.sampler=") + sampler).ok());
    ASSERT_TRUE(c.ApplyOverride("data.shard_plan=" + root + "/none.json").ok());
    auto s = LoadAndTrain(c);
    ASSERT_TRUE(s.ok()) << sampler << ": " << s.status().ToString();
    EXPECT_EQ(s->steps, 3 * ((3000 + 63) / 64)) << sampler;
    EXPECT_GT(s->final_val_acc, 0.5) << sampler;
  }
}

TEST(LocalTrainerTest, SameSeedGivesTheSameRun) {
  std::string root = TempRoot();
  Config c = SmallSynthetic(root);
  ASSERT_TRUE(c.ApplyOverride("train.epochs=1").ok());
  auto data = LoadDatasetFromConfig(c);
  ASSERT_TRUE(data.ok());
  auto d1 = RunDirectory::Create(c);
  auto d2 = RunDirectory::Create(c);
  ASSERT_TRUE(d1.ok() && d2.ok());
  EXPECT_NE(d1->path(), d2->path());  // a taken name gets a suffix
  auto a = TrainLocal(c, *data, *d1, nullptr);
  auto b = TrainLocal(c, *data, *d2, nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_DOUBLE_EQ(a->final_train_loss, b->final_train_loss);
  EXPECT_DOUBLE_EQ(a->final_val_acc, b->final_val_acc);
}

TEST(LocalTrainerTest, StopFlagEndsEarlyAndKeepsWhatWasWritten) {
  std::string root = TempRoot();
  Config c = SmallSynthetic(root);
  ASSERT_TRUE(c.ApplyOverride("train.epochs=50").ok());
  auto data = LoadDatasetFromConfig(c);
  ASSERT_TRUE(data.ok());
  auto dir = RunDirectory::Create(c);
  ASSERT_TRUE(dir.ok());
  std::atomic<bool> stop{true};  // as if Ctrl-C came before the first step
  auto s = TrainLocal(c, *data, *dir, &stop);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->interrupted);
  EXPECT_EQ(s->steps, 0);
  auto summary = nlohmann::json::parse(*ReadFile(dir->File("summary.json")));
  EXPECT_TRUE(summary["interrupted"].get<bool>());
  EXPECT_EQ(ReadJsonLines(dir->File("eval.jsonl")).size(), 2u);
}

TEST(LocalTrainerTest, ConvModelOnFlatDataIsAClearError) {
  std::string root = TempRoot();
  Config c = SmallSynthetic(root);
  ASSERT_TRUE(c.ApplyOverride("model.name=lenet").ok());
  auto s = LoadAndTrain(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("lenet"), std::string::npos);
}

TEST(LocalTrainerTest, MissingDataDirIsNamed) {
  Config c;
  ASSERT_TRUE(c.ApplyOverride("data.dataset=mnist").ok());
  auto data = LoadDatasetFromConfig(c);
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find("data.dir"), std::string::npos);
}

// Real MNIST (STRATA_DATA_DIR): one epoch of the MLP clears 95%.
TEST(LocalTrainerRealDataTest, MlpOneEpochOnMnist) {
  const char* dd = std::getenv("STRATA_DATA_DIR");
  if (dd == nullptr)
    GTEST_SKIP() << "STRATA_DATA_DIR not set: skipping real-MNIST training";
  std::string root = TempRoot();
  Config c;
  ASSERT_TRUE(c.ApplyOverride("run.dir=" + root).ok());
  ASSERT_TRUE(c.ApplyOverride("data.dataset=mnist").ok());
  ASSERT_TRUE(c.ApplyOverride(std::string("data.dir=") + dd + "/mnist").ok());
  ASSERT_TRUE(c.ApplyOverride("train.epochs=1").ok());
  auto s = LoadAndTrain(c);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_GT(s->final_val_acc, 0.95);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// After recalibration on a set of examples given as one batch, each
// BatchNorm layer's running statistics are that batch's statistics, so the
// model in evaluation mode computes what it computes in training mode on
// that batch (up to the unbiased/biased variance factor). Before, with the
// statistics at their initial values, the two differ.
TEST(RecalibrateBatchNormTest, RunningStatisticsBecomeTheDataStatistics) {
  Dataset data;
  data.channels = 3;
  data.height = 32;
  data.width = 32;
  data.num_classes = 10;
  const int64_t n = 64;
  data.features.resize(static_cast<size_t>(n * 3 * 32 * 32));
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(2.0f, 3.0f);  // far from N(0, 1)
  for (float& f : data.features) f = noise(rng);
  data.labels.assign(n, 0);
  auto model =
      CreateModel(ModelOptions{"resnet20", 16, 7, ""}, InputSpecOf(data));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto& net = *model->net;
  torch::NoGradGuard no_grad;
  auto x =
      torch::from_blob(data.features.data(), {n, 3, 32, 32}, torch::kFloat32);
  net.train();
  const torch::Tensor train_mode = net.forward(x).clone();
  net.eval();
  const double before =
      (net.forward(x) - train_mode).abs().max().item<double>();
  auto done = RecalibrateBatchNorm(net, data, n, n);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(*done);
  net.eval();
  const double after = (net.forward(x) - train_mode).abs().max().item<double>();
  EXPECT_GT(before, 0.1);
  EXPECT_LT(after, 1e-2 * std::max(1.0, train_mode.abs().max().item<double>()));
  // A model without BatchNorm is left alone.
  Dataset flat = data;
  auto mlp = CreateModel(ModelOptions{"mlp", 16, 7, ""}, InputSpecOf(flat));
  ASSERT_TRUE(mlp.ok());
  auto none = RecalibrateBatchNorm(*mlp->net, flat, n, n);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);
}

// A gate whose wait fails (cluster.layer_wait: a server lost while its
// range was still arriving) stops the forward pass, and the step returns
// that error, not a crash or a LibTorch error.
TEST(ForwardBackwardTest, AFailedWaitForParametersIsTheStepsError) {
  auto model = CreateModel(ModelOptions{"mlp", 16, 7, ""}, {1, 1, 16, 10});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Batch batch;
  batch.inputs = torch::randn({8, 16});
  batch.targets = torch::zeros({8}, torch::kLong);
  int calls = 0;
  model->net->set_param_gate(PrefixGate(*model, [&](int64_t end) {
    if (++calls == 2) {
      throw ParamWaitError(Status::Unavailable(
          "worker 0 pull at iteration 3: server 1 lost (end {})", end));
    }
  }));
  auto step = ForwardBackward(*model->net, batch);
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(step.status().message().find("server 1 lost"), std::string::npos)
      << step.status().ToString();
  EXPECT_EQ(calls, 2);  // fc1 asked, fc2's wait failed; no backward pass
  EXPECT_EQ(model->flat.grads().abs().sum().item<float>(), 0.0f);
}

}  // namespace
}  // namespace strata

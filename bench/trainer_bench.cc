// Trainer throughput: strata's single-process trainer against a minimal plain
// LibTorch loop (same architecture, batch, thread count, data), measured
// alternately in one run. Prints the median samples/s of each and the ratio.
//
//   build/bench/trainer_bench [--reps 5] [--threads N]
// Uses real MNIST when STRATA_DATA_DIR is set, else synthetic 1x28x28 data.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/fs.h"
#include "common/log.h"
#include "data/load.h"
#include "run/run_dir.h"
#include "worker/local_trainer.h"

namespace {

using namespace strata;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The same architectures as src/models, written the plain way.
torch::nn::Sequential PlainModel(const std::string& name, int64_t hidden) {
  namespace nn = torch::nn;
  if (name == "mlp") {
    return nn::Sequential(nn::Flatten(), nn::Linear(784, hidden), nn::ReLU(),
                          nn::Linear(hidden, 10));
  }
  return nn::Sequential(
      nn::Conv2d(nn::Conv2dOptions(1, 6, 5)), nn::ReLU(), nn::MaxPool2d(2),
      nn::Conv2d(nn::Conv2dOptions(6, 16, 5)), nn::ReLU(), nn::MaxPool2d(2),
      nn::Flatten(), nn::Linear(256, 120), nn::ReLU(), nn::Linear(120, 84),
      nn::ReLU(), nn::Linear(84, 10));
}

// Plain loop: a random permutation per epoch, index_select for the batch,
// forward, cross entropy, backward, torch::optim::SGD. Returns samples/s
// over the training steps only (as strata's samples_per_s is).
double PlainSamplesPerSecond(const Dataset& d, const std::string& model_name,
                             int64_t hidden, int64_t batch, int64_t steps) {
  torch::manual_seed(1);
  auto model = PlainModel(model_name, hidden);
  torch::optim::SGD opt(model->parameters(),
                        torch::optim::SGDOptions(0.05).momentum(0.9));
  auto x_all = torch::from_blob(const_cast<float*>(d.features.data()),
                                {d.size(), d.channels, d.height, d.width});
  auto y_all = torch::from_blob(const_cast<int64_t*>(d.labels.data()),
                                {d.size()}, torch::kInt64);
  auto perm = torch::randperm(d.size(), torch::kInt64);
  int64_t pos = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    if (pos + batch > d.size()) {
      perm = torch::randperm(d.size(), torch::kInt64);
      pos = 0;
    }
    auto idx = perm.narrow(0, pos, batch);
    pos += batch;
    auto x = x_all.index_select(0, idx);
    auto y = y_all.index_select(0, idx);
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    (void)loss.item<float>();  // the trainer reads the loss every step too
  }
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  return steps * batch / secs;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int reps = 5;
  int threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
  }
  SetLogLevel(LogLevel::kWarning);
  torch::set_num_threads(threads);
  const char* dd = std::getenv("STRATA_DATA_DIR");
  Config base;
  char tmpl[] = "/tmp/strata_trainer_bench_XXXXXX";
  std::string root = ::mkdtemp(tmpl);
  (void)base.ApplyOverride("run.dir=" + root);
  (void)base.ApplyOverride("train.threads=" + std::to_string(threads));
  (void)base.ApplyOverride("train.eval_batch_size=2000");
  if (dd != nullptr) {
    (void)base.ApplyOverride("data.dataset=mnist");
    (void)base.ApplyOverride(std::string("data.dir=") + dd + "/mnist");
  } else {
    (void)base.ApplyOverride("data.synthetic.shape=1x28x28");
    (void)base.ApplyOverride("data.synthetic.train_size=20000");
    (void)base.ApplyOverride("data.synthetic.val_size=1000");
  }
  auto data = LoadDatasetFromConfig(base);
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", data.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "trainer_bench: data %s (%lld train), threads %d, reps %d, batch 64\n",
      data->train.name.c_str(), static_cast<long long>(data->train.size()),
      threads, reps);
  std::printf("%-6s %8s %14s %14s %8s\n", "model", "steps", "strata smp/s",
              "plain smp/s", "ratio");
  struct Case {
    std::string model;
    int64_t steps;
  };
  for (const Case& c : {Case{"mlp", 1500}, Case{"lenet", 400}}) {
    Config cfg = base;
    (void)cfg.ApplyOverride("model.name=" + c.model);
    (void)cfg.ApplyOverride("train.iterations=" + std::to_string(c.steps));
    (void)cfg.ApplyOverride("train.eval_every=1000000000");
    std::vector<double> ours, plain, ratios;
    for (int r = 0; r < reps; ++r) {
      auto dir = RunDirectory::Create(cfg);
      auto s = TrainLocal(cfg, *data, *dir, nullptr);
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
        return 1;
      }
      double p = PlainSamplesPerSecond(data->train, c.model, 256, 64, c.steps);
      ours.push_back(s->samples_per_s);
      plain.push_back(p);
      ratios.push_back(s->samples_per_s / p);
    }
    std::printf("%-6s %8lld %14.0f %14.0f %8.3f\n", c.model.c_str(),
                static_cast<long long>(c.steps), Median(ours), Median(plain),
                Median(ratios));
  }
  std::printf(
      "(ratio = median over reps of strata/plain, each pair measured back to "
      "back)\n");
  return 0;
}

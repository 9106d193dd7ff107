// Checkpoint cost (issue 12): time to write a local trainer's checkpoint
// (encode, write every file with fsync, rename) and to load it (read,
// check every MD5, decode, restore), for the MNIST mlp and resnet56 on
// CIFAR-shaped input, SGD with momentum (so the optimizer state is as large
// as the model). Baseline beside it: writing the same bytes with one plain
// write() and no fsync. Prints medians of `reps` (default 7), and the
// training slowdown a checkpoint every 60 s implies.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "common/fs.h"
#include "run/checkpoint.h"
#include "worker/local_trainer.h"

using namespace strata;
using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 7;
  char tmpl[] = "/tmp/strata_ckpt_bench_XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  struct Case {
    const char* name;
    std::vector<std::string> set;
    InputSpec input;
  };
  const Case cases[] = {
      {"mlp (MNIST)", {"model.name=mlp"}, {1, 28, 28, 10}},
      {"resnet56 (CIFAR)", {"model.name=resnet56"}, {3, 32, 32, 10}}};
  std::printf("%-18s %10s %10s %10s %10s %10s %12s\n", "model", "params", "MB",
              "write_ms", "load_ms", "plain_ms", "slowdown@60s");
  for (const Case& c : cases) {
    Config config;
    for (const auto& kv : c.set) (void)config.ApplyOverride(kv);
    (void)config.ApplyOverride("train.momentum=0.9");
    auto model = CreateModel(ModelOptions::FromConfig(config), c.input);
    if (!model.ok()) {
      std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
      return 1;
    }
    auto optimizer =
        MakeOptimizer(OptimizerOptions::FromConfig(config), model->flat.size());
    std::vector<float> grads(static_cast<size_t>(model->flat.size()), 1e-3f);
    optimizer->Step(model->flat.param_data(), grads.data(), 0.01);
    std::vector<int64_t> all(60000);
    std::iota(all.begin(), all.end(), 0);
    std::vector<int64_t> labels(60000);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = i % 10;
    auto sampler = MakeBatchSampler("shuffle", all, labels, {}, 1, true, 1.0);
    Dataset shape;
    shape.channels = c.input.channels;
    shape.height = c.input.height;
    shape.width = c.input.width;
    shape.num_classes = c.input.num_classes;
    Batcher batcher(shape, false, 1);
    const std::string run = root + "/" + std::to_string(model->flat.size());
    (void)MakeDirs(run);
    std::vector<double> write_ms, load_ms, plain_ms;
    size_t bytes = 0;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      auto files = LocalCheckpointFiles(config, *model, optimizer->SaveState(),
                                        **sampler, batcher, {{"step", r + 1}});
      auto dir = WriteCheckpoint(run, r + 1, *files, 2);
      auto t1 = Clock::now();
      if (!dir.ok()) {
        std::fprintf(stderr, "%s\n", dir.status().ToString().c_str());
        return 1;
      }
      bytes = 0;
      for (const auto& [n, b] : *files) bytes += b.size();
      auto loaded = LoadNewestCheckpoint(run);
      OptimizerState os;
      auto restored =
          RestoreLocalCheckpoint(*loaded, *model, &os, **sampler, batcher);
      Status taken =
          restored.ok() ? optimizer->RestoreState(os) : restored.status();
      auto t2 = Clock::now();
      if (!taken.ok()) {
        std::fprintf(stderr, "%s\n", taken.ToString().c_str());
        return 1;
      }
      // Baseline: the same bytes in one file, no fsync, no checksums.
      std::string all_bytes;
      for (const auto& [n, b] : *files) all_bytes += b;
      auto t3 = Clock::now();
      (void)WriteFileAtomic(run + "/plain.bin", all_bytes);
      auto t4 = Clock::now();
      write_ms.push_back(
          std::chrono::duration<double, std::milli>(t1 - t0).count());
      load_ms.push_back(
          std::chrono::duration<double, std::milli>(t2 - t1).count());
      plain_ms.push_back(
          std::chrono::duration<double, std::milli>(t4 - t3).count());
    }
    const double w = Median(write_ms);
    std::printf("%-18s %10lld %10.2f %10.1f %10.1f %10.1f %11.3f%%\n", c.name,
                static_cast<long long>(model->flat.size()), bytes / 1048576.0,
                w, Median(load_ms), Median(plain_ms), 100.0 * w / 60000.0);
  }
  std::system(("rm -rf " + root).c_str());
  return 0;
}

#pragma once

// The small fixed-order problem and helpers shared by the cluster and the
// decentralized tests (the sync-equals-single-process oracle and its kin).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/fs.h"
#include "data/load.h"
#include "launch/threads.h"
#include "worker/local_trainer.h"

namespace strata {
namespace testing_util {

inline std::string TempRoot() {
  std::string dir = "/tmp/strata_cluster_test_XXXXXX";
  char* made = ::mkdtemp(dir.data());
  EXPECT_NE(made, nullptr);
  return dir;
}

// A small problem with a fixed data order: 512 examples, 32 x 20 steps,
// single-process (cluster.mode = local) until a test overrides the mode.
inline Config Base(const std::string& root) {
  Config c;
  for (const char* kv :
       {"data.synthetic.train_size=512", "data.synthetic.val_size=128",
        "data.synthetic.dim=16", "data.shuffle=false", "model.hidden=16",
        "train.batch_size=32", "train.iterations=20", "train.lr=0.1",
        "train.momentum=0.9", "train.threads=1", "cluster.threads_per_worker=1",
        "cluster.servers=2", "eval.every_s=100", "cluster.mode=local"}) {
    EXPECT_TRUE(c.ApplyOverride(kv).ok()) << kv;
  }
  EXPECT_TRUE(c.ApplyOverride("run.dir=" + root).ok());
  return c;
}

// `c` with the overrides applied, in order.
inline Config With(Config c, std::initializer_list<std::string> kvs) {
  for (const std::string& kv : kvs) EXPECT_TRUE(c.ApplyOverride(kv).ok()) << kv;
  return c;
}

inline Result<RunSummary> RunConfig(const Config& c) {
  ASSIGN_OR_RETURN(DatasetSplits data, LoadDatasetFromConfig(c));
  ASSIGN_OR_RETURN(RunDirectory dir, RunDirectory::Create(c));
  if (c.GetString("cluster.mode") == "local")
    return TrainLocal(c, data, dir, nullptr);
  return TrainCluster(c, data, dir, nullptr);
}

// Resumes the cluster run in `run_dir` with `c` (checkpoint.resume is set
// here), as threads.
inline Result<RunSummary> ResumeCluster(const Config& c,
                                        const std::string& run_dir) {
  ASSIGN_OR_RETURN(DatasetSplits data, LoadDatasetFromConfig(c));
  ASSIGN_OR_RETURN(RunDirectory dir, RunDirectory::Open(run_dir));
  return TrainCluster(With(c, {"checkpoint.resume=true"}), data, dir, nullptr);
}

// The run directory under `root` written last (a run's summary.json is
// among its last files).
inline std::string NewestRunDir(const std::string& root) {
  std::string newest;
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    if (newest.empty() || std::filesystem::last_write_time(e) >
                              std::filesystem::last_write_time(newest))
      newest = e.path().string();
  }
  return newest;
}

// Every line of served.jsonl (full ids), grouped by epoch: example -> times.
inline std::map<int64_t, std::map<int64_t, int>> ServedCounts(
    const std::string& run_dir) {
  std::map<int64_t, std::map<int64_t, int>> counts;
  auto text = ReadFile(run_dir + "/served.jsonl");
  EXPECT_TRUE(text.ok()) << run_dir;
  if (!text.ok()) return counts;
  size_t start = 0;
  while (start < text->size()) {
    size_t end = text->find('\n', start);
    if (end == std::string::npos) end = text->size();
    auto j = nlohmann::json::parse(text->substr(start, end - start));
    for (int64_t id : j["ids"].get<std::vector<int64_t>>())
      ++counts[j["epoch"].get<int64_t>()][id];
    start = end + 1;
  }
  return counts;
}

inline double MaxAbsDiff(const std::vector<float>& a,
                         const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

}  // namespace testing_util
}  // namespace strata

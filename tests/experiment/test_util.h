#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "common/fs.h"
#include "experiment/spec.h"

namespace strata::testing_util {

// A fresh directory under $STRATA_TEST_TMP (or /tmp), unique per test.
inline std::string FreshDir(const std::string& name) {
  const char* root = std::getenv("STRATA_TEST_TMP");
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = JoinPath(
      root != nullptr ? root : "/tmp",
      "experiment_" + std::string(info->test_suite_name()) + "_" +
          info->name() + "_" + name + "_" + std::to_string(::getpid()));
  std::string cmd = "rm -rf '" + dir + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_TRUE(MakeDirs(dir).ok());
  return dir;
}

// The [base] and [grid] of the tiny experiment several tests run: a 2-worker,
// 1-server cluster on small synthetic data, sync against async, with
// `iterations` per worker; `extra` adds lines to [base].
inline std::string TinyTwoModeBody(int iterations,
                                   const std::string& extra = "") {
  return R"(
[base]
data.synthetic.train_size = 600
data.synthetic.val_size = 200
data.synthetic.dim = 8
model.hidden = 8
train.iterations = )" +
         std::to_string(iterations) + R"(
train.batch_size = 16
train.threads = 1
cluster.workers = 2
cluster.servers = 1
)" + extra +
         R"([grid]
cluster.mode = ["sync", "async"]
)";
}

// Writes what a finished (or interrupted) run leaves: config.toml as the
// runner expects it, summary.json with the given final metrics.
inline void WriteFakeRun(const ExperimentSpec& spec, const PlannedRun& run,
                         const std::string& output, nlohmann::json summary) {
  const std::string dir = JoinPath(JoinPath(output, "runs"), run.name);
  ASSERT_TRUE(MakeDirs(dir).ok());
  auto config = spec.CellConfig(run.cell);
  ASSERT_TRUE(config.ok());
  ASSERT_TRUE(config->SetFromString("run.dir", JoinPath(output, "runs")).ok());
  ASSERT_TRUE(config->SetFromString("run.name", run.name).ok());
  ASSERT_TRUE(config->Set("run.seed", run.seed).ok());
  ASSERT_TRUE(config->WriteToml(JoinPath(dir, "config.toml")).ok());
  if (!summary.contains("interrupted")) summary["interrupted"] = false;
  ASSERT_TRUE(
      WriteFileAtomic(JoinPath(dir, "summary.json"), summary.dump()).ok());
}

// One eval.jsonl line at `step`.
inline std::string EvalLine(int step) {
  return nlohmann::json{{"step", step},
                        {"val_loss", 2.0 - step / 100.0},
                        {"val_acc", step / 200.0}}
      .dump();
}

// A run directory as `strata train` leaves it part-way (no summary.json):
// config.toml, four metrics lines and `evals` evaluations; with
// `cut_last_line`, eval.jsonl ends in a line cut half-way (as a reader may
// see it between two writes).
inline std::string RunningRunDir(const std::string& root, int evals,
                                 bool cut_last_line = false) {
  const std::string dir = JoinPath(root, "run");
  EXPECT_TRUE(MakeDirs(dir).ok());
  EXPECT_TRUE(WriteFileAtomic(JoinPath(dir, "config.toml"), "").ok());
  std::string metrics, eval;
  for (int step = 5; step <= 20; step += 5)
    metrics += nlohmann::json{{"worker", 0},
                              {"step", step},
                              {"train_loss", 2.0 - step / 50.0},
                              {"train_acc", step / 40.0}}
                   .dump() +
               "\n";
  for (int i = 0; i < evals; ++i) eval += EvalLine(10 * i) + "\n";
  if (cut_last_line) eval += "{\"step\": 99, \"val_lo";
  EXPECT_TRUE(WriteFileAtomic(JoinPath(dir, "metrics.jsonl"), metrics).ok());
  EXPECT_TRUE(WriteFileAtomic(JoinPath(dir, "eval.jsonl"), eval).ok());
  return dir;
}

}  // namespace strata::testing_util

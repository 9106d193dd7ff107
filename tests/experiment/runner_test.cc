#include "experiment/runner.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "common/fs.h"
#include "experiment/experiment.h"
#include "experiment/results.h"
#include "test_util.h"

namespace strata {
namespace {

using testing_util::FreshDir;
using testing_util::TinyTwoModeBody;
using testing_util::WriteFakeRun;

bool IsDir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

ExperimentSpec TwoCells(int repeats) {
  auto spec =
      ExperimentSpec::FromString("repeats = " + std::to_string(repeats) +
                                     TinyTwoModeBody(20,
                                                     "train.log_every = 5\n"
                                                     "eval.every_s = 0.05\n"),
                                 "two.toml", ".");
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return *spec;
}

RunnerOptions Options(const std::string& out, const std::string& exe) {
  RunnerOptions o;
  o.exe = exe;
  o.output = out;
  o.base_config = JoinPath(out, "base.toml");
  o.print_progress = false;
  o.stop_grace_s = 20;
  return o;
}

TEST(RunnerTest, InspectRunDir) {
  const std::string dir = FreshDir("inspect");
  EXPECT_EQ(InspectRunDir(JoinPath(dir, "nope")), RunDirState::kMissing);
  EXPECT_EQ(InspectRunDir(dir), RunDirState::kPartial);  // no summary yet
  const std::string s = JoinPath(dir, "summary.json");
  ASSERT_TRUE(WriteFileAtomic(s, R"({"interrupted": true})").ok());
  EXPECT_EQ(InspectRunDir(dir), RunDirState::kPartial);
  ASSERT_TRUE(
      WriteFileAtomic(s, R"({"interrupted": false, "error": "lost worker 1"})")
          .ok());
  EXPECT_EQ(InspectRunDir(dir), RunDirState::kPartial);
  ASSERT_TRUE(WriteFileAtomic(s, R"({"interrupted": fal)").ok());
  EXPECT_EQ(InspectRunDir(dir), RunDirState::kPartial);
  ASSERT_TRUE(WriteFileAtomic(s, R"({"interrupted": false})").ok());
  EXPECT_EQ(InspectRunDir(dir), RunDirState::kComplete);
}

TEST(RunnerTest, CommandLine) {
  ExperimentSpec spec = TwoCells(1);
  auto args = RunCommand(spec, spec.runs[1], Options("out", "/bin/strata"));
  const std::vector<std::string> want = {
      "/bin/strata", "train",
      "-c",          "out/base.toml",
      "--set",       "cluster.mode=async",
      "--set",       "run.dir=out/runs",
      "--set",       "run.name=mode-async_r1",
      "--set",       "run.seed=1"};
  EXPECT_EQ(args, want);
}

// Resume without training anything: /bin/false stands in for strata, so a
// run that is started fails, and one that is skipped never starts.
TEST(RunnerTest, CompleteRunsAreSkippedOthersRunAgain) {
  const std::string out = FreshDir("resume");
  ExperimentSpec spec = TwoCells(2);
  // runs: mode-sync_r1, mode-async_r1, mode-sync_r2, mode-async_r2
  WriteFakeRun(spec, spec.runs[0], out, {{"final_val_acc", 0.5}});
  WriteFakeRun(spec, spec.runs[1], out,
               {{"final_val_acc", 0.5}, {"interrupted", true}});
  // Complete, but made with other settings than the plan asks for.
  ExperimentSpec other = spec;
  other.cells[0].overrides.push_back({"train.lr", "0.5"});
  WriteFakeRun(other, spec.runs[2], out, {{"final_val_acc", 0.5}});

  auto outcomes = RunPlannedRuns(spec, Options(out, "/bin/false"));
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().message();
  ASSERT_EQ(outcomes->size(), 4u);
  EXPECT_EQ((*outcomes)[0].state, "skipped");
  EXPECT_EQ((*outcomes)[1].state, "failed");  // re-run (and /bin/false fails)
  EXPECT_EQ((*outcomes)[1].exit_code, 1);
  EXPECT_EQ((*outcomes)[2].state, "failed");  // outdated: re-run
  EXPECT_EQ((*outcomes)[3].state, "failed");  // missing: run
  // The skipped run is untouched; the others were moved aside, not deleted.
  EXPECT_EQ(InspectRunDir(JoinPath(out, "runs/mode-sync_r1")),
            RunDirState::kComplete);
  EXPECT_TRUE(IsDir(JoinPath(out, "stale/mode-async_r1-1")));
  EXPECT_TRUE(IsDir(JoinPath(out, "stale/mode-sync_r2-1")));
  EXPECT_FALSE(IsDir(JoinPath(out, "runs/mode-async_r1")));
  EXPECT_TRUE(FileExists(JoinPath(out, "logs/mode-async_r1.log")));
}

TEST(RunnerTest, RunOverTheTimeoutIsStopped) {
  const std::string out = FreshDir("timeout");
  const std::string exe = JoinPath(out, "slow.sh");
  {
    std::ofstream f(exe);
    f << "#!/bin/sh\nsleep 30\n";
  }
  ASSERT_EQ(::chmod(exe.c_str(), 0755), 0);
  ExperimentSpec spec = TwoCells(1);
  spec.runs.resize(1);
  RunnerOptions o = Options(out, exe);
  o.run_timeout_s = 0.5;
  const auto t0 = std::chrono::steady_clock::now();
  auto outcomes = RunPlannedRuns(spec, o);
  ASSERT_TRUE(outcomes.ok());
  EXPECT_EQ((*outcomes)[0].state, "timeout");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                .count(),
            10.0);
}

#ifdef STRATA_BINARY
// End to end with the real binary: tiny synthetic cluster runs.
TEST(RunnerTest, RealRunsThenResumeRerunsOnlyWhatIsMissing) {
  const std::string out = FreshDir("real");
  ExperimentSpec spec = TwoCells(2);
  ASSERT_TRUE(spec.base.WriteToml(JoinPath(out, "base.toml")).ok());
  auto plan = PlanJson(spec);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(out, "plan.json"), plan->dump()).ok());
  auto first = RunPlannedRuns(spec, Options(out, STRATA_BINARY));
  ASSERT_TRUE(first.ok()) << first.status().message();
  for (const auto& o : *first) {
    EXPECT_EQ(o.state, "done") << o.name << " log " << o.log;
    EXPECT_EQ(o.log, JoinPath(JoinPath(out, "runs"), o.name + "/train.log"));
    EXPECT_TRUE(FileExists(o.log));
  }
  // The runs used the cell's settings and the planned seed.
  auto cfg =
      Config::FromTomlFile(JoinPath(out, "runs/mode-async_r2/config.toml"));
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(cfg->GetString("cluster.mode"), "async");
  EXPECT_EQ(cfg->GetInt("run.seed"), 2);

  // Break one run (interrupted) and remove another; keep a fingerprint of a
  // finished one.
  const std::string kept = JoinPath(out, "runs/mode-sync_r1/summary.json");
  auto before = ReadFile(kept);
  ASSERT_TRUE(before.ok());
  const std::string broken = JoinPath(out, "runs/mode-async_r1/summary.json");
  ASSERT_TRUE(WriteFileAtomic(broken, R"({"interrupted": true})").ok());
  ASSERT_EQ(
      std::system(
          ("rm -rf '" + JoinPath(out, "runs/mode-sync_r2") + "'").c_str()),
      0);

  auto second = RunPlannedRuns(spec, Options(out, STRATA_BINARY));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)[0].state, "skipped");
  EXPECT_EQ((*second)[1].state, "done");
  EXPECT_EQ((*second)[2].state, "done");
  EXPECT_EQ((*second)[3].state, "skipped");
  EXPECT_EQ(*ReadFile(kept), *before);
  EXPECT_EQ(InspectRunDir(JoinPath(out, "runs/mode-async_r1")),
            RunDirState::kComplete);
  EXPECT_TRUE(IsDir(JoinPath(out, "stale/mode-async_r1-1")));

  auto data = LoadExperiment(out);
  ASSERT_TRUE(data.ok());
  nlohmann::json s = Summarize(*data);
  EXPECT_TRUE(s["complete"].get<bool>());
  for (const auto& c : s["cells"]) {
    EXPECT_EQ(c["runs_complete"], 2);
    EXPECT_GT(c["metrics"]["final_val_acc"]["mean"].get<double>(), 0.0);
    EXPECT_TRUE(c["metrics"]["final_val_acc"]["variance"].is_number());
  }
}

// Ctrl-C: the running child gets one SIGINT, writes an interrupted summary
// and exits 130; nothing else starts; the next pass re-runs it.
TEST(RunnerTest, StopInterruptsAndResumeFinishes) {
  const std::string out = FreshDir("stop");
  auto spec = ExperimentSpec::FromString(R"(
repeats = 2
[base]
cluster.mode = "local"
data.synthetic.train_size = 2000
data.synthetic.val_size = 200
data.synthetic.dim = 16
model.hidden = 16
train.iterations = 3000
train.batch_size = 16
train.threads = 1
cluster.worker_delay_ms = 0
)",
                                         "stop.toml", ".");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ASSERT_TRUE(spec->base.WriteToml(JoinPath(out, "base.toml")).ok());
  // Slow the run down enough to be caught in the middle: many evaluations
  // and 3000 iterations (with 400 a run sometimes ended, in about 0.5 s,
  // before the stop reached it).
  spec->base = *Config::FromTomlFile(JoinPath(out, "base.toml"));
  ASSERT_TRUE(spec->base.SetFromString("train.eval_every", "1").ok());
  ASSERT_TRUE(spec->base.WriteToml(JoinPath(out, "base.toml")).ok());

  std::atomic<bool> stop{false};
  RunnerOptions o = Options(out, STRATA_BINARY);
  o.stop = &stop;
  std::thread stopper([&]() {
    // Wait until the first run has started writing, then press "Ctrl-C".
    const std::string m = JoinPath(out, "runs/base_r1/metrics.jsonl");
    for (int i = 0; i < 300 && !FileExists(m); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    stop = true;
  });
  auto first = RunPlannedRuns(spec.value(), o);
  stopper.join();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)[0].state, "interrupted");
  EXPECT_EQ((*first)[0].exit_code, 130);
  EXPECT_EQ((*first)[1].state, "pending");
  EXPECT_EQ(InspectRunDir(JoinPath(out, "runs/base_r1")),
            RunDirState::kPartial);
  EXPECT_FALSE(IsDir(JoinPath(out, "runs/base_r2")));

  stop = false;
  auto second = RunPlannedRuns(spec.value(), o);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)[0].state, "done");
  EXPECT_EQ((*second)[1].state, "done");
  EXPECT_TRUE(IsDir(JoinPath(out, "stale/base_r1-1")));
}

// The whole command: experiment file in, summary, CSV and report out.
TEST(ExperimentTest, RunExperimentWritesEverything) {
  const std::string dir = FreshDir("cmd");
  const std::string file = JoinPath(dir, "exp.toml");
  ASSERT_TRUE(WriteFileAtomic(file, "output = \"" + JoinPath(dir, "out") + R"("
repeats = 2
baseline = "cluster.mode=async")" + TinyTwoModeBody(10))
                  .ok());
  ExperimentOptions o;
  o.spec_path = file;
  o.exe = STRATA_BINARY;
  auto code = RunExperiment(o);
  ASSERT_TRUE(code.ok()) << code.status().message();
  EXPECT_EQ(*code, 0);
  const std::string out = JoinPath(dir, "out");
  for (const char* f : {"plan.json", "base.toml", "experiment.toml",
                        "summary.json", "summary.csv", "report.html"})
    EXPECT_TRUE(FileExists(JoinPath(out, f))) << f;
  auto s = nlohmann::json::parse(*ReadFile(JoinPath(out, "summary.json")));
  EXPECT_EQ(s["baseline"], "mode-async");
  EXPECT_EQ(s["cells"][1]["is_baseline"], true);
  // Second pass: nothing to do, same answer.
  auto again = RunExperiment(o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
  auto s2 = nlohmann::json::parse(*ReadFile(JoinPath(out, "summary.json")));
  EXPECT_EQ(s2["cells"], s["cells"]);
  for (const auto& r : s2["runs"]) EXPECT_EQ(r["outcome"], "skipped");
}
#endif

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Runs at once only where nothing they report depends on the machine being
// theirs alone (docs/guide/experiments.md, "Runs at once").
TEST(ParallelPolicyTest, HazardsAreNamedPerCell) {
  auto spec = ExperimentSpec::FromString(R"(
[grid]
cluster.mode = ["sync", "allreduce", "async"]
)",
                                         "p.toml", ".");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  const auto h = spec->ParallelHazards();
  ASSERT_EQ(h.size(), 1u);
  EXPECT_NE(h[0].find("cell 'mode-async'"), std::string::npos) << h[0];
  auto lockstep = ExperimentSpec::FromString(R"(
[grid]
cluster.mode = ["sync", "allreduce"]
)",
                                             "p.toml", ".");
  ASSERT_TRUE(lockstep.ok());
  EXPECT_TRUE(lockstep->ParallelHazards().empty());
  auto emulated = ExperimentSpec::FromString(R"(
target_accuracy = 0.9
[base]
cluster.mode = "sync"
net.worker_server.latency_ms = 2
workers.speed = "1,1,1,0.25"
cluster.updates_per_step = 3
)",
                                             "p.toml", ".");
  ASSERT_TRUE(emulated.ok()) << emulated.status().message();
  const auto e = emulated->ParallelHazards();
  ASSERT_EQ(e.size(), 4u);
  EXPECT_NE(e[0].find("target_accuracy"), std::string::npos);
  EXPECT_NE(e[1].find("k of n"), std::string::npos);
  EXPECT_NE(e[2].find("net.*"), std::string::npos);
  EXPECT_NE(e[3].find("workers.*"), std::string::npos);
  auto bad = ExperimentSpec::FromString("parallel_policy = \"loose\"\n",
                                        "p.toml", ".");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("parallel_policy"), std::string::npos);
}

TEST(ParallelPolicyTest, RunsAtOnceAreRefusedUnlessShared) {
  const std::string dir = testing_util::FreshDir("parallel");
  const std::string file = JoinPath(dir, "exp.toml");
  ASSERT_TRUE(WriteFileAtomic(file, "output = \"" + JoinPath(dir, "out") +
                                        "\"\n" +
                                        testing_util::TinyTwoModeBody(10))
                  .ok());
  ExperimentOptions o;
  o.spec_path = file;
  o.exe = STRATA_BINARY;
  o.parallel = 2;
  auto refused = RunExperiment(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("cell 'mode-async'"),
            std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("parallel_policy"),
            std::string::npos);
  EXPECT_FALSE(FileExists(JoinPath(dir, "out/plan.json")));  // nothing ran
  ASSERT_TRUE(WriteFileAtomic(file, "output = \"" + JoinPath(dir, "out") +
                                        "\"\nparallel_policy = \"shared\"\n" +
                                        testing_util::TinyTwoModeBody(10))
                  .ok());
  auto code = RunExperiment(o);
  ASSERT_TRUE(code.ok()) << code.status().message();
  EXPECT_EQ(*code, 0);
  auto s = nlohmann::json::parse(*ReadFile(JoinPath(dir, "out/summary.json")));
  EXPECT_NE(s["notes"]["times"].get<std::string>().find("2 runs ran at once"),
            std::string::npos);
}

}  // namespace
}  // namespace strata

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/fs.h"
#include "common/own_thread.h"
#include "data/load.h"
#include "exchange/bucket_reducer.h"
#include "launch/cluster_test_util.h"
#include "launch/threads.h"
#include "models/models.h"
#include "run/run_facts.h"
#include "sharding/methods.h"
#include "sharding/plan.h"
#include "thread_util.h"
#include "transport/rpc.h"
#include "transport/spin_wait.h"
#include "transport/ucx/transport.h"
#include "worker/batch.h"
#include "worker/local_trainer.h"
#include "worker/plan_probe.h"

namespace strata {
namespace {

using testing_util::Base;
using testing_util::MaxAbsDiff;
using testing_util::ProcessThreadNames;
using testing_util::ProcessThreads;
using testing_util::ProcessThreadsSettlingAt;
using testing_util::RunConfig;
using testing_util::TempRoot;
using testing_util::With;

struct EqCase {
  std::string transport;
  int workers;
};
void PrintTo(const EqCase& c, std::ostream* os) {
  *os << c.transport << "_" << c.workers;
}

class SyncEqualsLocalTest : public ::testing::TestWithParam<EqCase> {};

// Sync PS with n workers, each taking batch B/n of the mod shard in a fixed
// order, sees exactly the examples of the single-process batch B at every
// step: the final parameters agree to float tolerance.
TEST_P(SyncEqualsLocalTest, SameParametersAsSingleProcessSgd) {
  std::string root = TempRoot();
  Config local = Base(root);
  auto expected = RunConfig(local);
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();

  Config sync = Base(root);
  ASSERT_TRUE(sync.ApplyOverride("cluster.mode=sync").ok());
  ASSERT_TRUE(
      sync.ApplyOverride("cluster.transport=" + GetParam().transport).ok());
  ASSERT_TRUE(sync.ApplyOverride("cluster.workers=" +
                                 std::to_string(GetParam().workers))
                  .ok());
  auto got = RunConfig(sync);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_FALSE(expected->final_params.empty());
  // The initial model moved: the comparison is not between two untouched
  // copies.
  EXPECT_GT(MaxAbsDiff(expected->final_params,
                       std::vector<float>(expected->final_params.size(), 0.0f)),
            0.0);
  EXPECT_LT(MaxAbsDiff(expected->final_params, got->final_params), 1e-4);
  EXPECT_NEAR(expected->final_train_loss, got->final_train_loss, 1e-4);
  EXPECT_EQ(got->samples, 20 * 32);
}

INSTANTIATE_TEST_SUITE_P(
    All, SyncEqualsLocalTest,
    ::testing::Values(EqCase{"inproc", 1}, EqCase{"inproc", 2},
                      EqCase{"inproc", 4}, EqCase{"tcp", 1}, EqCase{"tcp", 2},
                      EqCase{"tcp", 4}),
    [](const auto& info) {
      return info.param.transport + "_" + std::to_string(info.param.workers);
    });

TEST(ClusterTest, AsyncWithOneWorkerEqualsSingleProcessSgd) {
  std::string root = TempRoot();
  auto expected = RunConfig(Base(root));
  Config async = Base(root);
  ASSERT_TRUE(async.ApplyOverride("cluster.mode=async").ok());
  ASSERT_TRUE(async.ApplyOverride("cluster.workers=1").ok());
  auto got = RunConfig(async);
  ASSERT_TRUE(expected.ok() && got.ok()) << got.status().ToString();
  EXPECT_LT(MaxAbsDiff(expected->final_params, got->final_params), 1e-4);
}

// A diverged run (a learning rate far too large) still has its final
// evaluation: the loss is NaN (sent as JSON's null) and the accuracy is
// measured, in the summary returned and in summary.json, as the local
// trainer's would be; until this was fixed the whole evaluation was dropped
// and the run reported a loss of 0.
TEST(ClusterTest, ADivergedRunKeepsItsFinalEvaluationWithANanLoss) {
  const std::string root = TempRoot();
  for (const char* mode : {"sync", "allreduce"}) {
    SCOPED_TRACE(mode);
    const Config c = With(
        Base(root), {std::string("cluster.mode=") + mode, "cluster.workers=2",
                     "train.lr=100", std::string("run.name=nan-") + mode});
    auto got = RunConfig(c);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->evaluated);
    EXPECT_TRUE(std::isnan(got->final_train_loss)) << got->final_train_loss;
    EXPECT_TRUE(std::isnan(got->final_val_loss)) << got->final_val_loss;
    EXPECT_GE(got->final_val_acc, 0.0);
    EXPECT_LE(got->final_val_acc, 1.0);
    auto text = ReadFile(root + "/nan-" + mode + "/summary.json");
    ASSERT_TRUE(text.ok());
    const auto j = nlohmann::json::parse(*text);
    EXPECT_TRUE(j.at("final_train_loss").is_null()) << j.dump();
    EXPECT_TRUE(j.at("final_val_acc").is_number()) << j.dump();
  }
}

// A run without a final evaluation (no evaluator, or one that did not
// answer) briefs its final figures as null, not as zeros: the Python
// binding reads them as NaN.
TEST(ClusterTest, ABriefWithoutAFinalEvaluationHasNoFinalFigures) {
  RunSummary s;
  s.final_val_acc = 0.5;
  EXPECT_EQ(s.ToJson().at("final_val_acc"), 0.5);
  s.evaluated = false;
  const nlohmann::json j = s.ToJson();
  for (const char* k : {"final_train_loss", "final_train_acc", "final_val_loss",
                        "final_val_acc"})
    EXPECT_TRUE(j.at(k).is_null()) << k << " in " << j.dump();
  EXPECT_TRUE(j.at("wall_s").is_number());
}

// Spin-then-block waiting (cluster.spin_us) changes when a waiting thread
// sees a reply, never what it computes: a one-worker async run (whose
// order is fixed) ends with the same parameters bit for bit whether its
// threads sleep at once or poll first, and the process-wide budget is the
// caller's again once the run is over.
TEST(ClusterTest, SpinningChangesNoResultAndEndsWithTheRun) {
  std::string root = TempRoot();
  Config c = Base(root);
  ASSERT_TRUE(c.ApplyOverride("cluster.mode=async").ok());
  ASSERT_TRUE(c.ApplyOverride("cluster.workers=1").ok());
  const ScopedSpinWait caller(std::chrono::microseconds(7));
  auto asleep = RunConfig(With(c, {"cluster.spin_us=0"}));
  EXPECT_EQ(SpinWaitBudget(), std::chrono::microseconds(7));
  auto spinning = RunConfig(With(c, {"cluster.spin_us=2000"}));
  EXPECT_EQ(SpinWaitBudget(), std::chrono::microseconds(7));
  ASSERT_TRUE(asleep.ok()) << asleep.status().ToString();
  ASSERT_TRUE(spinning.ok()) << spinning.status().ToString();
  ASSERT_FALSE(asleep->final_params.empty());
  EXPECT_EQ(asleep->final_params, spinning->final_params);
}

// A parallel operator: large enough for LibTorch to run it on an OpenMP team
// when it has more than one thread.
void ParallelWork() {
  auto t = at::ones({1 << 20});
  (void)t.sum().item<float>();
}

// Threads LibTorch starts once per process and keeps, which a test that
// counts the process's threads starts first (neither starts an OpenMP team):
// - LibTorch 2.x's autograd engine starts its device threads (pt_autograd_N;
//   on a CPU-only LibTorch 2.6, one) at the first backward pass; 1.13 starts
//   none on the CPU. A tiny backward pass on one thread starts them.
// - A CUDA LibTorch asks the CUDA runtime for its devices at the first
//   manual_seed (to seed their generators too; strata seeds every model it
//   builds), and the driver starts a thread of its own then, GPU or none
//   (seen with Debian 13's CUDA LibTorch 2.6, scripts/torch2_check.sh --cuda).
void StartLibTorchsProcessThreads() {
  at::Tensor x = at::ones({1}).requires_grad_(true);
  x.sum().backward();
  at::manual_seed(0);
}

// LibTorch runs a large operator on an OpenMP team of the calling thread,
// and libgomp keeps a thread's team until the thread ends. An in-process run
// leaves none on the caller's thread: its idle threads would count beside
// the workers' teams all run long, and once libgomp counts more OpenMP
// threads than cores none of them spins between parallel regions
// (docs/results/2026-11-26-gpu-h200-profile.md, "The second H200 session").
TEST(ClusterTest, ARunLeavesNoOpenMpTeamOnTheCallersThread) {
  at::set_num_threads(2);  // a team of two wherever an operator is large
  const std::string root = TempRoot();
  // 16 x 4096 + 4096 x 10 weights: binding them runs in parallel.
  const Config c = With(Base(root), {"cluster.mode=sync", "cluster.workers=1",
                                     "model.hidden=4096", "train.iterations=3",
                                     "cluster.threads_per_worker=2"});
  StartLibTorchsProcessThreads();
  const int before = ProcessThreads();
  auto r = RunConfig(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ProcessThreadsSettlingAt(before), before) << ProcessThreadNames();
}

// A parallel operator starts a team that lives as long as its thread (the
// control: a thread kept alive keeps one more thread, its team's), and one
// run by OnThreadOfItsOwn leaves none behind.
TEST(OwnThreadTest, ATeamStartedThereEndsWithTheWork) {
  at::set_num_threads(2);
  const int before = ProcessThreads();
  std::atomic<bool> worked{false};
  std::atomic<bool> release{false};
  std::thread kept([&] {
    ParallelWork();
    worked = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!worked) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int with_kept = ProcessThreads();
  release = true;
  kept.join();
  // The kept thread and its team's second thread.
  EXPECT_EQ(with_kept, before + 2);
  EXPECT_EQ(ProcessThreadsSettlingAt(before), before);

  Status st = OnThreadOfItsOwn([] {
    ParallelWork();
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ProcessThreadsSettlingAt(before), before);
}

// The thread count seen most often while a run of `config` goes on.
int UsualThreads(const Config& config) {
  std::atomic<bool> done{false};
  Result<RunSummary> r = Status::Internal("not run");
  std::thread run([&] {
    r = RunConfig(config);
    done = true;
  });
  std::map<int, int> seen;
  const auto limit = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (!done && std::chrono::steady_clock::now() < limit) {
    ++seen[ProcessThreads()];
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  run.join();
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  int usual = 0;
  int most = 0;
  for (const auto& [threads, times] : seen) {
    if (times > most) {
      most = times;
      usual = threads;
    }
  }
  EXPECT_GT(most, 20) << "too short a run to sample";
  return usual;
}

// The evaluator's thread lives all run. Neither building its model nor an
// evaluation leaves an OpenMP team there: a run with the evaluator on has,
// most of the time, as many threads as runs with it off, before and after
// it. (The evaluator evaluates the initial model, then not again:
// eval.every_s is large.)
TEST(ClusterTest, TheEvaluatorKeepsNoOpenMpTeamBetweenEvaluations) {
  at::set_num_threads(2);
  StartLibTorchsProcessThreads();
  const std::string root = TempRoot();
  // 16 x 4096 + 4096 x 10 weights: building and evaluating them runs in
  // parallel.
  const Config c =
      With(Base(root),
           {"cluster.mode=sync", "cluster.workers=1", "cluster.servers=1",
            "model.hidden=4096", "train.iterations=400",
            "cluster.threads_per_worker=2", "eval.every_s=1000000"});
  // The control: what the evaluator does, on a thread that stays, keeps
  // a team there (the thread and its team's second thread).
  {
    auto data = LoadDatasetFromConfig(c);
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    const int before = ProcessThreads();
    std::atomic<bool> evaluated{false};
    std::atomic<bool> release{false};
    std::thread kept([&] {
      auto model =
          CreateModel(ModelOptions::FromConfig(c), InputSpecOf(data->train));
      EXPECT_TRUE(model.ok()) << model.status().ToString();
      if (model.ok()) {
        auto ev = Evaluate(*model->net, data->val, 2000);
        EXPECT_TRUE(ev.ok()) << ev.status().ToString();
      }
      evaluated = true;
      while (!release)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    while (!evaluated)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const int with_kept = ProcessThreads();
    const std::string names = ProcessThreadNames();
    release = true;
    kept.join();
    ASSERT_EQ(with_kept, before + 2) << names;
    ASSERT_EQ(ProcessThreadsSettlingAt(before), before);
  }
  const int off = UsualThreads(With(c, {"cluster.evaluator=false"}));
  const int on = UsualThreads(With(c, {"cluster.evaluator=true"}));
  const int off_after = UsualThreads(With(c, {"cluster.evaluator=false"}));
  EXPECT_EQ(on, off);
  EXPECT_EQ(on, off_after);
  // The evaluator did evaluate (its eval.jsonl has its first evaluation).
  int evaluations = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (e.path().filename() != "eval.jsonl") continue;
    std::ifstream in(e.path());
    for (std::string line; std::getline(in, line);)
      if (line.find("\"final\"") == std::string::npos) ++evaluations;
  }
  EXPECT_GE(evaluations, 1);
}

// cluster.inline_server: where a push or pull is handled (the sending
// worker's thread or the server's) changes nothing in what is computed.
// Two workers (a sum of two is the same in either order) and small
// pipelined ranges, so that many pushes meet a busy or an idle server.
TEST(ClusterTest, HandlingOnTheSendersThreadChangesNoResult) {
  std::string root = TempRoot();
  Config c = With(Base(root), {"cluster.mode=sync", "cluster.workers=2",
                               "cluster.pipeline_kb=0.25"});
  const uint64_t before = RpcEndpoint::HandledInline();
  auto queued = RunConfig(With(c, {"cluster.inline_server=false"}));
  const uint64_t between = RpcEndpoint::HandledInline();
  auto on_sender = RunConfig(With(c, {"cluster.inline_server=true"}));
  ASSERT_TRUE(queued.ok()) << queued.status().ToString();
  ASSERT_TRUE(on_sender.ok()) << on_sender.status().ToString();
  // The path was taken with the setting, and never without.
  EXPECT_EQ(between, before);
  EXPECT_GT(RpcEndpoint::HandledInline(), between);
  ASSERT_FALSE(queued->final_params.empty());
  EXPECT_EQ(queued->final_params, on_sender->final_params);
}

TEST(ClusterTest, AsyncWithFourWorkersDiffersFromSync) {
  // A control for the equivalence tests: scheduling does change the result.
  std::string root = TempRoot();
  Config sync = Base(root);
  ASSERT_TRUE(sync.ApplyOverride("cluster.mode=sync").ok());
  Config async = Base(root);
  ASSERT_TRUE(async.ApplyOverride("cluster.mode=async").ok());
  auto a = RunConfig(sync);
  auto b = RunConfig(async);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(MaxAbsDiff(a->final_params, b->final_params), 1e-3);
}

nlohmann::json Summary(const std::string& root);

class PipelineTest : public ::testing::TestWithParam<std::string> {};

// Layer-wise pipelining (cluster.pipeline) is exact: each range of the
// gradient is pushed as the backward pass finishes it, applied by its own
// server-side shard and its parameters brought back with the ack, and the
// run ends with the parameters of the unpipelined run, bit for bit. Every
// operation is element-wise and sees the same values in the same order:
// sync with 2 workers sums the two gradients of a step (a + b == b + a in
// IEEE arithmetic; with 3 or more the arrival order could change the
// rounding, as it can without pipelining), async with 1 worker applies one
// gradient at a time.
TEST_P(PipelineTest, PipelinedRunsEndWithTheUnpipelinedParameters) {
  const std::string transport = GetParam();
  if (transport == "ucx" && !HaveUcx())
    GTEST_SKIP() << "this build has no UCX (libucx-dev not found)";
  for (const auto& [mode, workers] :
       std::vector<std::pair<std::string, int>>{{"sync", 2}, {"async", 1}}) {
    SCOPED_TRACE(mode);
    std::map<std::string, RunSummary> runs;
    std::map<std::string, nlohmann::json> summaries;
    // 442 parameters over 2 servers, cut at the tensors' ends with ranges
    // of at most 0.1 KiB (25 floats) unless a tensor is larger: server 0's
    // share [0, 221) lies inside fc1.weight (one range); server 1's is
    // fc1.weight's last 35, fc1.bias (16), fc2.weight (160), fc2.bias (10):
    // four ranges.
    for (const std::string pipeline :
         {"cluster.pipeline_kb=0.1", "cluster.pipeline=false"}) {
      std::string root = TempRoot();
      auto r = RunConfig(With(
          Base(root),
          {"cluster.mode=" + mode, "cluster.workers=" + std::to_string(workers),
           "cluster.transport=" + transport, pipeline}));
      ASSERT_TRUE(r.ok()) << pipeline << ": " << r.status().ToString();
      runs[pipeline] = *r;
      summaries[pipeline] = Summary(root);
    }
    const RunSummary& piped = runs["cluster.pipeline_kb=0.1"];
    const RunSummary& plain = runs["cluster.pipeline=false"];
    const nlohmann::json& ps = summaries["cluster.pipeline_kb=0.1"];
    EXPECT_DOUBLE_EQ(ps["pipeline_kb"].get<double>(), 25 * 4 / 1024.0);
    ASSERT_EQ(ps["servers_stats"].size(), 2u);
    EXPECT_FALSE(ps["servers_stats"][0].contains("ranges"));
    EXPECT_EQ(ps["servers_stats"][1]["ranges"], 4);
    EXPECT_EQ(ps["servers_stats"][0]["applied_gradients"], 20 * workers);
    EXPECT_EQ(summaries["cluster.pipeline=false"]["pipeline_kb"], 0.0);
    EXPECT_FALSE(
        summaries["cluster.pipeline=false"]["servers_stats"][0].contains(
            "ranges"));
    ASSERT_EQ(piped.final_params.size(), 442u);
    EXPECT_GT(MaxAbsDiff(piped.final_params,
                         std::vector<float>(piped.final_params.size(), 0.0f)),
              0.0);
    EXPECT_EQ(piped.final_params, plain.final_params);
    EXPECT_EQ(piped.final_train_loss, plain.final_train_loss);
    EXPECT_EQ(piped.samples, plain.samples);
    // Pipelined or not, only the first step pulls on its own: every later
    // step's parameters come with the previous push's ack (sync: once its
    // step closed).
    for (const auto& [setting, summary] : summaries) {
      for (const nlohmann::json& w : summary["workers"])
        EXPECT_EQ(w["pulls"].get<int64_t>(), 1) << setting << ": " << w.dump();
    }
    // Pipelined, each later step's forward pass started on fc1 (ranges 0
    // and 1) while the previous push's other acks were still to be taken
    // (cluster.layer_wait); unpipelined it waited for the whole ack.
    for (const nlohmann::json& w : ps["workers"])
      EXPECT_EQ(w["layered_acks"].get<int64_t>(), 19) << w.dump();
    for (const nlohmann::json& w :
         summaries["cluster.pipeline=false"]["workers"])
      EXPECT_EQ(w["layered_acks"].get<int64_t>(), 0) << w.dump();
  }
}

INSTANTIATE_TEST_SUITE_P(All, PipelineTest,
                         ::testing::Values("inproc", "tcp", "ucx"),
                         [](const auto& info) { return info.param; });

class SlicedPipelineTest : public ::testing::TestWithParam<std::string> {};

// cluster.slice_kb: with model.hidden=64 fc1.weight is 64 rows of 16
// floats; slice_kb=1 (256 floats, and ranges of at most that:
// pipeline_kb=1) cuts it into four ranges of 16 rows, and
// the worker computes it slice by slice (each slice's gradient pushed as
// soon as it is computed, the next forward pass starting on a slice once
// its range's ack is back). The run ends with the unpipelined run's
// parameters to float rounding: the sliced matrix products sum in another
// order than the whole one (not bit for bit; ModelTest.SlicedLayer...).
TEST_P(SlicedPipelineTest, SlicedRunsEndWithinRoundingOfTheUnpipelinedRun) {
  const std::string transport = GetParam();
  if (transport == "ucx" && !HaveUcx())
    GTEST_SKIP() << "this build has no UCX (libucx-dev not found)";
  for (const auto& [mode, workers] :
       std::vector<std::pair<std::string, int>>{{"sync", 2}, {"async", 1}}) {
    SCOPED_TRACE(mode);
    std::map<std::string, RunSummary> runs;
    std::map<std::string, nlohmann::json> summaries;
    for (const std::string setting :
         {"cluster.slice_kb=1", "cluster.slice_kb=0",
          "cluster.pipeline=false"}) {
      std::string root = TempRoot();
      const uint64_t sent_on_fill = BucketReducer::SentOnFill();
      auto r = RunConfig(With(
          Base(root),
          {"cluster.mode=" + mode, "cluster.workers=" + std::to_string(workers),
           "cluster.transport=" + transport, "cluster.servers=1",
           "model.hidden=64", "cluster.pipeline_kb=1", setting}));
      ASSERT_TRUE(r.ok()) << setting << ": " << r.status().ToString();
      runs[setting] = *r;
      summaries[setting] = Summary(root);
      // Pipelined, the backward pass's thread sends each range as it fills
      // (in process, over TCP and over UCX).
      const uint64_t sent = BucketReducer::SentOnFill() - sent_on_fill;
      if (setting == "cluster.pipeline=false") {
        EXPECT_EQ(sent, 0u) << setting;
      } else {
        EXPECT_GT(sent, 0u) << setting;
      }
    }
    // Sliced: fc1.weight's four ranges, then fc1.bias, fc2.weight and
    // fc2.bias, one range each. Not sliced: fc1.weight is one range.
    EXPECT_EQ(summaries["cluster.slice_kb=1"]["servers_stats"][0]["ranges"], 7);
    EXPECT_EQ(summaries["cluster.slice_kb=0"]["servers_stats"][0]["ranges"], 4);
    const std::vector<float>& plain =
        runs["cluster.pipeline=false"].final_params;
    ASSERT_EQ(plain.size(), 64u * 16 + 64 + 64 * 10 + 10);
    EXPECT_LT(MaxAbsDiff(runs["cluster.slice_kb=1"].final_params, plain), 1e-4);
    // The control: pipelined without slices is exact.
    EXPECT_EQ(runs["cluster.slice_kb=0"].final_params, plain);
    for (const nlohmann::json& w : summaries["cluster.slice_kb=0"]["workers"])
      EXPECT_EQ(w["layer_slices"].get<int64_t>(), 0) << w.dump();
    for (const nlohmann::json& w : summaries["cluster.slice_kb=1"]["workers"]) {
      EXPECT_EQ(w["layer_slices"].get<int64_t>(), 4) << w.dump();
      EXPECT_EQ(w["layered_acks"].get<int64_t>(), 19) << w.dump();
      EXPECT_EQ(w["pulls"].get<int64_t>(), 1) << w.dump();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, SlicedPipelineTest,
                         ::testing::Values("inproc", "tcp", "ucx"),
                         [](const auto& info) { return info.param; });

// The plan's cut points for row slices (ClusterPlan::Shape): fc1.weight
// in the fewest equal slices of at most cluster.slice_kb, each a multiple
// of 16 rows, each a range of its own; the tensors after it keep ranges of
// at most cluster.pipeline_kb; slice_kb = 0 leaves the weight whole.
TEST(ClusterPlanTest, RowSlicesCutTheWeightAtMultiplesOf16Rows) {
  auto ranges = [](int64_t dim, const std::string& slice_kb) {
    Config c =
        With(Base(TempRoot()),
             {"cluster.mode=sync", "cluster.servers=1", "model.hidden=64",
              "cluster.pipeline_kb=1", "cluster.slice_kb=" + slice_kb});
    ClusterPlan plan;
    Result<ClusterRunOptions> o = ClusterRunOptions::FromConfig(c);
    EXPECT_TRUE(o.ok()) << o.status().ToString();
    if (!o.ok()) return std::vector<KeyRange>{};
    plan.options = *o;
    Status st = SizePlan(&plan, InputSpec{1, 1, dim, 10});
    EXPECT_TRUE(st.ok()) << st.ToString();
    return plan.layout.ranges();
  };
  // The tensors after fc1.weight: fc1.bias (64), fc2.weight (640) and
  // fc2.bias (10), one range each at pipeline_kb = 1 (256 floats).
  const std::vector<KeyRange> tail = {{0, 64}, {64, 704}, {704, 714}};
  auto with_tail = [&](std::vector<KeyRange> head, int64_t at) {
    for (const KeyRange& r : tail) head.push_back({at + r.begin, at + r.end});
    return head;
  };
  // 64 inputs: fc1.weight 64 x 64 = 4096 floats. 4 KiB: four slices of
  // 16 rows (1024 floats).
  EXPECT_EQ(
      ranges(64, "4"),
      with_tail({{0, 1024}, {1024, 2048}, {2048, 3072}, {3072, 4096}}, 4096));
  // 3 KiB (768 floats, 12 rows): six slices would do, but 12 rows round up
  // to 16: four slices of 16 rows again.
  EXPECT_EQ(ranges(64, "3"), ranges(64, "4"));
  // 8 KiB: two slices of 32 rows.
  EXPECT_EQ(ranges(64, "8"), with_tail({{0, 2048}, {2048, 4096}}, 4096));
  // 16 inputs, 1 KiB: four slices of 16 rows (256 floats).
  EXPECT_EQ(ranges(16, "1"),
            with_tail({{0, 256}, {256, 512}, {512, 768}, {768, 1024}}, 1024));
  // Not sliced: fc1.weight whole.
  EXPECT_EQ(ranges(64, "0"), with_tail({{0, 4096}}, 4096));
}

// A data-service worker compares its plan with the run facts the data
// servers announced: a worker with another cluster.slice_kb (its ranges cut
// elsewhere) or another model is refused, naming the setting.
TEST(ClusterPlanTest, ADataServiceWorkerCuttingElsewhereIsRefused) {
  auto plan = [](const std::string& slice_kb, const std::string& hidden) {
    Config c = With(
        Base(TempRoot()),
        {"cluster.mode=sync", "cluster.servers=1", "model.hidden=" + hidden,
         "cluster.pipeline_kb=1", "cluster.slice_kb=" + slice_kb});
    ClusterPlan p;
    Result<ClusterRunOptions> o = ClusterRunOptions::FromConfig(c);
    EXPECT_TRUE(o.ok()) << o.status().ToString();
    if (o.ok()) p.options = *o;
    Status st = SizePlan(&p, InputSpec{1, 1, 64, 10});
    EXPECT_TRUE(st.ok()) << st.ToString();
    return p;
  };
  const ClusterPlan sliced = plan("4", "64"), whole = plan("0", "64");
  const RunFacts facts = RunFacts::Of(sliced);
  EXPECT_TRUE(CheckPlanAgainstRunFacts("worker 0", sliced, facts).ok());
  // The same model cut elsewhere: the same parameter count, other ends.
  ASSERT_EQ(whole.num_params, sliced.num_params);
  ASSERT_NE(whole.tensor_ends, sliced.tensor_ends);
  Status s = CheckPlanAgainstRunFacts("worker 1", whole, facts);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("worker 1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("cluster.slice_kb"), std::string::npos)
      << s.message();
  // Another model: named by its parameter counts.
  const ClusterPlan other = plan("4", "32");
  s = CheckPlanAgainstRunFacts("worker 2", other, facts);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(s.message().find(std::to_string(other.num_params) +
                             " parameters here but " +
                             std::to_string(sliced.num_params)),
            std::string::npos)
      << s.message();
  // Facts without tensor ends (a data server from before them): the count
  // alone is checked.
  RunFacts old_facts = facts;
  old_facts.tensor_ends.reset();
  EXPECT_TRUE(CheckPlanAgainstRunFacts("worker 1", whole, old_facts).ok());
}

class LayerWaitTest : public ::testing::TestWithParam<std::string> {};

// cluster.layer_wait is exact: where a worker pulls before a step (ssp,
// with or without pipelining, before every step; sync before the first,
// its later parameters coming with the push's ack), the forward pass
// starting on the first layer while later ranges are still arriving ends
// with the parameters of the run that waited for the whole pull, bit for
// bit (the same values reach the same operations; only when differs). With
// cluster.pipeline_kb=0.1 fc1 (272 floats) ends inside server 1's share, so
// its forward waits for three ranges and fc2's two ranges may still be on
// the way.
TEST_P(LayerWaitTest, ForwardStartingOnEarlyLayersEndsWithTheSameParameters) {
  const std::string transport = GetParam();
  if (transport == "ucx" && !HaveUcx())
    GTEST_SKIP() << "this build has no UCX (libucx-dev not found)";
  // The settings, whether the forward pass can start on part of a pull
  // (unpipelined, the two ranges are the two servers' shares and fc1 reads
  // from both, so every pull is waited for whole), and the pulls each
  // worker sends on their own.
  struct Case {
    std::vector<std::string> settings;
    bool layered;
    int64_t pulls;
  };
  const std::vector<Case> cases = {
      {{"cluster.mode=sync", "cluster.workers=2", "cluster.pipeline=false"},
       false,
       1},
      {{"cluster.mode=ssp", "cluster.staleness=1", "cluster.workers=1",
        "cluster.pipeline_kb=0.1"},
       true,
       20},
      {{"cluster.mode=ssp", "cluster.staleness=0", "cluster.workers=1",
        "cluster.pipeline=false"},
       false,
       20}};
  for (const auto& [c, layered, pulls] : cases) {
    SCOPED_TRACE(c[0] + " " + c.back());
    std::map<bool, RunSummary> runs;
    for (const bool wait : {true, false}) {
      const std::string root = TempRoot();
      Config config = With(Base(root), {"cluster.transport=" + transport,
                                        std::string("cluster.layer_wait=") +
                                            (wait ? "true" : "false")});
      for (const std::string& kv : c)
        ASSERT_TRUE(config.ApplyOverride(kv).ok()) << kv;
      auto r = RunConfig(config);
      ASSERT_TRUE(r.ok()) << wait << ": " << r.status().ToString();
      runs[wait] = *r;
      // With layer waiting on and ranges finer than the first layer, the
      // forward pass starts on each pull before it is all in.
      for (const nlohmann::json& w : Summary(root)["workers"]) {
        EXPECT_EQ(w["pulls"].get<int64_t>(), pulls) << w.dump();
        EXPECT_EQ(w["layered_pulls"].get<int64_t>(),
                  wait && layered ? pulls : 0)
            << w.dump();
      }
    }
    ASSERT_EQ(runs[true].final_params.size(), 442u);
    EXPECT_GT(
        MaxAbsDiff(runs[true].final_params, std::vector<float>(442, 0.0f)),
        0.0);
    EXPECT_EQ(runs[true].final_params, runs[false].final_params);
    EXPECT_EQ(runs[true].final_train_loss, runs[false].final_train_loss);
    EXPECT_EQ(runs[true].samples, runs[false].samples);
  }
}

INSTANTIATE_TEST_SUITE_P(All, LayerWaitTest,
                         ::testing::Values("inproc", "tcp", "ucx"),
                         [](const auto& info) { return info.param; });

nlohmann::json Summary(const std::string& root) {
  // The newest run directory under root.
  std::string newest;
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    if (newest.empty() || std::filesystem::last_write_time(e) >
                              std::filesystem::last_write_time(newest))
      newest = e.path().string();
  }
  return nlohmann::json::parse(*ReadFile(newest + "/summary.json"));
}

TEST(ClusterTest, OverlapSendsEachGradientOneUpdateLateAndStillLearns) {
  // cluster.overlap with one worker: gradient t (t >= 1) is computed while
  // gradient t-1 travels, on parameters without it, so it reaches the
  // server one update stale; only the first is fresh.
  std::string root = TempRoot();
  Config c = Base(root);
  for (const char* kv :
       {"cluster.mode=async", "cluster.workers=1", "cluster.overlap=true",
        "train.iterations=40", "cluster.transport=tcp"}) {
    ASSERT_TRUE(c.ApplyOverride(kv).ok()) << kv;
  }
  auto r = RunConfig(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->final_val_acc, 0.3);  // chance is 0.1
  auto j = Summary(root);
  EXPECT_EQ(j["staleness_histogram"], (nlohmann::json{{"0", 1}, {"1", 39}}));
  EXPECT_GT(j["workers"][0]["bytes_pulled"].get<int64_t>(), 0);

  Config sync = Base(root);
  ASSERT_TRUE(sync.ApplyOverride("cluster.mode=sync").ok());
  ASSERT_TRUE(sync.ApplyOverride("cluster.overlap=true").ok());
  auto refused = RunConfig(sync);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("cluster.overlap"),
            std::string::npos)
      << refused.status().message();
}

// Calls and microseconds per name in a profile-*.json, over every thread.
std::map<std::string, std::pair<int64_t, double>> ProfileOps(
    const nlohmann::json& j) {
  std::map<std::string, std::pair<int64_t, double>> out;
  for (const auto& o : j["ops"]) {
    auto& e = out[o["name"].get<std::string>()];
    e.first += o["calls"].get<int64_t>();
    e.second += o["total_us"].get<double>();
  }
  return out;
}

TEST(ClusterTest, AProfiledWindowRecordsTheStepsPhasesAndChangesNoResult) {
  const std::string root = TempRoot();
  for (const std::string mode : {"local", "sync"}) {
    SCOPED_TRACE(mode);
    const Config plain =
        With(Base(root), {"cluster.mode=" + mode, "cluster.workers=2",
                          "run.name=plain-" + mode});
    const Config profiled =
        With(plain, {"train.profile_from=5", "train.profile_steps=4",
                     "run.name=profiled-" + mode});
    auto a = RunConfig(plain);
    auto b = RunConfig(profiled);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(a->final_params, b->final_params);
    const std::string who = mode == "local" ? "local" : "worker0";
    EXPECT_FALSE(std::filesystem::exists(root + "/plain-" + mode + "/profile-" +
                                         who + ".json"));
    auto text =
        ReadFile(root + "/profiled-" + mode + "/profile-" + who + ".json");
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    const auto j = nlohmann::json::parse(*text);
    EXPECT_EQ(j["steps"], 4);
    EXPECT_EQ(j["first_step"], 5);
    const auto ops = ProfileOps(j);
    // One scope per step and phase; LibTorch's own operators inside them.
    std::vector<std::string> phases = {"strata::step", "strata::batch",
                                       "strata::forward_backward",
                                       "strata::fetch_grads"};
    if (mode == "sync") {
      phases.push_back("strata::before_step");
      phases.push_back("strata::after_step");
    } else {
      phases.push_back("strata::optimizer");
    }
    for (const std::string& p : phases) {
      ASSERT_TRUE(ops.count(p)) << p;
      EXPECT_EQ(ops.at(p).first, 4) << p;
    }
    ASSERT_TRUE(ops.count("aten::addmm"));
    EXPECT_EQ(ops.at("aten::addmm").first % 4, 0);
    EXPECT_GT(ops.at("aten::addmm").second, 0);
    EXPECT_GE(ops.at("strata::step").second,
              ops.at("strata::forward_backward").second);
    // Worker 0 alone.
    EXPECT_FALSE(std::filesystem::exists(root + "/profiled-" + mode +
                                         "/profile-worker1.json"));
  }
  // A window that runs past the end keeps what it recorded.
  auto c =
      RunConfig(With(Base(root), {"train.profile_from=18",
                                  "train.profile_steps=10", "run.name=late"}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto text = ReadFile(root + "/late/profile-local.json");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(nlohmann::json::parse(*text)["steps"], 2);
  // A window after the last step records nothing, and the run is unharmed.
  auto d =
      RunConfig(With(Base(root), {"train.profile_from=20",
                                  "train.profile_steps=5", "run.name=never"}));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(root + "/never/profile-local.json"));
}

TEST(ClusterTest, ShardingMethodAndSamplerReachTheWorkersAndTheReport) {
  // Stratified shards and stratified batches: the run learns and its shard
  // report (written by the run) describes 4 workers that each hold every
  // class.
  std::string root = TempRoot();
  Config c = Base(root);
  for (const char* kv :
       {"cluster.mode=async", "cluster.workers=4",
        "data.sharding.method=stratified", "data.sampler=stratified",
        "data.shuffle=true", "train.iterations=60"}) {
    ASSERT_TRUE(c.ApplyOverride(kv).ok()) << kv;
  }
  auto r = RunConfig(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->final_val_acc, 0.3);  // chance is 0.1
  std::string newest;
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    newest = e.path().string();
  }
  auto text = ReadFile(newest + "/shard_report.json");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto report = nlohmann::json::parse(*text);
  EXPECT_EQ(report["method"], "stratified");
  EXPECT_EQ(report["num_workers"], 4);
  ASSERT_EQ(report["per_worker"].size(), 4u);
  int64_t total = 0;
  for (const auto& w : report["per_worker"]) {
    total += w["count"].get<int64_t>();
    for (const auto& n : w["class_counts"]) EXPECT_GT(n.get<int64_t>(), 0);
  }
  EXPECT_EQ(total, 512);
}

TEST(ClusterTest, APlanForAnotherWorkerCountIsRefused) {
  std::string root = TempRoot();
  Config base = Base(root);
  auto data = LoadDatasetFromConfig(base);
  ASSERT_TRUE(data.ok());
  ShardOptions so;
  so.method = ShardMethod::kStratified;
  so.num_workers = 3;
  auto plan = ComputeShardPlan(data->train, so);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::string path = root + "/plan3.json";
  ASSERT_TRUE(SaveShardPlan(*plan, path).ok());
  Config c = Base(root);
  ASSERT_TRUE(c.ApplyOverride("cluster.mode=async").ok());
  ASSERT_TRUE(c.ApplyOverride("cluster.workers=4").ok());
  ASSERT_TRUE(c.ApplyOverride("data.shard_plan=" + path).ok());
  auto r = RunConfig(c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find('3'), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find('4'), std::string::npos)
      << r.status().message();
  // With the right worker count the same plan is used.
  ASSERT_TRUE(c.ApplyOverride("cluster.workers=3").ok());
  auto ok = RunConfig(c);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

TEST(ClusterTest, KOfNUsesExactlyKGradientsAndCountsDropped) {
  // Two servers: pipelined (the default), server 1's range, pushed first,
  // leads and server 0 follows; unpipelined, server 0 leads (range 0, sent
  // first). One server (one range, no leader): a push-pull dropped as late
  // brings no parameters, and the next step pulls.
  for (const auto& [pipeline, servers] :
       std::vector<std::pair<bool, int>>{{true, 2}, {false, 2}, {false, 1}}) {
    SCOPED_TRACE(fmt::format("pipeline {}, {} servers", pipeline, servers));
    std::string root = TempRoot();
    Config c = With(Base(root), {"cluster.servers=" + std::to_string(servers)});
    for (const char* kv : {"cluster.mode=sync", "cluster.workers=4",
                           "cluster.updates_per_step=2",
                           "cluster.worker_delay_ms=3", "data.shuffle=true"}) {
      ASSERT_TRUE(c.ApplyOverride(kv).ok());
    }
    ASSERT_TRUE(c.ApplyOverride(std::string("cluster.pipeline=") +
                                (pipeline ? "true" : "false"))
                    .ok());
    auto r = RunConfig(c);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto j = Summary(root);
    const int64_t pushes = 4 * 20;
    const int64_t dropped = j["dropped_gradients"];
    // While at least k workers ran, every update used exactly k = 2
    // gradients.
    ASSERT_EQ(j["gradients_per_update"].size(), 1u)
        << j["gradients_per_update"].dump();
    EXPECT_TRUE(j["gradients_per_update"].contains("2"));
    const int64_t full = j["gradients_per_update"]["2"];
    const int64_t tail = j["tail_updates"];
    EXPECT_EQ(full + tail, j["updates"].get<int64_t>());
    // Every push was either applied or dropped; tail updates used 1
    // gradient.
    EXPECT_EQ(2 * full + tail + dropped, pushes);
    EXPECT_GT(dropped, 0);
    EXPECT_EQ(j["workers"][0]["dropped_gradients"].is_number(), true);
    EXPECT_EQ(j["deferred_gradients"].get<int64_t>(), 0);
    // The first step pulls; after that, only a step whose previous push
    // was dropped (no parameters came with it), unless that was the last.
    for (const nlohmann::json& w : j["workers"]) {
      const int64_t own_dropped = w["dropped_gradients"].get<int64_t>();
      EXPECT_GE(w["pulls"].get<int64_t>(), std::max<int64_t>(1, own_dropped))
          << w.dump();
      EXPECT_LE(w["pulls"].get<int64_t>(), 1 + own_dropped) << w.dump();
    }
    if (servers == 1) continue;
    // The run's counts are the leader's.
    EXPECT_EQ(j["pipeline_kb"].get<double>() > 0.0, pipeline);
    ASSERT_EQ(j["servers_stats"].size(), 2u);
    const int leader = pipeline ? 1 : 0;
    EXPECT_TRUE(j["servers_stats"][1 - leader].value("follower", false));
    EXPECT_FALSE(j["servers_stats"][leader].value("follower", false));
    EXPECT_EQ(j["servers_stats"][leader]["dropped"].get<int64_t>(), dropped);
  }
}

TEST(ClusterTest, KOfNDeferCarriesLateGradientsOver) {
  std::string root = TempRoot();
  Config c = Base(root);
  for (const char* kv :
       {"cluster.mode=sync", "cluster.workers=4", "cluster.updates_per_step=3",
        "cluster.late_gradients=defer", "cluster.worker_delay_ms=3"}) {
    ASSERT_TRUE(c.ApplyOverride(kv).ok());
  }
  auto r = RunConfig(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto j = Summary(root);
  ASSERT_EQ(j["gradients_per_update"].size(), 1u)
      << j["gradients_per_update"].dump();
  const int64_t full = j["gradients_per_update"]["3"];
  int64_t tail_grads = 0;
  for (const auto& srv : j["servers_stats"]) {
    tail_grads = srv["applied_gradients"].get<int64_t>() - 3 * full;
    break;
  }
  EXPECT_EQ(j["dropped_gradients"].get<int64_t>(), 0);
  EXPECT_EQ(3 * full + tail_grads, 4 * 20);  // nothing lost
  EXPECT_LE(tail_grads,
            2 * j["tail_updates"].get<int64_t>());  // a tail update has < 3
  EXPECT_GT(j["deferred_gradients"].get<int64_t>(), 0);
}

TEST(ClusterTest, SspAndAsyncRunsLearnAndRecordStaleness) {
  for (const char* mode : {"ssp", "async"}) {
    std::string root = TempRoot();
    Config c = Base(root);
    ASSERT_TRUE(c.ApplyOverride(std::string("cluster.mode=") + mode).ok());
    ASSERT_TRUE(c.ApplyOverride("train.iterations=60").ok());
    ASSERT_TRUE(c.ApplyOverride("cluster.worker_delay_ms=2").ok());
    auto r = RunConfig(c);
    ASSERT_TRUE(r.ok()) << mode << ": " << r.status().ToString();
    EXPECT_GT(r->final_val_acc, 0.3) << mode;  // chance is 0.1
    auto j = Summary(root);
    int64_t total = 0;
    for (auto& [k, v] : j["staleness_histogram"].items())
      total += v.get<int64_t>();
    EXPECT_EQ(total, 4 * 60) << mode;
    EXPECT_EQ(j["workers"].size(), 4u);
    EXPECT_GT(j["workers"][0]["bytes_pushed"].get<int64_t>(), 0);
  }
}

// cluster.compression: fp16 moves half the bytes and int8 (with error
// feedback) about a quarter, pushes and pulls (pulls as differences after a
// first full one); both still learn what float32 learns, and the model
// stays close to the uncompressed one. cluster.compress_pulls = false keeps
// pulls float32.
TEST(ClusterTest, CompressedPushesAndPullsLearnWithFewerBytes) {
  std::map<std::string, nlohmann::json> workers;
  std::map<std::string, std::vector<float>> params;
  for (const std::string codec : {"none", "fp16", "int8", "int8-pushes"}) {
    std::string root = TempRoot();
    Config c =
        With(Base(root), {"cluster.mode=sync", "train.iterations=60",
                          "cluster.transport=tcp",
                          "cluster.compression=" + codec.substr(0, 4),
                          std::string("cluster.compress_pulls=") +
                              (codec == "int8-pushes" ? "false" : "true")});
    auto r = RunConfig(c);
    ASSERT_TRUE(r.ok()) << codec << ": " << r.status().ToString();
    EXPECT_GT(r->final_val_acc, 0.3) << codec;  // chance is 0.1
    const nlohmann::json summary = Summary(root);
    workers[codec] = summary["workers"][0];
    EXPECT_EQ(summary["compression"], codec.substr(0, 4));
    EXPECT_EQ(summary["compress_pulls"],
              codec != "int8-pushes" && codec != "none");
    params[codec] = r->final_params;
  }
  const auto ratio = [&](const char* codec, const char* key) {
    return workers[codec][key].get<double>() /
           workers["none"][key].get<double>();
  };
  EXPECT_DOUBLE_EQ(ratio("fp16", "bytes_pushed"), 0.5);
  EXPECT_LT(ratio("int8", "bytes_pushed"), 0.26);
  EXPECT_GT(ratio("int8", "bytes_pushed"), 0.25);
  // 61 pulls: a full one before step 0, then a difference with each of the
  // 60 pushes (layer-wise pipelining pulls with the push, the last one
  // included).
  EXPECT_NEAR(ratio("fp16", "bytes_pulled"), (1 + 60 * 0.5) / 61, 1e-9);
  EXPECT_LT(ratio("int8", "bytes_pulled"), (1 + 60 * 0.26) / 61);
  EXPECT_EQ(workers["int8-pushes"]["bytes_pulled"],
            workers["none"]["bytes_pulled"]);
  EXPECT_LT(MaxAbsDiff(params["fp16"], params["none"]), 0.01);
  EXPECT_LT(MaxAbsDiff(params["int8"], params["none"]), 0.1);
  EXPECT_LT(MaxAbsDiff(params["int8-pushes"], params["none"]), 0.1);
  EXPECT_GT(MaxAbsDiff(params["int8"], params["none"]), 0.0);

  auto refused =
      RunConfig(With(Base(TempRoot()),
                     {"cluster.mode=allreduce", "cluster.compression=int8"}));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("cluster.compression"),
            std::string::npos)
      << refused.status().message();
}

// Fault injection in threads (cluster.fail_node): each other role's node
// vanishes mid-run; every run ends, as docs/design/cluster.md says it will,
// well within the 120 s request timeout.
TEST(ClusterFailureTest, EveryRoleVanishingEndsTheRunAsDocumented) {
  struct Case {
    std::string node, mode;
    bool finishes;      // the run finishes (else it stops with an error)
    std::string names;  // what the error names
  };
  const std::vector<Case> cases = {
      {"server", "sync", false, "server 0"},
      {"server", "async", false, "server 0"},
      {"evaluator", "sync", true, ""},
      {"data", "async", false, "data server 0"},
      // Its workers fail at once, a worker's loss may be seen first: the
      // data server's, seen within a heartbeat period, is named.
      {"data", "sync", false, "data server 0"},
      {"coordinator", "async", false, "coordinator"},
  };
  for (const Case& k : cases) {
    std::string root = TempRoot();
    Config c = Base(root);
    for (std::string kv :
         {"cluster.mode=" + k.mode, std::string("cluster.workers=2"),
          "cluster.fail_node=" + k.node,
          std::string("cluster.fail_after_s=0.3"),
          std::string("train.iterations=400"),
          std::string("cluster.worker_delay_ms=5"),
          std::string("cluster.heartbeat_interval_ms=50"),
          std::string("cluster.heartbeat_timeout_ms=600")}) {
      EXPECT_TRUE(c.ApplyOverride(kv).ok()) << kv;
    }
    if (k.node == "data") {
      EXPECT_TRUE(c.ApplyOverride("cluster.data_servers=1").ok());
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto r = RunConfig(c);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    EXPECT_LT(secs, 30.0) << k.node << " " << k.mode;
    if (k.finishes) {
      EXPECT_TRUE(r.ok()) << k.node << " " << k.mode << ": "
                          << r.status().ToString();
      continue;
    }
    ASSERT_FALSE(r.ok()) << k.node << " " << k.mode;
    EXPECT_NE(r.status().message().find(k.names), std::string::npos)
        << k.node << " " << k.mode << ": " << r.status().message();
  }
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

Config FailureConfig(const std::string& root, const std::string& mode) {
  Config c = Base(root);
  for (std::string kv :
       {"cluster.mode=" + mode, std::string("cluster.workers=3"),
        std::string("cluster.fail_worker=1"), std::string("cluster.fail_at=5"),
        std::string("train.iterations=40"),
        std::string("cluster.worker_delay_ms=5"),
        std::string("cluster.heartbeat_interval_ms=50"),
        std::string("cluster.heartbeat_timeout_ms=600")}) {
    EXPECT_TRUE(c.ApplyOverride(kv).ok()) << kv;
  }
  return c;
}

TEST(ClusterFailureTest,
     SyncStopsWithinTheHeartbeatTimeoutNamingTheLostWorker) {
  std::string root = TempRoot();
  auto t0 = std::chrono::steady_clock::now();
  auto r = RunConfig(FailureConfig(root, "sync"));
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("worker 1"), std::string::npos)
      << r.status().message();
  EXPECT_LT(secs, 10.0);  // not the 120 s request timeout: no hang
  auto j = Summary(root);
  ASSERT_EQ(j["lost_workers"].size(), 1u);
  EXPECT_NE(j["lost_workers"][0].get<std::string>().find("worker 1"),
            std::string::npos);
}

TEST(ClusterFailureTest, AsyncAndSspFinishWithTheOthers) {
  for (const char* mode : {"async", "ssp"}) {
    std::string root = TempRoot();
    auto r = RunConfig(FailureConfig(root, mode));
    ASSERT_TRUE(r.ok()) << mode << ": " << r.status().ToString();
    auto j = Summary(root);
    ASSERT_EQ(j["lost_workers"].size(), 1u) << mode;
    EXPECT_NE(j["lost_workers"][0].get<std::string>().find("worker 1"),
              std::string::npos);
    // The two live workers ran all their iterations.
    EXPECT_EQ(j["workers"][0]["iterations"].get<int64_t>(), 40) << mode;
    EXPECT_EQ(j["workers"][2]["iterations"].get<int64_t>(), 40) << mode;
  }
}

// Losing every worker before any finished is not a finished run, even in
// the modes that go on without a lost worker: it stops, saying so (after a
// heartbeat timeout in which another lost node, usually the cause, would be
// named instead).
TEST(ClusterFailureTest, LosingEveryWorkerStopsTheRun) {
  std::string root = TempRoot();
  Config c = FailureConfig(root, "async");
  ASSERT_TRUE(c.ApplyOverride("cluster.workers=1").ok());
  ASSERT_TRUE(c.ApplyOverride("cluster.fail_worker=0").ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = RunConfig(c);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("lost every worker (1) before any "
                                      "finished"),
            std::string::npos)
      << r.status().message();
  EXPECT_LT(secs, 30.0);
}

// cluster.forward_metrics: the workers' metrics.jsonl lines go through the
// coordinator into the run's file: the same lines (worker, step, samples)
// as when each worker writes its own, none lost or doubled.
TEST(ClusterTest, ForwardedMetricsLinesAreTheWorkersOwn) {
  const std::string root = TempRoot();
  auto lines = [&](bool forward) {
    const Config c = With(
        Base(root),
        {"cluster.mode=sync", "cluster.workers=2", "train.log_every=5",
         std::string("cluster.forward_metrics=") + (forward ? "true" : "false"),
         std::string("run.name=") + (forward ? "fwd" : "own")});
    auto s = RunConfig(c);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    std::multiset<std::tuple<int, int64_t, int64_t>> out;
    std::ifstream in(root + (forward ? "/fwd" : "/own") + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      out.insert({j["worker"].get<int>(), j["step"].get<int64_t>(),
                  j["samples"].get<int64_t>()});
    }
    return out;
  };
  const auto own = lines(false);
  const auto forwarded = lines(true);
  EXPECT_EQ(own.size(), 8u);  // 2 workers, 20 steps, a line every 5
  EXPECT_EQ(forwarded, own);
}

}  // namespace
}  // namespace strata

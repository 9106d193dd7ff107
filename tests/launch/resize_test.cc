// A cluster run resumed on another number of workers (`strata train
// --resume DIR --set cluster.workers=M`, docs/design/elastic.md): sync,
// allreduce and ring, 4 -> 2 and 2 -> 4 workers, as threads. The resumed
// run finishes every step, counts the left-out workers' samples, re-plans
// the rest of the epoch (recorded in summary.json "resize"), and trains as
// well as the run that was never cut. What cannot resize is refused
// before any node starts, saying why.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/fs.h"
#include "coordinator/resize_restore.h"
#include "data/load.h"
#include "launch/cluster_test_util.h"
#include "launch/control_endpoint.h"
#include "launch/scale.h"
#include "launch/train.h"
#include "run/scale_request.h"
#include "transport/zmq/curve_keys.h"

namespace strata {
namespace {

using testing_util::Base;
using testing_util::ResumeCluster;
using testing_util::RunConfig;
using testing_util::TempRoot;
using testing_util::With;

// Removes the checkpoints after step 20, as if the run had died there.
void CutAfter20(const std::string& run) {
  for (const auto& e :
       std::filesystem::directory_iterator(run + "/checkpoints")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && std::stoll(name.substr(5)) > 20)
      std::filesystem::remove_all(e.path());
  }
  ASSERT_TRUE(FileExists(run + "/checkpoints/step-20/manifest.json"));
}

struct ResizeCase {
  std::string mode;
  int from, to;
};

class ClusterResizeTest : public ::testing::TestWithParam<ResizeCase> {};

TEST_P(ClusterResizeTest, AResumeOnAnotherWorkerCountFinishesTheRun) {
  const ResizeCase& p = GetParam();
  const std::string root = TempRoot();
  // 512 examples, a global batch of 32: 16 steps an epoch, 3 epochs.
  const Config c =
      With(Base(root),
           {"cluster.mode=" + p.mode, "train.iterations=0", "train.epochs=3",
            "data.shuffle=true", "data.sharding.method=stratified",
            "data.sampler=stratified", "checkpoint.every_updates=10",
            "checkpoint.keep=10", "cluster.request_timeout_ms=20000",
            "cluster.workers=" + std::to_string(p.from)});
  auto whole = RunConfig(With(c, {"run.name=whole"}));
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  auto cut = RunConfig(With(c, {"run.name=cut"}));
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  ASSERT_NO_FATAL_FAILURE(CutAfter20(root + "/cut"));

  const Config resized =
      With(c, {"run.name=cut", "cluster.workers=" + std::to_string(p.to)});
  auto resumed = ResumeCluster(resized, root + "/cut");
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  // Every sample of the 3 epochs, the left-out workers' included.
  EXPECT_EQ(resumed->samples, whole->samples);
  EXPECT_EQ(whole->samples, 3 * 512);
  // Two sync runs of this config that differ only in data order end about
  // 0.05 apart on its 128 validation examples.
  EXPECT_NEAR(resumed->final_val_acc, whole->final_val_acc, 0.15);
  auto text = ReadFile(root + "/cut/summary.json");
  ASSERT_TRUE(text.ok());
  const nlohmann::json s = nlohmann::json::parse(*text);
  ASSERT_TRUE(s.contains("resize")) << s.dump();
  const nlohmann::json& r = s["resize"];
  EXPECT_EQ(r["from_workers"], p.from);
  EXPECT_EQ(r["to_workers"], p.to);
  EXPECT_EQ(r["at_step"], 20);
  // Step 20 is 4 steps into epoch 1: 12 of its 16 steps, 384 examples,
  // are left.
  EXPECT_EQ(r["remainder_examples"], 384);
  // Stratified parts of a stratified remainder: close to the dataset's
  // class distribution.
  EXPECT_GE(r["remainder_max_tv"].get<double>(), 0);
  EXPECT_LT(r["remainder_max_tv"].get<double>(), 0.1);
  EXPECT_EQ(s["workers"].size(), static_cast<size_t>(p.to));
  int64_t retired = 0;
  if (p.to < p.from) retired = (p.from - p.to) * 20 * (32 / p.from);
  EXPECT_EQ(r["retired_samples"], retired);
  EXPECT_EQ(s["worker_batch"], 32 / p.to);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ClusterResizeTest,
    ::testing::Values(ResizeCase{"sync", 4, 2}, ResizeCase{"sync", 2, 4},
                      ResizeCase{"allreduce", 4, 2},
                      ResizeCase{"allreduce", 2, 4}, ResizeCase{"ring", 4, 2},
                      ResizeCase{"ring", 2, 4}, ResizeCase{"dpsgd", 4, 2},
                      ResizeCase{"dpsgd", 2, 4}),
    [](const auto& info) {
      return info.param.mode + "_" + std::to_string(info.param.from) + "_to_" +
             std::to_string(info.param.to);
    });

// The oracle: sync with a fixed data order (mod shards, no shuffle) and
// the adapted batch B/n sees exactly the single-process batch B at every
// step (SyncEqualsLocalTest), and a resize keeps that: the rest of the
// epoch, split with mod over the new workers, is again contiguous per
// step. So a run cut at step 8 and resumed on another count ends where
// the single-process run ends, to float tolerance.
TEST(ClusterResizeTest, ASyncResizeAtAKnownStepEqualsSingleProcessSgd) {
  const std::string root = TempRoot();
  // 20 steps of batch 32 over 512 examples: epoch 1 starts at step 16.
  auto expected = RunConfig(With(Base(root), {"run.name=local"}));
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  for (const auto& [from, to] :
       {std::pair{4, 2}, std::pair{2, 4}, std::pair{4, 1}}) {
    const std::string name = "cut" + std::to_string(from) + std::to_string(to);
    const Config c =
        With(Base(root), {"cluster.mode=sync", "run.name=" + name,
                          "cluster.workers=" + std::to_string(from),
                          "checkpoint.every_updates=8", "checkpoint.keep=10"});
    ASSERT_TRUE(RunConfig(c).ok());
    for (const char* later : {"step-16", "step-20"})
      std::filesystem::remove_all(root + "/" + name + "/checkpoints/" + later);
    auto got = ResumeCluster(With(c, {"cluster.workers=" + std::to_string(to)}),
                             root + "/" + name);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_LT(
        testing_util::MaxAbsDiff(expected->final_params, got->final_params),
        1e-4)
        << from << " -> " << to;
    EXPECT_EQ(got->samples, 20 * 32) << from << " -> " << to;
  }
}

// Ring keeps each slice's optimizer state on its owner: a resize joins
// the old owners' slices and cuts them again for the new ones. Ring and
// allreduce compute the same update, so the two resized runs must end
// where each other does; a momentum slice put back on the wrong owner
// would take them apart.
TEST(ClusterResizeTest, RingMovesTheOptimizerSlicesToTheirNewOwners) {
  const std::string root = TempRoot();
  std::vector<float> ends[2];
  const char* modes[2] = {"allreduce", "ring"};
  for (int m = 0; m < 2; ++m) {
    const Config c =
        With(Base(root),
             {std::string("cluster.mode=") + modes[m], "train.iterations=40",
              "train.momentum=0.9", "cluster.workers=3",
              "checkpoint.every_updates=10", "checkpoint.keep=10",
              std::string("run.name=") + modes[m]});
    ASSERT_TRUE(RunConfig(c).ok());
    ASSERT_NO_FATAL_FAILURE(CutAfter20(root + "/" + modes[m]));
    auto resumed =
        ResumeCluster(With(c, {"cluster.workers=2"}), root + "/" + modes[m]);
    ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
    ends[m] = resumed->final_params;
  }
  EXPECT_LT(testing_util::MaxAbsDiff(ends[0], ends[1]), 1e-4);
}

// A run fed by the data service resumes on another worker count: the
// data servers re-plan the rest of the epoch (dataservice/served_replan.h)
// and every sample of the run is trained. Before this was built, the
// resume was refused; what it still cannot take is fewer workers than
// data servers.
TEST(ClusterResizeTest, ADataServiceRunResumesOnAnotherWorkerCount) {
  const std::string root = TempRoot();
  const Config c =
      With(Base(root), {"cluster.mode=sync", "cluster.workers=2",
                        "cluster.data_servers=1", "train.iterations=0",
                        "train.epochs=3", "data.sharding.method=stratified",
                        "data.shuffle=true", "checkpoint.every_updates=10",
                        "checkpoint.keep=10", "run.name=cut"});
  ASSERT_TRUE(RunConfig(c).ok());
  ASSERT_NO_FATAL_FAILURE(CutAfter20(root + "/cut"));
  auto resumed = ResumeCluster(With(c, {"cluster.workers=4"}), root + "/cut");
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(resumed->samples, 3 * 512);
  auto text = ReadFile(root + "/cut/summary.json");
  ASSERT_TRUE(text.ok());
  const nlohmann::json r = nlohmann::json::parse(*text)["resize"];
  EXPECT_EQ(r["from_workers"], 2);
  EXPECT_EQ(r["to_workers"], 4);
  // Step 20 is 4 steps into epoch 1: 384 examples left (and the batches
  // the workers had prefetched, served again).
  EXPECT_EQ(r["remainder_examples"], 384);
  EXPECT_LT(r["remainder_max_tv"].get<double>(), 0.1);

  const Config two = With(c, {"cluster.data_servers=2", "run.name=two"});
  ASSERT_TRUE(RunConfig(two).ok());
  auto one = ResumeCluster(With(two, {"cluster.workers=1"}), root + "/two");
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("cluster.data_servers"),
            std::string::npos)
      << one.status().message();
}

// A run trained on its own thread (Train, as `strata train` does) while a
// test scales it.
class BackgroundRun {
 public:
  BackgroundRun(const Config& c, const RunDirectory& dir)
      : path_(dir.path()), thread_([this, c, &dir] {
          done_.emplace(Train(TrainRequest{}, c, dir, nullptr));
        }) {}
  ~BackgroundRun() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  // Waits for the end: what Train returned.
  Result<RunSummary> Summary() {
    Join();
    if (!done_) return Status::Internal("no result");
    return *done_;
  }
  // Waits for the end: the run's summary.json, or why the run failed.
  Result<nlohmann::json> Finish() {
    Join();
    if (!done_) return Status::Internal("no result");
    if (!done_->ok()) return done_->status();
    ASSIGN_OR_RETURN(std::string text, ReadFile(path_ + "/summary.json"));
    return nlohmann::json::parse(text);
  }

 private:
  const std::string path_;
  std::optional<Result<RunSummary>> done_;
  std::thread thread_;  // declared last: it starts once the rest exists
};

// The scale tests' run: 576 examples, a global batch of 48 (24, 12 or 16
// a worker: 12 steps an epoch on 2, 3 or 4 workers), 2 workers at first,
// at most 4, checkpoint rounds every 5 steps; then `extra`.
Config ScaledRun(const std::string& root, const std::string& mode,
                 int64_t epochs, std::initializer_list<std::string> extra) {
  const Config c =
      With(Base(root),
           {"cluster.mode=" + mode, "train.iterations=0",
            "train.epochs=" + std::to_string(epochs), "train.batch_size=48",
            "data.synthetic.train_size=576", "data.shuffle=true",
            "data.sharding.method=stratified", "cluster.workers=2",
            "checkpoint.every_updates=5", "cluster.worker_delay_ms=6",
            "cluster.request_timeout_ms=20000", "cluster.max_workers=4"});
  return With(c, extra);
}

// A request for 4 workers left in `run` before it starts: the coordinator
// takes it at its first look once training runs.
void AskForFourFirst(const std::string& run) {
  ScaleRequest first;
  first.workers = 4;
  first.asked_unix = UnixNow();
  ASSERT_TRUE(AskScale(run, first).ok());
}

// served.jsonl (full ids) of `run`: each of its `epochs` served each of
// the `n` examples exactly once.
void ExpectEachExampleOncePerEpoch(const std::string& run, int64_t epochs,
                                   size_t n) {
  const auto served = testing_util::ServedCounts(run);
  for (int64_t e = 0; e < epochs; ++e) {
    SCOPED_TRACE(e);
    auto it = served.find(e);
    ASSERT_NE(it, served.end());
    EXPECT_EQ(it->second.size(), n);
    int64_t twice = 0;
    for (const auto& [id, times] : it->second) twice += times != 1;
    EXPECT_EQ(twice, 0);
  }
}

// `strata scale` on a running job, threads: 2 -> 4 -> 3 workers. The
// first request waits in the run directory before training starts (the
// coordinator takes it at its first look once training runs); the second
// is asked as soon as the run trains on 4. Checkpoint rounds every 5 steps
// make a scale meet a round in flight. The run stops at a checkpoint for
// each, goes on from it on the new count, and finishes every step;
// summary.json lists the four changes.
class ScaleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ScaleTest, ARunScaledTwoFourThreeFinishes) {
  const std::string root = TempRoot();
  Config c = ScaledRun(root, GetParam(), 60, {"run.name=scaled"});
  auto dir = RunDirectory::Create(c);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  const std::string run = dir->path();
  ASSERT_NO_FATAL_FAILURE(AskForFourFirst(run));
  BackgroundRun trainer(c, *dir);
  // Past the upper bound: refused before it is asked.
  auto over = ScaleRun(run, 5, std::chrono::seconds(1));
  EXPECT_EQ(over.status().code(), Status::Code::kInvalidArgument)
      << over.status().ToString();
  // Wait for the first scale to land, then ask the second.
  for (int i = 0; i < 600 && ReadMembership(run).size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto second = ScaleRun(run, 3, std::chrono::seconds(30));
  trainer.Join();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->from, 4);
  EXPECT_GT(second->since_request_s, 0);
  EXPECT_LT(second->since_request_s, 30);
  auto finished = trainer.Finish();
  ASSERT_TRUE(finished.ok()) << finished.status().ToString();
  const nlohmann::json& s = *finished;
  EXPECT_EQ(s["workers"].size(), 3u);
  const nlohmann::json& m = s["membership"];
  ASSERT_EQ(m.size(), 4u) << m.dump();
  EXPECT_EQ(m[0]["event"], "scale");
  EXPECT_EQ(m[0]["to"], 4);
  EXPECT_EQ(m[1]["event"], "resumed");
  EXPECT_EQ(m[1]["to"], 4);
  EXPECT_EQ(m[2]["to"], 3);
  EXPECT_EQ(m[3]["event"], "resumed");
  EXPECT_EQ(m[3]["from"], 4);
  // Each scale's state reached the next life in memory, not read back.
  EXPECT_EQ(m[1]["state_from"], "memory");
  EXPECT_EQ(m[3]["state_from"], "memory");
  EXPECT_LT(m[0]["step"].get<int64_t>(), m[2]["step"].get<int64_t>());
  const int64_t all = 60 * 576;
  if (GetParam() == "sync" || GetParam() == "allreduce" ||
      GetParam() == "dpsgd") {
    // Lockstep: every step of every epoch, once.
    EXPECT_EQ(s["samples"], all);
  } else {
    // Free modes: each worker resumes from its own step, a newcomer from
    // its source's; the total is close.
    EXPECT_NEAR(s["samples"].get<double>(), all, 0.1 * all);
  }
  EXPECT_FALSE(FileExists(run + "/scale.json"));
  EXPECT_FALSE(FileExists(run + "/scale.accepted.json"));
  // Gossip starts every weight again at 1/n after a change: they still
  // sum to one at the end.
  if (GetParam() == "gossip") {
    EXPECT_NEAR(s["gossip_weight_total"].get<double>(), 1.0, 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ScaleTest,
                         ::testing::Values("sync", "async", "ssp", "allreduce",
                                           "dpsgd", "gossip", "tree-easgd"));

// `strata scale` on a run fed by the data service, 2 -> 4 -> 3: sync with
// static assignment over 2 data servers (each re-plans the rest of the
// epoch for its new workers), async with dynamic assignment (newcomers
// simply ask). served.jsonl shows every example served exactly once in
// every epoch of the run. A count below the data servers' is refused.
class DataServiceScaleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DataServiceScaleTest, EveryExampleOncePerEpochAcrossTheChanges) {
  const bool sync = GetParam() == "sync";
  const std::string root = TempRoot();
  const int64_t epochs = 30;
  Config c = ScaledRun(
      root, GetParam(), epochs,
      {"data.sampler=stratified",
       "cluster.data_servers=" + std::string(sync ? "2" : "1"),
       std::string("data.assignment=") + (sync ? "static" : "dynamic"),
       "checkpoint.every_updates=5", "data.served_log=ids", "run.name=served"});
  auto dir = RunDirectory::Create(c);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  const std::string run = dir->path();
  ASSERT_NO_FATAL_FAILURE(AskForFourFirst(run));
  BackgroundRun trainer(c, *dir);
  if (sync) {
    auto below = ScaleRun(run, 1, std::chrono::seconds(1));
    EXPECT_EQ(below.status().code(), Status::Code::kFailedPrecondition);
    EXPECT_NE(below.status().message().find("cluster.data_servers"),
              std::string::npos)
        << below.status().message();
  }
  for (int i = 0; i < 600 && ReadMembership(run).size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto second = ScaleRun(run, 3, std::chrono::seconds(30));
  trainer.Join();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  auto finished = trainer.Finish();
  ASSERT_TRUE(finished.ok()) << finished.status().ToString();
  const nlohmann::json& s = *finished;
  EXPECT_EQ(s["workers"].size(), 3u);
  ASSERT_EQ(s["membership"].size(), 4u) << s["membership"].dump();
  ExpectEachExampleOncePerEpoch(run, epochs, 576);
  if (sync) {
    EXPECT_GE(s["samples"].get<int64_t>(), epochs * 576);
    EXPECT_GT(s["resize"]["remainder_examples"].get<int64_t>(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, DataServiceScaleTest,
                         ::testing::Values("sync", "async"));

// `strata scale --data-servers`: a run fed by the data service goes on
// with another number of data servers too. Sync with static assignment:
// 2 workers and 1 data server, then 4 and 2, then 3 and 3 (every old data
// server's cursor is re-planned over the new workers); async with dynamic
// assignment: 2 and 1, then 4 and 2, then 3 and 1 (the examples change
// hands: each data server first serves its own share of what the old ones
// had left). served.jsonl shows every example served exactly once in every
// epoch across both changes. More data servers than workers, or a new
// count for a run without the service, is refused.
class DataServerScaleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DataServerScaleTest, DataServersComeAndGoWithEveryExampleOncePerEpoch) {
  const bool sync = GetParam() == "sync";
  const std::string root = TempRoot();
  const int64_t epochs = 30;
  Config c = ScaledRun(
      root, GetParam(), epochs,
      {"data.sampler=stratified", "cluster.data_servers=1",
       std::string("data.assignment=") + (sync ? "static" : "dynamic"),
       "data.served_log=ids", "run.name=regroup"});
  auto dir = RunDirectory::Create(c);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  const std::string run = dir->path();
  ScaleRequest first;
  first.workers = 4;
  first.data_servers = 2;
  first.asked_unix = UnixNow();
  ASSERT_TRUE(AskScale(run, first).ok());
  BackgroundRun trainer(c, *dir);
  auto over = ScaleRun(run, 2, std::chrono::seconds(1), nullptr, {}, 3);
  EXPECT_EQ(over.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(over.status().message().find("cluster.data_servers"),
            std::string::npos)
      << over.status().message();
  for (int i = 0; i < 600 && ReadMembership(run).size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto second =
      ScaleRun(run, 3, std::chrono::seconds(30), nullptr, {}, sync ? 3 : 1);
  trainer.Join();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  auto finished = trainer.Finish();
  ASSERT_TRUE(finished.ok()) << finished.status().ToString();
  const nlohmann::json& s = *finished;
  EXPECT_EQ(s["workers"].size(), 3u);
  EXPECT_EQ(s["data_service"]["data_servers"].size(), sync ? 3u : 1u);
  const nlohmann::json& m = s["membership"];
  ASSERT_EQ(m.size(), 4u) << m.dump();
  EXPECT_EQ(m[0]["data_servers"], 2);
  EXPECT_EQ(m[2]["data_servers_from"], 2);
  ExpectEachExampleOncePerEpoch(run, epochs, 576);
  EXPECT_GE(s["samples"].get<int64_t>(), epochs * 576);
}

INSTANTIATE_TEST_SUITE_P(Modes, DataServerScaleTest,
                         ::testing::Values("sync", "async"));

// A new number of data servers needs a run fed by the data service.
TEST(DataServerScaleTest, ARunWithoutTheServiceIsRefused) {
  const std::string root = TempRoot();
  Config c = ScaledRun(root, "sync", 5, {"run.name=plain"});
  auto o = ClusterRunOptions::FromConfig(c);
  ASSERT_TRUE(o.ok());
  Status st = CheckScale(c, *o, 2, {}, 1);
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("data service"), std::string::npos)
      << st.message();
  EXPECT_EQ(CheckScale(c, *o, 2, {}, -1).code(),
            Status::Code::kInvalidArgument);
  // A resume by hand is checked the same way (ClusterCheckpoints::Load):
  // the service neither starts nor stops, and a dynamic run counted in
  // steps keeps its number of data servers.
  st = CheckDataServersChange(*o, 0, 2);
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("0 in the checkpoint, 2 now"), std::string::npos)
      << st.message();
  EXPECT_EQ(CheckDataServersChange(*o, 2, 0).code(),
            Status::Code::kFailedPrecondition);
  auto dynamic = ClusterRunOptions::FromConfig(
      With(c, {"cluster.mode=async", "cluster.data_servers=1",
               "data.assignment=dynamic", "train.iterations=100"}));
  ASSERT_TRUE(dynamic.ok()) << dynamic.status().ToString();
  EXPECT_EQ(CheckDataServersChange(*dynamic, 1, 2).code(),
            Status::Code::kInvalidArgument);
  EXPECT_TRUE(CheckDataServersChange(*dynamic, 2, 2).ok());
}

// The oracle of ClusterResizeTest.ASyncResizeAtAKnownStepEqualsSingleProcessSgd
// for a running job: sync with a fixed data order (mod shards, no shuffle)
// and the adapted batch B/n trains on exactly the single-process batch B at
// every step, whatever n is, and a scale re-plans the rest of the epoch
// contiguously again. So a run scaled 2 -> 4 -> 3 while it trains, at
// whatever steps the scales land (membership.jsonl names them), ends where
// the single-process run ends, to float tolerance.
TEST(ScaleTest, ASyncRunScaledTwoFourThreeEqualsSingleProcessSgd) {
  const std::string root = TempRoot();
  const std::initializer_list<std::string> fixed = {
      "data.shuffle=false", "data.sharding.method=mod",
      "cluster.worker_delay_ms=10"};
  auto expected =
      RunConfig(With(ScaledRun(root, "local", 30, fixed), {"run.name=local"}));
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  const Config c =
      With(ScaledRun(root, "sync", 30, fixed), {"run.name=scaled"});
  auto dir = RunDirectory::Create(c);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  const std::string run = dir->path();
  ASSERT_NO_FATAL_FAILURE(AskForFourFirst(run));
  BackgroundRun trainer(c, *dir);
  for (int i = 0; i < 600 && ReadMembership(run).size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto second = ScaleRun(run, 3, std::chrono::seconds(30));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  auto got = trainer.Summary();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const auto m = ReadMembership(run);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_LT(m[0].value("step", 0), m[2].value("step", 0));
  EXPECT_EQ(got->samples, 30 * 576);
  ASSERT_FALSE(got->final_params.empty());
  ASSERT_EQ(got->final_params.size(), expected->final_params.size());
  EXPECT_LT(testing_util::MaxAbsDiff(expected->final_params, got->final_params),
            1e-4)
      << "scaled to 4 at step " << m[0].value("step", 0) << " and to 3 at "
      << m[2].value("step", 0);
}

// `strata scale --drain 1` on a local-sgd run of 3 threads: worker 1
// leaves, 0 and 2 go on as 0 and 1, each with its own model (the drained
// one's is gone); every step of every epoch is trained once. A drain the
// run cannot take is refused before it is asked.
TEST(ScaleTest, ADrainedWorkerLeavesAndTheOthersGoOn) {
  const std::string root = TempRoot();
  Config c = With(Base(root),
                  {"cluster.mode=local-sgd", "train.iterations=0",
                   "train.epochs=40", "train.batch_size=48",
                   "data.synthetic.train_size=576", "data.shuffle=true",
                   "data.sharding.method=stratified", "cluster.workers=3",
                   "checkpoint.every_updates=5", "cluster.worker_delay_ms=6",
                   "cluster.request_timeout_ms=20000", "run.name=drained"});
  auto dir = RunDirectory::Create(c);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  const std::string run = dir->path();
  BackgroundRun trainer(c, *dir);
  for (const auto& [bad, why] : std::vector<std::pair<int, std::string>>{
           {3, "cannot drain worker 3: the run has workers 0 to 2"},
           {-1, "cannot drain worker -1"}}) {
    auto r = ScaleRun(run, 0, std::chrono::seconds(1), nullptr, {bad});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(why), std::string::npos)
        << r.status().message();
  }
  auto twice = ScaleRun(run, 0, std::chrono::seconds(1), nullptr, {1, 1});
  EXPECT_NE(twice.status().message().find("asked to drain twice"),
            std::string::npos)
      << twice.status().message();
  auto drained = ScaleRun(run, 0, std::chrono::seconds(30), nullptr, {1});
  trainer.Join();
  ASSERT_TRUE(drained.ok()) << drained.status().ToString();
  EXPECT_EQ(drained->from, 3);
  EXPECT_EQ(drained->to, 2);
  auto finished = trainer.Finish();
  ASSERT_TRUE(finished.ok()) << finished.status().ToString();
  const nlohmann::json& s = *finished;
  EXPECT_EQ(s["workers"].size(), 2u);
  EXPECT_EQ(s["samples"], 40 * 576);
  ASSERT_EQ(s["membership"].size(), 2u) << s["membership"].dump();
  EXPECT_EQ(s["membership"][0]["leaving"], nlohmann::json::array({1}));
  // The run's config goes on without the list (it named the checkpoint's
  // workers only).
  auto config = Config::FromTomlFile(run + "/config.toml");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->GetInt("cluster.workers"), 2);
  EXPECT_EQ(config->GetString("checkpoint.resume_workers"), "");
}

// cluster.leave_on_loss: a sync run of 3 threads loses worker 2 at step
// 23; it goes on from its checkpoint at step 20 on workers 0 and 1, the
// rest of the epoch re-planned over them, and finishes every step of every
// epoch once. Without the key the same loss stops the run (the control).
TEST(LeaveOnLossTest, ALockstepRunGoesOnWithoutALostWorker) {
  for (const bool leave : {true, false}) {
    const std::string root = TempRoot();
    const Config c = With(
        Base(root),
        {"cluster.mode=sync", "train.iterations=0", "train.epochs=20",
         "train.batch_size=48", "data.synthetic.train_size=576",
         "data.sharding.method=stratified", "cluster.workers=3",
         "checkpoint.every_updates=5", "cluster.fail_worker=2",
         "cluster.fail_at=23", "cluster.heartbeat_interval_ms=50",
         "cluster.heartbeat_timeout_ms=600",
         std::string("cluster.leave_on_loss=") + (leave ? "true" : "false"),
         "run.name=lossy"});
    auto dir = RunDirectory::Create(c);
    ASSERT_TRUE(dir.ok());
    auto r = Train(TrainRequest{}, c, *dir, nullptr);
    if (!leave) {
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.status().message().find("worker 2"), std::string::npos)
          << r.status().message();
      continue;
    }
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const nlohmann::json s =
        nlohmann::json::parse(*ReadFile(dir->path() + "/summary.json"));
    EXPECT_EQ(s["workers"].size(), 2u);
    EXPECT_EQ(s["samples"], 20 * 576);
    ASSERT_EQ(s["membership"].size(), 2u) << s["membership"].dump();
    EXPECT_EQ(s["membership"][0]["event"], "lost");
    EXPECT_EQ(s["membership"][0]["leaving"], nlohmann::json::array({2}));
    EXPECT_EQ(s["membership"][0]["step"], 20);
    EXPECT_EQ(s["membership"][1]["event"], "resumed");
    EXPECT_EQ(s["resize"]["from_workers"], 3);
    EXPECT_GT(s["resize"]["retired_samples"].get<int64_t>(), 0);
  }
  // Without checkpoints there is nothing to go on from: refused at once.
  auto bad = RunConfig(With(
      Base(TempRoot()), {"cluster.mode=sync", "cluster.leave_on_loss=true"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("checkpoint.every_updates"),
            std::string::npos)
      << bad.status().message();
}

// cluster.control_address under cluster.security = "curve": `strata scale
// --control` reaches the run through its control endpoint with the cluster
// key pair; a client with another key pair gets no answer, and the run goes
// on undisturbed.
TEST(ControlEndpointTest, AScaleAskedOverTheNetworkWithTheClusterKey) {
  if (!CheckCurveSupport().ok()) GTEST_SKIP() << "libzmq has no CURVE";
  const std::string root = TempRoot();
  auto pair = GenerateCurveKeyPair();
  auto other = GenerateCurveKeyPair();
  ASSERT_TRUE(pair.ok() && other.ok());
  ASSERT_TRUE(WriteClusterKeyFiles(root + "/keys", *pair, false).ok());
  ASSERT_TRUE(WriteClusterKeyFiles(root + "/other", *other, false).ok());
  Config c =
      With(Base(root),
           {"cluster.mode=sync", "train.iterations=0", "train.epochs=80",
            "train.batch_size=48", "data.synthetic.train_size=576",
            "cluster.workers=2", "checkpoint.every_updates=5",
            "cluster.worker_delay_ms=6", "cluster.request_timeout_ms=20000",
            "cluster.security=curve", "cluster.transport=tcp",
            "cluster.keys_dir=" + root + "/keys",
            "cluster.control_address=tcp://127.0.0.1:*", "run.name=remote"});
  auto dir = RunDirectory::Create(c);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  const std::string run = dir->path();
  BackgroundRun trainer(c, *dir);
  std::string endpoint;
  for (int i = 0; i < 400 && endpoint.empty(); ++i) {
    auto text = ReadFile(run + "/control.json");
    if (text.ok())
      endpoint = nlohmann::json::parse(*text).value("endpoint", "");
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_FALSE(endpoint.empty()) << "no control.json";
  auto stranger = ScaleRemote(endpoint, root + "/other", 3, {},
                              std::chrono::milliseconds(100));
  EXPECT_EQ(stranger.status().code(), Status::Code::kDeadlineExceeded)
      << stranger.status().ToString();
  // The run's own refusal comes back with its code.
  auto over =
      ScaleRemote(endpoint, root + "/keys", 2, {}, std::chrono::seconds(10));
  EXPECT_EQ(over.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(over.status().message().find("has 2 workers already"),
            std::string::npos)
      << over.status().message();
  // A request whose values have the wrong types gets an error reply; the
  // run goes on.
  auto garbage = RequestReply(endpoint, CurveKeys::ForCluster(*pair),
                              R"({"workers": 3, "timeout_s": "soon"})",
                              std::chrono::seconds(10));
  ASSERT_TRUE(garbage.ok()) << garbage.status().ToString();
  EXPECT_NE(garbage->find("malformed"), std::string::npos) << *garbage;
  // A join needs a --processes run: a threads run refuses it, naming why.
  auto join = AskToJoin(endpoint, root + "/keys", "elsewhere", 1,
                        std::chrono::seconds(10));
  EXPECT_EQ(join.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(join.status().message().find("--processes"), std::string::npos)
      << join.status().message();
  auto scaled =
      ScaleRemote(endpoint, root + "/keys", 3, {}, std::chrono::seconds(30));
  trainer.Join();
  ASSERT_TRUE(scaled.ok()) << scaled.status().ToString();
  EXPECT_EQ(scaled->from, 2);
  EXPECT_EQ(scaled->to, 3);
  auto finished = trainer.Finish();
  ASSERT_TRUE(finished.ok()) << finished.status().ToString();
  const nlohmann::json& s = *finished;
  EXPECT_EQ(s["workers"].size(), 3u);
  EXPECT_EQ(s["samples"], 80 * 576);
}

// cluster.leave_on_loss in async: worker 2 of 3 crashes at step 23. The
// run, which would go on without it, stops at a checkpoint of the other two
// and goes on from it on 2, the lost worker's rest of the epoch re-planned
// over them (from its state at the checkpoint before its loss).
TEST(LeaveOnLossTest, AFreeRunReplansALostWorkersEpoch) {
  const std::string root = TempRoot();
  const Config c =
      With(Base(root),
           {"cluster.mode=async", "train.iterations=0", "train.epochs=20",
            "train.batch_size=48", "data.synthetic.train_size=576",
            "data.sharding.method=stratified", "cluster.workers=3",
            "checkpoint.every_updates=5", "cluster.fail_worker=2",
            "cluster.fail_at=23", "cluster.heartbeat_interval_ms=50",
            "cluster.heartbeat_timeout_ms=600", "cluster.worker_delay_ms=4",
            "cluster.leave_on_loss=true", "run.name=lossy"});
  auto dir = RunDirectory::Create(c);
  ASSERT_TRUE(dir.ok());
  auto r = Train(TrainRequest{}, c, *dir, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const nlohmann::json s =
      nlohmann::json::parse(*ReadFile(dir->path() + "/summary.json"));
  EXPECT_EQ(s["workers"].size(), 2u);
  ASSERT_TRUE(s.contains("membership")) << s.dump();
  ASSERT_EQ(s["membership"].size(), 2u) << s["membership"].dump();
  EXPECT_EQ(s["membership"][0]["event"], "lost");
  EXPECT_EQ(s["membership"][0]["leaving"], nlohmann::json::array({2}));
  EXPECT_EQ(s["membership"][1]["event"], "resumed");
  ASSERT_TRUE(s.contains("resize")) << s.dump();
  EXPECT_EQ(s["resize"]["to_workers"], 2);
  EXPECT_GT(s["resize"]["remainder_examples"].get<int64_t>(), 0);
  // Free workers end their epochs apart; the total is close to all.
  EXPECT_NEAR(s["samples"].get<double>(), 20 * 576, 0.1 * 20 * 576);
}

// cluster.min_workers in a free mode: losing a worker below the minimum
// stops the run soon, naming the lost one (no replacement is awaited
// without cluster.restart); at the minimum the run goes on.
TEST(MinWorkersTest, AFreeRunBelowTheMinimumStopsNamingWhoIsMissing) {
  for (const int min : {3, 2}) {
    const std::string root = TempRoot();
    const Config c =
        With(Base(root), {"cluster.mode=async", "cluster.workers=3",
                          "cluster.min_workers=" + std::to_string(min),
                          "cluster.fail_worker=1", "cluster.fail_at=5",
                          "train.iterations=1500", "cluster.worker_delay_ms=4",
                          "cluster.heartbeat_interval_ms=50",
                          "cluster.heartbeat_timeout_ms=600"});
    const auto t0 = std::chrono::steady_clock::now();
    auto r = RunConfig(c);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    if (min == 2) {
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      continue;
    }
    ASSERT_FALSE(r.ok());
    const std::string& m = r.status().message();
    EXPECT_NE(m.find("2 workers left, fewer than cluster.min_workers = 3"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("worker 1"), std::string::npos) << m;
    EXPECT_LT(secs, 10.0);  // not the request timeout: no hang
  }
  // A config outside its own bounds is refused before anything starts.
  auto bad = RunConfig(With(
      Base(TempRoot()),
      {"cluster.mode=async", "cluster.workers=2", "cluster.max_workers=1"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cluster.max_workers = 1"),
            std::string::npos)
      << bad.status().message();
}

// Nobody to take it: the request is withdrawn after the timeout, saying so.
TEST(ScaleTest, ARequestNoRunTakesIsWithdrawn) {
  const std::string root = TempRoot();
  const Config c = With(Base(root), {"cluster.mode=sync", "run.name=idle",
                                     "checkpoint.every_updates=10"});
  ASSERT_TRUE(RunConfig(c).ok());
  auto got = ScaleRun(root + "/idle", 2, std::chrono::milliseconds(300));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Status::Code::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("withdrawn"), std::string::npos);
  EXPECT_FALSE(FileExists(root + "/idle/scale.json"));
  // A run without checkpoints cannot scale: refused at once.
  const Config bare = With(Base(root), {"cluster.mode=sync", "run.name=bare"});
  ASSERT_TRUE(RunConfig(bare).ok());
  got = ScaleRun(root + "/bare", 2, std::chrono::seconds(10));
  EXPECT_EQ(got.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(got.status().message().find("checkpoint.every_s"),
            std::string::npos)
      << got.status().message();
}

}  // namespace
}  // namespace strata

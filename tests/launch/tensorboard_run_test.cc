// Every run mirrors metrics.jsonl and eval.jsonl into TensorBoard event
// files (<run>/tb/): read back here with every record's CRCs checked.
#include <dirent.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "launch/cluster_test_util.h"
#include "metrics/tensorboard.h"

namespace strata {
namespace {

using testing_util::Base;
using testing_util::RunConfig;
using testing_util::TempRoot;
using testing_util::With;

// tag -> steps, over every event file of <run>/tb.
std::map<std::string, std::set<int64_t>> Tags(const std::string& run_dir,
                                              int* files) {
  std::map<std::string, std::set<int64_t>> tags;
  *files = 0;
  DIR* d = ::opendir((run_dir + "/tb").c_str());
  if (d == nullptr) return tags;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("events.out.tfevents.", 0) != 0) continue;
    ++*files;
    auto events = ReadScalarEvents(run_dir + "/tb/" + name);
    EXPECT_TRUE(events.ok()) << events.status().ToString();
    if (!events.ok()) continue;
    for (const auto& ev : *events) {
      EXPECT_TRUE(std::isfinite(ev.value)) << ev.tag;
      tags[ev.tag].insert(ev.step);
    }
  }
  ::closedir(d);
  return tags;
}

TEST(TensorBoardRunTest, LocalRunWritesTheScalarsPeopleLookFor) {
  std::string root = TempRoot();
  auto got = RunConfig(With(Base(root), {"run.name=local", "train.log_every=5",
                                         "train.eval_every=10"}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  int files = 0;
  auto tags = Tags(root + "/local", &files);
  EXPECT_EQ(files, 2);  // the trainer's metrics and its evaluations
  EXPECT_EQ(tags["train/loss"], (std::set<int64_t>{5, 10, 15, 20}));
  EXPECT_EQ(tags["train/accuracy"].size(), 4u);
  EXPECT_EQ(tags["train/learning_rate"].size(), 4u);
  EXPECT_EQ(tags["train/samples_per_s"], (std::set<int64_t>{10, 15, 20}));
  EXPECT_TRUE(tags["val/accuracy"].count(10)) << tags["val/accuracy"].size();
  EXPECT_TRUE(tags["val/loss"].count(20));
}

TEST(TensorBoardRunTest, ClusterRunsWritePerWorkerCurvesAndTheEvaluations) {
  std::string root = TempRoot();
  auto got =
      RunConfig(With(Base(root), {"run.name=ps", "cluster.mode=async",
                                  "cluster.workers=2", "train.log_every=5"}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  int files = 0;
  auto tags = Tags(root + "/ps", &files);
  EXPECT_EQ(files, 3);  // worker 0, worker 1, evaluator
  for (const char* t :
       {"train/loss/worker_0", "train/loss/worker_1", "train/loss",
        "train/accuracy/worker_1", "time/compute_s/worker_0",
        "time/comm_s/worker_1", "train/samples_per_s/worker_1",
        "staleness/mean/worker_0", "staleness/max/worker_1",
        "staleness/mean"}) {
    EXPECT_FALSE(tags[t].empty()) << t;
  }
  EXPECT_EQ(tags["train/loss/worker_1"], (std::set<int64_t>{5, 10, 15, 20}));
  EXPECT_EQ(tags["staleness/max/worker_1"], tags["train/loss/worker_1"]);
  EXPECT_FALSE(tags["val/accuracy"].empty());

  // Decentralized: the evaluator also writes the consensus distance.
  auto dec =
      RunConfig(With(Base(root), {"run.name=gossip", "cluster.mode=gossip",
                                  "cluster.workers=2"}));
  ASSERT_TRUE(dec.ok()) << dec.status().ToString();
  auto dtags = Tags(root + "/gossip", &files);
  EXPECT_FALSE(dtags["val/consensus_distance"].empty());
}

TEST(TensorBoardRunTest, TurnedOffWritesNoEventFile) {
  std::string root = TempRoot();
  ASSERT_TRUE(
      RunConfig(With(Base(root), {"run.name=off", "metrics.tensorboard=false"}))
          .ok());
  int files = 0;
  Tags(root + "/off", &files);
  EXPECT_EQ(files, 0);
}

}  // namespace
}  // namespace strata

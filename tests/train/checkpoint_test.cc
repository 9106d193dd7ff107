// Checkpoints: written whole or not at all (a crash between files leaves
// the previous one loadable), a damaged file is refused naming it, only the
// newest `keep` stay, a checkpoint of another config is refused naming the
// keys; and a local run stopped at a checkpoint and resumed ends with the
// same parameters, bit for bit, as the run that was never stopped.
#include "train/checkpoint.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "common/fs.h"
#include "train/cluster_test_util.h"
#include "train/data_config.h"
#include "train/local_trainer.h"
#include "train/model_file.h"

namespace strata {
namespace {

using testing_util::Base;
using testing_util::RunConfig;
using testing_util::TempRoot;
using testing_util::With;

TEST(CheckpointTest, WrittenWholeOrNotAtAllAndTheNewestKept) {
  const std::string run = TempRoot();
  for (int64_t step : {10, 20, 30}) {
    auto dir = WriteCheckpoint(
        run, step, {{"a.bin", std::string(100, char(step))}, {"b.json", "{}"}},
        /*keep=*/2);
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  }
  EXPECT_FALSE(FileExists(run + "/checkpoints/step-10"));  // keep = 2
  auto got = LoadNewestCheckpoint(run);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->step, 30);
  EXPECT_EQ(got->files.at("a.bin"), std::string(100, char(30)));

  // A crash after the first file of step 40: step 30 is still the newest.
  auto crashed = WriteCheckpoint(run, 40, {{"a.bin", "x"}, {"b.json", "{}"}}, 2,
                                 /*crash_after_files=*/1);
  ASSERT_FALSE(crashed.ok());
  got = LoadNewestCheckpoint(run);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->step, 30);

  // A damaged file is refused, naming it and its checksum.
  const std::string victim = run + "/checkpoints/step-30/a.bin";
  ASSERT_TRUE(WriteFileAtomic(victim, std::string(100, 'z')).ok());
  auto damaged = LoadNewestCheckpoint(run);
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), Status::Code::kDataLoss);
  EXPECT_NE(damaged.status().message().find(victim), std::string::npos)
      << damaged.status().message();
  EXPECT_NE(damaged.status().message().find("checksum"), std::string::npos);

  EXPECT_EQ(LoadNewestCheckpoint(TempRoot()).status().code(),
            Status::Code::kNotFound);
}

TEST(CheckpointTest, AnotherConfigIsRefusedNamingTheKeys) {
  Config a;
  Config b = a;
  ASSERT_TRUE(b.ApplyOverride("run.name=other").ok());
  ASSERT_TRUE(b.ApplyOverride("checkpoint.keep=9").ok());
  EXPECT_TRUE(CheckResumeConfig(a.ToToml(), b).ok());
  ASSERT_TRUE(b.ApplyOverride("model.hidden=17").ok());
  ASSERT_TRUE(b.ApplyOverride("cluster.workers=3").ok());
  Status st = CheckResumeConfig(a.ToToml(), b);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("model.hidden: 256 in the checkpoint, 17 now"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("cluster.workers"), std::string::npos);
}

struct ResumeCase {
  std::string name;
  std::vector<std::string> set;
};

class LocalResumeTest : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(LocalResumeTest, ResumedRunEqualsTheUninterruptedOneBitForBit) {
  const std::string root = TempRoot();
  Config c = With(Base(root), {"train.iterations=40", "data.shuffle=true",
                               "checkpoint.every_updates=10"});
  for (const auto& kv : GetParam().set) c = With(c, {kv});
  auto whole = RunConfig(With(c, {"run.name=whole"}));
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();

  // The same run, "stopped" after its checkpoint at step 20: the later
  // checkpoints are removed, as if it had died after writing step 20.
  auto cut = RunConfig(With(c, {"run.name=cut"}));
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  for (const char* step : {"step-30", "step-40"}) {
    const std::string dir = root + "/cut/checkpoints/" + step;
    ASSERT_TRUE(FileExists(dir)) << dir;
    ASSERT_EQ(std::system(("rm -rf " + dir).c_str()), 0);
  }
  auto data = LoadDatasetFromConfig(c);
  ASSERT_TRUE(data.ok());
  auto dir = RunDirectory::Open(root + "/cut");
  ASSERT_TRUE(dir.ok());
  auto resumed = TrainLocal(With(c, {"run.name=cut", "checkpoint.resume=true"}),
                            *data, *dir, nullptr);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(resumed->final_params, whole->final_params);
  EXPECT_EQ(resumed->steps, 40);
  EXPECT_EQ(resumed->samples, whole->samples);
  auto summary = ReadFile(root + "/cut/summary.json");
  ASSERT_TRUE(summary.ok());
  EXPECT_NE(summary->find("\"resumed_at_step\": 20"), std::string::npos)
      << *summary;
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, LocalResumeTest,
    ::testing::Values(ResumeCase{"sgd_momentum_shuffle", {}},
                      ResumeCase{"adam_stratified",
                                 {"train.optimizer=adam", "train.lr=0.01",
                                  "data.sampler=stratified"}},
                      ResumeCase{
                          "resnet_batchnorm",
                          {"data.synthetic.shape=3x8x8", "model.name=resnet20",
                           "train.iterations=40"}}),
    [](const auto& info) { return info.param.name; });

TEST(CheckpointExportTest, AChosenCheckpointsModelIsExportedWithItsNames) {
  const std::string root = TempRoot();
  Config c = With(Base(root), {"run.name=e", "train.iterations=30",
                               "checkpoint.every_updates=10"});
  auto run = RunConfig(c);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  // The newest checkpoint (step 30) is the final model.
  auto dir = ExportLocalCheckpoint(root + "/e", -1, root + "/out");
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  auto info = CheckModelFiles(*dir);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  auto file = ReadSafetensors(*dir + "/" + kModelFile);
  ASSERT_TRUE(file.ok());
  std::vector<float> params;
  for (const auto& t : (*info)["tensors"]) {
    if (t["kind"] != "parameter") continue;
    auto v = file->Find(t["name"])->ToFloats();
    params.insert(params.end(), v.begin(), v.end());
  }
  EXPECT_EQ((*info)["tensors"][0]["name"], "fc1.weight");
  EXPECT_EQ(params, run->final_params);
  // An earlier one differs; a missing step is named with those there are.
  auto early = ExportLocalCheckpoint(root + "/e", 10, "");
  ASSERT_TRUE(early.ok()) << early.status().ToString();
  EXPECT_EQ(*early, root + "/e/export-step-10");
  auto none = ExportLocalCheckpoint(root + "/e", 15, "");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("there are: 10, 20, 30"),
            std::string::npos)
      << none.status().message();
}

TEST(CheckpointTest, AClusterRunAskingForCheckpointsIsRefused) {
  // Cluster roles write no checkpoints yet: refused, not silently ignored.
  auto got = RunConfig(
      With(Base(TempRoot()), {"cluster.mode=async", "checkpoint.every_s=60"}));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Status::Code::kUnimplemented);
  EXPECT_NE(got.status().message().find("local runs"), std::string::npos)
      << got.status().message();
}

TEST(LocalResumeTest, AResumeWithAnotherModelIsRefused) {
  const std::string root = TempRoot();
  Config c = With(Base(root), {"run.name=r", "checkpoint.every_updates=10"});
  ASSERT_TRUE(RunConfig(c).ok());
  auto data = LoadDatasetFromConfig(c);
  ASSERT_TRUE(data.ok());
  auto dir = RunDirectory::Open(root + "/r");
  ASSERT_TRUE(dir.ok());
  auto other = TrainLocal(With(c, {"model.hidden=8", "checkpoint.resume=true"}),
                          *data, *dir, nullptr);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("model.hidden"), std::string::npos)
      << other.status().message();
}

}  // namespace
}  // namespace strata

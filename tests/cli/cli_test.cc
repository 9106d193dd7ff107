#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "cli/commands.h"
#include "common/config.h"
#include "common/fs.h"

namespace strata {
namespace {

using testing::RunStrata;

std::string TempDir() { return testing::CliTempDir("cli_test"); }

TEST(CliTest, BadOverrideIsExitCode2) {
  EXPECT_EQ(RunStrata({"train", "--set", "train.lr=abc"}), 2);
  EXPECT_EQ(RunStrata({"train", "--set", "no.such.key=1"}), 2);
}

TEST(CliTest, TrainWritesARunDirectoryWithTheResolvedConfig) {
  std::string root = TempDir();
  ASSERT_EQ(
      RunStrata({"train", "--set", "run.dir=" + root, "--set", "run.name=x",
                 "--set", "train.iterations=20", "--set",
                 "data.synthetic.train_size=500", "--set",
                 "data.synthetic.val_size=100", "--set", "train.threads=1"}),
      0);
  auto config = Config::FromTomlFile(root + "/x/config.toml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->GetInt("train.iterations"), 20);
  EXPECT_TRUE(FileExists(root + "/x/summary.json"));
}

// Keys that are each valid but say together that the run cannot start are
// refused before a run directory is made, for a cluster and a local run
// alike (a cluster used to train 0 steps and exit 0).
TEST(CliTest, NothingToTrainIsRefusedBeforeARunDirectoryIsMade) {
  const std::string root = TempDir() + "/runs";
  for (const char* mode : {"async", "local"}) {
    SCOPED_TRACE(mode);
    EXPECT_EQ(RunStrata({"train", "--set", "run.dir=" + root, "--set",
                         std::string("cluster.mode=") + mode, "--set",
                         "train.epochs=0", "--set", "train.iterations=0"}),
              2);
  }
  EXPECT_FALSE(FileExists(root));
}

TEST(CliTest, TomlFileThenOverrides) {
  std::string root = TempDir();
  ASSERT_TRUE(WriteFileAtomic(
                  root + "/run.toml",
                  "[train]\niterations = 5\nlr = 0.3\n[run]\nname = \"y\"\n")
                  .ok());
  ASSERT_EQ(RunStrata({"train", "-c", root + "/run.toml", "--set",
                       "run.dir=" + root, "--set", "train.lr=0.2", "--set",
                       "data.synthetic.train_size=200", "--set",
                       "data.synthetic.val_size=50"}),
            0);
  auto config = Config::FromTomlFile(root + "/y/config.toml");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->GetInt("train.iterations"), 5);     // from the file
  EXPECT_DOUBLE_EQ(config->GetFloat("train.lr"), 0.2);  // override wins
}

TEST(CliTest, DownloadFromAMirrorWithWrongFilesFails) {
  std::string mirror = TempDir();
  std::string out = TempDir();
  for (const char* f :
       {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    ASSERT_TRUE(WriteFileAtomic(mirror + "/" + f, "not the real file").ok());
  }
  EXPECT_EQ(RunStrata({"data", "download", "mnist", "--dir", out, "--mirror",
                       "file://" + mirror + "/"}),
            1);
}

}  // namespace
}  // namespace strata

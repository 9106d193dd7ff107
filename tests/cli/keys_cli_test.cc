// `strata keys generate` and cluster.security at the command line: the key
// files and their modes, no silent overwrite, a curve run over loopback TCP
// in one process, and the clear refusals (curve over the in-process
// transport, curve without keys).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "common/fs.h"
#include "transport/zmq/curve_keys.h"

namespace strata {
namespace {

using testing::RunStrata;

int Mode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return static_cast<int>(st.st_mode & 0777);
}

// A tiny async cluster run (1 server, 2 workers, synthetic data) in this
// process with `extra` overrides; returns the exit code and, in *log, what
// it wrote to stderr.
int TinyClusterRun(const std::string& root,
                   const std::vector<std::string>& extra, std::string* log) {
  std::vector<std::string> args = {"train",
                                   "--set",
                                   "run.dir=" + root,
                                   "--set",
                                   "run.name=r",
                                   "--set",
                                   "cluster.mode=async",
                                   "--set",
                                   "cluster.servers=1",
                                   "--set",
                                   "cluster.workers=2",
                                   "--set",
                                   "train.iterations=20",
                                   "--set",
                                   "data.synthetic.train_size=400",
                                   "--set",
                                   "data.synthetic.val_size=100"};
  for (const std::string& kv : extra) {
    args.push_back("--set");
    args.push_back(kv);
  }
  ::testing::internal::CaptureStderr();
  const int code = RunStrata(args);
  *log = ::testing::internal::GetCapturedStderr();
  return code;
}

TEST(KeysCliTest, GenerateWritesTheKeyPairAndKeepsExistingFiles) {
  const std::string dir = testing::CliTempDir("keys_cli") + "/keys";
  ASSERT_EQ(RunStrata({"keys", "generate", dir}), 0);
  const std::string key = JoinPath(dir, kClusterKeyFile);
  const std::string pub = JoinPath(dir, kClusterPublicKeyFile);
  EXPECT_EQ(Mode(key), 0600);
  EXPECT_EQ(Mode(pub), 0644);
  auto pair = ReadCurveKeyPairFile(key);
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  EXPECT_EQ(*ReadCurvePublicKeyFile(pub), pair->public_key);

  // A second generate keeps the files, --force replaces them.
  const std::string before = *ReadFile(key);
  EXPECT_EQ(RunStrata({"keys", "generate", dir}), 1);
  EXPECT_EQ(*ReadFile(key), before);
  ASSERT_EQ(RunStrata({"keys", "generate", dir, "--force"}), 0);
  auto replaced = ReadCurveKeyPairFile(key);
  ASSERT_TRUE(replaced.ok());
  EXPECT_NE(replaced->secret_key, pair->secret_key);
  EXPECT_EQ(Mode(key), 0600);
  EXPECT_EQ(*ReadCurvePublicKeyFile(pub), replaced->public_key);
}

TEST(KeysCliTest, AClusterInOneProcessTrainsOverCurveTcp) {
  const std::string root = testing::CliTempDir("keys_cli");
  const std::string keys = root + "/keys";
  ASSERT_EQ(RunStrata({"keys", "generate", keys}), 0);
  std::string log;
  ASSERT_EQ(TinyClusterRun(root,
                           {"cluster.transport=tcp", "cluster.security=curve",
                            "cluster.keys_dir=" + keys},
                           &log),
            0)
      << log;
  EXPECT_NE(log.find("tcp (loopback, CURVE)"), std::string::npos) << log;
  EXPECT_EQ(log.find("refused"), std::string::npos) << log;
  EXPECT_TRUE(FileExists(root + "/r/summary.json"));
}

TEST(KeysCliTest, CurveOverTheInProcessTransportIsRefused) {
  const std::string root = testing::CliTempDir("keys_cli");
  const std::string keys = root + "/keys";
  ASSERT_EQ(RunStrata({"keys", "generate", keys}), 0);
  std::string log;
  EXPECT_EQ(TinyClusterRun(root,
                           {"cluster.security=curve",
                            "cluster.keys_dir=" + keys},  // transport: inproc
                           &log),
            1);
  EXPECT_NE(log.find("cluster.transport = \"inproc\""), std::string::npos)
      << log;
}

TEST(KeysCliTest, CurveWithoutKeysNamesWhatIsMissing) {
  const std::string root = testing::CliTempDir("keys_cli");
  std::string log;
  EXPECT_EQ(
      TinyClusterRun(root, {"cluster.transport=tcp", "cluster.security=curve"},
                     &log),
      1);
  EXPECT_NE(log.find("needs cluster.keys_dir"), std::string::npos) << log;

  const std::string empty = root + "/no_keys_here";
  ASSERT_TRUE(MakeDirs(empty).ok());
  EXPECT_EQ(TinyClusterRun(root,
                           {"cluster.transport=tcp", "cluster.security=curve",
                            "cluster.keys_dir=" + empty},
                           &log),
            1);
  EXPECT_NE(log.find("no cluster.key there"), std::string::npos) << log;
}

}  // namespace
}  // namespace strata

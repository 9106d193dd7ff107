// Every run leaves its trained model as model.safetensors + model.json:
// the parameters equal the run's final parameters exactly, BatchNorm buffers
// are there too, `CheckModelFiles` refuses a missing or damaged file naming
// it, and PyTorch loads the file strictly into its own module of the same
// architecture (skipped without Debian's python3-torch).
#include "models/model_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/fs.h"
#include "launch/cluster_test_util.h"
#include "shell_util.h"

namespace strata {
namespace {

using testing_util::Base;
using testing_util::RunConfig;
using testing_util::TempRoot;
using testing_util::With;

// The parameter tensors of `dir`'s model file, concatenated in file order.
std::vector<float> FileParameters(const std::string& dir) {
  auto info = CheckModelFiles(dir);
  EXPECT_TRUE(info.ok()) << info.status().ToString();
  auto file = ReadSafetensors(JoinPath(dir, kModelFile));
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  std::vector<float> out;
  if (!info.ok() || !file.ok()) return out;
  for (const auto& t : (*info)["tensors"]) {
    if (t["kind"] != "parameter") continue;
    std::vector<float> v = file->Find(t["name"])->ToFloats();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(ModelFileTest, LocalAndClusterRunsLeaveTheirFinalParameters) {
  const std::string root = TempRoot();
  for (const char* mode : {"local", "async", "allreduce"}) {
    SCOPED_TRACE(mode);
    auto got = RunConfig(With(Base(root), {std::string("run.name=") + mode,
                                           std::string("cluster.mode=") + mode,
                                           "cluster.workers=2"}));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    const std::vector<float> params = FileParameters(root + "/" + mode);
    ASSERT_FALSE(got->final_params.empty());
    EXPECT_EQ(params, got->final_params);
    auto info = CheckModelFiles(root + "/" + mode);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ((*info)["model"], "mlp");
    EXPECT_EQ((*info)["tensors"][0]["name"], "fc1.weight");
    EXPECT_EQ((*info)["parameters"].get<int64_t>(),
              static_cast<int64_t>(got->final_params.size()));
  }
}

TEST(ModelFileTest, BatchNormBuffersAreWrittenAsBuffers) {
  const std::string root = TempRoot();
  auto got = RunConfig(
      With(Base(root), {"run.name=bn", "data.synthetic.shape=3x8x8",
                        "model.name=resnet20", "train.iterations=3"}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  auto info = CheckModelFiles(root + "/bn");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  int buffers = 0, int64_buffers = 0;
  for (const auto& t : (*info)["tensors"]) {
    if (t["kind"] != "buffer") continue;
    ++buffers;
    if (t["dtype"] == "I64") ++int64_buffers;  // num_batches_tracked
  }
  EXPECT_GT(buffers, 0);
  EXPECT_GT(int64_buffers, 0);
  EXPECT_EQ(FileParameters(root + "/bn"), got->final_params);
}

TEST(ModelFileTest, AMissingOrDamagedFileIsNamed) {
  const std::string root = TempRoot();
  ASSERT_TRUE(RunConfig(With(Base(root), {"run.name=m"})).ok());
  const std::string dir = root + "/m";
  auto bytes = ReadFile(JoinPath(dir, kModelFile));
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, kModelFile),
                              bytes->substr(0, bytes->size() - 10))
                  .ok());
  auto cut = CheckModelFiles(dir);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), Status::Code::kDataLoss);
  EXPECT_NE(cut.status().message().find(kModelFile), std::string::npos)
      << cut.status().message();
  std::remove(JoinPath(dir, kModelInfoFile).c_str());
  auto missing = CheckModelFiles(dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_NE(missing.status().message().find(kModelInfoFile), std::string::npos);
}

TEST(ModelFileTest, PyTorchLoadsTheFileIntoItsOwnLeNet) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 with torch (Debian's python3-torch) is "
                    "not installed: not loaded into PyTorch";
  const std::string root = TempRoot();
  ASSERT_TRUE(RunConfig(With(Base(root),
                             {"run.name=lenet", "data.synthetic.shape=1x28x28",
                              "model.name=lenet"}))
                  .ok());
  // load_state_dict(strict=True) into the fixtures' LeNet (the built-in
  // architecture written in Python): every name and shape must match.
  const std::string script = root + "/load.py";
  ASSERT_TRUE(WriteFileAtomic(script, R"(import json, struct, sys, torch
sys.path.insert(0, sys.argv[2])
from make_torchscript import LeNet
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
DT = {"F32": torch.float32, "I64": torch.int64}
state = {}
for name, v in header.items():
    if name == "__metadata__":
        continue
    b, e = v["data_offsets"]
    state[name] = torch.frombuffer(bytearray(data[b:e]), dtype=DT[v["dtype"]]).reshape(v["shape"])
net = LeNet()
net.load_state_dict(state, strict=True)
out = net(torch.zeros(2, 1, 28, 28))
assert out.shape == (2, 10), out.shape
print("ok", len(state))
)")
                  .ok());
  int status = 0;
  const std::string out = testing_util::RunShell(
      "/usr/bin/python3 " + script + " " + root + "/lenet/" + kModelFile +
          " " STRATA_SOURCE_DIR "/tests/fixtures 2>&1",
      &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, "ok 10\n");
}

}  // namespace
}  // namespace strata

// safetensors: the byte layout (little-endian header length, JSON header
// padded to 8 bytes, data in order), a round trip, every malformed file
// refused with the reason, and an independent reader (PyTorch via Debian's
// python3-torch, skipped without it) sees the same tensors.
#include "common/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/fs.h"
#include "shell_util.h"

namespace strata {
namespace {

std::vector<SafeTensor> Sample() {
  std::vector<float> w = {0.5f, -1.0f, 2.25f, 3.0f, -4.5f, 1e-3f};
  SafeTensor steps;
  steps.name = "step";
  steps.dtype = "I64";
  steps.shape = {2};
  const int64_t s[2] = {7, -9};
  steps.data.assign(reinterpret_cast<const char*>(s), sizeof(s));
  return {SafeTensor::Floats("fc1.weight", {2, 3}, w.data()),
          SafeTensor::Floats("fc1.bias", {2}, w.data() + 4), steps};
}

TEST(SafetensorsTest, LayoutAndRoundTrip) {
  auto bytes = EncodeSafetensors(Sample(), {{"model", "mlp"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>((*bytes)[i]))
         << (8 * i);
  EXPECT_EQ(n % 8, 0u);  // the data starts 8-byte aligned
  EXPECT_EQ(bytes->size(), 8 + n + 6 * 4 + 2 * 4 + 2 * 8);
  auto header = nlohmann::json::parse(bytes->substr(8, n));
  EXPECT_EQ(header["fc1.weight"]["data_offsets"],
            nlohmann::json::array({0, 24}));
  EXPECT_EQ(header["fc1.bias"]["data_offsets"],
            nlohmann::json::array({24, 32}));
  EXPECT_EQ(header["step"]["dtype"], "I64");
  EXPECT_EQ(header["__metadata__"]["model"], "mlp");

  auto file = DecodeSafetensors(*bytes, "x");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_EQ(file->tensors.size(), 3u);
  EXPECT_EQ(file->metadata.at("model"), "mlp");
  const SafeTensor* w = file->Find("fc1.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->ToFloats(),
            (std::vector<float>{0.5f, -1.0f, 2.25f, 3.0f, -4.5f, 1e-3f}));
  EXPECT_EQ(file->Find("step")->data, Sample()[2].data);
  EXPECT_EQ(file->Find("nothing"), nullptr);
}

TEST(SafetensorsTest, BadTensorsAreRefusedWhenWriting) {
  auto t = Sample();
  t[1].shape = {3};  // 2 floats of data
  EXPECT_EQ(EncodeSafetensors(t).status().code(),
            Status::Code::kInvalidArgument);
  t = Sample();
  t[2].name = "fc1.bias";
  EXPECT_NE(EncodeSafetensors(t).status().message().find("repeated"),
            std::string::npos);
  t = Sample();
  t[0].dtype = "F31";
  EXPECT_NE(EncodeSafetensors(t).status().message().find("unknown dtype"),
            std::string::npos);
}

TEST(SafetensorsTest, MalformedFilesAreRefusedNamingTheProblem) {
  const std::string good = *EncodeSafetensors(Sample());
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(good[i])) << (8 * i);
  auto says = [](const std::string& bytes, const std::string& what) {
    auto r = DecodeSafetensors(bytes, "f.safetensors");
    EXPECT_FALSE(r.ok()) << what;
    if (r.ok()) return;
    EXPECT_EQ(r.status().code(), Status::Code::kDataLoss);
    EXPECT_NE(r.status().message().find(what), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("f.safetensors"), std::string::npos);
  };
  says("abc", "too short");
  says(good.substr(0, 8 + n / 2), "beyond the file");
  says(good.substr(0, good.size() - 4), "outside the");
  says(good + "xxxx", "data bytes after the last tensor");
  std::string not_json = good;
  not_json[8] = '[';
  says(not_json, "not a JSON object");
  // A header that points two tensors at the same bytes.
  auto header = nlohmann::json::parse(good.substr(8, n));
  header["fc1.bias"]["data_offsets"] = {0, 8};
  std::string h = header.dump();
  std::string overlap(8, '\0');
  for (int i = 0; i < 8; ++i)
    overlap[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  overlap += h + good.substr(8 + n);
  says(overlap, "overlap or hole");
}

TEST(SafetensorsTest, PyTorchReadsWhatWeWrite) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 with torch (Debian's python3-torch) is "
                    "not installed: the file was not checked by PyTorch";
  char dir[] = "/tmp/strata_st_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/t.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, Sample(), {{"model", "mlp"}}).ok());
  // The reader the docs show (docs/guide/torchscript.md): struct + json +
  // torch.
  const std::string script = std::string(dir) + "/read.py";
  ASSERT_TRUE(WriteFileAtomic(script, R"(import json, struct, sys, torch
DT = {"F32": torch.float32, "I64": torch.int64}
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
t = {}
for name, v in header.items():
    if name == "__metadata__":
        continue
    b, e = v["data_offsets"]
    t[name] = torch.frombuffer(bytearray(data[b:e]), dtype=DT[v["dtype"]]).reshape(v["shape"])
assert header["__metadata__"]["model"] == "mlp"
assert torch.equal(t["fc1.weight"], torch.tensor([[0.5, -1.0, 2.25], [3.0, -4.5, 1e-3]]))
assert torch.equal(t["fc1.bias"], torch.tensor([-4.5, 1e-3]))
assert torch.equal(t["step"], torch.tensor([7, -9]))
print("ok")
)")
                  .ok());
  int status = 0;
  const std::string out = testing_util::RunShell(
      "/usr/bin/python3 " + script + " " + path + " 2>&1", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, "ok\n");
  std::system(("rm -rf " + std::string(dir)).c_str());
}

}  // namespace
}  // namespace strata

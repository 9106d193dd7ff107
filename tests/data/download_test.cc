#include "data/download.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "common/fs.h"
#include "common/md5.h"
#include "data/readers.h"
#include "data/test_util.h"

namespace strata {
namespace {

using ::strata::testing::ContainsAll;
using ::strata::testing::TempDir;
using ::strata::testing::WriteBytes;

TEST(DownloadTest, OfficialFileLists) {
  auto mnist = DatasetDownloadFiles("mnist", "");
  ASSERT_TRUE(mnist.ok()) << mnist.status().ToString();
  ASSERT_EQ(mnist->size(), 4u);
  EXPECT_EQ((*mnist)[0].url,
            "https://ossci-datasets.s3.amazonaws.com/mnist/"
            "train-images-idx3-ubyte.gz");
  EXPECT_EQ((*mnist)[0].filename, "train-images-idx3-ubyte.gz");
  EXPECT_EQ((*mnist)[0].md5, "f68b3c2dcbeaaa9fbdd348bbdeb94873");
  EXPECT_EQ((*mnist)[3].filename, "t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ((*mnist)[3].md5, "ec29112dd5afa0611ce80d1b7f02629c");
  EXPECT_FALSE((*mnist)[0].extract_tar_gz);

  auto fashion = DatasetDownloadFiles("fashion-mnist", "");
  ASSERT_TRUE(fashion.ok());
  ASSERT_EQ(fashion->size(), 4u);
  EXPECT_EQ((*fashion)[1].url,
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
            "train-labels-idx1-ubyte.gz");
  EXPECT_EQ((*fashion)[1].md5, "25c81989df183df01b3e8a0aad5dffbe");

  auto cifar10 = DatasetDownloadFiles("cifar10", "");
  ASSERT_TRUE(cifar10.ok());
  ASSERT_EQ(cifar10->size(), 1u);
  EXPECT_EQ((*cifar10)[0].url,
            "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz");
  EXPECT_EQ((*cifar10)[0].md5, "c32a1d4ab5d03f1284b67883e8d87530");
  EXPECT_TRUE((*cifar10)[0].extract_tar_gz);

  auto cifar100 = DatasetDownloadFiles("cifar100", "");
  ASSERT_TRUE(cifar100.ok());
  EXPECT_EQ((*cifar100)[0].url,
            "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz");
  EXPECT_EQ((*cifar100)[0].md5, "03b5dce01913d631647c71ecec9e9cb8");
}

TEST(DownloadTest, MirrorReplacesTheDirectory) {
  for (const std::string mirror : {"file:///tmp/x/", "file:///tmp/x"}) {
    auto files = DatasetDownloadFiles("cifar100", mirror);
    ASSERT_TRUE(files.ok());
    EXPECT_EQ((*files)[0].url, "file:///tmp/x/cifar-100-binary.tar.gz");
    EXPECT_EQ((*files)[0].md5, "03b5dce01913d631647c71ecec9e9cb8");
  }
}

TEST(DownloadTest, UnknownDatasetListsKnownOnes) {
  auto files = DatasetDownloadFiles("imagenet", "");
  ASSERT_FALSE(files.ok());
  EXPECT_EQ(files.status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(ContainsAll(
      files.status().message(),
      {"imagenet", "mnist", "fashion-mnist", "cifar10", "cifar100"}));
  Status st = DownloadDataset("imagenet", "/nonexistent", "");
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
}

// A tiny stand-in for a CIFAR tarball: fake.tar.gz holding
// fake-batches/a.bin, made with the real tar in `src`.
std::string MakeFakeTarball(const TempDir& src) {
  std::string inner = src.File("fake-batches");
  EXPECT_TRUE(MakeDirs(inner).ok());
  WriteBytes(JoinPath(inner, "a.bin"), "hello, records");
  std::string cmd = "tar czf '" + src.File("fake.tar.gz") + "' -C '" +
                    src.path() + "' fake-batches";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return src.File("fake.tar.gz");
}

TEST(DownloadTest, FileMirrorWithRightMd5FetchesAndExtracts) {
  TempDir src, dst;
  std::string tarball = MakeFakeTarball(src);
  auto md5 = Md5File(tarball);
  ASSERT_TRUE(md5.ok());
  std::string out_dir = dst.File("cifar");  // created by DownloadFiles
  DownloadFile f{"file://" + tarball, "fake.tar.gz", *md5, true};
  Status st = DownloadFiles({f}, out_dir);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(FileExists(JoinPath(out_dir, "fake.tar.gz")));
  EXPECT_FALSE(FileExists(JoinPath(out_dir, "fake.tar.gz.part")));
  auto content = ReadFile(JoinPath(out_dir, "fake-batches/a.bin"));
  ASSERT_TRUE(content.ok()) << content.status().ToString();
  EXPECT_EQ(*content, "hello, records");

  // Present with the right md5: not fetched again (the URL is now dead),
  // but still extracted.
  std::filesystem::remove_all(JoinPath(out_dir, "fake-batches"));
  f.url = "file://" + src.File("gone.tar.gz");
  st = DownloadFiles({f}, out_dir);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(FileExists(JoinPath(out_dir, "fake-batches/a.bin")));
}

TEST(DownloadTest, WrongMd5IsRejectedAndNothingIsLeft) {
  TempDir src, dst;
  std::string tarball = MakeFakeTarball(src);
  auto actual = Md5File(tarball);
  ASSERT_TRUE(actual.ok());
  const std::string wrong = "0123456789abcdef0123456789abcdef";
  Status st = DownloadFiles({{"file://" + tarball, "fake.tar.gz", wrong, true}},
                            dst.path());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(ContainsAll(
      st.message(),
      {"fake.tar.gz", "md5 mismatch", "expected " + wrong, "got " + *actual}));
  EXPECT_FALSE(FileExists(dst.File("fake.tar.gz")));
  EXPECT_FALSE(FileExists(dst.File("fake.tar.gz.part")));
  EXPECT_FALSE(FileExists(dst.File("fake-batches")));
}

TEST(DownloadTest, CorruptExistingFileIsReplaced) {
  TempDir src, dst;
  std::string tarball = MakeFakeTarball(src);
  auto md5 = Md5File(tarball);
  ASSERT_TRUE(md5.ok());
  WriteBytes(dst.File("fake.tar.gz"), "half a download");
  Status st = DownloadFiles({{"file://" + tarball, "fake.tar.gz", *md5, false}},
                            dst.path());
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto now = Md5File(dst.File("fake.tar.gz"));
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(*now, *md5);
  EXPECT_FALSE(FileExists(dst.File("fake-batches")));  // extract_tar_gz false
}

TEST(DownloadTest, FetchFailureNamesTheUrl) {
  TempDir dst;
  const std::string url = "file://" + dst.File("does-not-exist.gz");
  Status st = DownloadFiles(
      {{url, "x.gz", "d41d8cd98f00b204e9800998ecf8427e", false}}, dst.path());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_TRUE(ContainsAll(st.message(), {url, "curl"}));
  EXPECT_FALSE(FileExists(dst.File("x.gz.part")));
}

TEST(DownloadTest, MirrorWithWrongFilesFailsOnMd5) {
  TempDir mirror, dst;
  WriteBytes(mirror.File("train-images-idx3-ubyte.gz"), "not mnist");
  Status st = DownloadDataset("mnist", dst.path(), "file://" + mirror.path());
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(ContainsAll(st.message(), {"train-images-idx3-ubyte.gz",
                                         "f68b3c2dcbeaaa9fbdd348bbdeb94873",
                                         Md5Hex("not mnist", 9)}));
}

// End to end against the real files, served through a file:// mirror.
TEST(DownloadTest, RealMnistThroughFileMirror) {
  const char* root = std::getenv("STRATA_DATA_DIR");
  if (root == nullptr) {
    GTEST_SKIP() << "STRATA_DATA_DIR not set: skipping real-MNIST test";
  }
  TempDir dst;
  Status st = DownloadDataset("mnist", dst.File("mnist"),
                              "file://" + JoinPath(root, "mnist"));
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto splits = LoadMnistFamily(dst.File("mnist"), "mnist");
  ASSERT_TRUE(splits.ok()) << splits.status().ToString();
  EXPECT_EQ(splits->train.size(), 60000);
  EXPECT_EQ(splits->val.size(), 10000);
}

}  // namespace
}  // namespace strata

#include "common/md5.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/fs.h"

namespace strata {
namespace {

std::string Md5Of(const std::string& s) { return Md5Hex(s.data(), s.size()); }

TEST(Md5Test, Rfc1321Vectors) {
  EXPECT_EQ(Md5Of(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(Md5Of("a"), "0cc175b9c0f1b6a831c399e269772661");
  EXPECT_EQ(Md5Of("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(Md5Of("message digest"), "f96b697d7cb7938d525a2f31aaf161d0");
  EXPECT_EQ(Md5Of("abcdefghijklmnopqrstuvwxyz"),
            "c3fcd3d76192e4007dfb496cca67e13b");
  EXPECT_EQ(
      Md5Of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
      "d174ab98d277d9f5a5611c2c9f419d9f");
  EXPECT_EQ(Md5Of("1234567890123456789012345678901234567890123456789012345678"
                  "9012345678901234567890"),
            "57edf4a22be3c955ac49da2e2107b67a");
}

// Feeding the same bytes in odd-sized pieces must not change the digest
// (exercises the partial-block buffer around the 56- and 64-byte edges).
TEST(Md5Test, ChunkingDoesNotMatter) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<char>(i * 7 + 3));
  for (size_t len : {55u, 56u, 63u, 64u, 65u, 119u, 120u, 1000u}) {
    std::string whole = Md5Hex(data.data(), len);
    for (size_t piece : {1u, 3u, 17u, 64u}) {
      Md5 md5;
      for (size_t off = 0; off < len; off += piece) {
        md5.Update(data.data() + off, std::min(piece, len - off));
      }
      EXPECT_EQ(md5.FinalHex(), whole) << "len " << len << " piece " << piece;
    }
  }
}

TEST(Md5Test, FileMatchesBufferAndMissingFileIsNamed) {
  const char* base = std::getenv("STRATA_TEST_TMP");
  std::string root = base != nullptr ? base : "/tmp";
  ASSERT_TRUE(MakeDirs(root).ok());
  std::string tmpl = JoinPath(root, "md5_test_XXXXXX");
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  std::string path = JoinPath(tmpl, "blob");
  std::string content(3 * (1 << 20) + 5, 'x');  // spans several read chunks
  ASSERT_TRUE(WriteFileAtomic(path, content).ok());
  auto md5 = Md5File(path);
  ASSERT_TRUE(md5.ok()) << md5.status().ToString();
  EXPECT_EQ(*md5, Md5Hex(content.data(), content.size()));

  auto missing = Md5File(JoinPath(tmpl, "nope"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_NE(missing.status().message().find("nope: no such file"),
            std::string::npos);
  std::remove(path.c_str());
  rmdir(tmpl.c_str());
}

TEST(Md5Test, RealMnistLabelsFile) {
  const char* dir = std::getenv("STRATA_DATA_DIR");
  if (dir == nullptr) {
    GTEST_SKIP() << "STRATA_DATA_DIR not set: skipping real-MNIST test";
  }
  auto md5 = Md5File(JoinPath(dir, "mnist/t10k-labels-idx1-ubyte.gz"));
  ASSERT_TRUE(md5.ok()) << md5.status().ToString();
  EXPECT_EQ(*md5, "ec29112dd5afa0611ce80d1b7f02629c");
}

}  // namespace
}  // namespace strata

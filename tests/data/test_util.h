#pragma once

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/fs.h"

namespace strata::testing {

// A fresh directory under $STRATA_TEST_TMP (or /tmp), removed with its
// contents when the object goes away.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("STRATA_TEST_TMP");
    std::string root = base != nullptr ? base : "/tmp";
    EXPECT_TRUE(MakeDirs(root).ok());
    std::string tmpl = JoinPath(root, "strata_data_test_XXXXXX");
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr) << tmpl;
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const {
    return JoinPath(path_, name);
  }

 private:
  std::string path_;
};

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  ASSERT_TRUE(out) << path;
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out) << path;
}

inline void WriteGzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

inline void AppendBigEndian32(std::string* s, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    s->push_back(static_cast<char>((v >> shift) & 0xff));
  }
}

// An IDX image file: magic, count, rows, cols, then the pixels.
inline std::string IdxImages(uint32_t count, uint32_t rows, uint32_t cols,
                             const std::vector<uint8_t>& pixels,
                             uint32_t magic = 0x00000803) {
  std::string s;
  AppendBigEndian32(&s, magic);
  AppendBigEndian32(&s, count);
  AppendBigEndian32(&s, rows);
  AppendBigEndian32(&s, cols);
  s.append(pixels.begin(), pixels.end());
  return s;
}

// An IDX label file: magic, count, then the labels.
inline std::string IdxLabels(const std::vector<uint8_t>& labels,
                             uint32_t magic = 0x00000801) {
  std::string s;
  AppendBigEndian32(&s, magic);
  AppendBigEndian32(&s, static_cast<uint32_t>(labels.size()));
  s.append(labels.begin(), labels.end());
  return s;
}

// A version 1.0 .npy file with the given header fields and raw data.
inline std::string Npy(const std::string& descr, bool fortran_order,
                       const std::vector<int64_t>& shape,
                       const std::string& data) {
  std::string shape_text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    shape_text += (i ? ", " : "") + std::to_string(shape[i]);
  }
  shape_text += shape.size() == 1 ? ",)" : ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " +
                       (fortran_order ? "True" : "False") +
                       ", 'shape': " + shape_text + ", }";
  // Pad with spaces so magic + header is a multiple of 64, ending in '\n'.
  while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string s("\x93NUMPY\x01\x00", 8);
  s.push_back(static_cast<char>(header.size() & 0xff));
  s.push_back(static_cast<char>(header.size() >> 8));
  return s + header + data;
}

template <typename T>
std::string RawBytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(T));
}

// True when `text` contains every one of `parts`.
inline ::testing::AssertionResult ContainsAll(
    const std::string& text, const std::vector<std::string>& parts) {
  for (const std::string& p : parts) {
    if (text.find(p) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "'" << text << "' does not contain '" << p << "'";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace strata::testing

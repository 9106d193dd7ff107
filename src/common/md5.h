#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace strata {

// MD5 (RFC 1321), used only to check downloaded files against their
// published checksums; not for anything security-related.
// Thread-compatible: one object per stream; the free functions are
// thread-safe.
class Md5 {
 public:
  Md5();
  // Feeds `n` bytes. May be called any number of times before Final().
  void Update(const void* data, size_t n);
  // Returns the digest as 32 lower-case hex digits. The object must not be
  // updated afterwards (construct a new one for the next stream).
  std::string FinalHex();

 private:
  void Transform(const uint8_t block[64]);

  uint32_t state_[4];
  uint64_t length_ = 0;  // bytes fed so far
  uint8_t buffer_[64];
  size_t buffered_ = 0;
};

// The MD5 of `n` bytes at `data` as 32 lower-case hex digits.
std::string Md5Hex(const void* data, size_t n);

// The MD5 of a file, read in chunks (the file is never held in memory).
// NotFound ("<path>: no such file") if missing, IoError on a read failure.
Result<std::string> Md5File(const std::string& path);

}  // namespace strata

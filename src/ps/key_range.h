#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace strata {

// A half-open range [begin, end) of the flat parameter vector.
struct KeyRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const KeyRange& o) const {
    return begin == o.begin && end == o.end;
  }
};

// Which server owns which part of the flat parameter vector: the vector is
// cut into `num_servers` contiguous ranges whose sizes differ by at most one
// key (a large tensor is split across servers, so no server gets more than
// its share). Range i belongs to server i. Immutable; thread-safe.
class KeyLayout {
 public:
  // InvalidArgument if total < 1, num_servers < 1 or num_servers > total.
  static Result<KeyLayout> Balanced(int64_t total, int num_servers);

  int64_t total() const { return total_; }
  int num_servers() const { return static_cast<int>(ranges_.size()); }
  const KeyRange& range(int server) const { return ranges_[server]; }
  const std::vector<KeyRange>& ranges() const { return ranges_; }
  // The server whose range holds `key` (0 <= key < total()).
  int ServerOf(int64_t key) const;
  std::string ToString() const;

 private:
  int64_t total_ = 0;
  std::vector<KeyRange> ranges_;
};

}  // namespace strata

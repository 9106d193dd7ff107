#include "ps/key_range.h"

#include <algorithm>

namespace strata {

Result<KeyLayout> KeyLayout::Balanced(int64_t total, int num_servers) {
  if (total < 1 || num_servers < 1 || num_servers > total) {
    return Status::InvalidArgument(
        "cannot cut {} parameters into {} server ranges (need 1 <= servers <= "
        "parameters)",
        total, num_servers);
  }
  KeyLayout layout;
  layout.total_ = total;
  const int64_t base = total / num_servers;
  const int64_t extra = total % num_servers;
  int64_t begin = 0;
  for (int s = 0; s < num_servers; ++s) {
    int64_t size = base + (s < extra ? 1 : 0);
    layout.ranges_.push_back(KeyRange{begin, begin + size});
    begin += size;
  }
  return layout;
}

int KeyLayout::ServerOf(int64_t key) const {
  auto it =
      std::upper_bound(ranges_.begin(), ranges_.end(), key,
                       [](int64_t k, const KeyRange& r) { return k < r.end; });
  return static_cast<int>(it - ranges_.begin());
}

std::string KeyLayout::ToString() const {
  std::string s;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    s += fmt::format("{}server {}: [{}, {})", i ? ", " : "", i,
                     ranges_[i].begin, ranges_[i].end);
  }
  return s;
}

}  // namespace strata

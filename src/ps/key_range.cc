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
    layout.owners_.push_back(s);
    begin += size;
  }
  layout.num_servers_ = num_servers;
  return layout;
}

Result<KeyLayout> KeyLayout::Bucketed(int64_t total, int num_servers,
                                      int64_t bucket_floats) {
  ASSIGN_OR_RETURN(KeyLayout shares, Balanced(total, num_servers));
  if (bucket_floats <= 0) return shares;
  KeyLayout layout;
  layout.total_ = total;
  layout.num_servers_ = num_servers;
  for (int s = 0; s < num_servers; ++s) {
    const KeyRange share = shares.range(s);
    const int64_t pieces = (share.size() + bucket_floats - 1) / bucket_floats;
    const int64_t base = share.size() / pieces;
    const int64_t extra = share.size() % pieces;
    int64_t begin = share.begin;
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t size = base + (p < extra ? 1 : 0);
      layout.ranges_.push_back(KeyRange{begin, begin + size});
      layout.owners_.push_back(s);
      begin += size;
    }
  }
  return layout;
}

Result<KeyLayout> KeyLayout::Aligned(int64_t total, int num_servers,
                                     int64_t bucket_floats,
                                     const std::vector<int64_t>& tensor_ends) {
  if (tensor_ends.empty() || bucket_floats <= 0)
    return Bucketed(total, num_servers, bucket_floats);
  for (size_t i = 0; i < tensor_ends.size(); ++i) {
    if (tensor_ends[i] <= (i == 0 ? 0 : tensor_ends[i - 1])) {
      return Status::InvalidArgument("tensor end {} ({}) does not increase", i,
                                     tensor_ends[i]);
    }
  }
  if (tensor_ends.back() != total) {
    return Status::InvalidArgument(
        "the tensors end at {}, the parameter vector at {}", tensor_ends.back(),
        total);
  }
  ASSIGN_OR_RETURN(KeyLayout shares, Balanced(total, num_servers));
  KeyLayout layout;
  layout.total_ = total;
  layout.num_servers_ = num_servers;
  for (int s = 0; s < num_servers; ++s) {
    const KeyRange share = shares.range(s);
    // The tensors' pieces inside the share, end to end.
    int64_t begin = share.begin;  // of the range being filled
    int64_t at = share.begin;     // of the next piece
    auto end_of_piece =
        std::upper_bound(tensor_ends.begin(), tensor_ends.end(), share.begin);
    while (at < share.end) {
      const int64_t piece_end = std::min(share.end, *end_of_piece);
      if (at > begin && piece_end - begin > bucket_floats) {
        // The piece does not fit: the range so far is done.
        layout.ranges_.push_back(KeyRange{begin, at});
        layout.owners_.push_back(s);
        begin = at;
      }
      at = piece_end;
      ++end_of_piece;
    }
    layout.ranges_.push_back(KeyRange{begin, share.end});
    layout.owners_.push_back(s);
  }
  // The ranges that hold part of the first tensor are filled last, when the
  // backward pass ends. If they are nearly the whole model, no range can
  // travel early enough to hide much: one range per server costs fewer
  // messages than ranges that would be ready all at once.
  int64_t last_filled = 0;
  for (const KeyRange& r : layout.ranges_)
    if (r.begin < tensor_ends.front()) last_filled += r.size();
  if (last_filled >= total - total / kOverlapWorthCutting) return shares;
  return layout;
}

std::vector<KeyRange> KeyLayout::RangesOf(int server) const {
  std::vector<KeyRange> out;
  for (size_t i = 0; i < ranges_.size(); ++i)
    if (owners_[i] == server) out.push_back(ranges_[i]);
  return out;
}

KeyRange KeyLayout::ShareOf(int server) const {
  const std::vector<KeyRange> r = RangesOf(server);
  return r.empty() ? KeyRange{} : KeyRange{r.front().begin, r.back().end};
}

int KeyLayout::RangeOf(int64_t key) const {
  auto it =
      std::upper_bound(ranges_.begin(), ranges_.end(), key,
                       [](int64_t k, const KeyRange& r) { return k < r.end; });
  return static_cast<int>(it - ranges_.begin());
}

std::string KeyLayout::ToString() const {
  std::string s;
  for (int server = 0; server < num_servers_; ++server) {
    const KeyRange share = ShareOf(server);
    const size_t pieces = RangesOf(server).size();
    s += fmt::format(
        "{}server {}: [{}, {}){}", server ? ", " : "", server, share.begin,
        share.end,
        pieces > 1 ? fmt::format(" in {} ranges", pieces) : std::string());
  }
  return s;
}

}  // namespace strata

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
// cut into `num_servers` contiguous shares whose sizes differ by at most one
// key (a large tensor is split across servers, so no server gets more than
// its share); share i belongs to server i. A share may itself be cut into
// several ranges (Bucketed: layer-wise pipelining, docs/design/pipelining.md),
// each pushed, applied and pulled on its own; the ranges are in key order, so a
// server's ranges are consecutive. Immutable; thread-safe.
class KeyLayout {
 public:
  // One range per server. InvalidArgument if total < 1, num_servers < 1 or
  // num_servers > total.
  static Result<KeyLayout> Balanced(int64_t total, int num_servers);
  // Balanced's shares, each cut into the fewest ranges of at most
  // `bucket_floats` keys (sizes differing by at most one); bucket_floats
  // <= 0 is Balanced.
  static Result<KeyLayout> Bucketed(int64_t total, int num_servers,
                                    int64_t bucket_floats);
  // Balanced's shares cut at the model's tensor boundaries, as PyTorch DDP
  // buckets gradients: consecutive tensors (`tensor_ends`: the end offset
  // of each tensor in the flat vector, increasing, the last = total) go
  // into one range while it holds at most `bucket_floats` keys; a tensor
  // larger than that is a range of its own (cut only where a share ends).
  // So a layer's gradient is pushed as soon as the backward pass has it,
  // and a large tensor is one message. Where the ranges holding part of the
  // first tensor (the last the backward pass fills) hold all the keys but
  // total / kOverlapWorthCutting or fewer, Balanced: nothing worth hiding
  // would travel early (an MLP's first layer is 99 % of it). Empty
  // `tensor_ends` is Bucketed; bucket_floats <= 0 is Balanced.
  // InvalidArgument for ends that are not increasing or do not end at
  // `total`.
  static constexpr int64_t kOverlapWorthCutting = 10;
  static Result<KeyLayout> Aligned(int64_t total, int num_servers,
                                   int64_t bucket_floats,
                                   const std::vector<int64_t>& tensor_ends);

  int64_t total() const { return total_; }
  int num_ranges() const { return static_cast<int>(ranges_.size()); }
  int num_servers() const { return num_servers_; }
  const KeyRange& range(int i) const { return ranges_[i]; }
  const std::vector<KeyRange>& ranges() const { return ranges_; }
  // The server that owns range i.
  int owner(int i) const { return owners_[i]; }
  // Server `server`'s ranges, in key order, and its whole share.
  std::vector<KeyRange> RangesOf(int server) const;
  KeyRange ShareOf(int server) const;
  // The range that holds `key` (0 <= key < total()).
  int RangeOf(int64_t key) const;
  std::string ToString() const;

 private:
  int64_t total_ = 0;
  int num_servers_ = 0;
  std::vector<KeyRange> ranges_;
  std::vector<int> owners_;  // owners_[i]: the server of ranges_[i]
};

}  // namespace strata

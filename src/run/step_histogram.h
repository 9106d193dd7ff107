// A worker's step times as a histogram (the summary's straggler table,
// docs/design/timeline.md): buckets 5% wide from 10 us to about an hour,
// so percentiles are within 2.5% of the true ones at any length of run, in
// a fixed 1.6 KB.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace strata {

class StepHistogram {
 public:
  static constexpr int kBuckets = 400;
  static constexpr double kLowest = 1e-5;  // seconds: bucket 0's lower edge
  static constexpr double kRatio = 1.05;

  void Add(double seconds) {
    int b = 0;
    if (seconds > kLowest)
      b = static_cast<int>(std::log(seconds / kLowest) / std::log(kRatio));
    if (b >= kBuckets) b = kBuckets - 1;
    ++counts_[static_cast<size_t>(b)];
    ++total_;
  }
  int64_t count() const { return total_; }
  // The q-quantile (0 < q <= 1), as its bucket's geometric middle; 0 when
  // empty.
  double Quantile(double q) const {
    if (total_ == 0) return 0;
    const double want = q * static_cast<double>(total_);
    int64_t seen = 0;
    for (int b = 0; b < kBuckets; ++b) {
      seen += counts_[static_cast<size_t>(b)];
      if (static_cast<double>(seen) >= want)
        return kLowest * std::pow(kRatio, b + 0.5);
    }
    return kLowest * std::pow(kRatio, kBuckets - 0.5);
  }
  // Sparse: [[bucket, count], ...].
  nlohmann::json ToJson() const {
    nlohmann::json j = nlohmann::json::array();
    for (int b = 0; b < kBuckets; ++b)
      if (counts_[static_cast<size_t>(b)] > 0)
        j.push_back({b, counts_[static_cast<size_t>(b)]});
    return j;
  }
  // What ToJson wrote; entries out of range are ignored.
  static StepHistogram FromJson(const nlohmann::json& j) {
    StepHistogram h;
    if (!j.is_array()) return h;
    for (const auto& e : j) {
      if (!e.is_array() || e.size() != 2) continue;
      const int b = e[0].get<int>();
      const int64_t n = e[1].get<int64_t>();
      if (b < 0 || b >= kBuckets || n < 0) continue;
      h.counts_[static_cast<size_t>(b)] += static_cast<uint32_t>(n);
      h.total_ += n;
    }
    return h;
  }

 private:
  std::array<uint32_t, kBuckets> counts_{};
  int64_t total_ = 0;
};

}  // namespace strata

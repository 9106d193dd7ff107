#include "sharding/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/fs.h"

namespace strata {
namespace {

using nlohmann::json;

// Quantile q of sorted values, linear interpolation (numpy's default).
double Quantile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return static_cast<double>(sorted[lo]) * (1 - frac) +
         static_cast<double>(sorted[hi]) * frac;
}

}  // namespace

json MakeShardReport(const ShardPlan& plan,
                     const std::vector<int64_t>& labels) {
  STRATA_CHECK(static_cast<int64_t>(labels.size()) == plan.num_examples);
  const int64_t classes = plan.num_classes;
  const int n = static_cast<int>(plan.workers.size());

  std::vector<int64_t> global(static_cast<size_t>(classes), 0);
  for (int64_t y : labels) ++global[y];
  std::vector<int64_t> bcast(static_cast<size_t>(classes), 0);
  for (int64_t i : plan.broadcast) ++bcast[labels[i]];

  json report;
  report["method"] = ShardMethodName(plan.options.method);
  report["num_workers"] = n;
  report["seed"] = plan.options.seed;
  report["num_examples"] = plan.num_examples;
  report["num_classes"] = classes;

  std::vector<std::vector<int64_t>> counts(static_cast<size_t>(n));
  json per_worker = json::array();
  std::vector<double> tv(static_cast<size_t>(n), 0.0);
  for (int w = 0; w < n; ++w) {
    counts[w] = bcast;
    for (int64_t i : plan.workers[w]) ++counts[w][labels[i]];
    int64_t total = 0;
    for (int64_t c : counts[w]) total += c;
    double d = 0;
    for (int64_t c = 0; c < classes; ++c) {
      const double pw =
          total > 0 ? static_cast<double>(counts[w][c]) / total : 0.0;
      const double pg = static_cast<double>(global[c]) / plan.num_examples;
      d += std::fabs(pw - pg);
    }
    tv[w] = 0.5 * d;
    per_worker.push_back(
        json{{"worker", w}, {"count", total}, {"class_counts", counts[w]}});
  }
  report["per_worker"] = std::move(per_worker);

  json per_class = json::array();
  for (int64_t c = 0; c < classes; ++c) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int w = 0; w < n; ++w) v[w] = counts[w][c];
    std::sort(v.begin(), v.end());
    per_class.push_back(json{{"class", c},
                             {"min", v.empty() ? 0 : v.front()},
                             {"q1", Quantile(v, 0.25)},
                             {"median", Quantile(v, 0.5)},
                             {"q3", Quantile(v, 0.75)},
                             {"max", v.empty() ? 0 : v.back()}});
  }
  report["per_class"] = std::move(per_class);

  double tv_max = 0, tv_sum = 0;
  for (double t : tv) tv_max = std::max(tv_max, t), tv_sum += t;
  report["tv_distance"] = json{
      {"per_worker", tv}, {"max", tv_max}, {"mean", n > 0 ? tv_sum / n : 0.0}};
  report["broadcast_size"] = plan.broadcast.size();

  int64_t sparse = 0, sparse_points = 0;
  if (!plan.cluster_ids.empty()) {
    std::vector<int64_t> sizes(static_cast<size_t>(plan.num_clusters), 0);
    for (int32_t c : plan.cluster_ids) ++sizes[c];
    for (int64_t s : sizes) {
      if (s > 0 && s < n) ++sparse, sparse_points += s;
    }
  }
  report["sparse_clusters"] =
      json{{"count", sparse},
           {"mean_size", sparse > 0 ? static_cast<double>(sparse_points) /
                                          static_cast<double>(sparse)
                                    : 0.0}};
  report["num_clusters"] = plan.num_clusters;
  const ShardTimings& t = plan.timings;
  report["timings_s"] = json{
      {"load", t.load},     {"fingerprint", t.fingerprint}, {"pca", t.pca},
      {"kmeans", t.kmeans}, {"assign", t.assign},           {"total", t.total}};
  return report;
}

std::string FormatShardReport(const json& r) {
  std::string out;
  const int64_t classes = r.value("num_classes", int64_t{0});
  const bool wide = classes <= 20;
  out += fmt::format(
      "sharding: {}, {} workers, seed {}, {} examples, {} classes\n",
      r.value("method", ""), r.value("num_workers", 0),
      r.value("seed", uint64_t{0}), r.value("num_examples", int64_t{0}),
      classes);
  out += fmt::format("{:>6} {:>9}", "worker", "count");
  if (wide)
    for (int64_t c = 0; c < classes; ++c)
      out += fmt::format(" {:>7}", fmt::format("c{}", c));
  out += fmt::format(" {:>8}\n", "TV");
  const json& tv = r.at("tv_distance");
  for (const json& w : r.at("per_worker")) {
    const int idx = w.at("worker").get<int>();
    out += fmt::format("{:>6} {:>9}", idx, w.at("count").get<int64_t>());
    if (wide)
      for (const json& c : w.at("class_counts"))
        out += fmt::format(" {:>7}", c.get<int64_t>());
    out += fmt::format(" {:>8.5f}\n", tv.at("per_worker")[idx].get<double>());
  }
  out += fmt::format("\n{:>6} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "class", "min",
                     "q1", "median", "q3", "max");
  for (const json& c : r.at("per_class")) {
    out += fmt::format("{:>6} {:>9} {:>9.1f} {:>9.1f} {:>9.1f} {:>9}\n",
                       c.at("class").get<int64_t>(), c.at("min").get<int64_t>(),
                       c.at("q1").get<double>(), c.at("median").get<double>(),
                       c.at("q3").get<double>(), c.at("max").get<int64_t>());
  }
  out += fmt::format(
      "\nTV distance to the global class distribution: max "
      "{:.5f}, mean {:.5f}\n",
      tv.at("max").get<double>(), tv.at("mean").get<double>());
  const json& sp = r.at("sparse_clusters");
  out += fmt::format(
      "broadcast: {} examples; clusters: {}; sparse clusters (< {} points): "
      "{}, mean size {:.1f}\n",
      r.value("broadcast_size", int64_t{0}),
      r.value("num_clusters", int64_t{0}), r.value("num_workers", 0),
      sp.at("count").get<int64_t>(), sp.at("mean_size").get<double>());
  const json& t = r.at("timings_s");
  out += fmt::format(
      "time (s): load {:.3f}, fingerprint {:.3f}, pca {:.3f}, kmeans {:.3f}, "
      "assign {:.3f}, total {:.3f}\n",
      t.value("load", 0.0), t.value("fingerprint", 0.0), t.value("pca", 0.0),
      t.value("kmeans", 0.0), t.value("assign", 0.0), t.value("total", 0.0));
  return out;
}

Status WriteShardReport(const json& report, const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    RETURN_IF_ERROR(MakeDirs(path.substr(0, slash)));
  }
  return WriteFileAtomic(path, report.dump(2) + "\n");
}

}  // namespace strata

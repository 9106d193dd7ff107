// Sharding speed, side by side in one run on the same data:
//  (a) mod, random and stratified on 1,000,000 labels (target: each < 0.5 s);
//  (b) distribution-aware (randomized PCA to 50 dimensions + KMeans with 20
//      clusters, max_iter 150, n_init 1, then the assignment) on a clustered
//      synthetic 50,000 x 3,072 float32 array, against scikit-learn's
//      PCA(50, svd_solver="randomized") + KMeans(20, max_iter=150, n_init=1)
//      on the same array (saved as .npy and run with /usr/bin/python3).
//      Ours runs twice per repeat: with the default block-Krylov range
//      finder and with scikit-learn's power iterations, and the variance each
//      PCA kept is printed next to its time, so a faster PCA that kept less
//      would show.
//      Target: ours >= 2x faster end to end, KMeans inertia (in each one's
//      PCA space) within 2% of scikit-learn's.
// Prints the median over --reps runs of each.
//
//   build/bench/shard_bench [--reps 3] [--n 50000] [--d 3072] [--labels
//   1000000]
//                           [--skip-sklearn] [--tmp DIR]
// The scikit-learn comparison needs Debian's python3-sklearn; without it the
// bench says so and prints our figures only.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "common/fs.h"
#include "data/dataset.h"
#include "sharding/linalg.h"
#include "sharding/methods.h"

namespace {

using namespace strata;
using bench::Median;

struct Flags {
  int reps = 3;
  int64_t n = 50000;
  int64_t d = 3072;
  int64_t labels = 1000000;
  bool skip_sklearn = false;
  std::string tmp;
};

// 1,000,000 labels over 100 classes with skewed frequencies.
Dataset LabelsOnly(int64_t n) {
  Dataset d;
  d.name = "labels";
  d.num_classes = 100;
  d.labels.resize(n);
  d.features.assign(n, 0.0f);
  std::mt19937_64 rng(1);
  for (int64_t i = 0; i < n; ++i) {
    const double u = UniformDouble(rng);
    d.labels[i] = static_cast<int64_t>(100 * u * u);
  }
  return d;
}

// 30 Gaussian blobs of uneven sizes and spreads around centres with
// per-coordinate spread 0.08, plus an offset of 0.5 (like pixel data):
// more blobs than the 20 clusters asked for, so KMeans has real choices.
Dataset Clustered(int64_t n, int64_t d) {
  const int blobs = 30;
  std::mt19937_64 rng(7);
  std::vector<float> centres(blobs * d);
  FillGaussian(rng, centres.data(), blobs * d);
  for (float& c : centres) c = 0.5f + 0.08f * c;
  std::vector<double> weight(blobs), spread(blobs);
  double total = 0;
  for (int b = 0; b < blobs; ++b) {
    weight[b] = 0.3 + UniformDouble(rng);
    spread[b] = 0.7 + 0.6 * UniformDouble(rng);
    total += weight[b];
  }
  std::vector<int> blob_of(n);
  for (int64_t i = 0; i < n; ++i) {
    double r = UniformDouble(rng) * total;
    int b = 0;
    while (b + 1 < blobs && r >= weight[b]) r -= weight[b], ++b;
    blob_of[i] = b;
  }
  Dataset data;
  data.name = "clustered";
  data.width = d;
  data.num_classes = 10;
  data.labels.resize(n);
  data.features.resize(static_cast<size_t>(n * d));
  ParallelChunks(n, 1024, 0, [&](int64_t c, int64_t begin, int64_t end) {
    std::mt19937_64 r(MixSeed(11, static_cast<uint64_t>(c)));
    for (int64_t i = begin; i < end; ++i) {
      const int b = blob_of[i];
      float* row = data.features.data() + i * d;
      FillGaussian(r, row, d);
      for (int64_t j = 0; j < d; ++j)
        row[j] = centres[b * d + j] + static_cast<float>(spread[b]) * row[j];
      data.labels[i] = b % 10;
    }
  });
  return data;
}

void WriteNpy(const std::string& path, const Dataset& d) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(d.size()) + ", " +
                       std::to_string(d.example_size()) + "), }";
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&len), 2);
  out << header;
  out.write(reinterpret_cast<const char*>(d.features.data()),
            static_cast<std::streamsize>(d.features.size() * sizeof(float)));
  if (!out) bench::Die("cannot write " + path);
}

constexpr const char* kSklearnScript = R"PY(
import json, sys, time
import numpy as np
from sklearn.cluster import KMeans
from sklearn.decomposition import PCA
x = np.load(sys.argv[1])
for rep in range(int(sys.argv[2])):
    t0 = time.perf_counter()
    pca = PCA(n_components=50, svd_solver="randomized", random_state=rep)
    z = pca.fit_transform(x)
    t1 = time.perf_counter()
    km = KMeans(n_clusters=20, max_iter=150, n_init=1, random_state=rep).fit(z)
    t2 = time.perf_counter()
    # Not timed: the clustering's sum of squares in the original space.
    sse = 0.0
    for c in range(20):
        xc = x[km.labels_ == c].astype(np.float64)
        if len(xc):
            sse += float(((xc - xc.mean(axis=0)) ** 2).sum())
    print(json.dumps({"pca": t1 - t0, "kmeans": t2 - t1, "total": t2 - t0,
                      "inertia": float(km.inertia_), "iter": int(km.n_iter_),
                      "variance": float(pca.explained_variance_.sum()),
                      "sse": sse}),
          flush=True)
)PY";

// Sum of squared distances of every example to the mean of its cluster, in
// the original space (double precision): the clustering's quality whatever
// subspace the PCA chose.
double FullSpaceSse(const Dataset& d, const std::vector<int32_t>& ids,
                    int64_t k) {
  const int64_t dim = d.example_size();
  std::vector<double> sum(static_cast<size_t>(k * dim), 0.0);
  std::vector<int64_t> count(static_cast<size_t>(k), 0);
  double sq = 0;
  for (int64_t i = 0; i < d.size(); ++i) {
    const float* x = d.example(i);
    double* s = sum.data() + ids[i] * dim;
    for (int64_t j = 0; j < dim; ++j) {
      s[j] += x[j];
      sq += static_cast<double>(x[j]) * x[j];
    }
    ++count[ids[i]];
  }
  for (int64_t c = 0; c < k; ++c) {
    if (count[c] == 0) continue;
    double norm = 0;
    for (int64_t j = 0; j < dim; ++j)
      norm += sum[c * dim + j] * sum[c * dim + j];
    sq -= norm / static_cast<double>(count[c]);
  }
  return sq;
}

bool HaveSklearn() {
  return std::system("/usr/bin/python3 -c 'import sklearn' >/dev/null 2>&1") ==
         0;
}

void BenchLabels(const Flags& f) {
  const Dataset d = LabelsOnly(f.labels);
  std::printf("(a) %lld labels, 100 classes, 12 workers (median of %d)\n",
              static_cast<long long>(f.labels), f.reps);
  std::printf("%-12s %12s %12s\n", "method", "assign_s", "total_s");
  for (ShardMethod m :
       {ShardMethod::kMod, ShardMethod::kRandom, ShardMethod::kStratified}) {
    std::vector<double> assign, total;
    for (int r = 0; r < f.reps; ++r) {
      ShardOptions o;
      o.method = m;
      o.num_workers = 12;
      o.seed = static_cast<uint64_t>(r + 1);
      auto plan = ComputeShardPlan(d, o);
      bench::Check(plan.status(), "sharding");
      assign.push_back(plan->timings.assign);
      total.push_back(plan->timings.total);
    }
    const double t = Median(total);
    std::printf("%-12s %12.4f %12.4f  %s\n", ShardMethodName(m), Median(assign),
                t, t < 0.5 ? "(< 0.5 s: ok)" : "(target 0.5 s NOT met)");
  }
  std::printf(
      "total = assignment + per-worker lists + dataset fingerprint (md5 of "
      "labels and features)\n\n");
}

void BenchDistributionAware(const Flags& f) {
  std::printf(
      "(b) distribution-aware on %lld x %lld float32 (30 blobs), PCA 50, "
      "KMeans 20, max_iter 150, n_init 1\n",
      static_cast<long long>(f.n), static_cast<long long>(f.d));
  auto t0 = bench::Clock::now();
  const Dataset data = Clustered(f.n, f.d);
  std::printf("data generated in %.1f s\n",
              bench::Seconds(t0, bench::Clock::now()));

  const bool sklearn = !f.skip_sklearn && HaveSklearn();
  std::vector<double> sk_total, sk_pca, sk_kmeans, sk_inertia;
  std::string dir;
  if (sklearn) {
    std::string base = f.tmp.empty() ? (std::getenv("TMPDIR") != nullptr
                                            ? std::getenv("TMPDIR")
                                            : "/tmp")
                                     : f.tmp;
    std::string tmpl = base + "/strata_shard_bench_XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) bench::Die("mkdtemp " + tmpl);
    dir = tmpl;
    WriteNpy(dir + "/x.npy", data);
    bench::Check(WriteFileAtomic(dir + "/baseline.py", kSklearnScript),
                 "writing the baseline script");
  } else if (!f.skip_sklearn) {
    std::printf(
        "scikit-learn not found for /usr/bin/python3 (Debian: apt-get install "
        "python3-sklearn): skipping the comparison\n");
  }

  // Alternate: one scikit-learn run, then ours with each PCA solver, so all
  // see the same machine load.
  struct Series {
    explicit Series(std::string n) : name(std::move(n)) {}
    std::string name;
    std::vector<double> total, pca, kmeans, assign, inertia, variance, sse;
    std::vector<int> iters;
  };
  Series sk("scikit-learn"), krylov("strata krylov"), power("strata power");
  for (int r = 0; r < f.reps; ++r) {
    if (sklearn) {
      const std::string cmd =
          "/usr/bin/python3 " + dir + "/baseline.py " + dir + "/x.npy 1 2>&1";
      FILE* p = popen(cmd.c_str(), "r");
      if (p == nullptr) bench::Die("cannot run python3");
      char line[4096];
      bool got = false;
      while (fgets(line, sizeof(line), p) != nullptr) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.contains("total")) {
          std::fputs(line, stdout);
          continue;
        }
        sk.total.push_back(j["total"]);
        sk.pca.push_back(j["pca"]);
        sk.kmeans.push_back(j["kmeans"]);
        sk.assign.push_back(0);
        sk.inertia.push_back(j["inertia"]);
        sk.variance.push_back(j["variance"]);
        sk.sse.push_back(j["sse"]);
        sk.iters.push_back(j["iter"]);
        got = true;
      }
      if (pclose(p) != 0 || !got)
        bench::Die("the scikit-learn baseline failed");
      std::printf(
          "  run %d %-14s %6.2f s (pca %.2f, kmeans %.2f in %d "
          "iterations), variance kept %.6g, inertia %.6g, full-space SSE "
          "%.6g\n",
          r + 1, sk.name.c_str(), sk.total.back(), sk.pca.back(),
          sk.kmeans.back(), sk.iters.back(), sk.variance.back(),
          sk.inertia.back(), sk.sse.back());
    }
    for (Series* s : {&krylov, &power}) {
      ShardOptions o;
      o.method = ShardMethod::kDistributionAware;
      o.num_workers = 12;
      o.seed = static_cast<uint64_t>(r + 1);
      o.clusters = 20;
      o.pca_components = 50;
      o.pca_solver =
          s == &krylov ? PcaSolver::kBlockKrylov : PcaSolver::kPowerIteration;
      o.max_iter = 150;
      o.n_init = 1;
      auto plan = ComputeShardPlan(data, o);
      bench::Check(plan.status(), "distribution-aware sharding");
      const ShardTimings& t = plan->timings;
      s->total.push_back(t.pca + t.kmeans + t.assign);
      s->pca.push_back(t.pca);
      s->kmeans.push_back(t.kmeans);
      s->assign.push_back(t.assign);
      s->inertia.push_back(plan->kmeans_inertia);
      s->variance.push_back(plan->pca_variance);
      s->iters.push_back(plan->kmeans_iterations);
      s->sse.push_back(FullSpaceSse(data, plan->cluster_ids, 20));
      std::printf(
          "  run %d %-14s %6.2f s (pca %.2f, kmeans %.2f in %d "
          "iterations, assign %.3f; fingerprint %.2f not counted), "
          "variance kept %.6g, inertia %.6g, full-space SSE %.6g\n",
          r + 1, s->name.c_str(), s->total.back(), t.pca, t.kmeans,
          plan->kmeans_iterations, t.assign, t.fingerprint, s->variance.back(),
          s->inertia.back(), s->sse.back());
    }
    std::fflush(stdout);
  }
  if (!dir.empty()) std::filesystem::remove_all(dir);

  std::printf("\nmedians over %d runs:\n%-14s %9s %9s %9s %9s %14s %14s %14s\n",
              f.reps, "", "total_s", "pca_s", "kmeans_s", "assign_s",
              "variance_kept", "inertia(pca)", "sse(full)");
  for (const Series* s : {&krylov, &power, &sk}) {
    if (s->total.empty()) continue;
    std::printf("%-14s %9.2f %9.2f %9.2f %9.3f %14.6g %14.6g %14.6g\n",
                s->name.c_str(), Median(s->total), Median(s->pca),
                Median(s->kmeans), Median(s->assign), Median(s->variance),
                Median(s->inertia), Median(s->sse));
  }
  if (!sklearn) return;
  for (const Series* s : {&krylov, &power}) {
    const double speedup = Median(sk.total) / Median(s->total);
    const double gap = Median(s->inertia) / Median(sk.inertia) - 1;
    std::printf(
        "%s vs scikit-learn: %.2fx faster (target >= 2x: %s); "
        "inertia in its own PCA space %+.2f%% (target within 2%%: %s); "
        "variance kept %+.2f%%; full-space SSE %+.3f%%\n",
        s->name.c_str(), speedup, speedup >= 2 ? "met" : "NOT met", 100 * gap,
        std::fabs(gap) <= 0.02 ? "met" : "NOT met",
        100 * (Median(s->variance) / Median(sk.variance) - 1),
        100 * (Median(s->sse) / Median(sk.sse) - 1));
  }
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) bench::Die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--reps") {
      f.reps = std::atoi(next().c_str());
    } else if (a == "--n") {
      f.n = std::atoll(next().c_str());
    } else if (a == "--d") {
      f.d = std::atoll(next().c_str());
    } else if (a == "--labels") {
      f.labels = std::atoll(next().c_str());
    } else if (a == "--skip-sklearn") {
      f.skip_sklearn = true;
    } else if (a == "--tmp") {
      f.tmp = next();
    } else {
      bench::Die("unknown flag " + a +
                 " (--reps N, --n N, --d N, --labels N, --skip-sklearn, --tmp "
                 "DIR)");
    }
  }
  if (f.reps < 1) bench::Die("--reps must be >= 1");
  BenchLabels(f);
  BenchDistributionAware(f);
  return 0;
}

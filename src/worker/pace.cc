#include "worker/pace.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "common/timeline.h"

namespace strata {

WorkerPace::WorkerPace(const WorkerPaceOptions& options, int index)
    : o_(options),
      index_(index),
      speed_(options.SpeedOf(index)),
      on_(options.on()) {}

double WorkerPace::ExtraSeconds(int64_t it, double compute_s) const {
  if (!on_) return 0;
  // One generator per (seed, worker, step): splitmix-style mixing.
  std::seed_seq seq{static_cast<uint32_t>(o_.seed),
                    static_cast<uint32_t>(o_.seed >> 32),
                    static_cast<uint32_t>(index_), static_cast<uint32_t>(it),
                    static_cast<uint32_t>(static_cast<uint64_t>(it) >> 32)};
  std::mt19937_64 rng(seq);
  double factor = 1.0 / speed_;
  if (o_.noise_sigma > 0) {
    std::normal_distribution<double> normal(0.0, 1.0);
    factor *= std::exp(o_.noise_sigma * normal(rng));
  }
  double extra = std::max(0.0, compute_s * (factor - 1.0));
  if (o_.straggler_probability > 0 && o_.straggler_ms > 0) {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    if (u(rng) < o_.straggler_probability) extra += o_.straggler_ms / 1000.0;
  }
  return extra;
}

void WorkerPace::Stretch(int64_t it, double compute_s, WorkerMetrics& metrics) {
  if (!on_) return;
  metrics.paced = true;
  metrics.speed = speed_;
  owed_s_ += ExtraSeconds(it, compute_s);
  if (owed_s_ <= 0) return;
  const timeline::Span span("paced", "step", it);
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(owed_s_));
  const double slept =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  owed_s_ -= slept;
  metrics.paced_s += slept;
}

}  // namespace strata

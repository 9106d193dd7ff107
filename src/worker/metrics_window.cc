#include "worker/metrics_window.h"

#include <nlohmann/json.hpp>

#include "common/seconds.h"

namespace strata {

Status MetricsWindow::Record(int64_t it, int64_t total, int64_t epoch,
                             double loss, double accuracy, int64_t samples,
                             const StepTimes& t, int64_t version,
                             double data_wait_s, WorkerMetrics& m) {
  m.compute_s += t.compute_s - t.param_wait_s;
  m.comm_s += t.before_s + t.param_wait_s + t.after_s;
  m.iterations = it + 1;
  m.samples += samples;
  m.step_times.Add(t.before_s + t.compute_s + t.after_s);
  loss_ += loss;
  accuracy_ += accuracy;
  ++n_;
  if ((run_dir_ == nullptr && !forward_) ||
      ((it + 1) % log_every_ != 0 && it + 1 != total))
    return Status::Ok();
  const double wall_s = Seconds(start_, std::chrono::steady_clock::now());
  nlohmann::json j{{"worker", index_},         {"step", it + 1},
                   {"epoch", epoch},           {"wall_s", wall_s},
                   {"train_loss", loss_ / n_}, {"train_acc", accuracy_ / n_},
                   {"samples", m.samples},     {"version", version},
                   {"compute_s", m.compute_s}, {"comm_s", m.comm_s},
                   {"workers", workers_}};
  if (data_wait_s >= 0) j["data_wait_s"] = data_wait_s;
  if (m.staleness_count > staleness_count_) {
    // Staleness of the gradients applied since the last line.
    j["staleness_mean"] =
        static_cast<double>(m.staleness_sum - staleness_sum_) /
        static_cast<double>(m.staleness_count - staleness_count_);
    j["staleness_max"] = m.window_staleness_max;
    staleness_sum_ = m.staleness_sum;
    staleness_count_ = m.staleness_count;
    m.window_staleness_max = -1;
  }
  loss_ = accuracy_ = 0;
  n_ = 0;
  if (forward_) return forward_(j.dump());
  return run_dir_->AppendJson("metrics.jsonl", j);
}

}  // namespace strata

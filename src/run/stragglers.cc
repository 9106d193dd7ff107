#include "run/stragglers.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace strata {

std::vector<StragglerRow> StragglerTable(
    const std::vector<std::optional<WorkerMetrics>>& workers) {
  std::vector<StragglerRow> rows;
  double least = std::numeric_limits<double>::infinity();
  for (const auto& w : workers)
    if (w && w->iterations > 0) least = std::min(least, w->comm_s);
  for (const auto& w : workers) {
    if (!w || w->iterations == 0) continue;
    StragglerRow r;
    r.worker = w->index;
    r.steps = w->iterations;
    r.p50_s = w->step_times.Quantile(0.5);
    r.p90_s = w->step_times.Quantile(0.9);
    r.p99_s = w->step_times.Quantile(0.99);
    r.exchange_s = w->comm_s;
    const double total = w->compute_s + w->comm_s;
    r.waiting_share = total > 0 ? (w->comm_s - least) / total : 0.0;
    r.speed = w->paced ? w->speed : 1.0;
    rows.push_back(r);
  }
  return rows;
}

nlohmann::json StragglersToJson(const std::vector<StragglerRow>& rows) {
  nlohmann::json j = nlohmann::json::array();
  for (const StragglerRow& r : rows) {
    j.push_back({{"worker", r.worker},
                 {"steps", r.steps},
                 {"step_p50_s", r.p50_s},
                 {"step_p90_s", r.p90_s},
                 {"step_p99_s", r.p99_s},
                 {"exchange_s", r.exchange_s},
                 {"waiting_share", r.waiting_share},
                 {"speed", r.speed}});
  }
  return j;
}

std::string FormatStragglers(const std::vector<StragglerRow>& rows) {
  std::string out =
      fmt::format("{:>6}  {:>5}  {:>5}  {:>9}  {:>9}  {:>9}  {:>7}", "worker",
                  "speed", "steps", "step p50", "p90", "p99", "waiting");
  for (const StragglerRow& r : rows) {
    out += fmt::format(
        "\n{:>6}  {:>5.2f}  {:>5}  {:>7.1f}ms  {:>7.1f}ms  {:>7.1f}ms  "
        "{:>6.1f}%",
        r.worker, r.speed, r.steps, r.p50_s * 1e3, r.p90_s * 1e3, r.p99_s * 1e3,
        r.waiting_share * 100);
  }
  return out;
}

}  // namespace strata

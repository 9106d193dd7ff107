#include "worker/step_profile.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "common/log.h"
#include "run/run_dir.h"

namespace strata {
namespace {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

// LibTorch's profiler is one per process (Kineto's trace is global).
std::atomic<bool> g_profiling{false};

// LibTorch 1.13 reports microseconds (durationUs); 2.x nanoseconds
// (durationNs). The first overload wins where both exist.
template <typename E>
auto DurationUs(const E& e, int) -> decltype(e.durationNs(), double()) {
  return static_cast<double>(e.durationNs()) / 1e3;
}
template <typename E>
double DurationUs(const E& e, long) {
  return static_cast<double>(e.durationUs());
}

std::set<ActivityType> Activities(bool gpu) {
  std::set<ActivityType> a{ActivityType::CPU};
  if (gpu) a.insert(ActivityType::CUDA);
  return a;
}

}  // namespace

StepProfiler::StepProfiler(int64_t first, int64_t count,
                           const RunDirectory* run_dir, std::string who,
                           bool gpu)
    : first_(first),
      count_(count),
      run_dir_(run_dir),
      who_(std::move(who)),
      gpu_(gpu) {}

StepProfiler::~StepProfiler() { Stop(); }

void StepProfiler::Stop() {
  if (count_ <= 0 || done_) return;
  done_ = true;
  if (!on_) {
    LogWarning("profile {}: the steps ended before step {}: nothing recorded",
               who_, first_);
    return;
  }
  Status st;
  try {
    st = Finish();
  } catch (const std::exception& e) {
    st = Status::Internal("{}", e.what());
  }
  if (!st.ok()) LogWarning("profile {}: {}", who_, st.message());
}

void StepProfiler::BeforeStep(int64_t step) {
  // A resumed run may start inside the window.
  if (count_ <= 0 || done_ || on_ || step < first_ || step >= first_ + count_)
    return;
  bool expected = false;
  if (!g_profiling.compare_exchange_strong(expected, true)) {
    LogWarning(
        "profile {}: another profile is running in this process; "
        "not recording this one",
        who_);
    done_ = true;
    return;
  }
  try {
    const ProfilerConfig config(ProfilerState::KINETO);
    prof::prepareProfiler(config, Activities(gpu_));
    prof::enableProfiler(config, Activities(gpu_));
  } catch (const c10::Error& e) {
    LogWarning("profile {}: LibTorch's profiler did not start: {}", who_,
               e.what_without_backtrace());
    g_profiling = false;
    done_ = true;
    return;
  }
  on_ = true;
  steps_ = 0;
  first_recorded_ = step;
  LogInfo("profile {}: recording steps {} to {}", who_, step,
          first_ + count_ - 1);
}

void StepProfiler::AfterStep(int64_t step) {
  if (!on_) return;
  ++steps_;
  if (step >= first_ + count_ - 1) Stop();
}

Status StepProfiler::Finish() {
  on_ = false;
  std::unique_ptr<prof::ProfilerResult> result;
  try {
    result = prof::disableProfiler();
  } catch (const c10::Error& e) {
    g_profiling = false;
    return Status::Internal("LibTorch's profiler did not stop: {}",
                            e.what_without_backtrace());
  }
  g_profiling = false;
  if (result == nullptr || run_dir_ == nullptr) return Status::Ok();
  // Inclusive time per operator, thread and device: a scope's time holds
  // the operators it called.
  struct Sum {
    int64_t calls = 0;
    double us = 0;
  };
  std::map<std::tuple<std::string, std::string, uint64_t>, Sum> sums;
  for (const auto& e : result->events()) {
    const std::string device = c10::DeviceTypeName(e.deviceType(), true);
    Sum& s = sums[{e.name(), device, e.startThreadId()}];
    ++s.calls;
    s.us += DurationUs(e, 0);
  }
  std::vector<std::pair<std::tuple<std::string, std::string, uint64_t>, Sum>>
      rows(sums.begin(), sums.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.second.us > b.second.us;
  });
  const double n = static_cast<double>(std::max<int64_t>(1, steps_));
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& [key, s] : rows) {
    ops.push_back({{"name", std::get<0>(key)},
                   {"device", std::get<1>(key)},
                   {"thread", std::get<2>(key)},
                   {"calls", s.calls},
                   {"total_us", s.us},
                   {"per_step_us", s.us / n}});
  }
  bool traced = false;
  const std::string trace = run_dir_->File("trace-" + who_ + ".json");
  try {
    result->save(trace);
    traced = true;
  } catch (const c10::Error&) {
    // No Kineto in this LibTorch (Debian's 1.13): the table only.
  }
  RETURN_IF_ERROR(run_dir_->WriteJson("profile-" + who_ + ".json",
                                      {{"who", who_},
                                       {"first_step", first_recorded_},
                                       {"steps", steps_},
                                       {"trace", traced ? trace : ""},
                                       {"ops", ops}}));
  std::string top;
  for (size_t i = 0; i < std::min<size_t>(rows.size(), 8); ++i) {
    top += fmt::format("{}{} {:.0f} us", i ? ", " : "",
                       std::get<0>(rows[i].first), rows[i].second.us / n);
  }
  LogInfo("profile {}: {} steps, per step: {}; {}", who_, steps_, top,
          run_dir_->File("profile-" + who_ + ".json"));
  return Status::Ok();
}

}  // namespace strata

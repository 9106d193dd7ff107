#include "transport/spin_wait.h"

#include <atomic>
#include <cstdint>

namespace strata {
namespace {
std::atomic<int64_t> g_spin_us{0};
}  // namespace

void SetSpinWait(std::chrono::microseconds budget) {
  g_spin_us.store(budget.count() > 0 ? budget.count() : 0,
                  std::memory_order_relaxed);
}

std::chrono::microseconds SpinWaitBudget() {
  return std::chrono::microseconds(g_spin_us.load(std::memory_order_relaxed));
}

}  // namespace strata

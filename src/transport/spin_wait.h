#pragma once

#include <chrono>
#include <thread>
#include <utility>

namespace strata {

// Spin-then-block waiting (cluster.spin_us, docs/design/transport.md "Waiting
// in process"). A thread about to sleep until a message or a reply arrives
// first polls for up to this long, so that an answer which comes within the
// window is seen at once instead of after a wake-up. Waking a sleeping
// thread is slow where the idle CPU it sleeps on must itself be woken, as
// on a virtual machine. Used where the thread waited on is one of ours in
// the same process: the in-process transport's RPC waits (RpcCall::Wait and
// the endpoint's thread, rpc.cc). Process-wide, set from the run config for
// the length of a run (TrainCluster); zero (the default) sleeps at once.
void SetSpinWait(std::chrono::microseconds budget);
std::chrono::microseconds SpinWaitBudget();

// Sets the process-wide budget while it lives, and the previous one again
// when it goes (TrainCluster for one run; tests).
class ScopedSpinWait {
 public:
  explicit ScopedSpinWait(std::chrono::microseconds budget)
      : previous_(SpinWaitBudget()) {
    SetSpinWait(budget);
  }
  ~ScopedSpinWait() { SetSpinWait(previous_); }
  ScopedSpinWait(const ScopedSpinWait&) = delete;
  ScopedSpinWait& operator=(const ScopedSpinWait&) = delete;

 private:
  const std::chrono::microseconds previous_;
};

namespace spin_internal {
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
}  // namespace spin_internal

// Polls `ready` until it returns true (returns true) or `budget` is spent
// (returns false; at once, without polling, for a budget of zero). Between
// polls the CPU is told the thread spins; every 64th poll the thread yields
// to any other runnable thread, so that on a busy machine a spinner gives
// its core to the thread it waits for rather than holding it.
template <typename Ready>
bool SpinUntil(Ready&& ready, std::chrono::microseconds budget) {
  if (budget.count() <= 0) return false;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point end = Clock::now() + budget;
  for (unsigned i = 1;; ++i) {
    if (ready()) return true;
    if (i % 64 == 0) {
      if (Clock::now() >= end) return false;
      std::this_thread::yield();
    } else {
      spin_internal::CpuRelax();
    }
  }
}

// The same with the process-wide budget (SetSpinWait()).
template <typename Ready>
bool SpinUntil(Ready&& ready) {
  return SpinUntil(std::forward<Ready>(ready), SpinWaitBudget());
}

}  // namespace strata

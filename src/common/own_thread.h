#pragma once

#include <exception>
#include <optional>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>

#include "common/status.h"

namespace strata {

// Runs fn() on a short-lived thread of its own, waits for it, and returns
// its result. fn returns a Status or a Result<T>. An exception it throws
// does not cross back: it comes back as an Internal status with its
// message, as does a thread that cannot be started.
//
// What it is for: LibTorch work on the CPU done now and then by a thread
// that lives all run long. The first parallel operator on a thread starts
// an OpenMP team that libgomp keeps until the thread ends. An idle team
// left beside the workers' teams counts against the cores; once libgomp
// counts more OpenMP threads than cores, no thread spins between parallel
// regions and every worker's region waits for sleeping threads to wake
// (docs/results/2026-11-26-gpu-h200-profile.md, "The second H200 session"). On
// a thread of its own, the team ends with the work. LibTorch's thread count is
// process-wide (at::set_num_threads), so the team has the size the caller's
// would have had. Thread-local state (grad mode, a CUDA stream) is not carried
// over: use it for CPU work that sets up its own.
template <typename Fn>
std::invoke_result_t<Fn&> OnThreadOfItsOwn(Fn&& fn) {
  using R = std::invoke_result_t<Fn&>;
  std::optional<R> out;
  try {
    std::thread([&] {
      try {
        out.emplace(fn());
      } catch (const std::exception& e) {
        out.emplace(Status::Internal("{}", e.what()));
      } catch (...) {
        out.emplace(
            Status::Internal("an exception that is not a "
                             "std::exception"));
      }
    }).join();
  } catch (const std::system_error& e) {
    return R(Status::Internal("cannot start a thread: {}", e.what()));
  }
  return std::move(*out);
}

}  // namespace strata

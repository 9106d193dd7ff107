#pragma once

#include <exception>
#include <optional>
#include <thread>
#include <utility>

namespace strata {

// Runs fn() on a short-lived thread of its own, waits for it, and returns
// its result (an exception it throws is thrown here). For LibTorch work on
// the CPU done now and then by a thread that lives all run long: the first
// parallel operator on a thread starts an OpenMP team that libgomp keeps
// until the thread ends. An idle team left beside the workers' teams counts
// against the cores; once libgomp counts more OpenMP threads than cores, no
// thread spins between parallel regions and every worker's region waits for
// sleeping threads to wake (docs/gpu.md, "The second H200 session"). On a
// thread of its own, the team ends with the work. LibTorch's thread count
// is process-wide (at::set_num_threads), so the new thread's team has the
// size the caller's would have had. Thread-local state (grad mode, a CUDA
// stream) is not carried over: use it for CPU work that sets up its own.
template <typename Fn>
auto OnThreadOfItsOwn(Fn&& fn) -> decltype(fn()) {
  std::optional<decltype(fn())> out;
  std::exception_ptr error;
  std::thread([&] {
    try {
      out.emplace(fn());
    } catch (...) {
      error = std::current_exception();
    }
  }).join();
  if (error) std::rethrow_exception(error);
  return std::move(*out);
}

}  // namespace strata

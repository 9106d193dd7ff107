#include "models/cuda_graph.h"

#include "common/log.h"
#include "common/mutex.h"

#ifdef STRATA_CUDA_GRAPHS
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/version.h>
#endif

namespace strata {

namespace {

// The process's turns of captures (OutsideCaptures): any number of
// sections at once, or one capture alone; a capture waiting keeps new
// sections out until it has run. Every wait is bounded.
class CaptureTurns {
 public:
  Status Section(const std::function<void()>& work,
                 std::chrono::milliseconds timeout) {
    {
      MutexLock lock(&mu_);
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      while (capturing_ || waiting_ > 0) {
        if (!cv_.WaitUntil(deadline) && (capturing_ || waiting_ > 0))
          return TimedOut("another thread's CUDA graph capture to end",
                          timeout);
      }
      ++sections_;
    }
    Ends ends(this, /*capture=*/false);
    work();
    return Status::Ok();
  }

  Status Alone(const std::function<void()>& work,
               std::chrono::milliseconds timeout) {
    {
      MutexLock lock(&mu_);
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      ++waiting_;
      while (capturing_ || sections_ > 0) {
        if (!cv_.WaitUntil(deadline) && (capturing_ || sections_ > 0)) {
          --waiting_;
          cv_.SignalAll();
          return TimedOut(
              "the other training threads' CUDA graph replays, "
              "eager steps and captures to end",
              timeout);
        }
      }
      --waiting_;
      capturing_ = true;
    }
    Ends ends(this, /*capture=*/true);
    work();
    return Status::Ok();
  }

  int waiting() {
    MutexLock lock(&mu_);
    return waiting_;
  }

 private:
  // Gives the turn back when the work ends (an exception included).
  class Ends {
   public:
    Ends(CaptureTurns* turns, bool capture)
        : turns_(turns), capture_(capture) {}
    ~Ends() {
      MutexLock lock(&turns_->mu_);
      if (capture_) {
        turns_->capturing_ = false;
      } else {
        --turns_->sections_;
      }
      turns_->cv_.SignalAll();
    }
    Ends(const Ends&) = delete;
    Ends& operator=(const Ends&) = delete;

   private:
    CaptureTurns* const turns_;
    const bool capture_;
  };

  static Status TimedOut(const char* what, std::chrono::milliseconds t) {
    return Status::DeadlineExceeded(
        "CUDA graph: waited {:.1f} s for {} (is a training thread stuck in "
        "a step?)",
        static_cast<double>(t.count()) / 1000.0, what);
  }

  Mutex mu_;
  CondVar cv_{&mu_};
  int sections_ GUARDED_BY(mu_) = 0;
  int waiting_ GUARDED_BY(mu_) = 0;  // captures waiting for their turn
  bool capturing_ GUARDED_BY(mu_) = false;
};

CaptureTurns& Turns() {
  // Never destroyed: a graph may be destroyed as the process exits.
  static CaptureTurns* const turns = new CaptureTurns();
  return *turns;
}

#ifdef STRATA_CUDA_GRAPHS

class TorchCudaGraph final : public CudaGraph {
 public:
  TorchCudaGraph() : graph_(std::make_unique<at::cuda::CUDAGraph>()) {}
  ~TorchCudaGraph() override {
    // Its destruction unregisters it from the device's random generator.
    const Status done = AloneAmongCaptures([&] { graph_.reset(); });
    if (!done.ok()) {
      // Left as it is (its memory too) rather than unregistered beside a
      // capture.
      LogError("{}; the graph is not freed", done.message());
      (void)graph_.release();
    }
  }

  Status Capture(const std::function<void()>& work) override {
    const at::cuda::CUDAStream current = at::cuda::getCurrentCUDAStream();
    if (current == at::cuda::getDefaultCUDAStream(current.device_index())) {
      return Status::FailedPrecondition(
          "a CUDA graph cannot be captured on the default stream (the "
          "training thread has no ComputeStream)");
    }
    Status recorded;
    RETURN_IF_ERROR(AloneAmongCaptures([&] { recorded = Record(work); }));
    return recorded;
  }

  Status Replay() override {
    Status replayed;
    RETURN_IF_ERROR(OutsideCaptures(
        [&] { replayed = Guard("replaying", [&] { graph_->replay(); }); }));
    return replayed;
  }

 private:
  // Begins, runs `work`, ends (the capture ends whatever `work` did).
  Status Record(const std::function<void()>& work) {
    // Autocast's cache of cast weights would keep tensors of the graph's
    // pool and hand them to later passes: off while capturing.
    const bool cache_was_on = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    Status status = Guard("starting the capture", [&] {
#if TORCH_VERSION_MAJOR >= 2
      // Thread-local: other threads of the process may allocate or sync
      // meanwhile on their own streams (the evaluator, workers between
      // their steps).
      graph_->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
#else
      graph_->capture_begin();
#endif
    });
    if (status.ok()) {
      const Status recorded = Guard("recording", work);
      const Status ended =
          Guard("ending the capture", [&] { graph_->capture_end(); });
      status = recorded.ok() ? ended : recorded;
    }
    at::autocast::set_autocast_cache_enabled(cache_was_on);
    return status;
  }

  template <typename F>
  static Status Guard(const char* what, F&& f) {
    try {
      f();
    } catch (const c10::Error& e) {
      return Status::Internal("CUDA graph: {}: {}", what,
                              e.what_without_backtrace());
    } catch (const std::exception& e) {
      return Status::Internal("CUDA graph: {}: {}", what, e.what());
    }
    return Status::Ok();
  }

  std::unique_ptr<at::cuda::CUDAGraph> graph_;
};

#endif

}  // namespace

Status OutsideCaptures(const std::function<void()>& work,
                       std::chrono::milliseconds timeout) {
  return Turns().Section(work, timeout);
}

Status AloneAmongCaptures(const std::function<void()>& work,
                          std::chrono::milliseconds timeout) {
  return Turns().Alone(work, timeout);
}

int CapturesWaiting() { return Turns().waiting(); }

#ifdef STRATA_CUDA_GRAPHS

bool CudaGraphsBuilt() { return true; }

Result<std::unique_ptr<CudaGraph>> CudaGraph::Create() {
  return std::unique_ptr<CudaGraph>(new TorchCudaGraph());
}

#else

bool CudaGraphsBuilt() { return false; }

Result<std::unique_ptr<CudaGraph>> CudaGraph::Create() {
#ifdef STRATA_CUDA_GRAPHS_OFF
  return Status::FailedPrecondition(
      "train.cuda_graph: this strata was built without CUDA graphs "
      "(CMake's STRATA_CUDA_GRAPHS=OFF, as bench/gpu_session.sh builds when "
      "src/models/cuda_graph.cc fails to compile); rebuild without that "
      "option to capture");
#else
  return Status::FailedPrecondition(
      "train.cuda_graph: this strata was built against a LibTorch without "
      "CUDA, which cannot capture CUDA graphs (scripts/gpu_build.sh builds "
      "against a CUDA LibTorch)");
#endif
}

#endif

}  // namespace strata

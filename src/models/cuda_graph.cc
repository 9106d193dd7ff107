#include "models/cuda_graph.h"

#include "common/mutex.h"

#ifdef STRATA_CUDA_GRAPHS
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/version.h>

#include <optional>
#endif

namespace strata {

namespace {

// The process's lock of captures (OutsideCaptures): shared by replays and
// eager steps, exclusive for a capture and a graph's destruction. `turn` is
// held by a capture from before it waits until it ends, and taken for a
// moment by a section before it enters: sections that come after a waiting
// capture queue behind it instead of keeping it out.
struct CaptureLock {
  Mutex turn;
  SharedMutex sections;
};

CaptureLock& Captures() {
  // Never destroyed: a graph may be destroyed as the process exits.
  static CaptureLock* const lock = new CaptureLock();
  return *lock;
}

#ifdef STRATA_CUDA_GRAPHS

class TorchCudaGraph final : public CudaGraph {
 public:
  TorchCudaGraph() { graph_.emplace(); }
  ~TorchCudaGraph() override {
    // Its destruction unregisters it from the device's random generator.
    AloneAmongCaptures([&] { graph_.reset(); });
  }

  Status Capture(const std::function<void()>& work) override {
    const at::cuda::CUDAStream current = at::cuda::getCurrentCUDAStream();
    if (current == at::cuda::getDefaultCUDAStream(current.device_index())) {
      return Status::FailedPrecondition(
          "a CUDA graph cannot be captured on the default stream (the "
          "training thread has no ComputeStream)");
    }
    Status recorded;
    AloneAmongCaptures([&] { recorded = Record(work); });
    return recorded;
  }

  Status Replay() override {
    Status replayed;
    OutsideCaptures(
        [&] { replayed = Guard("replaying", [&] { graph_->replay(); }); });
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

  std::optional<at::cuda::CUDAGraph> graph_;
};

#endif

}  // namespace

void OutsideCaptures(const std::function<void()>& work) {
  CaptureLock& c = Captures();
  { MutexLock queue(&c.turn); }
  ReaderMutexLock section(&c.sections);
  work();
}

void AloneAmongCaptures(const std::function<void()>& work) {
  CaptureLock& c = Captures();
  MutexLock turn(&c.turn);
  WriterMutexLock alone(&c.sections);
  work();
}

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

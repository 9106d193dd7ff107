#include "models/cuda_graph.h"

#ifdef STRATA_CUDA_GRAPHS
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/version.h>
#endif

namespace strata {

#ifdef STRATA_CUDA_GRAPHS

namespace {

class TorchCudaGraph final : public CudaGraph {
 public:
  Status Begin() override {
    const at::cuda::CUDAStream current = at::cuda::getCurrentCUDAStream();
    if (current == at::cuda::getDefaultCUDAStream(current.device_index())) {
      return Status::FailedPrecondition(
          "a CUDA graph cannot be captured on the default stream (the "
          "training thread has no ComputeStream)");
    }
    // Autocast's cache of cast weights would keep tensors of the graph's
    // pool and hand them to later passes: off while capturing.
    cache_was_on_ = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    Status begun = Guard("starting the capture", [&] {
#if TORCH_VERSION_MAJOR >= 2
      // Thread-local: other workers of the process may allocate or sync
      // meanwhile on their own streams.
      graph_.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
#else
      graph_.capture_begin();
#endif
    });
    if (!begun.ok()) at::autocast::set_autocast_cache_enabled(cache_was_on_);
    return begun;
  }
  Status End() override {
    Status ended = Guard("ending the capture", [&] { graph_.capture_end(); });
    at::autocast::set_autocast_cache_enabled(cache_was_on_);
    return ended;
  }
  Status Replay() override {
    return Guard("replaying", [&] { graph_.replay(); });
  }

 private:
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

  at::cuda::CUDAGraph graph_;
  bool cache_was_on_ = true;
};

}  // namespace

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

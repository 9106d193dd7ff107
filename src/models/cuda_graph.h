#pragma once

// CUDA graphs (train.cuda_graph; docs/design/gpu.md, "CUDA graphs"): the
// kernels a step queues on the current stream, recorded once and launched
// again as one graph. Built only against a CUDA LibTorch (CMake defines
// STRATA_CUDA_GRAPHS there); this header names no CUDA type, so the rest of
// strata compiles without CUDA.

#include <memory>

#include "common/status.h"

namespace strata {

// Whether this build can capture CUDA graphs (a CUDA LibTorch).
bool CudaGraphsBuilt();

// One graph: Begin() starts recording what the calling thread queues on its
// current stream (which must not be the default stream: a ComputeStream is
// current), End() stops and instantiates it, Replay() launches it on the
// current stream. Between Begin() and End() nothing runs: operators only
// record their kernels, and memory they allocate comes from the graph's own
// pool and stays its (a replay writes the same addresses). Tensors made
// during the capture are the graph's outputs: keep them and read them after
// a Replay(). Not thread-safe; not movable.
class CudaGraph {
 public:
  virtual ~CudaGraph() = default;
  // FailedPrecondition where CudaGraphsBuilt() is false.
  static Result<std::unique_ptr<CudaGraph>> Create();
  // Each: Internal with LibTorch's or CUDA's reason when it fails
  // (FailedPrecondition for the default stream). A capture that failed
  // (End() not ok) may leave LibTorch's allocator holding the graph's pool
  // as if capturing: the caller ends its run (StepGraph reports it).
  virtual Status Begin() = 0;
  virtual Status End() = 0;
  virtual Status Replay() = 0;
};

}  // namespace strata

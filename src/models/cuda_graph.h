#pragma once

// CUDA graphs (train.cuda_graph; docs/design/gpu.md, "CUDA graphs"): the
// kernels a step queues on the current stream, recorded once and launched
// again as one graph. Built only against a CUDA LibTorch (CMake defines
// STRATA_CUDA_GRAPHS there); this header names no CUDA type, so the rest of
// strata compiles without CUDA.

#include <chrono>
#include <functional>
#include <memory>

#include "common/status.h"

namespace strata {

// Whether this build can capture CUDA graphs (a CUDA LibTorch).
bool CudaGraphsBuilt();

// One graph: Capture() records what the calling thread queues on its
// current stream (which must not be the default stream: a ComputeStream is
// current) and instantiates it, Replay() launches it on the current stream.
// While it records nothing runs: operators only record their kernels, and
// memory they allocate comes from the graph's own pool and stays its (a
// replay writes the same addresses). Tensors made during the capture are
// the graph's outputs: keep them and read them after a Replay(). Not
// thread-safe; not movable.
//
// One capture at a time in a process (see OutsideCaptures): a capture, and
// a graph's destruction, wait for every replay and OutsideCaptures section
// in hand, and new ones wait for them.
class CudaGraph {
 public:
  virtual ~CudaGraph() = default;
  // FailedPrecondition where CudaGraphsBuilt() is false.
  static Result<std::unique_ptr<CudaGraph>> Create();
  // Records the kernels `work` queues. Internal with LibTorch's or CUDA's
  // reason, or the message of what `work` threw, when it fails
  // (FailedPrecondition for the default stream; DeadlineExceeded where its
  // turn did not come). A capture that failed may leave LibTorch's
  // allocator holding the graph's pool as if capturing: the caller ends its
  // run (StepGraph reports it).
  virtual Status Capture(const std::function<void()>& work) = 0;
  // Internal with LibTorch's or CUDA's reason when it fails;
  // DeadlineExceeded where another thread's capture did not end.
  virtual Status Replay() = 0;
};

// How long OutsideCaptures and AloneAmongCaptures wait for their turn: far
// longer than any capture or training step, so that only a thread stuck
// inside one runs it out.
inline constexpr std::chrono::seconds kCaptureTurnTimeout{300};

// Runs `work` while no CUDA graph is being captured in the process; a
// capture waits until it returns. For the eager GPU steps of threads that
// capture graphs (StepGraph). Replays run this way too. Why: LibTorch keeps
// each device's random generator's capture state once per process,
// unguarded (2.6's CUDAGeneratorImpl: one "capturing" flag and the set of
// graphs registered with it; 2.13's development headers have one state per
// capture instead). Two captures at once race on it, and a replay or a
// random kernel (dropout) launched by another thread while a capture is
// under way is refused ("Offset increment outside graph capture encountered
// unexpectedly"); PyTorch's notes allow one capture at a time in a process.
// A capture waiting goes first: sections that start after it wait for it,
// so steps that follow each other closely cannot keep it out.
// DeadlineExceeded, naming what it waited for, after `timeout` (then `work`
// does not run).
Status OutsideCaptures(const std::function<void()>& work,
                       std::chrono::milliseconds timeout = kCaptureTurnTimeout);

// Runs `work` with no OutsideCaptures section (replays included) and no
// other such call under way in the process: what a capture and a graph's
// destruction (which unregisters it from the generator) do.
// DeadlineExceeded, naming what it waited for, after `timeout`.
Status AloneAmongCaptures(
    const std::function<void()>& work,
    std::chrono::milliseconds timeout = kCaptureTurnTimeout);

// The AloneAmongCaptures calls waiting for their turn now (for tests).
int CapturesWaiting();

}  // namespace strata

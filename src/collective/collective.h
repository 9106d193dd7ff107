#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace strata {

struct CollectiveOptions {
  int rank = 0;
  int size = 1;
  // The address this member's Gloo device listens on (the host part of the
  // node's own endpoint; 127.0.0.1 in one process or on loopback).
  std::string hostname = "127.0.0.1";
  // Every collective call fails after this long without progress (a lost
  // peer): Gloo's own timeout.
  std::chrono::milliseconds timeout{30000};
  // Store keys are prefixed with it (one group per run and purpose).
  std::string prefix = "strata";
};

// A group of `size` members doing collectives on float32 (all-reduce,
// reduce-scatter, all-gather), the data-parallel primitives of PyTorch's
// c10d without LibTorch. Two backends: Gloo's TCP transport between
// processes (Connect: members find each other through a rendezvous store,
// store.h, over the coordinator), and shared memory between the threads of
// one process (inproc.h: CollectiveHub). Not thread-safe: one thread per
// member issues the calls, and every member issues the same calls in the
// same order. A failed call (a peer lost, a timeout) returns kUnavailable
// (or kDeadlineExceeded) with the reason; the group is then unusable.
class Collective {
 public:
  virtual ~Collective() = default;
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

  // Over Gloo: connects to every other member (a full mesh); blocks until
  // all have joined or options.timeout passed.
  static Result<std::unique_ptr<Collective>> Connect(
      const CollectiveOptions& options, gloo::rendezvous::Store& store);

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The backend, for logs and summaries: "gloo" or "memory".
  virtual const char* backend() const = 0;

  // data[0, count) becomes the element-wise sum over the members.
  virtual Status AllReduceSum(float* data, size_t count) = 0;
  // data[0, count) becomes the element-wise mean over the members: the sum,
  // as AllReduceSum adds it, times 1 / size() (in float). By default the
  // sum and then a pass that scales it; a backend may fold the scaling into
  // its reduction (the in-process one does: one pass fewer per step).
  virtual Status AllReduceMean(float* data, size_t count);
  // Sums every member's data[0, total) and leaves in this member's slice
  // (offset = counts[0] + ... + counts[rank - 1], counts[rank] floats) the
  // sum of that slice; the rest of `data` is left unspecified.
  virtual Status ReduceScatterSum(float* data,
                                  const std::vector<int64_t>& counts) = 0;
  // Every member contributes its slice of `data` (as in ReduceScatterSum);
  // afterwards every member's data[0, total) holds every slice.
  virtual Status AllGather(float* data, const std::vector<int64_t>& counts) = 0;
  // Waits until every member called Barrier().
  virtual Status Barrier() = 0;

 protected:
  Collective(int rank, int size) : rank_(rank), size_(size) {}

 private:
  const int rank_;
  const int size_;
};

// Contiguous slices of `total` elements over `parts` members, balanced (the
// first total % parts get one more): the ring mode's ownership.
std::vector<int64_t> BalancedCounts(int64_t total, int parts);

}  // namespace strata

#pragma once

#include <atomic>
#include <cstdint>

#include "cluster/member.h"
#include "common/status.h"

namespace strata {

// Whether a worker is asked to stop cleanly: by the user (Ctrl-C, the
// process's `stop` flag), by the coordinator ending the run early without
// an error, or by a checkpoint round that ends with a stop. Workers of a
// collective or of a neighbour exchange see it at slightly different steps;
// one that is then left alone in an exchange (its peers already stopped)
// ends cleanly too (StoppedInside). Not thread-safe: the worker's thread.
class StopSignal {
 public:
  // `stop` may be null. With checkpoints a Ctrl-C reaches the worker as a
  // checkpoint round that ends with kCheckpointStop (the coordinator asks
  // every worker to one step boundary first), not through `stop`.
  StopSignal(const std::atomic<bool>* stop, bool checkpoints,
             ClusterMember& member, int index)
      : stop_(stop),
        checkpoints_(checkpoints),
        member_(member),
        index_(index) {}

  // A checkpoint round told this worker to stop after it.
  void StopAfterRound() { after_round_ = true; }
  bool after_round() const { return after_round_; }

  bool Requested() const;
  // True, logging where, when `st` failed because of a clean stop (a peer
  // that stopped, a pull the stop ended): the loop then ends without an
  // error.
  bool StoppedInside(const Status& st, const char* where, int64_t it) const;

 private:
  const std::atomic<bool>* const stop_;
  const bool checkpoints_;
  ClusterMember& member_;
  const int index_;
  bool after_round_ = false;
};

}  // namespace strata

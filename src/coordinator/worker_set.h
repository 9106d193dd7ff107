#pragma once

#include <set>
#include <vector>

#include "transport/message.h"

namespace strata {

// A snapshot of the workers as the coordinator's membership sees them: the
// live ones (not declared lost) and those that reported done. The parts
// that depend on who is there (barriers, clocks, checkpoint rounds, the
// run's end) take a fresh snapshot after every change of their own and
// after every change of membership, so that whichever comes last decides.
struct WorkerSet {
  std::vector<NodeId> live;
  std::set<NodeId> done;

  bool Done(NodeId id) const { return done.count(id) > 0; }
  // Live workers still training.
  std::vector<NodeId> Training() const {
    std::vector<NodeId> out;
    for (NodeId id : live)
      if (!Done(id)) out.push_back(id);
    return out;
  }
};

}  // namespace strata

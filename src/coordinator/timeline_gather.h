// cluster.timeline at the end of a run (docs/design/timeline.md): the
// coordinator's own spans, the spans each worker sent before it left, and
// those of every other live node, asked for now.
#pragma once

#include <chrono>
#include <vector>

#include "common/timeline_wire.h"
#include "coordinator/coordinator.h"

namespace strata {

// Every node's timeline that could be had, the coordinator's first. Waits
// (up to `timeout`) for the timelines of the workers that reported done,
// which send theirs right after. A node
// that does not answer within `timeout`, or answers with a malformed
// timeline, is named in a warning and left out; lost nodes are not asked.
std::vector<timeline::NodeTimeline> GatherTimelines(
    Coordinator& coordinator, const RoleTable& roles,
    const std::vector<NodeId>& lost, std::chrono::milliseconds timeout);

}  // namespace strata

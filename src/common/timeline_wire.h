// A node's timeline on the wire (common/timeline.h): what a node sends the
// coordinator when asked for its spans at the end of a run.
#pragma once

#include <string>

#include "common/status.h"
#include "common/timeline.h"

namespace strata::timeline {

// One node's spans, with its clock's offset to the coordinator's.
struct NodeTimeline {
  int32_t node = -1;
  Taken taken;
  ClockEstimate clock;
};

// JSON text: {"node", "offset_ns", "rtt_ns", "samples", "dropped",
// "strings": [...], "events": [[name, cat, track, start_ns, dur_ns, arg,
// async], ...]} with names as indices into "strings".
std::string Encode(const NodeTimeline& t);
// DataLoss naming what is wrong for malformed text. Names are Intern()ed.
Result<NodeTimeline> Decode(const std::string& text);

}  // namespace strata::timeline

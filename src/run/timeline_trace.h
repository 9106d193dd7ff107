// The cluster's timeline as one Chrome trace (cluster.timeline,
// docs/design/timeline.md): every node a process, every track of it a
// thread, every node's times moved onto the coordinator's clock.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/timeline_wire.h"

namespace strata {

// The trace (the JSON object format: {"traceEvents": [...], ...}) of
// `nodes`, which loads in Perfetto and chrome://tracing. Times are in
// microseconds from the earliest span, each node's moved by its clock
// offset; `describe` names a node ("worker 0"). "otherData" records each
// node's offset, the round trip it was estimated within, and the spans its
// buffers dropped.
nlohmann::json ChromeTrace(const std::vector<timeline::NodeTimeline>& nodes,
                           const std::function<std::string(int32_t)>& describe);

}  // namespace strata

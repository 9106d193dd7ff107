#include "run/timeline_trace.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

namespace strata {
namespace {

using nlohmann::json;

json Meta(const char* what, int32_t pid, int tid, const std::string& name) {
  return {{"ph", "M"},
          {"name", what},
          {"pid", pid},
          {"tid", tid},
          {"args", {{"name", name}}}};
}

// The span's own fields; `ts` in microseconds.
json Slice(const timeline::Event& e, const char* ph, double ts, int tid) {
  json j = {{"name", e.name}, {"cat", e.cat},  {"ph", ph},
            {"ts", ts},       {"pid", e.node}, {"tid", tid}};
  if (e.arg >= 0) j["args"] = {{"arg", e.arg}};
  return j;
}

int64_t Origin(const std::vector<timeline::NodeTimeline>& nodes) {
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const auto& n : nodes)
    for (const auto& e : n.taken.events)
      origin = std::min(origin, e.start_ns + n.clock.offset_ns);
  return origin == std::numeric_limits<int64_t>::max() ? 0 : origin;
}

}  // namespace

json ChromeTrace(const std::vector<timeline::NodeTimeline>& nodes,
                 const std::function<std::string(int32_t)>& describe) {
  json events = json::array();
  json clocks = json::object();
  const int64_t origin = Origin(nodes);
  uint64_t next_id = 1;
  for (const auto& n : nodes) {
    events.push_back(Meta("process_name", n.node, 0, describe(n.node)));
    events.push_back({{"ph", "M"},
                      {"name", "process_sort_index"},
                      {"pid", n.node},
                      {"args", {{"sort_index", n.node}}}});
    std::map<std::string, int> tids;
    for (const auto& e : n.taken.events) {
      auto [it, added] =
          tids.emplace(e.track, static_cast<int>(tids.size()) + 1);
      if (added)
        events.push_back(Meta("thread_name", n.node, it->second, e.track));
      const double ts = (e.start_ns + n.clock.offset_ns - origin) / 1e3;
      if (!e.async) {
        json x = Slice(e, "X", ts, it->second);
        x["dur"] = e.dur_ns / 1e3;
        events.push_back(std::move(x));
        continue;
      }
      // Spans in flight together (requests, messages on a link): nestable
      // async slices, which may overlap.
      json b = Slice(e, "b", ts, it->second);
      json end = Slice(e, "e", ts + e.dur_ns / 1e3, it->second);
      b["id2"] = {{"local", next_id}};
      end["id2"] = {{"local", next_id}};
      ++next_id;
      events.push_back(std::move(b));
      events.push_back(std::move(end));
    }
    clocks[describe(n.node)] = {{"offset_ns", n.clock.offset_ns},
                                {"rtt_ns", n.clock.rtt_ns},
                                {"samples", n.clock.samples},
                                {"spans", n.taken.events.size()},
                                {"dropped", n.taken.dropped}};
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"clocks", std::move(clocks)}}}};
}

}  // namespace strata

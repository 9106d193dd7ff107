#include "common/timeline_wire.h"

#include <map>
#include <nlohmann/json.hpp>

namespace strata::timeline {

std::string Encode(const NodeTimeline& t) {
  std::map<const char*, int> index;
  nlohmann::json strings = nlohmann::json::array();
  auto id = [&](const char* s) {
    auto [it, added] = index.emplace(s, static_cast<int>(index.size()));
    if (added) strings.push_back(s);
    return it->second;
  };
  nlohmann::json events = nlohmann::json::array();
  for (const Event& e : t.taken.events) {
    events.push_back({id(e.name), id(e.cat), id(e.track), e.start_ns, e.dur_ns,
                      e.arg, e.async ? 1 : 0});
  }
  return nlohmann::json{{"node", t.node},
                        {"offset_ns", t.clock.offset_ns},
                        {"rtt_ns", t.clock.rtt_ns},
                        {"samples", t.clock.samples},
                        {"dropped", t.taken.dropped},
                        {"strings", std::move(strings)},
                        {"events", std::move(events)}}
      .dump();
}

Result<NodeTimeline> Decode(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Status::DataLoss("timeline: not a JSON object");
  NodeTimeline t;
  try {
    t.node = j.at("node").get<int32_t>();
    t.clock.offset_ns = j.at("offset_ns").get<int64_t>();
    t.clock.rtt_ns = j.at("rtt_ns").get<int64_t>();
    t.clock.samples = j.at("samples").get<int64_t>();
    t.taken.dropped = j.at("dropped").get<int64_t>();
    std::vector<const char*> strings;
    for (const auto& s : j.at("strings"))
      strings.push_back(Intern(s.get<std::string>()));
    auto str = [&](const nlohmann::json& v) -> const char* {
      const size_t i = v.get<size_t>();
      if (i >= strings.size())
        throw std::out_of_range("string index " + std::to_string(i));
      return strings[i];
    };
    for (const auto& e : j.at("events")) {
      if (!e.is_array() || e.size() != 7)
        return Status::DataLoss(
            "timeline of node {}: an event is not an "
            "array of 7",
            t.node);
      Event ev;
      ev.name = str(e[0]);
      ev.cat = str(e[1]);
      ev.track = str(e[2]);
      ev.start_ns = e[3].get<int64_t>();
      ev.dur_ns = e[4].get<int64_t>();
      ev.arg = e[5].get<int64_t>();
      ev.async = e[6].get<int>() != 0;
      ev.node = t.node;
      t.taken.events.push_back(ev);
    }
  } catch (const std::exception& e) {
    return Status::DataLoss("timeline: malformed: {}", e.what());
  }
  return t;
}

}  // namespace strata::timeline

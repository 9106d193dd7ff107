#include "coordinator/timeline_gather.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/log.h"

namespace strata {
namespace {

// The timelines the workers send right after their "done": waits up to
// `timeout` for every worker that reported done to have sent its own.
std::map<NodeId, std::string> AwaitWorkers(Coordinator& coordinator,
                                           std::chrono::milliseconds timeout) {
  std::map<NodeId, std::string> texts;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::map<NodeId, std::string> done = coordinator.DoneReports();
  for (;;) {
    texts.merge(coordinator.TakeTimelines());
    bool all = true;
    for (const auto& [id, report] : done) all = all && texts.count(id) != 0;
    if (all) return texts;
    if (std::chrono::steady_clock::now() >= deadline) {
      LogWarning(
          "timeline: not every finished worker sent its spans within "
          "{} ms",
          timeout.count());
      return texts;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

std::vector<timeline::NodeTimeline> GatherTimelines(
    Coordinator& coordinator, const RoleTable& roles,
    const std::vector<NodeId>& lost, std::chrono::milliseconds timeout) {
  std::vector<timeline::NodeTimeline> out;
  timeline::NodeTimeline own;
  own.node = roles.CoordinatorId();
  own.taken = timeline::Take(own.node);
  own.clock.rtt_ns = 0;  // its own clock is the trace's
  out.push_back(std::move(own));
  std::map<NodeId, std::string> texts = AwaitWorkers(coordinator, timeout);
  std::map<NodeId, std::shared_ptr<RpcCall>> asked;
  for (NodeId id = 0; id < roles.num_nodes(); ++id) {
    if (id == roles.CoordinatorId() || texts.count(id) != 0 ||
        std::find(lost.begin(), lost.end(), id) != lost.end())
      continue;
    Message m;
    m.header.type = MessageType::kTimelineRequest;
    asked[id] = coordinator.Request(id, std::move(m));
  }
  for (auto& [id, call] : asked) {
    Result<Message> reply = call->Wait(timeout);
    if (!reply.ok() || reply->payloads.empty()) {
      LogWarning("timeline: nothing from {}: {}", roles.Describe(id),
                 reply.ok() ? "an empty reply" : reply.status().message());
      continue;
    }
    texts[id] = reply->payloads[0].ToString();
  }
  for (const auto& [id, text] : texts) {
    Result<timeline::NodeTimeline> t = timeline::Decode(text);
    if (!t.ok() || t->node != id) {
      LogWarning("timeline: {} sent a malformed timeline: {}",
                 roles.Describe(id),
                 t.ok() ? "another node's id" : t.status().message());
      continue;
    }
    out.push_back(std::move(t).value());
  }
  return out;
}

}  // namespace strata

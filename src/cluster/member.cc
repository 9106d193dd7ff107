#include "cluster/member.h"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "cluster/protocol.h"
#include "common/log.h"

namespace strata {

ClusterMember::ClusterMember(RpcEndpoint& rpc, RoleTable roles,
                             std::chrono::milliseconds heartbeat_interval,
                             std::chrono::milliseconds heartbeat_timeout)
    : rpc_(rpc),
      roles_(roles),
      heartbeat_interval_(heartbeat_interval),
      heartbeat_timeout_(heartbeat_timeout) {}

ClusterMember::~ClusterMember() { StopHeartbeats(); }

Status ClusterMember::Join(
    const std::string& coordinator_endpoint, std::chrono::milliseconds timeout,
    const std::string& run_facts,
    const std::function<Status(const std::string&)>& on_run_facts) {
  RETURN_IF_ERROR(
      rpc_.transport().Connect(roles_.CoordinatorId(), coordinator_endpoint));
  Message m;
  m.header.type = MessageType::kRegister;
  const std::string endpoint = rpc_.transport().endpoint();
  m.payloads.push_back(Buffer::CopyOf(endpoint.data(), endpoint.size()));
  if (!run_facts.empty())
    m.payloads.push_back(Buffer::CopyOf(run_facts.data(), run_facts.size()));
  auto call = rpc_.Request(roles_.CoordinatorId(), std::move(m));
  // Heartbeats from now on: the coordinator watches a node from its
  // registration, and the others may take long to register (loading data on
  // a loaded machine); a node silent while it waits would be declared lost.
  StartHeartbeats();
  auto reply = call->Wait(timeout);
  if (!reply.ok()) {
    return reply.status().WithContext(fmt::format(
        "{} joining the cluster at {} (waits for all {} nodes to register)",
        roles_.Describe(rpc_.node_id()), coordinator_endpoint,
        roles_.num_nodes()));
  }
  nlohmann::json map;
  try {
    const Buffer& b = reply->payloads.at(0);
    map = nlohmann::json::parse(
        std::string(reinterpret_cast<const char*>(b.data()), b.size()));
  } catch (const std::exception& e) {
    return Status::DataLoss("bad cluster map from the coordinator: {}",
                            e.what());
  }
  // Parse the whole map before connecting: a malformed entry is an error
  // that names it, never an exception out of this thread.
  std::vector<std::pair<NodeId, std::string>> peers;
  std::string facts;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it.key() == kRunFactsKey) {
      facts = it.value().dump();
      continue;
    }
    char* end = nullptr;
    const long id = std::strtol(it.key().c_str(), &end, 10);
    if (it.key().empty() || *end != '\0' || !it.value().is_string()) {
      return Status::DataLoss(
          "bad cluster map from the coordinator: entry '{}': {}", it.key(),
          it.value().dump());
    }
    peers.emplace_back(static_cast<NodeId>(id), it.value().get<std::string>());
  }
  for (const auto& [id, endpoint] : peers) {
    if (id == rpc_.node_id() || id == roles_.CoordinatorId()) continue;
    RETURN_IF_ERROR(rpc_.transport().Connect(id, endpoint));
  }
  if (on_run_facts) {
    if (facts.empty()) {
      return Status::FailedPrecondition(
          "{}: the coordinator's cluster map has no run facts (no worker "
          "sent the parameter count)",
          roles_.Describe(rpc_.node_id()));
    }
    RETURN_IF_ERROR(on_run_facts(facts));
  }
  // Second phase: wait until every node connected to its peers too.
  Message connected;
  connected.header.type = MessageType::kRegister;
  connected.header.flags = kRegisterConnected;
  auto ready =
      rpc_.Request(roles_.CoordinatorId(), std::move(connected))->Wait(timeout);
  if (!ready.ok()) {
    return ready.status().WithContext(
        fmt::format("{} waiting for every node to connect",
                    roles_.Describe(rpc_.node_id())));
  }
  joined_ = true;
  return Status::Ok();
}

void ClusterMember::StartHeartbeats() {
  if (heartbeat_.joinable()) return;  // started by Join()
  heartbeat_ = std::thread([this] {
    // Heartbeats are requests: the coordinator's replies tell this node the
    // coordinator is alive. No reply for heartbeat_timeout_ = it is gone.
    auto last_reply = std::chrono::steady_clock::now();
    // While Join() waits, a coordinator that has not answered yet may not
    // be up yet: Join's own timeout covers it. Silence counts once the
    // coordinator answered once or the node has joined.
    bool answered = false;
    std::shared_ptr<RpcCall> in_flight;
    MutexLock lock(&mu_);
    while (!stop_heartbeats_ && !shutdown_.load()) {
      lock.Unlock();
      if (in_flight && in_flight->Ready()) {
        auto reply = in_flight->Wait(std::chrono::milliseconds(0));
        if (reply.ok()) {
          last_reply = std::chrono::steady_clock::now();
          answered = true;
          NoteClock(*in_flight, *reply);
        }
        in_flight.reset();
      }
      if (!in_flight) {
        Message m;
        m.header.type = MessageType::kHeartbeat;
        if (status_source_) {
          const std::string status = status_source_();
          if (!status.empty())
            m.payloads.push_back(Buffer::CopyOf(status.data(), status.size()));
        }
        in_flight = rpc_.Request(roles_.CoordinatorId(), std::move(m));
      }
      const auto now = std::chrono::steady_clock::now();
      const auto silent = now - last_reply;
      if (!answered && !joined_.load()) {
        last_reply = now;  // silence counts from the first answer or the join
      } else if (silent > heartbeat_timeout_) {
        ShutdownLocally(fmt::format(
            "lost the coordinator: no reply to heartbeats for {:.1f} s",
            std::chrono::duration<double>(silent).count()));
      }
      lock.Lock();
      const auto until = std::chrono::steady_clock::now() + heartbeat_interval_;
      while (!stop_heartbeats_) {
        if (!cv_.WaitUntil(until)) break;
      }
    }
  });
}

void ClusterMember::ShutdownLocally(const std::string& reason) {
  LogError("{}: {}", roles_.Describe(rpc_.node_id()), reason);
  {
    MutexLock lock(&mu_);
    reason_ = reason;
  }
  shutdown_ = true;
  cv_.SignalAll();
  rpc_.CancelPending(Status::Unavailable("{}", reason));
}

void ClusterMember::StopHeartbeats() {
  {
    MutexLock lock(&mu_);
    stop_heartbeats_ = true;
  }
  cv_.SignalAll();
  if (heartbeat_.joinable()) heartbeat_.join();
}

Status ClusterMember::Barrier(int64_t number,
                              std::chrono::milliseconds timeout) {
  Message m;
  m.header.type = MessageType::kBarrier;
  m.header.clock = number;
  timeline::Span span("barrier", "wait", number);
  auto r = rpc_.Request(roles_.CoordinatorId(), std::move(m))->Wait(timeout);
  if (!r.ok()) return r.status().WithContext(fmt::format("barrier {}", number));
  return Status::Ok();
}

void ClusterMember::NoteClock(const RpcCall& call, const Message& reply) {
  MutexLock lock(&mu_);
  clock_.Add(call.sent_ns(), reply.header.clock, call.completed_ns());
}

timeline::ClockEstimate ClusterMember::clock_offset() const {
  MutexLock lock(&mu_);
  return clock_;
}

Status ClusterMember::ClockWait(int64_t completed,
                                std::chrono::milliseconds timeout) {
  timeline::Span span("clock wait", "wait", completed);
  Message m;
  m.header.type = MessageType::kClock;
  m.header.clock = completed;
  auto r = rpc_.Request(roles_.CoordinatorId(), std::move(m))->Wait(timeout);
  if (!r.ok()) {
    return r.status().WithContext(fmt::format(
        "waiting on the clock table to start iteration {}", completed));
  }
  return Status::Ok();
}

Status ClusterMember::ReportDone(const std::string& report, bool leaving) {
  Message m;
  m.header.type = MessageType::kShutdown;
  if (leaving) m.header.flags |= kShutdownLeaving;
  if (!report.empty())
    m.payloads.push_back(Buffer::CopyOf(report.data(), report.size()));
  return rpc_.Send(roles_.CoordinatorId(), std::move(m));
}

void ClusterMember::OnMessage(const Message& msg) {
  if (msg.header.type != MessageType::kShutdown) {
    LogWarning("{}: ignoring unexpected {} from node {}",
               roles_.Describe(rpc_.node_id()),
               MessageTypeName(msg.header.type), msg.header.sender);
    return;
  }
  if (msg.header.flags & kShutdownStopTraining) {
    stop_training_ = true;
    cv_.SignalAll();
    return;
  }
  {
    MutexLock lock(&mu_);
    if (msg.header.flags & kShutdownError) reason_ = ErrorText(msg);
  }
  shutdown_ = true;
  cv_.SignalAll();
  if (msg.header.flags & kShutdownError) {
    rpc_.CancelPending(Status::Unavailable(
        "the coordinator stopped the run: {}", ErrorText(msg)));
  }
}

std::string ClusterMember::shutdown_reason() const {
  MutexLock lock(&mu_);
  return reason_;
}

bool ClusterMember::WaitForShutdown(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(&mu_);
  while (!shutdown_.load()) {
    if (!cv_.WaitUntil(until)) break;
  }
  return shutdown_.load();
}

}  // namespace strata

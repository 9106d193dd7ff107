#include "cluster/member.h"

#include <nlohmann/json.hpp>

#include "cluster/coordinator.h"
#include "common/log.h"

namespace strata {

ClusterMember::ClusterMember(RpcEndpoint& rpc, ClusterShape shape,
                             std::chrono::milliseconds heartbeat_interval)
    : rpc_(rpc), shape_(shape), heartbeat_interval_(heartbeat_interval) {}

ClusterMember::~ClusterMember() { StopHeartbeats(); }

Status ClusterMember::Join(const std::string& coordinator_endpoint,
                           std::chrono::milliseconds timeout) {
  RETURN_IF_ERROR(
      rpc_.transport().Connect(shape_.CoordinatorId(), coordinator_endpoint));
  Message m;
  m.header.type = MessageType::kRegister;
  const std::string endpoint = rpc_.transport().endpoint();
  m.payloads.push_back(Buffer::CopyOf(endpoint.data(), endpoint.size()));
  auto reply =
      rpc_.Request(shape_.CoordinatorId(), std::move(m))->Wait(timeout);
  if (!reply.ok()) {
    return reply.status().WithContext(fmt::format(
        "{} joining the cluster at {} (waits for all {} nodes to register)",
        shape_.Describe(rpc_.node_id()), coordinator_endpoint,
        shape_.num_nodes()));
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
  for (auto it = map.begin(); it != map.end(); ++it) {
    NodeId id = std::stoi(it.key());
    if (id == rpc_.node_id() || id == shape_.CoordinatorId()) continue;
    RETURN_IF_ERROR(
        rpc_.transport().Connect(id, it.value().get<std::string>()));
  }
  return Status::Ok();
}

void ClusterMember::StartHeartbeats() {
  heartbeat_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_heartbeats_) {
      lock.unlock();
      Message m;
      m.header.type = MessageType::kHeartbeat;
      (void)rpc_.Send(shape_.CoordinatorId(), std::move(m));
      lock.lock();
      cv_.wait_for(lock, heartbeat_interval_, [&] { return stop_heartbeats_; });
    }
  });
}

void ClusterMember::StopHeartbeats() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_heartbeats_ = true;
  }
  cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
}

Status ClusterMember::Barrier(int64_t number,
                              std::chrono::milliseconds timeout) {
  Message m;
  m.header.type = MessageType::kBarrier;
  m.header.clock = number;
  auto r = rpc_.Request(shape_.CoordinatorId(), std::move(m))->Wait(timeout);
  if (!r.ok()) return r.status().WithContext(fmt::format("barrier {}", number));
  return Status::Ok();
}

Status ClusterMember::ClockWait(int64_t completed,
                                std::chrono::milliseconds timeout) {
  Message m;
  m.header.type = MessageType::kClock;
  m.header.clock = completed;
  auto r = rpc_.Request(shape_.CoordinatorId(), std::move(m))->Wait(timeout);
  if (!r.ok()) {
    return r.status().WithContext(fmt::format(
        "waiting on the clock table to start iteration {}", completed));
  }
  return Status::Ok();
}

Status ClusterMember::ReportDone() {
  Message m;
  m.header.type = MessageType::kShutdown;
  return rpc_.Send(shape_.CoordinatorId(), std::move(m));
}

void ClusterMember::OnMessage(const Message& msg) {
  if (msg.header.type != MessageType::kShutdown) {
    LogWarning("{}: ignoring unexpected {} from node {}",
               shape_.Describe(rpc_.node_id()),
               MessageTypeName(msg.header.type), msg.header.sender);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (msg.header.flags & kShutdownError) reason_ = ErrorText(msg);
  }
  shutdown_ = true;
  cv_.notify_all();
  if (msg.header.flags & kShutdownError) {
    rpc_.CancelPending(Status::Unavailable(
        "the coordinator stopped the run: {}", ErrorText(msg)));
  }
}

std::string ClusterMember::shutdown_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

bool ClusterMember::WaitForShutdown(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return shutdown_.load(); });
}

}  // namespace strata

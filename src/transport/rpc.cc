#include "transport/rpc.h"

#include "common/log.h"

namespace strata {

Result<Message> RpcCall::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
    return Status::DeadlineExceeded("no reply to {} within {} ms", what_,
                                    timeout.count());
  }
  return std::move(*result_);
}

bool RpcCall::Ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void RpcCall::Complete(Result<Message> result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    result_ = std::make_unique<Result<Message>>(std::move(result));
    done_ = true;
  }
  cv_.notify_all();
}

std::string ErrorText(const Message& msg) {
  if (msg.payloads.empty()) return "(no message)";
  const Buffer& b = msg.payloads[0];
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

RpcEndpoint::RpcEndpoint(std::unique_ptr<Transport> transport, Handler handler)
    : transport_(std::move(transport)), handler_(std::move(handler)) {}

RpcEndpoint::~RpcEndpoint() { Stop(); }

void RpcEndpoint::Start() {
  if (running_.exchange(true)) return;
  // In-process transports hand replies to the waiting call on the replier's
  // thread: one thread hand-off fewer per request.
  transport_->SetDirectDelivery([this](Message& m) {
    if (!(m.header.flags & kReplyFlag)) return false;
    std::shared_ptr<RpcCall> call = TakePending(m.header.request_id);
    if (call == nullptr) return false;  // the receive loop logs it
    CompleteCall(*call, std::move(m));
    return true;
  });
  thread_ = std::thread([this] { Loop(); });
}

std::shared_ptr<RpcCall> RpcEndpoint::TakePending(uint64_t request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(request_id);
  if (it == pending_.end()) return nullptr;
  std::shared_ptr<RpcCall> call = std::move(it->second);
  pending_.erase(it);
  return call;
}

void RpcEndpoint::CompleteCall(RpcCall& call, Message reply) {
  if (reply.header.type == MessageType::kError) {
    call.Complete(
        Status(Status::Code::kUnavailable,
               fmt::format("node {} answered {}: {}", reply.header.sender,
                           call.what_, ErrorText(reply))));
  } else {
    call.Complete(std::move(reply));
  }
}

void RpcEndpoint::Stop() {
  // No sender is inside the fast path once this returns.
  transport_->SetDirectDelivery(nullptr);
  if (running_.exchange(false) && thread_.joinable()) thread_.join();
  std::map<uint64_t, std::shared_ptr<RpcCall>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.swap(pending_);
  }
  for (auto& [id, call] : pending) {
    call->Complete(Status::Cancelled("node {} stopped before the reply to {}",
                                     node_id(), call->what_));
  }
  transport_->Close();
}

void RpcEndpoint::Loop() {
  while (running_.load()) {
    auto msg = transport_->Recv(std::chrono::milliseconds(50));
    if (!msg.ok()) {
      if (msg.status().code() == Status::Code::kDeadlineExceeded) continue;
      if (!running_.load()) break;
      LogWarning("node {}: receive failed: {}", node_id(),
                 msg.status().ToString());
      continue;
    }
    if (msg->header.flags & kReplyFlag) {
      std::shared_ptr<RpcCall> call = TakePending(msg->header.request_id);
      if (call == nullptr) {
        LogDebug("node {}: reply {} from node {} matches no request (late?)",
                 node_id(), msg->header.request_id, msg->header.sender);
        continue;
      }
      CompleteCall(*call, std::move(msg).value());
      continue;
    }
    handler_(std::move(msg).value());
  }
}

std::shared_ptr<RpcCall> RpcEndpoint::Request(NodeId to, Message msg) {
  auto call = std::make_shared<RpcCall>();
  call->what_ =
      fmt::format("{} to node {}", MessageTypeName(msg.header.type), to);
  const uint64_t id = next_id_.fetch_add(1);
  msg.header.request_id = id;
  msg.header.flags &= ~kReplyFlag;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_[id] = call;
  }
  Status st = transport_->Send(to, std::move(msg));
  if (!st.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.erase(id);
    }
    call->Complete(st);
  }
  return call;
}

Status RpcEndpoint::Reply(const Message& request, Message reply) {
  reply.header.request_id = request.header.request_id;
  reply.header.flags |= kReplyFlag;
  return transport_->Send(request.header.sender, std::move(reply));
}

Status RpcEndpoint::ReplyError(const Message& request, const Status& status) {
  Message m;
  m.header.type = MessageType::kError;
  std::string text = status.ToString();
  m.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
  return Reply(request, std::move(m));
}

void RpcEndpoint::CancelPending(const Status& status) {
  std::map<uint64_t, std::shared_ptr<RpcCall>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.swap(pending_);
  }
  for (auto& [id, call] : pending) call->Complete(status);
}

Status RpcEndpoint::Send(NodeId to, Message msg) {
  msg.header.flags &= ~kReplyFlag;
  return transport_->Send(to, std::move(msg));
}

}  // namespace strata

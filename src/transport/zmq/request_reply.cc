#include "transport/zmq/request_reply.h"

#include <zmq.hpp>

#include "common/log.h"
#include "transport/zmq/transport.h"
#include "transport/zmq/zap_handler.h"

namespace strata {
namespace {

constexpr std::chrono::milliseconds kPollSlice{100};

bool IsTcpEndpoint(const std::string& endpoint) {
  return endpoint.rfind("tcp://", 0) == 0 && endpoint.size() > 6;
}

}  // namespace

Result<std::unique_ptr<ReplyServer>> ReplyServer::Start(
    const std::string& endpoint, const std::optional<CurveKeys>& curve,
    Handler handler) {
  if (!IsTcpEndpoint(endpoint))
    return Status::InvalidArgument(
        "the control endpoint '{}' is not tcp://IP:PORT (or tcp://IP:*)",
        endpoint);
  if (curve) RETURN_IF_ERROR(CheckCurveKeys(*curve));
  std::unique_ptr<ReplyServer> s(new ReplyServer());
  ASSIGN_OR_RETURN(s->context_, ZmqContext::Create(1));
  if (curve) {
    // The ZAP handler before the CURVE server binds (zap_handler.h).
    ASSIGN_OR_RETURN(ZapHandler * zap, s->context_->zap());
    ASSIGN_OR_RETURN(
        s->domain_,
        zap->Register(curve->allowed_client_keys, "the control endpoint",
                      std::make_shared<std::atomic<uint64_t>>(0)));
  }
  try {
    s->socket_ = std::make_unique<zmq::socket_t>(s->context_->context(),
                                                 zmq::socket_type::rep);
    s->socket_->set(zmq::sockopt::linger, 0);
    if (curve) {
      s->socket_->set(zmq::sockopt::curve_server, true);
      s->socket_->set(zmq::sockopt::curve_secretkey, curve->own.secret_key);
      s->socket_->set(zmq::sockopt::zap_domain, s->domain_);
    }
    s->socket_->bind(endpoint);
    s->endpoint_ = s->socket_->get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    s->socket_.reset();
    return Status::Unavailable("the control endpoint cannot bind {}: {}",
                               endpoint, e.what());
  }
  s->handler_ = std::move(handler);
  s->thread_ = std::thread([raw = s.get()] { raw->Serve(); });
  return s;
}

ReplyServer::~ReplyServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  socket_.reset();
}

void ReplyServer::Serve() {
  while (!stop_.load()) {
    zmq::pollitem_t item{socket_->handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, kPollSlice);
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      zmq::message_t request;
      if (!socket_->recv(request, zmq::recv_flags::none)) continue;
      const std::string reply = handler_(request.to_string());
      socket_->send(zmq::buffer(reply), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      LogWarning("control endpoint {}: {}", endpoint_, e.what());
    }
  }
}

Result<std::string> RequestReply(const std::string& endpoint,
                                 const std::optional<CurveKeys>& curve,
                                 const std::string& request,
                                 std::chrono::milliseconds timeout) {
  if (!IsTcpEndpoint(endpoint))
    return Status::InvalidArgument("'{}' is not tcp://HOST:PORT", endpoint);
  if (curve) RETURN_IF_ERROR(CheckCurveKeys(*curve));
  try {
    zmq::context_t context(1);
    zmq::socket_t socket(context, zmq::socket_type::req);
    socket.set(zmq::sockopt::linger, 0);
    if (curve) {
      socket.set(zmq::sockopt::curve_serverkey, curve->server_public_key);
      socket.set(zmq::sockopt::curve_publickey, curve->own.public_key);
      socket.set(zmq::sockopt::curve_secretkey, curve->own.secret_key);
    }
    socket.connect(endpoint);
    socket.send(zmq::buffer(request), zmq::send_flags::none);
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, timeout);
    if ((item.revents & ZMQ_POLLIN) == 0)
      return Status::DeadlineExceeded(
          "no reply from the control endpoint {} in {:.0f} s (is the run "
          "going on there{}?)",
          endpoint, std::chrono::duration<double>(timeout).count(),
          curve ? ", and does it take this cluster key?" : "");
    zmq::message_t reply;
    if (!socket.recv(reply, zmq::recv_flags::none))
      return Status::Internal("the control endpoint {}: no reply", endpoint);
    return reply.to_string();
  } catch (const zmq::error_t& e) {
    return Status::Internal("the control endpoint {}: {}", endpoint, e.what());
  }
}

}  // namespace strata

#include "metrics/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <thread>

#include "common/log.h"

namespace strata {

struct HttpServer::Impl {
  httplib::Server server;
  std::thread thread;
};

Status ParseHostPort(const std::string& address, const std::string& what,
                     std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return Status::InvalidArgument(
        "{} = \"{}\": expected host:port (e.g. 127.0.0.1:9464)", what, address);
  }
  const std::string p = address.substr(colon + 1);
  if (p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(p) > 65535) {
    return Status::InvalidArgument(
        "{} = \"{}\": the port \"{}\" is not a number from 0 to 65535", what,
        address, p);
  }
  *host = address.substr(0, colon);
  // [::1]:9464
  if (host->size() > 2 && host->front() == '[' && host->back() == ']')
    *host = host->substr(1, host->size() - 2);
  *port = std::stoi(p);
  return Status::Ok();
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& address, Handler handler) {
  std::string host;
  int port = 0;
  RETURN_IF_ERROR(ParseHostPort(address, "HTTP address", &host, &port));
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->impl_ = std::make_unique<Impl>();
  s->host_ = host;
  auto serve = [handler](const httplib::Request& req, httplib::Response& res) {
    HttpRequest r;
    r.path = req.path;
    for (const auto& [k, v] : req.params) r.query[k] = v;
    HttpResponse out;
    try {
      out = handler(r);
    } catch (const std::exception& e) {
      out.status = 500;
      out.body = std::string("internal error: ") + e.what() + "\n";
    }
    res.status = out.status;
    res.set_content(out.body, out.content_type.c_str());
  };
  s->impl_->server.Get(".*", serve);
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would
  // let a second server share a port that is in use instead of failing.
  s->impl_->server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // Bounded waits on slow or silent clients.
  s->impl_->server.set_read_timeout(5, 0);
  s->impl_->server.set_write_timeout(5, 0);
  s->impl_->server.set_keep_alive_timeout(5);
  if (port == 0) {
    port = s->impl_->server.bind_to_any_port(host);
    if (port < 0)
      return Status::Unavailable("cannot listen on {} (a local address?)",
                                 address);
  } else if (!s->impl_->server.bind_to_port(host, port)) {
    return Status::Unavailable(
        "cannot listen on {}:{} (in use, or not an address of this machine)",
        host, port);
  }
  s->port_ = port;
  Impl* impl = s->impl_.get();
  impl->thread = std::thread([impl] { impl->server.listen_after_bind(); });
  // httplib's stop() does nothing until the loop runs (the thread would then
  // wait in accept() for ever): return once it does.
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!impl->server.is_running()) {
    if (std::chrono::steady_clock::now() > until) {
      return Status::Unavailable("the HTTP server on {}:{} did not start", host,
                                 port);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return s;
}

HttpServer::~HttpServer() { Stop(); }

std::string HttpServer::url() const {
  const bool v6 = host_.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host_ + "]" : host_) + ":" +
         std::to_string(port_);
}

void HttpServer::Stop() {
  if (!impl_) return;
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_.reset();
}

Result<std::string> HttpGet(const std::string& host, int port,
                            const std::string& path,
                            std::chrono::milliseconds timeout) {
  httplib::Client client(host, port);
  const auto sec = timeout.count() / 1000;
  const auto usec = (timeout.count() % 1000) * 1000;
  client.set_connection_timeout(sec, usec);
  client.set_read_timeout(sec, usec);
  client.set_write_timeout(sec, usec);
  auto res = client.Get(path.c_str());
  const std::string url = "http://" + host + ":" + std::to_string(port) + path;
  if (!res) {
    return Status::Unavailable("GET {}: {}", url,
                               httplib::to_string(res.error()));
  }
  if (res->status != 200) {
    return Status::Unavailable("GET {}: status {}: {}", url, res->status,
                               res->body.substr(0, 200));
  }
  return res->body;
}

}  // namespace strata

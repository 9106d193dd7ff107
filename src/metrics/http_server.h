#pragma once

// A small HTTP server and client for the tools people watch: Prometheus
// scrapes /metrics from the coordinator (prometheus.h), `strata serve`
// serves the live report page. cpp-httplib (Debian's libcpp-httplib-dev)
// stays inside http_server.cc. No LibTorch here.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"

namespace strata {

struct HttpRequest {
  std::string path;                          // "/metrics"
  std::map<std::string, std::string> query;  // ?a=b&c=d
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  // Answers GET requests (on the server's own threads; must be
  // thread-safe). HEAD is answered from the same handler.
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Listens on `address` ("host:port"; port 0 picks a free one) and serves
  // from threads of its own until Stop() or destruction. InvalidArgument
  // for a malformed address, Unavailable naming the address when it cannot
  // be bound (in use, not a local address).
  static Result<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                   Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // "http://host:port"
  std::string url() const;
  // Stops listening and joins the server's threads. Idempotent.
  void Stop();

 private:
  struct Impl;
  HttpServer() = default;
  std::unique_ptr<Impl> impl_;
  std::string host_;
  int port_ = 0;
};

// Splits "host:port" (the port 0..65535). InvalidArgument naming `what` and
// the value otherwise.
Status ParseHostPort(const std::string& address, const std::string& what,
                     std::string* host, int* port);

// GET http://host:port/path (path with its query), waiting at most
// `timeout` to connect and for each read. The body on status 200;
// Unavailable naming the URL when nothing answers, otherwise an error with
// the status.
Result<std::string> HttpGet(const std::string& host, int port,
                            const std::string& path,
                            std::chrono::milliseconds timeout);

}  // namespace strata

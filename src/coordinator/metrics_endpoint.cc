#include "coordinator/metrics_endpoint.h"

namespace strata {
namespace {

HttpResponse Serve(const ClusterMetrics& metrics, const HttpRequest& r) {
  HttpResponse res;
  if (r.path == "/metrics") {
    res.content_type = "text/plain; version=0.0.4; charset=utf-8";
    res.body = metrics.Render();
  } else if (r.path == "/") {
    res.content_type = "text/html; charset=utf-8";
    res.body =
        "<html><body><p>strata coordinator: <a "
        "href=\"/metrics\">/metrics</a></p></body></html>\n";
  } else {
    res.status = 404;
    res.body = "not found: " + r.path + " (try /metrics)\n";
  }
  return res;
}

}  // namespace

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& address, const RoleTable& roles,
    std::vector<std::pair<std::string, std::string>> labels) {
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint);
  e->metrics_ = std::make_shared<ClusterMetrics>(roles, std::move(labels));
  std::shared_ptr<ClusterMetrics> metrics = e->metrics_;
  auto started = HttpServer::Start(
      address, [metrics](const HttpRequest& r) { return Serve(*metrics, r); });
  if (!started.ok())
    return started.status().WithContext("cluster.metrics_address");
  e->http_ = std::move(started).value();
  return e;
}

Status CheckMetricsAddress(const std::string& address) {
  if (address.empty()) return Status::Ok();
  auto probe = HttpServer::Start(
      address, [](const HttpRequest&) { return HttpResponse{}; });
  if (!probe.ok()) return probe.status().WithContext("cluster.metrics_address");
  return Status::Ok();
}

}  // namespace strata

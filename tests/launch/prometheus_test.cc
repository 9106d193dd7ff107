// cluster.metrics_address: the coordinator serves /metrics during a run;
// promtool accepts what it serves, and a real Prometheus server (Debian's
// prometheus, started here on loopback, scraping every second) records the
// workers' samples/s, read back through its query API. Skips, saying so,
// without the package.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "launch/cluster_test_util.h"
#include "metrics/http_server.h"
#include "shell_util.h"

extern char** environ;

namespace strata {
namespace {

using std::chrono::milliseconds;
using testing_util::Base;
using testing_util::RunConfig;
using testing_util::TempRoot;
using testing_util::With;
using Clock = std::chrono::steady_clock;

// A loopback port free at the time of asking.
int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

bool Have(const char* tool) {
  return std::system((std::string("command -v ") + tool + " >/dev/null 2>&1")
                         .c_str()) == 0;
}

// A Prometheus server of our own (ended by PID in the destructor).
class PrometheusServer {
 public:
  bool Start(const std::string& dir, int port, int target_port) {
    port_ = port;
    const std::string config = dir + "/prometheus.yml";
    std::ofstream(config) << "global:\n  scrape_interval: 1s\n"
                          << "  scrape_timeout: 1s\n"
                          << "scrape_configs:\n  - job_name: strata\n"
                          << "    static_configs:\n"
                          << "      - targets: ['127.0.0.1:" << target_port
                          << "']\n";
    std::vector<std::string> args = {
        "prometheus", "--config.file=" + config,
        "--storage.tsdb.path=" + dir + "/tsdb",
        "--web.listen-address=127.0.0.1:" + std::to_string(port),
        "--log.level=warn"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    const std::string log = dir + "/prometheus.log";
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    const int rc =
        posix_spawnp(&pid_, "prometheus", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return false;
    // Ready within 60 s.
    const auto until = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < until) {
      if (HttpGet("127.0.0.1", port_, "/-/ready", milliseconds(1000)).ok())
        return true;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(milliseconds(200));
    }
    return false;
  }
  // Waits (up to 30 s) until Prometheus has tried its target once: its
  // scrape loop starts some seconds after it is ready.
  bool WaitForFirstScrape() {
    const auto until = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < until) {
      auto body =
          HttpGet("127.0.0.1", port_, "/api/v1/targets", milliseconds(2000));
      if (body.ok()) {
        auto j = nlohmann::json::parse(*body, nullptr, false);
        if (!j.is_discarded()) {
          for (const auto& t : j["data"]["activeTargets"]) {
            if (t.value("lastScrape", "").rfind("0001-", 0) != 0 &&
                !t.value("lastScrape", "").empty())
              return true;
          }
        }
      }
      std::this_thread::sleep_for(milliseconds(200));
    }
    return false;
  }
  ~PrometheusServer() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(milliseconds(100));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  Result<nlohmann::json> QueryRange(const std::string& query, double start,
                                    double end) {
    ASSIGN_OR_RETURN(std::string body,
                     HttpGet("127.0.0.1", port_,
                             "/api/v1/query_range?query=" + query +
                                 "&start=" + std::to_string(start) +
                                 "&end=" + std::to_string(end) + "&step=1",
                             milliseconds(10000)));
    return nlohmann::json::parse(body);
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

double UnixNow() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(PrometheusTest, ARealPrometheusScrapesTheWorkersSamplesPerSecond) {
  if (!Have("prometheus") || !Have("promtool"))
    GTEST_SKIP() << "prometheus/promtool not installed (scripts/setup.sh "
                    "installs Debian's prometheus)";
  const std::string root = TempRoot();
  const int metrics_port = FreePort(), prom_port = FreePort();
  ASSERT_GT(metrics_port, 0);
  ASSERT_GT(prom_port, 0);
  PrometheusServer prom;
  ASSERT_TRUE(prom.Start(root, prom_port, metrics_port))
      << "prometheus did not start; see " << root << "/prometheus.log";
  ASSERT_TRUE(prom.WaitForFirstScrape())
      << "prometheus never scraped its target; see " << root
      << "/prometheus.log";

  // A run of several seconds: 2 workers slowed down by a random delay.
  const Config c = With(
      Base(root),
      {"run.name=prom", "cluster.mode=async", "cluster.workers=2",
       "train.iterations=300", "cluster.worker_delay_ms=40",
       "cluster.metrics_address=127.0.0.1:" + std::to_string(metrics_port)});
  const double start = UnixNow();
  Result<RunSummary> got = Status::Internal("not run");
  std::thread run([&] { got = RunConfig(c); });
  // While it trains: what /metrics serves passes promtool.
  std::string text;
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < until) {
    auto body =
        HttpGet("127.0.0.1", metrics_port, "/metrics", milliseconds(2000));
    if (body.ok() &&
        body->find("strata_worker_steps_total{worker=\"1\"}") !=
            std::string::npos &&
        body->find("strata_run_state{state=\"training\"} 1") !=
            std::string::npos) {
      text = *body;
      break;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  run.join();
  const double end = UnixNow();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_FALSE(text.empty()) << "/metrics never showed both workers training";
  int status = 0;
  const std::string said =
      testing_util::RunShellWithInput("promtool check metrics", text, &status);
  EXPECT_EQ(status, 0) << said;
  EXPECT_NE(text.find("strata_server_gradient_staleness_bucket{server=\"0\","),
            std::string::npos);

  // Prometheus scraped the run: the samples/s series of both workers, with
  // a positive value.
  auto q = prom.QueryRange("strata_worker_samples_per_second", start, end);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  ASSERT_EQ((*q)["status"], "success") << q->dump();
  const auto& series = (*q)["data"]["result"];
  ASSERT_EQ(series.size(), 2u) << q->dump();
  for (const auto& s : series) {
    double best = 0;
    for (const auto& v : s["values"])
      best = std::max(best, std::stod(v[1].get<std::string>()));
    EXPECT_GT(best, 0) << s.dump();
  }
  std::printf("prometheus recorded %zu points for worker %s\n",
              series[0]["values"].size(),
              series[0]["metric"]["worker"].get<std::string>().c_str());
}

TEST(PrometheusTest, ABadOrBusyAddressIsRefusedNamingTheKey) {
  const std::string root = TempRoot();
  auto bad = RunConfig(
      With(Base(root), {"cluster.mode=async", "cluster.metrics_address=9464"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cluster.metrics_address"),
            std::string::npos)
      << bad.status().message();
  // A port someone else listens on.
  auto other = HttpServer::Start(
      "127.0.0.1:0", [](const HttpRequest&) { return HttpResponse{}; });
  ASSERT_TRUE(other.ok());
  auto busy =
      RunConfig(With(Base(root), {"cluster.mode=async",
                                  "cluster.metrics_address=127.0.0.1:" +
                                      std::to_string((*other)->port())}));
  ASSERT_FALSE(busy.ok());
  EXPECT_NE(busy.status().message().find("cluster.metrics_address"),
            std::string::npos)
      << busy.status().message();
  EXPECT_NE(busy.status().message().find("in use"), std::string::npos)
      << busy.status().message();
}

}  // namespace
}  // namespace strata

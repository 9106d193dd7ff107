// Two machines, simulated: network namespaces joined by a veth pair, each
// with its own address. The coordinator, a server and the evaluator run in
// one, two workers in the other, each a `strata node` process with its own
// run directory (no shared filesystem). The servers and workers bind
// wildcard addresses (tcp://0.0.0.0:*), so the run only works if each node
// advertises the address the other machine can reach. Needs root (or
// CAP_NET_ADMIN) and iproute2; skips, saying why, without them. Creates and
// deletes its own namespaces; ends only the processes it started.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/fs.h"

extern char** environ;

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

// A file's text, or "" when it cannot be read (for failure messages).
std::string TextOf(const std::string& path) {
  auto text = ReadFile(path);
  return text.ok() ? *text : std::string();
}

pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc =
      posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

// Runs a command to completion (bounded); true on exit code 0.
bool RunCommand(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = Spawn(args, log);
  if (pid < 0) return false;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

class TwoMachines : public ::testing::Test {
 protected:
  void SetUp() override {
    const int tag = static_cast<int>(::getpid() % 200) + 20;
    a_ = "strata_a" + std::to_string(::getpid());
    b_ = "strata_b" + std::to_string(::getpid());
    ip_a_ = "10.213." + std::to_string(tag) + ".1";
    ip_b_ = "10.213." + std::to_string(tag) + ".2";
    root_ = "/tmp/strata_netns_test_XXXXXX";
    ASSERT_NE(::mkdtemp(root_.data()), nullptr);
    const std::string va = "sa" + std::to_string(::getpid() % 100000);
    const std::string vb = "sb" + std::to_string(::getpid() % 100000);
    const std::string log = root_ + "/setup.log";
    const std::vector<std::vector<std::string>> steps = {
        {"ip", "netns", "add", a_},
        {"ip", "netns", "add", b_},
        {"ip", "link", "add", va, "type", "veth", "peer", "name", vb},
        {"ip", "link", "set", va, "netns", a_},
        {"ip", "link", "set", vb, "netns", b_},
        {"ip", "-n", a_, "addr", "add", ip_a_ + "/24", "dev", va},
        {"ip", "-n", b_, "addr", "add", ip_b_ + "/24", "dev", vb},
        {"ip", "-n", a_, "link", "set", va, "up"},
        {"ip", "-n", b_, "link", "set", vb, "up"},
        {"ip", "-n", a_, "link", "set", "lo", "up"},
        {"ip", "-n", b_, "link", "set", "lo", "up"}};
    for (const auto& step : steps) {
      if (!RunCommand(step, log)) {
        std::string text = TextOf(log);
        std::string cmd;
        for (const auto& s : step) cmd += s + " ";
        skip_reason_ =
            "cannot build two network namespaces (needs root and "
            "iproute2): '" +
            cmd + "' failed: " + text;
        return;
      }
    }
  }

  void TearDown() override {
    for (pid_t pid : started_) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
      }
    }
    // Deleting a namespace removes the veth end inside it.
    RunCommand({"ip", "netns", "del", a_}, root_ + "/teardown.log");
    RunCommand({"ip", "netns", "del", b_}, root_ + "/teardown.log");
  }

  pid_t Node(const std::string& ns, const std::vector<std::string>& role,
             const std::string& dir, const std::string& log) {
    std::vector<std::string> args = {"ip", "netns",       "exec",
                                     ns,   STRATA_BINARY, "node"};
    args.insert(args.end(), role.begin(), role.end());
    for (const char* kv :
         {"cluster.mode=async", "cluster.servers=1", "cluster.workers=2",
          "train.iterations=60", "train.log_every=10",
          "data.synthetic.train_size=2000", "data.synthetic.val_size=200",
          "cluster.threads_per_worker=1", "cluster.heartbeat_interval_ms=100",
          "cluster.heartbeat_timeout_ms=3000",
          "cluster.request_timeout_ms=30000", "run.log_level=info"}) {
      args.push_back("--set");
      args.push_back(kv);
    }
    for (const std::string& kv : extra_sets_) {
      args.push_back("--set");
      args.push_back(kv);
    }
    args.push_back("--coordinator");
    args.push_back("tcp://" + ip_a_ + ":5555");
    args.push_back("--run-dir");
    args.push_back(dir);
    const pid_t pid = Spawn(args, log);
    EXPECT_GT(pid, 0);
    if (pid > 0) started_.push_back(pid);
    return pid;
  }

  // Runs the cluster of the tests below: coordinator, server and evaluator
  // on machine A, two workers on machine B, each binding every interface.
  // Checks that it trains, and what machine A's summary.json says.
  void TrainOnTwoMachines();

  std::string a_, b_, ip_a_, ip_b_, root_, skip_reason_;
  std::vector<pid_t> started_;
  std::vector<std::string> extra_sets_;  // more --set for every node
};

TEST_F(TwoMachines, NodesOnTwoHostsTrainThroughAdvertisedAddresses) {
  if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  TrainOnTwoMachines();
  // Without cluster.security, every node listening beyond loopback says so,
  // once.
  for (const char* log : {"/server.log", "/worker0.log", "/evaluator.log"}) {
    const std::string text = TextOf(root_ + log);
    const std::string warning = "without authentication or encryption";
    const size_t first = text.find(warning);
    EXPECT_NE(first, std::string::npos) << log << ":\n" << text;
    EXPECT_EQ(text.find(warning, first + 1), std::string::npos) << text;
  }
}

// The same cluster with cluster.security = "curve" (one cluster key, which
// both machines read from the same directory here): it trains over CURVE
// between the two addresses, and nobody warns or refuses anyone.
TEST_F(TwoMachines, NodesOnTwoHostsTrainOverCurve) {
  if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  const std::string keys = root_ + "/keys";
  ASSERT_TRUE(RunCommand({STRATA_BINARY, "keys", "generate", keys},
                         root_ + "/keys.log"))
      << TextOf(root_ + "/keys.log");
  extra_sets_ = {"cluster.security=curve", "cluster.keys_dir=" + keys};
  TrainOnTwoMachines();
  for (const char* log : {"/coordinator.log", "/server.log", "/worker0.log",
                          "/worker1.log", "/evaluator.log"}) {
    const std::string text = TextOf(root_ + log);
    EXPECT_EQ(text.find("without authentication"), std::string::npos) << text;
    EXPECT_EQ(text.find("refused"), std::string::npos) << text;
    EXPECT_NE(text.find(" (CURVE)"), std::string::npos) << text;
  }
}

void TwoMachines::TrainOnTwoMachines() {
  const std::string dir_a = root_ + "/machine_a", dir_b = root_ + "/machine_b";
  const std::string wildcard = "tcp://0.0.0.0:*";
  const pid_t coordinator =
      Node(a_, {"--role", "coordinator"}, dir_a, root_ + "/coordinator.log");
  Node(a_, {"--role", "server", "--index", "0", "--bind", wildcard}, dir_a,
       root_ + "/server.log");
  Node(a_, {"--role", "evaluator", "--bind", wildcard}, dir_a,
       root_ + "/evaluator.log");
  Node(b_, {"--role", "worker", "--index", "0", "--bind", wildcard}, dir_b,
       root_ + "/worker0.log");
  Node(b_, {"--role", "worker", "--index", "1", "--bind", wildcard}, dir_b,
       root_ + "/worker1.log");
  ASSERT_GT(coordinator, 0);
  // Every node ends by itself when the run ends; bounded.
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  int status = 0;
  for (pid_t pid : started_) {
    while (::waitpid(pid, &status, WNOHANG) == 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (pid == coordinator) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << TextOf(root_ + "/coordinator.log");
    }
  }
  ASSERT_LT(Clock::now(), deadline) << "the run did not end within 120 s";
  auto summary = ReadFile(dir_a + "/summary.json");
  ASSERT_TRUE(summary.ok())
      << summary.status().ToString() << "\n"
      << TextOf(root_ + "/coordinator.log") << TextOf(root_ + "/worker0.log");
  auto j = nlohmann::json::parse(*summary);
  ASSERT_EQ(j["workers"].size(), 2u);
  for (const auto& w : j["workers"]) {
    EXPECT_EQ(w["iterations"].get<int64_t>(), 60);
    EXPECT_GT(w["bytes_pushed"].get<int64_t>(), 0);
  }
  EXPECT_TRUE(j["lost_workers"].empty());
  EXPECT_GT(j["final_val_acc"].get<double>(), 0.2);  // chance is 0.1
  // Machine B's own run directory holds the workers' metrics; the
  // advertised endpoints named each machine's own address.
  auto metrics = ReadFile(dir_b + "/metrics.jsonl");
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(metrics->find("\"worker\":1"), std::string::npos);
  EXPECT_FALSE(ReadFile(dir_a + "/metrics.jsonl").ok());
}

}  // namespace
}  // namespace strata

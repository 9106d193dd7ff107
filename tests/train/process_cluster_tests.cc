// Multi-process clusters (`strata train --processes`): a worker process is
// killed by PID mid-run. Starts the strata binary; ends only the processes
// it started, by PID. Labelled slow.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/fs.h"

extern char** environ;

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

struct Launched {
  pid_t pid = -1;
  std::string run_dir;
};

Launched Launch(const std::string& mode) {
  std::string root = "/tmp/strata_process_test_XXXXXX";
  EXPECT_NE(::mkdtemp(root.data()), nullptr);
  Launched l;
  l.run_dir = root + "/r";
  std::vector<std::string> args = {STRATA_BINARY,
                                   "train",
                                   "--processes",
                                   "--set",
                                   "cluster.mode=" + mode,
                                   "--set",
                                   "run.dir=" + root,
                                   "--set",
                                   "run.name=r",
                                   "--set",
                                   "cluster.workers=3",
                                   "--set",
                                   "cluster.servers=1",
                                   "--set",
                                   "train.iterations=300",
                                   "--set",
                                   "cluster.worker_delay_ms=10",
                                   "--set",
                                   "train.log_every=5",
                                   "--set",
                                   "cluster.heartbeat_interval_ms=100",
                                   "--set",
                                   "cluster.heartbeat_timeout_ms=1500",
                                   "--set",
                                   "data.synthetic.train_size=3000",
                                   "--set",
                                   "data.synthetic.val_size=300",
                                   "--set",
                                   "cluster.threads_per_worker=1",
                                   "--set",
                                   "run.log_level=warning"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  EXPECT_EQ(posix_spawn(&l.pid, STRATA_BINARY, nullptr, nullptr, argv.data(),
                        environ),
            0);
  return l;
}

// Kills worker 1's process once it has trained a few iterations. `name` is
// how pids.json names it (node 3 with one server, node 2 without servers).
pid_t KillWorkerOne(const Launched& l,
                    const std::string& name = "worker 1 (node 3)") {
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  pid_t victim = -1;
  while (Clock::now() < deadline) {
    auto pids = ReadFile(l.run_dir + "/pids.json");
    auto metrics = ReadFile(l.run_dir + "/metrics.jsonl");
    if (pids.ok() && metrics.ok() &&
        metrics->find("\"worker\":1") != std::string::npos) {
      victim = nlohmann::json::parse(*pids)[name].get<pid_t>();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GT(victim, 0) << "worker 1 never started training";
  if (victim > 0) ::kill(victim, SIGKILL);
  return victim;
}

// Waits for the launcher to exit (bounded); returns its exit code.
int WaitExit(pid_t pid, double* seconds) {
  const auto start = Clock::now();
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() - start > std::chrono::seconds(120)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "strata train --processes did not end within 120 s";
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  *seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ProcessClusterTest, AsyncRunFinishesWithoutAKilledWorkerAndNamesIt) {
  Launched l = Launch("async");
  ASSERT_GT(l.pid, 0);
  ASSERT_GT(KillWorkerOne(l), 0);
  double secs = 0;
  EXPECT_EQ(WaitExit(l.pid, &secs), 0);
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  ASSERT_EQ(summary["lost_workers"].size(), 1u) << summary.dump();
  EXPECT_EQ(summary["lost_workers"][0], "worker 1 (node 3)");
  EXPECT_EQ(summary["workers"][0]["iterations"], 300);
  EXPECT_EQ(summary["workers"][2]["iterations"], 300);
  EXPECT_GT(summary["final_val_acc"].get<double>(), 0.2);
}

TEST(ProcessClusterTest,
     SyncRunStopsWithinTheHeartbeatTimeoutNamingTheKilledWorker) {
  Launched l = Launch("sync");
  ASSERT_GT(l.pid, 0);
  ASSERT_GT(KillWorkerOne(l), 0);
  double secs = 0;
  EXPECT_EQ(WaitExit(l.pid, &secs), 1);
  // Heartbeat timeout 1.5 s, plus gathering statistics and ending children.
  EXPECT_LT(secs, 15.0);
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  ASSERT_TRUE(summary.contains("error")) << summary.dump();
  EXPECT_NE(summary["error"].get<std::string>().find("worker 1"),
            std::string::npos);
  EXPECT_EQ(summary["lost_workers"][0], "worker 1 (node 3)");
}

TEST(ProcessClusterTest,
     AllReduceRunStopsWithinTheHeartbeatTimeoutNamingTheKilledWorker) {
  // No servers: worker 1 is node 2. The survivors are blocked in a Gloo
  // collective with it; each must stop with the coordinator's verdict.
  Launched l = Launch("allreduce");
  ASSERT_GT(l.pid, 0);
  ASSERT_GT(KillWorkerOne(l, "worker 1 (node 2)"), 0);
  double secs = 0;
  EXPECT_EQ(WaitExit(l.pid, &secs), 1);
  EXPECT_LT(secs, 15.0);
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  ASSERT_TRUE(summary.contains("error")) << summary.dump();
  EXPECT_NE(summary["error"].get<std::string>().find("worker 1"),
            std::string::npos);
  EXPECT_EQ(summary["lost_workers"][0], "worker 1 (node 2)");
}

TEST(ProcessClusterTest, GossipRunFinishesWithoutAKilledWorker) {
  Launched l = Launch("gossip");
  ASSERT_GT(l.pid, 0);
  ASSERT_GT(KillWorkerOne(l, "worker 1 (node 2)"), 0);
  double secs = 0;
  EXPECT_EQ(WaitExit(l.pid, &secs), 0);
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  ASSERT_EQ(summary["lost_workers"].size(), 1u) << summary.dump();
  EXPECT_EQ(summary["lost_workers"][0], "worker 1 (node 2)");
  EXPECT_EQ(summary["workers"][0]["iterations"], 300);
  EXPECT_EQ(summary["workers"][2]["iterations"], 300);
  EXPECT_GT(summary["final_val_acc"].get<double>(), 0.2);
}

}  // namespace
}  // namespace strata

// Multi-process clusters (`strata train --processes`): a worker process is
// killed by PID mid-run. Starts the strata binary; ends only the processes
// it started, by PID. Labelled slow.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/fs.h"
#include "shell_util.h"
#include "transport/ucx/transport.h"
#include "transport/wire.h"

extern char** environ;

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

struct Launched {
  pid_t pid = -1;
  std::string run_dir;
};

Launched Launch(const std::string& mode,
                const std::vector<std::string>& extra = {}) {
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
  for (const std::string& kv : extra) {
    args.push_back("--set");
    args.push_back(kv);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  EXPECT_EQ(posix_spawn(&l.pid, STRATA_BINARY, nullptr, nullptr, argv.data(),
                        environ),
            0);
  return l;
}

// Kills the process pids.json calls `name` (worker 1 unless told otherwise)
// once worker 1 has trained a few iterations. `name` is
// how pids.json names it (node 3 with one server, node 2 without servers).
// Whether the run in `run_dir` has written a complete checkpoint.
bool HasACheckpoint(const std::string& run_dir) {
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(run_dir + "/checkpoints", ec)) {
    if (FileExists((e.path() / "manifest.json").string())) return true;
  }
  return false;
}

pid_t KillWorkerOne(const Launched& l,
                    const std::string& name = "worker 1 (node 3)",
                    bool after_a_checkpoint = false) {
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  pid_t victim = -1;
  while (Clock::now() < deadline) {
    auto pids = ReadFile(l.run_dir + "/pids.json");
    auto metrics = ReadFile(l.run_dir + "/metrics.jsonl");
    if (pids.ok() && metrics.ok() &&
        metrics->find("\"worker\":1") != std::string::npos &&
        (!after_a_checkpoint || HasACheckpoint(l.run_dir))) {
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

// The launcher exits 1 within 15 s (heartbeat timeout 1.5 s, statistics,
// ending the children) and the summary's error names `who`.
void ExpectFailedNaming(const Launched& l, const std::string& who) {
  double secs = 0;
  EXPECT_EQ(WaitExit(l.pid, &secs), 1);
  EXPECT_LT(secs, 15.0);
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  ASSERT_TRUE(summary.contains("error")) << summary.dump();
  EXPECT_NE(summary["error"].get<std::string>().find(who), std::string::npos)
      << summary["error"];
}

// An async run (with `set`) whose worker 1 is killed finishes without it,
// names it, and the other workers run all their iterations.
void ExpectAsyncRunOutlivesAKilledWorker(const std::vector<std::string>& set) {
  Launched l = Launch("async", set);
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

// The trace as chrome://tracing and Perfetto read it (the JSON object
// format): every event has a phase, a process, a thread and a time; slices
// have a duration; each async begin has one end, not before it, with its id.
void ExpectAValidChromeTrace(const nlohmann::json& trace) {
  ASSERT_TRUE(trace.at("traceEvents").is_array());
  std::map<std::string, double> open;  // id -> begin ts
  int ended = 0;
  for (const auto& e : trace.at("traceEvents")) {
    const std::string ph = e.at("ph");
    ASSERT_TRUE(e.at("pid").is_number_integer()) << e.dump();
    if (ph == "M") continue;
    ASSERT_TRUE(e.at("tid").is_number_integer()) << e.dump();
    ASSERT_TRUE(e.at("ts").is_number()) << e.dump();
    ASSERT_TRUE(e.at("name").is_string()) << e.dump();
    EXPECT_GE(e.at("ts").get<double>(), 0.0) << e.dump();
    if (ph == "X") {
      EXPECT_GE(e.at("dur").get<double>(), 0.0) << e.dump();
    } else if (ph == "b") {
      open[e.at("id2").dump()] = e.at("ts").get<double>();
    } else if (ph == "e") {
      auto it = open.find(e.at("id2").dump());
      ASSERT_NE(it, open.end()) << "an end without its begin: " << e.dump();
      EXPECT_GE(e.at("ts").get<double>(), it->second) << e.dump();
      open.erase(it);
      ++ended;
    } else {
      ADD_FAILURE() << "unexpected phase " << ph;
    }
  }
  EXPECT_TRUE(open.empty()) << open.size() << " async slices never end";
  EXPECT_GT(ended, 0);
}

// On the coordinator's clock, a worker's push request (send to ack) holds the
// server's handling of it, within the two clocks' error bounds (half their
// round trips). Pushes are matched to handlings in order, per worker.
void ExpectEveryPushAroundItsHandling(const nlohmann::json& trace,
                                      const nlohmann::json& clocks) {
  int64_t slack_ns = 0;
  for (const auto& [who, c] : clocks.items())
    slack_ns = std::max(slack_ns, c.at("rtt_ns").get<int64_t>() / 2);
  const double slack_us = 2.0 * static_cast<double>(slack_ns) / 1e3 + 1.0;
  std::map<int, std::vector<std::pair<double, double>>> pushes;  // worker
  std::map<int, std::vector<double>> handled;  // worker -> handling starts
  std::map<std::string, double> begun;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "b" && e.at("name") == "push")
      begun[e.at("id2").dump()] = e.at("ts").get<double>();
    if (e.at("ph") == "e" && e.at("name") == "push")
      pushes[e.at("pid")].push_back(
          {begun.at(e.at("id2").dump()), e.at("ts").get<double>()});
    if (e.at("ph") == "X" && e.at("name") == "handle push")
      handled[e.at("args").at("arg").get<int>()].push_back(
          e.at("ts").get<double>());
  }
  ASSERT_EQ(pushes.size(), 3u);
  for (auto& [worker, ps] : pushes) {
    std::vector<double>& hs = handled[worker];
    std::sort(ps.begin(), ps.end());
    std::sort(hs.begin(), hs.end());
    // Every push (one per step; the server handles each once) has its
    // handling inside it.
    ASSERT_EQ(ps.size(), hs.size()) << "worker node " << worker;
    int inside = 0;
    for (size_t i = 0; i < ps.size(); ++i)
      if (hs[i] >= ps[i].first - slack_us && hs[i] <= ps[i].second + slack_us)
        ++inside;
    EXPECT_EQ(inside, static_cast<int>(ps.size()))
        << "worker node " << worker << ", slack " << slack_us << " us";
  }
}

// A node that cannot start (its data is missing, or the model does not fit
// the data) fails the run at once with its reason: the launcher checks a
// worker's inputs before it starts the nodes. Before, every node printed
// its error and the run ended only after the coordinator's join timeout
// (120 s); the `timeout 60` here would have ended it (status 124).
TEST(ProcessClusterTest, ANodeThatCannotStartFailsTheRunAtOnceSayingWhy) {
  std::string root = "/tmp/strata_process_test_XXXXXX";
  ASSERT_NE(::mkdtemp(root.data()), nullptr);
  const std::string common = std::string("timeout 60 ") + STRATA_BINARY +
                             " train --processes --set run.dir=" + root +
                             " --set train.iterations=20 ";
  struct Case {
    std::string args, says;
  };
  for (const Case& c :
       {Case{"--set data.dataset=mnist --set data.dir=" + root + "/none",
             "no such file"},
        Case{"--set model.name=lenet", "needs image inputs"}}) {
    SCOPED_TRACE(c.args);
    int status = -1;
    const std::string out =
        testing_util::RunShell(common + c.args + " 2>&1", &status);
    ASSERT_TRUE(WIFEXITED(status)) << out;
    EXPECT_EQ(WEXITSTATUS(status), 1) << out;
    EXPECT_NE(out.find("worker 0 (checked before starting the nodes)"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find(c.says), std::string::npos) << out;
  }
  std::filesystem::remove_all(root);
}

// cluster.timeline across processes: every node's spans reach the
// coordinator, each with its clock offset estimated from the heartbeats.
// The nodes share this machine's monotonic clock, so the true offset is 0
// and the estimate must be within its bound, half the round trip.
TEST(ProcessClusterTest, TheTimelineGathersEveryProcessOnOneClock) {
  const Launched l =
      Launch("async", {"cluster.timeline=true", "net.latency_ms=1"});
  double secs = 0;
  ASSERT_EQ(WaitExit(l.pid, &secs), 0);
  std::ifstream in(l.run_dir + "/timeline.json");
  const nlohmann::json trace = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(trace.is_object()) << "no timeline.json in " << l.run_dir;
  const nlohmann::json& clocks = trace.at("otherData").at("clocks");
  ASSERT_EQ(clocks.size(), 6u);  // coordinator, 1 server, 3 workers, evaluator
  for (const auto& [who, c] : clocks.items()) {
    if (who.rfind("coordinator", 0) == 0) continue;
    EXPECT_GT(c.at("samples").get<int64_t>(), 0) << who;
    // 2 x 1 ms of emulated latency; the shaper may hand a message over a
    // little early (within its learned wake-up lead, tens of us).
    EXPECT_GE(c.at("rtt_ns").get<int64_t>(), 1'800'000) << who;
    EXPECT_LE(std::abs(c.at("offset_ns").get<int64_t>()),
              c.at("rtt_ns").get<int64_t>() / 2 + 1)
        << who;
    EXPECT_GT(c.at("spans").get<int64_t>(), 0) << who;
  }
  std::map<int, int> steps;  // per worker process (pid = node id)
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("name") == "step") ++steps[e.at("pid")];
  EXPECT_EQ(steps[2], 300);
  EXPECT_EQ(steps[3], 300);
  EXPECT_EQ(steps[4], 300);
  ExpectAValidChromeTrace(trace);
  ExpectEveryPushAroundItsHandling(trace, clocks);
}

TEST(ProcessClusterTest, AsyncRunFinishesWithoutAKilledWorkerAndNamesIt) {
  ExpectAsyncRunOutlivesAKilledWorker({});
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

// No false alarms: 12 processes on this machine's cores (8 workers, each
// loading MNIST at start, 2 servers, the evaluator, the coordinator), sync
// mode where one lost node stops the run, default heartbeat settings. The
// servers register at once and wait for the workers; they used to send no
// heartbeat while waiting and were declared lost after 5 s.
TEST(ProcessClusterTest, UnderHeavyLoadNoLiveNodeIsDeclaredLost) {
  const char* data = std::getenv("STRATA_DATA_DIR");
  if (data == nullptr)
    GTEST_SKIP() << "STRATA_DATA_DIR not set: skipping the MNIST load test";
  Launched l = Launch(
      "sync",
      {"cluster.workers=8", "cluster.servers=2", "data.dataset=mnist",
       std::string("data.dir=") + data + "/mnist", "train.iterations=150",
       "cluster.worker_delay_ms=0", "cluster.heartbeat_interval_ms=500",
       "cluster.heartbeat_timeout_ms=5000"});
  ASSERT_GT(l.pid, 0);
  double secs = 0;
  EXPECT_EQ(WaitExit(l.pid, &secs), 0);
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  EXPECT_FALSE(summary.contains("error")) << summary.dump();
  EXPECT_TRUE(summary["lost_workers"].empty()) << summary.dump();
  EXPECT_EQ(summary["workers"][7]["iterations"], 150);
}

// The machine goes down: every process of a sync run is killed (SIGKILL)
// after a checkpoint was written; `strata train --resume` continues from
// it and ends with the model of the run that was never stopped, byte for
// byte (two workers: a server's sum of two gradients does not depend on
// their order).
// Kills every process of a --processes run at once, as a power cut would:
// the children first, by the PIDs in pids.json, then the launcher.
void KillWholeRun(const Launched& l) {
  auto pids = nlohmann::json::parse(*ReadFile(l.run_dir + "/pids.json"));
  for (const auto& [name, pid] : pids.items())
    ::kill(pid.get<pid_t>(), SIGKILL);
  ::kill(l.pid, SIGKILL);
  int status = 0;
  ::waitpid(l.pid, &status, 0);
}

// Starts the strata binary with `args` (after the program name).
pid_t SpawnStrata(std::vector<std::string> args) {
  args.insert(args.begin(), STRATA_BINARY);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  EXPECT_EQ(
      posix_spawn(&pid, STRATA_BINARY, nullptr, nullptr, argv.data(), environ),
      0);
  return pid;
}

TEST(ProcessClusterTest, ASyncRunKilledWholeResumesToTheSameModel) {
  const std::vector<std::string> set = {
      "cluster.workers=2", "checkpoint.every_updates=50", "data.shuffle=true"};
  Launched whole = Launch("sync", set);
  ASSERT_GT(whole.pid, 0);
  double secs = 0;
  ASSERT_EQ(WaitExit(whole.pid, &secs), 0);

  Launched cut = Launch("sync", set);
  ASSERT_GT(cut.pid, 0);
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  while (Clock::now() < deadline &&
         !FileExists(cut.run_dir + "/checkpoints/step-100/manifest.json")) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(FileExists(cut.run_dir + "/checkpoints/step-100/manifest.json"));
  // Every process at once: the children first, by their PIDs, then the
  // launcher (the coordinator).
  KillWholeRun(cut);
  ASSERT_FALSE(FileExists(cut.run_dir + "/summary.json"));

  const pid_t resumed =
      SpawnStrata({"train", "--processes", "--resume", cut.run_dir});
  ASSERT_GT(resumed, 0);
  ASSERT_EQ(WaitExit(resumed, &secs), 0);
  auto summary =
      nlohmann::json::parse(*ReadFile(cut.run_dir + "/summary.json"));
  EXPECT_GE(summary["resumed_at_step"].get<int64_t>(), 100) << summary.dump();
  EXPECT_EQ(summary["workers"][1]["iterations"], 300);
  auto a = ReadFile(whole.run_dir + "/model.safetensors");
  auto b = ReadFile(cut.run_dir + "/model.safetensors");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b) << "the resumed run's model differs";
}

// The rough edges of a resume (issue 39, part 4): a --processes run killed
// whole and resumed with plain `strata train --resume DIR` is resumed with
// one process per node, as it was launched; and its newest checkpoint,
// damaged, is skipped for the one before it, which still leads to the model
// of the run that was never stopped (sync is deterministic).
TEST(ProcessClusterTest, AResumeTakesTheLaunchAndSkipsADamagedCheckpoint) {
  const std::vector<std::string> set = {
      "cluster.workers=2", "checkpoint.every_updates=50", "data.shuffle=true",
      "checkpoint.keep=3"};
  Launched whole = Launch("sync", set);
  ASSERT_GT(whole.pid, 0);
  double secs = 0;
  ASSERT_EQ(WaitExit(whole.pid, &secs), 0);

  Launched cut = Launch("sync", set);
  ASSERT_GT(cut.pid, 0);
  const std::string at100 = cut.run_dir + "/checkpoints/step-100";
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  while (Clock::now() < deadline && !FileExists(at100 + "/manifest.json"))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(FileExists(at100 + "/manifest.json"));
  KillWholeRun(cut);
  // Damage the newest checkpoint there is (100, or a later one written
  // before the kill landed).
  int64_t newest = 0;
  for (int64_t step = 50; step <= 300; step += 50)
    if (FileExists(cut.run_dir + "/checkpoints/step-" + std::to_string(step) +
                   "/manifest.json"))
      newest = step;
  ASSERT_GE(newest, 100);
  const std::string victim = cut.run_dir + "/checkpoints/step-" +
                             std::to_string(newest) + "/worker-0.safetensors";
  ASSERT_TRUE(FileExists(victim));
  ASSERT_TRUE(WriteFileAtomic(victim, "damaged").ok());

  const pid_t resumed =
      SpawnStrata({"train", "--resume", cut.run_dir});  // no --processes
  ASSERT_GT(resumed, 0);
  ASSERT_EQ(WaitExit(resumed, &secs), 0);
  auto summary =
      nlohmann::json::parse(*ReadFile(cut.run_dir + "/summary.json"));
  EXPECT_EQ(summary["resumed_at_step"].get<int64_t>(), newest - 50)
      << summary.dump();
  EXPECT_EQ(summary["workers"][1]["iterations"], 300);
  auto a = ReadFile(whole.run_dir + "/model.safetensors");
  auto b = ReadFile(cut.run_dir + "/model.safetensors");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b) << "the resumed run's model differs";
}

// cluster.transport = "ucx" with --processes: every node process talks over
// UCX (with `ucx_settings` added to the run's settings). A sync run is
// deterministic, so it must end with the model the same run ends with over
// ZeroMQ TCP, byte for byte; and a worker killed mid-run is named, as over
// TCP.
void ExpectUcxProcessesTrainLikeTcp(
    const std::vector<std::string>& ucx_settings) {
  const std::vector<std::string> set = {"cluster.workers=2",
                                        "train.iterations=60"};
  Launched tcp = Launch("sync", set);
  std::vector<std::string> over_ucx = set;
  over_ucx.push_back("cluster.transport=ucx");
  over_ucx.insert(over_ucx.end(), ucx_settings.begin(), ucx_settings.end());
  double secs = 0;
  ASSERT_EQ(WaitExit(tcp.pid, &secs), 0);
  Launched ucx = Launch("sync", over_ucx);
  ASSERT_EQ(WaitExit(ucx.pid, &secs), 0);
  auto a = ReadFile(tcp.run_dir + "/model.safetensors");
  auto b = ReadFile(ucx.run_dir + "/model.safetensors");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b) << "the UCX run's model differs from the TCP run's";
  auto pids = ReadFile(ucx.run_dir + "/pids.json");
  ASSERT_TRUE(pids.ok());
  EXPECT_EQ(nlohmann::json::parse(*pids).size(),
            4u);  // server, 2 workers, evaluator

  std::vector<std::string> kill_set = {"cluster.transport=ucx"};
  kill_set.insert(kill_set.end(), ucx_settings.begin(), ucx_settings.end());
  Launched killed = Launch("sync", kill_set);
  ASSERT_GT(killed.pid, 0);
  ASSERT_GT(KillWorkerOne(killed), 0);
  ExpectFailedNaming(killed, "worker 1");
}

// The default (cluster.ucx_shared_memory = "auto"): every node on this
// machine, so shared memory and CMA between the processes, on endpoints
// without UCX's error handler. Async: the server and the other workers
// outlive the killed one and finish.
TEST(ProcessClusterTest, ProcessesOverUcxTrainLikeOverTcp) {
  if (!HaveUcx()) GTEST_SKIP() << "this build has no UCX (libucx-dev)";
  ExpectUcxProcessesTrainLikeTcp({});
  ExpectAsyncRunOutlivesAKilledWorker({"cluster.transport=ucx"});
}

// cluster.ucx_shared_memory = "off": every byte through UCX's TCP
// transport, with UCX's error handler on every endpoint.
TEST(ProcessClusterTest, ProcessesOverUcxTcpTrainLikeOverTcp) {
  if (!HaveUcx()) GTEST_SKIP() << "this build has no UCX (libucx-dev)";
  ExpectUcxProcessesTrainLikeTcp({"cluster.ucx_shared_memory=off"});
}

// cluster.restart: kills `victim` (as pids.json names it) of a `mode` run
// once its checkpoint at step 100 exists; returns the run's summary (the
// launcher must exit 0).
nlohmann::json RunKilling(const std::string& victim, const std::string& mode,
                          const std::vector<std::string>& set) {
  std::vector<std::string> restart = set;
  restart.push_back("cluster.restart=true");
  Launched l = Launch(mode, restart);
  EXPECT_GT(l.pid, 0);
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  while (Clock::now() < deadline &&
         !FileExists(l.run_dir + "/checkpoints/step-100/manifest.json")) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(FileExists(l.run_dir + "/checkpoints/step-100/manifest.json"));
  auto pids = nlohmann::json::parse(*ReadFile(l.run_dir + "/pids.json"));
  EXPECT_EQ(::kill(pids[victim].get<pid_t>(), SIGKILL), 0);
  double secs = 0;
  EXPECT_EQ(WaitExit(l.pid, &secs), 0);
  auto text = ReadFile(l.run_dir + "/summary.json");
  EXPECT_TRUE(text.ok());
  return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json::object();
}

// Async: the killed server is started again by the launcher, re-joins under
// its id, takes its range from the newest checkpoint, and the workers send
// it again what it never answered; the run goes on and finishes. The
// summary reports the restart and the updates of the range it lost.
TEST(ProcessClusterTest, AKilledServerIsReplacedWhileTheRunGoesOn) {
  const std::vector<std::string> set = {"checkpoint.every_updates=50"};
  Launched undisturbed = Launch("async", set);
  ASSERT_GT(undisturbed.pid, 0);
  double secs = 0;
  ASSERT_EQ(WaitExit(undisturbed.pid, &secs), 0);
  nlohmann::json summary = RunKilling("server 0 (node 1)", "async", set);
  ASSERT_EQ(summary["node_restarts"].size(), 1u) << summary.dump();
  EXPECT_EQ(summary["node_restarts"][0]["node"], "server 0 (node 1)");
  EXPECT_FALSE(summary.contains("restarts")) << "the whole cluster restarted";
  EXPECT_FALSE(summary.contains("error")) << summary.dump();
  // Updates of the range since the checkpoint are lost: at most one
  // interval of 50 steps of 3 workers.
  EXPECT_GE(summary["lost_updates_at_least"].get<int64_t>(), 0);
  EXPECT_LE(summary["lost_updates_at_least"].get<int64_t>(), 3 * 60);
  for (int w = 0; w < 3; ++w)
    EXPECT_EQ(summary["workers"][w]["iterations"], 300) << w;
  auto calm =
      nlohmann::json::parse(*ReadFile(undisturbed.run_dir + "/summary.json"));
  EXPECT_NEAR(summary["final_val_acc"].get<double>(),
              calm["final_val_acc"].get<double>(), 0.05);
}

// Async: a killed worker is started again, re-joins under its id from its
// state in the newest checkpoint (its sampler's cursor, its step) and
// finishes its iterations; the others never stopped.
TEST(ProcessClusterTest, AKilledWorkerIsReplacedAndFinishesItsSteps) {
  nlohmann::json summary =
      RunKilling("worker 1 (node 3)", "async", {"checkpoint.every_updates=50"});
  ASSERT_EQ(summary["node_restarts"].size(), 1u) << summary.dump();
  EXPECT_EQ(summary["node_restarts"][0]["node"], "worker 1 (node 3)");
  EXPECT_FALSE(summary.contains("restarts")) << "the whole cluster restarted";
  EXPECT_FALSE(summary.contains("error")) << summary.dump();
  EXPECT_TRUE(summary["lost_workers"].empty()) << summary.dump();
  for (int w = 0; w < 3; ++w)
    EXPECT_EQ(summary["workers"][w]["iterations"], 300) << w;
  EXPECT_GT(summary["final_val_acc"].get<double>(), 0.5);
}

// Async: a killed evaluator is started again and re-joins; it keeps no
// state, so it simply takes over, and the run still gets its final
// evaluation (before, a lost evaluator lost it).
TEST(ProcessClusterTest, AKilledEvaluatorIsReplacedAndTheRunIsEvaluated) {
  nlohmann::json summary = RunKilling("evaluator (node 5)", "async",
                                      {"checkpoint.every_updates=50"});
  ASSERT_EQ(summary["node_restarts"].size(), 1u) << summary.dump();
  EXPECT_EQ(summary["node_restarts"][0]["node"], "evaluator (node 5)");
  EXPECT_FALSE(summary.contains("restarts")) << "the whole cluster restarted";
  EXPECT_FALSE(summary.contains("error")) << summary.dump();
  EXPECT_TRUE(summary["lost_workers"].empty()) << summary.dump();
  ASSERT_TRUE(summary.contains("final_val_acc")) << summary.dump();
  EXPECT_GT(summary["final_val_acc"].get<double>(), 0.5);
}

// A data server killed in an async run fed by the data service is started
// again by the launcher, re-joins under its id and takes its cursor from the
// newest checkpoint; the workers ask it again for what it never answered,
// and the run goes on and finishes (before, the whole cluster restarted).
TEST(ProcessClusterTest, AKilledDataServerIsReplacedWhileTheRunGoesOn) {
  nlohmann::json summary =
      RunKilling("data server 0 (node 6)", "async",
                 {"checkpoint.every_updates=50", "cluster.data_servers=1"});
  ASSERT_EQ(summary["node_restarts"].size(), 1u) << summary.dump();
  EXPECT_EQ(summary["node_restarts"][0]["node"], "data server 0 (node 6)");
  EXPECT_FALSE(summary.contains("restarts")) << "the whole cluster restarted";
  EXPECT_FALSE(summary.contains("error")) << summary.dump();
  for (int w = 0; w < 3; ++w)
    EXPECT_EQ(summary["workers"][w]["iterations"], 300) << w;
  EXPECT_GT(summary["final_val_acc"].get<double>(), 0.5);
}

// Runs `strata scale RUN HOW... --timeout 60` and returns its exit code
// (bounded).
int Scale(const std::string& run, const std::vector<std::string>& how) {
  std::vector<std::string> args = {STRATA_BINARY, "scale", run};
  args.insert(args.end(), how.begin(), how.end());
  for (const char* a : {"--timeout", "60"}) args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, STRATA_BINARY, nullptr, nullptr, argv.data(),
                  environ) != 0)
    return -1;
  double secs = 0;
  return WaitExit(pid, &secs);
}

// Waits (60 s at most) for the run's first metrics line: it trains.
void WaitForTraining(const Launched& l) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!FileExists(l.run_dir + "/metrics.jsonl") && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

// pids.json by node without its id ("worker 1", "evaluator"): a scale
// renumbers the nodes after the workers.
std::map<std::string, pid_t> PidsByNode(const std::string& run) {
  std::map<std::string, pid_t> out;
  auto text = ReadFile(run + "/pids.json");
  if (!text.ok()) return out;
  const nlohmann::json pids = nlohmann::json::parse(*text);
  for (auto it = pids.begin(); it != pids.end(); ++it)
    out[it.key().substr(0, it.key().find(" (node"))] = it.value().get<pid_t>();
  return out;
}

// `strata scale` on a --processes run, 2 -> 4 -> 3 workers: the nodes the
// new size still has go on in their processes (the same PIDs: the server,
// the evaluator and the workers below the new count); only newcomers start
// and only leavers end. Lockstep, so every step of every epoch is trained
// once across both changes.
void ExpectAScaleKeepsTheProcesses(const std::string& mode) {
  Launched l = Launch(
      mode, {"cluster.workers=2", "train.iterations=0", "train.epochs=30",
             "train.batch_size=48", "data.synthetic.train_size=576",
             "data.shuffle=true", "data.sharding.method=stratified",
             "checkpoint.every_updates=5", "cluster.worker_delay_ms=6",
             "cluster.max_workers=4", "cluster.request_timeout_ms=20000"});
  ASSERT_GT(l.pid, 0);
  WaitForTraining(l);
  const std::map<std::string, pid_t> two = PidsByNode(l.run_dir);
  ASSERT_EQ(two.size(), mode == "sync" ? 4u : 3u);
  EXPECT_EQ(Scale(l.run_dir, {"--workers", "4"}), 0);
  const std::map<std::string, pid_t> four = PidsByNode(l.run_dir);
  EXPECT_EQ(Scale(l.run_dir, {"--workers", "3"}), 0);
  const std::map<std::string, pid_t> three = PidsByNode(l.run_dir);
  double secs = 0;
  EXPECT_EQ(WaitExit(l.pid, &secs), 0);
  ASSERT_EQ(four.size(), two.size() + 2);
  ASSERT_EQ(three.size(), two.size() + 1);
  for (const auto& [node, pid] : two) EXPECT_EQ(four.at(node), pid) << node;
  for (const auto& [node, pid] : three) EXPECT_EQ(four.at(node), pid) << node;
  EXPECT_NE(four.at("worker 2"), two.at("worker 0"));
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  EXPECT_FALSE(summary.contains("error")) << summary.dump();
  EXPECT_EQ(summary["samples"], 30 * 576);
  std::vector<nlohmann::json> changes;
  for (const auto& m : summary["membership"])
    if (m["event"] == "processes") changes.push_back(m);
  ASSERT_EQ(changes.size(), 2u) << summary["membership"].dump();
  EXPECT_EQ(changes[0]["kept_pids"].size(), two.size());
  EXPECT_EQ(changes[0]["started_pids"].size(), 2u);
  EXPECT_EQ(changes[1]["kept_pids"].size(), three.size());
  ASSERT_EQ(changes[1]["ended_pids"].size(), 1u);
  EXPECT_EQ(changes[1]["ended_pids"][0], four.at("worker 3"));
  // The leaver is gone (reaped by the launcher, not left running).
  EXPECT_NE(::kill(four.at("worker 3"), 0), 0);
  // Each scale's state reached the next life in memory.
  int resumed = 0;
  for (const auto& m : summary["membership"]) {
    if (m["event"] != "resumed") continue;
    EXPECT_EQ(m["state_from"], "memory") << m.dump();
    ++resumed;
  }
  EXPECT_EQ(resumed, 2);
}

TEST(ProcessClusterTest, ASyncScaleKeepsTheRunningProcesses) {
  ExpectAScaleKeepsTheProcesses("sync");
}

TEST(ProcessClusterTest, AnAllreduceScaleReformsInTheSameProcesses) {
  ExpectAScaleKeepsTheProcesses("allreduce");
}

// `strata scale --drain 1` on a --processes local-sgd run of 3 workers:
// worker 1's process ends; worker 2's goes on, in the same process, as
// worker 1; every step of every epoch is trained once.
TEST(ProcessClusterTest, ADrainedWorkerEndsAndTheOneAfterItIsRenumbered) {
  Launched l =
      Launch("local-sgd",
             {"train.iterations=0", "train.epochs=30", "train.batch_size=48",
              "data.synthetic.train_size=576", "data.shuffle=true",
              "data.sharding.method=stratified", "checkpoint.every_updates=5",
              "cluster.worker_delay_ms=6", "cluster.request_timeout_ms=20000"});
  ASSERT_GT(l.pid, 0);
  WaitForTraining(l);
  const std::map<std::string, pid_t> before = PidsByNode(l.run_dir);
  ASSERT_EQ(before.size(), 4u);
  EXPECT_EQ(Scale(l.run_dir, {"--drain", "1"}), 0);
  const std::map<std::string, pid_t> after = PidsByNode(l.run_dir);
  double secs = 0;
  EXPECT_EQ(WaitExit(l.pid, &secs), 0);
  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after.at("worker 0"), before.at("worker 0"));
  EXPECT_EQ(after.at("worker 1"), before.at("worker 2"));
  EXPECT_EQ(after.at("evaluator"), before.at("evaluator"));
  EXPECT_NE(::kill(before.at("worker 1"), 0), 0);
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  EXPECT_FALSE(summary.contains("error")) << summary.dump();
  EXPECT_EQ(summary["samples"], 30 * 576);
  EXPECT_EQ(summary["workers"].size(), 2u);
}

// cluster.leave_on_loss with --processes: worker 1's process is killed in a
// sync run; the run goes on from its newest checkpoint on the other two,
// in their processes (worker 2's as worker 1), and finishes every step.
TEST(ProcessClusterTest, AKilledWorkerLeavesASyncRunThatGoesOn) {
  Launched l = Launch(
      "sync", {"train.iterations=0", "train.epochs=40", "train.batch_size=48",
               "data.synthetic.train_size=576",
               "data.sharding.method=stratified", "checkpoint.every_updates=5",
               "cluster.worker_delay_ms=6", "cluster.leave_on_loss=true"});
  ASSERT_GT(l.pid, 0);
  // After the first checkpoint: the run goes on from it (killed before
  // one, the run stops, as it should: nothing to go on from).
  const pid_t victim = KillWorkerOne(l, "worker 1 (node 3)", true);
  ASSERT_GT(victim, 0);
  const std::map<std::string, pid_t> before = PidsByNode(l.run_dir);
  double secs = 0;
  EXPECT_EQ(WaitExit(l.pid, &secs), 0);
  const std::map<std::string, pid_t> after = PidsByNode(l.run_dir);
  ASSERT_EQ(after.size(), 4u);  // a server, 2 workers, the evaluator
  EXPECT_EQ(after.at("worker 0"), before.at("worker 0"));
  EXPECT_EQ(after.at("worker 1"), before.at("worker 2"));
  EXPECT_EQ(after.at("server 0"), before.at("server 0"));
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  EXPECT_FALSE(summary.contains("error")) << summary.dump();
  EXPECT_EQ(summary["samples"], 40 * 576);
  ASSERT_GE(summary["membership"].size(), 1u);
  EXPECT_EQ(summary["membership"][0]["event"], "lost");
  EXPECT_EQ(summary["membership"][0]["leaving"], nlohmann::json::array({1}));
}

// The settings of the elastic --processes tests: synthetic 576 examples,
// batches of 48, `epochs` counted in epochs, checkpoint rounds every 5
// steps, 6 ms per step, and `extra`.
std::vector<std::string> ElasticRun(int epochs,
                                    std::vector<std::string> extra) {
  std::vector<std::string> s = {"train.iterations=0",
                                "train.epochs=" + std::to_string(epochs),
                                "train.batch_size=48",
                                "data.synthetic.train_size=576",
                                "checkpoint.every_updates=5",
                                "cluster.worker_delay_ms=6",
                                "cluster.request_timeout_ms=20000"};
  s.insert(s.end(), extra.begin(), extra.end());
  return s;
}

// `strata node --join RUN_DIR`: a worker started by hand joins a running
// --processes sync job of 2 workers. The run scales to 3 at its next
// checkpoint and gives the new slot to that process (no process started);
// it trains as worker 2 and ends with the run, and every step of every
// epoch is trained once. A join past cluster.max_workers is refused, and
// the joining process ends saying why.
TEST(ProcessClusterTest, AWorkerStartedByHandJoinsARunningJob) {
  Launched l = Launch(
      "sync",
      ElasticRun(40, {"data.shuffle=true", "data.sharding.method=stratified",
                      "cluster.workers=2", "cluster.max_workers=3"}));
  ASSERT_GT(l.pid, 0);
  WaitForTraining(l);
  const std::map<std::string, pid_t> before = PidsByNode(l.run_dir);
  ASSERT_EQ(before.count("worker 2"), 0u);
  const pid_t joiner = SpawnStrata({"node", "--join", l.run_dir});
  ASSERT_GT(joiner, 0);
  // Wait for the join to land, then a second one past the bound.
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (PidsByNode(l.run_dir).count("worker 2") == 0 &&
         Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const pid_t refused = SpawnStrata({"node", "--join", l.run_dir});
  double secs = 0;
  EXPECT_EQ(WaitExit(refused, &secs), 1);
  EXPECT_EQ(WaitExit(l.pid, &secs), 0);
  EXPECT_EQ(WaitExit(joiner, &secs), 0);
  const std::map<std::string, pid_t> after = PidsByNode(l.run_dir);
  ASSERT_EQ(after.size(), 5u);  // a server, 3 workers, the evaluator
  EXPECT_EQ(after.at("worker 2"), joiner);
  EXPECT_EQ(after.at("worker 0"), before.at("worker 0"));
  EXPECT_EQ(after.at("worker 1"), before.at("worker 1"));
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  EXPECT_FALSE(summary.contains("error")) << summary.dump();
  EXPECT_EQ(summary["samples"], 40 * 576);
  EXPECT_EQ(summary["workers"].size(), 3u);
  bool joined = false;
  for (const auto& m : summary["membership"]) {
    if (m.value("event", "") == "processes") {
      EXPECT_EQ(m["joined_pids"], nlohmann::json::array({joiner}));
      EXPECT_EQ(m["started_pids"].size(), 0u);
      joined = true;
    }
  }
  EXPECT_TRUE(joined) << summary["membership"].dump();
  // Not a --processes run, or not running: nobody listens.
  EXPECT_FALSE(FileExists(l.run_dir + "/join.sock"));
  const pid_t late = SpawnStrata({"node", "--join", l.run_dir});
  EXPECT_EQ(WaitExit(late, &secs), 1);
}

// The control endpoint a running job bound (its control.json); empty when
// it has none.
std::string ControlEndpointOf(const std::string& run_dir) {
  auto control = ReadFile(run_dir + "/control.json");
  EXPECT_TRUE(control.ok()) << control.status().ToString();
  if (!control.ok()) return "";
  return nlohmann::json::parse(*control).value("endpoint", "");
}

// `strata node --join tcp://HOST:PORT` (another machine): a worker with its
// own run directory and another address (127.0.0.2) joins a --processes
// sync run of 2 workers under cluster.security = "curve" through the run's
// control endpoint, with the cluster key pair. It gets the run's config
// from the endpoint, is given worker 2's slot at the next checkpoint (no
// process started), polls its lives there, and ends with the run; every
// step of every epoch is trained once.
TEST(ProcessClusterTest,
     AWorkerOnAnotherMachineJoinsThroughTheControlEndpoint) {
  std::string root = "/tmp/strata_remote_join_XXXXXX";
  ASSERT_NE(::mkdtemp(root.data()), nullptr);
  double secs = 0;
  ASSERT_EQ(WaitExit(SpawnStrata({"keys", "generate", root + "/keys"}), &secs),
            0);
  Launched l = Launch(
      "sync",
      ElasticRun(
          40, {"data.shuffle=true", "data.sharding.method=stratified",
               "cluster.workers=2", "cluster.max_workers=3",
               "cluster.security=curve", "cluster.keys_dir=" + root + "/keys",
               "cluster.control_address=tcp://127.0.0.1:*"}));
  ASSERT_GT(l.pid, 0);
  WaitForTraining(l);
  const std::string endpoint = ControlEndpointOf(l.run_dir);
  ASSERT_FALSE(endpoint.empty());
  const std::string away = root + "/away";
  const pid_t joiner =
      SpawnStrata({"node", "--join", endpoint, "--keys-dir", root + "/keys",
                   "--run-dir", away, "--bind", "tcp://127.0.0.2:*"});
  ASSERT_GT(joiner, 0);
  EXPECT_EQ(WaitExit(l.pid, &secs), 0);
  EXPECT_EQ(WaitExit(joiner, &secs), 0);
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  EXPECT_FALSE(summary.contains("error")) << summary.dump();
  EXPECT_EQ(summary["samples"], 40 * 576);
  EXPECT_EQ(summary["workers"].size(), 3u);
  bool joined = false;
  for (const auto& m : summary["membership"]) {
    if (m.value("event", "") != "processes") continue;
    ASSERT_EQ(m["joined_remote"].size(), 1u) << m.dump();
    EXPECT_EQ(m["joined_remote"][0]["pid"], joiner);
    EXPECT_EQ(m["started_pids"].size(), 0u);
    joined = true;
  }
  EXPECT_TRUE(joined) << summary["membership"].dump();
  // Not a process of this machine's launcher: not in pids.json.
  EXPECT_EQ(PidsByNode(l.run_dir).count("worker 2"), 0u);
  // Its config came over the endpoint, with the new worker count.
  auto config = ReadFile(away + "/config.toml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_NE(config->find("workers = 3"), std::string::npos) << *config;
}

// A worker that joined through the control endpoint and trains is kept by
// the next scale (2 -> 3 by its join, then 3 -> 4 by `strata scale`): the
// launcher waits for its poll for the next life (RemoteLife::AwaitPoll,
// bounded by 10 s), gets it at once, and gives it its slot again. It ends
// with the run, and every step of every epoch is trained once.
TEST(ProcessClusterTest, AWorkerFromAnotherMachineIsKeptByTheNextScale) {
  std::string root = "/tmp/strata_remote_kept_XXXXXX";
  ASSERT_NE(::mkdtemp(root.data()), nullptr);
  Launched l = Launch(
      "sync", ElasticRun(60, {"data.sharding.method=stratified",
                              "cluster.workers=2", "cluster.max_workers=4",
                              "cluster.control_address=tcp://127.0.0.1:*"}));
  ASSERT_GT(l.pid, 0);
  WaitForTraining(l);
  const std::string endpoint = ControlEndpointOf(l.run_dir);
  ASSERT_FALSE(endpoint.empty());
  const pid_t joiner =
      SpawnStrata({"node", "--join", endpoint, "--run-dir", root + "/away",
                   "--bind", "tcp://127.0.0.2:*"});
  ASSERT_GT(joiner, 0);
  // Its join landed once membership.jsonl says so; then the next scale.
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    auto m = ReadFile(l.run_dir + "/membership.jsonl");
    if (m.ok() && m->find("joined_remote\":[{") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(Scale(l.run_dir, {"--workers", "4"}), 0);
  double secs = 0;
  EXPECT_EQ(WaitExit(l.pid, &secs), 0);
  EXPECT_EQ(WaitExit(joiner, &secs), 0);
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  EXPECT_FALSE(summary.contains("error")) << summary.dump();
  EXPECT_EQ(summary["samples"], 60 * 576);
  EXPECT_EQ(summary["workers"].size(), 4u);
  std::vector<nlohmann::json> lines;
  for (const auto& m : summary["membership"])
    if (m.value("event", "") == "processes") lines.push_back(m);
  ASSERT_EQ(lines.size(), 2u) << summary["membership"].dump();
  EXPECT_EQ(lines[0]["joined_remote"].size(), 1u);
  EXPECT_EQ(lines[1]["kept_remote"], 1);
  EXPECT_EQ(lines[1]["gone_remote"], nlohmann::json::array());
  EXPECT_EQ(lines[1]["started_pids"].size(), 1u);  // worker 3
  for (const auto& m : summary["membership"]) {
    if (m.value("event", "") == "resumed") {  // not the 10 s of a silent one
      EXPECT_LT(m.value("since_request_s", 99.0), 8.0) << m.dump();
    }
  }
  // Its metrics.jsonl lines came through the coordinator into the run's
  // (cluster.forward_metrics), none into its own directory.
  EXPECT_FALSE(FileExists(root + "/away/metrics.jsonl"));
  auto metrics = ReadFile(l.run_dir + "/metrics.jsonl");
  ASSERT_TRUE(metrics.ok());
  int remote_lines = 0;
  std::istringstream lines_in(*metrics);
  for (std::string line; std::getline(lines_in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("worker", -1) == 2) ++remote_lines;
  }
  EXPECT_GT(remote_lines, 0);
}

// A loopback port free now (bound and released; the caller binds it next).
int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

// `strata node` by hand, one process per role, resuming a 2-worker run's
// checkpoint on 4 workers: every node is started with the new
// cluster.workers (the coordinator loads the checkpoint and re-plans the
// rest of the epoch); the run finishes every sample of its 3 epochs.
TEST(ProcessClusterTest, NodesStartedByHandResumeOnAnotherWorkerCount) {
  Launched l = Launch(
      "sync", {"cluster.workers=2", "train.iterations=0", "train.epochs=3",
               "train.batch_size=32", "data.synthetic.train_size=512",
               "data.sharding.method=stratified", "checkpoint.every_updates=10",
               "checkpoint.keep=10", "cluster.worker_delay_ms=0"});
  ASSERT_GT(l.pid, 0);
  double secs = 0;
  ASSERT_EQ(WaitExit(l.pid, &secs), 0);
  // Back to the checkpoint at step 20 of 48.
  for (const auto& e :
       std::filesystem::directory_iterator(l.run_dir + "/checkpoints")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && std::stoll(name.substr(5)) > 20)
      std::filesystem::remove_all(e.path());
  }
  ASSERT_TRUE(FileExists(l.run_dir + "/checkpoints/step-20/manifest.json"));
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  const std::string coordinator = "tcp://127.0.0.1:" + std::to_string(port);
  std::vector<pid_t> nodes;
  const std::vector<std::pair<std::string, int>> roles = {
      {"coordinator", 0}, {"server", 0}, {"worker", 0},   {"worker", 1},
      {"worker", 2},      {"worker", 3}, {"evaluator", 0}};
  for (const auto& [role, index] : roles) {
    std::vector<std::string> args = {STRATA_BINARY,
                                     "node",
                                     "--role",
                                     role,
                                     "--index",
                                     std::to_string(index),
                                     "--coordinator",
                                     coordinator,
                                     "--bind",
                                     "tcp://127.0.0.1:*",
                                     "--run-dir",
                                     l.run_dir,
                                     "-c",
                                     l.run_dir + "/config.toml",
                                     "--set",
                                     "cluster.workers=4",
                                     "--set",
                                     "checkpoint.resume=true"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    ASSERT_EQ(posix_spawn(&pid, STRATA_BINARY, nullptr, nullptr, argv.data(),
                          environ),
              0);
    nodes.push_back(pid);
  }
  for (size_t i = 0; i < nodes.size(); ++i)
    EXPECT_EQ(WaitExit(nodes[i], &secs), 0)
        << roles[i].first << " " << roles[i].second;
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  EXPECT_FALSE(summary.contains("error")) << summary.dump();
  EXPECT_EQ(summary["workers"].size(), 4u);
  EXPECT_EQ(summary["resize"]["from_workers"], 2);
  EXPECT_EQ(summary["resize"]["to_workers"], 4);
  EXPECT_EQ(summary["resize"]["at_step"], 20);
  EXPECT_EQ(summary["samples"], 3 * 512);
}

// Sync (lockstep) cannot take one server back in time: the launcher starts
// every node again from the newest checkpoint, and the run finishes.
TEST(ProcessClusterTest, ASyncRunWithAKilledServerRestartsFromTheCheckpoint) {
  nlohmann::json summary =
      RunKilling("server 0 (node 1)", "sync", {"checkpoint.every_updates=50"});
  ASSERT_EQ(summary["restarts"].size(), 1u) << summary.dump();
  const auto& r = summary["restarts"][0];
  EXPECT_NE(r["error"].get<std::string>().find("server 0"), std::string::npos)
      << r.dump();
  EXPECT_GE(r["resumed_at_step"].get<int64_t>(), 100) << r.dump();
  EXPECT_LE(r["lost_steps"].get<int64_t>(), 60)
      << "more than a checkpoint interval (50) was lost";
  EXPECT_FALSE(summary.contains("error")) << summary.dump();
  EXPECT_EQ(summary["workers"][2]["iterations"], 300);
}

// The launcher is the coordinator: SIGKILL it mid-run, and every node
// stops itself within a few heartbeat timeouts (the PS evaluator used to
// wait for ever on a pull from the servers that had stopped).
TEST(ProcessClusterTest, EveryNodeStopsItselfWhenTheCoordinatorIsKilled) {
  Launched l = Launch("async");
  ASSERT_GT(l.pid, 0);
  std::vector<pid_t> children;
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  while (Clock::now() < deadline) {
    auto pids = ReadFile(l.run_dir + "/pids.json");
    auto metrics = ReadFile(l.run_dir + "/metrics.jsonl");
    if (pids.ok() && metrics.ok() &&
        metrics->find("\"worker\":1") != std::string::npos) {
      const auto map = nlohmann::json::parse(*pids);
      for (auto it = map.begin(); it != map.end(); ++it)
        children.push_back(it.value().get<pid_t>());
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(children.size(), 5u) << "the run never started training";
  ::kill(l.pid, SIGKILL);
  ::waitpid(l.pid, nullptr, 0);
  // Orphans are not ours to reap: poll until each is gone (or a zombie).
  auto alive = [](pid_t p) {
    if (::kill(p, 0) != 0) return false;
    auto stat = ReadFile("/proc/" + std::to_string(p) + "/stat");
    return stat.ok() && stat->find(") Z ") == std::string::npos;
  };
  const auto start = Clock::now();
  std::vector<pid_t> left = children;
  while (!left.empty() && Clock::now() - start < std::chrono::seconds(30)) {
    std::vector<pid_t> still;
    for (pid_t p : left)
      if (alive(p)) still.push_back(p);
    left = still;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (pid_t p : left) ::kill(p, SIGKILL);
  EXPECT_TRUE(left.empty()) << left.size()
                            << " node(s) still running 30 s after the "
                               "coordinator was killed";
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 15.0);
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

// Every example id of served.jsonl (data.served_log = ids), per epoch,
// with how often it was acknowledged.
std::map<int64_t, std::map<int64_t, int>> ServedCounts(const std::string& dir) {
  std::map<int64_t, std::map<int64_t, int>> counts;
  std::ifstream in(dir + "/served.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    for (int64_t id : j["ids"].get<std::vector<int64_t>>())
      ++counts[j["epoch"].get<int64_t>()][id];
  }
  return counts;
}

void ExpectEveryExampleOnce(const std::map<int64_t, int>& epoch, int64_t n) {
  EXPECT_EQ(static_cast<int64_t>(epoch.size()), n);
  int64_t not_once = 0;
  for (const auto& [id, times] : epoch) not_once += times != 1;
  EXPECT_EQ(not_once, 0);
}

TEST(ProcessClusterTest,
     DataServiceServesEveryExampleOnceDespiteAKilledWorker) {
  // Dynamic assignment: the killed worker's leased batches go to the
  // others once the coordinator declares it lost.
  Launched l = Launch(
      "async", {"cluster.data_servers=1", "data.assignment=dynamic",
                "data.served_log=ids", "train.iterations=0", "train.epochs=2"});
  ASSERT_GT(l.pid, 0);
  ASSERT_GT(KillWorkerOne(l), 0);
  double secs = 0;
  EXPECT_EQ(WaitExit(l.pid, &secs), 0);
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  ASSERT_EQ(summary["lost_workers"].size(), 1u) << summary.dump();
  EXPECT_EQ(summary["lost_workers"][0], "worker 1 (node 3)");
  auto counts = ServedCounts(l.run_dir);
  ASSERT_EQ(counts.size(), 2u);
  ExpectEveryExampleOnce(counts[0], 3000);
  ExpectEveryExampleOnce(counts[1], 3000);
  EXPECT_GT(summary["final_val_acc"].get<double>(), 0.2);
}

// `strata scale --workers 3 --data-servers 2` on a --processes async run
// fed by one data server (dynamic assignment): the launcher keeps the
// running data server and starts the second; each serves its own share of
// what the first had left, and every example is trained once per epoch.
TEST(ProcessClusterTest, ADataServerIsAddedAtAScale) {
  Launched l = Launch(
      "async", ElasticRun(40, {"cluster.data_servers=1",
                               "data.assignment=dynamic", "data.served_log=ids",
                               "cluster.workers=2", "cluster.max_workers=3"}));
  ASSERT_GT(l.pid, 0);
  WaitForTraining(l);
  const std::map<std::string, pid_t> before = PidsByNode(l.run_dir);
  EXPECT_EQ(Scale(l.run_dir, {"--workers", "3", "--data-servers", "2"}), 0);
  const std::map<std::string, pid_t> after = PidsByNode(l.run_dir);
  double secs = 0;
  EXPECT_EQ(WaitExit(l.pid, &secs), 0);
  EXPECT_EQ(after.at("data server 0"), before.at("data server 0"));
  EXPECT_EQ(after.count("data server 1"), 1u);
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  EXPECT_FALSE(summary.contains("error")) << summary.dump();
  EXPECT_EQ(summary["data_service"]["data_servers"].size(), 2u);
  auto counts = ServedCounts(l.run_dir);
  ASSERT_EQ(counts.size(), 40u);
  for (int64_t e = 0; e < 40; ++e) {
    SCOPED_TRACE(e);
    ExpectEveryExampleOnce(counts[e], 576);
  }
}

TEST(ProcessClusterTest, ALostDataServerStopsTheRunNamingIt) {
  Launched l = Launch("async", {"cluster.data_servers=1"});
  ASSERT_GT(l.pid, 0);
  ASSERT_GT(KillWorkerOne(l, "data server 0 (node 6)"), 0);
  // Heartbeat timeout 1.5 s; the workers waiting for a batch notice the
  // end of the run within 100 ms.
  ExpectFailedNaming(l, "data server 0");
}

// The TCP ports process `pid` listens on (its sockets' inodes matched
// against /proc/net/tcp).
std::vector<int> ListeningPorts(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = ::opendir(fd_dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      char target[256];
      const std::string path = fd_dir + "/" + e->d_name;
      ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      target[n] = 0;
      std::string t(target);
      if (t.rfind("socket:[", 0) == 0) inodes.insert(t.substr(8, t.size() - 9));
    }
    ::closedir(d);
  }
  std::vector<int> ports;
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // header
  while (std::getline(tcp, line)) {
    std::istringstream in(line);
    std::string sl, local, remote, state, queues, timer, retr, uid, timeout,
        inode;
    in >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >>
        timeout >> inode;
    if (state == "0A" && inodes.count(inode)) {
      ports.push_back(
          std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

TEST(ProcessClusterTest, GarbageSentToADataServerIsDroppedAndServingGoesOn) {
  Launched l = Launch("async", {"cluster.data_servers=1", "data.served_log=ids",
                                "train.iterations=0", "train.epochs=3",
                                "cluster.worker_delay_ms=20"});
  ASSERT_GT(l.pid, 0);
  // Wait for training to start, then find the data server's port.
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  pid_t data_pid = -1;
  while (Clock::now() < deadline && data_pid < 0) {
    auto pids = ReadFile(l.run_dir + "/pids.json");
    auto metrics = ReadFile(l.run_dir + "/metrics.jsonl");
    if (pids.ok() && metrics.ok() && !metrics->empty())
      data_pid = nlohmann::json::parse(*pids)["data server 0 (node 6)"];
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(data_pid, 0) << "training never started";
  std::vector<int> ports = ListeningPorts(data_pid);
  ASSERT_FALSE(ports.empty()) << "the data server listens on no TCP port";
  std::mt19937 rng(3);
  auto noise = [&rng](size_t n) {
    std::string s(n, 0);
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  };
  for (int port : ports) {
    // Raw bytes on a plain TCP connection.
    for (int k = 0; k < 5; ++k) {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      ASSERT_GE(fd, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) ==
          0) {
        const std::string junk = noise(64 + 200 * k);
        (void)!::write(fd, junk.data(), junk.size());
      }
      ::close(fd);
    }
    // Well-framed ZeroMQ messages whose contents are garbage: random
    // frames, and a frame as long as a message header with random bytes.
    zmq::context_t ctx;
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.connect("tcp://127.0.0.1:" + std::to_string(port));
    for (int k = 0; k < 20; ++k) {
      const int frames = 1 + k % 4;
      for (int f = 0; f < frames; ++f) {
        const std::string junk =
            noise(static_cast<size_t>(k % 3 == 0 ? 48 : 1 + 37 * f));
        s.send(zmq::buffer(junk), f + 1 < frames ? zmq::send_flags::sndmore
                                                 : zmq::send_flags::none);
      }
    }
    // Valid strata frames with a bad request: a batch request from a node
    // outside the cluster, one claiming to be worker 1 with payloads that
    // do not parse, and a message type nobody handles. Each gets an error
    // reply (or a log line) and nothing else.
    struct Fake {
      uint16_t type;
      NodeId sender;
      std::vector<uint64_t> sizes;
    };
    uint32_t transfer = 1;
    for (const Fake& f :
         {Fake{0x1000 + 30, 99, {8, 8, 4}}, Fake{0x1000 + 30, 3, {5}},
          Fake{0x1000 + 30, 3, {8, 16, 4}}, Fake{0x1FFF, 3, {}}}) {
      MessageHeader h;
      h.type = static_cast<MessageType>(f.type);
      h.sender = f.sender;
      h.receiver = 6;
      h.request_id = 0xdead0000u + transfer;
      h.key_begin = h.key_end = 1;
      Buffer header = wire::EncodeHeader(h, f.sizes, transfer++);
      s.send(
          zmq::buffer(header.data(), header.size()),
          f.sizes.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
      for (size_t k = 0; k < f.sizes.size(); ++k) {
        const std::string junk = noise(f.sizes[k]);
        s.send(zmq::buffer(junk), k + 1 < f.sizes.size()
                                      ? zmq::send_flags::sndmore
                                      : zmq::send_flags::none);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  double secs = 0;
  EXPECT_EQ(WaitExit(l.pid, &secs), 0);
  auto summary = nlohmann::json::parse(*ReadFile(l.run_dir + "/summary.json"));
  EXPECT_TRUE(summary["lost_workers"].empty()) << summary.dump();
  // The data server kept serving: every worker got its full budget.
  for (const auto& w : summary["workers"])
    EXPECT_TRUE(w["finished"].get<bool>()) << w.dump();
  auto counts = ServedCounts(l.run_dir);
  EXPECT_EQ(counts.size(), 3u);
}

}  // namespace
}  // namespace strata

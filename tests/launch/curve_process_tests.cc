// cluster.security = "curve" with real processes: `strata keys generate`,
// then `strata train --processes` over CURVE finishes, while the launcher's
// coordinator refuses (and logs) a ZeroMQ peer without keys and one with a
// key of its own; `strata node` on a non-loopback address warns once
// without security and not at all with it. Starts the strata binary; ends
// only the processes it started, by PID; every wait is bounded. Labelled
// slow (strata_process_test).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/fs.h"
#include "transport/curve_test_util.h"
#include "transport/wire.h"
#include "transport/zmq/curve_keys.h"

extern char** environ;

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::string TempRoot() {
  std::string root = "/tmp/strata_curve_process_test_XXXXXX";
  EXPECT_NE(::mkdtemp(root.data()), nullptr);
  return root;
}

// Starts `strata args...` with its stderr (and stdout) in `log_path`.
pid_t Spawn(const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<std::string> all = {STRATA_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  pid_t pid = -1;
  EXPECT_EQ(
      posix_spawn(&pid, STRATA_BINARY, &actions, nullptr, argv.data(), environ),
      0);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

// Waits up to `limit` for `pid` to exit; its exit code, or -1 after killing
// it (SIGKILL) when it did not end in time.
int WaitExit(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "process " << pid << " did not end within "
                    << limit.count() << " s";
      return -1;
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The text after `marker` in the file, up to the end of its line, once the
// file has it (bounded by `limit`); "" otherwise.
std::string AwaitLine(const std::string& path, const std::string& marker,
                      std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    auto text = ReadFile(path);
    if (text.ok()) {
      const size_t at = text->find(marker);
      if (at != std::string::npos) {
        const size_t from = at + marker.size();
        const size_t end = text->find('\n', from);
        if (end != std::string::npos) return text->substr(from, end - from);
      }
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  return "";
}

// Sends a well-formed "worker 0 is done" to the coordinator from a raw
// DEALER; with `own` set it is a CURVE client holding that key pair.
void SendDone(zmq::context_t& ctx, const std::string& endpoint,
              const std::string& server_key, const CurveKeyPair* own) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  if (own != nullptr) {
    s.set(zmq::sockopt::curve_serverkey, server_key);
    s.set(zmq::sockopt::curve_publickey, own->public_key);
    s.set(zmq::sockopt::curve_secretkey, own->secret_key);
  }
  s.connect(endpoint);
  Message done;
  done.header.type = MessageType::kShutdown;
  done.header.sender = 2;  // worker 0 with one server
  done.header.receiver = 0;
  for (wire::Segment& segment :
       wire::EncodeSegments(std::move(done), 1, 1 << 20)) {
    for (size_t i = 0; i < segment.size(); ++i) {
      (void)s.send(zmq::buffer(segment[i].data(), segment[i].size()),
                   i + 1 < segment.size() ? zmq::send_flags::sndmore
                                          : zmq::send_flags::none);
    }
  }
  std::this_thread::sleep_for(milliseconds(500));  // the handshake's time
}

TEST(CurveProcessTest, KeysGenerateThenAProcessRunOverCurveRefusesOthers) {
  const std::string root = TempRoot();
  const std::string keys = root + "/keys";
  ASSERT_EQ(WaitExit(Spawn({"keys", "generate", keys}, root + "/keys.log"),
                     seconds(30)),
            0)
      << *ReadFile(root + "/keys.log");
  auto cluster = ReadCurveKeyPairFile(JoinPath(keys, kClusterKeyFile));
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();

  const std::string log = root + "/train.log";
  const pid_t pid = Spawn({"train", "--processes",
                           "--set", "cluster.mode=async",
                           "--set", "run.dir=" + root,
                           "--set", "run.name=r",
                           "--set", "cluster.workers=2",
                           "--set", "cluster.servers=1",
                           "--set", "train.iterations=300",
                           "--set", "cluster.worker_delay_ms=10",
                           "--set", "data.synthetic.train_size=2000",
                           "--set", "data.synthetic.val_size=200",
                           "--set", "cluster.security=curve",
                           "--set", "cluster.keys_dir=" + keys},
                          log);
  // The launcher names its coordinator's endpoint before the nodes start.
  std::string endpoint =
      AwaitLine(log, "around the coordinator at ", seconds(60));
  const std::string curve_tag = " (CURVE)";
  ASSERT_GT(endpoint.size(), curve_tag.size()) << *ReadFile(log);
  EXPECT_EQ(endpoint.substr(endpoint.size() - curve_tag.size()), curve_tag);
  endpoint.resize(endpoint.size() - curve_tag.size());
  ASSERT_EQ(endpoint.rfind("tcp://127.0.0.1:", 0), 0u) << endpoint << "\n"
                                                       << *ReadFile(log);
  zmq::context_t ctx(1);
  SendDone(ctx, endpoint, cluster->public_key, nullptr);  // no keys
  auto intruder = GenerateCurveKeyPair();
  ASSERT_TRUE(intruder.ok());
  SendDone(ctx, endpoint, cluster->public_key, &*intruder);  // its own key

  EXPECT_EQ(WaitExit(pid, seconds(180)), 0) << *ReadFile(log);
  const std::string text = *ReadFile(log);
  EXPECT_NE(text.find("node 0: refused a connection at " + endpoint),
            std::string::npos)
      << text;
  EXPECT_EQ(curve_test::Count(text, intruder->public_key), 1u) << text;
  EXPECT_EQ(curve_test::Count(text, "without authentication or encryption"),
            0u);
  // Every node said it runs CURVE (server, 2 workers, evaluator).
  EXPECT_EQ(curve_test::Count(
                text, "joining the coordinator at " + endpoint + " (CURVE)"),
            4u)
      << text;
  auto summary = ReadFile(root + "/r/summary.json");
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  auto j = nlohmann::json::parse(*summary);
  EXPECT_FALSE(j.contains("error")) << j.dump();
  EXPECT_GT(j.value("steps", int64_t{0}), 0) << j.dump();
}

// `strata node --role server` binding every interface, with no coordinator
// to join (it gives up after cluster.request_timeout_ms).
std::string LoneServerLog(const std::string& root,
                          const std::vector<std::string>& extra) {
  const std::string log = root + "/node.log";
  std::vector<std::string> args = {"node",
                                   "--role",
                                   "server",
                                   "--index",
                                   "0",
                                   "--coordinator",
                                   "tcp://127.0.0.1:9",
                                   "--bind",
                                   "tcp://0.0.0.0:*",
                                   "--run-dir",
                                   root + "/r",
                                   "--set",
                                   "cluster.request_timeout_ms=1500"};
  for (const std::string& kv : extra) {
    args.push_back("--set");
    args.push_back(kv);
  }
  const int code = WaitExit(Spawn(args, log), seconds(60));
  EXPECT_EQ(code, 1);  // no coordinator
  auto text = ReadFile(log);
  return text.ok() ? *text : "";
}

TEST(CurveProcessTest, ANodeBeyondLoopbackWithoutSecurityWarnsOnce) {
  const std::string plain_root = TempRoot();
  const std::string plain = LoneServerLog(plain_root, {});
  EXPECT_EQ(curve_test::Count(plain, "without authentication or encryption"),
            1u)
      << plain;
  EXPECT_NE(plain.find("cluster.security = \"curve\""), std::string::npos);

  const std::string root = TempRoot();
  auto pair = GenerateCurveKeyPair();
  ASSERT_TRUE(pair.ok());
  ASSERT_TRUE(WriteClusterKeyFiles(root + "/keys", *pair, false).ok());
  const std::string curve = LoneServerLog(
      root, {"cluster.security=curve", "cluster.keys_dir=" + root + "/keys"});
  EXPECT_EQ(curve_test::Count(curve, "without authentication or encryption"),
            0u)
      << curve;
  EXPECT_NE(curve.find("joining the coordinator"), std::string::npos) << curve;
}

}  // namespace
}  // namespace strata

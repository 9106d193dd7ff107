// The live report (`strata serve`): the page in headless Chromium polls the
// server and redraws as a run writes; the command itself as a child process.
// The Chromium tests skip (saying why) when it is not installed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/fs.h"
#include "experiment/browser_util.h"
#include "experiment/serve.h"
#include "experiment/test_util.h"
#include "metrics/http_server.h"

extern char** environ;

namespace strata {
namespace {

using testing_util::ChartPoints;
using testing_util::EvalLine;
using testing_util::LoadPage;
using testing_util::RunningRunDir;
using testing_util::SelfCheck;

std::string TmpDir(const std::string& name) {
  const char* root = std::getenv("STRATA_TEST_TMP");
  std::string dir =
      JoinPath(root ? root : "/tmp",
               "live_report_" + name + "_" + std::to_string(::getpid()));
  EXPECT_EQ(std::system(("rm -rf '" + dir + "'").c_str()), 0);
  EXPECT_TRUE(MakeDirs(dir).ok());
  return dir;
}

// Removes a test's directory when the test passed; a failed test's files
// (logs, screenshots) stay for a look. Declared before anything that writes
// there, so it goes last.
struct RemoveIfPassed {
  std::string dir;
  ~RemoveIfPassed() {
    if (!::testing::Test::HasFailure()) {
      EXPECT_EQ(std::system(("rm -rf '" + dir + "'").c_str()), 0);
    }
  }
};

// Polls `done` every 100 ms for at most `seconds`; whether it became true.
bool WaitFor(const std::function<bool()>& done, double seconds) {
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

// Complete lines in a JSON-lines file (0 when it does not exist yet).
int Lines(const std::string& path) {
  auto text = ReadFile(path);
  return text.ok()
             ? static_cast<int>(std::count(text->begin(), text->end(), '\n'))
             : 0;
}

std::string Tail(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return "(no " + path + ")";
  return text->size() > 3000 ? text->substr(text->size() - 3000) : *text;
}

// A child process of the strata binary with stdout and stderr in `log`.
// The destructor ends it if it still runs (SIGINT, SIGKILL after 10 s) and
// reaps it: only this process, by its PID.
class StrataChild {
 public:
  StrataChild(const std::vector<std::string>& args, const std::string& log)
      : log_(log) {
    std::vector<std::string> argv = {STRATA_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (::posix_spawn(&pid_, STRATA_BINARY, &fa, nullptr, cargv.data(),
                      environ) != 0)
      pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~StrataChild() {
    if (pid_ <= 0 || exited_) return;
    ::kill(pid_, SIGINT);
    int code = 0;
    if (!Wait(10, &code)) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  StrataChild(const StrataChild&) = delete;
  StrataChild& operator=(const StrataChild&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& log() const { return log_; }
  bool Running() {
    if (pid_ <= 0 || exited_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return !exited_;
  }
  // Waits at most `seconds` for the process to end; its exit code in
  // *code (128 + signal when killed by one).
  bool Wait(double seconds, int* code) {
    if (!WaitFor([this] { return !Running(); }, seconds)) return false;
    *code = code_;
    return true;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int code_ = -1;
};

// Deterministic: new evaluations arrive right after the page was sent, so
// the page's first poll must find them and redraw. The first load, with no
// change, is the control: no redraw, the points it was sent.
TEST(LiveReportBrowserTest, PageRedrawsWhenTheDataChanges) {
  if (testing_util::Chromium().empty())
    GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs "
                    "Debian's chromium)";
  const RemoveIfPassed cleanup{TmpDir("redraw")};
  const std::string dir = RunningRunDir(cleanup.dir, 2);
  LiveReportOptions o;
  o.refresh_s = 0.5;
  auto opened = LiveReport::Open(dir, o);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  std::shared_ptr<LiveReport> report = std::move(*opened);
  std::atomic<bool> grow{false};
  std::atomic<bool> grown{false};
  auto server = HttpServer::Start("127.0.0.1:0", [&](const HttpRequest& r) {
    HttpResponse out = report->Handle(r);
    if (r.path == "/" && grow && !grown.exchange(true)) {
      for (int i = 2; i < 5; ++i)
        EXPECT_TRUE(
            AppendLine(JoinPath(dir, "eval.jsonl"), EvalLine(10 * i)).ok());
    }
    return out;
  });
  ASSERT_TRUE(server.ok()) << server.status().message();

  std::string why;
  const std::string dom1 = LoadPage({(*server)->url() + "/", "", 5000}, &why);
  if (dom1.empty()) GTEST_SKIP() << why;
  const nlohmann::json c1 = SelfCheck(dom1);
  ASSERT_TRUE(c1.is_object()) << "no self-check in the page";
  EXPECT_TRUE(c1["errors"].empty()) << c1["errors"].dump();
  ASSERT_TRUE(c1.contains("live")) << c1.dump();
  EXPECT_GE(c1["live"]["polls"].get<int>(), 1) << c1.dump();
  EXPECT_EQ(c1["live"]["renders"], 0) << c1.dump();
  EXPECT_EQ(ChartPoints(c1, "curve-val_loss"), 2) << c1.dump();
  EXPECT_NE(dom1.find("<td class=\"text\">running</td>"), std::string::npos);

  grow = true;
  const std::string dom2 = LoadPage({(*server)->url() + "/", "", 5000}, &why);
  ASSERT_FALSE(dom2.empty()) << why;
  ASSERT_TRUE(grown);
  const nlohmann::json c2 = SelfCheck(dom2);
  ASSERT_TRUE(c2.is_object());
  EXPECT_TRUE(c2["errors"].empty()) << c2["errors"].dump();
  EXPECT_TRUE(c2["failed"].empty()) << c2.dump();
  EXPECT_GE(c2["live"]["renders"].get<int>(), 1) << c2.dump();
  EXPECT_EQ(ChartPoints(c2, "curve-val_loss"), 5) << c2.dump();
  EXPECT_EQ(ChartPoints(c2, "curve-val_acc"), 5) << c2.dump();
  // A redraw replaces the charts and tables instead of adding to them.
  EXPECT_EQ(c2["charts"], c1["charts"]) << c2.dump();
  EXPECT_EQ(c2["tables"], c1["tables"]) << c2.dump();
}

// The brief's test: a real `strata train` in the background, served; the
// validation curve gains points between two loads (each with a screenshot),
// without script errors, and the run table turns to "done" at the end.
TEST(LiveReportBrowserTest, ServedRunGrowsWhileItTrains) {
  if (testing_util::Chromium().empty())
    GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs "
                    "Debian's chromium)";
  const RemoveIfPassed cleanup{TmpDir("train")};
  const std::string& root = cleanup.dir;
  const std::string run = JoinPath(root, "live");
  const std::string eval = JoinPath(run, "eval.jsonl");
  // About 30 s: 600 steps per worker, each worker sleeping 0..100 ms per
  // step, an evaluation every second; light on CPU.
  StrataChild train({"train",
                     "--set",
                     "data.synthetic.train_size=600",
                     "--set",
                     "data.synthetic.val_size=200",
                     "--set",
                     "data.synthetic.dim=8",
                     "--set",
                     "model.hidden=8",
                     "--set",
                     "train.iterations=600",
                     "--set",
                     "train.batch_size=16",
                     "--set",
                     "train.threads=1",
                     "--set",
                     "cluster.workers=2",
                     "--set",
                     "cluster.servers=1",
                     "--set",
                     "cluster.mode=async",
                     "--set",
                     "train.log_every=10",
                     "--set",
                     "eval.every_s=1",
                     "--set",
                     "cluster.worker_delay_ms=100",
                     "--set",
                     "run.dir=" + root,
                     "--set",
                     "run.name=live"},
                    JoinPath(root, "train.log"));
  ASSERT_TRUE(train.started());
  ASSERT_TRUE(WaitFor([&] { return Lines(eval) >= 2 || !train.Running(); }, 90))
      << "no evaluation within 90 s: " << Tail(train.log());
  ASSERT_TRUE(train.Running())
      << "the run ended too soon: " << Tail(train.log());

  LiveReportOptions o;
  o.refresh_s = 1;
  auto report = LiveReport::Open(run, o);
  ASSERT_TRUE(report.ok()) << report.status().message();
  auto server = ServeLiveReport(std::move(*report), "127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status().message();
  const std::string url = (*server)->url() + "/";

  std::string why;
  const std::string shot1 = JoinPath(root, "live1.png");
  const std::string dom1 = LoadPage({url, shot1, 5000}, &why);
  if (dom1.empty()) GTEST_SKIP() << why;
  const int evals_after_1 = Lines(eval);
  const nlohmann::json c1 = SelfCheck(dom1);
  ASSERT_TRUE(c1.is_object()) << "no self-check in the page";
  EXPECT_TRUE(c1["errors"].empty()) << c1["errors"].dump();
  const int p1 = ChartPoints(c1, "curve-val_loss");
  EXPECT_GE(p1, 2) << c1.dump();
  EXPECT_NE(dom1.find("<td class=\"text\">running</td>"), std::string::npos);

  // Two more evaluations on disk, then load again.
  ASSERT_TRUE(WaitFor(
      [&] { return Lines(eval) >= evals_after_1 + 2 || !train.Running(); }, 60))
      << Tail(train.log());
  const std::string shot2 = JoinPath(root, "live2.png");
  const std::string dom2 = LoadPage({url, shot2, 5000}, &why);
  ASSERT_FALSE(dom2.empty()) << why;
  const nlohmann::json c2 = SelfCheck(dom2);
  ASSERT_TRUE(c2.is_object());
  EXPECT_TRUE(c2["errors"].empty()) << c2["errors"].dump();
  EXPECT_TRUE(c2["failed"].empty()) << c2.dump();
  EXPECT_GT(ChartPoints(c2, "curve-val_loss"), p1)
      << "first load: " << c1.dump() << "\nsecond load: " << c2.dump();
  ASSERT_TRUE(c2.contains("live")) << c2.dump();
  EXPECT_GE(c2["live"]["polls"].get<int>(), 1) << c2.dump();
  for (const std::string& shot : {shot1, shot2}) {
    auto png = ReadFile(shot);
    ASSERT_TRUE(png.ok()) << "no screenshot " << shot;
    EXPECT_GT(png->size(), 10000u) << shot;
    EXPECT_EQ(png->substr(1, 3), "PNG") << shot;
  }

  int code = -1;
  ASSERT_TRUE(train.Wait(120, &code)) << "the run did not end within 120 s";
  EXPECT_EQ(code, 0) << Tail(train.log());
  const std::string dom3 = LoadPage({url, "", 3000}, &why);
  ASSERT_FALSE(dom3.empty()) << why;
  EXPECT_NE(dom3.find("<td class=\"text\">done</td>"), std::string::npos);
  EXPECT_EQ(dom3.find("<td class=\"text\">running</td>"), std::string::npos);
  const nlohmann::json c3 = SelfCheck(dom3);
  ASSERT_TRUE(c3.is_object());
  EXPECT_TRUE(c3["errors"].empty()) << c3["errors"].dump();
  EXPECT_GE(ChartPoints(c3, "curve-val_loss"),
            ChartPoints(c2, "curve-val_loss"));
}

// `strata serve` as a user runs it: prints its URL, answers, and ends
// cleanly on Ctrl-C.
TEST(StrataServeTest, ServesUntilInterrupted) {
  const RemoveIfPassed cleanup{TmpDir("cli")};
  const std::string& root = cleanup.dir;
  const std::string run = RunningRunDir(root, 2);
  StrataChild serve(
      {"serve", run, "--address", "127.0.0.1:0", "--refresh-s", "1"},
      JoinPath(root, "serve.log"));
  ASSERT_TRUE(serve.started());
  std::string line;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto text = ReadFile(serve.log());
        if (text.ok() && text->find('\n') != std::string::npos)
          line = text->substr(0, text->find('\n'));
        return !line.empty() || !serve.Running();
      },
      30))
      << Tail(serve.log());
  const std::string prefix = "serving " + run + " at http://127.0.0.1:";
  ASSERT_EQ(line.rfind(prefix, 0), 0u) << line;
  const int port = std::atoi(line.c_str() + prefix.size());
  ASSERT_GT(port, 0) << line;
  auto body =
      HttpGet("127.0.0.1", port, "/data.json", std::chrono::seconds(10));
  ASSERT_TRUE(body.ok()) << body.status().message();
  nlohmann::json data = nlohmann::json::parse(*body, nullptr, false);
  ASSERT_TRUE(data.is_object());
  EXPECT_EQ(data["runs"][0]["state"], "running");

  ASSERT_EQ(::kill(serve.pid(), SIGINT), 0);
  int code = -1;
  ASSERT_TRUE(serve.Wait(10, &code)) << "no exit within 10 s of Ctrl-C";
  EXPECT_EQ(code, 0) << Tail(serve.log());
}

TEST(StrataServeTest, ABadDirectoryOrABusyPortIsAClearError) {
  const RemoveIfPassed cleanup{TmpDir("cli_errors")};
  const std::string& root = cleanup.dir;
  {
    StrataChild serve({"serve", root}, JoinPath(root, "bad.log"));
    int code = -1;
    ASSERT_TRUE(serve.Wait(30, &code)) << Tail(serve.log());
    EXPECT_EQ(code, 2);
    EXPECT_NE(Tail(serve.log()).find("'" + root + "' is neither"),
              std::string::npos)
        << Tail(serve.log());
  }
  auto busy = HttpServer::Start(
      "127.0.0.1:0", [](const HttpRequest&) { return HttpResponse{}; });
  ASSERT_TRUE(busy.ok());
  const std::string address = "127.0.0.1:" + std::to_string((*busy)->port());
  StrataChild serve({"serve", RunningRunDir(root, 1), "--address", address},
                    JoinPath(root, "busy.log"));
  int code = -1;
  ASSERT_TRUE(serve.Wait(30, &code)) << Tail(serve.log());
  EXPECT_EQ(code, 1);
  EXPECT_NE(Tail(serve.log()).find("cannot listen on " + address),
            std::string::npos)
      << Tail(serve.log());
}

}  // namespace
}  // namespace strata

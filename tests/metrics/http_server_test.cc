// The HTTP server behind /metrics and `strata serve`: answers GETs from its
// handler, stops at once even right after it started, refuses a busy port
// and a malformed address with the reason.
#include "metrics/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>

namespace strata {
namespace {

using std::chrono::milliseconds;

TEST(HttpServerTest, ServesTheHandlersAnswers) {
  std::atomic<int> calls{0};
  auto server = HttpServer::Start("127.0.0.1:0", [&](const HttpRequest& r) {
    ++calls;
    HttpResponse res;
    if (r.path == "/hello") {
      res.body = "hi " + (r.query.count("name") ? r.query.at("name") : "");
    } else {
      res.status = 404;
      res.body = "no";
    }
    return res;
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  EXPECT_GT(port, 0);
  EXPECT_EQ((*server)->url(), "http://127.0.0.1:" + std::to_string(port));
  auto got = HttpGet("127.0.0.1", port, "/hello?name=ann", milliseconds(5000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "hi ann");
  auto missing = HttpGet("127.0.0.1", port, "/other", milliseconds(5000));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("404"), std::string::npos);
  EXPECT_EQ(calls.load(), 2);
  (*server)->Stop();
  auto after = HttpGet("127.0.0.1", port, "/hello", milliseconds(2000));
  EXPECT_FALSE(after.ok());
}

TEST(HttpServerTest, StopsRightAfterStarting) {
  // Each round is bounded by the test's timeout: a Stop() that raced the
  // server's start used to leave its thread in accept() for ever.
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) {
    auto s = HttpServer::Start(
        "127.0.0.1:0", [](const HttpRequest&) { return HttpResponse{}; });
    ASSERT_TRUE(s.ok()) << s.status().ToString();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(HttpServerTest, RefusesABusyPortAndAMalformedAddress) {
  auto first = HttpServer::Start(
      "127.0.0.1:0", [](const HttpRequest&) { return HttpResponse{}; });
  ASSERT_TRUE(first.ok());
  auto second =
      HttpServer::Start("127.0.0.1:" + std::to_string((*first)->port()),
                        [](const HttpRequest&) { return HttpResponse{}; });
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("in use"), std::string::npos)
      << second.status().message();
  for (const char* bad : {"9464", "localhost:", "host:70000", ":80", "h:x1"}) {
    auto s = HttpServer::Start(
        bad, [](const HttpRequest&) { return HttpResponse{}; });
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument) << bad;
  }
  auto nobody = HttpGet("127.0.0.1", 1, "/", milliseconds(2000));
  ASSERT_FALSE(nobody.ok());
  EXPECT_NE(nobody.status().message().find("http://127.0.0.1:1/"),
            std::string::npos)
      << nobody.status().message();
}

}  // namespace
}  // namespace strata

#pragma once

// Helpers shared by the CurveZMQ tests (transport, cluster, processes).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "transport/zmq/curve_keys.h"
#include "transport/zmq/transport.h"

namespace strata {
namespace curve_test {

// A ZeroMQ node bound to a free loopback port, with `curve` keys (none:
// plain TCP), in `context` (null: its own) and a short send timeout so that
// a refused peer fails fast.
inline std::unique_ptr<Transport> TcpNode(
    NodeId id, std::optional<CurveKeys> curve,
    std::shared_ptr<ZmqContext> context = nullptr) {
  ZmqOptions options;
  options.curve = std::move(curve);
  options.context = std::move(context);
  options.send_timeout = std::chrono::milliseconds(2000);
  auto r = NewZmqTransport(id, std::move(options));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return nullptr;
  std::unique_ptr<Transport> t = std::move(r).value();
  Status s = t->Bind("tcp://127.0.0.1:*");
  EXPECT_TRUE(s.ok()) << s.ToString();
  return t;
}

// How often `what` occurs in `text`.
inline size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

}  // namespace curve_test
}  // namespace strata

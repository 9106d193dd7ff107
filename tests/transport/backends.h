#pragma once

// The transport backends the transport and RPC tests run over, and a node of
// each bound to a fresh local endpoint.
#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>

#include "transport/inproc_transport.h"
#include "transport/transport.h"
#include "transport/zmq_transport.h"

namespace strata::test_backends {

enum class Backend { kInProc, kTcp, kIpc };

inline const char* BackendString(Backend backend) {
  switch (backend) {
    case Backend::kInProc:
      return "inproc";
    case Backend::kTcp:
      return "tcp";
    case Backend::kIpc:
      return "ipc";
  }
  return "unknown";
}

// For INSTANTIATE_TEST_SUITE_P's name generator.
inline std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  return BackendString(info.param);
}

inline void PrintTo(Backend backend, std::ostream* os) {
  *os << BackendString(backend);
}

// A node of `backend` (in-process ones on `fabric`) bound to a fresh
// endpoint: inproc://*, tcp://127.0.0.1:* or ipc://*.
inline std::unique_ptr<Transport> NewBoundNode(Backend backend, NodeId id,
                                               InProcFabric& fabric) {
  std::unique_ptr<Transport> t;
  std::string endpoint;
  if (backend == Backend::kInProc) {
    auto r = fabric.NewTransport(id);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return nullptr;
    t = std::move(r).value();
    endpoint = "inproc://*";
  } else {
    auto r = NewZmqTransport(id);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return nullptr;
    t = std::move(r).value();
    endpoint = backend == Backend::kTcp ? "tcp://127.0.0.1:*" : "ipc://*";
  }
  Status s = t->Bind(endpoint);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return t;
}

}  // namespace strata::test_backends

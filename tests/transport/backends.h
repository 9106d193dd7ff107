#pragma once

// The transport backends the transport and RPC tests run over, and a node of
// each bound to a fresh local endpoint.
#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>

#include "transport/inproc/transport.h"
#include "transport/spin_wait.h"
#include "transport/transport.h"
#include "transport/ucx/transport.h"
#include "transport/zmq/transport.h"

namespace strata::test_backends {

// kInProcSpin: the in-process transport with spin-then-block waiting on
// (cluster.spin_us; the fixture holds a SpinWaitFor()).
// kUcx: UCX as a cluster makes it (UcxOptions::shared_memory kAuto: on
// loopback, shared memory and CMA, endpoints without UCX's peer-failure
// mode); kUcxTcp: UCX with shared memory off (UCX's TCP transport and its
// peer-failure mode).
enum class Backend { kInProc, kInProcSpin, kTcp, kIpc, kUcx, kUcxTcp };

inline bool IsUcx(Backend backend) {
  return backend == Backend::kUcx || backend == Backend::kUcxTcp;
}

inline bool IsInProc(Backend backend) {
  return backend == Backend::kInProc || backend == Backend::kInProcSpin;
}

inline const char* BackendString(Backend backend) {
  switch (backend) {
    case Backend::kInProc:
      return "inproc";
    case Backend::kInProcSpin:
      return "inproc_spin";
    case Backend::kTcp:
      return "tcp";
    case Backend::kIpc:
      return "ipc";
    case Backend::kUcx:
      return "ucx";
    case Backend::kUcxTcp:
      return "ucx_tcp";
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

// Whether `backend` is in this build (UCX needs libucx-dev); suites call
// SkipIfMissing() first.
inline bool Available(Backend backend) { return !IsUcx(backend) || HaveUcx(); }
#define STRATA_SKIP_IF_BACKEND_MISSING(backend)                       \
  if (!::strata::test_backends::Available(backend))                   \
  GTEST_SKIP() << "this build has no UCX (libucx-dev not found when " \
                  "it was configured)"

// A transport of `backend` (in-process ones on `fabric`), not bound.
inline std::unique_ptr<Transport> NewNode(Backend backend, NodeId id,
                                          InProcFabric& fabric) {
  UcxOptions ucx;
  ucx.shared_memory = backend == Backend::kUcxTcp
                          ? UcxOptions::SharedMemory::kOff
                          : UcxOptions::SharedMemory::kAuto;
  Result<std::unique_ptr<Transport>> r =
      IsInProc(backend) ? fabric.NewTransport(id)
      : IsUcx(backend)  ? NewUcxTransport(id, ucx)
                        : NewZmqTransport(id);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return nullptr;
  return std::move(r).value();
}

// A node of `backend` (in-process ones on `fabric`) bound to a fresh
// endpoint: inproc://*, tcp://127.0.0.1:*, ipc://* or ucx://127.0.0.1:*.
inline std::unique_ptr<Transport> NewBoundNode(Backend backend, NodeId id,
                                               InProcFabric& fabric) {
  std::unique_ptr<Transport> t = NewNode(backend, id, fabric);
  if (t == nullptr) return nullptr;
  const char* endpoint = IsInProc(backend)          ? "inproc://*"
                         : backend == Backend::kTcp ? "tcp://127.0.0.1:*"
                         : backend == Backend::kIpc ? "ipc://*"
                                                    : "ucx://127.0.0.1:*";
  Status s = t->Bind(endpoint);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return t;
}

// Sets the process-wide spin budget for `backend` while it lives (2 ms for
// kInProcSpin, longer than most of the tests' round trips, so that they
// are received by spinning; zero otherwise) and the previous one after.
class SpinWaitFor : public ScopedSpinWait {
 public:
  explicit SpinWaitFor(Backend backend)
      : ScopedSpinWait(std::chrono::microseconds(
            backend == Backend::kInProcSpin ? 2000 : 0)) {}
};

}  // namespace strata::test_backends

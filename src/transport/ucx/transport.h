#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "transport/message.h"
#include "transport/transport.h"

namespace strata {

struct UcxOptions {
  // Bounds on what is sent and accepted.
  MessageLimits limits;
  // How long Close() lets sends in flight finish.
  std::chrono::milliseconds linger{1000};
  // Back-pressure: Send() waits while sends UCX has not finished hold more
  // than this many payload bytes (one send is always let through), up to
  // send_timeout, then fails with kDeadlineExceeded (a stalled peer).
  uint64_t max_inflight_bytes = uint64_t{1} << 30;
  std::chrono::milliseconds send_timeout{30000};
  // Shared memory and cross-memory attach between nodes on one machine
  // (docs/design/transport.md, "Shared memory and CMA"). UCX 1.13 offers those
  // only to endpoints without its peer-failure handling
  // (UCP_ERR_HANDLING_MODE_NONE). Such an endpoint still fails when its peer
  // closes or its process dies (UCX's connection manager sees its TCP
  // connection end), and Send() then returns kUnavailable at once, as with
  // the handling on (measured on 1.13, on loopback; UCX documents its error
  // handler as not called in this mode, 1.13 calls it); what it lacks is
  // UCX's keepalive, which finds a peer whose machine went silent. The
  // connecting side decides; the accepting side takes its mode.
  //   kAuto: without the handling on routes to an address of this machine
  //          (loopback or one of its interfaces), with it elsewhere. The
  //          default.
  //   kOn:   without it on every route (a silent machine is then found by a
  //          cluster's heartbeats, or at the send timeout).
  //   kOff:  with it on every route: every byte goes through UCX's TCP
  //          transport, also on one machine.
  // Unset: the environment variable STRATA_UCX_SHARED_MEMORY ("auto", "1"
  // on, "0" off), and kAuto without it.
  enum class SharedMemory { kAuto, kOn, kOff };
  std::optional<SharedMemory> shared_memory;
};

// The spellings of UcxOptions::SharedMemory: the config key
// cluster.ucx_shared_memory's ("auto", "on", "off") and the environment
// variable STRATA_UCX_SHARED_MEMORY's ("auto", "1", "0"). nullopt for any
// other value.
std::optional<UcxOptions::SharedMemory> UcxSharedMemoryFromConfig(
    std::string_view value);
std::optional<UcxOptions::SharedMemory> UcxSharedMemoryFromEnv(
    std::string_view value);
const char* UcxSharedMemoryEnvValue(UcxOptions::SharedMemory mode);

// Whether this build has UCX (libucx-dev found when it was configured).
bool HaveUcx();

// A Transport over UCX active messages (docs/design/transport.md, "UCX"):
// endpoints are "ucx://HOST:PORT" (Bind: PORT 0 or * picks a free one). UCX
// chooses how bytes move between two nodes: shared memory and cross-memory
// attach on one machine (UcxOptions::shared_memory), TCP (or RDMA where there
// is hardware) between machines; the UCX_TLS environment variable narrows the
// choice. One thread per transport
// drives UCX and sleeps on its event descriptor when idle.
//
// A message is one active message: the wire header (wire.h) as the active
// message's header, the payloads as its data, sent from their buffers
// without a copy (an I/O vector). Large ones go by rendezvous and land in
// fresh buffers (each payload 64-byte aligned). Messages from one sender
// are delivered in the order their headers arrived. Received headers are
// validated as the ZeroMQ backend validates them; a bad one is dropped and
// counted, never fatal. A connection from something that is not UCX (say,
// raw TCP garbage on the port) is refused by UCX's handshake.
//
// Receive in place (SetPlacement, placement.h): a payload a caller placed
// is copied straight into its memory (eager messages) or fetched into it by
// the rendezvous, which pins the placement until the data is in. Direct
// delivery runs on the progress thread. Unimplemented when the build has no
// UCX.
Result<std::unique_ptr<Transport>> NewUcxTransport(NodeId id,
                                                   UcxOptions options = {});

// Tests only: sends one active message with exactly these header and data
// bytes from `from` (a UCX transport) to `to`, as a broken or hostile peer
// would, to check the receiver drops it. InvalidArgument for a transport
// that is not UCX.
Status SendRawUcxForTesting(Transport& from, NodeId to,
                            std::vector<uint8_t> am_header,
                            std::vector<uint8_t> data);

// Tests only: UCX's description of `from`'s route to `to` (ucp_ep_print_info:
// its lanes and the transports they use). kFailedPrecondition before the
// route's first send, InvalidArgument for a transport that is not UCX.
Result<std::string> UcxRouteInfoForTesting(Transport& from, NodeId to);

// Tests only: how often UCX has called the error handler of an endpoint of
// this process (any UCX transport) since it started.
uint64_t UcxErrorHandlerCallsForTesting();

}  // namespace strata

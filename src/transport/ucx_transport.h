#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
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
  // Shared memory and cross-memory attach between nodes on one machine.
  // UCX 1.13 offers those only to endpoints without its peer-failure
  // handling, so with this on a lost peer is not reported by Send(): sends
  // to it go on returning OK while the transport's in-flight budget
  // (max_inflight_bytes, shared by every peer) lasts, then wait and fail at
  // send_timeout. A cluster finds the lost node by its heartbeats. Off: every
  // byte goes through UCX's TCP transport, also on one machine, and a lost peer
  // is reported within a second or so. Unset: the environment variable
  // STRATA_UCX_SHARED_MEMORY ("1" on, "0" off), and off without it
  // (docs/transport.md, "What UCX runs over").
  std::optional<bool> shared_memory;
};

// Whether this build has UCX (libucx-dev found when it was configured).
bool HaveUcx();

// A Transport over UCX active messages (docs/transport.md, "UCX"): endpoints
// are "ucx://HOST:PORT" (Bind: PORT 0 or * picks a free one). UCX chooses
// how bytes move between two nodes: shared memory and cross-memory attach on
// one machine, TCP (or RDMA where there is hardware) between machines; the
// UCX_TLS environment variable narrows the choice. One thread per transport
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
// the rendezvous, which pins the placement until the data is in. No direct
// delivery. Unimplemented when the build has no UCX.
Result<std::unique_ptr<Transport>> NewUcxTransport(NodeId id,
                                                   UcxOptions options = {});

// Tests only: sends one active message with exactly these header and data
// bytes from `from` (a UCX transport) to `to`, as a broken or hostile peer
// would, to check the receiver drops it. InvalidArgument for a transport
// that is not UCX.
Status SendRawUcxForTesting(Transport& from, NodeId to,
                            std::vector<uint8_t> am_header,
                            std::vector<uint8_t> data);

}  // namespace strata

#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "common/status.h"
#include "transport/message.h"
#include "transport/transport.h"

namespace strata {

struct InProcOptions {
  // Messages waiting in a node's inbox before Send() to it blocks.
  size_t max_queued_messages = 4096;
  // How long Send() waits for room in a full inbox.
  std::chrono::milliseconds send_timeout{30000};
  MessageLimits limits;
};

namespace internal {
class InProcHub;
}  // namespace internal

// The "network" of one in-process cluster: a registry of inproc:// endpoints
// shared by the transports it creates. Messages move between transports of
// one fabric by handing over their buffers (zero copy: the receiver's payload
// data pointers equal the sender's). Fabrics are independent of each other,
// so any number of clusters can coexist in one process; the same name bound
// in two fabrics names two different endpoints.
//
// Thread-safe. The fabric may be destroyed before the transports it made
// (they share its registry).
class InProcFabric {
 public:
  InProcFabric();
  ~InProcFabric();
  InProcFabric(const InProcFabric&) = delete;
  InProcFabric& operator=(const InProcFabric&) = delete;

  // A transport for node `id` on this fabric. It speaks inproc://NAME
  // endpoints ("inproc://*" binds a fresh unique name). Differences from a
  // network transport: a message to an endpoint nobody has bound yet waits
  // in that endpoint's inbox until someone binds it; a Send() to a peer whose
  // transport was closed fails at once with kUnavailable.
  // kInvalidArgument for a negative id or nonsensical options.
  Result<std::unique_ptr<Transport>> NewTransport(NodeId id,
                                                  InProcOptions options = {});

 private:
  std::shared_ptr<internal::InProcHub> hub_;
};

}  // namespace strata

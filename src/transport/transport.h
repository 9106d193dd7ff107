#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "transport/message.h"
#include "transport/placement.h"

namespace strata {

// Counters of one transport since it was created. Approximate while traffic
// is flowing (each is read on its own).
struct TransportStats {
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;  // delivered by Recv()
  uint64_t payload_bytes_sent = 0;
  uint64_t payload_bytes_received = 0;
  uint64_t messages_dropped = 0;  // malformed, misrouted or abandoned input
  // Peers refused during the connection handshake (ZeroMQ with CURVE: no
  // keys, another cluster's keys, a key not allowed); one per attempt.
  uint64_t connections_refused = 0;
};

// Moves messages between the nodes of one cluster. One Transport per node:
// it receives everything addressed to its node on the endpoint it is bound
// to, and sends to the peers it was told about with Connect().
//
// Guarantees: a message is delivered whole or not at all; messages from one
// sender to one receiver arrive in the order they were sent (when sent from
// one thread, or in the order concurrent Send() calls took the route);
// delivery is at most once (a peer that dies loses what was in flight).
// Received messages are validated before they are handed out: malformed input
// is dropped, logged and counted in stats().messages_dropped, never returned
// and never fatal.
//
// Thread safety: every method is safe to call from any thread. Send() may run
// concurrently from many threads; concurrent Recv() calls are serialized (one
// consumer thread is the intended use). Close() may race with everything
// else: calls that start after it fail with kCancelled.
//
// Implementations, one folder each: inproc/ (InProcFabric::NewTransport():
// threads of one process, zero copy), zmq/ (NewZmqTransport(): tcp:// and
// ipc://) and ucx/ (NewUcxTransport(): ucx://). NewBoundTransport()
// (factory.h) picks one from the scheme of the address a node binds.
class Transport {
 public:
  virtual ~Transport() = default;

  // This node's id (fixed at creation).
  virtual NodeId node_id() const = 0;

  // Starts receiving on `endpoint`: "tcp://127.0.0.1:PORT" (PORT 0 or * picks
  // a free port), "ipc:///path" or "ipc://*", "inproc://name" or "inproc://*"
  // depending on the backend. Once per transport. kInvalidArgument for an
  // endpoint the backend does not speak, kFailedPrecondition if already bound,
  // kUnavailable / kIoError if the address cannot be taken (in use, no such
  // interface), naming it.
  virtual Status Bind(const std::string& endpoint) = 0;

  // The endpoint actually bound (wildcards resolved), or "" before Bind().
  // Give this to peers for their Connect().
  virtual std::string endpoint() const = 0;

  // Records that `peer` receives on `endpoint`. Non-blocking: the peer need
  // not be up yet; messages sent meanwhile wait (up to the send timeout) until
  // it is. Connecting an already known peer to a new endpoint replaces the
  // route. kInvalidArgument for a negative id or a malformed endpoint.
  virtual Status Connect(NodeId peer, const std::string& endpoint) = 0;

  // Forgets the route to `peer`; messages still queued for it may be lost.
  // kNotFound if there was none.
  virtual Status Disconnect(NodeId peer) = 0;

  // Sends `msg` to `to`, filling msg.header.sender and .receiver. Payload
  // buffers are handed over without copying (inproc: the receiver gets the
  // same memory; ZeroMQ: the wire reads from them), so the caller must not
  // keep writing memory it shared through Buffer::Adopt().
  // Returns once the message is queued, not when it is received. Errors:
  // kInvalidArgument (ValidateOutgoing() failed), kNotFound (no Connect() for
  // `to`), kDeadlineExceeded (the peer took nothing within the send timeout:
  // it is slow, gone, or not started), kUnavailable (the peer is known to be
  // closed), kCancelled (this transport is closed). On error the message is
  // not delivered (a large one may have been sent in part; the receiver drops
  // such a fragment).
  virtual Status Send(NodeId to, Message msg) = 0;

  // Waits up to `timeout` for the next message addressed to this node.
  // kDeadlineExceeded if none arrives in time (the status names this node,
  // its endpoint and the wait), kFailedPrecondition before Bind(), kCancelled
  // once closed. A timeout of zero only polls.
  virtual Result<Message> Recv(std::chrono::milliseconds timeout) = 0;

  // Stops the transport: pending and later Recv() and Send() calls return
  // kCancelled, the endpoint is released, and messages still queued for
  // peers get up to the backend's linger time to leave. Idempotent. The
  // destructor calls it.
  virtual void Close() = 0;

  virtual TransportStats stats() const = 0;

  // Optional fast path: each message for this node is offered to `sink`
  // before it is queued; when `sink` returns true it took the message (and
  // may have moved from it), which then skips the queue and Recv(). Where
  // `sink` runs, DeliversOnSendersThreads() says: in-process backends call
  // it on senders' threads, concurrently; UCX on its progress thread, one
  // message at a time, in arrival order, and offers nothing more while a
  // message it declined waits in the queue (so Recv() and `sink` never see
  // messages out of order). `sink` must be quick. Null removes it; that call
  // waits until no thread is inside the old sink. Returns whether the
  // backend does it; those that cannot ignore the call and return false
  // (every message then goes through Recv()).
  virtual bool SetDirectDelivery(std::function<bool(Message&)> sink) {
    (void)sink;
    return false;
  }
  // True: a direct-delivery sink runs on the senders' threads, so whoever
  // waits for a message waits for a thread of this process (in-process
  // backends). False: on a receiving thread of the backend's own, which
  // serves every peer: what runs in the sink delays every later message,
  // and must not wait for anything that needs the transport's receiving
  // side (a reply, a send's completion).
  virtual bool DeliversOnSendersThreads() const { return false; }

  // Makes a Recv() that is waiting now return promptly with
  // kDeadlineExceeded (saying it was interrupted), so its thread can hand
  // the receiving side to another. If none is waiting, the next Recv() that
  // would wait may return early instead. Messages are never lost by it.
  // Safe from any thread. Backends that cannot do it ignore the call (the
  // Recv() then runs to its timeout or its next message).
  virtual void Interrupt() {}

  // Receive in place (placement.h): `lookup` is asked with the header of
  // each incoming message and may name memory one of its payloads is written
  // into as it arrives. Null removes it. Backends that deliver payloads
  // without copying them anyway (in-process) ignore it, and the caller
  // copies; ZeroMQ and UCX use it.
  virtual void SetPlacement(PlacementLookup lookup) { (void)lookup; }
};

}  // namespace strata

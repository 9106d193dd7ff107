#pragma once

// An emulated network over any transport (net.* keys): ShapedTransport
// wraps a node's real transport and holds each message back as long as the
// link model (link_model.h) says its trip takes, on the sending side
// (serialisation on the node's interface, then propagation) and on the
// receiving side (the receiving interface, one message at a time). The
// real transport still moves the bytes; on loopback it adds next to
// nothing, so what a run sees is the emulated link. Messages over a link
// the lookup leaves unshaped pass straight through.
//
// Delivery: a message is handed over on the shaper's own thread when it is
// due (DeliversOnSendersThreads() is false, as for UCX): to the
// direct-delivery sink if one is set and takes it, else to Recv(). Send()
// returns once the message is scheduled; a send that fails when it is due
// (the peer closed meanwhile) loses the message, logs it and counts it in
// stats().messages_dropped, as a network loses what was in flight.
// Close() sends what is still scheduled at once (no message is dropped for
// being early), then closes the wrapped transport.
//
// Thread-safe, as every Transport. Owns two threads (sending, receiving)
// and, over a wrapped transport without direct delivery (ZeroMQ), a third
// that receives from it.

#include <cstdint>
#include <functional>
#include <memory>

#include "common/status.h"
#include "transport/shaped/link_model.h"
#include "transport/transport.h"

namespace strata {

// The time the shaper reads and waits by; tests replace it.
class ShaperClock {
 public:
  virtual ~ShaperClock() = default;
  // Nanoseconds on a monotonic clock.
  virtual int64_t NowNs() const = 0;
  // The longest the shaper sleeps before reading the clock again while it
  // waits for a message's time (a manual clock moves without waking it).
  virtual int64_t MaxSleepNs() const = 0;
};

// std::chrono::steady_clock (one clock for every process of a machine).
std::shared_ptr<const ShaperClock> SteadyShaperClock();

struct ShapedOptions {
  // The links this node sends and receives over (required).
  LinkLookup links;
  // Drives the jitter (make it differ per node: run.seed and the node id).
  uint64_t seed = 1;
  // Null: SteadyShaperClock().
  std::shared_ptr<const ShaperClock> clock;
  // Bytes scheduled but not yet sent before Send() waits for room.
  uint64_t max_queued_bytes = uint64_t{1} << 30;
  // How long Send() waits for that room (then kDeadlineExceeded).
  std::chrono::milliseconds send_timeout{30000};
  // Called under the shaper's lock with each shaped message's schedule
  // (tests, the timeline); must be quick and must not call the transport.
  std::function<void(NodeId to, uint64_t wire_bytes, const Departure&)>
      on_departure;
};

// `inner` with its links shaped. kInvalidArgument without options.links or
// without an inner transport.
Result<std::unique_ptr<Transport>> NewShapedTransport(
    std::unique_ptr<Transport> inner, ShapedOptions options);

}  // namespace strata

#pragma once

// The model of an emulated network (net.* keys; docs/design/links.md): what
// a message's trip over a link costs, computed from the link's rate,
// latency and jitter and from what the node's network interface is already
// busy with. Pure arithmetic on times the caller passes in, so tests check
// a schedule exactly; ShapedTransport (shaped/transport.h) applies it.
//
// The model, per node:
//  - Egress: the node has one network interface. Every message it sends is
//    serialised onto its link at the link's rate, one message after
//    another in the order Send() was called (a FIFO shared by all the
//    node's outgoing flows: a server answering n pulls sends them one after
//    another). Its last bit reaches the receiver one propagation delay
//    (latency, plus a jitter drawn uniformly from [-jitter, +jitter],
//    never below zero) after it was serialised, and never before the
//    previous message on the same link (order per link is kept).
//  - Ingress: the receiving interface takes one message at a time at the
//    rate of the link it came over: a message is handed to the node when
//    it has arrived and the interface has had size/rate since it finished
//    the previous one. A lone message pays nothing more; n senders that
//    send at once to one node (incast) finish one after another, the last
//    n*size/rate after the first bit left (the shared bottleneck).
// Not modelled: loss, reordering, switches inside the fabric (every pair
// of nodes has its own wire between the two interfaces), TCP's slow start.

#include <climits>
#include <cstdint>
#include <functional>
#include <map>
#include <random>

#include "transport/message.h"

namespace strata {

// One direction of a link between two nodes.
struct LinkSpec {
  double bits_per_second = 0;  // 0: unlimited (no serialisation time)
  int64_t latency_ns = 0;      // one-way propagation delay
  int64_t jitter_ns = 0;       // the delay varies uniformly by +- this

  // False when the link costs nothing (no rate, no delay, no jitter).
  bool shaped() const {
    return bits_per_second > 0 || latency_ns > 0 || jitter_ns > 0;
  }
  // Nanoseconds to put `bytes` on this link (0 when unlimited).
  int64_t SerializationNs(uint64_t bytes) const;
};

bool operator==(const LinkSpec& a, const LinkSpec& b);

// The link from node `from` to node `to` (a pure function of the two ids:
// the same answer every time it is asked).
using LinkLookup = std::function<LinkSpec(NodeId from, NodeId to)>;

// Bytes a message occupies on an emulated wire: its payloads plus a fixed
// header (kWireHeaderBytes).
inline constexpr uint64_t kWireHeaderBytes = 64;
uint64_t WireBytes(const Message& msg);

// When one message leaves and arrives (nanoseconds on the caller's clock).
struct Departure {
  int64_t start_ns = 0;   // the interface starts serialising it
  int64_t end_ns = 0;     // its last bit is on the wire
  int64_t arrive_ns = 0;  // its last bit reaches the receiver
};

// A node's outgoing side. Not thread-safe (its owner locks).
class EgressSchedule {
 public:
  // `seed` drives the jitter: the same seed and the same sequence of calls
  // give the same schedule.
  explicit EgressSchedule(uint64_t seed) : rng_(seed) {}

  // Schedules a message of `bytes` to `to` over `link`, handed over at
  // `now_ns`.
  Departure Schedule(NodeId to, const LinkSpec& link, uint64_t bytes,
                     int64_t now_ns);

 private:
  int64_t interface_free_ns_ = 0;
  std::map<NodeId, int64_t> last_arrival_ns_;
  std::mt19937_64 rng_;
};

// A node's incoming side. Not thread-safe (its owner locks).
class IngressSchedule {
 public:
  // The time a message of `bytes` that came over `link` and arrived at
  // `arrived_ns` is handed to the node. Never earlier than the previous
  // message's (the interface is a FIFO).
  int64_t Deliver(const LinkSpec& link, uint64_t bytes, int64_t arrived_ns);

 private:
  // When the interface finished its previous message; none yet at first.
  int64_t interface_free_ns_ = INT64_MIN / 2;
};

}  // namespace strata

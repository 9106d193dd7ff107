#include "transport/shaped/link_model.h"

#include <algorithm>
#include <cmath>

namespace strata {

int64_t LinkSpec::SerializationNs(uint64_t bytes) const {
  if (bits_per_second <= 0) return 0;
  return static_cast<int64_t>(
      std::llround(static_cast<double>(bytes) * 8e9 / bits_per_second));
}

bool operator==(const LinkSpec& a, const LinkSpec& b) {
  return a.bits_per_second == b.bits_per_second &&
         a.latency_ns == b.latency_ns && a.jitter_ns == b.jitter_ns;
}

uint64_t WireBytes(const Message& msg) {
  return kWireHeaderBytes + msg.payload_bytes();
}

Departure EgressSchedule::Schedule(NodeId to, const LinkSpec& link,
                                   uint64_t bytes, int64_t now_ns) {
  Departure d;
  d.start_ns = std::max(now_ns, interface_free_ns_);
  d.end_ns = d.start_ns + link.SerializationNs(bytes);
  interface_free_ns_ = d.end_ns;
  int64_t delay = link.latency_ns;
  if (link.jitter_ns > 0) {
    std::uniform_int_distribution<int64_t> jitter(-link.jitter_ns,
                                                  link.jitter_ns);
    delay = std::max<int64_t>(0, delay + jitter(rng_));
  }
  int64_t& last = last_arrival_ns_[to];
  d.arrive_ns = std::max(d.end_ns + delay, last);
  last = d.arrive_ns;
  return d;
}

int64_t IngressSchedule::Deliver(const LinkSpec& link, uint64_t bytes,
                                 int64_t arrived_ns) {
  const int64_t t =
      std::max(arrived_ns, interface_free_ns_ + link.SerializationNs(bytes));
  interface_free_ns_ = t;
  return t;
}

}  // namespace strata

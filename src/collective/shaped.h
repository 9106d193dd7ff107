#pragma once

// Collectives over an emulated network (net.*; docs/design/links.md). The
// collectives move their data outside strata's transports (through memory
// between threads, through Gloo's own sockets between processes), so the
// link shaper never sees it. Instead each call takes at least the time the
// ring algorithm needs on the emulated links between consecutive ranks:
// an all-reduce of S bytes over n members is 2(n-1) steps (a
// reduce-scatter, then an all-gather), each moving a chunk of S/n bytes
// from every rank to the next at once, so each step lasts as long as the
// slowest link of the ring takes for one chunk (serialisation plus
// latency); a reduce-scatter or an all-gather alone is n-1 such steps, a
// barrier n-1 steps of a header. The call's real time counts toward it
// (the wait is what is left). Jitter is not modelled here.

#include <cstdint>
#include <memory>
#include <vector>

#include "collective/collective.h"
#include "transport/shaped/link_model.h"

namespace strata {

// Nanoseconds `steps` ring steps take when every rank sends `chunk_bytes`
// to the next at once: `ring[r]` is the link from rank r to rank r+1 (mod
// n). 0 for an empty ring or no steps.
int64_t RingStepsNs(const std::vector<LinkSpec>& ring, uint64_t chunk_bytes,
                    int steps);

// `inner` with each call stretched to the ring model's time on `ring`
// (ring.size() == inner->size()). Thread-safety as the inner collective's.
std::unique_ptr<Collective> NewShapedCollective(
    std::unique_ptr<Collective> inner, std::vector<LinkSpec> ring);

}  // namespace strata

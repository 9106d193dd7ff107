#pragma once

// The emulated cluster a run can ask for (docs/design/links.md): its links
// (net.*) and its workers' speeds (workers.*), resolved from the config
// once. Both are off by default, and off they cost nothing: no lookup, no
// shaper, no pacing.

#include <cstdint>
#include <string>
#include <vector>

#include "cluster/role_table.h"
#include "common/config.h"
#include "common/status.h"
#include "transport/shaped/link_model.h"

namespace strata {

// net.*: every link's rate, latency and jitter; per pair of roles
// (net.worker_server.*, net.worker_worker.*, net.worker_data.*, each field
// -1 = net.*'s); and per node or pair of nodes (net.nodes, e.g.
// "worker3: bandwidth_bps=1e8 latency_ms=20; worker0-server1:
// latency_ms=5"). A node's override slows every link that touches it (the
// lower rate, the larger latency and jitter win); a pair's replaces the
// fields it names for that pair, both ways. An empty lookup when no link is
// shaped. kInvalidArgument naming the piece of net.nodes that is malformed
// or names a node the cluster does not have.
Result<LinkLookup> LinksFromConfig(const Config& config,
                                   const RoleTable& roles);

// One line for the log: "net: 1e9 bit/s, 0.5 ms (+- 0.1 ms) every link;
// ..." or "" when off.
std::string DescribeLinks(const Config& config);

// workers.*: how much slower each worker computes than this machine lets
// it, and the noise on top (worker/pace.h applies it).
struct WorkerPaceOptions {
  // Per worker: compute time is scaled by 1/speed (0.25: 4x slower).
  // Empty: every worker at 1.
  std::vector<double> speed;
  // A pause of straggler_ms with this probability per step.
  double straggler_probability = 0;
  double straggler_ms = 0;
  // Lognormal noise on each step's compute time (median 1, sigma this).
  double noise_sigma = 0;
  uint64_t seed = 1;

  bool on() const;
  // Worker `index`'s speed factor (1 without workers.speed).
  double SpeedOf(int index) const;
  // workers.speed (a list of n factors, or "uniform:LO,HI" /
  // "lognormal:SIGMA" drawn per worker with workers.seed), workers.
  // straggler_probability, workers.straggler_ms, workers.noise_sigma.
  // kInvalidArgument naming the key for a list of the wrong length, a
  // factor <= 0 or a distribution it does not know.
  static Result<WorkerPaceOptions> FromConfig(const Config& config,
                                              int workers);
};

}  // namespace strata

namespace strata {

// Logs what the run emulates (nothing when it emulates nothing): the
// links and the workers' speeds.
void LogEmulation(const Config& config, const WorkerPaceOptions& pace);

}  // namespace strata

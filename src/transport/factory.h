#pragma once

// One place that makes a node's transport: the scheme of the address it
// binds picks the backend (inproc:// the in-process fabric, tcp:// and
// ipc:// ZeroMQ, ucx:// UCX), and one options struct carries what each of
// them needs from the caller. Threads of one process (a cluster run in
// process) and one process per node (strata node, --processes, MPI/Slurm
// ranks) make their transports here alike.
//
// Design: what depends only on the address and the options is done here:
// the checks that a run's security and peers fit the backend, advertising a
// wildcard bind, and the warning for a ZeroMQ node that listens beyond
// loopback without authentication (it is the transport's property, and it
// is then said the same way for threads and processes). What depends on
// how a run is launched stays with the caller: which address to bind
// (LocalEndpoint() gives the loopback one for a transport kind), and
// resolving a coordinator's host name before binding it
// (ResolveBindHost(), for the caller to apply where it binds a name that
// peers were told).

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "transport/inproc/transport.h"
#include "transport/shaped/transport.h"
#include "transport/transport.h"
#include "transport/ucx/transport.h"
#include "transport/zmq/curve_keys.h"
#include "transport/zmq/transport.h"

namespace strata {

// What NewBoundTransport() needs beyond the node id and the address; each
// backend reads its own fields and ignores the others.
struct TransportOptions {
  // inproc://: the fabric the node joins (required there). Not owned; the
  // transports it made may outlive it.
  InProcFabric* fabric = nullptr;
  // tcp://, ipc://: a ZeroMQ context shared by the transports of one
  // process (fewer I/O threads, one CURVE authentication handler). Null:
  // the transport owns one.
  std::shared_ptr<ZmqContext> zmq_context;
  // tcp://, ipc://: authenticate and encrypt with CurveZMQ
  // (ZmqOptions::curve). inproc:// and ucx:// have no authentication: a
  // node asked to bind them with CURVE is refused (kInvalidArgument).
  std::optional<CurveKeys> curve;
  // An endpoint of a peer this node will reach first (a cluster's
  // coordinator), or empty. Its backend must be this node's
  // (kInvalidArgument otherwise: every node of a cluster speaks one
  // transport), and a wildcard tcp:// bind advertises the local address
  // this machine uses to reach it (see advertise_host).
  std::string known_peer;
  // tcp:// bound to a wildcard host (tcp://0.0.0.0:PORT, tcp://*:PORT):
  // the host endpoint() reports, for peers on other machines. Empty: the
  // local address that routes toward known_peer when that is a tcp://
  // endpoint, else the address as bound.
  std::string advertise_host;
  // ucx://: UcxOptions::shared_memory. Unset: the environment variable
  // STRATA_UCX_SHARED_MEMORY decides, and kAuto without it.
  std::optional<UcxOptions::SharedMemory> ucx_shared_memory;
  // An emulated network (net.*): set, the node's links are shaped as it
  // says (shaped/transport.h); empty, the transport is the backend's own
  // and nothing is added. link_seed drives the jitter (each node draws its
  // own from it).
  LinkLookup links;
  uint64_t link_seed = 1;
};

// A transport for node `id` bound to `endpoint`, of the backend its scheme
// names: "inproc://NAME" or "inproc://*"; "tcp://HOST:PORT" (PORT * or 0
// picks a free one; HOST an address or an interface, * or 0.0.0.0 for all)
// or "ipc://PATH"; "ucx://HOST:PORT". A ZeroMQ node bound beyond loopback
// (or advertising a non-loopback address) without CURVE logs a warning
// that anyone who reaches the port can push into the model.
//
// Errors (each names the node and the address): kInvalidArgument for a
// scheme that names no backend, inproc:// without options.fabric, CURVE
// keys with inproc:// or ucx://, a known_peer of another backend, or
// options the backend refuses; kUnimplemented for ucx:// in a build
// without UCX (or CURVE keys with a libzmq without CURVE); kNotFound /
// kUnavailable when the route toward known_peer cannot be found; what
// Transport::Bind() returns when the address cannot be taken.
Result<std::unique_ptr<Transport>> NewBoundTransport(
    NodeId id, const std::string& endpoint,
    const TransportOptions& options = {});

// An endpoint on this machine with a free port or name, for the transport
// kind `transport` (cluster.transport's values): "inproc" -> inproc://*,
// "tcp" -> tcp://127.0.0.1:*, "ipc" -> ipc://*, "ucx" -> ucx://127.0.0.1:*.
// kInvalidArgument naming it for any other.
Result<std::string> LocalEndpoint(std::string_view transport);

// `endpoint` with the host name of a tcp:// endpoint resolved to its IPv4
// address (tcp://node001:5555 -> tcp://10.0.0.1:5555, as under mpirun or
// srun): ZeroMQ binds interfaces and addresses, not names. Anything else
// (another scheme, a wildcard or an IPv4 address) comes back unchanged.
// kNotFound naming the host when it does not resolve.
Result<std::string> ResolveBindHost(const std::string& endpoint);

}  // namespace strata

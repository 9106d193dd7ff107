// Which routes of a UcxTransport go without UCX's peer-failure handling,
// so that UCX may move their bytes through shared memory and cross-memory
// attach (UcxOptions::shared_memory, docs/design/transport.md).

#include <arpa/inet.h>
#include <ifaddrs.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/ucx/transport_impl.h"

namespace strata::ucx {

// Peer-failure handling, unless shared memory is wanted: UCX 1.13 leaves
// out every transport that cannot report a lost peer (its shared-memory
// and CMA transports) from endpoints that ask for it (openucx/ucx#8477).
// Without it, a client-server endpoint still fails once its connection
// manager's TCP connection ends (the peer closed or its process died),
// and UCX still calls the endpoint's error handler; what it lacks is
// UCX's keepalive, which finds a peer whose machine went silent
// (docs/design/transport.md).
ucp_err_handling_mode_t UcxTransport::ErrorMode(bool shared_memory) {
  return shared_memory ? UCP_ERR_HANDLING_MODE_NONE
                       : UCP_ERR_HANDLING_MODE_PEER;
}

// Whether a route to a peer at `peer` goes without UCX's peer-failure
// handling (UcxOptions::shared_memory). The connecting side decides; the
// accepting side's endpoint takes its mode (OnConnection).
bool UcxTransport::WantsSharedMemory(in_addr peer) const {
  switch (mode_) {
    case SharedMemory::kOn:
      return true;
    case SharedMemory::kOff:
      return false;
    case SharedMemory::kAuto:
      break;
  }
  // 0.0.0.0 (a node advertising its wildcard bind) reaches this machine.
  return (ntohl(peer.s_addr) >> 24) == 127 ||
         peer.s_addr == htonl(INADDR_ANY) ||
         local_addrs_.count(peer.s_addr) > 0;
}

// The IPv4 addresses of this machine's interfaces (SharedMemory::kAuto).
void UcxTransport::FindLocalAddresses() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    LogWarning(
        "node {}: cannot list this machine's addresses ({}); UCX uses "
        "shared memory only towards loopback addresses",
        id_, std::strerror(errno));
    return;
  }
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr != nullptr && a->ifa_addr->sa_family == AF_INET) {
      local_addrs_.insert(
          reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr);
    }
  }
  ::freeifaddrs(list);
}

}  // namespace strata::ucx

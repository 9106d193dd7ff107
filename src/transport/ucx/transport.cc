// NewUcxTransport() and what ucx/transport.h declares beside it: the
// spellings of UcxOptions::SharedMemory, the test hooks, and what a build
// without UCX offers instead. The transport itself is UcxTransport
// (ucx/transport_impl.h and the files it lists).

#include "transport/ucx/transport.h"

namespace strata {
namespace {

struct SharedMemorySpelling {
  UcxOptions::SharedMemory mode;
  const char* config;
  const char* env;
};
constexpr SharedMemorySpelling kSharedMemorySpellings[] = {
    {UcxOptions::SharedMemory::kAuto, "auto", "auto"},
    {UcxOptions::SharedMemory::kOn, "on", "1"},
    {UcxOptions::SharedMemory::kOff, "off", "0"},
};

}  // namespace

std::optional<UcxOptions::SharedMemory> UcxSharedMemoryFromConfig(
    std::string_view value) {
  for (const auto& s : kSharedMemorySpellings) {
    if (value == s.config) return s.mode;
  }
  return std::nullopt;
}

std::optional<UcxOptions::SharedMemory> UcxSharedMemoryFromEnv(
    std::string_view value) {
  for (const auto& s : kSharedMemorySpellings) {
    if (value == s.env) return s.mode;
  }
  return std::nullopt;
}

const char* UcxSharedMemoryEnvValue(UcxOptions::SharedMemory mode) {
  for (const auto& s : kSharedMemorySpellings) {
    if (mode == s.mode) return s.env;
  }
  return "auto";
}

}  // namespace strata

#ifdef STRATA_HAVE_UCX

#include <cstdlib>

#include "transport/ucx/transport_impl.h"

namespace strata {
namespace {

// UcxOptions::shared_memory when the options leave it unset.
constexpr const char* kSharedMemoryEnv = "STRATA_UCX_SHARED_MEMORY";

}  // namespace

bool HaveUcx() { return true; }

Status SendRawUcxForTesting(Transport& from, NodeId to,
                            std::vector<uint8_t> am_header,
                            std::vector<uint8_t> data) {
  auto* ucx = dynamic_cast<ucx::UcxTransport*>(&from);
  if (ucx == nullptr)
    return Status::InvalidArgument("SendRawUcxForTesting: not a UCX transport");
  return ucx->SendRaw(to, std::move(am_header), std::move(data));
}

uint64_t UcxErrorHandlerCallsForTesting() {
  return ucx::g_error_handler_calls.load();
}

Result<std::string> UcxRouteInfoForTesting(Transport& from, NodeId to) {
  auto* ucx = dynamic_cast<ucx::UcxTransport*>(&from);
  if (ucx == nullptr) {
    return Status::InvalidArgument(
        "UcxRouteInfoForTesting: not a UCX transport");
  }
  return ucx->RouteInfo(to);
}

Result<std::unique_ptr<Transport>> NewUcxTransport(NodeId id,
                                                   UcxOptions options) {
  if (id < 0)
    return Status::InvalidArgument("UCX transport for node id {}", id);
  // UcxOptions::shared_memory left unset: the environment says.
  if (const char* env = std::getenv(kSharedMemoryEnv);
      !options.shared_memory.has_value() && env != nullptr) {
    options.shared_memory = UcxSharedMemoryFromEnv(env);
    if (!options.shared_memory.has_value()) {
      return Status::InvalidArgument(
          "node {}: {}=\"{}\": expected auto (shared memory towards this "
          "machine's addresses), 1 (towards every peer) or 0 (never)",
          id, kSharedMemoryEnv, env);
    }
  }
  auto t = std::make_unique<ucx::UcxTransport>(id, std::move(options));
  RETURN_IF_ERROR(t->Init());
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace strata

#else  // !STRATA_HAVE_UCX

namespace strata {

bool HaveUcx() { return false; }

Status SendRawUcxForTesting(Transport&, NodeId, std::vector<uint8_t>,
                            std::vector<uint8_t>) {
  return Status::Unimplemented("this build has no UCX");
}

Result<std::string> UcxRouteInfoForTesting(Transport&, NodeId) {
  return Status::Unimplemented("this build has no UCX");
}

uint64_t UcxErrorHandlerCallsForTesting() { return 0; }

Result<std::unique_ptr<Transport>> NewUcxTransport(NodeId id, UcxOptions) {
  return Status::Unimplemented(
      "node {}: this build has no UCX (install libucx-dev, which "
      "scripts/setup.sh does, and configure again)",
      id);
}

}  // namespace strata

#endif

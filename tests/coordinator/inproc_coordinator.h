#pragma once

// A started coordinator on an in-process fabric, bound at
// inproc://coordinator, for tests that run nodes as threads.
#include <gtest/gtest.h>

#include <memory>

#include "coordinator/coordinator.h"
#include "transport/inproc/transport.h"

namespace strata {

inline constexpr const char* kTestCoordinator = "inproc://coordinator";

inline std::unique_ptr<Coordinator> StartInProcCoordinator(
    InProcFabric& fabric, const CoordinatorOptions& options) {
  auto transport = fabric.NewTransport(0);
  EXPECT_TRUE(transport.ok());
  EXPECT_TRUE((*transport)->Bind(kTestCoordinator).ok());
  auto coordinator =
      std::make_unique<Coordinator>(options, std::move(*transport));
  coordinator->Start();
  return coordinator;
}

}  // namespace strata

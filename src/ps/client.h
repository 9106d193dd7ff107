#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "ps/key_range.h"
#include "transport/rpc.h"

namespace strata {

// What a finished push reports per server range.
struct PushResult {
  std::vector<int64_t>
      versions;            // each range's version after the push was handled
  int dropped_ranges = 0;  // ranges that dropped the gradient as late
  uint64_t bytes = 0;
};

// A push in flight. Wait() returns when every server answered.
class PushHandle {
 public:
  // kDeadlineExceeded names the server that did not answer in time; a
  // server's error reply becomes its status.
  Result<PushResult> Wait(std::chrono::milliseconds timeout);

 private:
  friend class PsClient;
  std::vector<std::shared_ptr<RpcCall>> calls_;
  uint64_t bytes_ = 0;
  // Leader-first pushes (sync k-of-n): the second phase, sent from Wait()
  // once the leader placed the gradient in a step.
  class PsClient* client_ = nullptr;
  const float* grads_ = nullptr;
};

// A pull in flight. Wait() copies each range into the destination given to
// Pull() and returns the versions they reflect.
class PullHandle {
 public:
  struct Pulled {
    std::vector<int64_t> versions;
    uint64_t bytes = 0;
  };
  Result<Pulled> Wait(std::chrono::milliseconds timeout);

 private:
  friend class PsClient;
  std::vector<std::shared_ptr<RpcCall>> calls_;
  std::vector<KeyRange> ranges_;
  float* dest_ = nullptr;
};

// The worker's view of the parameter servers (KVWorker in ps-lite terms):
// splits the flat vector by the key layout and talks to each range's server.
// Push and Pull are asynchronous and return handles to wait on. Thread-safe
// as far as the RpcEndpoint is; a handle is used by one thread.
class PsClient {
 public:
  // `servers[i]` is the node id that owns layout.range(i).
  // `leader_first`: sync k-of-n with several servers (protocol.h,
  // kPushTagged): pushes go to server 0 first, which chooses the step, then
  // to the others tagged with it. The gradients passed to Push() must then
  // stay unchanged until the handle's Wait() returns.
  PsClient(RpcEndpoint& rpc, KeyLayout layout, std::vector<NodeId> servers,
           bool leader_first = false);

  // Sends the gradients (layout.total() floats, copied before return)
  // computed on parameters of `base_versions` (one per range).
  std::unique_ptr<PushHandle> Push(const float* grads,
                                   const std::vector<int64_t>& base_versions);
  // Sends the initial parameters (worker 0, once, before training).
  std::unique_ptr<PushHandle> PushInitial(const float* params);
  // Tells every server this worker will push no more gradients.
  std::unique_ptr<PushHandle> Leave();
  // Asks every range for parameters of at least `min_versions` (empty: any);
  // `dest` (layout.total() floats) must stay valid until Wait() returns.
  std::unique_ptr<PullHandle> Pull(float* dest,
                                   const std::vector<int64_t>& min_versions);

  const KeyLayout& layout() const { return layout_; }

 private:
  std::unique_ptr<PushHandle> SendPush(const float* values,
                                       const std::vector<int64_t>& versions,
                                       uint32_t flags);

  RpcEndpoint& rpc_;
  friend class PushHandle;
  // Pushes `values` to the servers [first, last) into `handle`; with
  // `step_size`, as tagged pushes (leader-first second phase).
  void SendRanges(PushHandle& handle, const float* values,
                  const std::vector<int64_t>& versions, uint32_t flags,
                  int first, int last, const int64_t* step_size);

  const KeyLayout layout_;
  const std::vector<NodeId> servers_;
  const bool leader_first_;
  // Pushed values are copied into buffers recycled through this pool (it
  // caches one push's worth): a fresh allocation of a multi-MiB range costs
  // page faults and zeroing on every push.
  const std::shared_ptr<BufferPool> push_pool_;
};

}  // namespace strata

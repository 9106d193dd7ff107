#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "ps/compression.h"
#include "ps/key_range.h"
#include "transport/rpc.h"

namespace strata {

// What a finished push reports per server range.
struct PushResult {
  std::vector<int64_t>
      versions;            // each range's version after the push was handled
  int dropped_ranges = 0;  // ranges that dropped the gradient as late
  uint64_t bytes = 0;
  uint64_t pulled_bytes = 0;  // PushPull(): parameter bytes copied back
  // The gradient's staleness as the servers applied it (the largest over
  // the ranges); -1 when no range applied it (dropped, still pending).
  int64_t staleness = -1;
};

// A push in flight. Wait() returns when every server answered.
class PushHandle {
 public:
  PushHandle() = default;
  // Revokes the receive-in-place of replies still on the way (PushPull()):
  // nothing writes into `dest` once the handle is gone. A UCX rendezvous
  // still fetching into it is waited for (PayloadPlacement::Revoke).
  ~PushHandle();
  PushHandle(const PushHandle&) = delete;
  PushHandle& operator=(const PushHandle&) = delete;

  // kDeadlineExceeded names the server that did not answer in time; a
  // server's error reply becomes its status.
  Result<PushResult> Wait(std::chrono::milliseconds timeout);
  // A push-pull sent range by range (BeginPush with `dest`, not
  // leader-first): waits for the acks of the layout's first `ranges`
  // ranges only (in key order, the order the forward pass reads them);
  // once it returns Ok their parameters are in `dest`, final, while later
  // ones may still be arriving. Every one of those ranges must have been
  // sent (PushRange). Wait() then waits for the rest and reports them all.
  Status WaitFor(size_t ranges, std::chrono::milliseconds timeout);

 private:
  friend class PsClient;
  // Waits (until `deadline`) for calls_[i]'s ack and books it into got_
  // (taking its parameters with `dest_`); once per call.
  Status Take(size_t i, std::chrono::steady_clock::time_point deadline);
  // What the acks taken so far said: versions by layout index, and the
  // counts of a PushResult.
  std::vector<bool> taken_;
  std::vector<std::pair<int, int64_t>> got_versions_;
  PushResult got_;
  std::vector<std::shared_ptr<RpcCall>> calls_;
  std::vector<std::shared_ptr<PayloadPlacement>> placements_;
  uint64_t bytes_ = 0;
  // The client that sent it: sends a leader-first push's second phase and
  // takes PushPull()'s parameters (TakeParameters).
  class PsClient* client_ = nullptr;
  // Leader-first pushes (sync k-of-n): the second phase, sent from Wait()
  // once the leader placed the gradient in a step.
  bool leader_first_ = false;
  const float* grads_ = nullptr;
  // Leader-first pushes sent range by range (BeginPush): the lead range's
  // ack, taken by PushRange() (which then sends the other ranges tagged
  // with its step), and the ranges that came before it.
  std::unique_ptr<Message> lead_ack_;
  int64_t lead_step_size_ = 0;
  std::vector<int> before_lead_;
  std::shared_ptr<void> keep_alive_;
  // PushPull(): where each ack's parameters go (calls_[i] is ranges_[i],
  // range i of the layout).
  float* dest_ = nullptr;
  std::vector<KeyRange> ranges_;
  std::vector<int> indices_;  // the layout index of calls_[i]'s range
  // BeginPush(): the base versions every PushRange() sends.
  std::vector<int64_t> versions_;
};

// A pull in flight. Each range lands in the destination given to Pull():
// over ZeroMQ and UCX as it arrives (received in place, placement.h), in
// process copied by Wait(). Wait() returns the versions the ranges reflect.
// After a kDeadlineExceeded, Wait() may be called again: it resumes with the
// ranges still missing. Until Wait() succeeds the destination's content is
// unspecified and the caller leaves it alone; destroying the handle stops
// all writes into it.
class PullHandle {
 public:
  struct Pulled {
    std::vector<int64_t> versions;
    uint64_t bytes = 0;
  };
  PullHandle() = default;
  ~PullHandle();
  PullHandle(const PullHandle&) = delete;
  PullHandle& operator=(const PullHandle&) = delete;

  Result<Pulled> Wait(std::chrono::milliseconds timeout);
  // Waits for the first `ranges` ranges only (in key order, the order the
  // forward pass reads them): once it returns Ok they are in the
  // destination, final, while later ones may still be arriving. Resumes as
  // Wait() does; Wait() then waits for the rest.
  Status WaitFor(size_t ranges, std::chrono::milliseconds timeout);
  size_t num_ranges() const { return calls_.size(); }

 private:
  friend class PsClient;
  class PsClient* client_ = nullptr;  // takes each range (calls_[i]: range i)
  std::vector<std::shared_ptr<RpcCall>> calls_;
  std::vector<std::shared_ptr<PayloadPlacement>> placements_;
  std::vector<KeyRange> ranges_;
  float* dest_ = nullptr;
  size_t next_ = 0;  // calls_[0, next_) are copied into dest_ and pulled_
  Pulled pulled_;
};

// The worker's view of the parameter servers (KVWorker in ps-lite terms):
// splits the flat vector by the key layout and talks to each range's server.
// Push and Pull are asynchronous and return handles to wait on. Thread-safe
// as far as the RpcEndpoint is; a handle is used by one thread.
class PsClient {
 public:
  // `servers[i]` is server i's node id: range r goes to
  // servers[layout.owner(r)].
  // `leader_first`: sync k-of-n with several ranges (protocol.h,
  // kPushTagged): pushes go to range `lead_range` first, whose server
  // chooses the step, then to the other ranges tagged with it. The lead is
  // range 0 for whole pushes, and the range the backward pass fills first
  // (the last) for pushes range by range (BeginPush), so that the choice
  // travels while the backward pass goes on.
  PsClient(RpcEndpoint& rpc, KeyLayout layout, std::vector<NodeId> servers,
           bool leader_first = false, int lead_range = 0);

  // Sends the gradients (layout.total() floats) computed on parameters of
  // `base_versions` (one per range). Zero copy: large ranges go to the
  // transport straight from `grads`, which must stay unchanged until the
  // handle's Wait() returns. `keep_alive` (optional) owns the memory of
  // `grads`; the transport holds it until it is done with the bytes, so the
  // memory stays valid even if Wait() fails or is never called. Without it
  // the caller must keep `grads` alive until every send has completed.
  std::unique_ptr<PushHandle> Push(const float* grads,
                                   const std::vector<int64_t>& base_versions,
                                   std::shared_ptr<void> keep_alive = nullptr);
  // Push() and a Pull() of the parameters just after it in one round trip
  // per server (protocol.h, kPushPull; sync: the ack, and its parameters,
  // come when the push's step closes). Each range's
  // parameters land in `dest` (layout.total() floats, not `grads`) as for
  // Pull(): `dest` stays valid and untouched by the caller until Wait()
  // returns or the handle is destroyed. PushResult::versions are their
  // versions. Leader-first, as Push(): the lead range first, the others
  // tagged from Wait(); a gradient the lead drops brings no parameters.
  std::unique_ptr<PushHandle> PushPull(
      const float* grads, const std::vector<int64_t>& base_versions,
      float* dest, std::shared_ptr<void> keep_alive = nullptr);
  // Layer-wise pipelining (docs/design/pipelining.md): a gradient pushed range
  // by range as the backward pass finishes each. BeginPush() sends nothing;
  // PushRange() then sends range `range` of `grads` (the whole flat
  // gradient, same rules as Push()), each range once, in any order, from
  // one thread at a time; Wait() waits for the ranges sent. With `dest`,
  // each push is a push-pull whose parameters land in `dest` as for
  // PushPull().
  // Leader-first: the lead range is sent first (ranges given before it wait
  // for it), and PushRange() of the lead waits (up to `timeout`) for its
  // ack, which says which step the gradient joined; the other ranges then
  // go tagged with that step. A gradient the lead dropped as late goes
  // nowhere else and brings no parameters (PushResult::dropped_ranges).
  // The error is the lead's (a timeout, a refusal).
  std::unique_ptr<PushHandle> BeginPush(
      const std::vector<int64_t>& base_versions, float* dest = nullptr,
      std::shared_ptr<void> keep_alive = nullptr);
  Status PushRange(PushHandle& handle, int range, const float* grads,
                   std::chrono::milliseconds timeout);
  // Sends the initial parameters (worker 0, once, before training); the
  // same rules for `params` as Push() has for `grads`.
  std::unique_ptr<PushHandle> PushInitial(
      const float* params, std::shared_ptr<void> keep_alive = nullptr);
  // Tells every server this worker will push no more gradients.
  std::unique_ptr<PushHandle> Leave();
  // Tells every server this worker, having left, pushes again (kPushRejoin).
  std::unique_ptr<PushHandle> Rejoin();
  // Asks every range for parameters of at least `min_versions` (empty: any);
  // `dest` (layout.total() floats) stays valid and untouched by the caller
  // until Wait() succeeds or the handle is destroyed (PullHandle).
  std::unique_ptr<PullHandle> Pull(float* dest,
                                   const std::vector<int64_t>& min_versions);

  const KeyLayout& layout() const { return layout_; }

  // Gradient pushes (Push, PushPull and the tagged second phase; never
  // PushInitial or Leave) go out encoded with `c` (cluster.compression,
  // protocol.h kPushFp16/kPushInt8). int8 keeps an error-feedback residual
  // per range (ps/compression.h), so this client must push from one thread
  // at a time. Set before the first push.
  // With `pulls` (cluster.compress_pulls; not kNone), Pull and PushPull
  // bring back the parameters as the difference to this client's copy of
  // them, encoded with `c` (protocol.h, kPullDelta): the parameters a pull
  // writes are then the servers' to within that codec's error on one
  // difference, which the next pull makes up.
  void SetCompression(Compression c, bool pulls = false);
  Compression compression() const { return compression_; }
  // The int8 residuals, one per range (empty without int8), for a
  // checkpoint; RestoreResiduals() checks their sizes against the layout.
  std::vector<std::vector<float>> Residuals() const;
  Status RestoreResiduals(const std::vector<std::vector<float>>& residuals);

 private:
  // Leader-first Push() or PushPull() (`dest` set): sends the lead range;
  // the handle's Wait() sends the others, tagged with the lead's step.
  std::unique_ptr<PushHandle> SendLeaderFirst(
      const float* grads, const std::vector<int64_t>& base_versions,
      float* dest, std::shared_ptr<void> keep_alive);
  std::unique_ptr<PushHandle> SendPush(const float* values,
                                       const std::vector<int64_t>& versions,
                                       uint32_t flags,
                                       const std::shared_ptr<void>& keep_alive);
  // Whether range `s`'s message, in a fan-out over ranges up to `last`, may
  // be handled on this thread (InlineSendScope): only if this thread may,
  // and only at the node of the last range, so that the other nodes'
  // threads apply theirs meanwhile, in parallel.
  bool InlineOnlyAtLastNode(int s, int last) const {
    return InlineSendScope::active() &&
           servers_[static_cast<size_t>(s)] ==
               servers_[static_cast<size_t>(last - 1)];
  }
  // A message with `flags` and no payload to every range (Leave, Rejoin).
  std::unique_ptr<PushHandle> SendToEveryRange(uint32_t flags);

  RpcEndpoint& rpc_;
  friend class PushHandle;
  // Pushes `values` to the servers [first, last) into `handle`; with
  // `step_size`, as tagged pushes (leader-first second phase).
  void SendRanges(PushHandle& handle, const float* values,
                  const std::vector<int64_t>& versions, uint32_t flags,
                  int first, int last, const int64_t* step_size,
                  const std::shared_ptr<void>& keep_alive);

  // Leader-first: keeps the lead range's ack in `handle` (DataLoss when it
  // lacks the step size), and sends ranges [first, last) tagged with its
  // step (nothing when the lead dropped the gradient).
  Status TakeLeadAck(PushHandle& handle, Message ack);
  void SendTagged(PushHandle& handle, const float* grads, uint32_t flags,
                  int first, int last);

  const KeyLayout layout_;
  const std::vector<NodeId> servers_;  // per range
  const bool leader_first_;
  const int lead_;  // the lead range (leader-first)
  Compression compression_ = Compression::kNone;
  std::vector<ErrorFeedback> feedback_;  // int8: one per range
  // Compressed pulls: per range, this client's copy of the parameters as
  // decoded, and its sequence number at the server (protocol.h).
  struct PullMirror {
    int64_t seq = 0;
    std::vector<float> values;
    std::vector<float> decoded;
  };
  bool compress_pulls_ = false;
  std::vector<PullMirror> mirrors_;
  friend class PushHandle;
  friend class PullHandle;
  // Range `s`'s parameters from `reply` (its payloads from `first` on) into
  // `dest` (layout.total() floats); the bytes they took on the wire.
  // DataLoss naming the server when the reply does not fit the protocol.
  Result<uint64_t> TakeParameters(size_t s, const Message& reply, size_t first,
                                  float* dest);
};

}  // namespace strata

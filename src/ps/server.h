#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "ps/key_range.h"
#include "ps/server_report.h"
#include "ps/shard.h"
#include "transport/rpc.h"

namespace strata {

struct ServerOptions {
  KeyRange range;
  OptimizerOptions optimizer;
  LrSchedule schedule;
  UpdatePolicy policy;
};

// A parameter server: owns one key range of the flat parameter vector and
// serves pushes and pulls for it over a transport (protocol.h). The range
// holds no parameters until worker 0 pushes the initial model (kPushInit);
// pulls wait until then. In sync mode the ack of a push is sent when the
// step that used it closes, so a worker's push completes exactly when the
// next version exists. Pulls asking for a version not reached yet wait on
// the server (no polling).
// Thread-safe. Start() spawns the receive thread, Stop() joins it. Several
// servers in one process share nothing (each has its own shard and lock).
// A range's state as a checkpoint keeps it (the two payloads of the reply
// to kCheckpointRequest, protocol.h): `extra_json` (an object, may be
// empty) adds keys to the JSON header. Decode: DataLoss naming `what` when
// the parts do not fit; `meta` is the JSON header as text.
Result<std::vector<Buffer>> EncodeServerState(
    const KeyRange& range, const ShardState& state,
    const std::string& extra_json = "");
struct DecodedServerState {
  KeyRange range;
  ShardState state;
  std::string meta;
};
Result<DecodedServerState> DecodeServerState(const std::vector<Buffer>& state,
                                             const std::string& what);

class ParameterServer {
 public:
  // `other` receives every message that is not a push, pull or stats
  // request (e.g. the coordinator's shutdown), on the receive thread.
  ParameterServer(ServerOptions options, std::unique_ptr<Transport> transport,
                  std::function<void(Message)> other = nullptr);
  // A server on an endpoint it does not own (a cluster node's, which routes
  // kPush, kPullRequest and kStatsRequest to Handle()). Start() and Stop()
  // then leave the endpoint alone; the endpoint must outlive the server and
  // stop delivering before the server goes away.
  ParameterServer(ServerOptions options, RpcEndpoint& rpc);
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  void Start();
  void Stop();
  NodeId node_id() const { return rpc_->node_id(); }
  Transport& transport() { return rpc_->transport(); }
  RpcEndpoint& rpc() { return *rpc_; }
  // Serves one push, pull or statistics request (on the endpoint's thread).
  void Handle(Message msg);
  // Sets the range and the learning-rate schedule when they are learnt
  // only after Start() (from the coordinator's cluster map). Before the
  // first push arrives; thread-safe.
  void Configure(KeyRange range, LrSchedule schedule) EXCLUDES(shard_mu_);
  // Checkpoints: the server's state as the reply to kCheckpointRequest
  // describes it (two payloads), and back. RestoreState creates the range
  // from the state (before any push; the initial model worker 0 would push
  // is then not needed and is ignored). DataLoss naming what does not fit.
  Result<std::vector<Buffer>> SaveState() const;
  Status RestoreState(const std::vector<Buffer>& state);
  // The same as a ShardState (ServerGroup merges its ranges' states).
  Result<ShardState> SaveShardState() const EXCLUDES(shard_mu_);
  Status RestoreShardState(ShardState state) EXCLUDES(shard_mu_);
  KeyRange range() const EXCLUDES(shard_mu_) { return Range(); }
  // Sync k-of-n: this range follows a lead range's steps (and so counts no
  // dropped or deferred gradients of its own).
  bool follower() const EXCLUDES(shard_mu_);
  // The range's version (0 before initialisation).
  int64_t version() const EXCLUDES(shard_mu_);
  // Statistics so far (zeros before initialisation).
  ShardStats stats() const EXCLUDES(shard_mu_);
  // The statistics as a report, and as its JSON text (the payload of
  // kStatsReply).
  ServerReport Report() const;
  std::string StatsJson() const { return Report().ToJson().dump(); }

 private:
  // The trailing payloads of a push (protocol.h), taken off by TakeTrailer.
  struct PushTrailer {
    int64_t pull_seq = 0;     // a compressed push-pull's mirror sequence
    int64_t tagged_size = 0;  // a tagged push's step size
  };

  void HandlePush(Message msg) EXCLUDES(shard_mu_);
  // kPushDone / kPushRejoin: a worker leaving or back; acked at once.
  void HandleLeaveOrRejoin(Message msg) EXCLUDES(shard_mu_);
  // Checks the payload count of a tagged push or a compressed push-pull and
  // takes the trailing payloads off; false (the error replied) if wrong.
  bool TakeTrailer(Message& msg, PushTrailer* trailer);
  // Checks the push's keys and size against range `r` and decodes a
  // compressed gradient in place; false (the error replied) if wrong.
  bool DecodeGradient(Message& msg, const KeyRange& r);
  // Records the push's request id; true when it is a second copy of one of
  // the sender's last 16 pushes (to be dropped).
  bool SeenBefore(const Message& msg);
  // kPushInit: creates the range from worker 0's model (or overwrites it).
  void HandleInitPush(Message msg, const KeyRange& r) EXCLUDES(shard_mu_);
  // Follower: a tagged push, acked once its step closed.
  void HandleTaggedPush(Message msg, ParameterShard& shard,
                        const PushTrailer& trailer) EXCLUDES(shard_mu_);
  // A gradient: acked now, or (sync, pending) when its step closes.
  void HandleGradientPush(Message msg, ParameterShard& shard, int64_t pull_seq)
      EXCLUDES(shard_mu_);
  void HandlePull(Message msg) EXCLUDES(shard_mu_);
  // Answers the pulls and acks that the shard's current version satisfies.
  void Flush(ParameterShard& shard) EXCLUDES(shard_mu_);
  void ReplyPull(ParameterShard& shard, const Message& request)
      EXCLUDES(shard_mu_);
  // The parameters a reply carries (payloads appended to `reply`): the
  // shared snapshot, or with kPullDelta in the request's flags the
  // difference to the sender's mirror (protocol.h). `seq` is the request's
  // mirror sequence number.
  void AppendParameters(const Message& request, int64_t seq,
                        std::shared_ptr<const std::vector<float>> snapshot,
                        Message& reply);
  KeyRange Range() const EXCLUDES(shard_mu_);
  // The shard, or null before initialisation. The pointer is read under
  // shard_mu_; the shard itself (which has a lock of its own) is used
  // without it: only RestoreShardState, before any push, replaces it.
  ParameterShard* CurrentShard() const EXCLUDES(shard_mu_);

  mutable Mutex shard_mu_;
  // The range, the schedule and the policy; range and schedule may be set
  // once more by Configure() before the first push.
  ServerOptions options_ GUARDED_BY(shard_mu_);
  const std::function<void(Message)> other_;
  std::unique_ptr<RpcEndpoint> owned_rpc_;  // null on a node's endpoint
  RpcEndpoint* const rpc_;
  // Null until the initial model or a checkpoint creates it.
  std::unique_ptr<ParameterShard> shard_ GUARDED_BY(shard_mu_);
  // The rest is touched only by the receive thread.
  std::vector<Message> waiting_pulls_;
  std::vector<Message> waiting_acks_;
  // Follower: tagged pushes whose step has not closed, by step.
  std::multimap<int64_t, Message> waiting_tagged_;
  std::set<NodeId> left_workers_;
  // The range came from a checkpoint: worker 0's initial model is ignored.
  std::atomic<bool> restored_{false};
  // Restarted servers get pushes twice (a worker's resend, and ZeroMQ's
  // own delivery of what it queued while the server was away): the last
  // push request ids of each worker, to drop the second copy.
  std::map<NodeId, std::vector<uint64_t>> recent_pushes_;
  // After a restore: how far past the restored version the workers had
  // already seen this range (a lower bound on the updates lost).
  std::atomic<int64_t> lost_updates_{0};
  // Compressed pulls: each worker's copy of this range, as it decoded it.
  struct Mirror {
    int64_t seq = 0;
    std::vector<float> values;
  };
  std::map<NodeId, Mirror> mirrors_;
  int64_t next_mirror_seq_ = 0;
  std::vector<float> delta_;    // scratch for a delta being encoded
  std::vector<float> decoded_;  // scratch for a compressed push, decoded
};

}  // namespace strata

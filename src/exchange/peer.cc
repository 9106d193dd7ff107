// The decentralized strategies: collective (allreduce, ring, local-sgd over
// Gloo), neighbour averaging (dpsgd) and gossip (GoSGD).
// docs/design/decentralized.md gives the algorithm of each, from papers 002 and
// 003.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "collective/collective.h"
#include "collective/inproc.h"
#include "collective/shaped.h"
#include "collective/store.h"
#include "common/log.h"
#include "common/timeline.h"
#include "exchange/exchange.h"
#include "exchange/outbox.h"
#include "run/plan.h"
#include "transport/zmq/transport.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The host a node's Gloo device listens on: the host of its own endpoint
// (tcp://host:port or ucx://host:port), or loopback for the in-process
// transport.
std::string HostOf(std::string endpoint) {
  if (endpoint.rfind("ucx://", 0) == 0) endpoint.replace(0, 3, "tcp");
  std::string host, port;
  if (!SplitTcpEndpoint(endpoint, &host, &port) || IsWildcardHost(host))
    return "127.0.0.1";
  return host;
}

// A lost peer surfaces as a Gloo timeout or I/O error; the coordinator's
// verdict (which node was lost) is the better message, when it comes in time.
Status NamePeerLoss(ClusterMember& member, Status failed,
                    std::chrono::milliseconds heartbeat_timeout) {
  const auto until = Clock::now() + heartbeat_timeout * 2;
  while (Clock::now() < until && !member.shutdown_requested()) {
    member.WaitForShutdown(std::chrono::milliseconds(50));
  }
  if (!member.shutdown_reason().empty())
    return Status::Unavailable("{} ({})", member.shutdown_reason(),
                               failed.message());
  return failed;
}

Result<std::unique_ptr<Collective>> ConnectGroup(const ExchangeEnv& env) {
  const ClusterRunOptions& o = *env.options;
  CoordinatorStore store(*env.rpc, o.roles.CoordinatorId(), o.request_timeout);
  CollectiveOptions co;
  co.rank = env.index;
  co.size = o.roles.num_workers();
  co.hostname = HostOf(env.rpc->transport().endpoint());
  co.timeout =
      std::max(o.heartbeat_timeout * 2, std::chrono::milliseconds(2000));
  co.prefix = "workers";
  std::unique_ptr<Collective> group;
  if (env.collectives != nullptr && !o.gloo_always) {
    ASSIGN_OR_RETURN(group, env.collectives->Join(co));
  } else {
    ASSIGN_OR_RETURN(group, Collective::Connect(co, store));
  }
  if (!o.links) return group;
  // Emulated links (collective/shaped.h): rank r sends to rank r+1.
  std::vector<LinkSpec> ring;
  for (int r = 0; r < co.size; ++r) {
    ring.push_back(
        o.links(o.roles.WorkerId(r), o.roles.WorkerId((r + 1) % co.size)));
  }
  return NewShapedCollective(std::move(group), std::move(ring));
}

// allreduce, ring and local-sgd: synchronous, every worker in every round.
class CollectiveExchange final : public Exchange {
 public:
  explicit CollectiveExchange(const ExchangeEnv& env)
      : env_(env), o_(*env.options), m_(*env.metrics) {}

  Result<ExchangeState> SaveState() override {
    return ExchangeState::Of(*optimizer_);
  }
  Status RestoreState(const ExchangeState& state) override {
    restored_ = std::make_unique<ExchangeState>(state);
    return Status::Ok();
  }

  Status Start() override {
    ASSIGN_OR_RETURN(group_, ConnectGroup(env_));
    m_.collective = group_->backend();
    const int n = group_->size();
    counts_ = BalancedCounts(env_.model.size, n);
    offset_ = 0;
    for (int r = 0; r < env_.index; ++r) offset_ += counts_[r];
    if (o_.mode == RunMode::kRing) {
      // Paper 003: each node holds the optimizer state of its slice only.
      optimizer_ = MakeOptimizer(env_.optimizer, counts_[env_.index]);
    } else {
      optimizer_ = MakeOptimizer(env_.optimizer, env_.model.size);
    }
    // Through memory there is no transfer to hide behind the backward
    // pass, and a reducer thread per worker only competes for the cores:
    // one all-reduce after the backward pass.
    const bool overlap =
        o_.bucket_overlap && std::string(group_->backend()) != "memory";
    if (o_.mode == RunMode::kAllReduce && overlap) reducer_ = MakeReducer();
    if (restored_) {
      // Resumed: each worker's own model and optimizer state.
      if (restored_->has_optimizer)
        RETURN_IF_ERROR(optimizer_->RestoreState(restored_->optimizer));
      restored_.reset();
      return Status::Ok();
    }
    if (env_.broadcast_initial) {
      // Worker 0's model everywhere: the others contribute zeros to a sum.
      MutexLock lock(env_.params_mu);
      if (env_.index != 0)
        std::fill(env_.model.params, env_.model.params + env_.model.size, 0.f);
      RETURN_IF_ERROR(
          Run(group_->AllReduceSum(env_.model.params,
                                   static_cast<size_t>(env_.model.size)),
              "broadcasting the initial model", 0));
    }
    return Status::Ok();
  }

  Status BeforeStep(int64_t) override {
    if (reducer_) reducer_->BeginStep();
    return Status::Ok();
  }

  GradientSink* gradient_sink() override { return reducer_.get(); }

  // Every kStopEvery steps the members all-reduce their stop requests and
  // all stop at that step if any was asked to (a one-float all-reduce: a
  // stop takes effect within kStopEvery steps, at a small fraction of a
  // step's cost).
  Result<bool> AgreeToStop(int64_t it, bool requested) override {
    constexpr int64_t kStopEvery = 8;
    if (it % kStopEvery != 0) return false;
    float flag = requested ? 1.0f : 0.0f;
    RETURN_IF_ERROR(Collect([&] { return group_->AllReduceSum(&flag, 1); },
                            "agreeing on a stop", it));
    return flag > 0.0f;
  }

  // Buckets of cluster.bucket_mb, all-reduced from the reducer's thread as
  // the backward pass fills them. With a device's buffers (grads_ready set:
  // a GPU, or emulated) in place in the model's gradient host mirror: the
  // autograd hook only marks each gradient final, and the reducer's thread
  // brings a bucket over from the device (grads_ready) before reducing it.
  // The backward pass's thread (the worker's own, or with
  // train.gpu_backward = autograd_thread autograd's one thread per GPU,
  // which every worker of a process shares) never copies or waits for a
  // copy.
  std::unique_ptr<BucketReducer> MakeReducer() {
    if (!env_.grads_ready) {
      return std::make_unique<BucketReducer>(
          env_.model.size, o_.bucket_floats, [this](float* data, size_t n) {
            return group_->AllReduceMean(data, n);
          });
    }
    float* grads = env_.model.grads;
    return std::make_unique<BucketReducer>(
        EvenBucketBounds(env_.model.size, o_.bucket_floats),
        [this, grads](float* data, size_t n) {
          env_.grads_ready(data - grads, static_cast<int64_t>(n));
          return group_->AllReduceMean(data, n);
        },
        grads, env_.model.owner);
  }

  Status AfterStep(int64_t it) override {
    const int64_t size = env_.model.size;
    const float inv_n = 1.0f / static_cast<float>(group_->size());
    const double lr = env_.schedule.Rate(it);
    float* g = env_.model.grads;
    float* w = env_.model.params;
    const uint64_t bytes = sizeof(float) * static_cast<uint64_t>(size);
    const double ring_share =
        2.0 * (group_->size() - 1) / std::max(1, group_->size());
    switch (o_.mode) {
      case RunMode::kAllReduce: {
        if (reducer_) {
          // The buckets were reduced during the backward pass; wait for the
          // last ones.
          const auto waited = Clock::now();
          RETURN_IF_ERROR(Run(reducer_->FinishStep(o_.request_timeout),
                              "all-reduce of the gradients", it));
          m_.wait_s += Since(waited);
          MutexLock lock(env_.params_mu);
          optimizer_->Step(w, reducer_->data(), lr);
          Count(bytes, ring_share);
          return Status::Ok();
        }
        // Bucketed: each bucket is one all-reduce to the mean
        // (docs/design/decentralized.md).
        const int64_t bucket = o_.bucket_floats > 0 ? o_.bucket_floats : size;
        for (int64_t b = 0; b < size; b += bucket) {
          const size_t count = static_cast<size_t>(std::min(bucket, size - b));
          RETURN_IF_ERROR(
              Collect([&] { return group_->AllReduceMean(g + b, count); },
                      "all-reduce of the gradients", it));
        }
        MutexLock lock(env_.params_mu);
        optimizer_->Step(w, g, lr);
        Count(bytes, ring_share);
        return Status::Ok();
      }
      case RunMode::kRing: {
        const int64_t mine = counts_[env_.index];
        RETURN_IF_ERROR(
            Collect([&] { return group_->ReduceScatterSum(g, counts_); },
                    "reduce-scatter of the gradients", it));
        for (int64_t i = 0; i < mine; ++i) g[offset_ + i] *= inv_n;
        MutexLock lock(env_.params_mu);
        optimizer_->Step(w + offset_, g + offset_, lr);
        RETURN_IF_ERROR(Collect([&] { return group_->AllGather(w, counts_); },
                                "all-gather of the parameters", it));
        Count(bytes, ring_share);
        return Status::Ok();
      }
      case RunMode::kLocalSgd: {
        MutexLock lock(env_.params_mu);
        optimizer_->Step(w, g, lr);
        if ((it + 1) % o_.average_every != 0) return Status::Ok();
        RETURN_IF_ERROR(Collect(
            [&] { return group_->AllReduceMean(w, static_cast<size_t>(size)); },
            "model averaging", it));
        Count(bytes, ring_share);
        return Status::Ok();
      }
      default:
        return Status::Internal("collective exchange for mode {}",
                                RunModeName(o_.mode));
    }
  }

  Status Finish(int64_t) override { return Status::Ok(); }

 private:
  // Runs one collective call, counting its time as time waiting for peers
  // (a collective returns when its slowest member has contributed).
  template <typename F>
  Status Collect(F&& call, const char* what, int64_t it) {
    timeline::Span span(what, "collective", it);
    const auto t0 = Clock::now();
    Status st = call();
    m_.wait_s += Since(t0);
    return Run(std::move(st), what, it);
  }
  Status Run(Status st, const char* what, int64_t it) {
    if (st.ok()) return st;
    return NamePeerLoss(*env_.member, std::move(st), o_.heartbeat_timeout)
        .WithContext(
            fmt::format("worker {} {} at step {}", env_.index, what, it));
  }
  void Count(uint64_t bytes, double share) {
    // What a ring algorithm moves per member: 2 (n-1)/n of the buffer each
    // way (Gloo's algorithms move about as much).
    const auto moved =
        static_cast<uint64_t>(static_cast<double>(bytes) * share / 2);
    m_.bytes_pushed += moved;
    m_.bytes_pulled += moved;
    ++m_.exchanges;
  }

  const ExchangeEnv env_;
  const ClusterRunOptions& o_;
  WorkerMetrics& m_;
  std::unique_ptr<Collective> group_;
  // allreduce with cluster.bucket_overlap: reduces buckets during backward.
  // Declared after group_: destroyed (its thread joined) before the group.
  std::unique_ptr<BucketReducer> reducer_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<int64_t> counts_;
  int64_t offset_ = 0;
  std::unique_ptr<ExchangeState> restored_;  // RestoreState, until Start()
};

// Sends this worker's parameters (copied: the caller goes on changing them).
Status SendModel(RpcEndpoint& rpc, NodeId to, MessageType type, int64_t clock,
                 const float* params, int64_t size, const float* weight,
                 uint64_t* bytes) {
  Message m;
  m.header.type = type;
  m.header.clock = clock;
  m.payloads.push_back(Buffer::CopyOf(params, sizeof(float) * size));
  if (weight != nullptr)
    m.payloads.push_back(Buffer::CopyOf(weight, sizeof(float)));
  *bytes += sizeof(float) * static_cast<uint64_t>(size);
  return rpc.Send(to, std::move(m));
}

// D-PSGD (Lian et al., paper 002): every step, x_i <- sum_j W_ij x_j - lr g_i
// with W the uniform mixing matrix of the topology (1 / (degree + 1) for
// the node and each neighbour); the gradient was computed on x_i.
class NeighbourExchange final : public Exchange {
 public:
  explicit NeighbourExchange(const ExchangeEnv& env)
      : env_(env),
        o_(*env.options),
        m_(*env.metrics),
        optimizer_(MakeOptimizer(env.optimizer, env.model.size)),
        sum_(static_cast<size_t>(env.model.size)) {
    for (int peer : Neighbours(o_.topology, env.index, o_.roles.num_workers()))
      neighbours_.push_back(o_.roles.WorkerId(peer));
  }

  Status Start() override { return Status::Ok(); }
  Status BeforeStep(int64_t) override { return Status::Ok(); }
  // A checkpoint: the optimizer's state (the model is the worker's). The
  // rounds meet in lockstep after a step's exchange, when no model is on
  // the way: a neighbour's next one is sent only after the round.
  Result<ExchangeState> SaveState() override {
    return ExchangeState::Of(*optimizer_);
  }
  Status RestoreState(const ExchangeState& state) override {
    if (!state.has_optimizer) return Status::Ok();
    return optimizer_->RestoreState(state.optimizer);
  }

  Status AfterStep(int64_t it) override {
    const int64_t size = env_.model.size;
    for (NodeId peer : neighbours_) {
      Status sent =
          SendModel(*env_.rpc, peer, MessageType::kPeerModel, it,
                    env_.model.params, size, nullptr, &m_.bytes_pushed);
      if (!sent.ok()) {
        return sent.WithContext(
            fmt::format("worker {} sending its model to {} at step {}",
                        env_.index, o_.roles.Describe(peer), it));
      }
    }
    std::copy(env_.model.params, env_.model.params + size, sum_.begin());
    const auto waited = Clock::now();
    for (NodeId peer : neighbours_) {
      auto got = TakeModel(peer, it);
      if (!got.ok()) {
        Status st =
            env_.member->shutdown_reason().empty()
                ? got.status()
                : Status::Unavailable("{}", env_.member->shutdown_reason());
        return st.WithContext(
            fmt::format("worker {} waiting for the model of {} at step {}",
                        env_.index, o_.roles.Describe(peer), it));
      }
      const Buffer& b = got->payloads.at(0);
      if (static_cast<int64_t>(b.size()) != size * 4) {
        return Status::DataLoss("model of {} has {} bytes, expected {}",
                                o_.roles.Describe(peer), b.size(), size * 4);
      }
      const float* x = b.floats();
      for (int64_t i = 0; i < size; ++i) sum_[i] += x[i];
      m_.bytes_pulled += b.size();
    }
    m_.wait_s += Since(waited);
    const float inv = 1.0f / static_cast<float>(neighbours_.size() + 1);
    MutexLock lock(env_.params_mu);
    for (int64_t i = 0; i < size; ++i) env_.model.params[i] = sum_[i] * inv;
    optimizer_->Step(env_.model.params, env_.model.grads,
                     env_.schedule.Rate(it));
    ++m_.exchanges;
    return Status::Ok();
  }

  Status Finish(int64_t) override { return Status::Ok(); }

 private:
  // A neighbour's model of step `it`. Bounded by the request timeout; once
  // the run is being stopped without an error (Ctrl-C), a neighbour that
  // already stopped never sends it: give up after a short grace.
  Result<Message> TakeModel(NodeId peer, int64_t it) {
    using std::chrono::milliseconds;
    const auto deadline = Clock::now() + o_.request_timeout;
    Clock::time_point stop_seen{};
    while (true) {
      auto got = env_.mailbox->Take(MessageType::kPeerModel, peer, it,
                                    milliseconds(100));
      if (got.ok() || got.status().code() != Status::Code::kDeadlineExceeded)
        return got;
      const auto now = Clock::now();
      if (env_.member->shutdown_requested() ||
          env_.member->training_stop_requested()) {
        if (stop_seen == Clock::time_point{}) stop_seen = now;
        if (now - stop_seen > milliseconds(1000)) {
          return Status::Cancelled("the run is stopping and {} sent nothing",
                                   o_.roles.Describe(peer));
        }
      }
      if (now > deadline) {
        return Status::DeadlineExceeded(
            "no model of step {} from {} within {} ms", it,
            o_.roles.Describe(peer), o_.request_timeout.count());
      }
    }
  }

  const ExchangeEnv env_;
  const ClusterRunOptions& o_;
  WorkerMetrics& m_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<NodeId> neighbours_;
  std::vector<float> sum_;
};

// GoSGD (Blot et al., paper 002): every worker i holds a weight a_i (1/n at
// the start). After a step, with probability p, it halves a_i and sends
// (x_i, a_i) to a random peer j, which merges x_j <- (a_j x_j + a_i x_i) /
// (a_j + a_i), a_j <- a_j + a_i before its next step. The weights always sum
// to 1: at the end every worker tells every peer it is done, and merges what
// came before the peers' "done" (per-pair delivery is in order).
class GossipExchange final : public Exchange {
 public:
  explicit GossipExchange(const ExchangeEnv& env)
      : env_(env),
        o_(*env.options),
        m_(*env.metrics),
        optimizer_(MakeOptimizer(env.optimizer, env.model.size)),
        rng_(o_.seed * 104729 + static_cast<uint64_t>(env.index)),
        weight_(1.0f / static_cast<float>(o_.roles.num_workers())),
        outbox_(env, MessageType::kGossipModel, o_.checkpoints()) {}

  // A resumed worker first sends again what its peers had not merged.
  Status Start() override { return outbox_.Resend(); }

  Status BeforeStep(int64_t) override {
    Merge(outbox_.Receive());
    return Status::Ok();
  }

  // A checkpoint: the optimizer, the weight, and the models sent that no
  // peer merged yet (exchange/outbox.h); the model is the worker's.
  Result<ExchangeState> SaveState() override {
    ExchangeState s = ExchangeState::Of(*optimizer_);
    s.buffers["gossip_weight"] = {weight_};
    outbox_.Save(s);
    return s;
  }
  Status RestoreState(const ExchangeState& state) override {
    if (state.has_optimizer)
      RETURN_IF_ERROR(optimizer_->RestoreState(state.optimizer));
    // Absent after a resize: every worker starts again at 1/n.
    auto w = state.buffers.find("gossip_weight");
    if (w != state.buffers.end() && w->second.size() == 1)
      weight_ = w->second[0];
    return outbox_.Restore(state);
  }

  Status AfterStep(int64_t it) override {
    {
      MutexLock lock(env_.params_mu);
      optimizer_->Step(env_.model.params, env_.model.grads,
                       env_.schedule.Rate(it));
    }
    const int n = o_.roles.num_workers();
    if (n < 2 ||
        std::uniform_real_distribution<double>(0, 1)(rng_) >= o_.gossip_p)
      return Status::Ok();
    int peer = static_cast<int>(rng_() % static_cast<uint64_t>(n - 1));
    if (peer >= env_.index) ++peer;
    weight_ *= 0.5f;
    Status sent =
        outbox_.Send(peer, it, env_.model.params, env_.model.size, &weight_);
    if (!sent.ok()) {
      // The peer is gone: keep the weight (gossip goes on without it).
      weight_ *= 2.0f;
      LogWarning("worker {}: gossip to worker {} failed: {}", env_.index, peer,
                 sent.message());
      return Status::Ok();
    }
    ++m_.exchanges;
    return Status::Ok();
  }

  Status Finish(int64_t steps) override {
    const int n = o_.roles.num_workers();
    std::vector<NodeId> peers;
    for (int w = 0; w < n; ++w) {
      if (w == env_.index) continue;
      Message done;
      done.header.type = MessageType::kGossipDone;
      if (env_.rpc->Send(o_.roles.WorkerId(w), std::move(done)).ok())
        peers.push_back(o_.roles.WorkerId(w));
    }
    // Merge what the peers sent before their "done". A lost peer never says
    // it: wait for it no longer than the heartbeat timeout allows.
    const auto waited = Clock::now();
    for (NodeId peer : peers) {
      auto got = env_.mailbox->Take(MessageType::kGossipDone, peer, 0,
                                    o_.heartbeat_timeout * 2);
      if (!got.ok()) {
        LogWarning(
            "worker {}: no end of gossip from {} ({}); its last pushes "
            "may be missing",
            env_.index, o_.roles.Describe(peer), got.status().message());
      }
    }
    m_.wait_s += Since(waited);
    Merge(outbox_.Receive());
    m_.gossip_weight = weight_;
    static_cast<void>(steps);
    return Status::Ok();
  }

 private:
  void Merge(std::vector<Message> pushes) {
    for (const Message& msg : pushes) {
      if (msg.payloads.size() < 2 ||
          static_cast<int64_t>(msg.payloads[0].size()) != env_.model.size * 4 ||
          msg.payloads[1].size() != sizeof(float)) {
        LogWarning("worker {}: malformed gossip from node {} ignored",
                   env_.index, msg.header.sender);
        continue;
      }
      float a;
      std::memcpy(&a, msg.payloads[1].data(), sizeof(float));
      const float* x = msg.payloads[0].floats();
      const float total = weight_ + a;
      const float keep = weight_ / total, take = a / total;
      MutexLock lock(env_.params_mu);
      float* w = env_.model.params;
      for (int64_t i = 0; i < env_.model.size; ++i)
        w[i] = keep * w[i] + take * x[i];
      weight_ = total;
      m_.bytes_pulled += msg.payloads[0].size();
    }
  }

  const ExchangeEnv env_;
  const ClusterRunOptions& o_;
  WorkerMetrics& m_;
  std::unique_ptr<Optimizer> optimizer_;
  std::mt19937_64 rng_;
  float weight_;
  PeerOutbox outbox_;
};

// TreeEASGD (paper 002): workers form a tree (worker 0 the root, fanout
// children each). Every tau_up steps a worker sends its model to its
// parent, every tau_down steps to its children; a model w received from
// either side pulls the receiver elastically, w_i <- w_i + alpha (w - w_i),
// before its next step. Asynchronous: nobody waits for anybody.
class TreeExchange final : public Exchange {
 public:
  explicit TreeExchange(const ExchangeEnv& env)
      : env_(env),
        o_(*env.options),
        m_(*env.metrics),
        optimizer_(MakeOptimizer(env.optimizer, env.model.size)),
        parent_(TreeParent(env.index, o_.tree_fanout)),
        children_(
            TreeChildren(env.index, o_.tree_fanout, o_.roles.num_workers())),
        outbox_(env, MessageType::kTreeModel, o_.checkpoints()) {}

  // A resumed worker first sends again what its peers had not merged.
  Status Start() override { return outbox_.Resend(); }

  // A checkpoint: the optimizer and the models sent that no peer merged
  // yet (exchange/outbox.h); the model is the worker's.
  Result<ExchangeState> SaveState() override {
    ExchangeState s = ExchangeState::Of(*optimizer_);
    outbox_.Save(s);
    return s;
  }
  Status RestoreState(const ExchangeState& state) override {
    if (state.has_optimizer)
      RETURN_IF_ERROR(optimizer_->RestoreState(state.optimizer));
    return outbox_.Restore(state);
  }

  Status BeforeStep(int64_t) override {
    const float alpha = static_cast<float>(o_.elastic_alpha);
    for (const Message& msg : outbox_.Receive()) {
      if (msg.payloads.empty() ||
          static_cast<int64_t>(msg.payloads[0].size()) !=
              env_.model.size * static_cast<int64_t>(sizeof(float))) {
        LogWarning("worker {}: malformed tree model from node {} ignored",
                   env_.index, msg.header.sender);
        continue;
      }
      const float* x = msg.payloads[0].floats();
      MutexLock lock(env_.params_mu);
      float* w = env_.model.params;
      for (int64_t i = 0; i < env_.model.size; ++i)
        w[i] += alpha * (x[i] - w[i]);
      m_.bytes_pulled += msg.payloads[0].size();
    }
    return Status::Ok();
  }

  Status AfterStep(int64_t it) override {
    {
      MutexLock lock(env_.params_mu);
      optimizer_->Step(env_.model.params, env_.model.grads,
                       env_.schedule.Rate(it));
    }
    if (parent_ >= 0 && (it + 1) % o_.tau_up == 0) Send(parent_, it);
    if ((it + 1) % o_.tau_down == 0) {
      for (int child : children_) Send(child, it);
    }
    return Status::Ok();
  }

  Status Finish(int64_t) override { return Status::Ok(); }

 private:
  void Send(int worker, int64_t it) {
    Status sent =
        outbox_.Send(worker, it, env_.model.params, env_.model.size, nullptr);
    if (!sent.ok()) {
      // A lost neighbour: the tree goes on without it, as gossip does.
      LogWarning("worker {}: model to worker {} not sent: {}", env_.index,
                 worker, sent.message());
      return;
    }
    ++m_.exchanges;
  }

  const ExchangeEnv env_;
  const ClusterRunOptions& o_;
  WorkerMetrics& m_;
  std::unique_ptr<Optimizer> optimizer_;
  const int parent_;
  const std::vector<int> children_;
  PeerOutbox outbox_;
};

}  // namespace

int TreeParent(int index, int fanout) {
  return index == 0 ? -1 : (index - 1) / std::max(1, fanout);
}

std::vector<int> TreeChildren(int index, int fanout, int n) {
  std::vector<int> out;
  for (int c = 1; c <= fanout; ++c) {
    const int64_t child = int64_t{index} * fanout + c;
    if (child < n) out.push_back(static_cast<int>(child));
  }
  return out;
}

std::unique_ptr<Exchange> MakeTreeExchange(const ExchangeEnv& env) {
  return std::make_unique<TreeExchange>(env);
}

std::vector<int> Neighbours(Topology topology, int index, int n) {
  std::set<int> out;
  if (n < 2) return {};
  if (topology == Topology::kRing) {
    out.insert((index + 1) % n);
    out.insert((index + n - 1) % n);
  } else {
    // A rows x cols grid with wrap-around, rows the largest divisor of n
    // not above sqrt(n).
    int rows = 1;
    for (int r = 1; r * r <= n; ++r)
      if (n % r == 0) rows = r;
    const int cols = n / rows;
    const int r = index / cols, c = index % cols;
    out.insert(((r + 1) % rows) * cols + c);
    out.insert(((r + rows - 1) % rows) * cols + c);
    out.insert(r * cols + (c + 1) % cols);
    out.insert(r * cols + (c + cols - 1) % cols);
  }
  out.erase(index);
  return std::vector<int>(out.begin(), out.end());
}

std::unique_ptr<Exchange> MakeCollectiveExchange(const ExchangeEnv& env) {
  return std::make_unique<CollectiveExchange>(env);
}
std::unique_ptr<Exchange> MakeNeighbourExchange(const ExchangeEnv& env) {
  return std::make_unique<NeighbourExchange>(env);
}
std::unique_ptr<Exchange> MakeGossipExchange(const ExchangeEnv& env) {
  return std::make_unique<GossipExchange>(env);
}

}  // namespace strata

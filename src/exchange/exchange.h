#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cluster/mailbox.h"
#include "cluster/member.h"
#include "common/mutex.h"
#include "common/status.h"
#include "exchange/bucket_reducer.h"
#include "ps/key_range.h"
#include "ps/optimizer.h"
#include "ps/schedule.h"
#include "run/options.h"
#include "run/worker_metrics.h"

namespace strata {

class CollectiveHub;

// A worker's model as the exchange sees it: the flat parameter and gradient
// buffers (LibTorch's tensors are views of them; no LibTorch here).
struct ModelBuffers {
  float* params = nullptr;
  float* grads = nullptr;
  int64_t size = 0;
  // Owns `grads` (and `params`): zero-copy sends keep it until the
  // transport is done with the bytes.
  std::shared_ptr<void> owner;
};

// What an exchange strategy may use. Every pointer outlives the strategy.
struct ExchangeEnv {
  const ClusterRunOptions* options = nullptr;
  int index = 0;  // the worker's index
  ModelBuffers model;
  RpcEndpoint* rpc = nullptr;
  ClusterMember* member = nullptr;
  const KeyLayout* layout = nullptr;  // the servers' key ranges (PS modes)
  // The local update of the decentralized modes (the servers apply it in
  // the PS modes).
  OptimizerOptions optimizer;
  LrSchedule schedule;
  WorkerMetrics* metrics = nullptr;
  // Held while the strategy writes model.params, so that a snapshot taken
  // by another thread (the evaluator's model request) is never torn.
  Mutex* params_mu = nullptr;
  // Peer messages (neighbour models, gossip pushes) the node received.
  Mailbox* mailbox = nullptr;
  // Where the workers, threads of one process, form their collective
  // group through memory (RoleContext::collectives); null: Gloo over TCP.
  CollectiveHub* collectives = nullptr;
  // GPU workers (train.device): a strategy whose gradient sink works in
  // place (GradientSink::in_place) calls this before reading the gradient
  // floats [offset, offset + count) of model.grads: it brings them over
  // from the device (or waits for a copy already started) and returns once
  // they have landed. Null on the CPU (set where its
  // buffers are emulated, train.emulate_gpu_buffers). Other sinks get each
  // gradient on the host, and AfterStep() finds all of them there.
  std::function<void(int64_t offset, int64_t count)> grads_ready;
  // The worker's forward pass asks for the parameters layer by layer
  // (cluster.layer_wait, a model that awaits_layers(); on a GPU each
  // layer's parameters are uploaded as they are let through): a
  // strategy may then leave a pull arriving when BeforeStep() returns and
  // wait for each prefix in AwaitParams().
  bool forward_awaits = false;
  // Decentralized modes: start every worker from worker 0's model (tests of
  // consensus turn it off to start from different models).
  bool broadcast_initial = true;
};

// Peer-to-peer messages of the decentralized modes:
//   kPeerModel    clock = step, payload 0 = the sender's parameters (dpsgd).
//   kGossipModel  clock = step, payload 0 = parameters, payload 1 = the
//                 weight sent along (float32; gossip).
//   kGossipDone   the sender will gossip no more.
//   kModelRequest the evaluator asks a worker for its parameters; the reply
//                 has them in payload 0 (and the worker's step in clock).
//   kTreeModel    clock = step, payload 0 = the sender's parameters
//                 (tree-easgd, up or down the tree).
// With checkpoints, gossip and tree models carry a sequence number per
// (sender, receiver) pair in key_begin, and the receiver acknowledges each
// merged one (kPeerAck, key_begin = the sequence number; exchange/outbox.h).

// The neighbours of worker `index` of `n` in a topology (dpsgd), without
// itself and without duplicates (a ring of 2 has one neighbour).
std::vector<int> Neighbours(Topology topology, int index, int n);

// What a checkpoint keeps of a strategy beyond the model's parameters: the
// local optimizer's state (the decentralized modes and EASGD step on the
// worker; the parameter-server modes keep nothing here).
struct ExchangeState {
  bool has_optimizer = false;
  OptimizerState optimizer;
  // Other named buffers of the strategy (the int8 error-feedback residuals
  // of cluster.compression: "residual/<range>"; gossip's weight and the
  // models it has sent and no peer merged yet).
  std::map<std::string, std::vector<float>> buffers;
  // Named text of the strategy (the sequence numbers of those models).
  std::map<std::string, std::string> text;

  // The state of a strategy whose only state is its local optimizer.
  static ExchangeState Of(const Optimizer& optimizer) {
    ExchangeState s;
    s.has_optimizer = true;
    s.optimizer = optimizer.SaveState();
    return s;
  }
};

// How a worker's step result leaves the worker: one strategy per mode
// family (parameter-server push/pull, elastic averaging, collective
// all-reduce, neighbour averaging, gossip). The worker loop (worker/worker.cc)
// draws a batch, runs forward and backward into model.grads and calls the
// strategy around it; a new mode is a new strategy, not a branch in the
// loop. Not thread-safe: the worker's thread makes every call, in the order
// Start, (BeforeStep, AwaitParams..., AfterStep) per step, Finish. An error
// names the worker, the step and the peer or server involved.
class Exchange {
 public:
  virtual ~Exchange() = default;
  // Before the first step: every worker starts from the same model.
  virtual Status Start() = 0;
  // Before step `it` computes: bring model.params up to date (a pull, a
  // clock wait, merging what peers sent).
  virtual Status BeforeStep(int64_t it) = 0;
  // During step `it`'s forward pass, with env.forward_awaits: returns once
  // model.params [0, end) are in (end < 0: all of them; the forward pass
  // reads the parameters in their order, and the worker asks for all of
  // them before the backward pass). The default has them all in at
  // BeforeStep().
  virtual Status AwaitParams(int64_t end) {
    static_cast<void>(end);
    return Status::Ok();
  }
  // After step `it`'s backward pass: model.grads holds its gradient.
  virtual Status AfterStep(int64_t it) = 0;
  // Before step `it`: whether to stop the run here, given whether this
  // worker was asked to (`requested`). Strategies whose workers move in
  // lockstep (collectives) agree on it so that all stop at the same step;
  // the default stops when asked.
  virtual Result<bool> AgreeToStop(int64_t it, bool requested) {
    return requested;
  }
  // After the last step (`steps` were done): flush what is in flight and
  // leave.
  virtual Status Finish(int64_t steps) = 0;
  // After the last step, before the run's final checkpoint round (where
  // this worker waits for every other one to arrive): stop being waited
  // for. Parameter-server strategies leave the servers here (Finish() then
  // does not leave again), so that a sync k-of-n step that a slower worker
  // waits on closes without this worker's gradients, as it would without
  // checkpoints; before, that worker never arrived. The default does
  // nothing: peers that exchange in lockstep finish together.
  virtual Status Depart(int64_t steps) {
    static_cast<void>(steps);
    return Status::Ok();
  }
  // Around a checkpoint round in the middle of the run
  // (docs/design/checkpoints.md): PauseForRound before this worker arrives
  // (`steps` done), ResumeAfterRound once the round let it go. Sync k-of-n
  // leaves the servers for the round, as Depart does, so that the steps of
  // workers still training towards it close without this one's gradients; it
  // then rejoins and pulls the newest parameters. The default does nothing.
  virtual Status PauseForRound(int64_t steps) {
    static_cast<void>(steps);
    return Status::Ok();
  }
  virtual Status ResumeAfterRound() { return Status::Ok(); }
  // Checkpoints (docs/design/checkpoints.md). Quiesce: complete what is in
  // flight (a push sent while computing) so that the servers hold every step
  // done so far; called at a step boundary, `steps` done. SaveState: the
  // strategy's own state, after Quiesce. RestoreState: before Start(); the
  // strategy then starts from the restored model (the worker put its
  // parameters back) or the servers' restored ranges, instead of worker 0's
  // initial model. Unimplemented for strategies that cannot be
  // checkpointed yet (messages in flight between peers are not kept).
  virtual Status Quiesce(int64_t steps) {
    static_cast<void>(steps);
    return Status::Ok();
  }
  virtual Result<ExchangeState> SaveState() {
    return Status::Unimplemented("this exchange strategy keeps no checkpoint");
  }
  virtual Status RestoreState(const ExchangeState& state) {
    static_cast<void>(state);
    return Status::Unimplemented("this exchange strategy keeps no checkpoint");
  }
  // The version of the model the last step computed on, for metrics.
  virtual int64_t version() const { return 0; }
  // Strategies that overlap communication with the backward pass take each
  // parameter's gradient as it is produced (bucket_reducer.h); the worker
  // loop then routes the backward pass's gradients here. Null otherwise.
  // Valid after Start().
  virtual GradientSink* gradient_sink() { return nullptr; }
};

// The strategy of env.options->mode's family.
Result<std::unique_ptr<Exchange>> MakeExchange(const ExchangeEnv& env);

// The strategies themselves (exchange_*.cc), for tests that drive one alone.
std::unique_ptr<Exchange> MakePushPullExchange(const ExchangeEnv& env);
std::unique_ptr<Exchange> MakeElasticExchange(const ExchangeEnv& env);
std::unique_ptr<Exchange> MakeCollectiveExchange(const ExchangeEnv& env);
std::unique_ptr<Exchange> MakeNeighbourExchange(const ExchangeEnv& env);
std::unique_ptr<Exchange> MakeGossipExchange(const ExchangeEnv& env);
std::unique_ptr<Exchange> MakeTreeExchange(const ExchangeEnv& env);

// Worker `index`'s parent in a tree of `fanout` children per node (-1 for
// the root, worker 0) and its children among `n` workers.
int TreeParent(int index, int fanout);
std::vector<int> TreeChildren(int index, int fanout, int n);

}  // namespace strata

// Parameter-server push/pull (sync, async, ssp, k-of-n, pull interval,
// cluster.overlap) and elastic averaging with the servers (easgd).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "exchange/exchange.h"
#include "ps/client.h"
#include "run/plan.h"
#include "transport/rpc.h"

namespace strata {
namespace {

// cluster.compression's int8 residuals in a checkpoint (ExchangeState).
void SaveResiduals(const PsClient& client, ExchangeState& state) {
  const std::vector<std::vector<float>> r = client.Residuals();
  for (size_t i = 0; i < r.size(); ++i)
    state.buffers["residual/" + std::to_string(i)] = r[i];
}

Status RestoreResiduals(PsClient& client, const ExchangeState& state) {
  std::vector<std::vector<float>> r;
  for (size_t i = 0;; ++i) {
    auto it = state.buffers.find("residual/" + std::to_string(i));
    if (it == state.buffers.end()) break;
    r.push_back(it->second);
  }
  if (r.empty()) return Status::Ok();  // none kept (no int8 when saved)
  return client.RestoreResiduals(r).WithContext(
      "restoring the compression residuals");
}

class PushPullExchange final : public Exchange {
 public:
  explicit PushPullExchange(const ExchangeEnv& env)
      : env_(env),
        o_(*env.options),
        m_(*env.metrics),
        client_(*env.rpc, *env.layout, o_.roles.Ids(Role::kServer),
                o_.leader_first, std::max(0, LeadRange(o_, *env.layout))),
        sync_(o_.mode == RunMode::kSync),
        async_(o_.mode == RunMode::kAsync),
        pulled_(static_cast<size_t>(env.layout->num_ranges()), 0),
        step_(static_cast<size_t>(env.layout->num_ranges()), 0) {
    client_.SetCompression(o_.compression, o_.compress_pulls);
    if (o_.pipeline_floats > 0 && env.layout->num_ranges() > 1) {
      // Layer-wise pipelining: each range is pushed from the reducer's
      // thread as soon as the backward pass has filled it.
      std::vector<int64_t> bounds;
      for (const KeyRange& r : env.layout->ranges()) bounds.push_back(r.begin);
      bounds.push_back(env.layout->total());
      reducer_ = std::make_unique<BucketReducer>(
          std::move(bounds),
          [this](float* data, size_t count) {
            // An idle in-process server applies the range on this thread,
            // on the other core, as the server's own thread would have
            // (without waking it). The next range waits for it, as it
            // would have waited in the server's queue.
            const InlineSendScope inline_sends;
            const int64_t offset = data - reducer_->data();
            if (env_.grads_ready)
              env_.grads_ready(offset, static_cast<int64_t>(count));
            return client_.PushRange(*step_push_, env_.layout->RangeOf(offset),
                                     reducer_->data(), o_.request_timeout);
          },
          // In place: the ranges go straight from the model's gradient
          // buffer, which autograd has accumulated them into.
          env.model.grads, env.model.owner);
      reducer_->set_off_switch("cluster.pipeline = false");
      // The ranges left when the backward pass ends go from this thread.
      reducer_->set_caller_finishes(true);
      // Each range is its own message: in the order the backward pass
      // fills them (a sliced first layer reports its first slice first).
      reducer_->set_fill_order(true);
      // The backward pass's thread sends each range itself as it fills,
      // with no hand-off to the reducer's thread (docs/design/pipelining.md):
      // over a network transport a push only hands its bytes to the transport's
      // own I/O thread; in process it may run the server's update inline,
      // which for a range costs less than waking the reducer's thread did
      // (LeNet 1 + 1 in process: 0.97-0.99x local against 0.92-0.93x).
      // These keep the reducer's thread: a GPU worker's send first waits
      // for the range's copy to the host; sync k-of-n's sends wait for the
      // lead range's ack; compression works on the bytes first.
      if (!env.grads_ready && !o_.leader_first &&
          o_.compression == Compression::kNone)
        reducer_->set_send_on_fill(true);
      // Layer by layer across steps: the next forward pass waits in
      // AwaitParams() for the acks of the ranges it reads (their parameters
      // come with them), not for every ack at the end of this step. Not
      // leader-first (sync k-of-n: which step a gradient joins is known
      // only from the lead's ack) nor with cluster.overlap.
      defer_acks_ = env.forward_awaits && (sync_ || async_) &&
                    !o_.leader_first && !o_.overlap;
    }
    if (o_.overlap) {
      side_grads_ = std::make_shared<std::vector<float>>(
          static_cast<size_t>(env.model.size));
      side_params_.resize(static_cast<size_t>(env.model.size));
    }
  }

  ~PushPullExchange() override {
    // Nothing may write into the model once the strategy is gone; the
    // reducer's thread stops before the push it sends into.
    reducer_.reset();
    step_push_.reset();
    acks_.reset();
    inflight_.reset();
    pending_.reset();
  }

  Result<ExchangeState> SaveState() override {
    ExchangeState state;
    SaveResiduals(client_, state);
    return state;
  }
  Status RestoreState(const ExchangeState& state) override {
    resumed_ = true;
    return RestoreResiduals(client_, state);
  }
  Status Quiesce(int64_t steps) override {
    RETURN_IF_ERROR(CompleteAcks());
    return FinishInflight(steps);
  }

  Status Start() override {
    // Resumed: the servers restored their ranges from the checkpoint.
    if (env_.index != 0 || resumed_) return Status::Ok();
    // Worker 0 owns the initial model: every worker then pulls the same one.
    auto init = client_.PushInitial(env_.model.params, env_.model.owner)
                    ->Wait(o_.request_timeout);
    if (!init.ok())
      return init.status().WithContext("pushing the initial model");
    return Status::Ok();
  }

  Status BeforeStep(int64_t it) override {
    // This thread only waits for what it sends here: an idle in-process
    // server may handle it right on this thread (cluster.inline_server).
    const InlineSendScope inline_sends;
    if (o_.staleness >= 0)
      RETURN_IF_ERROR(env_.member->ClockWait(it, o_.request_timeout));
    // The first step after a resume or a checkpoint round pulls, whatever
    // cluster.pull_interval says: the model here is not the servers'.
    if (resumed_ || (it % o_.pull_interval == 0 && !pulled_with_push_)) {
      if (!resumed_ && env_.forward_awaits) {
        // Layer by layer: the forward pass waits in AwaitParams() for the
        // ranges it is about to read, in key order, while later ranges are
        // still arriving; the step's push begins once every range is in.
        pending_ = client_.Pull(env_.model.params,
                                sync_ ? step_ : std::vector<int64_t>{});
        pending_it_ = it;
        pending_layered_ = false;
        return Status::Ok();
      }
      RETURN_IF_ERROR(Pull(it));
    }
    if (acks_) {
      // The previous step's acks are still arriving: the forward pass
      // waits for them range by range (AwaitParams), and this step's push
      // begins once all are in, before the backward pass.
      acks_step_ = it;
      acks_layered_ = false;
      return Status::Ok();
    }
    return BeginStep(it);
  }

  Status AwaitParams(int64_t end) override {
    if (acks_) return AwaitAcks(end);
    if (!pending_ || end == 0) return Status::Ok();
    const size_t all = pending_->num_ranges();
    const size_t ranges = RangesThrough(end);
    // Each wait may take the request timeout: the forward pass's compute
    // between two layers does not count against the pull.
    if (ranges < all) {
      Status in = pending_->WaitFor(ranges, o_.request_timeout);
      if (in.ok()) {
        if (!pending_layered_) ++m_.layered_pulls;
        pending_layered_ = true;
        return Status::Ok();
      }
      pending_.reset();  // nothing lands in the model after a failure
      return BookPull(std::move(in), pending_it_);
    }
    Result<PullHandle::Pulled> p = pending_->Wait(o_.request_timeout);
    pending_.reset();  // done or failed: nothing lands in the model now
    RETURN_IF_ERROR(BookPull(std::move(p), pending_it_));
    return BeginStep(pending_it_);
  }

  GradientSink* gradient_sink() override { return reducer_.get(); }

  Status AfterStep(int64_t it) override {
    // As in BeforeStep(), but not cluster.overlap's push, which travels
    // while the next step computes.
    const InlineSendScope inline_sends(!o_.overlap);
    if (reducer_) return FinishPipelinedStep(it);
    // Sync and async, next iteration pulls: push and pull in one round trip
    // (async: the parameters just after this gradient, as a pull right after
    // the push would return; sync: those of the step the push closes, sent
    // when it closes, as the next step's pull would ask for).
    pulled_with_push_ = (sync_ || async_) && (it + 1) % o_.pull_interval == 0;
    const ModelBuffers& model = env_.model;
    if (o_.overlap) {
      // The previous iteration's push (and pull) travelled while this one
      // computed: finish it, take its parameters, and send this gradient
      // from the side buffer while the next iteration computes.
      const std::vector<int64_t> base = pulled_;  // what this step computed on
      RETURN_IF_ERROR(FinishInflight(it));
      std::memcpy(side_grads_->data(), model.grads,
                  sizeof(float) * side_grads_->size());
      inflight_ = pulled_with_push_
                      ? client_.PushPull(side_grads_->data(), base,
                                         side_params_.data(), side_grads_)
                      : client_.Push(side_grads_->data(), base, side_grads_);
      inflight_pulls_ = pulled_with_push_;
      return Status::Ok();
    }
    // Zero copy: the gradient buffer is not touched again until the push is
    // acknowledged; `owner` keeps it alive for the transport.
    const std::vector<int64_t>& base = sync_ ? step_ : pulled_;
    auto handle =
        pulled_with_push_
            ? client_.PushPull(model.grads, base, model.params, model.owner)
            : client_.Push(model.grads, base, model.owner);
    return CompletePush(*handle, it);
  }

  Status Finish(int64_t steps) override { return Depart(steps); }

  Status Depart(int64_t steps) override {
    // A run that ended between BeforeStep() and the forward pass (the data
    // ran out, or a stop): nothing reads a parameter-server worker's model
    // after its loop, so the pull is given up on, and nothing lands in the
    // model after this.
    pending_.reset();
    RETURN_IF_ERROR(CompleteAcks());
    RETURN_IF_ERROR(FinishInflight(steps));
    if (left_) return Status::Ok();
    auto left = client_.Leave()->Wait(o_.request_timeout);
    if (!left.ok()) {
      return left.status().WithContext(
          fmt::format("worker {} leaving", env_.index));
    }
    left_ = true;
    return Status::Ok();
  }

  Status PauseForRound(int64_t steps) override {
    if (!o_.leader_first || left_) return Status::Ok();
    RETURN_IF_ERROR(Depart(steps));
    paused_ = true;
    return Status::Ok();
  }

  Status ResumeAfterRound() override {
    if (!paused_) return Status::Ok();
    auto back = client_.Rejoin()->Wait(o_.request_timeout);
    if (!back.ok()) {
      return back.status().WithContext(fmt::format(
          "worker {} rejoining after a checkpoint round", env_.index));
    }
    paused_ = false;
    left_ = false;
    // Steps went on without this worker: its next step computes on the
    // newest parameters and joins the step after them, as after a resume.
    pulled_with_push_ = false;
    resumed_ = true;
    return Status::Ok();
  }

  int64_t version() const override { return computed_on_; }

 private:
  // The pull before step `it` (sync: at least the step this worker is in).
  Status Pull(int64_t it) {
    RETURN_IF_ERROR(PullAtLeast(sync_ ? step_ : std::vector<int64_t>{}, it));
    if (resumed_ && sync_) {
      // The step is the one the servers are at. Ranges may be a version
      // apart (other workers' pushes to the followers still on the way):
      // pull again at the newest, so the gradient is of one version.
      const int64_t newest = *std::max_element(pulled_.begin(), pulled_.end());
      if (*std::min_element(pulled_.begin(), pulled_.end()) < newest) {
        LogDebug("worker {}: ranges a version apart after a pause; pulling {}",
                 env_.index, newest);
        RETURN_IF_ERROR(
            PullAtLeast(std::vector<int64_t>(pulled_.size(), newest), it));
      }
      step_ = pulled_;
    }
    resumed_ = false;
    return Status::Ok();
  }

  // Pulls every range at `min_versions` or newer (empty: any) into the
  // model.
  Status PullAtLeast(const std::vector<int64_t>& min_versions, int64_t it) {
    return BookPull(
        client_.Pull(env_.model.params, min_versions)->Wait(o_.request_timeout),
        it);
  }

  // Books the pull before step `it` (or names it, failed).
  Status BookPull(Result<PullHandle::Pulled> p, int64_t it) {
    if (!p.ok()) {
      return p.status().WithContext(
          fmt::format("worker {} pull at iteration {}", env_.index, it));
    }
    pulled_ = p->versions;
    m_.bytes_pulled += p->bytes;
    ++m_.pulls;
    return Status::Ok();
  }

  // Books a finished push (and the pull that came with it).
  void Account(const PushResult& pushed, bool pulls) {
    if (pulls) {
      pulled_ = pushed.versions;
      m_.bytes_pulled += pushed.pulled_bytes;
    }
    m_.bytes_pushed += pushed.bytes;
    m_.dropped_gradients += pushed.dropped_ranges > 0 ? 1 : 0;
    m_.NoteStaleness(pushed.staleness);
  }

  // Step `it` computes on pulled_ from here. With layer-wise pipelining
  // (docs/design/pipelining.md), before it computes: a push whose ranges the
  // reducer sends as the backward pass fills them. When the next step pulls,
  // each range is a push-pull (sync: its parameters come back when its step
  // closes, which is the version the pull would ask for), so the parameters of
  // the late layers are back while the backward pass is still on the early
  // ones. A range's parameters are written (received in place) only after every
  // gradient of that range is in, when the backward pass no longer reads them.
  Status BeginStep(int64_t it) {
    computed_on_ = pulled_[0];
    if (!reducer_) return Status::Ok();
    // Not in ssp: its pull comes after the clock wait, so that it brings
    // the updates of the workers it waited for.
    pulled_with_push_ = (sync_ || async_) && (it + 1) % o_.pull_interval == 0;
    step_push_ = client_.BeginPush(
        sync_ ? step_ : pulled_,
        pulled_with_push_ ? env_.model.params : nullptr, reducer_->owner());
    reducer_->BeginStep();
    return Status::Ok();
  }

  Status FinishPipelinedStep(int64_t it) {
    Status sent = reducer_->FinishStep(o_.request_timeout);
    if (!sent.ok()) {
      // Nothing may land in the model after a failed step (a run stopping
      // cleanly goes on to its final checkpoint): the push goes, revoking
      // its receives in place, once the reducer's thread let go of it.
      if (reducer_->idle()) step_push_.reset();
      return sent.WithContext(
          fmt::format("worker {} push at iteration {}", env_.index, it));
    }
    if (defer_acks_ && pulled_with_push_) {
      // Every range is sent; the next forward pass takes their acks as it
      // reaches each range (AwaitParams). Nothing writes the gradient
      // buffer before they are all in: the worker zeroes it for the next
      // backward pass after AwaitParams(-1).
      acks_ = std::move(step_push_);
      acks_it_ = it;
      acks_step_ = -1;
      return Status::Ok();
    }
    Status done = CompletePush(*step_push_, it);
    step_push_.reset();
    return done;
  }

  // The forward pass of step acks_step_ reaches model.params [0, end)
  // (end < 0: all of them): waits for the acks of those ranges of step
  // acks_it_'s push; once all are in, books the push and begins the step.
  Status AwaitAcks(int64_t end) {
    if (end == 0) return Status::Ok();
    const size_t all = static_cast<size_t>(env_.layout->num_ranges());
    const size_t ranges = RangesThrough(end);
    if (ranges < all) {
      Status in = acks_->WaitFor(ranges, o_.request_timeout);
      if (!in.ok()) {
        acks_.reset();  // nothing lands in the model after a failure
        return in.WithContext(fmt::format("worker {} push at iteration {}",
                                          env_.index, acks_it_));
      }
      if (!acks_layered_) ++m_.layered_acks;
      acks_layered_ = true;
      return Status::Ok();
    }
    const int64_t step = acks_step_;
    RETURN_IF_ERROR(CompleteAcks());
    return step >= 0 ? BeginStep(step) : Status::Ok();
  }

  // How many ranges, in key order, hold model.params [0, end) (end < 0:
  // all of them).
  size_t RangesThrough(int64_t end) const {
    const size_t all = static_cast<size_t>(env_.layout->num_ranges());
    if (end < 0 || end >= env_.model.size) return all;
    return static_cast<size_t>(env_.layout->RangeOf(end - 1)) + 1;
  }

  // Waits for the acks of a push whose completion was left to the next
  // forward pass (defer_acks_), if any, and books it.
  Status CompleteAcks() {
    if (!acks_) return Status::Ok();
    Status done = CompletePush(*acks_, acks_it_);
    acks_.reset();
    return done;
  }

  // Waits for step `it`'s push (and the pull that came with it) and books it.
  Status CompletePush(PushHandle& handle, int64_t it) {
    auto pushed = handle.Wait(o_.request_timeout);
    if (!pushed.ok()) {
      return pushed.status().WithContext(
          fmt::format("worker {} push at iteration {}", env_.index, it));
    }
    if (sync_) step_ = pushed->versions;
    // Sync k-of-n, range by range: a gradient the lead range dropped as late
    // went nowhere and brought no parameters; the next step pulls them.
    if (pushed->dropped_ranges > 0) pulled_with_push_ = false;
    Account(*pushed, pulled_with_push_);
    return Status::Ok();
  }

  Status FinishInflight(int64_t it) {
    if (!inflight_) return Status::Ok();
    auto pushed = inflight_->Wait(o_.request_timeout);
    inflight_.reset();
    if (!pushed.ok()) {
      return pushed.status().WithContext(
          fmt::format("worker {} push of iteration {}", env_.index, it - 1));
    }
    if (inflight_pulls_) {
      MutexLock lock(env_.params_mu);
      std::memcpy(env_.model.params, side_params_.data(),
                  sizeof(float) * side_params_.size());
    }
    Account(*pushed, inflight_pulls_);
    return Status::Ok();
  }

  const ExchangeEnv env_;
  const ClusterRunOptions& o_;
  WorkerMetrics& m_;
  PsClient client_;
  const bool sync_;
  const bool async_;
  // RestoreState (no initial push) or ResumeAfterRound: the next step
  // pulls, and in sync takes its step from the pull.
  bool resumed_ = false;
  bool left_ = false;        // Depart() told the servers
  bool paused_ = false;      // left for a checkpoint round (PauseForRound)
  int64_t computed_on_ = 0;  // the version (range 0) this step computes on
  bool pulled_with_push_ = false;  // the last push brought the parameters
  std::vector<int64_t> pulled_;    // versions of the local copy
  std::vector<int64_t> step_;      // sync: the step this worker is in
  // env.forward_awaits: the pull of step pending_it_, still arriving while
  // the forward pass runs (AwaitParams), and whether the forward pass went
  // on with part of it (counted once in layered_pulls).
  std::unique_ptr<PullHandle> pending_;
  int64_t pending_it_ = 0;
  bool pending_layered_ = false;
  // cluster.overlap: the push in flight, the buffer it sends from, and the
  // buffer its parameters (if it pulls) arrive in.
  std::unique_ptr<PushHandle> inflight_;
  bool inflight_pulls_ = false;
  std::shared_ptr<std::vector<float>> side_grads_;
  std::vector<float> side_params_;
  // Layer-wise pipelining: the gradient's buckets (one per range) and the
  // push of the step in progress.
  std::unique_ptr<PushHandle> step_push_;
  std::unique_ptr<BucketReducer> reducer_;
  // env.forward_awaits with pipelining (sync, async): the push of step
  // acks_it_, every range sent, whose acks the forward pass of step
  // acks_step_ (-1 before BeforeStep) waits for range by range, and
  // whether it went on with part of them (counted once in layered_acks).
  bool defer_acks_ = false;
  std::unique_ptr<PushHandle> acks_;
  int64_t acks_it_ = 0;
  int64_t acks_step_ = -1;
  bool acks_layered_ = false;
};

// EASGD (paper 002, Zhang et al.): each worker trains alone with its own
// optimizer; every tau steps it pulls the centre w~ from the servers, sends
// the elastic difference d = alpha (w_i - w~) and moves itself by -d. The
// servers (update rule "elastic", ServerOptions) add every d to the centre
// as it arrives, so the centre moves by exactly the sum of the differences
// it received.
class ElasticExchange final : public Exchange {
 public:
  explicit ElasticExchange(const ExchangeEnv& env)
      : env_(env),
        o_(*env.options),
        m_(*env.metrics),
        client_(*env.rpc, *env.layout, o_.roles.Ids(Role::kServer)),
        optimizer_(MakeOptimizer(env.optimizer, env.model.size)),
        centre_(static_cast<size_t>(env.model.size)),
        diff_(std::make_shared<std::vector<float>>(
            static_cast<size_t>(env.model.size))) {
    client_.SetCompression(o_.compression, o_.compress_pulls);
  }

  Result<ExchangeState> SaveState() override {
    ExchangeState state = ExchangeState::Of(*optimizer_);
    SaveResiduals(client_, state);
    return state;
  }
  Status RestoreState(const ExchangeState& state) override {
    if (state.has_optimizer)
      RETURN_IF_ERROR(optimizer_->RestoreState(state.optimizer));
    resumed_ = true;
    return RestoreResiduals(client_, state);
  }

  Status Start() override {
    if (resumed_) {
      // The centre is on the servers, each worker's model its own.
      return env_.member->Barrier(1, o_.request_timeout);
    }
    if (env_.index == 0) {
      auto init = client_.PushInitial(env_.model.params, env_.model.owner)
                      ->Wait(o_.request_timeout);
      if (!init.ok())
        return init.status().WithContext("pushing the initial centre");
    }
    RETURN_IF_ERROR(env_.member->Barrier(1, o_.request_timeout));
    // Every worker starts from the centre.
    auto p = client_.Pull(env_.model.params, {})->Wait(o_.request_timeout);
    if (!p.ok()) return p.status().WithContext("pulling the initial centre");
    return Status::Ok();
  }

  Status BeforeStep(int64_t) override { return Status::Ok(); }

  Status AfterStep(int64_t it) override {
    {
      MutexLock lock(env_.params_mu);
      optimizer_->Step(env_.model.params, env_.model.grads,
                       env_.schedule.Rate(it));
    }
    if ((it + 1) % o_.average_every != 0) return Status::Ok();
    auto p = client_.Pull(centre_.data(), {})->Wait(o_.request_timeout);
    if (!p.ok()) {
      return p.status().WithContext(fmt::format(
          "worker {} pulling the centre at step {}", env_.index, it));
    }
    m_.bytes_pulled += p->bytes;
    version_ = p->versions.empty() ? 0 : p->versions[0];
    const float alpha = static_cast<float>(o_.elastic_alpha);
    {
      MutexLock lock(env_.params_mu);
      for (size_t i = 0; i < centre_.size(); ++i) {
        const float d = alpha * (env_.model.params[i] - centre_[i]);
        (*diff_)[i] = d;
        env_.model.params[i] -= d;
      }
    }
    auto pushed = client_.Push(diff_->data(), p->versions, diff_)
                      ->Wait(o_.request_timeout);
    if (!pushed.ok()) {
      return pushed.status().WithContext(
          fmt::format("worker {} sending its elastic difference at step {}",
                      env_.index, it));
    }
    m_.bytes_pushed += pushed->bytes;
    ++m_.exchanges;
    return Status::Ok();
  }

  Status Finish(int64_t) override {
    auto left = client_.Leave()->Wait(o_.request_timeout);
    if (!left.ok())
      return left.status().WithContext(
          fmt::format("worker {} leaving", env_.index));
    return Status::Ok();
  }

  int64_t version() const override { return version_; }

 private:
  const ExchangeEnv env_;
  const ClusterRunOptions& o_;
  WorkerMetrics& m_;
  PsClient client_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<float> centre_;
  std::shared_ptr<std::vector<float>> diff_;
  bool resumed_ = false;
  int64_t version_ = 0;
};

}  // namespace

std::unique_ptr<Exchange> MakePushPullExchange(const ExchangeEnv& env) {
  return std::make_unique<PushPullExchange>(env);
}

std::unique_ptr<Exchange> MakeElasticExchange(const ExchangeEnv& env) {
  return std::make_unique<ElasticExchange>(env);
}

Result<std::unique_ptr<Exchange>> MakeExchange(const ExchangeEnv& env) {
  switch (FamilyOf(env.options->mode)) {
    case ExchangeFamily::kPushPull:
      return MakePushPullExchange(env);
    case ExchangeFamily::kElastic:
      return MakeElasticExchange(env);
    case ExchangeFamily::kCollective:
      return MakeCollectiveExchange(env);
    case ExchangeFamily::kNeighbour:
      return MakeNeighbourExchange(env);
    case ExchangeFamily::kGossip:
      return MakeGossipExchange(env);
    case ExchangeFamily::kTree:
      return MakeTreeExchange(env);
    case ExchangeFamily::kNone:
      break;
  }
  return Status::InvalidArgument("cluster.mode '{}' has no cluster exchange",
                                 RunModeName(env.options->mode));
}

}  // namespace strata

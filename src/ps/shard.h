#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "ps/key_range.h"
#include "ps/optimizer.h"
#include "ps/schedule.h"

namespace strata {

// How a server applies the gradients that workers push
// (docs/design/architecture.md, Scheduling modes). ssp is kAsync here: its
// bound on clocks is enforced by the coordinator, not by the servers.
struct UpdatePolicy {
  enum class Mode { kSync, kAsync };
  // The update rule: what a push does to the range.
  //   kGradientStep: the optimizer steps with the gradient (sync: with the
  //                  mean, or with sum_gradients the sum, of a step's k);
  //   kElastic:      the push is an elastic difference d (EASGD): the range
  //                  (the centre variable) becomes w + d, no optimizer.
  enum class Rule { kGradientStep, kElastic };
  Mode mode = Mode::kAsync;
  Rule rule = Rule::kGradientStep;
  bool sum_gradients = false;  // sync: apply the sum of a step's gradients
  int num_workers = 1;         // n
  int updates_per_step = 1;    // sync: k of n gradients close a step (1..n)
  bool defer_late = false;     // sync k-of-n: late gradients join the next step
                               // instead of being dropped
  bool inverse_staleness =
      false;                // divide a gradient's rate by max(1, staleness)
  double rate_scale = 1.0;  // multiplies the scheduled rate (async: 1/n under
                            // hyper-parameter adaptation)
  // sync k-of-n with several ranges: a follower does not choose which
  // gradients make a step (arrival order differs between ranges, and
  // independent choices can leave workers waiting on each other across
  // ranges). One range leads (LeadRange in run/plan.h): it chooses, and
  // every gradient it did not drop reaches the followers tagged with its
  // step and that step's size (PushTagged).
  bool follower = false;
};

// Counters a shard keeps about the gradients it received.
struct ShardStats {
  int64_t applied_gradients = 0;  // gradients that went into an update
  int64_t updates = 0;            // optimizer steps (the version)
  int64_t dropped = 0;            // late gradients dropped (sync k-of-n)
  int64_t deferred = 0;           // late gradients carried into the next step
  std::map<int64_t, int64_t>
      staleness;  // staleness -> count of applied gradients
  // sync: gradients in an update -> number of such updates, counted while
  // at least k workers were active (each should use exactly k)
  std::map<int64_t, int64_t> gradients_per_update;
  // sync: updates closed after workers left, with fewer than k active
  int64_t tail_updates = 0;
};

// What a checkpoint keeps of a shard (docs/design/checkpoints.md): its
// parameters, its optimizer's state, its version and its counters. Gradients of
// a sync step still being accumulated are not kept: checkpoints are taken
// between steps, when there are none (n-of-n sync; k-of-n may defer late ones).
struct ShardState {
  std::vector<float> params;
  OptimizerState optimizer;
  int64_t version = 0;
  ShardStats stats;
};

// One key range of the model on a server: its parameters, its optimizer
// state, its version (the number of updates applied) and, in sync mode, the
// gradients accumulated for the step in progress. Pure logic, no I/O.
// Thread-safe: every method takes the shard's own lock, so servers (and
// ranges) never serialise on a shared lock.
class ParameterShard {
 public:
  ParameterShard(KeyRange range, std::vector<float> initial,
                 const OptimizerOptions& optimizer, const LrSchedule& schedule,
                 const UpdatePolicy& policy);
  ParameterShard(const ParameterShard&) = delete;
  ParameterShard& operator=(const ParameterShard&) = delete;

  struct PushOutcome {
    enum class State {
      kApplied,  // the update that used this gradient is done (version = after
                 // it)
      kPending,  // accumulated; the step closes when k gradients are in
      kDropped,  // late (its step already closed) and late gradients are
                 // dropped
    };
    State state;
    int64_t version;        // the shard's version after this push
    int64_t staleness;      // version at arrival minus base_version
    int64_t step_size = 0;  // kApplied in sync: gradients in the update
  };

  // Takes one gradient for this range (range().size() floats) computed on
  // parameters of version `base_version`. Async: applied at once. Sync: added
  // to the step in progress; the k-th gradient closes the step (mean of the k,
  // one optimizer step). A gradient whose base version is older than the
  // current version is late: dropped or deferred per the policy.
  PushOutcome Push(const float* grad, int64_t base_version) {
    const FloatPiece whole{0, grad, range_.size()};
    return Push(&whole, 1, base_version);
  }
  // The same, for a gradient in pieces that cover the range once, in order
  // (e.g. the frames it arrived in; see FloatPiece).
  PushOutcome Push(const FloatPiece* pieces, size_t num_pieces,
                   int64_t base_version) EXCLUDES(mu_);

  // Follower (sync): adds a gradient that the leader put in step `step` of
  // `size` gradients. Steps close in order, each when all its gradients are
  // in. kApplied once step `step` has closed (now or before); kPending
  // otherwise.
  PushOutcome PushTagged(const float* grad, int64_t step, int64_t size) {
    const FloatPiece whole{0, grad, range_.size()};
    return PushTagged(&whole, 1, step, size);
  }
  PushOutcome PushTagged(const FloatPiece* pieces, size_t num_pieces,
                         int64_t step, int64_t size) EXCLUDES(mu_);
  // The number of gradients in the most recent update (sync).
  int64_t last_step_size() const EXCLUDES(mu_);

  // Copies the parameters into `out` (range().size() floats) and returns
  // their version, if the version is at least `min_version`; else returns -1
  // and copies nothing.
  int64_t ReadIfAtLeast(int64_t min_version, float* out) const EXCLUDES(mu_);

  // The parameters as an immutable snapshot, if their version is at least
  // `min_version` (else null); *version gets the snapshot's version. No
  // copy: the snapshot is the shard's own buffer, and the next update that
  // finds it still held copies it first (copy on write), so a reply that is
  // consumed before the next update (one worker; or the transport done
  // sending) costs no copy at all, and pulls of one version share it.
  // Holders must not write it.
  std::shared_ptr<const std::vector<float>> SnapshotIfAtLeast(
      int64_t min_version, int64_t* version) const EXCLUDES(mu_);

  // A worker finished or was lost: sync steps from now on close with
  // min(k, workers still active) gradients, so the last steps of a run
  // never wait for gradients that will not come. Returns true if this closed
  // the step in progress.
  bool WorkerLeft() EXCLUDES(mu_);
  // A worker that left pushes again (a checkpoint round is over): sync
  // steps count it again, up to the n workers of the policy.
  void WorkerRejoined() EXCLUDES(mu_);

  // The state a checkpoint keeps.
  ShardState SaveState() const EXCLUDES(mu_);
  // Puts a saved state back (a shard of the same range and optimizer).
  // InvalidArgument naming what does not fit.
  Status RestoreState(const ShardState& state) EXCLUDES(mu_);

  // Replaces the parameters (e.g. the initial model from worker 0) without
  // changing the version. InvalidArgument on a size mismatch.
  Status Overwrite(const float* values, int64_t size) EXCLUDES(mu_);

  KeyRange range() const { return range_; }
  int64_t version() const EXCLUDES(mu_);
  ShardStats stats() const EXCLUDES(mu_);

 private:
  void ApplyLocked(const FloatPiece* pieces, size_t num_pieces,
                   int64_t staleness, int64_t num_grads) REQUIRES(mu_);
  // Sync: closes the step if enough gradients are in. Returns true if it did.
  bool MaybeCloseLocked() REQUIRES(mu_);
  // Sync: how many gradients close a step now.
  int64_t StepSizeLocked() const REQUIRES(mu_);
  // Sync: applies a step's mean gradient (of `count` gradients) and counts it.
  void CloseStepLocked(const FloatPiece* pieces, size_t num_pieces,
                       int64_t staleness, int64_t count) REQUIRES(mu_);

  const KeyRange range_;
  const LrSchedule schedule_;
  const UpdatePolicy policy_;
  mutable Mutex mu_;
  // Copy on write: pull replies are views of params_ itself (no copy);
  // an update that finds a reply still holding it first moves to a copy.
  std::shared_ptr<std::vector<float>> params_ GUARDED_BY(mu_);
  std::unique_ptr<Optimizer> optimizer_ GUARDED_BY(mu_);
  // Sync: the sum of this step's gradients (the first accum_count_ > 0 of
  // them; stale when it is 0).
  std::vector<float> accum_ GUARDED_BY(mu_);
  std::vector<float> scratch_ GUARDED_BY(mu_);  // sync: the mean
  int64_t accum_count_ GUARDED_BY(mu_) = 0;
  int64_t accum_max_staleness_ GUARDED_BY(mu_) = 0;
  int64_t version_ GUARDED_BY(mu_) = 0;
  int active_workers_ GUARDED_BY(mu_);
  int64_t last_step_size_ GUARDED_BY(mu_) = 0;
  // Follower: gradients received for steps not closed yet.
  struct TaggedStep {
    std::vector<float> sum;
    int64_t count = 0;
    int64_t size = 0;
  };
  std::map<int64_t, TaggedStep> tagged_ GUARDED_BY(mu_);
  ShardStats stats_ GUARDED_BY(mu_);
  // The parameters, writable: params_ itself when no reply holds it, else
  // a copy that becomes params_ (the holders keep the old version).
  float* WritableParamsLocked() REQUIRES(mu_);
  // Blocks params_ has lived in, reused once nobody holds them, so steady
  // copy-on-write does not fault in fresh pages.
  static constexpr size_t kParamBlocks = 4;
  std::vector<std::shared_ptr<std::vector<float>>> blocks_ GUARDED_BY(mu_);
};

}  // namespace strata
